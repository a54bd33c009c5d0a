"""Copy drills: format, masking, and that a few steps of them lower the copy loss."""

import random

import pytest
import torch

from apo_lightning.agent.copy_pretrain import copy_accuracy, copy_drill, copy_pretrain
from apo_lightning.agent.policy import build_tiny_model, train_tiny_tokenizer

TEXTS = [f"{adj} {noun} with {feature}" for adj in ("red", "blue", "soft", "large", "organic", "waterproof")
         for noun in ("running shoes", "yoga pants", "face serum", "dog bed", "coffee beans")
         for feature in ("zip pocket", "gluten free", "memory foam", "long lasting")]
LABELS = [f"B0{i:08d}" for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tiny_tokenizer(TEXTS + LABELS, tmp_path_factory.mktemp("tok"), vocab_size=400)


def test_a_drill_repeats_one_listed_line_and_masks_only_the_reply(tokenizer):
    drill = copy_drill(random.Random(0), TEXTS, LABELS, tokenizer)
    ids, mask = drill["input_ids"], drill["gen_mask"]
    first = mask.index(1)
    assert all(mask[first:]) and not any(mask[:first])
    reply = tokenizer.decode(ids[first:], skip_special_tokens=True)
    prompt = tokenizer.decode(ids[:first])
    assert reply in prompt and reply.startswith("[B0")
    assert ids[-1] == tokenizer.eos_token_id


def test_copy_drills_lower_the_copy_loss(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = build_tiny_model(tokenizer, tmp_path, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                             intermediate_size=64)
    losses = copy_pretrain(model, tokenizer, TEXTS, LABELS, steps=40, batch_size=8, learning_rate=3e-3)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5
    assert 0.0 <= copy_accuracy(model, tokenizer, TEXTS, LABELS, drills=4) <= 1.0
