"""The tool gate's release steps: its teaching, blend and policy-choice records, and its lane policy.

``teach.jsonl`` holds the gate's teaching records (``clef_agents.train.gate_records``) and the calls of the
check sets taught since gate v7 (``TAUGHT_SETS``); ``policy.jsonl`` the records kept out of teaching, on which
the lane policy is chosen; ``blend.jsonl`` check sets 1–3 in the teaching layout, for ``--valid-records`` (the
blend is fitted on them and, with ``--no-refit``, nothing else is). Test splits and held-out sets are never read.
The check sets are the benchmark's hand-written calls (``bench/gate``), so their folder is an argument.

Once taught, the lane policy is the highest ``hold_at`` of a fixed grid (``CURVE``) at which the risky records
of every source whose risky records propose a tool call are stopped at least ``RECALL_FLOOR`` of the time, on
the policy records: ``policy.jsonl``'s records and the check sets ``POLICY_CHECK_SETS`` (rule R3: sets no part
of the model was fitted on). The shipped ``SHIPPED_HOLD_AT`` is that choice for ``mini``.

Example:
    $ clef-agents gate-records --check-sets bench/gate --out runs/gate_records
    $ python -m clef_agents.train.gate_recipe --check-sets bench/gate --out runs/gate_records
    $ clef-agents gate-policy --model runs/mini_gate --check-sets bench/gate --out bench/gate/results/policy.json
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BLEND_SETS = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json")
"""Check sets the gate's blend is fitted on (``--valid-records``)."""
TAUGHT_SETS = ("everyday_calls_5.json", "everyday_calls_6.json", "everyday_calls_7.json", "everyday_calls_8.json")
"""Check sets taught since v7: every version that was to be measured on them has been."""
KEPT_APART = (
    "everyday_calls.json",
    "everyday_calls_2.json",
    "everyday_calls_3.json",
    "everyday_calls_4.json",
    "everyday_calls_9.json",
    "everyday_calls_10.json",
    "everyday_calls_11.json",
    "everyday_calls_12.json",
)
"""The untaught check sets that existed when v7 was taught: no call of theirs is taught. A set written later (13, 14)
joins this list in the version that is measured on it (set 14 shares three calls with sets 6 and 7)."""
POLICY_CHECK_SETS = ("everyday_calls_4.json", "everyday_calls_11.json", "everyday_calls_12.json")
"""Check sets used as policy records (source ``everyday_checks``) for the shipped version: under rule R3, sets no part
of the model was fitted on and that no later measurement needs (v7: sets 4, 11 and 12)."""
RECALL_FLOOR = 0.95
"""Recall of risky calls each source that proposes calls must keep on the policy records (issue 25's target)."""
CURVE = (0.001, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
"""The hold_at grid; the policy also reports the trade-off per source at each point."""


def taught_check_calls(check_sets: str | Path) -> list[dict[str, Any]]:
    """The calls of ``TAUGHT_SETS`` in ``check_sets`` as gate records, less any whose tool and arguments also occur
    in a set of ``KEPT_APART`` (independent writers sometimes write the same common call, e.g. a force-push to main).

    Example:
        >>> taught_check_calls("bench/gate")[0]["labels"]  # doctest: +SKIP
        {'needs_approval': True}
    """
    from clef_agents.train.gate_calls import call_records, call_signature, load_calls

    folder = Path(check_sets)
    untaught = {call_signature(c) for name in KEPT_APART for c in load_calls(folder / name)}
    return [
        r
        for name in TAUGHT_SETS
        for r in call_records([c for c in load_calls(folder / name) if call_signature(c) not in untaught], source=name)
    ]


def gate_record_parts(check_sets: str | Path) -> dict[str, list[dict[str, Any]]]:
    """``{"teach": ..., "policy": ..., "blend": ...}``: every part ``write_gate_records`` writes."""
    from clef_agents.train.gate_calls import call_records, load_calls
    from clef_agents.train.gate_records import build_gate_records

    folder = Path(check_sets)
    parts = build_gate_records()
    parts["teach"] += taught_check_calls(folder)
    parts["blend"] = [
        r
        for name in BLEND_SETS
        for r in call_records(load_calls(folder / name), source=name, dataset="everyday_checks")
    ]
    return parts


def write_gate_records(out: str | Path, check_sets: str | Path) -> dict[str, Path]:
    """Write ``teach.jsonl``, ``policy.jsonl`` and ``blend.jsonl`` in ``out``; print each part's count per source and label.

    Example:
        >>> write_gate_records("runs/gate_records", "bench/gate")["teach"]  # doctest: +SKIP
        PosixPath('runs/gate_records/teach.jsonl')
    """
    from clef_agents.train.gate_records import write_jsonl

    written = {}
    for part, records in gate_record_parts(check_sets).items():
        written[part] = write_jsonl(records, Path(out) / f"{part}.jsonl")
        counts = collections.Counter((r["meta"]["dataset"], r["labels"]["needs_approval"]) for r in records)
        print(written[part], len(records), dict(sorted(counts.items())))
    return written


def gate_probabilities(model: Any, states: Sequence[str], chunk: int = 16) -> list[float]:
    """p(needs approval) for each state, asked through the model's public ``batch``."""
    from clef_agents.graph.tools import DEFAULT_GATE_QUESTION, QUESTION_ID, gate_probability

    questions = {QUESTION_ID: DEFAULT_GATE_QUESTION}
    out: list[float] = []
    for start in range(0, len(states), chunk):
        responses = model.batch([{"state": s, "questions": questions} for s in states[start : start + chunk]])
        out += [gate_probability(r) for r in responses]
    return out


def auc(ps: Sequence[float], risky: Sequence[bool]) -> float | None:
    """ROC AUC: the chance that a risky call scores above a benign one (ties count half); None with one class.

    Example:
        >>> auc([0.9, 0.5, 0.5, 0.1], [True, True, False, False])
        0.875
    """
    from clef_agents.train.metrics import auroc

    return auroc(ps, risky) if 0 < sum(risky) < len(risky) else None


def rates(ps: Sequence[float], risky: Sequence[bool], hold_at: float, block_at: float | None) -> dict[str, Any]:
    """Recall of risky calls (held or blocked: p >= hold_at), share of benign calls held or blocked, the shares
    refused outright (p >= block_at; never when it is None), and ROC AUC.

    Example:
        >>> r = rates([0.9, 0.2, 0.05], [True, True, False], hold_at=0.1, block_at=None)
        >>> r["recall"], r["benign_held"], r["risky_blocked"]
        (1.0, 0.0, 0.0)
    """
    r = [p for p, y in zip(ps, risky) if y]
    b = [p for p, y in zip(ps, risky) if not y]

    def share(values: list[float], at: float | None) -> float | None:
        return sum(at is not None and p >= at for p in values) / len(values) if values else None

    return {
        "auc": auc(ps, risky),
        "risky": len(r),
        "benign": len(b),
        "recall": share(r, hold_at),
        "benign_held": share(b, hold_at),
        "risky_blocked": share(r, block_at),
        "benign_blocked": share(b, block_at),
    }


def policy_records(check_sets: str | Path, names: Sequence[str] = POLICY_CHECK_SETS) -> list[dict[str, Any]]:
    """The policy records: the staged sets' records kept out of teaching, and the calls of the check sets ``names``
    (in ``check_sets``) as records of the source ``everyday_checks``."""
    from clef_agents.train.gate_calls import call_records, load_calls
    from clef_agents.train.gate_records import build_gate_records

    calls = [
        r
        for name in names
        for r in call_records(load_calls(Path(check_sets) / name), source=name, dataset="everyday_checks")
    ]
    return build_gate_records(calls=False)["policy"] + calls


def call_sources(records: Sequence[dict[str, Any]]) -> list[str]:
    """The sources whose risky records all propose a tool call (they set the recall floor)."""
    from clef_agents.graph.tools import QUESTION_ID

    sources = sorted({r["meta"]["dataset"] for r in records})
    return [
        s
        for s in sources
        if all(
            r["state"].startswith("Proposed tool call: ")
            for r in records
            if r["meta"]["dataset"] == s and r["labels"][QUESTION_ID]
        )
    ]


def policy_from(
    ps: Sequence[float], records: Sequence[dict[str, Any]], block_at: float | None = None
) -> dict[str, Any]:
    """The rule on answered policy records: the highest ``hold_at`` of ``CURVE`` at which every source of
    ``call_sources`` keeps ``RECALL_FLOOR`` (the lowest grid value when none does), with the rates it gives.

    Example:
        >>> records = [{"state": "Proposed tool call: x", "labels": {"needs_approval": y}, "meta": {"dataset": "d"}}
        ...            for y in (True, True, False)]
        >>> policy_from([0.35, 0.5, 0.25], records)["hold_at"]
        0.3
    """
    from clef_agents.graph.tools import QUESTION_ID

    by_source: dict[str, list[tuple[float, bool]]] = {}
    for p, r in zip(ps, records):
        by_source.setdefault(r["meta"]["dataset"], []).append((p, r["labels"][QUESTION_ID]))
    by_source = dict(sorted(by_source.items()))
    floors = call_sources(records)

    def at(t: float) -> dict[str, Any]:
        return {s: rates([p for p, _ in v], [y for _, y in v], t, block_at) for s, v in by_source.items()}

    hold_at = next(
        (t for t in sorted(CURVE, reverse=True) if all(at(t)[s]["recall"] >= RECALL_FLOOR for s in floors)), min(CURVE)
    )
    return {
        "rule": (
            f"highest hold_at in {list(CURVE)} with recall >= {RECALL_FLOOR} on the policy records of every source whose "
            f"risky records propose a tool call ({', '.join(floors)})"
        ),
        "hold_at": hold_at,
        "block_at": block_at,
        "records": len(records),
        "all": rates(ps, [r["labels"][QUESTION_ID] for r in records], hold_at, block_at),
        "per_source": at(hold_at),
        "curve": {str(t): at(t) for t in CURVE},
    }


def choose_policy(model: str, check_sets: str | Path, names: Sequence[str] = POLICY_CHECK_SETS) -> dict[str, Any]:
    """The lane policy of the gate of ``model`` (any spec of ``clef_agents.load_model``), chosen on the policy records.

    Example:
        >>> choose_policy("runs/mini_gate", "bench/gate")["hold_at"]  # doctest: +SKIP
        0.2
    """
    from clef_agents.graph.tools import SHIPPED_BLOCK_AT
    from clef_agents.loading import load_model

    records = policy_records(check_sets, names)
    decision_model = load_model(model)
    started = time.time()
    ps = gate_probabilities(decision_model, [r["state"] for r in records])
    chosen = policy_from(ps, records, SHIPPED_BLOCK_AT)
    return {
        "model": model,
        "check_sets": list(names),
        "rule": chosen.pop("rule"),
        "hold_at": chosen.pop("hold_at"),
        "block_at": chosen.pop("block_at"),
        "records": chosen.pop("records"),
        "seconds": round(time.time() - started, 1),
        **chosen,
    }


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command's options (shared by ``clef-agents gate-records`` and ``python -m``)."""
    parser.add_argument(
        "--out", type=Path, required=True, help="folder to write teach.jsonl, policy.jsonl and blend.jsonl in"
    )
    parser.add_argument(
        "--check-sets",
        type=Path,
        required=True,
        help="folder holding the gate's check sets (everyday_calls*.json; the repository's bench/gate)",
    )
    return parser


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``gate-records`` and ``gate-policy`` subcommands."""
    parser = subparsers.add_parser(
        "gate-records", help="write the tool gate's teaching, blend and policy-choice records"
    )
    add_arguments(parser).set_defaults(func=_run)
    policy = subparsers.add_parser(
        "gate-policy", help="choose a taught gate's lane policy (hold_at) on its policy records"
    )
    policy.add_argument(
        "--model", default="mini", help="the taught model: any spec of clef_agents.load_model (default mini)"
    )
    policy.add_argument(
        "--check-sets",
        type=Path,
        required=True,
        help="folder holding the gate's check sets (everyday_calls*.json; the repository's bench/gate)",
    )
    policy.add_argument("--names", nargs="+", default=list(POLICY_CHECK_SETS), help="check sets used as policy records")
    policy.add_argument("--out", type=Path, required=True, help="the policy's JSON file to write")
    policy.add_argument(
        "--threads", type=int, default=None, help="CPU threads for torch (default: 1, or $CLEF_AGENTS_THREADS)"
    )
    policy.set_defaults(func=_run_policy)


def _run_policy(args: argparse.Namespace) -> int:
    from clef_agents.model.threads import command_threads

    command_threads(args.threads)
    result = choose_policy(args.model, args.check_sets, args.names)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("hold_at", "block_at", "records", "all")}, indent=2))
    return 0


def _run(args: argparse.Namespace) -> int:
    write_gate_records(args.out, args.check_sets)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m clef_agents.train.gate_recipe``: the same as ``clef-agents gate-records``."""
    parser = add_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
