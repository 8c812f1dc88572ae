"""Nearest-neighbour evidence for taught questions: the labels of the most similar taught records.

The taught network and linear map draw smooth boundaries; some labels are better told by the
closest labelled examples (near-duplicate phrasings in a 64-intent set). ``clef-agents teach``
stores, per question, the taught records' state features projected to a few principal directions
(``NeighbourModel``), and blends the log of a similarity-weighted label vote with the other parts
when that lowers the held-out NLL:

    z       = unit((unit(features) - mean) @ projection)     (stored records: the same map)
    s_i     = z · bank_i                                       (cosine similarity)
    vote_j  = Σ over the k most similar i with label j of softmax(s / temperature)_i
    knn_j   = log(0.98 · vote_j + 0.02 / n)

A question may also get a novelty part on one option o (a catch-all such as clinc150's "oos"): the
similarity to the nearest stored record of any other option, ``novelty = max_{i: label_i ≠ o} s_i``,
enters o's logit as ``a · novelty + b`` (``teach.add_novelty`` fits a < 0 and b on held-out records).

Example:
    >>> import torch
    >>> bank = NeighbourModel(torch.zeros(2), torch.eye(2), torch.eye(2), torch.tensor([0, 1]), k=1, temperature=0.1)
    >>> bank.logits(torch.tensor([[1.0, 0.1]]), n=2).argmax().item()
    0
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

FLOOR = 0.02
"""Share of the vote spread evenly over all options, so that an option no neighbour holds keeps a finite logit."""
BANK_LEVELS = 127
"""Stored bank rows are unit vectors rounded to multiples of 1/BANK_LEVELS (int8 on disk: 1 byte per dimension)."""


@dataclass
class NeighbourModel:
    """Projected, unit-length state features of the taught records and their labels (option indices)."""

    mean: torch.Tensor  # [F] mean of the unit features the projection was fitted on
    projection: torch.Tensor  # [F, d]
    bank: torch.Tensor  # [N, d] unit rows
    labels: torch.Tensor  # [N] option index of each stored record
    k: int
    temperature: float

    def __post_init__(self) -> None:
        if self.k < 1 or self.temperature <= 0:
            raise ValueError(
                f"neighbour vote needs k >= 1 and temperature > 0, got k={self.k}, temperature={self.temperature}"
            )
        if self.bank.shape[0] != self.labels.shape[0] or self.bank.shape[1] != self.projection.shape[1]:
            raise ValueError(
                f"neighbour bank {tuple(self.bank.shape)} does not match labels {tuple(self.labels.shape)} "
                f"and projection {tuple(self.projection.shape)}"
            )
        self.labels = self.labels.long()

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """State features [..., F] → unit vectors [..., d] in the bank's space."""
        return project(features, self.mean, self.projection)

    def similarity(self, features: torch.Tensor) -> torch.Tensor:
        """Cosine similarity of features [..., F] to every stored record → [B, N] (leading dims flattened)."""
        return self.project(features.reshape(-1, features.shape[-1])) @ self.bank.float().T

    def logits(self, features: torch.Tensor, n: int, similarity: torch.Tensor | None = None) -> torch.Tensor:
        """Log of the similarity-weighted label vote over ``n`` options for features [..., F] → [..., n].

        ``similarity`` is ``self.similarity(features)`` when the caller already has it.
        """
        similarity = self.similarity(features) if similarity is None else similarity
        top, index = similarity.topk(min(self.k, self.bank.shape[0]), dim=-1)
        weights = torch.softmax(top / self.temperature, dim=-1)
        votes = torch.zeros(similarity.shape[0], n, device=similarity.device).scatter_add_(
            1, self.labels[index], weights
        )
        return torch.log(votes * (1.0 - FLOOR) + FLOOR / n).reshape(*features.shape[:-1], n)

    def nearest_by_label(self, similarity: torch.Tensor, n: int) -> torch.Tensor:
        """The highest similarity to a stored record of each option [B, n] (-1 for options with no record)."""
        best = similarity.new_full((similarity.shape[0], n), -1.0)
        index = self.labels.expand(similarity.shape[0], -1)
        return best.scatter_reduce(1, index, similarity, reduce="amax", include_self=True)


def novelty(nearest: torch.Tensor, option: int) -> torch.Tensor:
    """Similarity to the nearest stored record of any option but ``option`` [B], from ``nearest_by_label`` [B, n].

    Low values mean the state is unlike every record taught for the other options: evidence for a
    catch-all option such as "none of these".

    Example:
        >>> novelty(torch.tensor([[0.9, 0.2, 0.4]]), option=0).tolist()
        [0.4000000059604645]
    """
    others = nearest.clone()
    others[:, option] = -1.0
    return others.max(dim=-1).values


def project(features: torch.Tensor, mean: torch.Tensor, projection: torch.Tensor) -> torch.Tensor:
    """State features [..., F] → unit vectors [..., d]: ``unit((unit(features) - mean) @ projection)``.

    Example:
        >>> project(torch.tensor([3.0, 4.0]), torch.zeros(2), torch.eye(2)).tolist()
        [0.6000000238418579, 0.800000011920929]
    """
    return F.normalize((F.normalize(features.float(), dim=-1) - mean) @ projection, dim=-1)


def quantise_bank(bank: torch.Tensor) -> torch.Tensor:
    """Unit rows [N, d] → int8 codes as stored (``BANK_LEVELS`` steps per unit).

    Example:
        >>> quantise_bank(torch.tensor([[0.6, -0.8]])).tolist()
        [[76, -102]]
    """
    return (bank.float() * BANK_LEVELS).round().clamp(-BANK_LEVELS, BANK_LEVELS).to(torch.int8)


def dequantise_bank(codes: torch.Tensor) -> torch.Tensor:
    """int8 codes → the float rows they stand for."""
    return codes.float() / BANK_LEVELS


def fit_projection(features: torch.Tensor, dims: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and the top ``dims`` principal directions [F, d] of unit features [N, F] (seeded randomised PCA).

    Example:
        >>> mean, projection = fit_projection(torch.randn(50, 8), dims=3)
        >>> tuple(projection.shape)
        (8, 3)
    """
    unit = F.normalize(features.float(), dim=-1)
    mean = unit.mean(0)
    dims = min(dims, unit.shape[0], unit.shape[1])
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        _, _, directions = torch.pca_lowrank(unit - mean, q=dims, center=False, niter=4)
    finally:
        torch.random.set_rng_state(state)
    return mean, directions[:, :dims]
