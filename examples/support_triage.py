"""Support triage on a local decision model: answers, probabilities, lane and destination per message.

Runs offline. Confident answers are decided automatically; the middle band goes to an escalation
LLM (a scripted fake here: no real chat model can be had offline); the rest goes to a person
through LangGraph's interrupt(), answered here by a SCRIPTED REVIEWER so the demo needs no stdin.
Every decision lands in a SQLite trace store, exported at the end as training records.

    python examples/support_triage.py                # the shipped default model ("mini")
    python examples/support_triage.py --model fake-keywords   # the keyword-scripted fake model
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from langgraph.types import Command  # noqa: E402

from clef_agents.graph import (  # noqa: E402
    DEMO_MESSAGES,
    TraceStore,
    build_support_triage,
    demo_escalation_llm,
    load_decision_model,
)


def scripted_reviewer(payload: dict[str, Any]) -> dict[str, Any]:
    """A SCRIPTED REVIEWER (not a person): takes the LLM's answer when it gave a legal one,
    otherwise the model's most probable option."""
    answers = {}
    for qid, shown in payload["questions"].items():
        llm = [e for e in shown["escalations"] if e.get("to") == "llm" and "label" in e]
        answers[qid] = llm[-1]["label"] if llm else shown["model_label"]
    return {"answers": answers, "reviewer": "scripted-reviewer"}


def checkpointer(folder: Path) -> Any:
    """A real SQLite checkpointer when langgraph-checkpoint-sqlite is installed, else in memory."""
    try:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    return SqliteSaver(sqlite3.connect(folder / "checkpoints.sqlite", check_same_thread=False))


def shown(label: Any) -> str:
    if isinstance(label, bool):
        return "yes" if label else "no"
    return str(label)


def print_row(index: int, message: str, result: dict[str, Any], reviewed: bool) -> None:
    """One message's answers. ``p(answer)`` is the probability of the model answer beside it (what
    the lane acts on), as in ``clef-agents decide``: ``urgent no 0.54`` means p(no) = 0.54."""
    entry = result["decisions"]["triage"]
    print(f"\n{index}. {message[:96]}")
    print(f"   {'question':<11} {'model answer':<13} {'p(answer)':>9}  {'lane':<6} {'final':<10} {'decided by'}")
    for qid, route in entry["route"].items():
        final = entry["final"][qid]
        print(
            f"   {qid:<11} {shown(route['label']):<13} {route['probability']:>9.2f}  {route['lane']:<6} "
            f"{shown(final['label']):<10} {final['source']}"
        )
    note = "  (a scripted reviewer answered the interrupt)" if reviewed else ""
    print(f"   -> destination: {result['destination']}{note}")


def run(model_name: str, messages: list[str], traces_path: Path) -> int:
    started = time.perf_counter()
    try:
        model = load_decision_model(model_name)
    except Exception as exc:  # the shipped model may be missing from a partial install
        print(f"could not load decision model {model_name!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
        print("try: python examples/support_triage.py --model fake-keywords", file=sys.stderr)
        return 2
    print(f"decision model: {model.model} ({type(model).__name__}), loaded in {time.perf_counter() - started:.1f}s")
    print("escalation LLM: fake-scripted-escalation-llm (a scripted fake, not a real LLM)")
    traces = TraceStore(traces_path)
    with tempfile.TemporaryDirectory() as tmp:
        graph = build_support_triage(
            model, chat_model=demo_escalation_llm(), traces=traces, checkpointer=checkpointer(Path(tmp))
        )
        for index, message in enumerate(messages, start=1):
            config = {"configurable": {"thread_id": f"demo-{index}"}}
            result = graph.invoke({"messages": [("user", message)]}, config)
            reviewed = False
            while "__interrupt__" in result:
                reviewed = True
                result = graph.invoke(Command(resume=scripted_reviewer(result["__interrupt__"][0].value)), config)
            print_row(index, message, result, reviewed)
    records = traces.export_records()
    by_source = Counter(r["meta"]["source"] for r in records)
    print(f"\ntrace store: {traces.path} ({traces.count()} decisions); exportable records by source: {dict(by_source)}")
    print(f"export them with: clef-agents traces export {traces.path} --out records.jsonl")
    print(
        "then teach the gate its reviewers' answers: clef-agents teach --model mini --records records.jsonl --catch-all other --out runs/mini-taught"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default="mini",
        help="'mini' (default), a checkpoint folder, 'fake-keywords' (the keyword-scripted fake) or any other spec of clef_agents.load_model",
    )
    parser.add_argument("--traces", type=Path, default=None, help="SQLite trace file (default: a fresh temp file)")
    parser.add_argument("messages", nargs="*", help="support messages (default: five built-in ones)")
    args = parser.parse_args(argv)
    traces = args.traces or Path(tempfile.mkdtemp(prefix="clef-demo-")) / "traces.sqlite"
    return run(args.model, args.messages or list(DEMO_MESSAGES), traces)


if __name__ == "__main__":
    sys.exit(main())
