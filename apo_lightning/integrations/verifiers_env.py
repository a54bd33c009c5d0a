"""WebShop as a ``verifiers`` environment: one goal per task, the model's replies stepped as actions, the WebShop
score the reward.

    import asyncio
    from verifiers.v1 import EvalClientConfig
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig
    from apo_lightning.integrations.verifiers_env import (WebShopTasksetConfig, WebShopVerifiersEnvConfig,
                                                          load_environment)

    env = load_environment(data_dir="synthetic", split="test")          # a verifiers Env; env.taskset: the goals
    config = EvalConfig(env=WebShopVerifiersEnvConfig(taskset=WebShopTasksetConfig(split="test")),
                        model="my-model", client=EvalClientConfig(base_url="http://localhost:8000/v1"),
                        select={"limit": 20}, push=False, rich=None)
    episodes = asyncio.run(run_eval(config))                              # verifiers' own eval loop
    rewards = [trace.reward for episode in episodes for trace in episode.traces]

The contract of verifiers 0.4.0 (``pip install -e ".[verifiers]"``, Python >= 3.11; no training stack: this module
imports neither torch nor transformers). 0.4.0 ships only the ``verifiers.v1`` API, with no ``MultiTurnEnv`` or
``ToolEnv``: an environment is a ``Taskset`` that yields ``Task`` s (their ``TaskData`` rides on every trace), an
``Env`` whose ``run(task, agents)`` plays one episode with the agents its ``EnvConfig`` declares as ``AgentConfig``
fields, and a ``Harness``, the agent's program. ``vf.load_environment(config)`` builds the ``Env``; it finds the
three classes by importing the module that ``config.taskset.id`` names (its ``__all__`` exports one subclass of
each). An env steps a game between the model's turns through ``agents.<role>.interaction(task)``: ``turn()`` takes
the reply to the task's prompt, ``turn(text)`` sends the next user message and returns the next reply (verifiers'
own TextArena taskset plays its games so), and leaving the block ends the rollout and runs the task's ``@vf.reward``
and ``@vf.metric`` methods over the trace. A rollout's model calls go from the harness to verifiers' interception
server (``verifiers/v1/interception/server.py``, ``InterceptionServer``: an aiohttp server on 127.0.0.1 that
verifiers itself starts, which records each call on the trace) and from there to the provider at
``EvalClientConfig.base_url`` (``verifiers/v1/clients/eval.py``, ``EvalClient.get_response``, over HTTP); verifiers
takes no in-process client object, so a policy is reached through an OpenAI-compatible chat-completions endpoint.

What this module adds:

- :class:`WebShopTaskset`: one task per goal of a split, ``goal_index`` on its data, the first turn of this
  project's chat format (``rollout.chat.ChatFormat``, the one its policies are trained on) as the prompt: the task
  message with the instruction, then the search page with its actions. Replies are written as in that format,
  ``<think>…</think><answer>search[…]</answer>`` or ``click[…]``, and parsed by ``rollout.chat.parse_reply``; a
  reply without an action is a no-op step, as in this project's rollouts. Not tools: a verifiers tool is an MCP server
  per rollout, while a text turn is what ``interaction`` exchanges.
- :class:`WebShopVerifiersEnv`: steps a ``WebShopGymEnv`` (the engine, no second implementation) with each reply's
  action and answers with the next page as ``ChatFormat.turn_message`` writes it, until a purchase or the step
  limit. It keeps the episode on ``trace.info["webshop"]``: ``goal_index``, ``actions`` (what reached the env,
  ``""`` for a reply without one), ``score``, ``won``, ``format_errors``.
- :class:`WebShopTask`: the reward ``webshop_score`` (the WebShop score, 0…1, 0 without a purchase) and the metrics
  ``won`` and ``format_errors``.
- :class:`ChatHarness`, the taskset's default harness: a tool-less chat loop run in this process, one chat
  completion per turn through the interception endpoint (the ``Harness.launch`` contract allows an in-process
  loop). verifiers' own ``null`` and ``bash`` harnesses run a script whose dependencies ``uv`` installs from the
  package index on first use, and the default ``AgentConfig`` runtime is a remote Prime sandbox; the role here
  runs in the local ``subprocess`` runtime instead.

verifiers resolves ``taskset.id`` by importing a top-level module of that name (``verifiers/v1/utils/loaders.py``,
``_import_plugin``; a dotted path fails there): the package installs ``apo_lightning_webshop``, which re-exports
this module, as :data:`TASKSET_ID`.
"""

from __future__ import annotations

import os
from typing import Any, Iterator, Literal

try:
    import verifiers.v1 as vf
    from openai import APIConnectionError, APIStatusError, AsyncOpenAI
    from verifiers.v1.dialects.chat import message_to_wire
    from pydantic import Field
    from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(f'{error}; the verifiers environment needs verifiers 0.4 (pip install -e ".[verifiers]", '
                      "Python >= 3.11)") from error

from ..rollout.chat import ChatFormat, RepeatPages, parse_reply
from ..webshop.gym_env import WebShopGymEnv

