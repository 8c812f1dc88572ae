"""Content-moderation gate, served by `cd graphs && langgraph dev`.

Input: {"post": "..."}; output: "verdict" ("published" or "rejected"); unsure posts wait for a
moderator (interrupt). Model, policy and traces are chosen as in support_triage.py.
"""

from clef_agents.graph.ready import build_moderation, served_settings

_settings = served_settings()
graph = build_moderation(_settings["model"], policy=_settings["policy"], traces=_settings["traces"])
