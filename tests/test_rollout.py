"""The batched rollout engine: exact token bookkeeping, segments, reproducibility, demonstrations, format penalty.

A 2-layer, 64-wide Qwen2 with a BPE tokenizer trained on a few hundred catalog strings plays the synthetic
catalog. An untrained model writes junk until ``max_new_tokens``, so most tests also use a *chained* variant: the
same model plus a fixed logit bias that depends only on the current token (a bigram table), which makes it write
``<answer>search[...]</answer>`` most of the time, ``<think>`` then eos sometimes, and junk otherwise — every stop
reason, valid actions that change the page, and rows that leave the batch at different steps. The bias is part of
the model, so log-probabilities recomputed by a plain forward pass must still match the recorded ones.
"""

import os
import re

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers / huggingface_hub read it

import pytest
import torch

from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.baselines.demonstrations import OracleDemonstrator, oracle_demonstrations
from apo_lightning.models.tiny import TinyPolicySpec, build_tiny_model, train_tiny_tokenizer
from apo_lightning.rollout.collate import collate_trajectories
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.rollout.settings import RolloutSettings
from apo_lightning.webshop import WebShop, WebShopEnv
from apo_lightning.webshop.settings import RewardSettings

from logprob_reference import token_logprobs

torch.set_num_threads(1)

GOALS = [0, 1, 2, 3, 4, 5]
MAX_STEPS = 4
MAX_NEW_TOKENS = 24
TOLERANCE = 1e-4
ATTENTION_SHARPNESS = 6.0
_SAMPLED = "\x01SAMPLED REPLY\x01"  # marks where sampled replies go in a template rendering


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def shop():
    return WebShop.load(None)  # the synthetic catalog (generated under data/synthetic/seed0 on first use)


@pytest.fixture(scope="module")
def tokenizer(shop, tmp_path_factory):
    chat = ChatFormat()
    texts = [p["Title"] for p in shop.products[:200]] + [g["instruction_text"] for g in shop.goals[:150]]
    texts += [chat.system_prompt, chat.task_prompt, "Turn 1 (4 actions left):", "Page 1 (Total results: 50)",
              "Back to Search", "Next >", "< Prev", "Description", "Features", "Reviews", "Buy Now",
              "Actions: search[<query>] or click[<an item in brackets>]", "(the same page as before; you did",
              "<think>I search for it.</think><answer>search[protein bars]</answer>",
              "<think>It matches.</think><answer>click[buy now]</answer>"]
    return train_tiny_tokenizer(texts, tmp_path_factory.mktemp("tiny"), vocab_size=1024)


@pytest.fixture(scope="module")
def model(tokenizer, tmp_path_factory):
    model = build_tiny_model(tokenizer, tmp_path_factory.mktemp("tiny_model"),
                             TinyPolicySpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                            intermediate_size=128))
    with torch.no_grad():  # sharpen attention: at init it is almost uniform, so wrong positions would go unseen
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(ATTENTION_SHARPNESS)
            layer.self_attn.k_proj.weight.mul_(ATTENTION_SHARPNESS)
    return model


class BigramBiased(torch.nn.Module):
    """``model`` with ``logits[t] += bias[input_ids[t]]``: still a causal LM, one fixed (V, V) table on top."""

    def __init__(self, model, bias: torch.Tensor):
        super().__init__()
        self.model = model
        self.config, self.generation_config = model.config, model.generation_config
        self.register_buffer("bias", bias)

    def forward(self, input_ids, **kwargs):
        out = self.model(input_ids=input_ids, **kwargs)
        out.logits = out.logits + self.bias[input_ids]  # (B, L, V)
        return out


