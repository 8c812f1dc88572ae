"""clef_agents: a local, calibrated decision gate for LangGraph and LangChain.

The public API is imported lazily, so ``import clef_agents`` never loads torch, transformers
or peft; ``ClefDecisionModel`` pulls them in on first use. ``load_model(spec)`` turns a model spec
(``"mini"``, a checkpoint folder, an ``http(s)://`` server, ``"fake"``...) into a decision model.

Example:
    >>> import clef_agents
    >>> clef_agents.__version__
    '0.1.0'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from clef_agents.lazy import lazy_attributes

__version__ = "0.1.0"

if TYPE_CHECKING:
    from clef_agents.loading import load_model
    from clef_agents.model import ClefDecisionModel
    from clef_agents.policy import LanePolicy
    from clef_agents.serve.remote import RemoteDecisionModel
    from clef_agents.testing import FakeDecisionModel
    from clef_agents.wire import InvalidRequestError

_dynamic_imports: dict[str, str] = {
    "ClefDecisionModel": "clef_agents.model",
    "FakeDecisionModel": "clef_agents.testing",
    "InvalidRequestError": "clef_agents.wire",
    "LanePolicy": "clef_agents.policy",
    "load_model": "clef_agents.loading",
    "RemoteDecisionModel": "clef_agents.serve.remote",
}

__all__ = ["__version__", *_dynamic_imports]


__getattr__, __dir__ = lazy_attributes(__name__, _dynamic_imports, globals())
