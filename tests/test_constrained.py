"""Valid clicks (``rollout.constrained``): the click argument is decoded onto the page, the recorded log π is not.

The shipped quick-start reference misspells or misremembers the ASIN of its first product click on some test goals
(goals 13, 32 and 33 among them: the env refuses the click and the episode ends at the step limit). With
``valid_clicks`` every click it writes on a page with something to click must be executed, and the log-probabilities
the engine records must still be those of the unconstrained policy (a plain forward pass), since the losses read
them as log π.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path

import pytest
import torch

from apo_lightning.models.loading import load_policy
from apo_lightning.rollout.collate import collate_trajectories
from apo_lightning.rollout.constrained import ClickConstraint, open_click
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.webshop import WebShop, WebShopEnv

from logprob_reference import token_logprobs

REFERENCE = Path(__file__).resolve().parents[1] / "models" / "quickstart-ref"
REFUSED_FIRST_CLICK = [13, 32, 33]  # test goals whose greedy episode starts with a product click the env refuses


@pytest.fixture(scope="module")
def policy():
    torch.set_num_threads(1)
    return load_policy(str(REFERENCE))


@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)  # the quick start's synthetic catalog


def test_open_click_finds_the_click_being_typed_in_the_answer():
    assert open_click("<think>x</think><answer>click") == ""
    assert open_click("<think>x</think><answer>click [B0N") == "[B0N"
    assert open_click("<think>click[B0N</think>") is None  # not in the answer
    assert open_click("<answer>search[red") is None
    assert open_click("<answer>click[buy now]") is None  # closed
    assert open_click("<answer>clicking") is None


def test_the_mask_allows_exactly_the_tokens_that_stay_on_the_page(policy):
    _, tokenizer = policy
    constraint = ClickConstraint(tokenizer, len(tokenizer))
    page = ["back to search", "next >", "b0nxdjpzdm", "b0sr7r6jsg"]
    first = constraint.allowed("<think>x</think><answer>click", page)
    allowed = {constraint.token_text[i] for i in first.nonzero().flatten().tolist()}
    assert "[b" in allowed and "[" in allowed and "[buy" not in allowed
    assert all(any(("[" + c + "]").startswith(t.lstrip(" ")) for c in page) for t in allowed)
    last = constraint.allowed("<answer>click[B0NXDJPZD", page)
    allowed = {constraint.token_text[i] for i in last.nonzero().flatten().tolist()}
    assert "m" in allowed
    assert all("[b0nxdjpzdm]".startswith("[b0nxdjpzd" + t) or ("[b0nxdjpzd" + t).startswith("[b0nxdjpzdm]")
               for t in allowed)
    assert constraint.allowed("<answer>click[B0NXDJPZDM", page)[tokenizer.convert_tokens_to_ids("]")]
    assert constraint.allowed("<answer>click[zzz", page) is None  # off the page already: left to the env
    assert constraint.allowed("<answer>search[", page) is None


def play(policy, shop, goals, valid_clicks):
    model, tokenizer = policy
    engine = RolloutEngine(model, tokenizer, max_new_tokens=64, greedy=True, valid_clicks=valid_clicks)
    envs = [WebShopEnv(shop, max_steps=10) for _ in goals]
    return engine, engine.rollout(envs, [shop.split("test")[g] for g in goals], seed=0)


def first_product_click(trajectory):
    return next(t for t in trajectory.turns if t.action and t.action.startswith("click[") and
                "Total results" in t.observation)


def test_valid_clicks_turn_refused_product_clicks_into_clicks_on_the_page(policy, shop):
    _, free = play(policy, shop, REFUSED_FIRST_CLICK, valid_clicks=False)
    assert not any(first_product_click(t).valid_action for t in free)  # the recorded failure: refused

    engine, constrained = play(policy, shop, REFUSED_FIRST_CLICK, valid_clicks=True)
    for trajectory in constrained:
        turn = first_product_click(trajectory)
        assert turn.valid_action, turn.action
        asin = turn.action[len("click["):-1].lower()
        assert asin in turn.observation.lower() and asin in {p["asin"].lower() for p in shop.products}

    # the recorded log-probabilities are the unconstrained policy's (a plain forward pass), not the mask's
    batch = collate_trajectories(constrained, engine.pad_id)
    with torch.no_grad():
        logits = engine.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    logp = token_logprobs(logits, batch["input_ids"])  # (S, T)
    sampled = batch["gen_mask"] == 1
    assert (logp[sampled] - batch["old_logp"][sampled]).abs().max().item() < 1e-4
