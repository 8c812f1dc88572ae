"""Support triage with the autopilot, served by `cd graphs && langgraph dev`.

As `support_triage`, but the gate learns from its teacher (the scripted escalation LLM, and the people who
answer its interrupts) and answers a question alone only once the autopilot has certified it. The autopilot's
store: $CLEF_AGENTS_AUTOPILOT (default ~/.cache/clef_agents/autopilot.sqlite); see it with
`clef-agents autopilot status --store ...`.
"""

import os
from pathlib import Path

from clef_agents.autopilot import Autopilot
from clef_agents.graph.ready import build_support_triage, demo_escalation_llm, served_settings

_settings = served_settings()
_store = os.environ.get("CLEF_AGENTS_AUTOPILOT") or Path.home() / ".cache" / "clef_agents" / "autopilot.sqlite"
graph = build_support_triage(
    _settings["model"],
    chat_model=demo_escalation_llm(),
    policy=_settings["policy"],
    traces=_settings["traces"],
    autopilot=Autopilot(_store),
)
