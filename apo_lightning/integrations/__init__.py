"""Adapters that let trainers this project did not write drive WebShop: ``trl_env`` (TRL's ``GRPOTrainer``
``environment_factory``). Each wraps the gymnasium env (``webshop.gym_env``); none re-implements a page, an action or
a reward. The top layer: it may import every layer, and nothing imports it."""
