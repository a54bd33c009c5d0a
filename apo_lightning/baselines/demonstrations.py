"""Oracle demonstrations in the chat format, for supervised warm-starting (the WebShop paper's IL stage).

The goal-aware oracle (``scripted.OraclePolicy``) picks each action; a short templated thought explains it. The
rollout engine renders the episode exactly as it renders the policy's own rollouts, so SFT trains on the very
token layout that RL later samples from.

With ``noise`` > 0 the demonstrations are DART's (Laskey et al. 2017, "DART: Noise Injection for Robust Imitation
Learning"): at a decision the demonstrator sometimes takes a wrong click — another product on a results page,
another value of an option — and then recovers (back to the results, or the right value). The mistake stays in the
context but is masked out of the loss; the recovery is learned. A policy trained on them has seen, and knows how to
leave, states off the oracle's path.

An instruction in other words (``webshop.wording``; drawn per episode in training that reads,
``EnvConfig.vary_wording``) is searched with its own words (``scripted.OraclePolicy.queries_for``), so the policy
imitates a search it can make from what it reads.

Sessions a person recorded (``python -m apo_lightning.webshop serve --record FILE``) become demonstrations the same
way: :class:`RecordedDemonstrator` replays their actions with the oracle's reply wording (:func:`reply_for`).
"""

from __future__ import annotations

import random
from typing import Callable, Collection, Sequence

from ..rollout.chat import parse_reply
from ..rollout.engine import RolloutEngine
from ..rollout.trajectory import Trajectory
from ..utils.seeds import derive_seed
from ..webshop import WebShopEnv
from ..webshop.pages import LINK
from ..webshop.sessions import RecordedEpisode, check_episode
from .scripted import OraclePolicy, product_links


def reply_for(action: str, env: WebShopEnv) -> str:
    """A reply with a short thought for ``action`` taken on the env's current page."""
    name, arg = action.split("[", 1)
    arg = arg[:-1]
    if name == "search":
        thought = "I search for the product in the instruction."
    elif arg == "buy now":
        thought = "The options match the instruction, so I buy it."
    elif arg == "next >":
        thought = "No product on this page matches, so I look at the next page."
    elif arg == "back to search":
        thought = "The results do not match, so I search again."
    elif env.page.kind == "search_results" and getattr(env.page.clickables.get(arg.lower()), "kind", None) == LINK:
        # the env lower-cases the argument, so write the ASIN as the page shows it: a plain copy for the model
        arg = arg.upper()
        action = f"click[{arg}]"
        thought = f"{arg} matches the instruction."
    else:
        option = env.page.clickables.get(arg)
        thought = f"The instruction asks for {option.option}: {arg}." if option and option.option else "Next step."
    return f"<think>{thought}</think><answer>{action}</answer>"


#: Steps a demonstration must have left for a mistake: the mistake, its undo, and the oracle's own remaining steps.
MISTAKE_MARGIN = 6


class OracleDemonstrator:
    """Replies of the oracle for one episode (call it with the env before each turn).

    A call returns the reply text, or ``(reply, False)`` for a mistake: the rollout engine keeps that reply in the
    context and out of the loss. The next call returns the mistake's undo.

    Args:
        noise: probability of a wrong click at each decision (DART, module docstring); 0 = the plain oracle.
        seed: seeds the mistakes.
    """

    def __init__(self, noise: float = 0.0, seed: int = 0) -> None:
        self.policy = OraclePolicy()
        self.goal_index: int | None = None
        self.noise = noise
        self.rng = random.Random(seed)
        self.recovery: str | None = None  # the action that undoes the last mistake

    def __call__(self, env: WebShopEnv) -> str | tuple[str, bool]:
        if env.goal_index != self.goal_index or env.num_steps == 0:
            self.policy.reset(env.goal)
            self.goal_index = env.goal_index
            self.recovery = None
        if self.recovery is not None:
            action, self.recovery = self.recovery, None
            return reply_for(action, env)
        action = self.policy.act(env.observation, env.available_actions())
        if self.noise and self.rng.random() < self.noise:
            mistake = self._mistake(action, env)
            if mistake is not None:
                return reply_for(mistake, env), False
        return reply_for(action, env)

    def _mistake(self, action: str, env: WebShopEnv) -> str | None:
        """A wrong click in place of ``action`` with its undo remembered, or None when ``action`` is no choice."""
        clicked = action[len("click["):-1].lower() if action.startswith("click[") else None
        steps_left = env.max_steps - env.num_steps if env.max_steps is not None else 1000
        if clicked is None or steps_left < MISTAKE_MARGIN:  # a mistake costs two steps; keep room to finish
            return None
        links = product_links(env.available_actions())
        if env.page.kind == "search_results" and clicked in links:
            others = [c for c in links if c != clicked]
            if others:
                self.recovery = "click[< prev]"  # back to the results page, where the oracle clicks the target
                return f"click[{self.rng.choice(others).upper()}]"
        target = env.page.clickables.get(clicked) if env.page.kind == "item_page" else None
        if target is not None and target.kind == "option":
            values = [c for c, k in env.page.clickables.items()
                      if c != clicked and k.kind == "option" and k.option == target.option]
            if values:
                self.recovery = action  # the right value of the same option replaces the wrong one
                return f"click[{self.rng.choice(values)}]"
        return None


