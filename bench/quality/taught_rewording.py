"""Reworded taught questions: the tolerance's fitting set, and the frozen test rewordings measured.

``fit`` (no frozen file read): the cosines, between frozen-backbone question embeddings (what the scorer's
``question_vec`` holds), of each taught set's instruction paraphrases in ``train.datasets.DATASETS``
(positives: same question, reworded) and of the instructions of the other sets of the same type
(negatives: another question asked with options of that type), against the taught wordings. The three
intent sets (banking77, clinc150, hwu64) ask one question, "which intent?", of different option
catalogues, so their pairs with each other are not negatives of meaning (their option sets differ, which
already keeps them apart) and are reported separately. The tolerance is the highest negative cosine plus
``MARGIN``, rounded up to two decimals: ``model.taught.REWORDED_TOLERANCE``.

``measure``: the rewordings of tests/fixtures/taught_paraphrases.json, written and committed before
any similarity was measured: how many paraphrases and different questions reach the taught weights,
and test accuracy on a seeded sample of each taught set's test rows asked in the taught wording and in
each paraphrase.

Run (one thread; about 10 minutes for ``measure`` on 2 shared cores):
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python bench/quality/taught_rewording.py fit
    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python bench/quality/taught_rewording.py measure --rows 300
Writes bench/quality/results/taught_rewording/{fit,measure}.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.reports import log, write_report  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "taught_rewording"
FROZEN = ROOT / "tests" / "fixtures" / "taught_paraphrases.json"
MARGIN = 0.05
"""Added to the highest negative cosine of the fitting set to give the tolerance."""
SAME_QUESTION = frozenset({"banking77", "clinc150", "hwu64"})
"""Sets that ask the same question ("which intent?") of different option catalogues."""
SLOT_ROWS = 3
"""Train rows whose slots fill a templated instruction (e.g. an NLI hypothesis) for the negatives."""
BATCH = 32


def _model() -> Any:
    import torch

    from clef_agents.model import ClefDecisionModel

    torch.set_num_threads(1)
    return ClefDecisionModel.from_pretrained("mini")


def _wordings(name: str) -> list[str]:
    """A set's instruction paraphrases; templated ones filled from a few seeded train (else test) rows."""
    from clef_agents.train.datasets import DATASETS, available_splits, instruction_variants, load_records

    spec = DATASETS[name]
    if not any("{" in text for text in spec.instructions):
        return list(spec.instructions)
    split = "train" if "train" in available_splits(name) else "test"
    return [
        text for record in load_records(name, split, limit=SLOT_ROWS, seed=0) for text in instruction_variants(record)
    ]


