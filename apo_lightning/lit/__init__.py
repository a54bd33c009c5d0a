"""Layer 6: the Lightning layer. Data modules (``rl_data``, ``sft_data``), what they share (``settings``: the base
class, the policy check, ``SettingError``), A*-PO stage 1 (``stage1``), the cached oracle demonstrations
(``demos``), the batch streams (``streams``), modules (``rl_module``, ``sft_module``), callbacks (``callbacks``),
the checkpoint-to-model export (``export``), the learning sanity setting (``fixed_goals``), the run manifest
(``manifest``) and the command line (``cli``)."""
