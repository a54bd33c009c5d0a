"""Layer 6: the Lightning layer. Data modules (``rl_data``, ``sft_data``) with their settings and streams, modules
(``rl_module``, ``sft_module``), callbacks, and the command line (``cli``)."""
