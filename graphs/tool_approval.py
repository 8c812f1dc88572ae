"""Tool-call approval for an agent, served by `cd graphs && langgraph dev`.

Input: {"messages": [{"role": "user", "content": "..."}]}. The agent is a scripted fake that
proposes one demo tool call per user message; the `tool_gate` node judges it with the decision
model and keeps the verdict in state["decisions"]["tool_gate"]; the `tools` node runs it, holds it
for approval (interrupt with LangChain's HITL request; resume with {"decisions": [{"type":
"approve" | "edit" | "reject", ...}]}), or refuses it. `delete_account` always asks (its metadata).
Model and traces are chosen as in support_triage.py.
"""

from clef_agents.graph.ready import build_tool_approval, served_settings

_settings = served_settings()
graph = build_tool_approval(_settings["model"], traces=_settings["traces"])
