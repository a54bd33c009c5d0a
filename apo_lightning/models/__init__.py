"""Layer 1: policy models. Loading any causal LM (``loading``), the tiny default decoder and its tokenizer
(``tiny``, whose ``TinyPolicySpec`` is the single source of its shape), and SmolLM2 from its GGUF (``gguf``)."""
