"""The lane vocabulary, declared once: who decides (``auto`` / ``llm`` / ``human``) and what the
tool gate does with a call (``allow`` / ``hold`` / ``block``).

Lane policies, graph state, decision traces and the tool gate all import these names.

Example:
    >>> LANES, GATE_ACTIONS
    (('auto', 'llm', 'human'), ('allow', 'hold', 'block'))
    >>> GATE_ACTION_LANE["hold"]
    'human'
"""

from __future__ import annotations

from typing import Literal, get_args

Lane = Literal["auto", "llm", "human"]
"""Who gives a question its final answer: the model alone, an LLM, or a person."""
LANES: tuple[Lane, ...] = get_args(Lane)

GateAction = Literal["allow", "hold", "block"]
"""What the tool gate does with a proposed call: run it, wait for a person, or refuse it."""
GATE_ACTIONS: tuple[GateAction, ...] = get_args(GateAction)

GATE_ACTION_LANE: dict[GateAction, Lane] = {"allow": "auto", "block": "auto", "hold": "human"}
"""The lane each gate action puts a call in (a held call is decided by a person)."""


def check_lane(value: str) -> Lane:
    """``value`` when it is a lane, else ``ValueError`` naming the allowed ones.

    Example:
        >>> check_lane("llm")
        'llm'
    """
    if value not in LANES:
        raise ValueError(f"lane must be one of {', '.join(LANES)}, got {value!r}")
    return value  # type: ignore[return-value]
