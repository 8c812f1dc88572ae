"""The gate on everyday tool calls in its run-time layout: check sets each written by a helper who saw
neither the gate's training data nor the other sets, each frozen before any model was run on it
(bench/gate/everyday_calls*.json; bench/gate/README.md says which version each still measures). Results go to
bench/gate/results/.

    HF_HUB_OFFLINE=1 python bench/gate/everyday.py --model mini --calls bench/gate/everyday_calls_4.json --out everyday_4.json
    HF_HUB_OFFLINE=1 python bench/gate/everyday.py --model runs/my_gate --hold-at 0.2 --calls bench/gate/everyday_calls_4.json --out everyday_4_mine.json

Each call is judged through ``ToolGate.judge`` as an agent would propose it: the user's message, any
earlier calls and their outputs, then the proposed call with its tool's description. Reported: the
share of risky calls stopped and of benign calls held under the shipped policy, ROC AUC, per domain,
and every call on the wrong side of ``hold_at``. Not one of issue 25's held-out sources: the calls were
written for this project, so they say what a user meets in the gate's own layout, nothing more.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from clef_agents.graph.tools import SHIPPED_HOLD_AT
from clef_agents.train.gate_calls import conversation, described_tool, load_calls
from clef_agents.train.gate_recipe import rates

HERE = Path(__file__).resolve().parent
CALLS = HERE / "everyday_calls.json"


def judge_call(
    gate: Any, user: str, name: str, args: dict[str, Any], description: str, history: Sequence[Mapping[str, str]] = ()
) -> Any:
    """The gate's verdict on one proposed call (its tool built with ``description`` and no metadata)."""
    call = {"name": name, "args": args, "id": "proposed"}
    return gate.judge(call, conversation(user, history, call), described_tool(name, description))


def summarise(rows: Sequence[Mapping[str, Any]], hold_at: float) -> dict[str, Any]:
    """Risky calls stopped, benign calls held, ROC AUC; overall and per domain."""

    def part(selected: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return rates([r["probability"] for r in selected], [r["risky"] for r in selected], hold_at, None)

    domains = sorted({r["domain"] for r in rows})
    return {"all": part(rows), "per_domain": {d: part([r for r in rows if r["domain"] == d]) for d in domains}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mini")
    parser.add_argument("--calls", type=Path, default=CALLS, help="the check set (a JSON file as everyday_calls.json)")
    parser.add_argument("--out", default="everyday.json", help="file under bench/gate/results to write")
    parser.add_argument(
        "--hold-at", type=float, default=SHIPPED_HOLD_AT, help="the policy's hold_at (default: the shipped one)"
    )
    args = parser.parse_args()
    import torch

    from clef_agents.graph.ready import load_decision_model
    from clef_agents.graph.tools import ToolGate

    torch.set_num_threads(1)
    calls = load_calls(args.calls)
    model = load_decision_model(args.model)
    gate = ToolGate(model, hold_at=args.hold_at)
    rows = []
    for case in calls:
        verdict = judge_call(
            gate, case["user"], case["tool"], case["args"], case["description"], case.get("history", ())
        )
        rows.append(
            {
                "id": case["id"],
                "risky": case["risky"],
                "domain": case["domain"],
                "tool": case["tool"],
                "probability": verdict.probability,
                "action": verdict.action,
            }
        )
        print(
            f"{case['id']} {'risky ' if case['risky'] else 'benign'} {case['tool'][:28]:28s} p={verdict.probability:.3f} {verdict.action}",
            flush=True,
        )
    wrong = [r["id"] for r in rows if (r["probability"] >= gate.hold_at) != r["risky"]]
    out = {
        "model": args.model,
        "hold_at": gate.hold_at,
        "calls": args.calls.name,
        **summarise(rows, gate.hold_at),
        "wrong_side": wrong,
        "rows": rows,
    }
    (HERE / "results" / args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["all"], indent=2))


if __name__ == "__main__":
    main()
