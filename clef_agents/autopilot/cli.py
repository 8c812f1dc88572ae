"""``clef-agents autopilot``: see what the autopilot has learned, replay a labelled stream through it, reset it.

- ``status --store F``: per question, items, labels by source, teacher calls saved, the certified threshold and
  its bound, the version, the last retrain, the drift state, and the audits and drift checks on novel items
  (``--json`` for machines);
- ``replay --records R``: run decision records through a fresh autopilot, each record's label standing in for
  the teacher's answer, and report teacher calls, accuracy and automatic agreement (``--plot`` draws the
  teacher-call share along the stream);
- ``reset --store F --question KEY``: forget a question's learner versions (its labels stay).

Example:
    $ clef-agents autopilot replay --records examples/autopilot_records.jsonl --model fake --no-embeddings
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from clef_agents.loading import MODEL_HELP


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``autopilot status | replay | reset``."""
    parser = subparsers.add_parser("autopilot", help="the gate that learns from its teacher: status, replay, reset")
    commands = parser.add_subparsers(dest="autopilot_command", metavar="ACTION", required=True)

    status = commands.add_parser("status", help="per question: labels, teacher calls saved, certificate, drift")
    status.add_argument("--store", type=Path, required=True, help="the autopilot's store (SQLite file)")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(func=_status)

    replay = commands.add_parser("replay", help="replay decision records through a fresh autopilot")
    replay.add_argument(
        "--records", type=Path, required=True, help="decision records (JSONL: state, questions, labels)"
    )
    replay.add_argument("--question", default=None, help="the question id to replay (default: the only one)")
    replay.add_argument("--model", default="mini", help=MODEL_HELP)
    replay.add_argument("--store", default=":memory:", help="keep the replay's store in this SQLite file")
    replay.add_argument("--target", type=float, default=0.95, help="agreement with the teacher to certify (0.95)")
    replay.add_argument("--confidence", type=float, default=0.9, help="confidence of the certificate (0.9)")
    replay.add_argument("--audit", type=float, default=0.05, help="share of items audited once certified (0.05)")
    replay.add_argument("--no-embeddings", action="store_true", help="learn from words and the model's answer only")
    replay.add_argument(
        "--teacher-log",
        type=Path,
        default=None,
        help="append each teacher call's item key and time here, synced, before its label is kept",
    )
    replay.add_argument("--plot", type=Path, default=None, help="draw the teacher-call share along the stream (PNG)")
    replay.add_argument("--json", action="store_true", help="print the summary as JSON")
    replay.set_defaults(func=_replay)

    reset = commands.add_parser("reset", help="forget a question's learner versions (labels stay)")
    reset.add_argument("--store", type=Path, required=True, help="the autopilot's store (SQLite file)")
    reset.add_argument("--question", required=True, help="question key (as status prints it), or 'all'")
    reset.set_defaults(func=_reset)


def _open(path: Path) -> Any:
    from clef_agents.autopilot.store import LabelStore

    if not path.is_file():
        raise FileNotFoundError(f"autopilot store not found: {path}")
    return LabelStore(path)


def _status(args: argparse.Namespace) -> int:
    from clef_agents.autopilot.status import question_status

    rows = question_status(_open(args.store))
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    if not rows:
        print(f"{args.store}: no questions yet")
        return 0
    print(
        f"{'question':<40} {'items':>6} {'auto':>6} {'saved':>6}  {'labels by source':<24} {'version':>7} "
        f"{'threshold':>9}  state"
    )
    for row in rows:
        labels = ", ".join(f"{k} {v}" for k, v in sorted(row["labels"].items())) or "none"
        threshold = "—" if row["threshold"] is None else f"{row['threshold']:.3f}"
        print(
            f"{row['question']:<40} {row['items']:>6} {row['automatic']:>6} {100 * row['saved_share']:>5.1f}%  "
            f"{labels:<24} {row['version'] or '—':>7} {threshold:>9}  {row['state']}"
        )
        if row["certificate"]:
            c = row["certificate"]
            print(
                f"{'':<40} certified on {c['sample']} sampled labels{_certified_at(c)}: {c['accepted']} would be "
                f"automatic, {c['disagreements']} of them disagree with the teacher"
            )
        if row["audits"] or row["drift_checks"]:
            print(
                f"{'':<40} would-be-automatic items sent to the teacher: {row['audits']} audits, "
                f"{row['drift_checks']} drift checks on novel items"
            )
    return 0


