"""Batched multi-turn rollouts: B WebShop episodes in lockstep, one chat per trajectory (RAGEN-style).

Each turn the engine renders every live episode's chat through the tokenizer's chat template, generates all
replies in one batch with a KV cache (finished replies leave the batch), parses the actions, steps the envs, and
appends the next user message. It records the **sampled token ids** (never re-tokenized from text), a mask that is
1 exactly on model-generated tokens, and the per-token log-probabilities log π(y_t | ·) of the sampled tokens
under the untempered policy at sampling time.

A trajectory is stored as one or more *segments* (token sequences). With full history a trajectory is a single
segment: each turn's delta (end of the reply, next user message, generation prompt) is appended to the
previous tokens. A new segment starts only when the context must be rebuilt: a history window (``history_turns``)
moved, or the context budget would be exceeded (see ``ChatFormat``). Earlier replies re-rendered as context in a
new segment are text, masked 0; only tokens sampled in a segment carry mask 1 there.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from ..webshop import WebShopEnv
from .chat import ChatFormat, ParsedReply, cut_middle, parse_reply

STOP_STRING = "</answer>"
_SENTINEL = "\x00APO_REPLY\x00"


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts (base seed, rank, call counter, ...), stable across processes and runs."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


@dataclass
class Turn:
    """One turn: the page the model saw, its reply, the parsed action and what the env returned."""

    observation: str
    reply: str
    thought: str
    action: str | None
    format_error: str | None
    num_actions: int
    env_reward: float
    done: bool
    valid_action: bool
    generated_tokens: int
    stop: str  # "answer" (</answer>), "eos" or "length"


@dataclass
class Segment:
    """A token sequence of one trajectory: ids (T,), gen_mask (T,) 1 on sampled tokens, logp (T,) 0 elsewhere."""

    token_ids: list[int]
    gen_mask: list[int]
    logp: list[float]
    first_turn: int  # index of the first turn whose reply was sampled in this segment

    def append(self, ids: Sequence[int], generated: bool, logp: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.gen_mask.extend([1 if generated else 0] * len(ids))
        self.logp.extend(logp if logp is not None else [0.0] * len(ids))


@dataclass
class Trajectory:
    """One episode.

    Attributes:
        goal_index: the WebShop goal.
        instruction: its instruction text.
        turns: every turn in order.
        segments: the token sequences (one with full history).
        score: the WebShop score at Buy Now (0…1), 0 without a purchase.
        reward: the RL reward r(x, y): score (or success, ``ChatFormat.reward``) + format_penalty × format errors.
        success: score == 1.0.
        reward_info: the env's verbose reward info at Buy Now (None without a purchase).
        truncated: the step limit ended the episode.
    """

    goal_index: int
    instruction: str
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    score: float = 0.0
    reward: float = 0.0
    success: bool = False
    reward_info: dict | None = None
    purchased: dict | None = None
    truncated: bool = False

    @property
    def format_errors(self) -> int:
        return sum(t.format_error is not None for t in self.turns)

    @property
    def generated_tokens(self) -> int:
        return sum(sum(s.gen_mask) for s in self.segments)


class GrowingLayer(DynamicLayer):
    """A KV-cache layer with spare room: each decoded token is written in place instead of copying the whole
    cache (``DynamicLayer`` concatenates, which at batch 32 and a 1,500-token context is most of a decode step).
    The capacity doubles when it runs out; ``keys``/``values`` are views of the filled part."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._keys = self._values = None
            self._length = 0
        length = self._length + key_states.shape[-2]
        if self._keys is None or length > self._keys.shape[-2]:
            capacity = max(length, 2 * (self._keys.shape[-2] if self._keys is not None else 0), 64)
            keys = key_states.new_empty((*key_states.shape[:2], capacity, key_states.shape[-1]))
            values = value_states.new_empty((*value_states.shape[:2], capacity, value_states.shape[-1]))
            if self._length:
                keys[..., :self._length, :] = self._keys[..., :self._length, :]
                values[..., :self._length, :] = self._values[..., :self._length, :]
            self._keys, self._values = keys, values
        self._keys[..., self._length:length, :] = key_states
        self._values[..., self._length:length, :] = value_states
        self._length = length
        self.keys, self.values = self._keys[..., :length, :], self._values[..., :length, :]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized and self._length:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys, self.values = self._keys[..., :self._length, :], self._values[..., :self._length, :]


