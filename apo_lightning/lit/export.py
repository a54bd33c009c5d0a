"""Export a training checkpoint's policy as a Hugging Face model directory.

    python -m apo_lightning.lit.export checkpoints/sft_quickstart/step=300.ckpt data/models/quickstart-300 \\
        --like data/models/quickstart-init-192 [--dtype bfloat16]

The checkpoint of an ``SFTModule`` or ``WebShopRLModule`` holds the policy's weights under ``policy.``; the
architecture and tokenizer come from ``--like``, the model directory the run started from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..models.loading import export_policy, load_policy


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path, like: str, dtype: str | None = None) -> Path:
    """Load ``like``, put the checkpoint's ``policy.*`` weights into it and save it to ``out_dir``.

    Raises:
        ValueError: the checkpoint holds no policy weights, or they do not fit the architecture of ``like``
            (names the missing and unexpected keys).
    """
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["state_dict"]
    weights = {k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")}
    if not weights:
        raise ValueError(f"{checkpoint} holds no policy weights (no 'policy.*' keys)")
    model, tokenizer = load_policy(like)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in ("lm_head.weight",) or not model.config.tie_word_embeddings]
    if missing or unexpected:
        raise ValueError(f"{checkpoint} does not fit {like}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return export_policy(model, tokenizer, out_dir, dtype)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m apo_lightning.lit.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("out_dir")
    parser.add_argument("--like", required=True, help="the model directory the run started from")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None)
    args = parser.parse_args(argv)
    print(export_checkpoint(args.checkpoint, args.out_dir, args.like, args.dtype))


if __name__ == "__main__":
    main()
