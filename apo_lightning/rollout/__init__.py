"""Layer 2: rollouts. The chat format and reply parsing (``chat``), trajectories (``trajectory``), prompt
segmentation under a context budget (``segments``), the batched multi-turn engine (``engine``), its KV cache
(``kv_cache``) and its valid-click decoding (``constrained``), the sampling settings that build it (``settings``),
and collation into training tensors (``collate``)."""
