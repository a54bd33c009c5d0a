"""Oracle episodes played through :class:`~.trl_env.WebShopToolEnv` as TRL conversational SFT rows: a policy
fine-tuned on them with TRL's ``SFTTrainer`` writes the tool calls ``GRPOTrainer(environment_factory=...)`` parses.

    from trl import SFTConfig, SFTTrainer
    from apo_lightning.integrations.trl_env import WebShopToolEnv, goal_rows
    from apo_lightning.integrations.trl_sft import oracle_sft_rows, sft_dataset

    rows = oracle_sft_rows(WebShopToolEnv(split="train"), goal_rows("train", limit=64))
    trainer = SFTTrainer(model=..., args=SFTConfig(assistant_only_loss=True, ...), train_dataset=sft_dataset(rows))

A row is what ``GRPOTrainer`` shows and records for the same dataset row: its prompt with ``reset``'s page appended to
the last user message, then per tool call an assistant message with ``tool_calls`` and the ``tool`` message
``{"role": "tool", "name": ..., "content": ...}`` with what the tool returned (``str({"error": message})`` for a
refusal, as TRL writes it), and a last assistant message. ``tools`` holds the tools' JSON schemas in the order TRL
lists an environment's tools (its public methods by name), so the system prompt the chat template renders from them
is the one the GRPO prompt has.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from transformers.utils import get_json_schema

from ..baselines.scripted import OraclePolicy
from ..webshop import parse_action
from ..webshop.pages import shown_text
from .trl_env import WebShopToolEnv

#: The assistant's last message, after the tool call that ended the episode.
FINAL_MESSAGE = "Done."


def tool_schemas(env: WebShopToolEnv) -> list[dict[str, Any]]:
    """The JSON schemas (transformers' ``get_json_schema``) of ``env``'s tools, in the order ``GRPOTrainer`` lists
    them: the public methods of its class other than ``reset`` and ``get_reward``, by name."""
    names = [name for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
             if not name.startswith("_") and name not in ("reset", "get_reward")]
    return [get_json_schema(getattr(env, name)) for name in names]


def oracle_sft_rows(env: WebShopToolEnv, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Play the oracle (:class:`~apo_lightning.baselines.scripted.OraclePolicy`) through ``env``'s tools on each
    ``goal_rows`` row and write each episode as a TRL conversational language-modeling row.

    Args:
        env: the environment to play in (reset for each row; its last episode stays in it).
        rows: ``GRPOTrainer`` dataset rows, ``{"prompt": [{"role": ..., "content": str}, ...], "goal_index": int}``
            (:func:`~.trl_env.goal_rows`).

    Returns:
        One row per input row, in order: ``{"messages": [...], "tools": [...]}``. ``messages``: the prompt messages
        with the first page appended to the last one's content, then ``{"role": "assistant", "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "search" | "click", "arguments": {"query" |
        "element": str}}}]}`` and ``{"role": "tool", "name": ..., "content": str}`` per step, then ``{"role":
        "assistant", "content": FINAL_MESSAGE}``. ``tools``: :func:`tool_schemas`. :func:`sft_dataset` makes them a
        dataset.

    Raises:
        ValueError: a row without ``goal_index`` or outside ``env``'s split (from ``env.reset``), or without
            ``prompt``.
    """
    tools = tool_schemas(env)
    sft_rows = []
    for row in rows:
        if "prompt" not in row:
            raise ValueError(f"each row must hold a 'prompt' (see goal_rows()); got fields {sorted(row)}")
        messages = copy.deepcopy(row["prompt"])
        page = env.reset(**row)
        messages[-1]["content"] += page  # as GRPOTrainer appends reset's return to the last user message
        policy = OraclePolicy()
        policy.reset(env.env.engine.goal)
        while not env.ended:
            name, argument = parse_action(policy.act(page, env.info["available_actions"]))
            # the oracle lower-cases what it clicks; write it as the page shows it ("B07XYZ1234", "Buy Now"), as the
            # click tool asks, so that a policy imitating it copies tokens instead of learning to lower-case them
            arguments = ({"query": argument} if name == "search"
                         else {"element": shown_text(env.env.engine.page, argument)})
            try:
                page = getattr(env, name)(**arguments)
                content = page
            except ValueError as error:  # a refusal: TRL hands the model str({"error": message})
                content = str({"error": str(error)})
            messages.append({"role": "assistant", "content": "",
                             "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]})
            messages.append({"role": "tool", "name": name, "content": content})
        messages.append({"role": "assistant", "content": FINAL_MESSAGE})
        sft_rows.append({"messages": messages, "tools": tools})
    return sft_rows


def sft_dataset(rows: list[dict[str, Any]]):
    """``rows`` (:func:`oracle_sft_rows`) as a ``datasets.Dataset`` whose ``messages`` and ``tools`` stay JSON
    objects (``datasets.Json``): Arrow would otherwise merge the two tools' argument dicts into one struct and give
    every call both ``query`` and ``element``, one of them null, which the chat template would then render.

    Raises:
        ImportError: ``datasets`` is not installed (it comes with ``pip install -e ".[trl]"``).
    """
    from datasets import Dataset, Features, Json, List

    return Dataset.from_list(rows, features=Features({"messages": List(Json()), "tools": List(Json())}))