@dataclass
class _Past:
    """Cached keys/values of the first ``length`` tokens of an episode's current segment: per layer
    ``(keys (heads, length, dim), values (heads, length, dim))``."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    length: int


@dataclass
class _Episode:
    env: WebShopEnv
    trajectory: Trajectory
    observation: str  # the page the current turn shows
    message: str = ""  # the current turn's user message (a repeated page shortened to one line)
    full_message: str = ""  # the same with the page always in full
    turn_messages: list[str] = field(default_factory=list)  # user message of every completed turn
    full_turn_messages: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    segment: Segment | None = None
    history_start: int = 0  # first turn whose messages are in the current segment
    past: _Past | None = None  # keys/values of the segment's first tokens, kept between turns
    done: bool = False


class RolloutEngine:
    """Rolls out a language-model policy in WebShop envs.

    Args:
        model: a causal LM (``transformers`` PreTrainedModel); put in eval mode during rollouts.
        tokenizer: its tokenizer, with a chat template.
        chat: the prompt format.
        max_new_tokens: reply length limit per turn.
        temperature: sampling temperature (> 0); ``greedy=True`` takes the argmax instead.
        top_p: nucleus sampling mass (1.0 = off).
        greedy: decode greedily (evaluation).
        reuse_cache: keep each episode's keys/values between turns, so a turn only encodes its new tokens
            (full history); off = re-encode the whole context every turn.
    """

    def __init__(self, model, tokenizer, chat: ChatFormat | None = None, max_new_tokens: int = 64,
                 temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False, reuse_cache: bool = True):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.model = model
        self.tokenizer = tokenizer
        self.chat = chat or ChatFormat()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.greedy = greedy
        self.reuse_cache = reuse_cache
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        if self.chat.context_budget <= max_new_tokens + 16:
            raise ValueError(f"context_budget {self.chat.context_budget} leaves no room for a prompt when "
                             f"max_new_tokens is {max_new_tokens}")
        self.stats: dict[str, float] = {}

    def _eos_ids(self) -> set[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source is not None:
                ids.update(source)
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return ids

    # ------------------------------------------------------------------------------------------------ text
    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def _encode(self, text: str) -> list[int]:
        # verbose=False: ``_new_segment`` measures candidate contexts longer than the model's limit on purpose
        # (then drops turns until one fits), which would otherwise log transformers' "longer than the specified
        # maximum sequence length" warning although no such input ever reaches the model.
        return self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    def _turns(self, ep: _Episode, start: int, current: str) -> list[tuple[str, str | None]]:
        """(user message, reply) of turns ``start``… and then ``current``. The first turn in the context shows its
        page in full even if it repeated the page before it, so a shortened page always has its full copy above."""
        turn = len(ep.replies)
        pairs: list[tuple[str, str | None]] = [
            (ep.full_turn_messages[i] if i == start else ep.turn_messages[i], ep.replies[i]) for i in range(start, turn)]
        return pairs + [(current, None)]

    def _new_segment(self, ep: _Episode) -> None:
        """Render the context from scratch: system, task and the turns the window and budget allow."""
        turn = len(ep.replies)
        start = turn if self.chat.history_turns == 0 else (
            max(0, turn - self.chat.history_turns) if self.chat.history_turns is not None else 0)
        budget = self.chat.context_budget - self.max_new_tokens
        instruction = ep.trajectory.instruction
        cut: str | None = None  # the current message, cut to fit
        while True:
            current = cut if cut is not None else (ep.full_message if start == turn else ep.message)
            ids = self._encode(self._render(self.chat.messages(instruction, self._turns(ep, start, current)), True))
            if len(ids) <= budget:
                break
            if start < turn:
                start += 1  # drop the oldest turn
                continue
            # the current page alone does not fit: cut its middle, proportionally to the excess
            keep = int(len(current) * budget / len(ids)) - 16
            if keep < 32:
                raise ValueError(f"context_budget {self.chat.context_budget} cannot hold the task message")
            cut = cut_middle(current, keep)
        ep.history_start = start
        ep.segment = Segment([], [], [], first_turn=turn)
        ep.segment.append(ids, generated=False)
        ep.trajectory.segments.append(ep.segment)

    def _extend_or_restart(self, ep: _Episode, current: str, last_token: int) -> None:
        """Append the next turn's delta to the current segment, or start a new segment (window / budget)."""
        turn = len(ep.replies)
        window = self.chat.history_turns
        if window is not None and turn - ep.history_start > window:
            self._new_segment(ep)
            return
        # delta = what the template puts after the assistant's reply: end of turn, next user message, prompt
        instruction = ep.trajectory.instruction
        turns = self._turns(ep, ep.history_start, current)
        turns[-2] = (turns[-2][0], _SENTINEL)
        rendered = self._render(self.chat.messages(instruction, turns), True)
        delta_text = rendered.split(_SENTINEL, 1)[1]
        if last_token in self.eos_ids:  # the model closed its turn itself: don't close it twice
            eos_text = self.tokenizer.decode([last_token])
            if delta_text.startswith(eos_text):
                delta_text = delta_text[len(eos_text):]
        delta = self._encode(delta_text)
        if len(ep.segment.token_ids) + len(delta) + self.max_new_tokens > self.chat.context_budget:
            self._new_segment(ep)
            return
        ep.segment.append(delta, generated=False)

    # ------------------------------------------------------------------------------------------------ rollout
    @torch.no_grad()
    def rollout(self, envs: Sequence[WebShopEnv], goal_indices: Sequence[int], seed: int,
                demonstrators: Sequence[Callable[[WebShopEnv], str]] | None = None) -> list[Trajectory]:
        """Play one episode per (env, goal index) in lockstep and return the trajectories (same order).

        Args:
            envs: one env per episode (they may share one ``WebShop``); each needs a step limit.
            goal_indices: the goals, one per env.
            seed: seeds sampling (derive it per call and per rank with ``derive_seed``).
            demonstrators: instead of sampling, take each episode's replies as text from a demonstrator
                (``env -> reply``, e.g. the oracle for SFT). Their tokens are encoded from that text, masked 1 as
                the tokens to imitate, with log-prob 0. The model is not called.

        Raises:
            ValueError: lengths differ, or an env has no step limit.
        """
        if len(envs) != len(goal_indices):
            raise ValueError(f"{len(envs)} envs for {len(goal_indices)} goals")
        if any(env.max_steps is None for env in envs):
            raise ValueError("rollouts need envs with a step limit (max_steps)")
        was_training = self.model.training
        self.model.eval()
        generator = torch.Generator(device="cpu").manual_seed(seed)
        start, gen_tokens, forward_s = time.perf_counter(), 0, 0.0
        episodes = []
        for env, goal_index in zip(envs, goal_indices):
            observation = env.reset(goal_index)
            ep = _Episode(env, Trajectory(goal_index, env.instruction_text), observation)
            ep.message, ep.full_message = self._turn_message(ep), self._turn_message(ep, full=True)
            self._new_segment(ep)
            episodes.append(ep)

        while True:
            live = [ep for ep in episodes if not ep.done]
            if not live:
                break
            t = time.perf_counter()
            if demonstrators is None:
                replies = self.generate([ep.segment.token_ids for ep in live], generator, [ep.past for ep in live])
            else:
                texts = [demonstrators[i](ep.env) for i, ep in enumerate(episodes) if not ep.done]
                replies = [(ids, [0.0] * len(ids), "answer", None) for ids in map(self._encode, texts)]
            forward_s += time.perf_counter() - t
            for ep, (ids, logp, stop, past) in zip(live, replies):
                gen_tokens += len(ids)
                segment = ep.segment
                self._apply_reply(ep, ids, logp, stop)
                ep.past = past if ep.segment is segment and not ep.done else None  # a rebuilt context starts afresh

        if was_training:
            self.model.train()
        elapsed = time.perf_counter() - start
        self.stats = {"episodes": len(episodes), "seconds": elapsed, "generate_seconds": forward_s,
                      "generated_tokens": gen_tokens, "episodes_per_s": len(episodes) / elapsed,
                      "tokens_per_s": gen_tokens / elapsed}
        return [ep.trajectory for ep in episodes]

    def _turn_message(self, ep: _Episode, full: bool = False) -> str:
        env, turns = ep.env, ep.trajectory.turns
        previous = turns[-1].observation if turns and not full else None
        last_action = turns[-1].action if turns else None
        return self.chat.turn_message(env.num_steps + 1, env.max_steps - env.num_steps, ep.observation,
                                      env.available_actions(), previous, last_action)

    def _apply_reply(self, ep: _Episode, ids: list[int], logp: list[float], stop: str) -> None:
        """Record a sampled reply, step the env with its action (a no-op if none), prepare the next turn."""
        ep.segment.append(ids, generated=True, logp=logp)
        reply = self.tokenizer.decode(ids, skip_special_tokens=True)
        parsed: ParsedReply = parse_reply(reply)
        observation, env_reward, done, info = ep.env.step(parsed.action if parsed.action is not None else "")
        trajectory = ep.trajectory
        trajectory.turns.append(Turn(ep.observation, reply, parsed.thought, parsed.action, parsed.error,
                                     parsed.num_actions, env_reward, done, info["valid"], len(ids), stop))
        ep.turn_messages.append(ep.message)
        ep.full_turn_messages.append(ep.full_message)
        ep.replies.append(reply)
        ep.observation = observation
        if done:
            ep.done = True
            trajectory.score = env_reward
            trajectory.success = env_reward == 1.0
            trajectory.reward_info = info.get("reward_info")
            trajectory.truncated = info["truncated"]
            if "asin" in info:
                trajectory.purchased = {"asin": info["asin"], "options": info["options"]}
            trajectory.reward = self.chat.episode_reward(trajectory.score, trajectory.format_errors)
            return
        ep.message, ep.full_message = self._turn_message(ep), self._turn_message(ep, full=True)
        self._extend_or_restart(ep, ep.message, ids[-1] if ids else -1)

    # ------------------------------------------------------------------------------------------------ decoding
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], generator: torch.Generator,
                 pasts: list[_Past | None] | None = None) -> list[tuple[list[int], list[float], str, _Past | None]]:
        """Sample one reply per prompt with a KV cache; finished replies leave the batch.

        Args:
            prompts: token ids per prompt (unpadded).
            generator: the sampling RNG.
            pasts: per prompt, the keys/values of its first ``past.length`` tokens from the previous turn (a
                multi-turn chat only feeds its new tokens), or None to encode the whole prompt.

        Returns:
            Per prompt ``(token ids, log π of each sampled token (untempered), stop reason, past)``; stop reason is
            "answer" (the reply ended with ``</answer>``), "eos" or "length" (``max_new_tokens``); ``past`` holds
            the keys/values of the prompt and the reply except its last token (None when ``reuse_cache`` is off).
        """
        device = next(self.model.parameters()).device
        batch = len(prompts)
        pasts = pasts if (pasts is not None and self.reuse_cache) else [None] * batch
        past_lengths = [p.length if p is not None else 0 for p in pasts]
        new_tokens = [prompt[n:] for prompt, n in zip(prompts, past_lengths)]
        width_past, width_new = max(past_lengths), max(len(t) for t in new_tokens)

        # layout per row: [left pad | cached past | left pad | new tokens]; the mask hides both pads
        input_ids = torch.full((batch, width_new), self.pad_id, dtype=torch.long)
        attention = torch.zeros((batch, width_past + width_new), dtype=torch.long)
        positions = torch.zeros((batch, width_new), dtype=torch.long)
        for i, (tokens, n_past) in enumerate(zip(new_tokens, past_lengths)):
            input_ids[i, width_new - len(tokens):] = torch.tensor(tokens, dtype=torch.long)
            attention[i, width_past - n_past:width_past] = 1
            attention[i, width_past + width_new - len(tokens):] = 1
            positions[i, width_new - len(tokens):] = torch.arange(n_past, n_past + len(tokens))
        cache = self._new_cache()
        if width_past:
            for layer, (keys, values) in zip(cache.layers, self._stack_pasts(pasts, width_past, device)):
                layer.update(keys, values)
        input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=1)  # only the last position's logits
        cache, logits = out.past_key_values, out.logits[:, -1, :]  # (B, V)
        next_position = positions[:, -1:] + 1  # (B, 1)

        rows = list(range(batch))  # original index of each live row
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logps: list[list[float]] = [[] for _ in range(batch)]
        stops = ["length"] * batch
        new_pasts: list[_Past | None] = [None] * batch
        for _ in range(self.max_new_tokens):
            logp_all = torch.log_softmax(logits.float(), dim=-1)  # (b, V) the policy itself
            chosen = self._sample(logits, generator)  # (b,)
            chosen_logp = logp_all.gather(1, chosen[:, None]).squeeze(1)
            keep = []
            for j, (row, token, lp) in enumerate(zip(rows, chosen.tolist(), chosen_logp.tolist())):
                tokens[row].append(token)
                logps[row].append(lp)
                if token in self.eos_ids:
                    stops[row] = "eos"
                elif self._ends_with_stop(tokens[row]):
                    stops[row] = "answer"
                else:
                    keep.append(j)
            last_step = len(tokens[rows[0]]) >= self.max_new_tokens
            for j in (range(len(rows)) if last_step or not keep else sorted(set(range(len(rows))) - set(keep))):
                new_pasts[rows[j]] = self._extract_past(cache, j, attention[j])
            if not keep or last_step:
                break
            if len(keep) < len(rows):  # finished replies leave the batch
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention, chosen, next_position = attention[index], chosen[index], next_position[index]
                rows = [rows[j] for j in keep]
            attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=1)
            out = self.model(input_ids=chosen[:, None], attention_mask=attention, position_ids=next_position,
                             past_key_values=cache, use_cache=True)
            cache, logits = out.past_key_values, out.logits[:, -1, :]
            next_position = next_position + 1
        return [(tokens[i], logps[i], stops[i], new_pasts[i]) for i in range(batch)]

    def _new_cache(self) -> DynamicCache:
        """An empty cache; plain full-attention layers become ``GrowingLayer`` (same results, less copying)."""
        cache = DynamicCache(config=self.model.config)
        if all(type(layer) is DynamicLayer for layer in cache.layers):
            cache.layers = [GrowingLayer() for _ in cache.layers]
        return cache

    def _extract_past(self, cache, row: int, attention_row: torch.Tensor) -> _Past | None:
        """The keys/values of one row's real tokens (pads dropped), for reuse next turn."""
        if not self.reuse_cache:
            return None
        keep = attention_row.bool()
        layers = [(layer.keys[row][:, keep, :].clone(), layer.values[row][:, keep, :].clone()) for layer in cache.layers]
        return _Past(layers, int(keep.sum()))

    @staticmethod
    def _stack_pasts(pasts: list[_Past | None], width: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Right-align every row's cached keys/values in zero-padded (B, heads, width, dim) tensors per layer."""
        reference = next(p for p in pasts if p is not None)
        stacked = []
        for layer, (k_ref, v_ref) in enumerate(reference.layers):
            keys = k_ref.new_zeros((len(pasts), k_ref.shape[0], width, k_ref.shape[2]))
            values = v_ref.new_zeros((len(pasts), v_ref.shape[0], width, v_ref.shape[2]))
            for i, past in enumerate(pasts):
                if past is not None:
                    k, v = past.layers[layer]
                    keys[i, :, width - k.shape[1]:] = k
                    values[i, :, width - v.shape[1]:] = v
            stacked.append((keys.to(device), values.to(device)))
        return stacked

    def _ends_with_stop(self, ids: list[int]) -> bool:
        tail = self.tokenizer.decode(ids[-8:], skip_special_tokens=False)
        return tail.rstrip().endswith(STOP_STRING)

    def _sample(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Next token per row: argmax, or a draw from softmax(logits / T) restricted to the top-p nucleus."""
        if self.greedy:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)  # (b, V)
        if self.top_p < 1.0:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            outside = sorted_probs.cumsum(-1) - sorted_probs > self.top_p  # keep the smallest set reaching top_p
            sorted_probs = sorted_probs.masked_fill(outside, 0.0)
            probs = torch.zeros_like(probs).scatter(1, order, sorted_probs)
        # inverse-CDF draw: one uniform per row from the seeded generator (torch.multinomial is several times
        # slower on the CPU at this size); right=True never picks a zero-probability token
        uniform = torch.rand((probs.shape[0], 1), generator=generator).to(probs.device)
        cdf = probs.cumsum(dim=-1)
        chosen = torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True).squeeze(1)
        return chosen.clamp_(max=probs.shape[-1] - 1)


def pad_batch(examples: list[dict], pad_id: int, per_token: Sequence[str] = ("gen_mask",)) -> dict[str, torch.Tensor]:
    """Right-pad examples of token lists to ``input_ids/attention_mask (B, T) int64`` and one ``(B, T) float32``
    tensor per key in ``per_token`` (0 after each example's end).

    Args:
        examples: dicts with ``"input_ids"`` (a list of ints) and, per key in ``per_token``, a list of floats of the
            same length.
        pad_id: token id written after each example's end.
        per_token: the float per-token keys to pad (default: the generated-token mask).
    """
    width = max(len(e["input_ids"]) for e in examples)
    shape = (len(examples), width)
    batch = {"input_ids": torch.full(shape, pad_id, dtype=torch.long),
             "attention_mask": torch.zeros(shape, dtype=torch.long)}
    batch.update({key: torch.zeros(shape, dtype=torch.float32) for key in per_token})
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        batch["input_ids"][i, :n] = torch.tensor(e["input_ids"], dtype=torch.long)
        batch["attention_mask"][i, :n] = 1
        for key in per_token:
            batch[key][i, :n] = torch.tensor(e[key], dtype=torch.float32)
    return batch


def collate_trajectories(trajectories: Sequence[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded training tensors for a batch of trajectories.

    Returns:
        ``input_ids (S, T) int64``, ``attention_mask (S, T) int64``, ``gen_mask (S, T) float32`` (1 on sampled
        tokens), ``old_logp (S, T) float32`` (log π at sampling time, 0 elsewhere), ``traj_index (S,) int64``
        (which trajectory each segment belongs to), and per trajectory ``reward (B,)``, ``score (B,)``,
        ``success (B,)`` float32 and ``goal_index (B,)`` int64. S = B with full history (one segment each).
    """
    segments = [(i, s) for i, t in enumerate(trajectories) for s in t.segments]
    batch = pad_batch([{"input_ids": s.token_ids, "gen_mask": s.gen_mask, "old_logp": s.logp} for _, s in segments],
                      pad_id, per_token=("gen_mask", "old_logp"))
    batch["traj_index"] = torch.tensor([i for i, _ in segments], dtype=torch.long)
    batch["reward"] = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)
    batch["score"] = torch.tensor([t.score for t in trajectories], dtype=torch.float32)
    batch["success"] = torch.tensor([float(t.success) for t in trajectories], dtype=torch.float32)
    batch["goal_index"] = torch.tensor([t.goal_index for t in trajectories], dtype=torch.long)
    return batch
