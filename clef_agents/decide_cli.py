"""``clef-agents decide``: ask a decision model questions about a state from the shell.

State comes from ``--state``, ``--state-file`` or stdin; questions from a JSON/YAML file
(``--questions``) and/or inline flags (``--noul``, ``--choice``, ``--score``), each question id
once. Answers print as a table, or as System One JSON with ``--json``. ``--model`` takes any spec
of ``clef_agents.loading.load_model``.

Example:
    $ echo "I was charged twice" | clef-agents decide --noul "refund=Does the customer want money back?" \\
          --choice "team=billing,technical,sales"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from clef_agents import wire
from clef_agents.loading import MODEL_HELP, load_model, spec_kind

API_KEY_ENV = "CLEF_API_KEY"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``decide`` subcommand."""
    parser = subparsers.add_parser(
        "decide",
        help="answer typed questions about a state (one prefill pass)",
        description="Answer typed questions about a state. Each question id may appear once, across "
        "--questions and the inline flags.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--state", help="the state as text (or JSON with --state-json); an empty string is a valid state"
    )
    source.add_argument("--state-file", help="read the state from this file ('-' for stdin)")
    parser.add_argument("--state-json", action="store_true", help="parse the state as JSON (object or array)")
    parser.add_argument("--questions", help="JSON or YAML file: {id: {type, instructions, criteria}}")
    parser.add_argument(
        "--noul", action="append", default=[], metavar="ID=QUESTION", help="a yes/no question (repeatable)"
    )
    parser.add_argument(
        "--choice",
        action="append",
        default=[],
        metavar="ID=OPT1,OPT2[:QUESTION]",
        help="a choice among options (repeatable)",
    )
    parser.add_argument(
        "--score",
        action="append",
        default=[],
        metavar="ID=L0|L1|...[:QUESTION]",
        help="an ordinal rubric, levels from lowest to highest (repeatable)",
    )
    parser.add_argument("--model", default="mini", help=f"{MODEL_HELP} (default mini)")
    parser.add_argument(
        "--api-key", default=None, help=f"bearer key for a remote System One server (default: ${API_KEY_ENV} if set)"
    )
    parser.add_argument("--json", action="store_true", help="print the System One response JSON")
    parser.set_defaults(func=run)


