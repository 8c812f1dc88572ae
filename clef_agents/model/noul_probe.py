"""A linear read-out of yes/no answers from a language model's hidden states (the precise tier's probe).

A local LM answers a yes/no question by the mass of "yes" against "no" at the answer cue. That margin is
one fixed direction of the last layer's state, and on questions nobody taught it, it often ignores the
wording ("Is this urgent?" and "Is this not urgent?" both get "yes"). ``NoulProbe`` reads the answer from
the states at the answer cue of several layers instead: each layer standardised, then one logistic
regression, fitted on yes/no questions whose answers are known (``bench/precise/answer_probe.py``).

Example:
    >>> import torch
    >>> states = torch.randn(40, 2, 8)                # [questions, layers, hidden]
    >>> yes = (states[:, 1, 0] > 0).long()
    >>> probe = NoulProbe.fit(states, yes, layers=[20, 28], l2=0.01)
    >>> bool(((probe.logits(states) > 0).long() == yes).float().mean() > 0.9)
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

FORMAT = "clef-agents-noul-probe/1"


class NoulProbe:
    """``logit = w · standardised(states) + b`` over the states of ``layers`` at a yes/no question's answer cue."""

    def __init__(
        self, layers: Sequence[int], mean: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor, bias: float
    ):
        layers = [int(layer) for layer in layers]
        if not layers:
            raise ValueError("a NoulProbe reads at least one layer, got none")
        if mean.shape != scale.shape or mean.dim() != 2 or mean.shape[0] != len(layers):
            raise ValueError(
                f"mean and scale must both be [layers={len(layers)}, hidden], got {tuple(mean.shape)} "
                f"and {tuple(scale.shape)}"
            )
        if weight.shape != (mean.numel(),):
            raise ValueError(f"weight must have {mean.numel()} entries (layers × hidden), got {tuple(weight.shape)}")
        self.layers = layers
        self.mean = mean.float()
        self.scale = scale.float()
        self.weight = weight.float()
        self.bias = float(bias)

    @property
    def hidden_size(self) -> int:
        """The width of each layer's state."""
        return int(self.mean.shape[1])

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """The yes-vs-no logit of each question from its states ``[questions, layers, hidden]`` (``layers`` order).

        Example:
            >>> NoulProbe([28], torch.zeros(1, 2), torch.ones(1, 2), torch.tensor([1.0, -1.0]), 0.5).logits(torch.tensor([[[2.0, 1.0]]]))
            tensor([1.5000])
        """
        if states.dim() != 3 or tuple(states.shape[1:]) != tuple(self.mean.shape):
            raise ValueError(
                f"states must be [questions, {len(self.layers)}, {self.hidden_size}], got {tuple(states.shape)}"
            )
        x = (states.float().to(self.mean.device) - self.mean) / self.scale
        return x.flatten(1) @ self.weight + self.bias

    @classmethod
    def fit(
        cls,
        states: torch.Tensor,
        yes: torch.Tensor | Sequence[int],
        layers: Sequence[int],
        l2: float = 0.01,
        max_iter: int = 200,
    ) -> NoulProbe:
        """Logistic regression of ``yes`` (1 = the answer is yes) on the standardised ``states``
        ``[questions, layers, hidden]``, with an L2 penalty of ``l2`` on the mean log loss (the bias is free).

        Example:
            >>> NoulProbe.fit(torch.randn(10, 1, 4), [0, 1] * 5, layers=[28]).layers
            [28]
        """
        target = torch.as_tensor(yes, dtype=torch.float32)
        if states.dim() != 3 or states.shape[0] != target.numel() or states.shape[1] != len(layers):
            raise ValueError(
                f"states must be [questions={target.numel()}, layers={len(layers)}, hidden], got {tuple(states.shape)}"
            )
        if not 0 < float(target.mean()) < 1:
            raise ValueError("fitting a NoulProbe needs both yes and no answers among the questions")
        if l2 < 0:
            raise ValueError(f"l2 must be at least 0, got {l2}")
        data = states.float()
        mean = data.mean(dim=0)
        scale = data.std(dim=0).clamp_min(1e-4)
        x = ((data - mean) / scale).flatten(1)
        weight = torch.zeros(x.shape[1], requires_grad=True)
        bias = torch.zeros(1, requires_grad=True)
        optimiser = torch.optim.LBFGS([weight, bias], max_iter=max_iter, line_search_fn="strong_wolfe")

        def loss() -> torch.Tensor:
            optimiser.zero_grad()
            value = F.binary_cross_entropy_with_logits(x @ weight + bias, target) + l2 * weight.pow(2).sum()
            value.backward()
            return value

        optimiser.step(loss)
        return cls(layers, mean, scale, weight.detach(), float(bias.detach()))

    def save(self, path: str | Path) -> Path:
        """Write the probe as safetensors (tensors) with its layers and bias in the metadata; ``load`` reads it."""
        from safetensors.torch import save_file

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        save_file(
            {"mean": self.mean.contiguous(), "scale": self.scale.contiguous(), "weight": self.weight.contiguous()},
            str(target),
            metadata={"format": FORMAT, "layers": json.dumps(self.layers), "bias": repr(self.bias)},
        )
        return target

    @classmethod
    def load(cls, path: str | Path) -> NoulProbe:
        """Read a probe that ``save`` wrote.

        Example:
            >>> NoulProbe.load("clef_agents/checkpoints/precise/noul_probe.safetensors").layers  # doctest: +SKIP
            [20, 24, 28]
        """
        from safetensors import safe_open

        source = Path(path)
        if not source.is_file():
            raise FileNotFoundError(f"no yes/no probe at {source}")
        with safe_open(str(source), framework="pt") as handle:
            metadata = handle.metadata() or {}
            if metadata.get("format") != FORMAT:
                raise ValueError(
                    f"{source} is not a yes/no probe (format {metadata.get('format')!r}, expected {FORMAT!r})"
                )
            tensors = {name: handle.get_tensor(name) for name in ("mean", "scale", "weight")}
        return cls(
            json.loads(metadata["layers"]),
            tensors["mean"],
            tensors["scale"],
            tensors["weight"],
            float(metadata["bias"]),
        )
