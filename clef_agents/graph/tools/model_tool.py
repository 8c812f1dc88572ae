"""The decision model as a LangChain tool, so that an agent can ask typed questions itself.

Example:
    >>> from langchain_core.decisions import Noul
    >>> from clef_agents.testing import FakeDecisionModel
    >>> decision_tool(FakeDecisionModel(), {"spam": Noul(instructions="Spam?")}).name
    'decide'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.decisions import BaseDecisionModel
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from clef_agents import wire
from clef_agents.graph.state import response_to_state


class _ToolInput(BaseModel):
    text: str = Field(description="The text (message, ticket, document) to judge.")


def decision_tool(
    model: BaseDecisionModel,
    questions: Mapping[str, Any],
    *,
    name: str = "decide",
    description: str | None = None,
) -> StructuredTool:
    """A LangChain tool that asks the decision model fixed questions about a text.

    Returns ``content_and_artifact``: a one-line summary for the LLM and the System One response
    dict as the artifact (``ToolMessage.artifact``).

    Example:
        >>> from langchain_core.decisions import Noul
        >>> from clef_agents.testing import FakeDecisionModel
        >>> tool = decision_tool(FakeDecisionModel(answers={"spam": 0.9}), {"spam": Noul(instructions="Spam?")})
        >>> tool.invoke({"type": "tool_call", "name": "decide", "args": {"text": "WIN"}, "id": "1"}).content
        'spam: yes (p=0.900)'
    """
    typed = wire.validate_questions(questions)
    asked = "; ".join(f"{qid} ({q.type}): {wire.content_text(q.instructions)}" for qid, q in typed.items())
    description = description or f"Answer typed questions about a text with calibrated probabilities. Asks: {asked}"

    def run(text: str) -> tuple[str, dict[str, Any]]:
        response = model.invoke({"state": text, "questions": typed})
        return summarise(response, typed), response_to_state(response)

    async def arun(text: str) -> tuple[str, dict[str, Any]]:
        response = await model.ainvoke({"state": text, "questions": typed})
        return summarise(response, typed), response_to_state(response)

    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=name,
        description=description,
        args_schema=_ToolInput,
        response_format="content_and_artifact",
    )


def summarise(response: Any, questions: Mapping[str, wire.TextQuestion]) -> str:
    """One line per answer: ``qid: label (p=…)``, joined with ``; ``.

    Example:
        >>> from langchain_core.decisions import ClassifierResponse, NoulAnswer
        >>> summarise(ClassifierResponse(model="m", answers={"q": NoulAnswer(type="noul", noul=0.2)}), {})
        'q: no (p=0.800)'
    """
    return "; ".join(
        f"{qid}: {wire.decided_label(a)} (p={wire.decision_probability(a):.3f})" for qid, a in response.answers.items()
    )
