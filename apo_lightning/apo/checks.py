"""Argument checks and masking shared by the losses: a shape mismatch raises ``ValueError`` naming the argument and
the shapes; masked positions become exactly 0 before any arithmetic (a ``-inf`` in padding never reaches a loss)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def require_tensor(name: str, x: object) -> Tensor:
    """``x`` itself; ValueError naming ``name`` unless it is a tensor."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def require_ndim(name: str, x: object, ndim: int, shape_doc: str) -> Tensor:
    """``x`` itself; ValueError naming ``name`` and ``shape_doc`` unless it is an ``ndim``-D tensor."""
    x = require_tensor(name, x)
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {shape_doc}, got {tuple(x.shape)}")
    return x


def require_same_shape(name: str, x: object, ref_name: str, ref: Tensor) -> Tensor:
    """``x`` itself; ValueError naming both unless it is a tensor shaped like ``ref``."""
    x = require_tensor(name, x)
    if x.shape != ref.shape:
        raise ValueError(
            f"{name} has shape {tuple(x.shape)} but {ref_name} has shape {tuple(ref.shape)}; they must match"
        )
    return x


def require_batch_vector(name: str, x: object, batch: int) -> Tensor:
    """``x`` itself; ValueError naming ``name`` unless it is a (B,) tensor with B = ``batch``."""
    x = require_tensor(name, x)
    if x.dim() != 1 or x.shape[0] != batch:
        raise ValueError(f"{name} must have shape (B,) = ({batch},), got {tuple(x.shape)}")
    return x


def require_positive_finite(name: str, value: float) -> float:
    """``float(value)``; ValueError naming ``name`` unless it is finite and > 0."""
    value = float(value)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def masked(x: Tensor, mask: Tensor) -> Tensor:
    """``x`` in float32 with every position where ``mask`` is 0 set to exactly 0 (gradient there is 0 too)."""
    return torch.where(mask, x.float(), torch.zeros((), dtype=torch.float32, device=x.device))
