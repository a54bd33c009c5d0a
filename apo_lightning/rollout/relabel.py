"""Option relabeling: a trajectory that bought its goal's product, replayed under another goal of that product.

Hindsight relabeling (Andrychowicz et al. 2017, "Hindsight Experience Replay") for WebShop's option clicks. On the
quick start's catalog the reference policy's most common failure is the right product with the wrong options, and
85 of its 86 wrong option clicks on test goals are values that a training goal of the same product asked for: it
clicks what it remembers for the product, not what the instruction names (docs/experiments.md, "Why greedy test
success does not move"). RL on a goal cannot tell the two apart, since on that goal both read the same. Two goals
of one product that differ only in an option value can: the same clicks are right under one and wrong under the
other. Synthetic goals are one per option combination of a product (``webshop.goals.synthetic_goals``), so a
trajectory that bought its goal's product has siblings among the training goals:

- it bought options that a *training* goal of the product asks for, and that goal is not its own: replayed under
  that goal, it is a success (the positive of hindsight: what it clicked, asked for);
- it bought its own goal's options (a success): replayed under another training goal of the product, one under
  which the purchase is not a success and that differs in as few option values as any such, it is not (the
  negative: the same clicks where the instruction names another value).

The replay is exact: the trajectory's replies are fed back as a demonstrator into an env on the new goal, so the
pages show the new instruction, the env executes every action again and the real reward function scores the
purchase. The one edit is to the search query, which the policy copied from the instruction: its ``option: value``
phrases are rewritten to the new goal's, so the trajectory reads as if it had copied the new instruction. A replay
whose search then leads elsewhere (a different purchase, or a turn the env refuses that it executed before) is
dropped.

A*-PO may regress on such rows: its minimiser satisfies ``β2 · log π*(y|x)/π_ref(y|x) = r(x, y) − V*(x)`` for every
(x, y) (Brantley et al. 2025, §3), whoever produced y. V* of the new goal is not estimated (stage 1 samples only the
pool's goals); the caller uses the original goal's, a goal of the same product, page and price ceiling.
Only for goals whose instruction names each option as ``name: value`` (the synthetic goals; human goals do not).
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from typing import Iterable, Sequence

from ..webshop import WebShop
from .engine import RolloutEngine
from .trajectory import Trajectory


def _options_key(options: dict) -> tuple[tuple[str, str], ...]:
    """Options as a comparable key: lower-case names and values, sorted."""
    return tuple(sorted((str(k).lower(), str(v).lower()) for k, v in options.items()))


class OptionRelabeler:
    """Finds, for a trajectory, a sibling training goal to replay it under, and replays it.

    Args:
        shop: the catalog and goals (synthetic goals: ``goal_options`` a dict).
        goal_indices: the goals a relabeled trajectory may take (the train split: never a validation or test goal).
    """

    def __init__(self, shop: WebShop, goal_indices: Iterable[int]):
        self.shop = shop
        self.siblings: dict[str, list[int]] = defaultdict(list)  # ASIN -> training goals of that product
        self.by_options: dict[tuple[str, tuple], int] = {}  # (ASIN, options key) -> training goal
        for g in goal_indices:
            goal = shop.goals[g]
            if not isinstance(goal.get("goal_options"), dict):
                continue
            self.siblings[goal["asin"].upper()].append(g)
            self.by_options.setdefault((goal["asin"].upper(), _options_key(goal["goal_options"])), g)

    def target(self, trajectory: Trajectory, rng: random.Random) -> int | None:
        """The goal to replay ``trajectory`` under (module docstring), or None: it bought no product, or not its
        goal's, or (a success) the product has no other training goal under which the purchase fails, or (a
        failure) no other training goal asks for the options it bought."""
        goal = self.shop.goals[trajectory.goal_index]
        bought = trajectory.purchased
        if (bought is None or not isinstance(goal.get("goal_options"), dict)
                or bought["asin"].upper() != goal["asin"].upper()):
            return None
        asin = goal["asin"].upper()
        if not trajectory.success:
            asked = self.by_options.get((asin, _options_key(bought["options"])))
            return asked if asked is not None and asked != trajectory.goal_index else None
        own = dict(_options_key(goal["goal_options"]))
        # siblings under which this purchase fails (WebShop matches option values fuzzily: "tall" is "big & tall")
        differ = {g: sum(own.get(k) != v for k, v in _options_key(self.shop.goals[g]["goal_options"]))
                  for g in self.siblings.get(asin, ()) if g != trajectory.goal_index
                  and self.shop.reward(self.shop.goals[g], bought["asin"], bought["options"])[0] < 1.0}
        if not differ:
            return None
        fewest = min(differ.values())  # a minimal pair: the siblings that differ from this goal in fewest options
        return rng.choice(sorted(g for g, n in differ.items() if n == fewest))

    def replies(self, trajectory: Trajectory, new_goal: int) -> list[str]:
        """The trajectory's replies, each search reply's ``name: value`` phrases of the old goal's options
        rewritten to the new goal's."""
        old = self.shop.goals[trajectory.goal_index]["goal_options"]
        new = {k.lower(): v for k, v in self.shop.goals[new_goal]["goal_options"].items()}
        edits = [(re.compile(rf"{re.escape(k)}: {re.escape(v)}(?![\w-])", re.IGNORECASE), f"{k}: {new[k.lower()]}")
                 for k, v in old.items() if k.lower() in new and new[k.lower()].lower() != str(v).lower()]
        replies = []
        for turn in trajectory.turns:
            reply = turn.reply
            if turn.action is not None and turn.action.startswith("search["):
                for pattern, replacement in edits:
                    reply = pattern.sub(lambda _: replacement, reply)
            replies.append(reply)
        return replies

    def replay(self, engine: RolloutEngine, envs: Sequence, trajectories: Sequence[Trajectory],
               new_goals: Sequence[int]) -> list[Trajectory | None]:
        """Replay each trajectory under its new goal (``envs``: one per trajectory).

        Returns:
            One entry per trajectory, in order: its replay (tokens rendered by ``engine`` as its own rollouts are,
            every reply masked 1 with log-prob 0, as ``RolloutEngine.rollout``'s demonstrators; ``reward`` and
            ``score`` from the new goal), or None where the replay did not execute the same actions and buy the
            same product with the same options (dropped).
        """
        if not trajectories:
            return []
        scripts = [iter(self.replies(t, g)) for t, g in zip(trajectories, new_goals)]
        replays = engine.rollout(list(envs)[: len(trajectories)], list(new_goals), seed=0,
                                 demonstrators=[lambda env, s=s: next(s, "") for s in scripts])
        kept: list[Trajectory | None] = []
        for old, new in zip(trajectories, replays):
            same_turns = [t.valid_action for t in old.turns] == [t.valid_action for t in new.turns]
            same_purchase = new.purchased is not None and old.purchased is not None and (
                new.purchased["asin"].upper() == old.purchased["asin"].upper()
                and _options_key(new.purchased["options"]) == _options_key(old.purchased["options"]))
            kept.append(new if same_turns and same_purchase else None)
        return kept
