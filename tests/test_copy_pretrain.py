"""Turn drills: format, masking, splicing, and that a few steps of them lower the drill loss."""

import random

import pytest
import torch

from apo_lightning.agent.chat import ChatFormat, parse_reply
from apo_lightning.agent.copy_pretrain import DRILL_PAGES, TurnDrills, copy_accuracy, copy_pretrain, splice_instructions
from apo_lightning.agent.policy import build_tiny_model, train_tiny_tokenizer
from apo_lightning.agent.tiny import tokenizer_corpus
from apo_lightning.webshop import WebShop


@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)


@pytest.fixture(scope="module")
def tokenizer(shop, tmp_path_factory):
    texts = list(tokenizer_corpus(shop, ChatFormat(), list(range(1500, 1520))))
    return train_tiny_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=800)


@pytest.fixture(scope="module")
def drills(shop, tokenizer):
    return TurnDrills(shop, ChatFormat(), tokenizer, list(range(1500, 1600)))


@pytest.mark.parametrize("kind", DRILL_PAGES)
def test_a_drill_is_one_rendered_turn_with_the_oracle_reply_as_target(drills, tokenizer, kind):
    drill = drills.draw(random.Random(0), kind=kind, splice=False)
    ids, mask = drill["input_ids"], drill["gen_mask"]
    first = mask.index(1)
    assert all(mask[first:]) and not any(mask[:first])
    prompt = tokenizer.decode(ids[:first])
    reply = parse_reply(tokenizer.decode(ids[first:], skip_special_tokens=True))
    assert prompt.count("Turn ") == 1 and prompt.rstrip().endswith("assistant")
    assert reply.error is None
    if kind == "index":
        assert reply.action.startswith("search[") and reply.action[7:-1] in prompt
    else:
        argument = reply.action[6:-1]
        assert reply.action.startswith("click[") and f"[{argument}]".lower() in prompt.lower()


def test_a_spliced_search_drill_copies_the_spliced_instruction_without_its_price(drills, tokenizer):
    drill = drills.draw(random.Random(3), kind="index", splice=True)
    first = drill["gen_mask"].index(1)
    prompt = tokenizer.decode(drill["input_ids"][:first])
    query = parse_reply(tokenizer.decode(drill["input_ids"][first:], skip_special_tokens=True)).action[7:-1]
    assert f"Instruction: {query}" in prompt and "price lower than" not in query


def test_splice_keeps_the_price_clause_whole():
    first = "i need a red cotton t-shirt with size: large, and price lower than 30.00 dollars"
    second = "find me a waterproof hiking boot with color: brown, and price lower than 90.00 dollars"
    for seed in range(20):
        spliced = splice_instructions(random.Random(seed), first, second)
        assert spliced.endswith(" and price lower than 90.00 dollars")
        assert spliced.split()[0] == "i"


def test_drills_lower_their_loss(drills, tokenizer, tmp_path):
    torch.manual_seed(0)
    model = build_tiny_model(tokenizer, tmp_path, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=64)
    losses = copy_pretrain(model, drills, steps=30, batch_size=4, learning_rate=3e-3)
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5
    accuracy = copy_accuracy(model, drills, per_kind=1)
    assert set(accuracy) == set(DRILL_PAGES) and all(0.0 <= a <= 1.0 for a in accuracy.values())
