"""apo_lightning: A*-PO and RAGEN-style multi-turn RL for LLM agents on WebShop, with PyTorch Lightning."""

__version__ = "0.1.0"
