"""``clef-agents traces``: inspect a decision-trace SQLite file and export it as training records.

Example:
    $ clef-agents traces export runs/traces.sqlite --out records.jsonl --source llm,human
    $ clef-agents traces show runs/traces.sqlite
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``traces export`` and ``traces show``."""
    parser = subparsers.add_parser("traces", help="inspect or export decision traces (SQLite)")
    commands = parser.add_subparsers(dest="traces_command", metavar="ACTION", required=True)

    export = commands.add_parser("export", help="write decision records (JSONL) for training")
    export.add_argument("db", type=Path, help="trace store (SQLite file)")
    export.add_argument("--out", type=Path, required=True, help="output JSONL file")
    export.add_argument("--source", default="auto,llm,human", help="comma-separated sources to keep (default: all)")
    export.add_argument("--dataset", default=None, help="meta.dataset of every record (default: traces/<gate>)")
    export.add_argument("--split", default="traces", help="meta.split of every record (default: traces)")
    export.set_defaults(func=_export)

    show = commands.add_parser("show", help="count decisions by gate, lane and source")
    show.add_argument("db", type=Path, help="trace store (SQLite file)")
    show.set_defaults(func=_show)


def _open(db: Path):
    from clef_agents.graph.traces import TraceStore

    if not db.is_file():
        raise FileNotFoundError(f"trace store not found: {db}")
    return TraceStore(db)


def _export(args: argparse.Namespace) -> int:
    store = _open(args.db)
    sources = [s.strip() for s in args.source.split(",") if s.strip()]
    records = store.export_records(args.out, sources=sources, dataset=args.dataset, split=args.split)
    counts = Counter(r["meta"]["source"] for r in records)
    print(f"wrote {len(records)} records to {args.out} (by source: {dict(counts)})")
    return 0


def _show(args: argparse.Namespace) -> int:
    store = _open(args.db)
    decisions = store.decisions()
    lanes = Counter((d["gate"], qid, item.get("lane")) for d in decisions for qid, item in d["route"].items())
    sources = Counter((d["gate"], o["source"]) for d in decisions for o in d["outcomes"].values())
    summary = {
        "decisions": len(decisions),
        "lanes": [{"gate": g, "question": q, "lane": lane, "count": n} for (g, q, lane), n in sorted(lanes.items())],
        "outcomes": [{"gate": g, "source": s, "count": n} for (g, s), n in sorted(sources.items())],
        "open": sum(1 for d in decisions for qid in d["questions"] if qid not in d["outcomes"]),
    }
    print(json.dumps(summary, indent=2))
    return 0
