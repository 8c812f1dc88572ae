"""The tool gate's teaching, blend and policy-choice records, written for ``clef-agents teach``.

``teach.jsonl`` holds the gate's teaching records (``clef_agents.train.gate_records``) and the calls of the
check sets taught since gate v7 (``TAUGHT_SETS``); ``policy.jsonl`` the records kept out of teaching, on which
the lane policy is chosen; ``blend.jsonl`` check sets 1–3 in the teaching layout, for ``--valid-records`` (the
blend is fitted on them and, with ``--no-refit``, nothing else is). Test splits and held-out sets are never read.
The check sets are the benchmark's hand-written calls (``bench/gate``), so their folder is an argument.

Example:
    $ clef-agents gate-records --check-sets bench/gate --out runs/gate_records
    $ python -m clef_agents.train.gate_recipe --check-sets bench/gate --out runs/gate_records
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BLEND_SETS = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json")
"""Check sets the gate's blend is fitted on (``--valid-records``)."""
TAUGHT_SETS = ("everyday_calls_5.json", "everyday_calls_6.json", "everyday_calls_7.json", "everyday_calls_8.json")
"""Check sets taught since v7: every version that was to be measured on them has been."""
KEPT_APART = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json", "everyday_calls_4.json",
              "everyday_calls_9.json", "everyday_calls_10.json", "everyday_calls_11.json", "everyday_calls_12.json")
"""The untaught check sets that existed when v7 was taught: no call of theirs is taught. A set written later (13, 14)
joins this list in the version that is measured on it (set 14 shares three calls with sets 6 and 7)."""


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
    return [r for name in TAUGHT_SETS
            for r in call_records([c for c in load_calls(folder / name) if call_signature(c) not in untaught], source=name)]


def gate_record_parts(check_sets: str | Path) -> dict[str, list[dict[str, Any]]]:
    """``{"teach": ..., "policy": ..., "blend": ...}``: every part ``write_gate_records`` writes."""
    from clef_agents.train.gate_calls import call_records, load_calls
    from clef_agents.train.gate_records import build_gate_records

    folder = Path(check_sets)
    parts = build_gate_records()
    parts["teach"] += taught_check_calls(folder)
    parts["blend"] = [r for name in BLEND_SETS
                      for r in call_records(load_calls(folder / name), source=name, dataset="everyday_checks")]
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


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command's options (shared by ``clef-agents gate-records`` and ``python -m``)."""
    parser.add_argument("--out", type=Path, required=True, help="folder to write teach.jsonl, policy.jsonl and blend.jsonl in")
    parser.add_argument("--check-sets", type=Path, required=True,
                        help="folder holding the gate's check sets (everyday_calls*.json; the repository's bench/gate)")
    return parser


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``gate-records`` subcommand."""
    parser = subparsers.add_parser("gate-records", help="write the tool gate's teaching, blend and policy-choice records")
    add_arguments(parser).set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    write_gate_records(args.out, args.check_sets)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m clef_agents.train.gate_recipe``: the same as ``clef-agents gate-records``."""
    parser = add_arguments(argparse.ArgumentParser(description=__doc__.split("\n")[0]))
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
