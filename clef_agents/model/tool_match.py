"""Request–tool match: a taught part for yes/no questions about states that list tools.

"Should one of the listed tools be called?" turns on whether the request matches what some tool
does. The backbone pass reads the state through a window of a few hundred tokens, and a long
tool list does not fit it; this part compares the request with each listed tool separately. A
state lists tools one JSON object per line, each with a string ``"name"`` (the OpenAI / JSON-schema
function format, e.g. ``json.dumps(convert_to_openai_tool(tool)["function"])``); the request is
the text after the last tool line (a first line such as ``Conversation:`` is dropped). Each tool
is read as ``"name: description"``.

Two kinds of features (``ToolMatch.kind``), both from the frozen encoder:

- ``cosine``: the highest and the mean cosine between the request and the tools (unit mean pools)
  and ``ln(1 + number of tools)``;
- ``coverage`` (token level, what teaching tries first): for each tool, how well its tokens cover
  the request's (``request coverage``: the IDF-weighted mean over request tokens of the best cosine
  with any of the tool's tokens) and the reverse (``tool coverage``); the features are the highest
  request coverage, the highest tool coverage, the mean request coverage and the highest mean of
  the two. A request that names a circle and a tool that computes triangles share a topic but not
  the word that decides; the mean-pooled cosine blurs that, the token match keeps it. The IDF
  weights come from the taught records' requests and tool texts.

A state that lists no tool has all-zero features. ``ToolMatch`` adds
``weight · standardised features + bias`` to one option's logit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F

FEATURE_NAMES = ("highest_cosine", "mean_cosine", "log_tools")
"""The ``cosine`` kind's features."""
COVERAGE_FEATURE_NAMES = ("request_coverage", "tool_coverage", "mean_request_coverage", "pair_coverage")
"""The ``coverage`` kind's features."""
KINDS = {"cosine": FEATURE_NAMES, "coverage": COVERAGE_FEATURE_NAMES}
TOKEN_MAX_LENGTH = 128
"""Tokens read per request and per tool text for the ``coverage`` features."""
Embed = Callable[[list[str], bool], torch.Tensor]
"""``embed(texts, cache)`` → [N, H] vectors of the frozen encoder (``cache``: texts worth keeping, e.g. tools)."""
TokenStates = tuple[torch.Tensor, torch.Tensor]
"""A text's token ids [L] and unit token vectors [L, H] (special tokens left out)."""
EmbedTokens = Callable[[list[str], bool], list[TokenStates]]
"""``embed_tokens(texts, cache)`` → each text's ``TokenStates`` from the frozen encoder."""


class ToolEncoder(Protocol):
    """What the tool features need from the model: the frozen encoder's pooled and token vectors and its token ids."""

    def embed_frozen(self, texts: list[str], cache: bool = True) -> torch.Tensor: ...

    def embed_tokens_frozen(self, texts: list[str], cache: bool = True) -> list[TokenStates]: ...

    def token_ids(self, texts: list[str]) -> list[list[int]]: ...


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


def fit_token_idf(texts: Sequence[str], token_ids: Callable[[list[str]], list[list[int]]]) -> torch.Tensor:
    """IDF weights [V] over the requests and tool texts of states: ``ln((docs + 1) / (df + 1))``,
    each request and each listed tool one document; ids past the end count as never seen.

    Example:
        >>> ids = lambda texts: [[len(w) for w in t.split()] for t in texts]
        >>> [round(v, 3) for v in fit_token_idf(['{"name": "ab"}\\nab cde'], ids).tolist()]  # docs "ab", "ab cde"
        [1.099, 1.099, 0.0, 0.405]
    """
    documents: list[str] = []
    for text in texts:
        tools, request = split_tool_listing(text)
        if tools:
            documents += [request, *tools]
    counts: dict[int, int] = {}
    for ids in token_ids(documents) if documents else []:
        for token in set(ids):
            counts[token] = counts.get(token, 0) + 1
    size = max(counts, default=-1) + 1
    df = torch.zeros(size)
    if counts:
        df[list(counts)] = torch.tensor(list(counts.values()), dtype=torch.float)
    return torch.log((len(documents) + 1) / (df + 1))


def token_weights(ids: torch.Tensor, idf: torch.Tensor) -> torch.Tensor:
    """Weights summing to 1 over a text's tokens: their IDF (ids beyond the table count as never seen)."""
    unseen = float(idf.max()) if len(idf) else 1.0
    inside = ids < len(idf)
    weights = torch.full(ids.shape, unseen)
    weights[inside] = idf[ids[inside]]
    total = weights.sum()
    return weights / total if total > 0 else torch.full(ids.shape, 1.0 / max(len(ids), 1))