def fit() -> None:
    """Cosines of the fitting set and the tolerance they give (see the module docstring)."""
    import torch.nn.functional as F

    from clef_agents.model.taught import REWORDED_TOLERANCE, negated
    from clef_agents.train.datasets import DATASETS
    from clef_agents.train.reader_data import BINARIES

    engine = _model().engine
    taught = {entry.instructions: entry for entry in engine.taught.questions.values()}

    def cosines(anchor: str, texts: list[str]) -> list[float]:
        vectors = F.normalize(engine.embed_frozen([anchor, *texts]).float(), dim=-1)
        return (vectors[1:] @ vectors[0]).tolist()

    positives, negatives = [], []
    owner = {spec.instructions[0]: name for name, spec in DATASETS.items()}
    for wording, entry in taught.items():
        name = owner.get(wording)
        if name is not None:
            texts = list(DATASETS[name].instructions[1:])
            positives += [
                {"set": name, "type": entry.kind, "wording": text, "cosine": round(c, 4)}
                for text, c in zip(texts, cosines(wording, texts))
            ]
        for other, spec in DATASETS.items():
            if other == name or spec.kind != entry.kind:
                continue
            texts = _wordings(other)
            same = name in SAME_QUESTION and other in SAME_QUESTION
            negatives += [
                {
                    "taught": name or wording[:40],
                    "type": entry.kind,
                    "other": other,
                    "wording": text,
                    "cosine": round(c, 4),
                    "same_question": same,
                    "negation_differs": entry.kind == "noul" and negated(text) != negated(wording),
                }
                for text, c in zip(texts, cosines(wording, texts))
            ]
    # Round 2: the question reader's yes/no wordings (train.reader_data.BINARIES, written earlier by others):
    # more rewordings of a taught set's question, and its opposites (same subject, same options).
    for wording, entry in taught.items():
        if entry.kind != "noul":
            continue
        for other, binary in BINARIES.items():
            own = binary.yes[0] == wording
            if own:
                texts = [text for text in binary.yes if text != wording]
                positives += [
                    {"set": f"{other} (reader)", "type": "noul", "wording": text, "cosine": round(c, 4)}
                    for text, c in zip(texts, cosines(wording, texts))
                ]
            texts = list(binary.no) if own else [*binary.yes, *binary.no]
            negatives += [
                {
                    "taught": owner.get(wording) or wording[:40],
                    "type": "noul",
                    "other": f"{other} (reader{', opposite' if own else ''})",
                    "wording": text,
                    "cosine": round(c, 4),
                    "same_question": False,
                    "negation_differs": negated(text) != negated(wording),
                }
                for text, c in zip(texts, cosines(wording, texts))
                if text != wording
            ]
    meaning = [n for n in negatives if not n["same_question"] and not n["negation_differs"]]
    first = [n for n in meaning if "(reader" not in n["other"]]
    highest = max(n["cosine"] for n in meaning)
    tolerance = math.ceil((highest + MARGIN) * 100 - 1e-9) / 100
    reached = sum(p["cosine"] >= tolerance for p in positives)
    first_highest = max(n["cosine"] for n in first)
    first_tolerance = math.ceil((first_highest + MARGIN) * 100 - 1e-9) / 100
    by_type = {
        kind: max((n["cosine"] for n in meaning if n["type"] == kind), default=None)
        for kind in ("noul", "choice", "score")
    }
    data = {
        "backbone": engine.config.backbone,
        "margin": MARGIN,
        "highest_negative": highest,
        "round1_highest_negative": first_highest,
        "round1_tolerance": first_tolerance,
        "highest_negative_by_type": by_type,
        "highest_same_question_pair": max((n["cosine"] for n in negatives if n["same_question"]), default=None),
        "tolerance": tolerance,
        "tolerance_in_code": REWORDED_TOLERANCE,
        "positives_reaching": reached,
        "positives": sorted(positives, key=lambda p: p["cosine"]),
        "negatives": sorted(negatives, key=lambda n: -n["cosine"]),
    }
    lines = [
        "# Reworded taught questions: fitting the tolerance",
        "",
        "Command: `OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python bench/quality/taught_rewording.py fit`",
        "",
        f"Backbone `{engine.config.backbone}` (mini), frozen mean-pooled question embeddings, against each "
        "taught wording. Positives: the instruction paraphrases of the taught sets in `DATASETS`, and the "
        "question reader's own-question wordings of sms_spam and youtube_spam (`reader_data.BINARIES`, marked "
        "reader). Negatives: the instructions of the other sets of the same type (templated ones filled from "
        f"{SLOT_ROWS} train rows), and for yes/no questions the reader's wordings of other sets and the "
        "opposite questions of the taught set itself (e.g. \"Is this message legitimate?\"). Left out: pairs "
        "among banking77 / clinc150 / hwu64 (the same question of another option catalogue) and yes/no pairs "
        "negated differently (the match rule keeps them apart). "
        f"{len(positives)} positives, {len(meaning)} negatives counted. The tests' frozen rewordings are not read.",
        "",
        "Round 1, as first briefed, used only the `DATASETS` instructions: highest negative "
        f"{first_highest:.3f} (when2call against hwu64), tolerance {first_tolerance:.2f}. On the frozen test file "
        "that let 9 of 27 different questions through (results/taught_rewording/measure_round1.md), so the "
        "fitting set gained the reader's same-subject opposites above (written before this work, not from the "
        "frozen file) and the same rule was applied again. The frozen file prompted that second round, so "
        "its results for the second tolerance are not as clean a held-out test as round 1's.",
        "",
        f"- highest negative cosine: **{highest:.3f}** (by type: "
        + ", ".join(f"{k} {v:.3f}" for k, v in by_type.items() if v is not None)
        + "; score has no other set)",
        f"- highest pair among the intent sets (left out): {data['highest_same_question_pair']:.3f}",
        f"- tolerance = highest negative + {MARGIN} rounded up: **{tolerance:.2f}** "
        f"(in code: `REWORDED_TOLERANCE = {REWORDED_TOLERANCE}`)",
        f"- positives reaching it: **{reached} of {len(positives)}**",
        "",
        "| positive (set: paraphrase) | cosine |",
        "|---|---:|",
        *[f"| {p['set']}: {p['wording']} | {p['cosine']:.3f} |" for p in data["positives"]],
        "",
        "Ten highest negatives:",
        "",
        "| taught set | other set: instruction | cosine | same question |",
        "|---|---|---:|---|",
        *[
            f"| {n['taught']} | {n['other']}: {n['wording'][:90]} | {n['cosine']:.3f} | {'yes' if n['same_question'] else ''} |"
            for n in data["negatives"][:10]
        ],
        "",
    ]
    OUT.mkdir(parents=True, exist_ok=True)
    write_report(OUT / "fit", data, "\n".join(lines))


