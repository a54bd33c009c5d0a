"""Layer 1: policy models. Loading any causal LM or LoRA adapter folder (``loading``), what a model directory or
adapter folder holds and whether a name is a local path (``hub``), LoRA settings and the policy a run trains from a
model or an adapter (``lora``), the tiny default decoder and its tokenizer (``tiny``, whose ``TinyPolicySpec`` is the
single source of its shape), and SmolLM2 from its GGUF (``gguf``)."""