#: The id verifiers resolves (``--env.taskset.id``): the top-level module ``apo_lightning_webshop``, which re-exports
#: this one.
TASKSET_ID = "apo_lightning_webshop"

__all__ = ["TASKSET_ID", "ChatHarness", "ChatHarnessConfig", "WebShopData", "WebShopTask", "WebShopTaskset",
           "WebShopTasksetConfig", "WebShopVerifiersEnv", "WebShopVerifiersEnvConfig", "load_environment"]


class WebShopTasksetConfig(vf.TasksetConfig):
    """The catalog, the goals and the chat format of a WebShop taskset (``--env.taskset.*``)."""

    id: str = TASKSET_ID
    """The taskset verifiers loads: this module."""
    data_dir: str | None = "synthetic"
    """WebShop data folder, "synthetic" or None, as for ``WebShopGymEnv``."""
    split: Literal["train", "val", "test"] | None = "test"
    """The goals the tasks are: "train" | "val" | "test", or None for every goal."""
    observation_mode: Literal["text", "text_rich"] = "text"
    """How the engine writes pages (the chat format then shows one node a line either way)."""
    goals: Literal["synthetic", "human"] = "synthetic"
    """Synthetic (attribute-based) or human goals."""
    catalog_seed: int = 233
    """The catalog seed: prices, goals and their order (233 reproduces WebShop)."""
    max_steps: int = Field(15, ge=1)
    """Actions per episode; the one that reaches it without a purchase ends the episode with score 0."""
    repeat_pages: RepeatPages = "short"
    """``ChatFormat.repeat_pages``: "short" shows a page identical to the previous turn's as one line."""
    max_observation_chars: int = Field(0, ge=0)
    """``ChatFormat.max_observation_chars``: cut a page to this many characters (0 = no cut)."""

    def gym_env(self) -> WebShopGymEnv:
        """A new ``WebShopGymEnv`` with these settings (the catalog is loaded once per process).

        Raises:
            WebShopDataError: a missing or malformed data file.
        """
        return WebShopGymEnv(data_dir=self.data_dir, split=self.split, observation_mode=self.observation_mode,
                             goals=self.goals, catalog_seed=self.catalog_seed, max_steps=self.max_steps)

    def chat(self) -> ChatFormat:
        """The chat format that writes the messages (``rollout.chat.parse_reply`` reads the replies)."""
        return ChatFormat(repeat_pages=self.repeat_pages, max_observation_chars=self.max_observation_chars)


class WebShopData(vf.TaskData):
    """One goal: ``prompt`` holds the first turn's messages (the task message and the search page),
    ``system_prompt`` the chat format's system message."""

    goal_index: int
    """The goal, an index into the catalog's goals inside the split."""


class WebShopTask(vf.Task[WebShopData, vf.State, vf.TaskConfig]):
    """Scores a finished episode from what :class:`WebShopVerifiersEnv` kept on ``trace.info["webshop"]``; a trace
    without it (the env never reset a goal for it) fails scoring with a KeyError rather than scoring 0."""

    @vf.reward(weight=1.0)
    async def webshop_score(self, trace: vf.Trace) -> float:
        """The WebShop score of the purchase, 0…1; 0 without one (not named ``score``: that is ``Task.score``, which
        runs the rewards)."""
        return float(trace.info["webshop"]["score"])

    @vf.metric
    async def won(self, trace: vf.Trace) -> float:
        """1.0 when the score is exactly 1.0 (success), else 0.0."""
        return float(trace.info["webshop"]["won"])

    @vf.metric
    async def format_errors(self, trace: vf.Trace) -> float:
        """Replies with no parseable action."""
        return float(trace.info["webshop"]["format_errors"])


class WebShopTaskset(vf.Taskset[WebShopTask, WebShopTasksetConfig]):
    """The goals of ``config.split`` in index order, one :class:`WebShopTask` each.

    Raises:
        ValueError: a setting ``WebShopGymEnv`` refuses; WebShopDataError: a missing or malformed data file (both on
            construction: the catalog is loaded then).
    """

    def __init__(self, config: WebShopTasksetConfig) -> None:
        super().__init__(config)
        self.env = config.gym_env()
        self.chat = config.chat()

    def load(self) -> Iterator[WebShopTask]:
        """Yield one task per goal, lazily (a ``take(n)`` view builds ``n`` prompts)."""
        for goal_index in self.env.goal_indices:
            observation, info = self.env.reset(options={"goal_index": goal_index})
            first = self.chat.turn_message(1, self.config.max_steps, observation, info["available_actions"])
            system, *prompt = self.chat.messages(info["instruction"], [(first, None)])
            yield WebShopTask(WebShopData(goal_index=goal_index, id=str(goal_index), name=f"goal {goal_index}",
                                          prompt=[vf.UserMessage(**m) if m["role"] == "user"
                                                  else vf.AssistantMessage(**m) for m in prompt],
                                          system_prompt=system["content"]), self.config.task)


