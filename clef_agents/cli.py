"""The ``clef-agents`` command line: one entry point, subcommands registered by their modules.

Each subcommand lives beside the code it drives and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` (a callable taking the parsed args and returning an exit code).
Modules are imported only when listed here, and each keeps heavy imports inside ``func``.

Errors print as one line, ``clef-agents COMMAND: error: ...``, with exit status 2 for bad input
(a value, file or flag the command cannot use) and 1 for anything else (a server out of reach, a
failure while running); ``--traceback`` shows the full trace instead.

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
    "clef_agents.autopilot.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every registered subcommand."""
    from clef_agents import __version__  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="clef-agents", description="Local decision models for LangGraph agents.")
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version and exit"
    )
    parser.add_argument("--traceback", action="store_true", help="on an error, show the full Python traceback")
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
    """Run the CLI; returns the process exit code (see the module docstring for errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001  (one line for the user; --traceback for the trace)
        if args.traceback:
            raise
        print(f"clef-agents {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, (ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError)) else 1


def error_line(exc: BaseException) -> str:
    """One line for an error: the message alone for input errors, else prefixed with its type.

    Example:
        >>> error_line(ValueError("--prior takes LABEL=SHARE"))
        '--prior takes LABEL=SHARE'
        >>> error_line(RuntimeError("out of memory"))
        'RuntimeError: out of memory (rerun with clef-agents --traceback for details)'
    """
    message = " ".join(str(exc).split()) or repr(exc)
    if isinstance(exc, (ValueError, FileNotFoundError, ConnectionError)):
        return message
    return f"{type(exc).__name__}: {message} (rerun with clef-agents --traceback for details)"


if __name__ == "__main__":
    sys.exit(main())