def parse_inline_questions(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Questions from ``--noul/--choice/--score`` flags as System One JSON; an id given twice is an error.

    Example:
        >>> ns = argparse.Namespace(noul=["spam=Is it spam?"], choice=["team=a,b:Which team?"], score=[])
        >>> parse_inline_questions(ns)["team"]["criteria"]
        {'a': None, 'b': None}
    """
    questions: dict[str, dict[str, Any]] = {}
    for spec in args.noul:
        qid, text = _split_id(spec, "--noul")
        _add_question(questions, qid, {"type": "noul", "instructions": text}, "--noul")
    for spec in args.choice:
        qid, rest = _split_id(spec, "--choice")
        options, _, text = rest.partition(":")
        criteria = {o.strip(): None for o in options.split(",") if o.strip()}
        _add_question(
            questions,
            qid,
            {"type": "choice", "instructions": text or f"Which {qid} applies?", "criteria": criteria},
            "--choice",
        )
    for spec in args.score:
        qid, rest = _split_id(spec, "--score")
        levels, _, text = rest.partition(":")
        criteria = [level.strip() for level in levels.split("|") if level.strip()]
        _add_question(
            questions, qid, {"type": "score", "instructions": text or f"Rate {qid}.", "criteria": criteria}, "--score"
        )
    return questions


def merge_questions(from_file: dict[str, Any], inline: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """The file's questions and the inline ones together; an id in both is an error.

    Example:
        >>> merge_questions({"a": {"type": "noul"}}, {"b": {"type": "noul"}})
        {'a': {'type': 'noul'}, 'b': {'type': 'noul'}}
    """
    clash = [qid for qid in inline if qid in from_file]
    if clash:
        raise ValueError(
            f"question id {clash[0]!r} is given both in {path or '--questions'} and by an inline flag; "
            "each question id may appear once"
        )
    return {**from_file, **inline}


def _add_question(questions: dict[str, dict[str, Any]], qid: str, question: dict[str, Any], flag: str) -> None:
    if qid in questions:
        raise ValueError(
            f"{flag}: question id {qid!r} is given twice; each question id may appear once "
            "(give each question its own id)"
        )
    questions[qid] = question


def _split_id(spec: str, flag: str) -> tuple[str, str]:
    qid, sep, rest = spec.partition("=")
    if not sep or not qid.strip() or not rest.strip():
        raise ValueError(f"{flag} expects ID=VALUE, got {spec!r}")
    return qid.strip(), rest.strip()


def load_questions_file(path: str) -> dict[str, Any]:
    """Questions from a JSON or YAML file; one that does not parse is a ``ValueError`` naming the
    file and the line. YAML keys are read as written: ``true:``, ``no:`` or ``1:`` stay strings
    (a noul's ``criteria: {true: ..., false: ...}``, options named ``yes``/``no``), where YAML
    would make them booleans and numbers. ``examples/questions.yaml`` shows each question type.

    Example:
        >>> load_questions_file("missing.yaml")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        FileNotFoundError: questions file not found: missing.yaml
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"questions file not found: {path}")
    text = file.read_text()
    data = _parse_yaml(path, text) if path.endswith((".yaml", ".yml")) else _parse_json(path, text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of id → question, got {type(data).__name__}")
    return data.get("questions", data) if isinstance(data.get("questions"), dict) else data


def _parse_yaml(path: str, text: str) -> Any:
    import yaml  # noqa: PLC0415

    class KeysAsWritten(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode):
                    key.tag = "tag:yaml.org,2002:str"
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=KeysAsWritten)  # noqa: S506 — a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{path}: not valid YAML{where}: {problem}") from None


def _parse_json(path: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def read_state(args: argparse.Namespace) -> Any:
    """The state from --state, --state-file or stdin (parsed as JSON with --state-json).

    An empty string is a valid state, as on the wire: System One accepts any string and the server
    answers it. Only having no state at all (no flag and nothing piped) is an error.
    """
    if args.state is not None:
        text = args.state
    elif args.state_file and args.state_file != "-":
        if not Path(args.state_file).is_file():
            raise FileNotFoundError(f"state file not found: {args.state_file}")
        text = Path(args.state_file).read_text()
    elif args.state_file == "-" or not sys.stdin.isatty():
        text = sys.stdin.read()
    else:
        raise ValueError("no state given: use --state, --state-file, or pipe text on stdin")
    if not args.state_json:
        return text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"--state-json: the state is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None


def format_table(response: Any) -> str:
    """Answers as an aligned text table: question, answer, ``p(answer)`` and the distribution.

    ``p(answer)`` is the probability of the answer shown, for every type (the number lanes act on,
    ``wire.decision_probability``), so it reads the same as the distribution beside it: a yes/no
    answer ``no`` at 0.540 has ``yes=0.460, no=0.540``. A score's answer is its most probable level,
    with the expected level ``score``. SPEC confidences are in ``--json``.

    Example:
        >>> from langchain_core.decisions import NoulAnswer
        >>> response = wire.DecisionResponse(model="m", answers={"urgent": NoulAnswer(type="noul", noul=0.46)}, usage={})
        >>> print(format_table(response))
        question  answer  p(answer)  distribution
        --------  ------  ---------  -------------------
        urgent    no      0.540      yes=0.460, no=0.540
    """
    rows = [("question", "answer", "p(answer)", "distribution")]
    for qid, answer in response.answers.items():
        label, p = wire.decided_label(answer), wire.decision_probability(answer)
        if answer.type == "noul":
            top = [("yes", answer.noul), ("no", 1.0 - answer.noul)]
        else:
            top = sorted(answer.probabilities.items(), key=lambda kv: -kv[1])[:3]
        if answer.type == "score":
            label = f"{label} (score {answer.score:.2f})"
        rows.append((qid, label, f"{p:.3f}", ", ".join(f"{k}={v:.3f}" for k, v in top)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run one decision and print it."""
    questions = merge_questions(
        load_questions_file(args.questions) if args.questions else {}, parse_inline_questions(args), args.questions
    )
    if not questions:
        raise ValueError("no questions: give --questions FILE or at least one --noul, --choice or --score")
    typed = wire.validate_questions(questions)
    state = read_state(args)
    wire.check_state(state)
    if state == "":
        print("note: the state is empty; it is answered like any other (as the server does)", file=sys.stderr)
    model = load_model(args.model, api_key=args.api_key or os.environ.get(API_KEY_ENV) or None)
    response = _invoke(model, args.model, {"state": state, "questions": typed})
    if args.json:
        print(json.dumps(wire.response_to_wire(response), indent=2, ensure_ascii=False))
    else:
        print(format_table(response))
        truncation = getattr(response, "extensions", {}).get("x_truncation")
        if truncation and truncation.get("truncated"):
            print(
                f"\nnote: the state was truncated ({truncation['dropped_tokens']} of {truncation['state_tokens']} tokens dropped, policy {truncation['policy']})"
            )
    return 0


def _invoke(model: Any, spec: str, request: dict[str, Any]) -> Any:
    """``model.invoke(request)``; a remote server that cannot be reached is a ``ConnectionError`` naming it."""
    if spec_kind(spec) != "remote":
        return model.invoke(request)
    import httpx  # noqa: PLC0415

    try:
        return model.invoke(request)
    except httpx.TransportError as exc:
        raise ConnectionError(
            f"cannot reach the System One server at {spec} ({type(exc).__name__}: {exc}); "
            "is `clef-agents serve` running there?"
        ) from None
