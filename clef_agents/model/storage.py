"""How checkpoint weights are stored on disk: half precision, and int8 differences from weights the
backbone already ships. Everything is read back as float32, so inference math is unchanged in kind.

Example:
    >>> half(torch.tensor([1.0, 70000.0])).dtype  # out of half precision's range: kept as float32
    torch.float32
    >>> codes, scale = quantise_rows(torch.tensor([[0.5, -1.27]]))
    >>> codes.tolist(), [round(v, 2) for v in dequantise_rows(codes, scale)[0].tolist()]
    ([[50, -127]], [0.5, -1.27])
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch

STORED_FLOAT = torch.float16
"""Stored float precision: half (its relative error is a tenth of bfloat16's on the shipped weights)."""
ROW_LEVELS = 127
"""int8 codes per row span [-ROW_LEVELS, ROW_LEVELS] times the row's scale."""


def half(tensor: torch.Tensor) -> torch.Tensor:
    """A float tensor as stored: half precision where every value fits it, else float32; other tensors as they are.

    Example:
        >>> half(torch.tensor([0.25])).dtype
        torch.float16
    """
    tensor = tensor.detach().cpu()
    if not tensor.is_floating_point():
        return tensor.contiguous()
    stored = tensor.to(STORED_FLOAT)
    if bool(torch.isfinite(stored).all()) or not bool(torch.isfinite(tensor).all()):
        return stored.contiguous()
    return tensor.float().contiguous()


def stored(tensor: torch.Tensor, compact: bool) -> torch.Tensor:
    """A tensor as a checkpoint stores it: ``half`` when ``compact``, else float tensors in float32 (saving
    and loading then give back the same numbers).

    Example:
        >>> stored(torch.tensor([0.25]), compact=False).dtype, stored(torch.tensor([0.25]), compact=True).dtype
        (torch.float32, torch.float16)
    """
    if compact:
        return half(tensor)
    tensor = tensor.detach().cpu()
    return (tensor.float() if tensor.is_floating_point() else tensor).contiguous()


def smallest_index_dtype(count: int) -> torch.dtype:
    """The smallest integer type that holds the indices 0 .. count - 1.

    Example:
        >>> smallest_index_dtype(151)
        torch.uint8
    """
    if count <= 256:
        return torch.uint8
    return torch.int16 if count <= 2**15 else torch.int32


def quantise_rows(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A matrix [R, C] → int8 codes [R, C] and one float32 scale per row [R] (the row's largest
    magnitude over ``ROW_LEVELS``); each value is off by at most half its row's scale.

    Example:
        >>> quantise_rows(torch.tensor([[0.0, 2.54]]))[0].tolist()
        [[0, 127]]
    """
    matrix = matrix.detach().float().cpu()
    scale = matrix.abs().amax(dim=1) / ROW_LEVELS
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = (matrix / safe[:, None]).round().clamp(-ROW_LEVELS, ROW_LEVELS).to(torch.int8)
    return codes.contiguous(), scale.contiguous()


def dequantise_rows(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """int8 codes [R, C] and row scales [R] → the float32 matrix they stand for."""
    return codes.float() * scale.float()[:, None]


def fingerprint(tensors: Mapping[str, torch.Tensor]) -> str:
    """sha256 of named tensors' float32 values, in name order: what a stored difference was taken from.

    Example:
        >>> fingerprint({"w": torch.zeros(2)}) == fingerprint({"w": torch.zeros(2, dtype=torch.float16)})
        True
    """
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode())
        digest.update(tensors[name].detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
