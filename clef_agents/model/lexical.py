"""Lexical evidence for taught questions: TF-IDF over the state's words and word pairs, read by a
multinomial logistic regression.

The backbone's pooled states miss some surface cues that decide a label (a premium-rate number
in an SMS, a product name in a banking request). ``clef-agents teach`` fits, per question, a
logistic regression on TF-IDF vectors of the full state text (no truncation: it costs one sparse
dot product) and blends its logits with the taught network's when that lowers held-out NLL.

Vectors follow the usual TF-IDF recipe: lower-cased words of two or more letters or digits and
adjacent word pairs; term frequency ``1 + ln(count)``; smoothed idf ``ln((1 + N) / (1 + df)) + 1``;
each vector scaled to unit length. Terms the fit never saw are ignored. With ``identifier_words``,
identifiers are read as their words first (``listSharedLinks`` and ``list_shared_links`` both as
``list shared links``), so that a tool name never seen whole still shows its verb and object.

Example:
    >>> terms("Card not working, card blocked")
    ['card', 'not', 'working', 'card', 'blocked', 'card not', 'not working', 'working card', 'card blocked']
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

WORD = re.compile(r"\b\w\w+\b")
_CASE_CHANGE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
MIN_DF = 2
"""A term must occur in at least this many fit records to enter the vocabulary."""
MAX_TERMS = 20_000
"""At most this many terms (the most frequent by document frequency) per question."""


def identifier_text(text: str) -> str:
    """``text`` with identifiers split into words: case changes and underscores become spaces.

    Example:
        >>> identifier_text("listSharedLinks, drop_table and HTTPServer.get")
        'list Shared Links, drop table and HTTP Server.get'
    """
    return _CASE_CHANGE.sub(" ", text).replace("_", " ")


def terms(text: str, identifier_words: bool = False) -> list[str]:
    """The words (two or more word characters, lower-cased) of a text, then its adjacent word pairs;
    with ``identifier_words``, of ``identifier_text(text)``.

    Example:
        >>> terms("getUser", identifier_words=True)
        ['get', 'user', 'get user']
    """
    words = WORD.findall((identifier_text(text) if identifier_words else text).lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def build_vocabulary(
    texts: Sequence[str], min_df: int = MIN_DF, max_terms: int = MAX_TERMS, identifier_words: bool = False
) -> tuple[list[str], torch.Tensor]:
    """Terms seen in at least ``min_df`` texts (the ``max_terms`` most frequent) and their smoothed idf.

    Example:
        >>> vocabulary, idf = build_vocabulary(["lost card", "lost phone", "card arrived"])
        >>> vocabulary
        ['card', 'lost']
    """
    document_frequency = Counter(term for text in texts for term in set(terms(text, identifier_words)))
    kept = sorted(
        (term for term, df in document_frequency.items() if df >= min_df), key=lambda t: (-document_frequency[t], t)
    )
    vocabulary = sorted(kept[:max_terms])
    n = len(texts)
    idf = torch.tensor([math.log((1 + n) / (1 + document_frequency[term])) + 1.0 for term in vocabulary])
    return vocabulary, idf


def tfidf_rows(
    texts: Sequence[str], index: dict[str, int], idf: torch.Tensor, identifier_words: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per text: (vocabulary indices, unit TF-IDF values) of the known terms it holds."""
    rows = []
    for text in texts:
        counts = Counter(index[term] for term in terms(text, identifier_words) if term in index)
        columns = torch.tensor(sorted(counts), dtype=torch.long)
        values = torch.tensor([1.0 + math.log(counts[c]) for c in columns.tolist()]) * idf[columns]
        rows.append((columns, F.normalize(values, dim=0) if len(values) else values))
    return rows


def sparse_matrix(rows: Sequence[tuple[torch.Tensor, torch.Tensor]], width: int) -> torch.Tensor:
    """Rows of (indices, values) as a sparse [N, width] matrix."""
    row_ids = torch.cat([torch.full((len(columns),), i, dtype=torch.long) for i, (columns, _) in enumerate(rows)])
    columns = torch.cat([columns for columns, _ in rows])
    values = torch.cat([values for _, values in rows])
    return torch.sparse_coo_tensor(
        torch.stack([row_ids, columns]), values, (len(rows), width), check_invariants=True
    ).coalesce()


@dataclass
class LexicalModel:
    """A question's TF-IDF vocabulary and logistic-regression weights over its taught option names,
    and whether it reads identifiers as words (``terms``)."""

    vocabulary: list[str]
    idf: torch.Tensor  # [V]
    weight: torch.Tensor  # [n, V]
    bias: torch.Tensor  # [n]
    identifier_words: bool = False
    _index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not (len(self.vocabulary) == self.idf.shape[0] == self.weight.shape[1]):
            raise ValueError(
                f"lexical model: {len(self.vocabulary)} terms, {self.idf.shape[0]} idf values and "
                f"weights for {self.weight.shape[1]} terms; all three must match"
            )
        self._index = {term: i for i, term in enumerate(self.vocabulary)}

    def vectors(self, texts: Sequence[str]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Unit TF-IDF vectors of texts as (indices, values) rows."""
        return tfidf_rows(texts, self._index, self.idf, self.identifier_words)

    def logits(self, text: str) -> torch.Tensor:
        """Logits [n] over the taught option names for one state text.

        Example:
            >>> model = LexicalModel(["spam"], torch.ones(1), torch.tensor([[4.0], [-4.0]]), torch.zeros(2))
            >>> model.logits("SPAM spam!").tolist()
            [4.0, -4.0]
        """
        ((columns, values),) = self.vectors([text])
        return self.weight[:, columns] @ values + self.bias


def fit_lexical(
    texts: Sequence[str],
    present: torch.Tensor,
    gold: torch.Tensor,
    l2: float,
    vocabulary: tuple[list[str], torch.Tensor] | None = None,
    identifier_words: bool = False,
) -> LexicalModel:
    """Multinomial logistic regression on TF-IDF vectors (full-batch L-BFGS, L2 penalty ``l2``).

    ``present`` [N, n] masks options a record did not offer; ``gold`` [N] are option indices; a given
    ``vocabulary`` must have been built with the same ``identifier_words``.
    """
    terms_, idf = vocabulary or build_vocabulary(texts, identifier_words=identifier_words)
    model = LexicalModel(
        terms_, idf, torch.zeros(present.shape[1], len(terms_)), torch.zeros(present.shape[1]), identifier_words
    )
    x = sparse_matrix(model.vectors(texts), len(terms_))
    weight = torch.zeros(present.shape[1], len(terms_), requires_grad=True)
    bias = torch.zeros(present.shape[1], requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1, max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        z = (torch.sparse.mm(x, weight.T) + bias).masked_fill(~present, -1e4)
        loss = F.cross_entropy(z, gold) + l2 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    model.weight, model.bias = weight.detach(), bias.detach()
    return model
