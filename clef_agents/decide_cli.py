"""``clef-agents decide``: ask a decision model questions about a state from the shell.

State comes from ``--state``, ``--state-file`` or stdin; questions from a JSON/YAML file
(``--questions``) and/or inline flags (``--noul``, ``--choice``, ``--score``). Answers print as a
table, or as System One JSON with ``--json``.

Example:
    $ echo "I was charged twice" | clef-agents decide --noul "refund=Does the customer want money back?" \\
          --choice "team=billing,technical,sales"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from clef_agents import wire


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``decide`` subcommand."""
    parser = subparsers.add_parser("decide", help="answer typed questions about a state (one prefill pass)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--state", help="the state as text (or JSON with --state-json)")
    source.add_argument("--state-file", help="read the state from this file ('-' for stdin)")
    parser.add_argument("--state-json", action="store_true", help="parse the state as JSON (object or array)")
    parser.add_argument("--questions", help="JSON or YAML file: {id: {type, instructions, criteria}}")
    parser.add_argument("--noul", action="append", default=[], metavar="ID=QUESTION", help="a yes/no question")
    parser.add_argument("--choice", action="append", default=[], metavar="ID=OPT1,OPT2[:QUESTION]", help="a choice among options")
    parser.add_argument("--score", action="append", default=[], metavar="ID=L0|L1|...[:QUESTION]", help="an ordinal rubric")
    parser.add_argument("--model", default="mini", help="checkpoint folder, 'mini', 'fake', or a System One URL (http...)")
    parser.add_argument("--api-key", default=None, help="bearer key for a remote System One server")
    parser.add_argument("--json", action="store_true", help="print the System One response JSON")
    parser.set_defaults(func=run)


def parse_inline_questions(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Questions from ``--noul/--choice/--score`` flags as System One JSON.

    Example:
        >>> ns = argparse.Namespace(noul=["spam=Is it spam?"], choice=["team=a,b:Which team?"], score=[])
        >>> parse_inline_questions(ns)["team"]["criteria"]
        {'a': None, 'b': None}
    """
    questions: dict[str, dict[str, Any]] = {}
    for spec in args.noul:
        qid, text = _split_id(spec, "--noul")
        questions[qid] = {"type": "noul", "instructions": text}
    for spec in args.choice:
        qid, rest = _split_id(spec, "--choice")
        options, _, text = rest.partition(":")
        questions[qid] = {"type": "choice", "instructions": text or f"Which {qid} applies?",
                          "criteria": {o.strip(): None for o in options.split(",") if o.strip()}}
    for spec in args.score:
        qid, rest = _split_id(spec, "--score")
        levels, _, text = rest.partition(":")
        questions[qid] = {"type": "score", "instructions": text or f"Rate {qid}.",
                          "criteria": [level.strip() for level in levels.split("|") if level.strip()]}
    return questions


def _split_id(spec: str, flag: str) -> tuple[str, str]:
    qid, sep, rest = spec.partition("=")
    if not sep or not qid.strip() or not rest.strip():
        raise ValueError(f"{flag} expects ID=VALUE, got {spec!r}")
    return qid.strip(), rest.strip()


def load_questions_file(path: str) -> dict[str, Any]:
    """Questions from a JSON or YAML file."""
    text = Path(path).read_text()
    if path.endswith((".yaml", ".yml")):
        import yaml  # noqa: PLC0415

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of id → question, got {type(data).__name__}")
    return data.get("questions", data) if isinstance(data.get("questions"), dict) else data


def read_state(args: argparse.Namespace) -> Any:
    """The state from --state, --state-file or stdin (parsed as JSON with --state-json)."""
    if args.state is not None:
        text = args.state
    elif args.state_file and args.state_file != "-":
        text = Path(args.state_file).read_text()
    elif args.state_file == "-" or not sys.stdin.isatty():
        text = sys.stdin.read()
    else:
        raise ValueError("no state given: use --state, --state-file, or pipe text on stdin")
    if not text.strip():
        raise ValueError("the state is empty")
    return json.loads(text) if args.state_json else text.strip()


def load_model(ref: str, api_key: str | None = None) -> Any:
    """A decision model from a reference: 'fake', an http(s) URL, 'mini' or a checkpoint folder."""
    if ref == "fake":
        from clef_agents.testing import FakeDecisionModel  # noqa: PLC0415

        return FakeDecisionModel()
    if ref.startswith(("http://", "https://")):
        from clef_agents.serve.remote import RemoteDecisionModel  # noqa: PLC0415

        return RemoteDecisionModel(base_url=ref, api_key=api_key)
    from clef_agents.model import ClefDecisionModel  # noqa: PLC0415

    return ClefDecisionModel.from_pretrained(ref)


def format_table(response: Any) -> str:
    """Answers as an aligned text table: question, answer, probability/confidence, distribution."""
    rows = [("question", "answer", "p / conf.", "distribution")]
    for qid, answer in response.answers.items():
        if answer.type == "noul":
            rows.append((qid, wire.decided_label(answer), f"{answer.noul:.3f}", f"p(yes)={answer.noul:.3f}"))
        else:
            top = sorted(answer.probabilities.items(), key=lambda kv: -kv[1])[:3]
            label = answer.choice if answer.type == "choice" else f"{answer.score:.2f}"
            rows.append((qid, str(label), f"{answer.confidence:.3f}", ", ".join(f"{k}={v:.3f}" for k, v in top)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run one decision and print it."""
    questions: dict[str, Any] = load_questions_file(args.questions) if args.questions else {}
    questions.update(parse_inline_questions(args))
    typed = wire.validate_questions(questions)
    state = read_state(args)
    model = load_model(args.model, args.api_key)
    response = model.invoke({"state": state, "questions": typed})
    if args.json:
        print(json.dumps(wire.response_to_wire(response), indent=2, ensure_ascii=False))
    else:
        print(format_table(response))
        truncation = getattr(response, "extensions", {}).get("x_truncation")
        if truncation and truncation.get("truncated"):
            print(f"\nnote: the state was truncated ({truncation['dropped_tokens']} of {truncation['state_tokens']} tokens dropped, policy {truncation['policy']})")
    return 0
