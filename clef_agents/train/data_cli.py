"""``clef-agents data``: convert the shared sets to decision records, validate record files.

Example:
    $ clef-agents data list
    $ clef-agents data convert banking77 --split train --out runs/banking77.train.jsonl
    $ clef-agents data validate runs/banking77.train.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def register(subparsers: Any) -> None:
    """Add ``data list | convert | validate`` to the ``clef-agents`` parser."""
    parser = subparsers.add_parser("data", help="convert shared data sets to decision records; validate record files")
    actions = parser.add_subparsers(dest="data_command", metavar="ACTION")

    listing = actions.add_parser("list", help="the convertible data sets with kind, question, splits and licence")
    listing.set_defaults(func=_list)

    convert = actions.add_parser("convert", help="write one split of a data set as decision records (JSONL)")
    convert.add_argument("name", help="data set name (see `clef-agents data list`)")
    convert.add_argument("--split", required=True, choices=("train", "valid", "test"), help="which split to write")
    convert.add_argument("--out", help="output JSONL file (default: standard output)")
    convert.add_argument("--limit", type=int, help="a seeded random sample of this many records")
    convert.add_argument("--seed", type=int, default=0, help="seed of the --limit sample (default 0)")
    convert.set_defaults(func=_convert)

    validate = actions.add_parser("validate", help="check a record file: illegal labels and class balance")
    validate.add_argument("file", help="JSONL decision records")
    validate.add_argument("--max-errors", type=int, default=50, help="errors to print (default 50)")
    validate.add_argument("--json", action="store_true", help="print the full report as JSON")
    validate.set_defaults(func=_validate)

    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _list(args: argparse.Namespace) -> int:
    from clef_agents.train.datasets import DATASETS, available_splits

    print(f"{'name':<16} {'kind':<7} {'question':<12} {'splits':<18} licence")
    for name, spec in DATASETS.items():
        try:
            splits = ",".join(available_splits(name))
        except FileNotFoundError:
            splits = "(no data)"
        print(f"{name:<16} {spec.kind:<7} {spec.question_id:<12} {splits:<18} {spec.licence}")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from clef_agents.records import write_records
    from clef_agents.train.datasets import DATASETS, load_records

    if args.name not in DATASETS:
        raise ValueError(f"unknown data set {args.name!r}; known: {', '.join(DATASETS)}")
    records = load_records(args.name, args.split, limit=args.limit, seed=args.seed)
    if args.out:
        count = write_records(args.out, records)
        print(f"wrote {count} {args.name} {args.split} records to {args.out}", file=sys.stderr)
    else:
        try:
            for record in records:
                sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        except BrokenPipeError:  # the reader (e.g. `head`) stopped early: not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _validate(args: argparse.Namespace) -> int:
    from clef_agents.records import iter_records, validate_records

    report = validate_records(iter_records(args.file))
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
        return 0 if report.ok else 1
    invalid = len(report.invalid_records)
    print(f"{args.file}: {report.n_records} records, {invalid} invalid")
    if report.errors:
        print()
        print(report.format_errors(args.max_errors))
    print()
    print("class balance (valid records):")
    print(report.format_balance())
    return 0 if report.ok else 1
