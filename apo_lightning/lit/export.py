"""Export a training checkpoint's policy as a Hugging Face model directory, or as an adapter folder when it was
trained with LoRA.

    python -m apo_lightning.lit.export checkpoints/sft_quickstart/step=300.ckpt data/models/quickstart-300 \\
        --like data/models/quickstart-init-192 [--dtype bfloat16]

The checkpoint of an ``SFTModule`` or ``WebShopRLModule`` holds the policy's weights under ``policy.``; the
architecture and tokenizer come from ``--like``, the model (directory or adapter folder) the run started from. A
LoRA checkpoint (its LoRA settings in its hyper-parameters) is rebuilt as its run built the policy
(``models.lora.load_for_training``) and exported as its trained adapter, unmerged, over the base.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..models.loading import export_policy
from ..models.lora import REFERENCE_ADAPTER, LoraSettings, load_for_training


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path, like: str, dtype: str | None = None) -> Path:
    """Load ``like`` and prepare it as the run did (``models.lora.load_for_training`` with the checkpoint's LoRA
    settings), put the checkpoint's ``policy.*`` weights into it and save it to ``out_dir``
    (``models.loading.export_policy``: with LoRA, the trained adapter as an adapter folder). The frozen weights a
    LoRA checkpoint leaves out (its ``reloaded_weights``) are those of ``like``, the start the run loaded.

    Raises:
        ValueError: the checkpoint holds no policy weights or no LoRA settings, or its weights do not fit the
            architecture of ``like`` (names the missing and unexpected keys).
    """
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    weights = {k[len("policy."):]: v for k, v in saved["state_dict"].items() if k.startswith("policy.")}
    if not weights:
        raise ValueError(f"{checkpoint} holds no policy weights (no 'policy.*' keys)")
    reloaded = {k[len("policy."):] for k in saved.get("reloaded_weights", []) if k.startswith("policy.")}
    lora = saved.get("hyper_parameters", {}).get("lora")
    if lora is None:
        raise ValueError(f"{checkpoint} records no LoRA settings (hyper_parameters.lora): it was not written by "
                         "this version's cli.py fit")
    lora = LoraSettings(**lora) if isinstance(lora, dict) else lora
    # as the run built it: the RL module keeps an adapter folder's frozen adapter beside its trained copy
    keep = any(f".{REFERENCE_ADAPTER}." in k for k in weights.keys() | reloaded)
    model, tokenizer, _ = load_for_training(like, lora, keep_reference=keep)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # a LoRA checkpoint leaves out the frozen weights (CheckedResume): those of ``like`` stand
    missing = [k for k in missing if k not in reloaded
               and (not k.endswith("lm_head.weight") or not model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"{checkpoint} does not fit {like}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return export_policy(model, tokenizer, out_dir, dtype)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, prog="python -m apo_lightning.lit.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("out_dir")
    parser.add_argument("--like", required=True, help="the model directory the run started from")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None)
    args = parser.parse_args(argv)
    print(export_checkpoint(args.checkpoint, args.out_dir, args.like, args.dtype))


if __name__ == "__main__":
    main()
