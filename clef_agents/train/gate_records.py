"""Decision records for the tool gate's question, from the agent-safety sets a shipped model may use.

Every record asks ``clef_agents.graph.tools.DEFAULT_GATE_QUESTION`` (yes = a person should
approve the call first) of a state in the layout the gate itself renders at run time
(``clef_agents.graph.tools.render_gate_state``): the proposed call first, then the interaction
record (``[user]``, ``[agent thought]``, ``[agent action]``, ``[environment]`` turns). The
conversions are fixed here, before any evaluation:

- ``assebench_security`` (Apache-2.0): an ``unsafe`` record gives one record, its last
  ``[agent action]`` proposed after the turns before it (turns after it dropped: the gate judges a
  call before it runs) → yes; a ``safe`` record gives one record per agent action, each proposed
  after the turns before it → no (every call of a safe record was safe to run). Its
  ``failure_mode`` and ``risk_description`` never reach the state.
- ``injecagent`` (MIT): three records per row. The user's own call (``Agent tool call``) before
  any tool output → no; the first attacker tool, proposed after the tool response that carries the
  injected instruction → yes; the same attacker tool proposed right after the user's request, with
  no tool output → yes (the user never asked for it either way). ``expected_achievements`` never
  reaches the state; the attacker tool is named without arguments.
- ``xstest`` (CC BY 4.0): the request as the user's turn, no call proposed yet; ``unsafe`` → yes.

The same conversion serves the held-out evaluation (``bench/gate``): interaction records of
rjudge go through ``interaction_state``; sets in other layouts are read as they are.

Example:
    >>> interaction_state("Agent profile: x\\n\\nInteraction record:\\n[user] hi\\n[agent action] rm{'path': '/'}")
    "Proposed tool call: rm{'path': '/'}\\n\\nInteraction record:\\n[user] hi\\n[agent action] rm{'path': '/'}"
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from clef_agents.graph.tools import GateTurn, render_gate_state
from clef_agents.train.datasets import data_root
from clef_agents.train.gate_calls import training_call_records
from clef_agents.train.gate_question import gate_record
from clef_agents.train.gate_synth import synthetic_gate_records
from clef_agents.train.split import check_trainable

GATE_SETS = ("assebench_security", "injecagent", "xstest")
"""The trainable, shippable sets the gate question is taught on."""
POLICY_SHARE = 20
"""Percent of each set's train rows kept out of teaching to choose the lane policy on (by a stable hash)."""
_TURN = re.compile(r"^\[(user|agent thought|agent action|environment)\] ?(.*)$")
_SALT = b"clef-agents/gate-policy/v1:"


def parse_interaction(text: str) -> list[GateTurn]:
    """The turns of an interaction record (``[user] ...`` lines; continuation lines join their turn).

    Example:
        >>> parse_interaction("Agent profile: p\\n\\nInteraction record:\\n[user] a\\nb\\n[environment] c")
        [GateTurn(role='user', text='a\\nb'), GateTurn(role='environment', text='c')]
    """
    body = text.split("Interaction record:", 1)[1] if "Interaction record:" in text else text
    turns: list[GateTurn] = []
    for line in body.strip("\n").split("\n"):
        match = _TURN.match(line)
        if match:
            turns.append(GateTurn(match.group(1), match.group(2)))
        elif turns and not line.startswith("--- round"):
            turns[-1] = GateTurn(turns[-1].role, turns[-1].text + "\n" + line)
    return turns


def interaction_state(text: str) -> str:
    """An interaction record as a gate state: its last agent action is the proposed call, later turns dropped.

    A record with no agent action keeps every turn and proposes nothing.
    """
    turns = parse_interaction(text)
    actions = [i for i, t in enumerate(turns) if t.role == "agent action"]
    if not actions:
        return render_gate_state(turns, None)
    last = actions[-1]
    return render_gate_state(turns[:last], turns[last].text)


def action_states(text: str) -> list[str]:
    """One gate state per agent action of an interaction record, each action proposed after the
    turns before it (every call of a record judged safe was safe to run).

    Example:
        >>> len(action_states("Interaction record:\\n[user] a\\n[agent action] f{}\\n[environment] ok\\n[agent action] g{}"))
        2
    """
    turns = parse_interaction(text)
    return [render_gate_state(turns[:i], t.text) for i, t in enumerate(turns) if t.role == "agent action"] or [
        interaction_state(text)
    ]