def oracle_demonstrations(engine: RolloutEngine, envs: Sequence[WebShopEnv], goal_indices: Sequence[int],
                          successful_only: bool = True, noise: float = 0.0, seed: int = 0,
                          copies: int = 1,
                          make_envs: Callable[[list[int], int], Sequence[WebShopEnv]] | None = None
                          ) -> list[Trajectory]:
    """Oracle trajectories for ``goal_indices``, rendered and tokenized by ``engine``.

    Args:
        envs: the envs the episodes are played in, ``len(envs)`` at a time (reused).
        successful_only: keep only demonstrations that reach score 1.0 (the oracle's rare misses would teach
            wrong purchases).
        noise: DART's mistake probability per decision (module docstring); 0 = the plain oracle.
        seed: seeds the mistakes (each demonstration gets its own seed, derived from ``seed``, the goal and the copy).
        copies: demonstrations per goal (with noise, each makes its own mistakes).
        make_envs: ``(goals, position) -> envs``, one env per episode of the chunk of ``len(envs)`` episodes that
            starts at ``position`` (episodes in order: each goal's copies together), instead of ``envs``; e.g.
            ``EnvConfig.training_envs``, whose episodes each show their own instruction (the oracle then searches
            with that instruction's words: ``scripted.OraclePolicy.queries_for``).
    """
    trajectories: list[Trajectory] = []
    episodes = [(g, copy) for g in goal_indices for copy in range(copies)]
    for start in range(0, len(episodes), len(envs)):
        chunk = episodes[start:start + len(envs)]
        demonstrators = [OracleDemonstrator(noise, derive_seed(seed, "dart", g, copy)) for g, copy in chunk]
        chunk = [g for g, _ in chunk]
        chunk_envs = make_envs(chunk, start) if make_envs is not None else envs[: len(chunk)]
        trajectories += engine.rollout(chunk_envs, chunk, seed=0, demonstrators=demonstrators)
    return [t for t in trajectories if t.success or not successful_only]


class RecordedDemonstrator:
    """Replies that take a recorded session's actions in order, worded as the oracle's (:func:`reply_for`).

    Args:
        episode: the recorded session (``webshop.sessions``).

    Calling it with the env before each turn returns the reply for the next recorded action.

    Raises:
        ValueError (on a call): the episode goes on after its recorded actions, or an action the chat format cannot
            carry (its reply would parse to another action: brackets or a line break in the argument).
    """

    def __init__(self, episode: RecordedEpisode) -> None:
        self.episode = episode

    def __call__(self, env: WebShopEnv) -> str:
        actions = self.episode.actions
        if env.num_steps >= len(actions):
            raise ValueError(f"{self.episode.source}: the episode did not end after its {len(actions)} recorded "
                             "actions; was it recorded on this catalog?")
        action = actions[env.num_steps]
        reply = reply_for(action, env) if "[" in action else f"<answer>{action}</answer>"
        parsed = parse_reply(reply).action
        if parsed is None or parsed.lower() != action.lower():
            raise ValueError(f"{self.episode.source}: action {env.num_steps + 1}, {action!r}, cannot be written as "
                             f"a reply (it parses as {parsed!r}); remove the session from the file")
        return reply


def recorded_demonstrations(engine: RolloutEngine, envs: Sequence[WebShopEnv], episodes: Sequence[RecordedEpisode],
                            allowed_goals: Collection[int] | None = None) -> list[Trajectory]:
    """Recorded sessions as trajectories, rendered and tokenized by ``engine``: each turn's reply is the
    :class:`RecordedDemonstrator`'s for the recorded action, in the loss like an oracle reply.

    Args:
        engine: the rollout engine (its model is not called).
        envs: envs over the catalog the sessions were recorded on, with a step limit (at least 1).
        episodes: the sessions (``webshop.sessions.read_sessions``).
        allowed_goals: the goals sessions may be on (the training goals; None = any).

    Returns:
        One trajectory per session, in order; each took exactly the recorded actions and reached the recorded score.

    Raises:
        ValueError: a session on another catalog (``webshop.sessions.check_episode``), on a goal outside
            ``allowed_goals``, with more actions than the step limit, with an action a reply cannot carry, or whose
            replay does not reach its recorded actions and score.
    """
    if not envs:
        raise ValueError("recorded_demonstrations needs at least one env")
    limit = envs[0].max_steps
    for episode in episodes:
        check_episode(envs[0].shop, episode)
        if allowed_goals is not None and episode.goal_index not in allowed_goals:
            raise ValueError(f"{episode.source}: goal {episode.goal_index} is not a training goal; record "
                             "demonstrations with `serve --split train` (the other splits are for evaluation)")
        if limit is not None and len(episode.actions) > limit:
            raise ValueError(f"{episode.source}: {len(episode.actions)} actions, more than the step limit "
                             f"max_steps={limit}; raise data.env.max_steps or drop the session")
    trajectories: list[Trajectory] = []
    for start in range(0, len(episodes), len(envs)):
        chunk = list(episodes[start:start + len(envs)])
        played = engine.rollout(envs[: len(chunk)], [e.goal_index for e in chunk], seed=0,
                                demonstrators=[RecordedDemonstrator(e) for e in chunk])
        for episode, trajectory in zip(chunk, played):
            actions = [t.action for t in trajectory.turns]
            if [(a or "").lower() for a in actions] != [a.lower() for a in episode.actions] or (
                    episode.score is not None and trajectory.score != episode.score):
                raise ValueError(f"{episode.source}: replayed as {actions} with score {trajectory.score}, but "
                                 f"recorded as {episode.actions} with score {episode.score}; was it recorded with "
                                 "this catalog and these env settings?")
        trajectories += played
    return trajectories
