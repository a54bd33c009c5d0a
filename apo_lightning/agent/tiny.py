"""The tiny default policy: its settings, and the tokenizer corpus drawn from the catalog and the chat format.

The BPE tokenizer is trained on catalog text (titles, descriptions, bullet points, option values), every goal
instruction and the chat text of oracle episodes (the prompts, pages and replies that the model will read and
write), so that ASINs, option values and the reply tags tokenize compactly.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from ..webshop import WebShop, WebShopEnv
from .chat import ChatFormat
from .copy_pretrain import TurnDrills, copy_accuracy, copy_pretrain
from .demonstrations import reply_for
from .policy import build_tiny_policy, load_policy, resolve_device
from .scripted import OraclePolicy


COPY_MARKER = "apo_copy_pretrain.json"


@dataclass
class TinyPolicySpec:
    """Settings of the tiny default policy (a ``transformers`` Qwen2 decoder with a BPE tokenizer).

    Args:
        vocab_size: BPE vocabulary size.
        hidden_size: model width.
        num_layers: decoder layers.
        num_heads: attention heads.
        num_kv_heads: key/value heads (grouped-query attention).
        intermediate_size: MLP width.
        max_position_embeddings: longest sequence in tokens.
        seed: weight initialisation seed.
        corpus_goals: how many training goals' oracle episodes go into the tokenizer corpus.
        copy_steps: batches of turn drills after random initialisation (``copy_pretrain``; 0 = none). Without
            them a model this small does not learn to copy from its context during SFT.
        copy_batch_size: drills per batch.
        copy_learning_rate: AdamW learning rate of the drills.
        copy_device: where the drills train: "auto" (CUDA when available, else CPU), "cpu" or "cuda".
    """

    vocab_size: int = 4096
    hidden_size: int = 192
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 4096
    seed: int = 0
    corpus_goals: int = 300
    copy_steps: int = 400
    copy_batch_size: int = 32
    copy_learning_rate: float = 2e-3
    copy_device: str = "auto"


def tokenizer_corpus(shop: WebShop, chat: ChatFormat, goal_indices: list[int], max_steps: int = 15) -> Iterator[str]:
    """Catalog text, every instruction, and the chat text of oracle episodes on ``goal_indices``."""
    for product in shop.products:
        yield product["Title"]
        yield product["Description"][:1000]
        yield from product["BulletPoints"]
        for name, values in product["options"].items():
            yield f"{name}: {', '.join(values)}"
    for goal in shop.goals:
        yield goal["instruction_text"]
    yield chat.system_prompt
    env = WebShopEnv(shop, max_steps=max_steps)
    oracle = OraclePolicy()
    for index in goal_indices:
        observation = env.reset(index)
        oracle.reset(env.goal)
        yield chat.task_message(env.instruction_text)
        previous, last_action, done = None, None, False
        while not done:
            available = env.available_actions()
            yield chat.turn_message(env.num_steps + 1, env.max_steps - env.num_steps, observation, available,
                                    previous, last_action)
            action = oracle.act(observation, available)
            yield reply_for(action, env)
            previous, last_action = observation, action
            observation, _, done, _ = env.step(action)


def ensure_tiny_policy(out_dir: str | Path, spec: TinyPolicySpec, shop: WebShop, chat: ChatFormat,
                       train_goals: list[int]) -> Path:
    """Build the tiny tokenizer and model into ``out_dir`` and run its copy drills, unless already done.

    The copy drills' settings and result (final loss, exact-copy accuracy on held-out drills) are recorded in
    ``out_dir/apo_copy_pretrain.json``, written last.

    Raises:
        ValueError: ``out_dir`` holds a tiny build made with other settings or data (choose another folder).
    """
    settings = asdict(spec)
    corpus_goals = settings.pop("corpus_goals")
    vocab_size = settings.pop("vocab_size")
    device = settings.pop("copy_device")
    drills = {k: settings.pop(k) for k in ("copy_steps", "copy_batch_size", "copy_learning_rate")}
    drills["seed"] = spec.seed
    texts = list(tokenizer_corpus(shop, chat, train_goals[:corpus_goals]))
    path = build_tiny_policy(texts, out_dir, vocab_size, **settings)
    marker = path / COPY_MARKER
    done = json.loads(marker.read_text()) if marker.exists() else None
    if drills["copy_steps"] == 0 or (done is not None and done["settings"] == drills):
        return path
    if done is not None:
        raise ValueError(f"{path} was copy-pretrained with {done['settings']}, not {drills}; remove it to rebuild")
    model, tokenizer = load_policy(str(path), device=resolve_device(device))
    held_out = max(1, min(64, len(train_goals) // 10))  # goals for the accuracy check, never drilled
    drill_goals, check_goals = train_goals[:-held_out], train_goals[-held_out:]
    losses = copy_pretrain(model, TurnDrills(shop, chat, tokenizer, drill_goals), drills["copy_steps"],
                           drills["copy_batch_size"], drills["copy_learning_rate"], drills["seed"])
    accuracy = copy_accuracy(model, TurnDrills(shop, chat, tokenizer, check_goals))
    model.to("cpu")
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        model.save_pretrained(tmp)
        os.replace(Path(tmp) / "model.safetensors", path / "model.safetensors")
    marker.write_text(json.dumps({"settings": drills, "final_loss": sum(losses[-20:]) / len(losses[-20:]),
                                  "exact_copy_accuracy": accuracy}, indent=1))
    return path
