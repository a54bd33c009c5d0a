"""Turn drills: format, masking, splicing, value swaps, the exact-copy check and the drill settings' range checks.
(That training on them lowers the drill loss is tested through the Trainer, in test_lit.py.)"""

import random

import pytest
import torch

from apo_lightning.rollout.chat import ChatFormat, parse_reply
from apo_lightning.baselines.drills import DRILL_PAGES, TurnDrills, copy_accuracy, splice_instructions
from apo_lightning.models.tiny import TinyPolicySpec, build_tiny_model, train_tiny_tokenizer
from apo_lightning.baselines.corpus import tokenizer_corpus
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
    # the instruction shown is a splice, not a goal's own (which an unspliced drill would show and copy just as well)
    shown = prompt.split("Instruction: ", 1)[1].split("\n", 1)[0]
    assert shown.startswith(query) and "price lower than" in shown
    assert shown not in {drills.shop.goals[i]["instruction_text"] for i in drills.goal_indices}


def test_splice_keeps_the_price_clause_whole():
    first = "i need a red cotton t-shirt with size: large, and price lower than 30.00 dollars"
    second = "find me a waterproof hiking boot with color: brown, and price lower than 90.00 dollars"
    for seed in range(20):
        spliced = splice_instructions(random.Random(seed), first, second)
        assert spliced.endswith(" and price lower than 90.00 dollars")
        assert spliced.split()[0] == "i"


class _Copier(torch.nn.Module):
    """Answers every drill prompt it was shown with that drill's target reply (a perfect copier)."""

    def __init__(self, drills, per_kind: int, swapped: bool = False):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.answers = {}
        rng = random.Random(1)  # the draws copy_accuracy makes (its default seed)
        for kind in DRILL_PAGES:
            for _ in range(per_kind):
                drill = drills.draw(rng, kind=kind, splice=False, swap=swapped)
                first = drill["gen_mask"].index(1)
                self.answers[tuple(drill["input_ids"][:first])] = drill["input_ids"][first:]

    def generate(self, prompt, **kwargs):
        return torch.tensor([prompt[0].tolist() + self.answers[tuple(prompt[0].tolist())]])


def test_copy_accuracy_counts_exact_copies_per_page_kind(drills, tokenizer, tmp_path):
    untrained = build_tiny_model(tokenizer, tmp_path, TinyPolicySpec(hidden_size=32, num_layers=2, num_heads=2,
                                                                     num_kv_heads=1, intermediate_size=64))
    assert copy_accuracy(untrained, drills, per_kind=2) == {kind: 0.0 for kind in DRILL_PAGES}
    assert copy_accuracy(_Copier(drills, per_kind=2), drills, per_kind=2) == {kind: 1.0 for kind in DRILL_PAGES}
    # swapped=True draws the swapped drills: a copier of those answers every one (and has no answer for a plain one)
    swapped = _Copier(drills, per_kind=2, swapped=True)
    assert copy_accuracy(swapped, drills, per_kind=2, swapped=True) == {kind: 1.0 for kind in DRILL_PAGES}
    assert swapped.answers.keys() != _Copier(drills, per_kind=2).answers.keys()


def test_a_value_swap_drill_asks_for_and_clicks_a_value_the_product_does_not_have(drills, tokenizer):
    def shown(drill):
        first = drill["gen_mask"].index(1)
        prompt = tokenizer.decode(drill["input_ids"][:first])
        action = parse_reply(tokenizer.decode(drill["input_ids"][first:], skip_special_tokens=True)).action
        return prompt, prompt.split("Instruction: ", 1)[1].split("\n", 1)[0], action[6:-1]

    swapped = 0
    for seed in range(40):
        prompt, instruction, value = shown(drills.draw(random.Random(seed), kind="item_page", swap=False))
        product = next(p for p in drills.shop.products if p["Title"] in prompt)
        own = {v.lower() for values in product["options"].values() for v in values}
        if value not in own:
            continue  # this goal's first item-page turn buys: nothing to swap
        new_prompt, new_instruction, new_value = shown(drills.draw(random.Random(seed), kind="item_page", swap=True))
        assert new_value not in own  # a value no goal of this product can have asked for
        assert f"[{new_value}]" in new_prompt and f"[{value}]" not in new_prompt  # the page offers it instead
        assert new_instruction == instruction.replace(value, new_value) != instruction
        assert any(new_value in values for values in drills.value_pool.values())
        swapped += 1
    assert swapped >= 5


def test_drill_settings_name_the_setting_and_value_out_of_range(drills):
    from apo_lightning.lit.sft_data import DrillSettings

    assert DrillSettings(kinds=["item_page"], swap_values=0.5).kinds == ["item_page"]
    with pytest.raises(ValueError, match="kinds"):
        DrillSettings(kinds=["cart"])
    with pytest.raises(ValueError, match="kinds"):
        DrillSettings(kinds=[])
    with pytest.raises(ValueError, match=r"^drills.swap_values must be in \[0, 1\], got 2$"):
        DrillSettings(swap_values=2)
    with pytest.raises(ValueError, match=r"^drills.batch_size must be >= 1, got 0$"):
        DrillSettings(batch_size=0)
    with pytest.raises(ValueError, match=r"^drills.steps must be >= 0, got -1$"):
        DrillSettings(steps=-1)
    with pytest.raises(ValueError, match=r"^swap must be in \[0, 1\], got 1.5$"):
        TurnDrills(drills.shop, ChatFormat(), drills.tokenizer, [1500], swap=1.5)