def coverage_features(texts: Sequence[str], embed_tokens: EmbedTokens, idf: torch.Tensor) -> torch.Tensor:
    """[N, 4] token-level features per state (``COVERAGE_FEATURE_NAMES``; zeros where no tool is listed).

    Example:
        >>> vecs = {"a": torch.eye(2)[:1], "b": torch.eye(2)[1:], "want a": torch.eye(2)[:1]}
        >>> embed_tokens = lambda texts, cache: [(torch.tensor([0]), vecs[t]) for t in texts]
        >>> coverage_features(['{"name": "a"}\\n{"name": "b"}\\nwant a'], embed_tokens, torch.ones(1))
        tensor([[1.0000, 1.0000, 0.5000, 1.0000]])
    """
    parsed = [split_tool_listing(text) for text in texts]
    rows = torch.zeros(len(texts), len(COVERAGE_FEATURE_NAMES))
    with_tools = [i for i, (tools, _) in enumerate(parsed) if tools]
    if not with_tools:
        return rows
    tool_texts = list(dict.fromkeys(tool for tools, _ in parsed for tool in tools))
    tool_states = dict(zip(tool_texts, embed_tokens(tool_texts, True)))
    requests = embed_tokens([parsed[i][1] for i in with_tools], False)
    for (request_ids, request_vectors), i in zip(requests, with_tools):
        if len(request_ids) == 0:
            continue
        request_weights = token_weights(request_ids, idf)
        covers = []
        for tool in parsed[i][0]:
            tool_ids, tool_vectors = tool_states[tool]
            if len(tool_ids) == 0:
                covers.append((0.0, 0.0))
                continue
            similarity = request_vectors.float() @ tool_vectors.float().T
            covers.append(
                (
                    float(similarity.max(1).values @ request_weights),
                    float(similarity.max(0).values @ token_weights(tool_ids, idf)),
                )
            )
        request_cover = [c[0] for c in covers]
        rows[i] = torch.tensor(
            [
                max(request_cover),
                max(c[1] for c in covers),
                sum(request_cover) / len(covers),
                max((a + b) / 2 for a, b in covers),
            ]
        )
    return rows


def tool_features(
    kind: str, texts: Sequence[str], encoder: ToolEncoder, idf: torch.Tensor | None = None
) -> torch.Tensor:
    """The raw features [N, k] of states for a kind (``coverage`` reads ``idf``, ``cosine`` nothing more)."""
    if kind == "coverage":
        if idf is None:
            raise ValueError("the coverage kind of tool features needs its token IDF weights")
        return coverage_features(texts, encoder.embed_tokens_frozen, idf)
    if kind == "cosine":
        return match_features(texts, encoder.embed_frozen)
    raise ValueError(f"unknown tool-match kind {kind!r}; allowed: {', '.join(KINDS)}")


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
    kind: str = "cosine"
    """``cosine`` or ``coverage`` (see the module); parts saved before ``coverage`` existed are ``cosine``."""
    idf: torch.Tensor | None = field(default=None, repr=False, compare=False)
    """The ``coverage`` kind's token IDF weights [V] (stored in ``taught.safetensors``)."""

    def __post_init__(self) -> None:
        names = KINDS.get(self.kind)
        if names is None:
            raise ValueError(
                f"tool-match part on {self.option!r}: unknown kind {self.kind!r}; allowed: {', '.join(KINDS)}"
            )
        sizes = {len(self.weight), len(self.mean), len(self.scale)}
        if sizes != {len(names)}:
            raise ValueError(
                f"tool-match part on {self.option!r}: weight, mean and scale need {len(names)} "
                f"values each ({', '.join(names)}), got {len(self.weight)}, {len(self.mean)}, {len(self.scale)}"
            )
        if any(s <= 0 for s in self.scale):
            raise ValueError(f"tool-match part on {self.option!r}: scales must be positive, got {list(self.scale)}")
        if self.kind == "coverage" and self.idf is None:
            raise ValueError(f"tool-match part on {self.option!r}: the coverage kind needs its token IDF weights")

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The names of the features the weights read, in order."""
        return KINDS[self.kind]

    def features(self, texts: Sequence[str], encoder: ToolEncoder) -> torch.Tensor:
        """The raw features [N, k] of these states for this part's kind."""
        return tool_features(self.kind, texts, encoder, self.idf)

    def to_json(self) -> dict[str, Any]:
        """What ``taught.json`` keeps (the IDF table goes to the safetensors file)."""
        return {
            "option": self.option,
            "weight": list(self.weight),
            "bias": self.bias,
            "mean": list(self.mean),
            "scale": list(self.scale),
            "kind": self.kind,
        }

    def standardise(self, features: torch.Tensor) -> torch.Tensor:
        """Features [..., k] in the units the weights read."""
        return (features - torch.tensor(self.mean)) / torch.tensor(self.scale)

    def logit(self, features: torch.Tensor) -> torch.Tensor:
        """The part's logit for the option [...], from raw features [..., k] (``features``)."""
        return self.standardise(features.float()) @ torch.tensor(self.weight) + self.bias

    def logits(self, features: torch.Tensor, option: int, n: int) -> torch.Tensor:
        """The part over all ``n`` options [..., n]: its logit in column ``option``, 0 elsewhere."""
        return self.logit(features).unsqueeze(-1) * F.one_hot(torch.tensor(option), n)