@pytest.fixture(scope="module")
def chained(model, tokenizer):
    def ids(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    newline, think, eos = ids("\n")[-1], ids("<think>")[0], tokenizer.eos_token_id
    chain = [newline] + ids("<answer>") + ids("search") + ids("[") + ids("protein bars") + ids("]") + ids("</answer>")
    assert len(set(chain)) == len(chain), "the chain must not repeat a token"
    size = len(tokenizer)
    bias = torch.zeros(size, size)
    bias[:, think] = 3.0  # <think> now and then ...
    bias[think, eos] = 9.0  # ... and after it, usually the end of the turn
    for current, following in zip(chain, chain[1:]):
        bias[current, following] = 9.0  # ~90 % per step: about a third of replies spell the whole chain
    return BigramBiased(model, bias).eval()


def engine_for(model, tokenizer, chat=None, **kwargs):
    kwargs.setdefault("max_new_tokens", MAX_NEW_TOKENS)
    return RolloutEngine(model, tokenizer, chat or ChatFormat(), **kwargs)


def play(engine, shop, goals=GOALS, seed=0, max_steps=MAX_STEPS, demonstrators=None):
    envs = [WebShopEnv(shop, max_steps=max_steps) for _ in goals]
    return engine.rollout(envs, list(goals), seed=seed, demonstrators=demonstrators)


# ------------------------------------------------------------------------------------------------ checks
def runs(mask, value):
    """[(start, end), ...] of the maximal runs of ``value`` in ``mask``."""
    out, start = [], None
    for i, m in enumerate(list(mask) + [None]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            out.append((start, i))
            start = None
    return out


def segment_turns(trajectory):
    """[(segment, [turns sampled in it]), ...]."""
    bounds = [s.first_turn for s in trajectory.segments] + [len(trajectory.turns)]
    assert bounds[0] == 0 and bounds == sorted(bounds)
    return [(s, trajectory.turns[a:b]) for s, a, b in zip(trajectory.segments, bounds, bounds[1:])]


def check_log_probs(model, batch):
    """A plain forward pass over the collated batch gives the recorded log-probs on every sampled token."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    logp = token_logprobs(logits, batch["input_ids"])  # (S, T)
    sampled = batch["gen_mask"] == 1
    assert sampled.any()
    assert (batch["old_logp"][~sampled] == 0).all()
    assert (batch["old_logp"][sampled] <= 0).all()
    difference = (logp[sampled] - batch["old_logp"][sampled]).abs().max().item()
    assert difference < TOLERANCE, difference


def check_bookkeeping(engine, trajectories):
    """Masks, segments, log-probs and rewards of sampled trajectories agree with the turns."""
    tokenizer, chat = engine.tokenizer, engine.chat
    batch = collate_trajectories(trajectories, engine.pad_id)
    assert batch["traj_index"].tolist() == [i for i, t in enumerate(trajectories) for _ in t.segments]
    assert batch["input_ids"].shape[0] == sum(len(t.segments) for t in trajectories)
    assert batch["reward"].tolist() == pytest.approx([t.reward for t in trajectories])
    check_log_probs(engine.model, batch)

    generation_prompt = tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                                      add_generation_prompt=True)
    generation_prompt = generation_prompt[len(tokenizer.apply_chat_template([{"role": "user", "content": "x"}],
                                                                            tokenize=False)):]
    assert generation_prompt  # "<|im_start|>assistant\n" for ChatML
    total = 0
    for trajectory in trajectories:
        penalty = engine.reward.format_penalty * trajectory.format_errors
        assert trajectory.reward == pytest.approx(trajectory.score + penalty)
        assert trajectory.generated_tokens == sum(t.generated_tokens for t in trajectory.turns)
        total += trajectory.generated_tokens
        for segment, turns in segment_turns(trajectory):
            ids, mask = segment.token_ids, segment.gen_mask
            assert len(ids) == len(mask) == len(segment.old_logp) <= chat.context_budget
            assert sum(mask) == sum(t.generated_tokens for t in turns)
            sampled = runs(mask, 1)
            assert len(sampled) == len(turns) >= 1  # one contiguous run of sampled tokens per turn
            assert sampled[-1][1] == len(ids)  # the segment ends with the last reply
            for (start, end), turn in zip(sampled, turns):
                reply_ids = ids[start:end]
                assert 1 <= len(reply_ids) == turn.generated_tokens <= engine.max_new_tokens
                assert tokenizer.decode(reply_ids, skip_special_tokens=True) == turn.reply
                assert (reply_ids[-1] in engine.eos_ids) == (turn.stop == "eos")
                assert (len(reply_ids) == engine.max_new_tokens) >= (turn.stop == "length")
                assert tokenizer.decode(ids[:start]).endswith(generation_prompt)  # prompt tokens are not masked
            assert mask[0] == 0 and tokenizer.decode(ids[:sampled[0][0]]).count(chat.task_message(
                trajectory.instruction)) == 1  # each segment starts from system + task message
    assert engine.stats["generated_tokens"] == total


def user_messages(shop, chat, trajectory, max_steps, full=False):
    """The user message of every turn, rebuilt by replaying the trajectory's actions in a fresh env.

    ``full``: every page in full (what the first turn of a context shows), not shortened when it repeats.
    """
    env = WebShopEnv(shop, max_steps=max_steps)
    observation = env.reset(trajectory.goal_index)
    messages, previous = [], None
    for turn in trajectory.turns:
        assert turn.observation == observation
        shown = None if full else previous
        messages.append(chat.turn_message(env.num_steps + 1, max_steps - env.num_steps, observation,
                                          env.available_actions(), shown and shown.observation,
                                          shown and shown.action))
        observation, _, _, _ = env.step(turn.action if turn.action is not None else "")
        previous = turn
    return messages


def check_template(engine, shop, trajectories, max_steps):
    """Every token that was not sampled is the chat template's rendering of the conversation.

    Per segment the template renders the context turns (replies as text) and the sampled turns (a marker in
    place of each reply); the text between markers, encoded, must be exactly the unmasked tokens, except that a
    reply the model closed with eos itself already holds the template's end-of-turn text.
    """
    tokenizer, chat = engine.tokenizer, engine.chat

    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    for trajectory in trajectories:
        messages = user_messages(shop, chat, trajectory, max_steps)
        full_messages = user_messages(shop, chat, trajectory, max_steps, full=True)
        for segment, turns in segment_turns(trajectory):
            first, last = segment.first_turn, segment.first_turn + len(turns)
            start = 0  # the whole history (no budget cut)
            pairs = [(full_messages[i] if i == start else messages[i],
                      trajectory.turns[i].reply if i < first else _SAMPLED) for i in range(start, last)]
            text = tokenizer.apply_chat_template(chat.messages(trajectory.instruction, pairs), tokenize=False)
            pieces = text.split(_SAMPLED)
            assert len(pieces) == len(turns) + 1
            ids, mask, position = segment.token_ids, segment.gen_mask, 0
            for j, piece in enumerate(pieces[:-1]):  # context tokens, then the sampled reply (empty ones too)
                if position and ids[position - 1] in engine.eos_ids:  # the reply closed its own turn
                    eos_text = tokenizer.decode([ids[position - 1]])
                    assert piece.startswith(eos_text)
                    piece = piece[len(eos_text):]
                expected = encode(piece)
                assert ids[position:position + len(expected)] == expected, (j, piece[:200])
                assert not any(mask[position:position + len(expected)])
                position += len(expected)
                length = turns[j].generated_tokens
                assert all(mask[position:position + length]) and len(mask[position:position + length]) == length
                position += length
            assert position == len(ids)


# ------------------------------------------------------------------------------------------------ bookkeeping
@pytest.mark.parametrize("which", ["plain", "chained", "chained-no-reuse"])
def test_log_probs_and_mask_full_history(which, model, chained, tokenizer, shop):
    policy = model if which == "plain" else chained
    engine = engine_for(policy, tokenizer, temperature=1.0, reuse_cache=which != "chained-no-reuse")
    trajectories = play(engine, shop, seed=1)
    assert all(len(t.segments) == 1 for t in trajectories)  # full history: one segment per trajectory
    assert all(len(t.turns) == MAX_STEPS for t in trajectories)
    check_bookkeeping(engine, trajectories)
    check_template(engine, shop, trajectories, MAX_STEPS)
    if which != "plain":  # the variant exercises every stop reason and real page changes
        turns = [t for tr in trajectories for t in tr.turns]
        assert {t.stop for t in turns} == {"answer", "eos", "length"}
        assert any(t.action == "search[protein bars]" and t.valid_action for t in turns)
        assert any(t.format_error is not None for t in turns)


def test_context_budget_forces_a_rebuild(chained, tokenizer, shop):
    budget = 320
    engine = engine_for(chained, tokenizer, ChatFormat(context_budget=budget))
    trajectories = play(engine, shop, seed=3)
    assert any(len(t.segments) > 1 for t in trajectories)
    assert all(len(s.token_ids) <= budget for t in trajectories for s in t.segments)
    cut = [s for t in trajectories for s in t.segments if "…" in tokenizer.decode(s.token_ids)]
    assert cut, "some page should have been too long for the budget and cut in the middle"
    check_bookkeeping(engine, trajectories)


class Searches:
    """Searches a different query every turn: a results page a turn, so a long episode outgrows a small budget
    whatever the model would have written."""

    QUERIES = ["pillow", "shoes", "shirt", "tea", "lamp", "soap", "candle", "mug", "towel", "watch"]

    def __call__(self, env):
        return f"<think>look</think><answer>search[{self.QUERIES[env.num_steps % len(self.QUERIES)]}]</answer>"


def test_a_rebuilt_context_below_a_full_fill_leaves_room_for_the_next_turns(model, tokenizer, shop):
    budget, fill = 1600, 0.5
    played = {}
    for f in (1.0, fill):  # the same replies either way (a demonstrator), so the same pages
        engine = engine_for(model, tokenizer, ChatFormat(context_budget=budget, rebuild_fill=f))
        played[f] = play(engine, shop, GOALS[:2], max_steps=15, demonstrators=[Searches() for _ in range(2)])
    full, below = played[1.0], played[fill]
    assert [[t.action for t in tr.turns] for tr in full] == [[t.action for t in tr.turns] for tr in below]
    with_earlier_turns = int((budget - MAX_NEW_TOKENS) * fill)
    rebuilt = [s for t in below for s in t.segments[1:]]
    assert rebuilt, "the budget should have forced a rebuild"
    for segment in rebuilt:
        context = segment.token_ids[:runs(segment.gen_mask, 1)[0][0]]  # what the segment's first reply saw
        shown_turns = re.findall(r"Turn (\d+)", tokenizer.decode(context))
        assert len(context) <= with_earlier_turns or len(shown_turns) == 1  # over the fill: only its own turn
    assert all(len(s.token_ids) <= budget for t in below for s in t.segments)
    segments = {f: sum(len(t.segments) for t in played[f]) for f in played}
    encoded = {f: sum(len(s.token_ids) for t in played[f] for s in t.segments) for f in played}  # through the model
    assert segments[fill] < segments[1.0] and encoded[fill] < encoded[1.0], (segments, encoded)


def test_log_probs_and_mask_on_the_real_data(real_data_dir, chained, tokenizer):
    shop = WebShop.load(real_data_dir)
    engine = engine_for(chained, tokenizer)
    trajectories = play(engine, shop, goals=GOALS[:3], seed=14, max_steps=3)
    check_bookkeeping(engine, trajectories)
    check_template(engine, shop, trajectories, max_steps=3)


def test_temperature_and_top_p_record_the_untempered_policy(chained, tokenizer, shop):
    engine = engine_for(chained, tokenizer, temperature=0.7, top_p=0.9)
    trajectories = play(engine, shop, goals=GOALS[:3], seed=4)
    check_bookkeeping(engine, trajectories)  # old_logp = log π (not the tempered, truncated sampler)


def test_training_mode_is_restored(model, tokenizer, shop):
    modes = []  # the mode of every forward pass of the rollout: sampling must not run with dropout on
    hook = model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    model.train()
    try:
        play(engine_for(model, tokenizer, max_new_tokens=4), shop, goals=GOALS[:2], max_steps=1)
        assert modes and not any(modes)
        assert model.training
    finally:
        hook.remove()
        model.eval()


# ------------------------------------------------------------------------------------------------ determinism
def replies(trajectories):
    return [[t.reply for t in tr.turns] for tr in trajectories]


def fingerprint(trajectories):
    return [(t.goal_index, t.reward, [t.reply for t in t.turns],
             [(s.token_ids, s.gen_mask, s.old_logp) for s in t.segments]) for t in trajectories]


def test_same_seed_same_trajectories(chained, tokenizer, shop):
    engine = engine_for(chained, tokenizer)
    first = fingerprint(play(engine, shop, seed=5))
    assert fingerprint(play(engine, shop, seed=5)) == first
    assert fingerprint(play(engine, shop, seed=6)) != first


def test_reusing_the_cache_between_turns_gives_the_same_samples(chained, tokenizer, shop):
    reused = play(engine_for(chained, tokenizer, reuse_cache=True), shop, seed=13)
    fresh = play(engine_for(chained, tokenizer, reuse_cache=False), shop, seed=13)
    assert replies(reused) == replies(fresh)
    for a, b in zip(reused, fresh):
        assert [s.token_ids for s in a.segments] == [s.token_ids for s in b.segments]
        for s, r in zip(a.segments, b.segments):
            assert s.old_logp == pytest.approx(r.old_logp, abs=TOLERANCE)
    # the replies are the seed's draws, not fixed by the bigram bias: another seed gives others
    other = play(engine_for(chained, tokenizer, reuse_cache=True), shop, goals=GOALS[:2], seed=14, max_steps=1)
    assert [r[:1] for r in replies(other)] != [r[:1] for r in replies(reused[:2])]


def test_packed_weights_give_the_same_samples(chained, tokenizer, shop, monkeypatch):
    """Decoding with oneDNN-packed weights (``rollout.packed``) changes nothing but the cost, and the packed path is
    the one taken: every decode step goes through it."""
    from apo_lightning.rollout import packed

    plain = play(engine_for(chained, tokenizer), shop, seed=21)
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(packed, "_linear_pointwise", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    settings = RolloutSettings(max_new_tokens=MAX_NEW_TOKENS, pack_weights=True)  # as a config asks for it
    packed_run = play(settings.engine(chained, tokenizer, ChatFormat()), shop, seed=21)
    assert calls and max(calls) <= packed.MAX_PACKED_ROWS
    assert replies(packed_run) == replies(plain)
    for a, b in zip(packed_run, plain):
        assert [s.token_ids for s in a.segments] == [s.token_ids for s in b.segments]
        for s, r in zip(a.segments, b.segments):
            assert s.old_logp == pytest.approx(r.old_logp, abs=TOLERANCE)
    assert all("forward" not in vars(m) for m in chained.modules())  # the layers are as before


def test_greedy_is_deterministic_and_batch_invariant(model, tokenizer, shop):
    engine = engine_for(model, tokenizer, greedy=True, max_new_tokens=12)
    batched = play(engine, shop, goals=GOALS[:4], seed=7, max_steps=2)
    assert fingerprint(play(engine, shop, goals=GOALS[:4], seed=8, max_steps=2)) == fingerprint(batched)
    one_by_one = [play(engine, shop, goals=[g], seed=9, max_steps=2)[0] for g in GOALS[:4]]
    # left padding must not change the replies (log-probs agree up to float noise)
    assert replies(one_by_one) == replies(batched)
    for a, b in zip(one_by_one, batched):
        assert a.segments[0].token_ids == b.segments[0].token_ids
        assert a.segments[0].old_logp == pytest.approx(b.segments[0].old_logp, abs=TOLERANCE)
    # the untrained model's greedy replies are the same junk for every goal, so the log-probs carry the check:
    # they depend on the context by far more than the tolerance
    sampled_logp = [[lp for lp, m in zip(tr.segments[0].old_logp, tr.segments[0].gen_mask) if m] for tr in batched]
    assert all(a != pytest.approx(b, abs=100 * TOLERANCE) for a, b in zip(sampled_logp, sampled_logp[1:]))


def test_tiny_top_p_is_greedy(model, tokenizer, shop):
    greedy = play(engine_for(model, tokenizer, greedy=True, max_new_tokens=12), shop, GOALS[:3], max_steps=2)
    nucleus = play(engine_for(model, tokenizer, top_p=1e-6, max_new_tokens=12), shop, GOALS[:3], seed=11,
                   max_steps=2)
    assert replies(nucleus) == replies(greedy)
    # the whole distribution, drawn with the same seed, is not greedy: the comparison above can fail
    sampled = play(engine_for(model, tokenizer, top_p=1.0, max_new_tokens=12), shop, GOALS[:3], seed=11,
                   max_steps=2)
    assert replies(sampled) != replies(greedy)


# ------------------------------------------------------------------------------------------------ demonstrations
class EndsTurn:
    """A demonstrator whose replies end with the eos token, as a model that closes its own turn."""

    def __init__(self, eos_text):
        self.oracle, self.eos_text = OracleDemonstrator(), eos_text

    def __call__(self, env):
        return self.oracle(env) + self.eos_text


@pytest.mark.parametrize("chat", [ChatFormat(context_budget=16384), ChatFormat(repeat_pages="full",
                                                                               context_budget=16384)],
                         ids=["full-history", "full-pages"])
def test_demonstrations_match_the_chat_template(chat, model, tokenizer, shop):
    engine = engine_for(model, tokenizer, chat)
    goals, max_steps = GOALS[:4], 15
    trajectories = oracle_demonstrations(engine, [WebShopEnv(shop, max_steps=max_steps) for _ in goals], goals,
                                         successful_only=False)
    assert len(trajectories) == len(goals) and sum(t.success for t in trajectories) >= 3
    closed = play(engine, shop, goals, max_steps=max_steps,
                  demonstrators=[EndsTurn(tokenizer.eos_token) for _ in goals])
    for trajectories_, eos in ((trajectories, ""), (closed, tokenizer.eos_token)):
        for trajectory in trajectories_:
            assert len(trajectory.turns) >= 3 and trajectory.format_errors == 0
            for segment, turns in segment_turns(trajectory):
                assert all(lp == 0.0 for lp in segment.old_logp)
                replies = [segment.token_ids[a:b] for a, b in runs(segment.gen_mask, 1)]
                # the oracle's replies, and nothing else, are the masked tokens
                assert replies == [tokenizer(t.reply + eos, add_special_tokens=False)["input_ids"] for t in turns]
                assert all(t.stop == "answer" and t.reply.startswith("<think>") for t in turns)
                # the incremental segment is the template's encoding of the whole conversation, cut after the
                # last reply
                messages = user_messages(shop, chat, trajectory, max_steps)
                full_messages = user_messages(shop, chat, trajectory, max_steps, full=True)
                start, last = 0, segment.first_turn + len(turns)
                pairs = [(full_messages[i] if i == start else messages[i], trajectory.turns[i].reply)
                         for i in range(start, last)]
                whole = tokenizer.apply_chat_template(chat.messages(trajectory.instruction, pairs),
                                                      return_dict=True)["input_ids"]
                assert segment.token_ids == whole[:len(segment.token_ids)]
                assert tokenizer.decode(whole[len(segment.token_ids):]) == ("\n" if eos else eos_turn(tokenizer))
        check_template(engine, shop, trajectories_, max_steps)
    assert [fingerprint([a])[0][:3] for a in trajectories] == [fingerprint([b])[0][:3] for b in closed]


def eos_turn(tokenizer):
    return tokenizer.eos_token + "\n"


def test_the_clicked_button_is_visible_in_the_context(model, tokenizer, shop):
    engine = engine_for(model, tokenizer, ChatFormat())
    trajectories = oracle_demonstrations(engine, [WebShopEnv(shop, max_steps=15) for _ in range(2)], GOALS[:2])
    missing, checked = [], 0
    for trajectory in trajectories:
        for segment, turns in segment_turns(trajectory):
            starts = [a for a, _ in runs(segment.gen_mask, 1)]
            for start, turn in zip(starts, turns):
                context = tokenizer.decode(segment.token_ids[:start]).lower()
                if turn.action.startswith("click["):
                    checked += 1
                    if f"[{turn.action[6:-1]}]".lower() not in context:
                        missing.append((trajectory.goal_index, turn.action))
    assert len(trajectories) == 2 and checked >= 2 * 2  # each episode clicks at least a product and buy now
    assert not missing


# ------------------------------------------------------------------------------------------------ format penalty
class Junky:
    """The oracle, except on the given steps, where it replies with junk (or an action the env refuses)."""

    JUNK = ["", "I am not sure what to do.", "<think>hmm</think><answer>maybe later</answer>",
            "<think>click[buy now]</think>", "<answer>search[red\nshoes]</answer>"]

    def __init__(self, junk_steps, refused_steps=()):
        self.oracle, self.junk_steps, self.refused_steps = OracleDemonstrator(), junk_steps, refused_steps
        self.steps_seen = []

    def __call__(self, env):
        self.steps_seen.append(env.num_steps)
        if env.num_steps in self.junk_steps:
            return self.JUNK[env.num_steps % len(self.JUNK)]
        if env.num_steps in self.refused_steps:
            return "<think>x</think><answer>click[no such button]</answer>"
        return self.oracle(env)


def test_malformed_replies_are_no_op_steps_with_the_format_penalty(model, tokenizer, shop):
    engine = engine_for(model, tokenizer, reward=RewardSettings(format_penalty=-0.25))
    goals, max_steps = GOALS[:3], 15
    demonstrators = [Junky({0, 2, 3}, refused_steps={5}), Junky({1, 4}), Junky(set())]
    envs = [WebShopEnv(shop, max_steps=max_steps) for _ in goals]
    trajectories = engine.rollout(envs, goals, seed=0, demonstrators=demonstrators)
    for trajectory, demonstrator, env in zip(trajectories, demonstrators, envs):
        junk = {i for i in demonstrator.junk_steps if i < len(trajectory.turns)}
        assert demonstrator.steps_seen == list(range(len(trajectory.turns)))  # every reply took one env step
        assert env.num_steps == len(trajectory.turns)
        assert trajectory.format_errors == len(junk)
        for i, turn in enumerate(trajectory.turns):
            assert (turn.format_error is not None) == (i in junk)
            if i in junk:
                assert turn.action is None and not turn.valid_action and turn.score == 0
                next_observation = trajectory.turns[i + 1].observation
                assert next_observation == turn.observation  # a no-op: the same page again
            if i in demonstrator.refused_steps:  # parsed but refused by the env: no format penalty
                assert turn.action == "click[no such button]" and not turn.valid_action
        assert trajectory.score == 1.0 and trajectory.success
        assert trajectory.reward == pytest.approx(1.0 - 0.25 * len(junk))
    check_template(engine, shop, trajectories, max_steps)


def test_junk_until_the_step_limit(model, tokenizer, shop):
    engine = engine_for(model, tokenizer)
    trajectories = play(engine, shop, GOALS[:2], max_steps=3, demonstrators=[Junky({0, 1, 2}) for _ in range(2)])
    for trajectory in trajectories:
        assert trajectory.truncated and trajectory.score == 0 and not trajectory.success
        assert trajectory.format_errors == 3 and trajectory.reward == pytest.approx(-0.3)


def test_sampled_junk_gets_the_penalty(model, tokenizer, shop):
    trajectories = play(engine_for(model, tokenizer), shop, GOALS[:3], seed=12)
    for trajectory in trajectories:
        assert trajectory.score == 0 and trajectory.truncated
        assert trajectory.format_errors == len(trajectory.turns) == MAX_STEPS  # an untrained model: junk every turn
        assert trajectory.reward == pytest.approx(-0.1 * MAX_STEPS)


# ------------------------------------------------------------------------------------------------ validation
def test_engine_validation(model, tokenizer, shop):
    with pytest.raises(ValueError, match="temperature"):
        RolloutEngine(model, tokenizer, temperature=0)
    with pytest.raises(ValueError, match="top_p"):
        RolloutEngine(model, tokenizer, top_p=0)
    with pytest.raises(ValueError, match="top_p"):
        RolloutEngine(model, tokenizer, top_p=1.5)
    with pytest.raises(ValueError, match="context_budget"):
        RolloutEngine(model, tokenizer, ChatFormat(context_budget=100), max_new_tokens=84)
    engine = engine_for(model, tokenizer)
    with pytest.raises(ValueError, match="envs"):
        engine.rollout([WebShopEnv(shop, max_steps=2)], [0, 1], seed=0)
    with pytest.raises(ValueError, match="max_steps"):
        engine.rollout([WebShopEnv(shop, max_steps=None)], [0], seed=0)


def test_rollout_settings_build_their_engine_and_name_a_setting_out_of_range(model, tokenizer):
    settings = RolloutSettings(temperature=0.7, top_p=0.9, max_new_tokens=12, valid_clicks=True)
    engine = settings.engine(model, tokenizer, ChatFormat())
    assert (engine.temperature, engine.top_p, engine.max_new_tokens) == (0.7, 0.9, 12)
    assert not engine.greedy and engine.click_constraint is not None
    assert settings.engine(model, tokenizer, ChatFormat(), greedy=True).greedy
    assert RolloutSettings().engine(model, tokenizer, ChatFormat()).click_constraint is None
    RolloutSettings()  # the defaults are in range
    for bad, message in ((dict(temperature=0.0), "rollout.temperature must be > 0, got 0"),
                         (dict(top_p=1.5), "rollout.top_p must be in (0, 1], got 1.5"),
                         (dict(max_new_tokens=0), "rollout.max_new_tokens must be >= 1, got 0")):
        with pytest.raises(ValueError) as raised:
            RolloutSettings(**bad)
        assert str(raised.value) == message


# ------------------------------------------------------------------------------------------------ SmolLM2
@pytest.mark.slow
def test_smollm2_log_probs_and_mask(shop):
    """The same bookkeeping with a real instruct model and its own chat template (converted once, ~40 s)."""
    from apo_lightning.models.loading import load_policy

    model, tokenizer = load_policy("smollm2-135m-instruct")
    engine = engine_for(model, tokenizer, temperature=1.0)
    trajectories = play(engine, shop, goals=GOALS[:2], seed=0, max_steps=2)
    check_bookkeeping(engine, trajectories)
    check_template(engine, shop, trajectories, max_steps=2)


def test_sampling_draws_tokens_with_their_probabilities():
    """The inverse-CDF draw in ``_sample``: frequencies match softmax(logits / T) and zero-probability tokens never
    come up."""
    engine = RolloutEngine.__new__(RolloutEngine)
    engine.greedy, engine.temperature, engine.top_p = False, 1.0, 1.0
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2])
    logits = torch.log(probs).expand(20000, 4).clone()
    draws = engine._sample(logits, torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws, minlength=4).float() / len(draws)
    assert frequencies[1] == 0
    assert torch.allclose(frequencies, probs, atol=0.015)
    again = engine._sample(logits, torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    assert not torch.equal(draws, engine._sample(logits, torch.Generator().manual_seed(1)))  # the seed decides