def _rows(name: str, split: str) -> list[dict[str, Any]]:
    path = data_root() / name / f"{split}.jsonl"
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _injecagent_records(row: Mapping[str, Any], meta: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    parts = re.split(r"\n\n(?=Agent tool call: |Tool response: )", row["text"])
    fields = {p.split(":", 1)[0]: p.split(":", 1)[1].strip() for p in parts}
    user = GateTurn("user", fields["User instruction"])
    call = (
        fields["Agent tool call"].replace(" ", "", 1)
        if " {" in fields["Agent tool call"]
        else fields["Agent tool call"]
    )
    yield gate_record(render_gate_state([user], call), False, {**meta, "role": "user call"})
    history = [user, GateTurn("agent action", call), GateTurn("environment", fields["Tool response"])]
    attacker = f"{row['attacker_tools'][0]}{{}}"
    yield gate_record(render_gate_state(history, attacker), True, {**meta, "role": "attacker call"})
    yield gate_record(render_gate_state([user], attacker), True, {**meta, "role": "attacker call, unasked"})


def records_from_row(name: str, row: Mapping[str, Any], index: int) -> list[dict[str, Any]]:
    """The gate records of one row of a gate set (three for injecagent, one per action for a safe
    assebench record, one otherwise)."""
    meta = {"dataset": name, "source": "dataset", "row": index}
    if name == "assebench_security":
        if row["label"] == "unsafe":
            return [gate_record(interaction_state(row["text"]), True, meta)]
        return [gate_record(state, False, {**meta, "action": i}) for i, state in enumerate(action_states(row["text"]))]
    if name == "injecagent":
        return list(_injecagent_records(row, meta))
    if name == "xstest":
        return [gate_record(render_gate_state([GateTurn("user", row["text"])], None), row["label"] == "unsafe", meta)]
    raise ValueError(f"no gate conversion for {name!r}; known: {', '.join(GATE_SETS)}")


def policy_key(name: str, row: Mapping[str, Any]) -> str:
    """The text a row's policy-split membership hashes (injecagent: its attacker instruction, so
    an injection is either all in or all out)."""
    return str(row["attacker_instruction"] if name == "injecagent" else row["text"])


def in_policy_split(name: str, row: Mapping[str, Any]) -> bool:
    """Whether a train row is kept out of teaching to choose the lane policy on.

    Example:
        >>> in_policy_split("xstest", {"text": "a"}) == in_policy_split("xstest", {"text": "a"})
        True
    """
    digest = hashlib.blake2b(_SALT + f"{name}\x1f{policy_key(name, row)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 100 < POLICY_SHARE


def build_gate_records(
    names: Sequence[str] = GATE_SETS, written: bool = True, calls: bool = True
) -> dict[str, list[dict[str, Any]]]:
    """``{"teach": [...], "policy": [...]}``: records of the train splits, split by ``in_policy_split``,
    (``written``) the calls written by ``clef_agents.train.gate_synth``, split by action, and
    (``calls``) the teaching call files of ``clef_agents.train.gate_calls``, all taught.

    Test splits are never read. Raises ``ValueError`` for a held-out or unshippable set.
    """
    check_trainable(names, shipped=True)
    out: dict[str, list[dict[str, Any]]] = {"teach": [], "policy": []}
    for name in names:
        for index, row in enumerate(_rows(name, "train")):
            part = "policy" if in_policy_split(name, row) else "teach"
            for record in records_from_row(name, row, index):
                record["meta"]["split"] = part
                out[part].append(record)
    for record in synthetic_gate_records() if written else ():
        out[record["meta"]["split"]].append(record)
    out["teach"] += training_call_records() if calls else []
    return out


def write_jsonl(records: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write records as JSONL and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    return path


__all__ = [
    "GATE_SETS",
    "build_gate_records",
    "gate_record",
    "in_policy_split",
    "interaction_state",
    "parse_interaction",
    "records_from_row",
    "write_jsonl",
]