def _question(frozen: dict[str, Any], instructions: str) -> dict[str, Any]:
    """The taught question's wire form (its set's canonical options) asked in ``instructions``."""
    from clef_agents.train.datasets import DATASETS, canonical_question

    for name, spec in DATASETS.items():
        if spec.instructions[0] == frozen["instructions"]:
            return {**canonical_question(name), "instructions": instructions}
    if frozen["type"] != "noul":
        raise ValueError(f"no data set asks {frozen['instructions']!r}; only a yes/no question needs no options")
    return {"type": "noul", "instructions": instructions}


def _set_of(frozen: dict[str, Any]) -> str | None:
    from clef_agents.train.datasets import DATASETS

    return next((name for name, spec in DATASETS.items() if spec.instructions[0] == frozen["instructions"]), None)


def _accuracy(model: Any, records: list[dict[str, Any]], question: dict[str, Any]) -> tuple[float, float]:
    """Accuracy and the share answered with taught weights, every record asked ``question``."""
    from clef_agents import wire

    hits = taught = 0
    typed = None
    for start in range(0, len(records), BATCH):
        chunk = records[start : start + BATCH]
        requests = [{"state": r["state"], "questions": {qid: question for qid in r["labels"]}} for r in chunk]
        for record, response in zip(chunk, model.batch(requests)):
            ((qid, label),) = record["labels"].items()
            typed = typed or wire.validate_questions({qid: question})[qid]
            answer = wire.option_names(typed).index(wire.decided_label(response.answers[qid]))
            hits += wire.label_index(typed, label) == answer
            taught += qid not in (response.extensions or {}).get("x_untaught", [])
    return hits / len(records), taught / len(records)