def _certified_at(certificate: dict[str, Any]) -> str:
    """What a certificate was tested at, e.g. ' at 95 % agreement, 90 % confidence (test 3 of this sample, level
    0.0068)'; empty for one stored before certificates kept their settings."""
    if "target" not in certificate:
        return ""
    return (
        f" at {certificate['target'] * 100:g} % agreement, {certificate['confidence'] * 100:g} % confidence "
        f"(test {certificate['attempt']} of this sample, level {certificate['delta']:.2g})"
    )


def _reset(args: argparse.Namespace) -> int:
    store = _open(args.store)
    keys = [q["question_key"] for q in store.questions()]
    chosen = keys if args.question == "all" else [args.question]
    unknown = [k for k in chosen if k not in keys]
    if unknown:
        raise ValueError(f"no question {unknown[0]!r} in {args.store}; questions: {', '.join(keys) or 'none'}")
    for key in chosen:
        print(
            f"{key}: {store.reset(key)} versions forgotten; its labels stay and train the next version, which is "
            "certified on a sample drawn from now on"
        )
    return 0


def read_records(path: Path, question_id: str | None) -> tuple[str, dict[str, Any], list[str], list[Any]]:
    """The question id, its wire form, the states and the labels of a records file, for one question.

    Raises ``ValueError`` naming the line when a record is not a decision record or its question differs.
    """
    if not path.is_file():
        raise FileNotFoundError(f"records file not found: {path}")
    from clef_agents import wire

    states, labels = [], []
    question: dict[str, Any] | None = None
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            qids = list(record["questions"])
            qid = question_id or (qids[0] if len(qids) == 1 else None)
            if qid is None:
                raise ValueError(f"records ask {len(qids)} questions ({', '.join(qids)}); choose one with --question")
            asked = record["questions"][qid]
            label = record["labels"][qid]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{path}:{number}: not a decision record with a label for the question "
                f"({type(exc).__name__}: {exc}); expected state, questions and labels"
            ) from None
        if question is None:
            question, question_id = asked, qid
            typed = wire.validate_questions({qid: asked})[qid]
        elif asked != question:
            raise ValueError(f"{path}:{number}: question {qid!r} differs from the first record's; replay one question")
        states.append(wire.state_text(record["state"]))
        labels.append(wire.label_index(typed, label))
    if question is None:
        raise ValueError(f"{path}: no records")
    return str(question_id), question, states, labels


def _replay(args: argparse.Namespace) -> int:
    import numpy as np

    from clef_agents import wire
    from clef_agents.autopilot.pilot import Autopilot
    from clef_agents.autopilot.replay import Stream, replay
    from clef_agents.loading import load_model

    qid, question, states, labels = read_records(args.records, args.question)
    model = load_model(args.model)
    typed = wire.validate_questions({qid: question})
    answers = model.batch([{"state": s, "questions": typed} for s in states])
    probs = np.array([wire.answer_probabilities(a.answers[qid]) for a in answers])
    stream = Stream(states, probs, np.array(labels))
    pilot = Autopilot(
        args.store,
        background=False,
        target=args.target,
        confidence=args.confidence,
        audit=args.audit,
        embeddings=not args.no_embeddings,
    )
    log = args.teacher_log.open("a") if args.teacher_log else None

    def logged(key: str) -> None:
        if log is not None:
            log.write(f"{key} {time.time()}\n")
            log.flush()
            os.fsync(log.fileno())

    result = replay(
        pilot,
        question,
        stream,
        lambda i: int(labels[i]),
        question_id=qid,
        source="gold",
        progress=_progress(len(stream)),
        on_teacher_call=logged,
    )
    summary = result.summary()
    if args.plot:
        _plot(result, args.plot)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        agreement = summary["automatic_agreement"]
        agreed = "—" if agreement is None else f"{100 * agreement:.1f} %"
        print(
            f"{len(stream)} items: teacher asked {100 * summary['teacher_share']:.1f} % "
            f"(last 1,000: {100 * summary['teacher_share_last']:.1f} %), automatic "
            f"{100 * summary['automatic_share']:.1f} % agreeing with the labels {agreed}, "
            f"final answers right {100 * summary['accuracy']:.1f} %; first automatic answer at item "
            f"{summary['first_automatic_item']}; {summary['retrains']} retrains"
        )
    return 0


def _progress(total: int) -> Any:
    from tqdm import tqdm

    bar = tqdm(total=total, unit="item", disable=not sys.stderr.isatty())
    return lambda i: bar.update(1)


def _plot(result: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    window = max(1, min(200, len(result.lanes) // 10))
    share = np.convolve(result.teacher_calls.astype(float), np.ones(window) / window, mode="valid")
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(np.arange(len(share)) + window, share)
    ax.set_xlabel("item")
    ax.set_ylabel(f"teacher-call share ({window}-item mean)")
    ax.set_ylim(0, 1.05)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
