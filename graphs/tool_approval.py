"""Tool-call approval for an agent, served by `cd graphs && langgraph dev`.

The agent is a scripted fake that proposes one demo tool call per user message; every call is
judged by the decision model first (run, wait for approval, or refuse).
"""

from clef_agents.graph.ready import build_tool_approval, served_settings

_settings = served_settings()
graph = build_tool_approval(_settings["model"], traces=_settings["traces"])
