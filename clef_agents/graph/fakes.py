"""Scripted stand-ins for an escalation LLM and an agent. Fakes: they do not read or reason.

``FakeToolCallingChatModel`` supports ``bind_tools`` and therefore LangChain's standard
``with_structured_output``: each call answers with one tool call whose arguments come from a
script (a list of dicts, or a function of the messages and the offered tool). Use it in tests and
offline demos wherever a real chat model would go; it is named as a fake wherever it is shown.

Example:
    >>> from pydantic import BaseModel
    >>> class Answer(BaseModel):
    ...     spam: str
    >>> fake = FakeToolCallingChatModel(responses=[{"spam": "no"}])
    >>> fake.with_structured_output(Answer).invoke("is this spam?").spam
    'no'
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

ScriptFunction = Callable[[list[BaseMessage], dict[str, Any] | None], Any]
"""``(messages, offered tool or None) -> tool-call args dict | AIMessage | Exception``."""


class FakeToolCallingChatModel(BaseChatModel):
    """A scripted chat model that answers with tool calls (a fake, for tests and offline demos).

    - ``responses``: a list of replies used in turn (cycled when ``cycle=True``); each is a dict of
      tool-call arguments, an ``AIMessage`` (returned as is), or an exception (raised).
    - ``respond``: a function ``(messages, tool) -> reply`` that wins over ``responses``.
    - ``calls`` records the messages of every call, so a test can prove what the model saw.

    Example:
        >>> FakeToolCallingChatModel(responses=[AIMessage("hi")]).invoke("hello").content
        'hi'
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_name: str = "fake-scripted-chat"
    responses: list[Any] = Field(default_factory=list)
    respond: ScriptFunction | None = None
    cycle: bool = False
    _calls: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _counter: Any = PrivateAttr(default_factory=itertools.count)

    @property
    def _llm_type(self) -> str:
        return "fake-tool-calling-chat"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        """The messages of every call, in order."""
        return self._calls

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """Offer tools; the scripted reply names the first one (as ``tool_choice="any"`` would)."""
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], tool_choice=tool_choice, **kwargs)

    def _next_reply(self, messages: list[BaseMessage], tool: dict[str, Any] | None) -> Any:
        if self.respond is not None:
            return self.respond(messages, tool)
        index = next(self._counter)
        if not self.responses:
            raise ValueError("FakeToolCallingChatModel has no scripted responses and no respond function")
        if index >= len(self.responses) and not self.cycle:
            raise ValueError(f"FakeToolCallingChatModel ran out of scripted responses ({len(self.responses)} given)")
        return self.responses[index % len(self.responses)]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._calls.append(list(messages))
        tool = tools[0] if tools else None
        reply = self._next_reply(messages, tool)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, AIMessage):
            message = reply
        elif tool is None:
            message = AIMessage(content=str(reply))
        else:
            call_id = f"call_{len(self._calls)}"
            args = dict(reply)
            name = args.pop("__tool__", None)
            message = AIMessage(
                content="",
                tool_calls=[{"name": name or tool["function"]["name"], "args": args, "id": call_id}],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])
