"""Issues 2 and 44 latency benchmark: warm single-request latency of the decision model vs the bare backbone.

Cases (same state): (a) one noul, (b) three mixed questions, (c) one 77-option choice,
(d) 8 questions × 10 options, (e) the same 77-option choice with banking77's own instructions, which
the shipped model was taught (clef-agents teach: its taught weights answer it), (f) one 2-option
choice, (g) one 255-option choice and (h) 8 untaught yes/no questions. Each is timed interleaved, in
the same run, with two bare MiniLM forwards: the floor (issue 44), the state once plus each question's
and each option's text once, each text in its own row; and the old floor, the tokens the model reads
(the state when the routing head answers, every pass the question reader makes in precise mode).
Then batched throughput at batch 32 vs the single-request rate.

Run:   nice -n 10 .venv/bin/python bench/latency/run.py [--model mini+reader --name results_reader]
Writes bench/latency/results.json and bench/latency/results.md (NAME.json and NAME.md with --name).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.baselines.metrics import latency_summary

OUT_DIR = Path(__file__).resolve().parent
STATE = (
    "Hi, I ordered a replacement card two weeks ago after my old one was stolen, and it still has not "
    "arrived. Meanwhile a payment of 49.99 EUR I never made showed up yesterday, and the exchange rate "
    "on my last transfer looked wrong. Can you block the card, refund the payment and tell me when the "
    "new card will come? I am travelling next week and need it."
)
BATCH_STATES = [
    "My card payment was declined at the supermarket this morning.",
    "How long does a transfer to Germany usually take?",
    "I think someone used my card without permission.",
    "What is the exchange rate for dollars today?",
    "Can I change the PIN of my card in the app?",
    "My top-up by bank transfer has not shown up yet.",
    "Why was I charged a fee for withdrawing cash?",
    "I would like to close my account, please.",
]
UNTAUGHT_NOULS = (
    "Does the customer report fraud on their card?",
    "Is the customer angry?",
    "Does the customer ask for a refund?",
    "Is the customer travelling soon?",
    "Does the message mention an exchange rate?",
    "Should this be escalated to a supervisor?",
    "Is the card still missing?",
    "Does the customer ask to block the card?",
)
TARGETS = {
    "d_over_a_max": 1.5,
    "h_over_a_max": 1.5,
    "case_over_bare_max": 1.5,
    "batch32_speedup_min": 3.0,
    "g_over_f_max": 1.5,
}


def banking_options() -> dict[str, str]:
    """The 77 banking77 intents with their option descriptions (as training and eval use them)."""
    from clef_agents.train.datasets import load_records

    return dict(load_records("banking77", "test", limit=1)[0]["questions"]["intent"]["criteria"])


def build_cases(names: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """The four request schemas of issue 2 and a taught question, keyed by case name: all of them, or
    only ``names`` (only (c) and (e) read the shared data folder).

    Example:
        >>> list(build_cases(["a_one_noul"]))
        ['a_one_noul']
    """
    builders = case_builders()
    unknown = set(names or ()) - set(builders)
    if unknown:
        raise ValueError(f"unknown case(s) {sorted(unknown)}; known: {', '.join(builders)}")
    return {name: build() for name, build in builders.items() if names is None or name in names}


def case_builders() -> dict[str, Callable[[], dict[str, Any]]]:
    """Per case name, a function that builds its questions."""
    from clef_agents.train.datasets import canonical_question

    noul = {"type": "noul", "instructions": "Does the customer report fraud on their card?"}
    mixed = {
        "fraud": noul,
        "team": {
            "type": "choice",
            "instructions": "Which team should handle this?",
            "criteria": {
                "cards": "card delivery, blocking and PINs",
                "payments": "charges and refunds",
                "fx": "exchange rates and transfers",
                "other": "anything else",
            },
        },
        "urgency": {
            "type": "score",
            "instructions": "How urgent is this?",
            "criteria": ["can wait", "this week", "today", "within the hour", "right now"],
        },
    }
    many = {
        f"q{i}": {
            "type": "choice",
            "instructions": f"Aspect {i}: which of these best describes the message?",
            "criteria": {
                f"opt{i}_{j}": f"description {j} of aspect {i}: "
                + ["cards", "payments", "transfers", "fees", "fraud", "account", "limits", "app", "travel", "other"][j]
                for j in range(10)
            },
        }
        for i in range(8)
    }
    return {
        "a_one_noul": lambda: {"noul": noul},
        "b_three_mixed": lambda: mixed,
        "c_choice_77": lambda: {
            "intent": {
                "type": "choice",
                "instructions": "Which banking request is this?",
                "criteria": banking_options(),
            }
        },
        "d_8q_x_10opt": lambda: many,
        "e_taught_choice_77": lambda: {"intent": canonical_question("banking77")},
        "f_choice_2": lambda: {
            "team": {
                "type": "choice",
                "instructions": "Which team should handle this?",
                "criteria": {"cards": None, "payments": None},
            }
        },
        "g_choice_255": lambda: {
            "topic": {
                "type": "choice",
                "instructions": "Which topic is this message about?",
                "criteria": {f"topic {i}": None for i in range(255)},
            }
        },
        "h_8_untaught_nouls": lambda: {
            f"n{i}": {"type": "noul", "instructions": text} for i, text in enumerate(UNTAUGHT_NOULS)
        },
    }


def bare_forward(model: Any, tokenizer: Any, rows: list[list[int]]) -> None:
    """The bare backbone over token id rows, padded together in chunks of 32 sorted by length (as the reader reads)."""
    import torch

    rows = sorted(rows, key=len)
    with torch.inference_mode():
        for start in range(0, len(rows), 32):
            chunk = rows[start : start + 32]
            width = max(len(r) for r in chunk)
            ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, row in enumerate(chunk):
                ids[i, : len(row)] = torch.tensor(row)
                mask[i, : len(row)] = 1
            model(input_ids=ids, attention_mask=mask)


def read_rows(model: Any, questions: dict[str, Any]) -> list[list[int]]:
    """The old floor: the token ids the model reads for ``questions`` about ``STATE``, the state's row when the
    head answers any of them and every question-reader pass for the others."""
    from clef_agents import wire

    engine = model.engine
    typed = list(wire.validate_questions(questions).values())
    by_reader = engine.read_by_reader(typed)
    rows = [p.input_ids for q, flag in zip(typed, by_reader) if flag for p in engine.reader.layout(STATE, q)]
    if any(engine.read_by_head(typed)):
        rows.append(engine.tokenize_state(STATE)[0])
    return rows


def floor_rows(model: Any, questions: dict[str, Any]) -> list[list[int]]:
    """The floor: the state's token ids as the model cuts them, then each question's and each option's text
    once (as the model embeds them), each in its own row."""
    from clef_agents import wire
    from clef_agents.model.encoder import FROZEN_MAX_LENGTH
    from clef_agents.model.scorer import option_texts

    engine = model.engine
    typed = list(wire.validate_questions(questions).values())
    texts = list(dict.fromkeys(t for q in typed for t in [wire.content_text(q.instructions), *option_texts(q)]))
    tokenizer = engine.backbone.tokenizer
    return [
        engine.tokenize_state(STATE)[0],
        *tokenizer(texts, truncation=True, max_length=FROZEN_MAX_LENGTH)["input_ids"],
    ]


def time_case(model: Any, bare: tuple[Any, Any], questions: dict[str, Any], reps: int, warmup: int) -> dict[str, Any]:
    """Interleaved timings of the model, the floor and the old floor on the same state."""
    request = {"state": STATE, "questions": questions}
    floors = {"bare_backbone": floor_rows(model, questions), "old_floor": read_rows(model, questions)}
    for _ in range(warmup):
        model.invoke(request)
        for rows in floors.values():
            bare_forward(*bare, rows)
    times: dict[str, list[float]] = {"model": [], **{name: [] for name in floors}}
    for _ in range(reps):
        for name, rows in floors.items():
            t0 = time.perf_counter()
            bare_forward(*bare, rows)
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.invoke(request)
        times["model"].append(time.perf_counter() - t0)
    stats = {name: latency_summary(values) for name, values in times.items()}
    return {
        "n_questions": len(questions),
        "n_options": sum(len(q.get("criteria") or [0, 0]) for q in questions.values()),
        "passes": len(floors["old_floor"]),
        "tokens_read": sum(len(r) for r in floors["old_floor"]),
        **stats,
        "p50_over_bare": stats["model"]["p50_ms"] / stats["bare_backbone"]["p50_ms"],
        "p95_over_bare": stats["model"]["p95_ms"] / stats["bare_backbone"]["p95_ms"],
        "p50_over_old_floor": stats["model"]["p50_ms"] / stats["old_floor"]["p50_ms"],
    }


def batch_requests(questions: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """``size`` requests with distinct states (the batch states, numbered) and the same questions."""
    return [
        {"state": BATCH_STATES[i % len(BATCH_STATES)] + f" (ticket {i})", "questions": questions} for i in range(size)
    ]


def time_throughput(model: Any, questions: dict[str, Any], batch: int, rounds: int) -> dict[str, Any]:
    """Requests/s answering ``batch`` requests one by one vs in one ``model.batch`` call."""
    requests = batch_requests(questions, batch)
    model.batch(requests)
    for r in requests[:3]:
        model.invoke(r)
    single_s, batch_s = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for r in requests:
            model.invoke(r)
        t1 = time.perf_counter()
        model.batch(requests)
        t2 = time.perf_counter()
        single_s.append(t1 - t0)
        batch_s.append(t2 - t1)
    single_rate = batch / min(single_s)
    batch_rate = batch / min(batch_s)
    return {
        "batch_size": batch,
        "rounds": rounds,
        "single_requests_per_s": single_rate,
        "batched_requests_per_s": batch_rate,
        "speedup": batch_rate / single_rate,
    }


def check_targets(cases: dict[str, Any], throughput: dict[str, Any]) -> dict[str, Any]:
    d_over_a = cases["d_8q_x_10opt"]["model"]["p50_ms"] / cases["a_one_noul"]["model"]["p50_ms"]
    h_over_a = cases["h_8_untaught_nouls"]["model"]["p50_ms"] / cases["a_one_noul"]["model"]["p50_ms"]
    worst = max(c["p50_over_bare"] for c in cases.values())
    g_over_f = cases["g_choice_255"]["model"]["p50_ms"] / cases["f_choice_2"]["model"]["p50_ms"]
    return {
        "g_over_f_p50": g_over_f,
        "g_over_f_ok": g_over_f <= TARGETS["g_over_f_max"],
        "d_over_a_p50": d_over_a,
        "d_over_a_ok": d_over_a <= TARGETS["d_over_a_max"],
        "h_over_a_p50": h_over_a,
        "h_over_a_ok": h_over_a <= TARGETS["h_over_a_max"],
        "worst_case_over_bare_p50": worst,
        "every_case_over_bare_ok": worst <= TARGETS["case_over_bare_max"],
        "batch32_speedup": throughput["speedup"],
        "batch32_ok": throughput["speedup"] >= TARGETS["batch32_speedup_min"],
    }


def write_markdown(result: dict[str, Any], path: Path) -> None:
    lines = [
        "# Decision-model latency (issues 2 and 44)",
        "",
        f"Command: `{result['command']}`  ",
        (
            f"Model: {result['model']}; {result['machine']}; torch threads {result['torch_threads']}; "
            f"{result['reps']} interleaved reps per case after {result['warmup']} warm-up calls; wall {result.get('wall_s', '?')} s."
        ),
        "Floor: the bare backbone over the state once plus each question's and option's text once; old floor: over the "
        "tokens the model reads (every question-reader pass in precise mode, the state when the head answers).",
        "",
        "| case | questions | options | passes | tokens read | model p50 ms | model p95 ms | floor p50 ms | p50 ÷ floor | p95 ÷ floor "
        "| old floor p50 ms | p50 ÷ old floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in result["cases"].items():
        lines.append(
            f"| {name} | {c['n_questions']} | {c['n_options']} | {c['passes']} | {c['tokens_read']} | {c['model']['p50_ms']:.1f} | {c['model']['p95_ms']:.1f} | "
            f"{c['bare_backbone']['p50_ms']:.1f} | {c['p50_over_bare']:.2f} | {c['p95_over_bare']:.2f} | {c['old_floor']['p50_ms']:.1f} | "
            f"{c['p50_over_old_floor']:.2f} |"
        )
    t, k = result["throughput"], result["targets"]
    lines += [
        "",
        (
            f"Throughput (case b schema, {t['batch_size']} distinct states, best of {t['rounds']}): "
            f"{t['single_requests_per_s']:.1f} req/s one by one, {t['batched_requests_per_s']:.1f} req/s batched "
            f"→ {t['speedup']:.2f}×."
        ),
        "",
        "| target | measured | met |",
        "|---|---:|:-:|",
        f"| (d) ≤ 1.5× (a) (p50) | {k['d_over_a_p50']:.2f}× | {'yes' if k['d_over_a_ok'] else 'no'} |",
        f"| (h) 8 untaught questions ≤ 1.5× (a) one (p50) | {k['h_over_a_p50']:.2f}× | {'yes' if k['h_over_a_ok'] else 'no'} |",
        f"| (g) 255 options ≤ 1.5× (f) 2 options (p50) | {k['g_over_f_p50']:.2f}× | {'yes' if k['g_over_f_ok'] else 'no'} |",
        f"| every case ≤ 1.5× the floor (p50) | worst {k['worst_case_over_bare_p50']:.2f}× | {'yes' if k['every_case_over_bare_ok'] else 'no'} |",
        f"| batch-32 throughput ≥ 3× single | {k['batch32_speedup']:.2f}× | {'yes' if k['batch32_ok'] else 'no'} |",
        "",
    ]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--name", default="results", help="file names NAME.json and NAME.md (default results)")
    parser.add_argument(
        "--model",
        default="mini",
        help="a clef_agents.load_model checkpoint spec (default mini; mini+reader: precise mode)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for every method (1 is stable on a shared machine; more threads spin-wait under contention)",
    )
    args = parser.parse_args(argv)
    import torch

    from bench.baselines.minilm import MiniLM
    from clef_agents.model.threads import use_threads

    use_threads(args.threads)
    from clef_agents.loading import load_model

    started = time.perf_counter()
    model, model_desc = load_model(args.model), args.model
    minilm = MiniLM.load()
    bare = (minilm.model, minilm.tokenizer)
    cases = {name: time_case(model, bare, qs, args.reps, args.warmup) for name, qs in build_cases().items()}
    throughput = time_throughput(model, build_cases()["b_three_mixed"], 32, args.rounds)
    result = {
        "command": ".venv/bin/python bench/latency/run.py"
        + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
        "model": model_desc,
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores ({platform.processor() or 'unknown'})",
        "torch_threads": torch.get_num_threads(),
        "reps": args.reps,
        "warmup": args.warmup,
        "state_chars": len(STATE),
        "cases": cases,
        "throughput": throughput,
        "targets": check_targets(cases, throughput),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / f"{args.name}.md")
    print((args.out / f"{args.name}.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
