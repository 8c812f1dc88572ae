"""The ``clef-agents`` command line: one entry point, subcommands registered by their modules.

Each subcommand lives beside the code it drives and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (a callable taking the parsed args and returning an exit code).
Modules are imported only when listed here, and each keeps heavy imports inside ``func``.

Example:
    $ clef-agents decide --state "my card was stolen" --choice intent=lost_card,refund
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES = (
    "clef_agents.decide_cli",
    "clef_agents.train.data_cli",
    "clef_agents.graph_cli",
    "clef_agents.train.cli",
    "clef_agents.serve.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="clef-agents", description="Local decision models for LangGraph agents.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("clef_agents"):
                continue  # a subcommand whose module is not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError) as exc:
        print(f"clef-agents {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
