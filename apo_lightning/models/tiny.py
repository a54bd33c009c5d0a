"""The tiny default policy: a BPE tokenizer trained on the catalog and a few-million-parameter Qwen2 decoder.

:class:`TinyPolicySpec` is the single source of the tiny model's shape and tokenizer settings: every function here
takes one, and the configs set its fields. :func:`build_tiny_policy` trains the tokenizer on a corpus of texts
(``baselines.corpus.tokenizer_corpus`` draws it from the catalog and oracle episodes) and puts a randomly
initialised, seeded ``Qwen2ForCausalLM`` on top, in an ordinary Hugging Face model directory. It is meant to be
warm-started by SFT (turn drills, then oracle demonstrations; ``lit.sft_module``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from ..utils.files import atomic_directory, read_json
from ..utils.settings import check_settings
from .hub import missing_model_files

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
_FORMAT_VERSION = 2


@dataclass
class TinyPolicySpec:
    """The tiny default policy: a ``transformers`` Qwen2 decoder with a byte-level BPE tokenizer.

    The defaults give about 3.4 M parameters with a 4k vocabulary (embeddings tied with the output head).

    Args:
        vocab_size: upper bound on the BPE vocabulary, including the 256 byte symbols and the 3 special tokens (a
            small corpus may give fewer); the 4 reply tags come on top.
        hidden_size: model width (head size = hidden_size / num_heads).
        num_layers: decoder layers.
        num_heads: attention heads.
        num_kv_heads: key/value heads (grouped-query attention).
        intermediate_size: MLP width.
        max_position_embeddings: longest sequence in tokens.
        tie_word_embeddings: share the input embeddings with the output head.
        seed: weight initialisation seed (part of the model's identity, like its shape; not the run seed).
        corpus_goals: how many training goals' oracle episodes go into the tokenizer corpus.
    """

    vocab_size: int = 4096
    hidden_size: int = 192
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    seed: int = 0
    corpus_goals: int = 300

    def __post_init__(self) -> None:
        least_vocab = 256 + len(SPECIAL_TOKENS)  # the byte alphabet and the special tokens
        sizes = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                 "max_position_embeddings")
        check_settings("tiny.", [(name, getattr(self, name), getattr(self, name) >= 1, ">= 1") for name in sizes])
        check_settings("tiny.", [
            ("corpus_goals", self.corpus_goals, self.corpus_goals >= 0, ">= 0"),
            ("hidden_size", self.hidden_size, self.hidden_size % self.num_heads == 0,
             f"divisible by num_heads ({self.num_heads})"),
            ("num_heads", self.num_heads, self.num_heads % self.num_kv_heads == 0,
             f"divisible by num_kv_heads ({self.num_kv_heads})"),
            ("vocab_size", self.vocab_size, self.vocab_size >= least_vocab,
             f">= {least_vocab} (the byte alphabet and the special tokens)")])


def train_tiny_tokenizer(texts: Iterable[str], out_dir: str | Path, vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer with ChatML special tokens and save it to ``out_dir``.

    The tokenizer follows Qwen2's conventions: ``<|endoftext|>`` (id 0) is the pad token, ``<|im_end|>`` (id 2)
    the eos token, no bos token, and a ChatML ``chat_template`` for system/user/assistant messages with
    ``add_generation_prompt``. Byte-level with no normalizer, so ``decode(encode(s)) == s`` for every string,
    non-ASCII included. ``<think>``, ``</think>``, ``<answer>`` and ``</answer>`` are added tokens (one id each,
    not special, so ``skip_special_tokens=True`` keeps them). The special and added tokens are matched before
    pre-tokenization, so no merge ever crosses them. Training is deterministic and independent of the order of
    ``texts`` (they are sorted first).

    Args:
        texts: the corpus (catalog, goal and prompt text); consumed once.
        out_dir: directory to ``save_pretrained`` into (created if needed).
        vocab_size: see :class:`TinyPolicySpec`.

    Returns:
        The trained tokenizer (``len(tokenizer)`` is the vocabulary size a model needs).

    Raises:
        ValueError: ``texts`` is empty or ``vocab_size`` cannot hold the byte alphabet and special tokens.
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


def build_tiny_model(tokenizer: PreTrainedTokenizerBase, out_dir: str | Path, spec: TinyPolicySpec) -> PreTrainedModel:
    """Build a randomly initialised ``Qwen2ForCausalLM`` of shape ``spec`` for ``tokenizer``; save both to ``out_dir``.

    The vocabulary size is ``len(tokenizer)``; eos is ``<|im_end|>`` and pad ``<|endoftext|>``, in the config and in
    the saved ``generation_config.json``. Initialisation uses ``spec.seed`` in a forked RNG, so the global torch RNG
    is left untouched and the same arguments give bit-identical weights. The weights are float32 safetensors.
    ``tokenizer.model_max_length`` is set to ``spec.max_position_embeddings`` before it is saved.

    Returns:
        The model, in eval mode, float32, on CPU.

    Raises:
        ValueError: the tokenizer lacks the ChatML tokens.
    """
    vocab = tokenizer.get_vocab()
    missing = [token for token in (IM_END, ENDOFTEXT) if token not in vocab]
    if missing:
        raise ValueError(f"the tokenizer has no {missing} token(s); build it with train_tiny_tokenizer")
    eos_id, pad_id = vocab[IM_END], vocab[ENDOFTEXT]

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.eval()

    tokenizer.model_max_length = spec.max_position_embeddings
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return model


def build_tiny_policy(texts: Iterable[str], out_dir: str | Path, spec: TinyPolicySpec, overwrite: bool = False) -> Path:
    """Train the tiny tokenizer and build the tiny model into ``out_dir``, once.

    The settings (``spec`` and a SHA-256 of the sorted texts) are recorded in ``out_dir/apo_tiny_policy.json``,
    written last. If ``out_dir`` already holds a complete build with the same settings, nothing is done. The build
    goes to a temporary sibling directory that is renamed into place, so ``out_dir`` is never half-written, and
    concurrent callers (e.g. DDP ranks) with the same settings all succeed.

    Args:
        texts: the tokenizer corpus (see :func:`train_tiny_tokenizer`).
        out_dir: the model directory to create.
        spec: the model and tokenizer settings.
        overwrite: replace an earlier tiny build in ``out_dir`` whose settings differ.

    Returns:
        ``out_dir`` as a ``Path``; open it with ``models.loading.load_policy``.

    Raises:
        ValueError: ``out_dir`` holds a tiny build with other settings and ``overwrite`` is false.
        FileExistsError: ``out_dir`` is a non-empty directory that is not a tiny build (never deleted).
    """
    out_dir = Path(out_dir)
    corpus = sorted(texts)
    digest = hashlib.sha256()
    for text in corpus:
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    settings = {"format": _FORMAT_VERSION, **asdict(spec), "num_texts": len(corpus), "texts_sha256": digest.hexdigest()}
    settings.pop("corpus_goals")  # what the texts are drawn from; the texts' hash is what counts

    settings_file = out_dir / TINY_SETTINGS_FILE
    existing = read_json(settings_file, dict, "the tiny build's settings") if settings_file.is_file() else None
    if existing == settings and not missing_model_files(out_dir):
        return out_dir
    if existing is not None and not overwrite:
        changed = sorted(k for k in set(settings) | set(existing) if settings.get(k) != existing.get(k))
        problem = f"other settings (differing: {', '.join(changed)})" if changed else "files missing"
        raise ValueError(f"{out_dir} already holds a tiny policy build with {problem}; "
                         "pass overwrite=True to rebuild it, or choose another out_dir")
    if existing is None and out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} exists, is not empty and has no {TINY_SETTINGS_FILE}, so it is not a tiny "
                              "policy build; choose another out_dir or remove it yourself")

    with atomic_directory(out_dir, replace=existing is not None) as tmp:
        tokenizer = train_tiny_tokenizer(corpus, tmp, spec.vocab_size)
        build_tiny_model(tokenizer, tmp, spec)
        (tmp / TINY_SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    if read_json(settings_file) != settings:  # another process installed a different build first
        raise ValueError(f"{out_dir} was built concurrently with other settings; remove it and retry")
    return out_dir

