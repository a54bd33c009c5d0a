"""Layer 1: policy models. Loading any causal LM (``loading``), what a model directory holds and whether a name is a
local path (``hub``), the tiny default decoder and its tokenizer (``tiny``, whose ``TinyPolicySpec`` is the single
source of its shape), and SmolLM2 from its GGUF (``gguf``)."""
