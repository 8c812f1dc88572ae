"""Support triage, served by `cd graphs && langgraph dev`.

The decision model comes from $CLEF_AGENTS_MODEL ("mini" by default, "fake-keywords" for the keyword-scripted
fake); the escalation LLM is a scripted fake. Lane policy: $CLEF_AGENTS_POLICY; traces:
$CLEF_AGENTS_TRACES (default ~/.cache/clef_agents/traces.sqlite).
"""

from clef_agents.graph.ready import build_support_triage, demo_escalation_llm, served_settings

_settings = served_settings()
graph = build_support_triage(
    _settings["model"], chat_model=demo_escalation_llm(), policy=_settings["policy"], traces=_settings["traces"]
)