def measure(rows: int, seed: int) -> None:
    """Matches of the frozen rewordings, and accuracy exact vs reworded on ``rows`` test rows per set."""
    from clef_agents import wire
    from clef_agents.model.taught import REWORDED_TOLERANCE
    from clef_agents.train.datasets import load_records

    started = time.time()
    frozen = json.loads(FROZEN.read_text())["questions"]
    model = _model()
    engine = model.engine
    matches = []
    for item in frozen:
        exact = engine.taught_entry(wire.validate_questions({"q": _question(item, item["instructions"])})["q"])
        if exact is None:
            raise ValueError(f"mini has no taught question {item['instructions']!r}")
        for kind in ("paraphrases", "negatives"):
            for text in item[kind]:
                question = wire.validate_questions({"q": _question(item, text)})["q"]
                closest = engine.closest_taught(question)
                entry = engine.taught_entry(question)
                matches.append(
                    {
                        "taught": item["instructions"][:60],
                        "kind": kind,
                        "wording": text,
                        "cosine": round(closest[1], 4) if closest else None,
                        "nearest_is_this": closest is not None and closest[0] is exact,
                        "matched": entry is not None,
                        "matched_this": entry is exact,
                    }
                )
    accuracy = []
    for item in frozen:
        name = _set_of(item)
        if name is None:
            continue
        records = load_records(name, "test", limit=rows, seed=seed)
        row = {"set": name, "rows": len(records), "wordings": []}
        for label, text in [("exact", item["instructions"])] + [
            (f"p{i + 1}", t) for i, t in enumerate(item["paraphrases"])
        ]:
            acc, share = _accuracy(model, records, _question(item, text))
            row["wordings"].append({"label": label, "wording": text, "accuracy": acc, "taught_share": share})
            log(f"{name} {label}: accuracy {acc:.3f}, taught {share:.2f}")
        exact_acc = row["wordings"][0]["accuracy"]
        row["mean_gap"] = sum(exact_acc - w["accuracy"] for w in row["wordings"][1:]) / (len(row["wordings"]) - 1)
        accuracy.append(row)
    gaps = [w["accuracy"] - r["wordings"][0]["accuracy"] for r in accuracy for w in r["wordings"][1:]]
    matched_gaps = [
        w["accuracy"] - r["wordings"][0]["accuracy"]
        for r in accuracy
        for w in r["wordings"][1:]
        if w["taught_share"] == 1
    ]
    paraphrases = [m for m in matches if m["kind"] == "paraphrases"]
    negatives = [m for m in matches if m["kind"] == "negatives"]
    data = {
        "tolerance": REWORDED_TOLERANCE,
        "rows": rows,
        "seed": seed,
        "paraphrases_matched": sum(m["matched_this"] for m in paraphrases),
        "paraphrases": len(paraphrases),
        "negatives_matched": sum(m["matched"] for m in negatives),
        "negatives": len(negatives),
        "mean_gap_points": -100 * sum(gaps) / len(gaps),
        "mean_gap_points_matched": -100 * sum(matched_gaps) / len(matched_gaps) if matched_gaps else None,
        "matches": matches,
        "accuracy": accuracy,
        "seconds": round(time.time() - started),
    }
    table = [
        "| set | rows | exact | p1 | p2 | p3 | mean gap (points) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in accuracy:
        cells = [f"{100 * w['accuracy']:.1f}" + ("" if w["taught_share"] == 1 else " (head)") for w in r["wordings"]]
        table.append(f"| {r['set']} | {r['rows']} | " + " | ".join(cells) + f" | {100 * r['mean_gap']:.1f} |")
    lines = [
        "# Reworded taught questions on mini: the frozen rewordings",
        "",
        f"Command: `OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python bench/quality/taught_rewording.py measure "
        f"--rows {rows} --seed {seed}` ({data['seconds']} s on one thread)",
        "",
        f"Tolerance `REWORDED_TOLERANCE = {REWORDED_TOLERANCE}` (chosen on the fitting set, fit.md). Rewordings from "
        "tests/fixtures/taught_paraphrases.json, committed before any similarity was measured.",
        "",
        f"- paraphrases that use their taught question's weights: **{data['paraphrases_matched']} of "
        f"{data['paraphrases']}**",
        f"- different questions (same options) that use any taught weights: **{data['negatives_matched']} of "
        f"{data['negatives']}**",
        f"- test accuracy, reworded minus exact, mean over the {len(gaps)} paraphrases with a test split: "
        f"**{-data['mean_gap_points']:+.1f} points** (target: within 2); over the matched ones only: "
        + (f"{-data['mean_gap_points_matched']:+.1f} points" if matched_gaps else "none matched"),
        "",
        f"Accuracy (%) on {rows} seeded test rows per set (seed {seed}); (head): the wording did not reach the tolerance "
        "and the routing head answered alone.",
        "",
        *table,
        "",
        "| taught question | kind | wording | cosine | uses taught weights |",
        "|---|---|---|---:|---|",
        *[
            f"| {m['taught'][:45]} | {m['kind'][:-1]} | {m['wording'][:80]} | "
            f"{m['cosine'] if m['cosine'] is not None else '–'} | {'yes' if m['matched'] else 'no'} |"
            for m in matches
        ],
        "",
    ]
    OUT.mkdir(parents=True, exist_ok=True)
    write_report(OUT / "measure", data, "\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fit", help="the fitting set's cosines and the tolerance they give")
    run = sub.add_parser("measure", help="the frozen rewordings: matches and accuracy exact vs reworded")
    run.add_argument("--rows", type=int, default=300, help="seeded test rows per set (default 300)")
    run.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    fit() if args.command == "fit" else measure(args.rows, args.seed)


if __name__ == "__main__":
    main()