class WebShopVerifiersEnvConfig(vf.EnvConfig):
    """A WebShop run (``[env]``): the taskset and the one role, ``shopper``."""

    taskset: WebShopTasksetConfig = WebShopTasksetConfig()
    shopper: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The policy that shops: the run's model through the taskset's harness (:class:`ChatHarness`), in the local
    runtime (it runs no program there)."""


class WebShopVerifiersEnv(vf.Env[WebShopVerifiersEnvConfig]):
    """Plays one goal per episode: each reply of the ``shopper`` steps a ``WebShopGymEnv``, each next page is the
    next user turn, until a purchase or the step limit (or a verifiers limit on the role ends the exchange)."""

    async def run(self, task: WebShopTask, agents: vf.Agents) -> None:
        """One episode of ``task.data.goal_index``; the episode record goes to ``trace.info["webshop"]`` before the
        rollout closes, where :class:`WebShopTask` scores it.

        Raises:
            ValueError: the goal lies outside the split (from ``WebShopGymEnv.reset``).
        """
        config: WebShopTasksetConfig = self.taskset.config
        env, chat = config.gym_env(), config.chat()
        observation, info = env.reset(options={"goal_index": task.data.goal_index})
        record: dict[str, Any] = {"goal_index": task.data.goal_index, "actions": [], "score": info["score"],
                                  "won": info["won"], "format_errors": 0}
        async with agents.shopper.interaction(task) as interaction:
            interaction.trace.info["webshop"] = record
            segment = await interaction.turn()  # the reply to the prompt: the first page
            while not segment.terminated:
                parsed = parse_reply(segment.last_reply)
                previous = observation
                observation, _, terminated, truncated, info = env.step(parsed.action or "")  # no action: a no-op
                record["actions"].append(parsed.action or "")
                record["format_errors"] += parsed.action is None
                record["score"], record["won"] = info["score"], info["won"]
                if terminated or truncated:
                    break
                steps = info["num_steps"]
                segment = await interaction.turn(chat.turn_message(steps + 1, config.max_steps - steps, observation,
                                                                   info["available_actions"], previous,
                                                                   parsed.action))


class ChatHarnessConfig(vf.HarnessConfig):
    """:class:`ChatHarness` has no knobs of its own."""


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    """A tool-less chat loop in this process: each segment is one chat completion on the conversation so far,
    posted to the rollout's interception endpoint (which records it on the trace); nothing runs in the runtime."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True  # the default resume() relaunches on the conversation: the next turn's request
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: vf.Trace, runtime: vf.Runtime, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData) -> vf.ProgramResult:
        """Post one chat completion request (``data``'s system prompt and prompt, as wire messages) to
        ``endpoint`` with ``secret``; the reply reaches the trace through the interception server.

        Returns:
            A synthetic ``ProgramResult``: exit 0; ``MODEL_TRANSPORT_ERROR_EXIT_CODE`` when the endpoint could not
            be reached, 1 when it answered with an error (a limit that stopped the rollout, or the provider's),
            with the message on ``stderr``; ``Harness._check_result`` turns those into the trace's error unless a
            stop explains them.
        """
        system, prompt = self.resolve_prompt(data)
        turns = [vf.UserMessage(content=prompt)] if isinstance(prompt, str) else list(prompt or [])
        messages = ([{"role": "system", "content": system}] if system else []) + [message_to_wire(m) for m in turns]
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            try:
                await client.chat.completions.create(model=ctx.model, messages=messages)
            except APIConnectionError as error:
                return vf.ProgramResult(MODEL_TRANSPORT_ERROR_EXIT_CODE, "", f"{type(error).__name__}: {error}")
            except APIStatusError as error:
                return vf.ProgramResult(1, "", f"{type(error).__name__}: {error}")
        return vf.ProgramResult(0, "", "")


def load_environment(data_dir: str | os.PathLike | None = "synthetic", split: str | None = "test",
                     observation_mode: str = "text", goals: str = "synthetic", catalog_seed: int = 233,
                     max_steps: int = 15, repeat_pages: str = "short",
                     max_observation_chars: int = 0) -> WebShopVerifiersEnv:
    """The verifiers environment of a WebShop split, through ``vf.load_environment`` (verifiers 0.4.0).

    Args:
        data_dir, split, observation_mode, goals, catalog_seed, max_steps, repeat_pages, max_observation_chars:
            the fields of :class:`WebShopTasksetConfig` (each documented there).

    Returns:
        A :class:`WebShopVerifiersEnv`; ``env.taskset`` iterates the split's goals as :class:`WebShopTask` s
        (``task.data``: ``goal_index``, ``prompt``, ``system_prompt``), ``env.config`` is its
        :class:`WebShopVerifiersEnvConfig`.

    Raises:
        pydantic.ValidationError: a setting outside its type (an unknown split, ``max_steps`` < 1, ...).
        ValueError: a setting ``WebShopGymEnv`` refuses; WebShopDataError: a missing or malformed data file.
    """
    taskset = WebShopTasksetConfig(data_dir=None if data_dir is None else str(data_dir), split=split,
                                   observation_mode=observation_mode, goals=goals, catalog_seed=catalog_seed,
                                   max_steps=max_steps, repeat_pages=repeat_pages,
                                   max_observation_chars=max_observation_chars)
    return vf.load_environment(WebShopVerifiersEnvConfig(taskset=taskset))
