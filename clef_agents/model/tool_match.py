"""Request–tool match: a taught part for yes/no questions about states that list tools.

"Should one of the listed tools be called?" turns on whether the request matches what some tool
does. The backbone pass reads the state through a window of a few hundred tokens, and a long
tool list does not fit it; this part compares the request with each listed tool separately. A
state lists tools one JSON object per line, each with a string ``"name"`` (the OpenAI / JSON-schema
function format, e.g. ``json.dumps(convert_to_openai_tool(tool)["function"])``); the request is
the text after the last tool line (a first line such as ``Conversation:`` is dropped). Each tool
is read as ``"name: description"``.

The features are the highest and the mean cosine between the request and the tools (unit mean
pools of the frozen encoder) and ``ln(1 + number of tools)``; a state that lists no tool has
``[0, 0, 0]``. ``ToolMatch`` adds ``weight · standardised features + bias`` to one option's logit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

FEATURE_NAMES = ("highest_cosine", "mean_cosine", "log_tools")
Embed = Callable[[list[str], bool], torch.Tensor]
"""``embed(texts, cache)`` → [N, H] vectors of the frozen encoder (``cache``: texts worth keeping, e.g. tools)."""


def _tool_text(line: str) -> str | None:
    """``"name: description"`` when the line is a JSON object with a string ``name``, else None."""
    stripped = line.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    try:
        tool = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        return None
    description = tool.get("description")
    return f"{tool['name']}: {description}" if isinstance(description, str) and description else tool["name"]


def split_tool_listing(text: str) -> tuple[list[str], str]:
    """The tools a state lists (as ``"name: description"``) and the request after them.

    Example:
        >>> split_tool_listing('Tools:\\n{"name": "get_weather", "description": "Weather for a city."}\\n\\nConversation:\\nuser: rain in Oslo?')
        (['get_weather: Weather for a city.'], 'user: rain in Oslo?')
        >>> split_tool_listing("no tools here")
        ([], 'no tools here')
    """
    lines = text.splitlines()
    tools, last = [], -1
    for i, line in enumerate(lines):
        tool = _tool_text(line)
        if tool is not None:
            tools.append(tool)
            last = i
    rest = [line for line in lines[last + 1 :] if line.strip()]
    if tools and len(rest) > 1 and _is_header(rest[0]):
        rest = rest[1:]
    return tools, "\n".join(rest).strip()


def _is_header(line: str) -> bool:
    stripped = line.strip()
    return stripped.endswith(":") and len(stripped.split()) <= 3


def lists_tools(text: str) -> bool:
    """Whether a state lists at least one tool (see ``split_tool_listing``).

    Example:
        >>> lists_tools('{"name": "search"}\\nfind cats'), lists_tools("find cats")
        (True, False)
    """
    return any(_tool_text(line) is not None for line in text.splitlines())


def match_features(texts: Sequence[str], embed: Embed) -> torch.Tensor:
    """[N, 3] features per state: highest and mean request–tool cosine, ``ln(1 + tools)``.

    Tool texts are embedded with caching (a deployment asks about the same tools again and again);
    requests are not.

    Example:
        >>> table = {"a: x": [1.0, 0.0], "b: y": [0.0, 1.0], "want a": [1.0, 0.0]}
        >>> embed = lambda texts, cache: torch.tensor([table[t] for t in texts])
        >>> match_features(['{"name": "a", "description": "x"}\\n{"name": "b", "description": "y"}\\nwant a'], embed)
        tensor([[1.0000, 0.5000, 1.0986]])
    """
    parsed = [split_tool_listing(text) for text in texts]
    tool_texts = list(dict.fromkeys(tool for tools, _ in parsed for tool in tools))
    rows = torch.zeros(len(texts), len(FEATURE_NAMES))
    with_tools = [i for i, (tools, _) in enumerate(parsed) if tools]
    if not with_tools:
        return rows
    tool_vectors = F.normalize(embed(tool_texts, True).float(), dim=-1)
    position = {tool: i for i, tool in enumerate(tool_texts)}
    requests = F.normalize(embed([parsed[i][1] for i in with_tools], False).float(), dim=-1)
    for request, i in zip(requests, with_tools):
        tools = parsed[i][0]
        cosines = tool_vectors[[position[tool] for tool in tools]] @ request
        rows[i] = torch.stack([cosines.max(), cosines.mean(), torch.tensor(math.log1p(len(tools)))])
    return rows


@dataclass(frozen=True)
class ToolMatch:
    """``weight · (features - mean) / scale + bias`` added to option ``option``'s logit.

    Example:
        >>> part = ToolMatch("yes", weight=(2.0, 0.0, 0.0), bias=-1.0, mean=(0.5, 0.25, 1.0), scale=(0.25, 0.125, 0.5))
        >>> part.logit(torch.tensor([[0.75, 0.25, 1.0]])).tolist()
        [1.0]
    """

    option: str
    weight: tuple[float, ...]
    bias: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]

    def __post_init__(self) -> None:
        sizes = {len(self.weight), len(self.mean), len(self.scale)}
        if sizes != {len(FEATURE_NAMES)}:
            raise ValueError(f"tool-match part on {self.option!r}: weight, mean and scale need {len(FEATURE_NAMES)} "
                             f"values each ({', '.join(FEATURE_NAMES)}), got {len(self.weight)}, {len(self.mean)}, {len(self.scale)}")
        if any(s <= 0 for s in self.scale):
            raise ValueError(f"tool-match part on {self.option!r}: scales must be positive, got {list(self.scale)}")

    def standardise(self, features: torch.Tensor) -> torch.Tensor:
        """Features [..., 3] in the units the weights read."""
        return (features - torch.tensor(self.mean)) / torch.tensor(self.scale)

    def logit(self, features: torch.Tensor) -> torch.Tensor:
        """The part's logit for the option [...], from raw ``match_features`` [..., 3]."""
        return self.standardise(features.float()) @ torch.tensor(self.weight) + self.bias

    def logits(self, features: torch.Tensor, option: int, n: int) -> torch.Tensor:
        """The part over all ``n`` options [..., n]: its logit in column ``option``, 0 elsewhere."""
        return self.logit(features).unsqueeze(-1) * F.one_hot(torch.tensor(option), n)
