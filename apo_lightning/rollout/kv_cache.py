"""The rollout engine's KV cache: keys and values kept between turns, and written in place while decoding.

A multi-turn chat only feeds each turn's new tokens: the keys/values of everything before are kept per episode
(:class:`Past`) and re-stacked into the batch cache of the next turn (:func:`stack_pasts`). During decoding,
:class:`GrowingLayer` writes each new token in place instead of copying the whole cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """A KV-cache layer with spare room: each decoded token is written in place instead of copying the whole
    cache (``DynamicLayer`` concatenates, which at batch 32 and a 1,500-token context is most of a decode step).
    The capacity doubles when it runs out; ``keys``/``values`` are views of the filled part."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._keys = self._values = None
            self._length = 0
        length = self._length + key_states.shape[-2]
        if self._keys is None or length > self._keys.shape[-2]:
            capacity = max(length, 2 * (self._keys.shape[-2] if self._keys is not None else 0), 64)
            keys = key_states.new_empty((*key_states.shape[:2], capacity, key_states.shape[-1]))
            values = value_states.new_empty((*value_states.shape[:2], capacity, value_states.shape[-1]))
            if self._length:
                keys[..., :self._length, :] = self._keys[..., :self._length, :]
                values[..., :self._length, :] = self._values[..., :self._length, :]
            self._keys, self._values = keys, values
        self._keys[..., self._length:length, :] = key_states
        self._values[..., self._length:length, :] = value_states
        self._length = length
        self.keys, self.values = self._keys[..., :length, :], self._values[..., :length, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized and self._length:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys, self.values = self._keys[..., :self._length, :], self._values[..., :self._length, :]


@dataclass
class Past:
    """Cached keys/values of the first ``length`` tokens of an episode's current segment: per layer
    ``(keys (heads, length, dim), values (heads, length, dim))``."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    length: int


def new_cache(model) -> DynamicCache:
    """An empty cache for ``model``; plain full-attention layers become :class:`GrowingLayer` (same results, less
    copying). Models with other layer kinds (sliding windows) keep their own."""
    cache = DynamicCache(config=model.config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache


def extract_past(cache: DynamicCache, row: int, attention_row: torch.Tensor) -> Past:
    """The keys/values of one batch row's real tokens (``attention_row`` 1; pads dropped), for reuse next turn."""
    keep = attention_row.bool()
    layers = [(layer.keys[row][:, keep, :].clone(), layer.values[row][:, keep, :].clone()) for layer in cache.layers]
    return Past(layers, int(keep.sum()))


def stack_pasts(pasts: list[Past | None], width: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Right-align every row's cached keys/values in zero-padded ``(B, heads, width, dim)`` tensors per layer
    (rows without a past are all padding)."""
    reference = next(p for p in pasts if p is not None)
    stacked = []
    for layer, (k_ref, v_ref) in enumerate(reference.layers):
        keys = k_ref.new_zeros((len(pasts), k_ref.shape[0], width, k_ref.shape[2]))
        values = v_ref.new_zeros((len(pasts), v_ref.shape[0], width, v_ref.shape[2]))
        for i, past in enumerate(pasts):
            if past is not None:
                k, v = past.layers[layer]
                keys[i, :, width - k.shape[1]:] = k
                values[i, :, width - v.shape[1]:] = v
        stacked.append((keys.to(device), values.to(device)))
    return stacked
