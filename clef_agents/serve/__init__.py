"""Serving: the System One server, the remote client, and the Ray Serve deployment.

Imports are lazy, so ``from clef_agents.serve import RemoteDecisionModel`` needs only httpx, and
the server pulls in starlette only when it is used.

Example:
    >>> from clef_agents.serve import RemoteDecisionModel
    >>> RemoteDecisionModel(base_url="http://127.0.0.1:8000").model
    'jev-latest'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clef_agents.lazy import lazy_attributes

if TYPE_CHECKING:
    from clef_agents.serve.app import ServerSettings, create_app
    from clef_agents.serve.batcher import MicroBatcher
    from clef_agents.serve.local import free_port, serve_in_thread
    from clef_agents.serve.models import load_model
    from clef_agents.serve.remote import RemoteDecisionModel, SystemOneHTTPError

_dynamic_imports: dict[str, str] = {
    "create_app": "clef_agents.serve.app",
    "ServerSettings": "clef_agents.serve.app",
    "MicroBatcher": "clef_agents.serve.batcher",
    "load_model": "clef_agents.serve.models",
    "RemoteDecisionModel": "clef_agents.serve.remote",
    "serve_in_thread": "clef_agents.serve.local",
    "free_port": "clef_agents.serve.local",
    "SystemOneHTTPError": "clef_agents.serve.remote",
}

__all__ = list(_dynamic_imports)


__getattr__, __dir__ = lazy_attributes(__name__, _dynamic_imports, globals())
