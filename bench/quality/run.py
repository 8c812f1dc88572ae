"""Quality of the shipped model on every test split, and the zero-shot banking77 check.

Writes bench/quality/results/{mini,zeroshot}/report.{json,md} + reliability PNGs, then
MODEL_CARD.md is rendered from them by `clef-agents model-card` (clef_agents.train.model_card).

Command (as committed):
    HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/run.py --model mini --zeroshot-model runs/zeroshot2_match/final
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from clef_agents.model import ClefDecisionModel
from clef_agents.train.datasets import DATASETS, available_splits, canonical_question, load_records
from clef_agents.train.evaluate import evaluate_records, plot_reliability, render_markdown, run_evaluation

OUT = Path(__file__).parent / "results"


def zero_shot_records() -> list[dict]:
    """banking77 test rows asked with bare label names as options (no descriptions)."""
    question = canonical_question("banking77", descriptions=False)
    records = load_records("banking77", "test")
    (qid,) = records[0]["questions"]
    return [{**r, "questions": {qid: question}} for r in records]


def label_name_similarity(model: ClefDecisionModel, records: list[dict]) -> float:
    """The baseline: argmax cosine between the frozen MiniLM embedding of the text and of each label name."""
    (qid,) = records[0]["questions"]
    names = list(records[0]["questions"][qid]["criteria"])
    engine = model.engine
    labels = engine.encode_texts([n.replace("_", " ") for n in names]).numpy()
    states = np.concatenate(
        [engine.encode_texts([r["state"] for r in records[i : i + 256]]).numpy() for i in range(0, len(records), 256)]
    )
    labels /= np.linalg.norm(labels, axis=1, keepdims=True)
    states /= np.linalg.norm(states, axis=1, keepdims=True)
    predicted = (states @ labels.T).argmax(1)
    gold = np.array([names.index(r["labels"][qid]) for r in records])
    return float((predicted == gold).mean())


def evaluated_datasets() -> list[str]:
    """Every set with a test split except snli_esnli / scitail (9.8k / 2.1k rows, left out to keep the run
    short; mnli_taxinli, dnc_recast and pubmedqa cover held-out inference)."""
    return [d for d in DATASETS if "test" in available_splits(d) and d not in ("snli_esnli", "scitail")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mini")
    parser.add_argument("--zeroshot-model", default=None)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--skip-main", action="store_true", help="only the zero-shot check")
    parser.add_argument("--out", type=Path, default=OUT, help="results folder (default bench/quality/results)")
    args = parser.parse_args()
    datasets = evaluated_datasets()
    started = time.time()
    if not args.skip_main:
        run_evaluation(args.model, datasets, None, "test", args.limit, args.out / "mini", with_uncalibrated=True)
        print(f"full evaluation: {time.time() - started:.0f} s")
    if args.zeroshot_model:
        model = ClefDecisionModel.from_pretrained(args.zeroshot_model)
        records = zero_shot_records()
        result = {
            "banking77_label_names": evaluate_records(model, records, with_uncalibrated=True),
            "records": len(records),
        }
        result["banking77_label_names"]["records"] = len(records)
        report = {
            "model": args.zeroshot_model,
            "split": "test",
            "limit": None,
            "data_card": model.config.data_card,
            "calibration": model.config.calibration.model_dump(),
            "seconds": 0,
            "datasets": {"banking77_label_names": result["banking77_label_names"]},
            "baseline_label_name_similarity": label_name_similarity(model, records),
        }
        folder = args.out / "zeroshot"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.json").write_text(json.dumps(report, indent=2, default=float) + "\n")
        (folder / "report.md").write_text(render_markdown(report))
        plot_reliability(report["datasets"], folder)
        print(
            json.dumps(
                {
                    "zero_shot_accuracy": report["datasets"]["banking77_label_names"]["choice"]["calibrated"][
                        "accuracy"
                    ],
                    "label_name_similarity": report["baseline_label_name_similarity"],
                }
            )
        )


if __name__ == "__main__":
    main()
