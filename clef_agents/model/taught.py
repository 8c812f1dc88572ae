"""Taught questions: per-question option weights fitted on a user's labelled decisions.

The routing head answers any question from its text. When labelled records exist for a
question, ``clef-agents teach`` fits, for that question, a small network and a linear map from
the state's features (pooled from token states the backbone pass already computes, so answering
costs a few small matmuls) to its options, and blends them with the head's logits:

    x       = features * SCALE      (unit vector; see ``pool_features``)
    net_j   = w2_j · gelu(W1 · x + b1) + b2_j
    lin_j   = v_j · x + c_j
    lex_j   = TF-IDF logistic regression on the state text's words (``lexical``; optional)
    knn_j   = log of the similarity-weighted label vote of the nearest taught records (``neighbours``; optional)
    new_o   = a · (similarity to the nearest stored record of another option) + b, on one option o
              (``novelty``; optional, e.g. a catch-all "none of these"; 0 for every other option)
    tool_y  = w · (standardised request–tool match features) + b, on one option y of a yes/no question
              whose states list tools (``tool_match``; optional; see ``model.tool_match``)
    logit_j = alpha * net_j + gamma * lin_j + beta * head_logit_j + delta * lex_j + epsilon * knn_j + new_j + tool_j

The blend weights are fitted on held-out records, so the blend is calibrated as well.
A taught question is recognised by its type and instructions (case and spacing ignored, the
option descriptions may change); its options are matched by name, so shuffled options and
subsets that keep only taught names still use it. A question with an option the teaching
never saw falls back to the head. A rewording of a taught choice question (the same option set,
and instructions whose frozen-backbone embedding has a cosine of at least ``REWORDED_TOLERANCE``
with the taught wording's) uses it too (``Scorer.taught_entry``). Yes/no and score questions are
recognised only in their taught wording: their options say nothing of what is asked, and an
opposite question ("Are all of the listed tools irrelevant ...?") embeds as close as a rewording.

Example:
    >>> taught = TaughtQuestions()
    >>> len(taught)
    0
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.lexical import LexicalModel
from clef_agents.model.neighbours import NeighbourModel, dequantise_bank, novelty, quantise_bank
from clef_agents.model.storage import half, smallest_index_dtype
from clef_agents.model.tool_match import ToolEncoder, ToolMatch

TAUGHT_FILE = "taught.safetensors"
FEATURES = "mean4+max"
"""What new teaching reads: unit mean pools of the last four layers and the last layer's unit max
pool, concatenated (measured against the last layer's mean pool alone in docs/teaching.md)."""
LEGACY_FEATURES = "mean1"
"""The last layer's mean pool: what taught questions saved without a ``features`` field read."""
TAUGHT_INDEX = "taught.json"
PARTS = ("hidden_weight", "hidden_bias", "weight", "bias", "linear_weight", "linear_bias")
LEXICAL_PARTS = ("idf", "weight", "bias")
NEIGHBOUR_PARTS = ("mean", "projection")
BLEND = ("alpha", "beta", "gamma")
STORED_DTYPE = torch.float16
"""Taught weights are stored in half precision (teaching fits the blend on the rounded weights; ``storage.half``)."""
SCALE = 5.0
"""Unit pooled states are scaled by this before the first layer."""
REWORDED_TOLERANCE = 0.77
"""The least cosine between a request's instructions and a taught wording (the frozen backbone's mean-pooled
embeddings, the scorer's ``question_vec``) for a rewording to use that question's taught weights.

Chosen on a fitting set only (``bench/quality/taught_rewording.py fit``; bench/quality/results/
taught_rewording/fit.md), never tuned on the frozen test rewordings of tests/fixtures/taught_paraphrases.json:
the highest cosine, with all-MiniLM-L6-v2 (mini's backbone), between a taught wording and a different
question asked with the same kind of options, plus a margin of 0.05, rounded up. The different questions
are the other sets' instructions in ``train.datasets.DATASETS`` and the question reader's yes/no wordings
(``train.reader_data.BINARIES``), among them a taught question's opposites; the highest, 0.720, is "Is this a
genuine personal message rather than spam?" against "Is this SMS message spam?". (The first round used only
the ``DATASETS`` instructions and gave 0.69, which let 9 of the 27 frozen different questions through.)
Measured for that backbone: another backbone's cosines have another scale. Applied to choice questions only
(``TaughtQuestions.rewording_candidates``): bench/general's inverted yes/no wording "Are all of the listed tools
irrelevant to the user's request?" reached 0.818 against the taught tool-relevance question."""


def parse_features(spec: str) -> tuple[int, bool]:
    """``"meanK"`` or ``"meanK+max"`` → (K mean-pooled last layers, whether the max pool is added).

    Example:
        >>> parse_features("mean4+max")
        (4, True)
    """
    match = re.fullmatch(r"mean([1-9][0-9]*)(\+max)?", spec)
    if match is None:
        raise ValueError(
            f"unknown taught features {spec!r}; allowed: 'meanK' or 'meanK+max' with K >= 1 (e.g. {FEATURES!r})"
        )
    return int(match.group(1)), match.group(2) is not None


def feature_size(spec: str, hidden_size: int, num_layers: int) -> int:
    """Length of ``pool_features`` vectors for a backbone of that width and depth.

    Example:
        >>> feature_size("mean4+max", 384, 6)
        1920
    """
    count, with_max = parse_features(spec)
    return hidden_size * (min(count, max(num_layers, 1)) + int(with_max))


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of token states [B, T, H] over the tokens the mask keeps → [B, H].

    Example:
        >>> mean_pool(torch.tensor([[[1.0], [3.0], [9.0]]]), torch.tensor([[1, 1, 0]]))
        tensor([[2.]])
    """
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def pool_features(hidden_states: Sequence[torch.Tensor], mask: torch.Tensor, spec: str) -> torch.Tensor:
    """Taught features [B, F] from a backbone's per-layer token states ([B, T, H] each, embeddings first).

    Each block (mean pool of one of the last K layers, then the last layer's max pool) is made a
    unit vector and the concatenation is scaled back to unit length, so every block weighs the same.
    A backbone with fewer than K layers gives all it has.

    Example:
        >>> states = [torch.ones(1, 3, 4)] * 3
        >>> pool_features(states, torch.ones(1, 3), "mean2+max").shape
        torch.Size([1, 12])
    """
    count, with_max = parse_features(spec)
    layers = list(hidden_states[1:] if len(hidden_states) > 1 else hidden_states)[-count:]
    blocks = [mean_pool(h.float(), mask) for h in layers]
    if with_max:
        blocks.append(layers[-1].float().masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).amax(1))
    return torch.cat([F.normalize(b, dim=-1) for b in blocks], dim=-1) / len(blocks) ** 0.5


def taught_key(question: wire.TextQuestion) -> str:
    """What identifies a question for teaching: its type and instructions, normalised.

    Example:
        >>> from langchain_core.decisions import Noul
        >>> taught_key(Noul(instructions="Is this spam?")) == taught_key(Noul(instructions="  is this SPAM? "))
        True
    """
    text = re.sub(r"\s+", " ", wire.content_text(question.instructions)).strip().lower()
    levels = len(question.criteria) if isinstance(question, wire.Score) else 0
    return hashlib.sha256(json.dumps([question.type, text, levels]).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Novelty:
    """``weight · novelty + bias`` added to option ``option``'s logit (see ``neighbours.novelty``).

    Example:
        >>> Novelty("oos", weight=-10.0, bias=8.0).logit(torch.tensor([0.9, 0.5])).tolist()
        [-1.0, 3.0]
    """

    option: str
    weight: float
    bias: float

    def logit(self, novelty: torch.Tensor) -> torch.Tensor:
        """The part's logit for the option, from the novelty feature [B] → [B]."""
        return self.weight * novelty + self.bias

    def logits(self, novelty: torch.Tensor, option: int, n: int) -> torch.Tensor:
        """The part over all ``n`` options [B, n]: its logit in column ``option`` (the option's index), 0 elsewhere."""
        return self.logit(novelty)[:, None] * F.one_hot(torch.tensor(option, device=novelty.device), n)


@dataclass
class TaughtQuestion:
    """The fitted network of one question; its output rows are indexed by option name."""

    kind: str
    instructions: str
    names: list[str]
    hidden_weight: torch.Tensor  # [D, H]
    hidden_bias: torch.Tensor  # [D]
    weight: torch.Tensor  # [n, D]
    bias: torch.Tensor  # [n]
    linear_weight: torch.Tensor  # [n, H]
    linear_bias: torch.Tensor  # [n]
    alpha: float
    beta: float
    gamma: float
    report: dict[str, Any] = field(default_factory=dict)
    prior_offsets: dict[str, float] = field(default_factory=dict)
    """Added to the blended logits of these options (``log(deployment share / training share)``)."""
    features: str = FEATURES
    """Which state features the weights read (``pool_features``)."""
    lexical: LexicalModel | None = None
    """TF-IDF logistic regression on the state text, when teaching found it lowers held-out NLL."""
    delta: float = 0.0
    """Blend weight of the lexical logits."""
    neighbours: NeighbourModel | None = None
    """The taught records' projected features and labels, when teaching found their vote lowers held-out NLL
    or the novelty part reads them."""
    epsilon: float = 0.0
    """Blend weight of the neighbour vote's log (0 with a bank kept only for the novelty part)."""
    novelty: Novelty | None = None
    """The novelty part on one option, when teaching found it lowers held-out NLL (needs ``neighbours``)."""
    tool_match: ToolMatch | None = None
    """The request–tool match part on one option, when teaching found it lowers held-out NLL."""

    def __post_init__(self) -> None:
        parse_features(self.features)
        self._index = {name: i for i, name in enumerate(self.names)}
        self._offsets = torch.tensor([self.prior_offsets.get(name, 0.0) for name in self.names])
        if self.novelty is not None and (self.neighbours is None or self.novelty.option not in self._index):
            raise ValueError(
                f"taught question {self.instructions!r}: a novelty part on {self.novelty.option!r} needs the "
                f"neighbour bank and one of the options {self.names}"
            )
        if self.tool_match is not None and self.tool_match.option not in self._index:
            raise ValueError(
                f"taught question {self.instructions!r}: a tool-match part on {self.tool_match.option!r} needs "
                f"one of the options {self.names}"
            )
        if self.lexical is not None and self.lexical.weight.shape[0] != len(self.names):
            raise ValueError(
                f"taught question {self.instructions!r}: lexical weights for {self.lexical.weight.shape[0]} "
                f"options but {len(self.names)} names"
            )

    def logits(
        self,
        features: torch.Tensor,
        head_logits: torch.Tensor,
        names: list[str],
        text: str | None = None,
        encoder: ToolEncoder | None = None,
        tools: torch.Tensor | None = None,
    ) -> torch.Tensor | None:
        """Blended logits over ``names`` (in that order), or None when a name was never taught.

        ``text`` is the state text; questions taught with a lexical or a tool-match part need it, and
        the tool-match part also ``encoder`` (the engine: its frozen encoder, see ``tool_match.ToolEncoder``)
        unless ``tools``, the state's ``tool_match.features``, were computed already.
        """
        try:
            rows = [self._index[name] for name in names]
        except KeyError:
            return None
        if self.lexical is not None and text is None:
            raise ValueError(
                f"taught question {self.instructions!r} reads the state text (lexical part) but none was given"
            )
        head = head_logits.new_zeros((*head_logits.shape[:-1], len(self.names)))
        head[..., rows] = head_logits
        lexical = self.lexical.logits(text) if self.lexical is not None else None
        if self.tool_match is not None and tools is None:
            if text is None or encoder is None:
                raise ValueError(
                    f"taught question {self.instructions!r} compares the request with the listed tools "
                    "(tool-match part) and needs the state text and the encoder"
                )
            tools = self.tool_match.features([text], encoder)[0]
        return self.blend(features, head, lexical, tools)[..., rows] + self._offsets[rows]

    def blend(
        self,
        features: torch.Tensor,
        head: torch.Tensor,
        lexical: torch.Tensor | None = None,
        tools: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The blend over all taught names [..., n], without prior offsets: features [..., F], the head's
        logits [..., n] (0 for absent options), for a question with a lexical part its logits [..., n], and
        for one with a tool-match part its ``ToolMatch.features`` [..., k]."""
        net, lin = self.parts_logits(features)
        mixed = self.alpha * net + self.gamma * lin + self.beta * head
        if self.neighbours is not None:
            n = len(self.names)
            similarity = self.neighbours.similarity(features)
            if self.epsilon:
                mixed = mixed + self.epsilon * self.neighbours.logits(features, n, similarity)
            if self.novelty is not None:
                option = self._index[self.novelty.option]
                feature = novelty(self.neighbours.nearest_by_label(similarity, n), option)
                mixed = mixed + self.novelty.logits(feature, option, n).reshape(*features.shape[:-1], n)
        if self.lexical is not None:
            mixed = mixed + self.delta * lexical
        if self.tool_match is not None:
            if tools is None:
                raise ValueError(
                    f"taught question {self.instructions!r} has a tool-match part; its blend needs the tool features"
                )
            mixed = mixed + self.tool_match.logits(tools, self._index[self.tool_match.option], len(self.names))
        return mixed

    def parts_logits(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The network's and the linear map's logits over all taught names for features [..., F]."""
        x = F.normalize(features.float(), dim=-1) * SCALE
        hidden = F.gelu(x @ self.hidden_weight.T + self.hidden_bias)
        return hidden @ self.weight.T + self.bias, x @ self.linear_weight.T + self.linear_bias


class TaughtQuestions:
    """All taught questions of a checkpoint, saved beside it as ``taught.json`` + ``taught.safetensors``.

    Example:
        >>> len(TaughtQuestions.load("clef_agents/checkpoints/mini"))  # doctest: +SKIP
        8
    """

    def __init__(self, questions: dict[str, TaughtQuestion] | None = None):
        self.questions: dict[str, TaughtQuestion] = dict(questions or {})

    def __len__(self) -> int:
        return len(self.questions)

    def lookup(self, question: wire.TextQuestion) -> TaughtQuestion | None:
        """The taught entry for a question, if any (same type, instructions and option count rule)."""
        return self.questions.get(taught_key(question)) if self.questions else None

    def rewording_candidates(self, question: wire.TextQuestion) -> list[TaughtQuestion]:
        """The taught entries a rewording of ``question`` could use: taught choice questions with the same
        option set, when ``question`` is a choice (yes/no and score options name no subject, so an opposite
        question would pass); the caller compares the wordings.

        Example:
            >>> from langchain_core.decisions import Noul
            >>> TaughtQuestions().rewording_candidates(Noul(instructions="Is it spam?"))
            []
        """
        if not isinstance(question, wire.Choice):
            return []
        names = set(wire.option_names(question))
        return [entry for entry in self.questions.values() if entry.kind == "choice" and set(entry.names) == names]

    def add(self, key: str, taught: TaughtQuestion) -> None:
        self.questions[key] = taught

    def save(self, folder: str | Path) -> None:
        """Write the index and weights into a checkpoint folder (nothing when empty): floats in half
        precision (the tool-match idf in float32, as teaching fits it), neighbour labels in the smallest
        integer type that holds them."""
        from safetensors.torch import save_file  # noqa: PLC0415

        folder = Path(folder)
        if not self.questions:
            for name in (TAUGHT_FILE, TAUGHT_INDEX):
                (folder / name).unlink(missing_ok=True)
            return
        tensors: dict[str, torch.Tensor] = {}
        index: dict[str, Any] = {}
        for key, taught in self.questions.items():
            for part in PARTS:
                tensors[f"{key}.{part}"] = half(getattr(taught, part))
            index[key] = {
                "type": taught.kind,
                "instructions": taught.instructions,
                "names": taught.names,
                "features": taught.features,
                **{name: getattr(taught, name) for name in BLEND},
                "prior_offsets": taught.prior_offsets,
                "report": taught.report,
            }
            if taught.lexical is not None:
                for part in LEXICAL_PARTS:
                    tensors[f"{key}.lexical_{part}"] = half(getattr(taught.lexical, part))
                index[key]["lexical"] = {
                    "delta": taught.delta,
                    "vocabulary": taught.lexical.vocabulary,
                    **({"identifier_words": True} if taught.lexical.identifier_words else {}),
                }
            if taught.neighbours is not None:
                for part in NEIGHBOUR_PARTS:
                    tensors[f"{key}.neighbour_{part}"] = half(getattr(taught.neighbours, part))
                tensors[f"{key}.neighbour_bank"] = quantise_bank(taught.neighbours.bank).contiguous()
                tensors[f"{key}.neighbour_labels"] = taught.neighbours.labels.to(
                    smallest_index_dtype(len(taught.names))
                ).contiguous()
                index[key]["neighbours"] = {
                    "epsilon": taught.epsilon,
                    "k": taught.neighbours.k,
                    "temperature": taught.neighbours.temperature,
                }
            if taught.novelty is not None:
                index[key]["novelty"] = asdict(taught.novelty)
            if taught.tool_match is not None:
                index[key]["tool_match"] = taught.tool_match.to_json()
                if taught.tool_match.idf is not None:
                    tensors[f"{key}.tool_idf"] = (
                        taught.tool_match.idf.float().contiguous()
                    )  # teaching fits on float32 idf
        save_file(tensors, str(folder / TAUGHT_FILE))
        (folder / TAUGHT_INDEX).write_text(index_json(index) + "\n")

    @classmethod
    def load(cls, folder: str | Path) -> TaughtQuestions:
        """Read taught questions from a checkpoint folder (empty when it has none)."""
        from safetensors.torch import load_file  # noqa: PLC0415

        folder = Path(folder)
        if not (folder / TAUGHT_INDEX).exists():
            return cls()
        if not (folder / TAUGHT_FILE).exists():
            raise FileNotFoundError(f"{folder / TAUGHT_INDEX} exists but its weights {TAUGHT_FILE} are missing")
        index = json.loads((folder / TAUGHT_INDEX).read_text())
        tensors = load_file(str(folder / TAUGHT_FILE))
        questions = {}
        for key, entry in index.items():
            parts = _read_parts(tensors, key, PARTS, entry, folder)
            if parts["weight"].shape[0] != len(entry["names"]):
                raise ValueError(
                    f"taught question {entry['instructions']!r} in {folder}: {len(entry['names'])} names "
                    f"but weights for {parts['weight'].shape[0]} options"
                )
            lexical, delta = _load_lexical(key, entry, tensors, folder)
            neighbours, epsilon = _load_neighbours(key, entry, tensors, folder)
            questions[key] = TaughtQuestion(
                entry["type"],
                entry["instructions"],
                entry["names"],
                **parts,
                **{name: float(entry[name]) for name in BLEND},
                report=entry.get("report", {}),
                prior_offsets=dict(entry.get("prior_offsets", {})),
                features=entry.get("features", LEGACY_FEATURES),
                lexical=lexical,
                delta=delta,
                neighbours=neighbours,
                epsilon=epsilon,
                novelty=Novelty(**entry["novelty"]) if "novelty" in entry else None,
                tool_match=_load_tool_match(key, entry, tensors, folder),
            )
        return cls(questions)


def index_json(value: Any, indent: str = "") -> str:
    """JSON of ``taught.json``: objects one member a line, indented; lists (vocabularies, names, numbers) on one line.

    Example:
        >>> print(index_json({"k": {"names": ["a", "b"], "alpha": 0.5}}))
        {
          "k": {
            "names": ["a", "b"],
            "alpha": 0.5
          }
        }
    """
    if not isinstance(value, dict) or not value:
        return json.dumps(value, ensure_ascii=False)
    inner = indent + "  "
    members = ",\n".join(
        f"{inner}{json.dumps(str(key), ensure_ascii=False)}: {index_json(item, inner)}" for key, item in value.items()
    )
    return "{\n" + members + "\n" + indent + "}"


def _load_tool_match(
    key: str, entry: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path
) -> ToolMatch | None:
    """The tool-match part of a taught entry (None for entries saved without one; ``cosine`` for parts saved
    before the kind existed)."""
    stored = entry.get("tool_match")
    if stored is None:
        return None
    kind = stored.get("kind", "cosine")
    idf = _read_parts(tensors, key, ["tool_idf"], entry, folder)["tool_idf"] if kind == "coverage" else None
    return ToolMatch(
        stored["option"],
        tuple(stored["weight"]),
        float(stored["bias"]),
        tuple(stored["mean"]),
        tuple(stored["scale"]),
        kind=kind,
        idf=idf,
    )


def _load_lexical(
    key: str, entry: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path
) -> tuple[LexicalModel | None, float]:
    """The lexical part of a taught entry (None, 0.0 for entries saved without one)."""
    if "lexical" not in entry:
        return None, 0.0
    stored = _read_parts(tensors, key, [f"lexical_{part}" for part in LEXICAL_PARTS], entry, folder)
    parts = {part: stored[f"lexical_{part}"] for part in LEXICAL_PARTS}
    identifier_words = bool(entry["lexical"].get("identifier_words", False))
    return LexicalModel(list(entry["lexical"]["vocabulary"]), **parts, identifier_words=identifier_words), float(
        entry["lexical"]["delta"]
    )


def _load_neighbours(
    key: str, entry: dict[str, Any], tensors: dict[str, torch.Tensor], folder: Path
) -> tuple[NeighbourModel | None, float]:
    """The neighbour part of a taught entry (None, 0.0 for entries saved without one)."""
    if "neighbours" not in entry:
        return None, 0.0
    stored = _read_parts(
        tensors, key, [f"neighbour_{part}" for part in (*NEIGHBOUR_PARTS, "bank", "labels")], entry, folder
    )
    settings = entry["neighbours"]
    model = NeighbourModel(
        stored["neighbour_mean"],
        stored["neighbour_projection"],
        bank=dequantise_bank(stored["neighbour_bank"]),
        labels=stored["neighbour_labels"].long(),
        k=int(settings["k"]),
        temperature=float(settings["temperature"]),
    )
    return model, float(settings["epsilon"])


def _read_parts(
    tensors: dict[str, torch.Tensor], key: str, parts: Sequence[str], entry: dict[str, Any], folder: Path
) -> dict[str, torch.Tensor]:
    """A taught entry's stored tensors as float32, by part name; a clear error naming any missing part."""
    missing = [part for part in parts if f"{key}.{part}" not in tensors]
    if missing:
        raise ValueError(
            f"taught question {entry['instructions']!r} in {folder}: {TAUGHT_FILE} lacks {', '.join(missing)}"
        )
    return {part: tensors[f"{key}.{part}"].float() for part in parts}
