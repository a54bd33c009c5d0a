"""The tiny policy's tokenizer corpus, drawn from the catalog and the chat format, and the tiny policy built on it.

The BPE tokenizer is trained on catalog text (titles, descriptions, bullet points, option values), every goal
instruction and the chat text of oracle episodes (the prompts, pages and replies that the model will read and
write), so that ASINs, option values and the reply tags tokenize compactly. Building is cheap (seconds) and
deterministic; the model starts from random weights and learns in the SFT run (turn drills, then demonstrations).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ..models.tiny import TinyPolicySpec, build_tiny_policy
from ..rollout.chat import ChatFormat
from ..webshop import WebShop, WebShopEnv
from .demonstrations import reply_for
from .scripted import OraclePolicy, scripted_steps


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
    for index in goal_indices:
        previous, last_action = None, None
        yield chat.task_message(shop.goals[index]["instruction_text"])
        for step in scripted_steps(env, OraclePolicy(), index):
            yield chat.turn_message(env.num_steps + 1, env.max_steps - env.num_steps, step.observation,
                                    step.available_actions, previous, last_action)
            yield reply_for(step.action, env)
            previous, last_action = step.observation, step.action


def ensure_tiny_policy(out_dir: str | Path, spec: TinyPolicySpec, shop: WebShop, chat: ChatFormat,
                       train_goals: list[int]) -> Path:
    """Build the tiny tokenizer and randomly initialised model into ``out_dir`` unless already built with these
    settings (the corpus: the catalog and oracle episodes of the first ``spec.corpus_goals`` training goals).

    Raises:
        ValueError: ``out_dir`` holds a tiny build made with other settings or data (choose another folder).
    """
    texts = list(tokenizer_corpus(shop, chat, train_goals[: spec.corpus_goals]))
    return build_tiny_policy(texts, out_dir, spec)
