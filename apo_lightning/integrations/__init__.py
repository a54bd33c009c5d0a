"""Adapters that let trainers this project did not write drive WebShop: ``trl_env`` (TRL's ``GRPOTrainer``
``environment_factory``), ``trl_sft`` (oracle episodes as TRL's SFT rows) and ``verifiers_env`` (a ``verifiers``
taskset, installed as the top-level ``apo_lightning_webshop``). Each wraps the gymnasium env (``webshop.gym_env``);
none re-implements a page, an action or a reward. The top layer: it may import every layer, and nothing imports it."""
