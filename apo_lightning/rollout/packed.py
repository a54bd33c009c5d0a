"""Decoding on a CPU with prepacked weights: every linear layer reads its weight in oneDNN's blocked layout.

A decode step multiplies a few rows (one per live episode) by every weight matrix once, so it is bound by how fast
the matrix kernel streams the weights. PyTorch's default CPU kernel reads a ``(out, in)`` float32 weight at well
below the machine's memory bandwidth for one row; oneDNN reads a weight reordered once into its blocked layout
considerably faster, and a bfloat16 one faster still (``benchmarks/rollout_throughput.py`` measures both). This is the
packing ``torch.compile`` applies to frozen CPU models (Inductor's ``freezing``: ``mkldnn._reorder_linear_weight``
and ``mkldnn._linear_pointwise``); it is done here by hand because a policy's weights change after every optimizer
step, so the packed copies live for one rollout and are made afresh for the next.

Only small inputs take the packed path (a decode step's ``(b, 1, in)``); a prompt's prefill, many rows at once, runs
the layer's own forward. The results equal the plain layer's up to float rounding.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

_reorder_linear_weight = torch.ops.mkldnn._reorder_linear_weight
_linear_pointwise = torch.ops.mkldnn._linear_pointwise

#: Inputs with at most this many rows (batch × positions) use the packed weight; more rows run ``nn.Linear``.
MAX_PACKED_ROWS = 64


def packing_available(model: nn.Module) -> bool:
    """True when ``model``'s weights are on the CPU, in float32 or bfloat16, and this PyTorch has oneDNN."""
    weight = next(model.parameters())
    return (weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available())


@contextmanager
def packed_linears(model: nn.Module, rows_hint: int = 1) -> Iterator[int]:
    """Within the block, every ``nn.Linear`` of ``model`` (a peft LoRA layer's base layer included) multiplies inputs
    of at most :data:`MAX_PACKED_ROWS` rows by a oneDNN-packed copy of its weight; on leaving, the layers are as
    before. Use it under ``torch.no_grad()`` for frozen-weight decoding: the copies do not follow weight updates
    made inside the block, and no gradient flows through them.

    Args:
        model: the policy; nothing is packed unless :func:`packing_available`.
        rows_hint: the number of rows the packed layout is tuned for (the decode batch).

    Yields:
        How many layers were packed (0 when packing is not available).
    """
    if not packing_available(model):
        yield 0
        return
    layers = [m for m in model.modules() if type(m) is nn.Linear]
    for layer in layers:
        packed = _reorder_linear_weight(layer.weight.detach(), rows_hint)
        layer.forward = _packed_forward(layer, packed)  # an instance attribute shadows nn.Linear.forward
    try:
        yield len(layers)
    finally:
        for layer in layers:
            del layer.forward


def _packed_forward(layer: nn.Linear, packed: torch.Tensor):
    """``layer``'s forward through ``packed`` for small inputs, its own for the rest."""
    plain = nn.Linear.forward.__get__(layer)
    bias = layer.bias.detach() if layer.bias is not None else None

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > MAX_PACKED_ROWS or x.dtype != packed.dtype or x.requires_grad:
            return plain(x)
        out = _linear_pointwise(x.reshape(rows, x.shape[-1]), packed, bias, "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward
