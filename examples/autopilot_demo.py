"""The autopilot on the shipped model: a gate that starts by asking its teacher about everything and takes
over, intent by intent, only what it has been certified to answer.

A stream of voice-assistant requests (examples/data/snips_stream.jsonl, CC0) goes through a real LangGraph
graph: a ``DecisionGate`` on ``mini`` asks "What does the user want to do?" with an ``Autopilot``. Its
teacher is the LLM lane, played here by a SCRIPTED TEACHER (a fake chat model that answers with each request's
recorded intent: no real LLM can be had offline). Every teacher answer becomes a label; a background worker
re-fits the question's learner and certifies it (automatic answers agree with the teacher at 95 %, 90 %
confidence) before anything is answered alone. The teacher-call share falls along the stream; a plot is saved.

The demo streams far faster than a live graph is called, so at the end of each block of 150 requests it waits
until the learner has caught up with the labels of that block; otherwise how much it saves depends on how busy the
machine is (``--free-running`` shows that: the learner then races the stream, as it would under a burst).

    python examples/autopilot_demo.py                # 1,500 requests on "mini", under two minutes on 2 cores
    python examples/autopilot_demo.py --items 600 --model fake
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from langchain_core.decisions import Choice  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402

from clef_agents.autopilot import Autopilot  # noqa: E402
from clef_agents.graph import DecisionGate, DecisionState, FakeToolCallingChatModel, load_decision_model  # noqa: E402

STREAM = Path(__file__).parent / "data" / "snips_stream.jsonl"
INTENTS = (
    "AddToPlaylist",
    "BookRestaurant",
    "GetWeather",
    "PlayMusic",
    "RateBook",
    "SearchCreativeWork",
    "SearchScreeningEvent",
)
QUESTIONS = {"intent": Choice(instructions="What does the user want to do?", criteria={i: None for i in INTENTS})}
BLOCK = 150


class State(DecisionState, total=False):
    request: str


def scripted_teacher(intent_of: dict[str, str]) -> FakeToolCallingChatModel:
    """A SCRIPTED TEACHER standing in for an LLM: it answers with the request's recorded intent."""

    def respond(messages: list[Any], tool: Any) -> dict[str, str]:
        text = messages[-1].content.split("<state>\n", 1)[1].split("\n</state>", 1)[0]
        return {"intent": intent_of[text]}

    return FakeToolCallingChatModel(respond=respond, model_name="scripted-teacher")


def build(model: Any, pilot: Autopilot, teacher: FakeToolCallingChatModel) -> Any:
    gate = DecisionGate(model, QUESTIONS, name="assistant", input="request", chat_model=teacher, autopilot=pilot)
    builder = StateGraph(State)
    gate.attach(builder, after=START, then="__end__")
    return builder.compile()


def plot(shares: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot([BLOCK * (i + 1) for i in range(len(shares))], shares, marker="o")
    ax.set_xlabel("requests")
    ax.set_ylabel(f"teacher-call share (per {BLOCK})")
    ax.set_ylim(0, 1.05)
    ax.set_title("The gate asks its teacher less as it earns each intent")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mini", help="decision model spec (default: the shipped mini)")
    parser.add_argument("--items", type=int, default=1500, help="how many requests to stream (at most 1,500)")
    parser.add_argument(
        "--free-running",
        action="store_true",
        help="do not wait for the learner at the end of each block (savings then depend on the machine's speed)",
    )
    parser.add_argument("--plot", type=Path, default=Path("runs/autopilot_demo.png"), help="where to save the plot")
    args = parser.parse_args()
    rows = [json.loads(line) for line in STREAM.read_text().splitlines()][: args.items]
    intent_of = {row["text"]: row["label"] for row in rows}
    folder = Path(tempfile.mkdtemp(prefix="clef-autopilot-demo-"))
    pilot = Autopilot(folder / "autopilot.sqlite")
    teacher = scripted_teacher(intent_of)
    graph = build(load_decision_model(args.model), pilot, teacher)
    print(
        f"{len(rows)} requests; question: {QUESTIONS['intent'].instructions!r}; teacher: a scripted LLM; "
        f"target: automatic answers agree with the teacher at {pilot.config.target:.0%} "
        f"({pilot.config.confidence:.0%} confidence)\n"
    )
    print(f"{'requests':>9}  {'teacher calls':>13}  {'automatic':>9}  {'automatic right':>15}  serving version")
    shares, started = [], time.perf_counter()
    calls = auto = auto_right = 0
    for i, row in enumerate(rows, 1):
        final = graph.invoke({"request": row["text"]})["decisions"]["assistant"]["final"]["intent"]
        calls += final["source"] != "auto"
        if final["source"] == "auto":
            auto += 1
            auto_right += final["label"] == row["label"]
        if i % BLOCK == 0 or i == len(rows):
            size = (i - 1) % BLOCK + 1
            shares.append(calls / size)
            serving = pilot.serving("assistant", "intent", QUESTIONS["intent"])
            version = f"v{serving.version} ({'certified' if serving.active else 'not certified'})"
            right = f"{auto_right}/{auto}" if auto else "—"
            print(f"{i:>9}  {calls / size:>13.0%}  {auto / size:>9.0%}  {right:>15}  {version}")
            calls = auto = auto_right = 0
            if not args.free_running:
                pilot.wait_idle()
    pilot.wait_idle()
    (row,) = pilot.status()
    print(
        f"\n{time.perf_counter() - started:.0f} s. Teacher calls saved: {row['teacher_calls_saved']} of {row['items']} "
        f"({row['saved_share']:.0%}); labels by source {row['labels']}; {row['versions']} versions fitted; "
        f"state: {row['state']}, threshold {row['threshold']}."
    )
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    plot(shares, args.plot)
    print(
        f"Plot of the teacher-call share: {args.plot}. Store: {pilot.store.path} "
        f"(clef-agents autopilot status --store {pilot.store.path})."
    )
    pilot.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
