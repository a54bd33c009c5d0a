"""The verifiers adapter (``integrations/verifiers_env.py``): ``load_environment`` builds a verifiers ``Env`` whose
tasks are the split's goals, and (slow) verifiers' own eval loop, ``run_eval``, plays them: the replies of a policy
served as an OpenAI-compatible endpoint on 127.0.0.1 reach the env as actions, the pages the env answers with reach
the policy, and the rewards verifiers records are the WebShop scores of those episodes."""

import asyncio
import importlib.util
import json
import re
import sys

import pytest
from conftest import skip_unless_required

from apo_lightning.baselines.scripted import OraclePolicy, scripted_steps
from apo_lightning.rollout.chat import ChatFormat, parse_reply
from apo_lightning.webshop import WebShopEnv, WebShopGymEnv

GOALS = 4  # the first goals of the test split that each eval plays


def require_verifiers() -> None:
    if sys.version_info < (3, 11) or importlib.util.find_spec("verifiers") is None:
        skip_unless_required('verifiers is not installed (pip install -e ".[verifiers]", Python >= 3.11)')


def test_load_environment_builds_a_verifiers_env_whose_tasks_are_the_goals_of_the_split():
    require_verifiers()
    import verifiers.v1 as vf

    from apo_lightning.integrations.verifiers_env import (TASKSET_ID, ChatHarness, ChatHarnessConfig, WebShopTask,
                                                          WebShopVerifiersEnv, load_environment)

    env = load_environment(split="val", max_steps=7)
    assert isinstance(env, WebShopVerifiersEnv) and isinstance(env, vf.Env) and env.config.env_id == TASKSET_ID
    (harness,) = env.config.agent_harnesses().values()  # the one role's: the taskset's own, not verifiers' bash
    assert harness == ChatHarnessConfig(id=TASKSET_ID) and isinstance(vf.load_harness(harness), ChatHarness)
    tasks = list(env.taskset.take(3))
    assert [t.data.goal_index for t in tasks] == [t.data.idx + 500 for t in tasks] == [500, 501, 502]
    gym_env, chat = WebShopGymEnv(data_dir="synthetic", split="val", max_steps=7), ChatFormat()
    for task in tasks:
        assert isinstance(task, WebShopTask)
        page, info = gym_env.reset(options={"goal_index": task.data.goal_index})
        (prompt,) = task.data.prompt
        assert task.data.system_prompt == chat.system_prompt and prompt.role == "user"
        assert prompt.content == chat.task_message(info["instruction"]) + "\n\n" + chat.turn_message(
            1, 7, page, info["available_actions"])  # "Turn 1 (7 actions left):\nSearch\nActions: search[<query>]"
    with pytest.raises(ValueError, match="max_steps"):
        load_environment(max_steps=0)


