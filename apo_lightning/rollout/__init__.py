"""Layer 2: rollouts. The chat format and reply parsing (``chat``), trajectories (``trajectory``), prompt
segmentation under a history window and a context budget (``segments``), the batched multi-turn engine
(``engine``) and its KV cache (``kv_cache``), and collation into training tensors (``collate``)."""