# --------------------------------------------------------------------------------------------- the slow test
class ScriptedPolicies:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 whose replies come from scripted policies, chosen
    by the request's ``model``: ``oracle`` writes the goal-aware oracle's actions (``baselines.scripted``) for the
    goal whose instruction the task message names; ``rule`` reads each page it is sent: it first replies without an
    action, then searches the instruction, clicks the first product listed and buys it (the WebShop paper's rule
    baseline). Both write the chat format's ``<think>…</think><answer>ACTION</answer>``."""

    def __init__(self, goal_indices):
        engine = WebShopEnv(WebShopGymEnv(data_dir="synthetic", split="test").shop, "text", max_steps=15)
        self.oracle, self.goal_of = {}, {}  # goal -> the oracle's actions on it; instruction -> goal
        for goal_index in goal_indices:
            self.oracle[goal_index] = [s.action for s in scripted_steps(engine, OraclePolicy(), goal_index)]
            self.goal_of[engine.instruction_text] = goal_index
        self.requests = []  # the bodies of the chat-completion requests, in order

    def reply(self, model: str, messages: list[dict]) -> str:
        instruction = re.search(r"^Instruction: (.*)$", messages[1]["content"], re.MULTILINE).group(1)
        turn = sum(m["role"] == "assistant" for m in messages)
        if model == "oracle":
            action = self.oracle[self.goal_of[instruction]][turn]
            return f"<think>Step {turn + 1} of the oracle.</think><answer>{action}</answer>"
        if turn == 0:
            return "Let me read the page first."  # no action: a no-op step and a format error
        page = messages[-1]["content"]
        if page.endswith("Actions: search[<query>]"):
            action = f"search[{instruction}]"
        elif "\n[Buy Now]\n" in page:
            action = "click[Buy Now]"
        else:
            action = "click[{}]".format(re.search(r"^\[([A-Z0-9]{10})\]$", page, re.MULTILINE).group(1))
        return f"<think>The rule baseline.</think><answer>{action}</answer>"

    async def __aenter__(self):
        from aiohttp import web

        async def completions(request):
            body = await request.json()
            self.requests.append(body)
            content = self.reply(body["model"], body["messages"])
            return web.json_response({
                "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", completions)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        host, port = self.runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(self, *exc):
        await self.runner.cleanup()


def replay(actions: list[str], goal_index: int, chat: ChatFormat) -> tuple[float, list[str]]:
    """Play ``actions`` in a fresh ``WebShopGymEnv``: ``(score, the user messages the model should have seen after
    the first)``."""
    env = WebShopGymEnv(data_dir="synthetic", split="test", max_steps=15)
    observation, info = env.reset(options={"goal_index": goal_index})
    pages = []
    for action in actions:
        previous = observation
        observation, _, terminated, truncated, info = env.step(action)
        if not (terminated or truncated):
            steps = info["num_steps"]
            pages.append(chat.turn_message(steps + 1, 15 - steps, observation, info["available_actions"], previous,
                                           action or None))
    return info["score"], pages


@pytest.mark.slow
def test_verifiers_eval_plays_the_goals_and_records_the_scores_of_the_actions_that_reached_the_env(tmp_path):
    """``run_eval`` (verifiers' ``vf-eval`` loop, push and dashboard off) on the first test goals, once per scripted
    policy. Per episode: the actions the env took are the actions of the replies in verifiers' trace (and, for the
    oracle, the oracle's own); the user turns in the trace are the pages replaying them gives; the reward verifiers
    recorded, on the trace and in its ``traces.jsonl``, is the score of replaying those actions, and ``won`` and
    ``format_errors`` agree. The oracle outscores the rule baseline on the same goals."""
    require_verifiers()
    from verifiers.v1 import EvalClientConfig
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    from apo_lightning.integrations.verifiers_env import WebShopTasksetConfig, WebShopVerifiersEnvConfig

    goal_indices = list(WebShopGymEnv(data_dir="synthetic", split="test").goal_indices[:GOALS])
    policies = ScriptedPolicies(goal_indices)

    async def evaluate(model: str):
        config = EvalConfig(env=WebShopVerifiersEnvConfig(taskset=WebShopTasksetConfig(split="test")), model=model,
                            client=EvalClientConfig(base_url=policies.base_url),
                            select={"limit": GOALS}, max_concurrent=GOALS, push=False, rich=None,
                            output_dir=tmp_path, run={"name": model})
        return await run_eval(config)

    async def both():
        async with policies:
            return {model: await evaluate(model) for model in ("oracle", "rule")}

    episodes = asyncio.run(both())
    chat, scores = ChatFormat(), {}
    for model, runs in episodes.items():
        assert len(runs) == GOALS and all(run.ok and len(run.traces) == 1 for run in runs)
        written = [json.loads(line) for line in (tmp_path / model / "traces.jsonl").read_text().splitlines()]
        assert len(written) == GOALS
        for run in runs:
            (trace,) = run.traces
            record = trace.info["webshop"]
            goal_index = trace.task.data.goal_index
            assert record["goal_index"] == goal_index
            messages = trace.branches[-1].messages
            replies = [m.content for m in messages if m.role == "assistant"]
            assert record["actions"] == [parse_reply(r).action or "" for r in replies]  # every reply reached the env
            score, pages = replay(record["actions"], goal_index, chat)
            assert [m.content for m in messages if m.role == "user"][1:] == pages  # every page reached the model
            assert trace.rewards["webshop_score"].score == trace.reward == record["score"] == score
            assert trace.metrics["won"] == float(score == 1.0)
            assert trace.metrics["format_errors"] == sum(a == "" for a in record["actions"])
            (line,) = [t for episode in written for t in episode["traces"] if t["id"] == trace.id]
            assert line["rewards"]["webshop_score"]["score"] == score  # what verifiers wrote to its traces.jsonl
            if model == "oracle":
                assert record["actions"] == policies.oracle[goal_index]
            else:
                assert record["actions"][0] == "" and record["actions"][-1] == "click[Buy Now]"
                assert record["format_errors"] == 1
        scores[model] = {run.traces[0].task.data.goal_index: run.traces[0].reward for run in runs}
    assert sorted(scores["oracle"]) == sorted(scores["rule"]) == goal_indices
    assert all(scores["oracle"][g] >= scores["rule"][g] for g in goal_indices)
    assert max(scores["oracle"].values()) == 1.0 and min(scores["rule"].values()) > 0.0  # both bought
    assert sum(scores["oracle"].values()) > sum(scores["rule"].values())  # the wrong actions scored lower
    assert len(policies.requests) == sum(len(run.traces[0].info["webshop"]["actions"])
                                         for runs in episodes.values() for run in runs)  # one model call per step
