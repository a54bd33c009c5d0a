"""Batched multi-turn rollouts: B WebShop episodes in lockstep, one chat per trajectory (RAGEN-style).

Each turn the engine renders every live episode's chat through the tokenizer's chat template (``segments``),
generates all replies in one batch with a KV cache (``kv_cache``; finished replies leave the batch), parses the
actions, steps the envs, and appends the next user message. It records the **sampled token ids** (never
re-tokenized from text), a mask that is 1 exactly on model-generated tokens, and the per-token log-probabilities
log π(y_t | ·) of the sampled tokens under the untempered policy at sampling time.
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from tqdm import tqdm

from ..utils.memory import release_free_memory
from ..utils.seeds import derive_seed
from ..webshop import WebShop, WebShopEnv
from ..webshop.settings import RewardSettings
from .chat import ChatFormat, ParsedReply, parse_reply
from .constrained import ClickConstraint
from .kv_cache import Past, extract_past, new_cache, stack_pasts
from .packed import packed_linears
from .segments import ChatHistory, PromptSegmenter
from .trajectory import Trajectory, Turn

if TYPE_CHECKING:
    from .vllm_backend import VLLMBackend

STOP_STRING = "</answer>"


@dataclass
class _Episode:
    """An episode in flight: its env, trajectory, chat history and the KV cache of its current segment."""

    env: WebShopEnv
    trajectory: Trajectory
    observation: str  # the page the current turn shows
    history: ChatHistory = field(default_factory=ChatHistory)
    past: Past | None = None  # keys/values of the segment's first tokens, kept between turns
    done: bool = False


class RolloutEngine:
    """Rolls out a language-model policy in WebShop envs.

    Args:
        model: a causal LM (``transformers`` PreTrainedModel); put in eval mode during rollouts.
        tokenizer: its tokenizer, with a chat template.
        chat: the prompt format.
        reward: what a finished episode earns, r(x, y) (default: the WebShop score, format penalty −0.1).
        max_new_tokens: reply length limit per turn.
        temperature: sampling temperature (> 0); ``greedy=True`` takes the argmax instead.
        top_p: nucleus sampling mass (1.0 = off).
        greedy: decode greedily (evaluation).
        reuse_cache: keep each episode's keys/values between turns, so a turn only encodes its new tokens
            (full history); off = re-encode the whole context every turn.
        valid_clicks: constrain each reply's click argument to the current page's clickables (``constrained``),
            token by token, greedy and sampled alike; the recorded log-probabilities stay the unconstrained
            policy's.
        pack_weights: on a CPU, decode with oneDNN-packed copies of the linear weights, made once per
            :meth:`rollout` (``rollout.packed``); the same policy up to float rounding. Ignored elsewhere.
        backend: sample replies through this vLLM server (``rollout.vllm_backend``) instead of decoding with
            ``model``: the same prompts, turns and trajectories; each request's seed is drawn from the rollout's
            seeded generator, and valid clicks are applied by the server. None: the engine's own decoder.

    Raises:
        ValueError: ``temperature`` ≤ 0, ``top_p`` outside (0, 1], or a context budget with no room for a
            prompt.
    """

    def __init__(self, model, tokenizer, chat: ChatFormat | None = None, reward: RewardSettings | None = None,
                 max_new_tokens: int = 64,
                 temperature: float = 1.0, top_p: float = 1.0, greedy: bool = False, reuse_cache: bool = True,
                 valid_clicks: bool = False, pack_weights: bool = False, backend: "VLLMBackend | None" = None):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        self.model = model
        self.tokenizer = tokenizer
        self.chat = chat or ChatFormat()
        self.reward = reward or RewardSettings()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.greedy = greedy
        self.reuse_cache = reuse_cache
        self.pack_weights = pack_weights
        self.backend = backend
        self.valid_clicks = valid_clicks
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        self.segmenter = PromptSegmenter(tokenizer, self.chat, max_new_tokens, self.eos_ids)
        self.click_constraint = (ClickConstraint(tokenizer, model.get_output_embeddings().weight.shape[0])
                                 if valid_clicks and backend is None else None)
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

    # ------------------------------------------------------------------------------------------------ rollout
    @torch.no_grad()
    def rollout(self, envs: Sequence[WebShopEnv], goal_indices: Sequence[int], seed: int,
                demonstrators: Sequence[Callable[[WebShopEnv], str | tuple[str, bool]]] | None = None
                ) -> list[Trajectory]:
        """Play one episode per (env, goal index) in lockstep and return the trajectories (same order).

        Args:
            envs: one env per episode (they may share one ``WebShop``); each needs a step limit.
            goal_indices: the goals, one per env.
            seed: seeds sampling (derive it per call, rank and purpose with ``utils.seeds.derive_seed``).
            demonstrators: instead of sampling, take each episode's replies as text from a demonstrator
                (``env -> reply``, e.g. the oracle for SFT). Their tokens are encoded from that text, masked 1 as
                the tokens to imitate, with log-prob 0. The model is not called. A demonstrator may return
                ``(reply, False)`` for a reply that is context only (masked 0: a deliberate mistake a DART
                demonstration recovers from, not something to imitate).

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
        if self.click_constraint is not None:
            self.click_constraint.clear()
        start = time.perf_counter()
        episodes = []
        for env, goal_index in zip(envs, goal_indices):
            observation = env.reset(goal_index)
            ep = _Episode(env, Trajectory(goal_index, env.instruction_text), observation)
            self._set_turn_message(ep)
            self.segmenter.new_segment(ep.trajectory, ep.history)
            episodes.append(ep)

        if self.backend is not None and demonstrators is None:
            self.backend.reset()  # what this rollout samples never depends on an earlier one's prefix cache
        # a demonstrator's turns never call the model, nor does a vLLM backend
        pack = self.pack_weights and demonstrators is None and self.backend is None
        with packed_linears(self.model, len(envs)) if pack else nullcontext():
            forward_s, gen_tokens = self._play(episodes, generator, demonstrators)
        if was_training:
            self.model.train()
        release_free_memory()  # the batch's KV caches: back to the OS, not kept for the training step
        elapsed = time.perf_counter() - start
        self.stats = {"episodes": len(episodes), "seconds": elapsed, "generate_seconds": forward_s,
                      "generated_tokens": gen_tokens, "episodes_per_s": len(episodes) / elapsed,
                      "tokens_per_s": gen_tokens / elapsed}
        return [ep.trajectory for ep in episodes]

    def _play(self, episodes: list[_Episode], generator: torch.Generator,
              demonstrators: Sequence[Callable] | None) -> tuple[float, int]:
        """Take turns until every episode is done; returns (seconds spent producing replies, reply tokens)."""
        forward_s, gen_tokens = 0.0, 0
        while True:
            live = [ep for ep in episodes if not ep.done]
            if not live:
                break
            t = time.perf_counter()
            imitate = [True] * len(live)
            if demonstrators is None:
                prompts = [ep.trajectory.segments[-1].token_ids for ep in live]
                clickables = ([ep.env.available_actions()["clickables"] for ep in live]
                              if self.valid_clicks else None)
                replies = self.generate(prompts, generator, [ep.past for ep in live], clickables)
            else:
                shown = [demonstrators[i](ep.env) for i, ep in enumerate(episodes) if not ep.done]
                texts = [x if isinstance(x, str) else x[0] for x in shown]
                imitate = [isinstance(x, str) or bool(x[1]) for x in shown]
                replies = [(ids, [0.0] * len(ids), "answer", None) for ids in map(self.segmenter.encode, texts)]
            forward_s += time.perf_counter() - t
            for ep, (ids, logp, stop, past), target in zip(live, replies, imitate):
                gen_tokens += len(ids)
                restarted = self._apply_reply(ep, ids, logp, stop, target)
                ep.past = None if restarted or ep.done else past  # a rebuilt context starts afresh
        return forward_s, gen_tokens

    def _set_turn_message(self, ep: _Episode) -> None:
        """The current turn's user message, shortened and in full."""
        env, turns = ep.env, ep.trajectory.turns
        last_action = turns[-1].action if turns else None
        left = env.max_steps - env.num_steps
        ep.history.message = self.chat.turn_message(env.num_steps + 1, left, ep.observation, env.available_actions(),
                                                    turns[-1].observation if turns else None, last_action)
        ep.history.full_message = self.chat.turn_message(env.num_steps + 1, left, ep.observation,
                                                         env.available_actions(), None, last_action)

    def _apply_reply(self, ep: _Episode, ids: list[int], logp: list[float], stop: str, target: bool = True) -> bool:
        """Record a reply (``target``: masked 1, a token to learn), step the env with its action (a no-op if none),
        prepare the next turn.

        Returns:
            True when the next turn starts a new segment (its KV cache is not reusable).
        """
        ep.trajectory.segments[-1].append(ids, generated=target, old_logp=logp)
        reply = self.tokenizer.decode(ids, skip_special_tokens=True)
        parsed: ParsedReply = parse_reply(reply)
        observation, score, done, info = ep.env.step(parsed.action if parsed.action is not None else "")
        trajectory = ep.trajectory
        trajectory.turns.append(Turn(ep.observation, reply, parsed.thought, parsed.action, parsed.error,
                                     parsed.num_actions, score, done, info["valid"], len(ids), stop))
        ep.history.complete_turn(reply)
        ep.observation = observation
        if done:
            ep.done = True
            trajectory.finish(score, info, self.reward(score, trajectory.format_errors))
            return False
        self._set_turn_message(ep)
        return self.segmenter.next_turn(trajectory, ep.history, ids[-1] if ids else -1)

    # ------------------------------------------------------------------------------------------------ decoding
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], generator: torch.Generator, pasts: list[Past | None] | None = None,
                 clickables: list[list[str]] | None = None) -> list[tuple[list[int], list[float], str, Past | None]]:
        """Sample one reply per prompt with a KV cache; finished replies leave the batch.

        Args:
            prompts: token ids per prompt (unpadded).
            generator: the sampling RNG.
            pasts: per prompt, the keys/values of its first ``past.length`` tokens from the previous turn (a
                multi-turn chat only feeds its new tokens), or None to encode the whole prompt.
            clickables: per prompt, its page's clickables, to which ``valid_clicks`` constrains a click argument
                (None: unconstrained).

        Returns:
            Per prompt ``(token ids, log π of each sampled token (untempered), stop reason, past)``; stop reason is
            "answer" (the reply ended with ``</answer>``), "eos" or "length" (``max_new_tokens``); ``past`` holds
            the keys/values of the prompt and the reply except its last token (None when ``reuse_cache`` is off).
        """
        if self.backend is not None:
            seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=generator).tolist()
            return self.backend.generate(prompts, seeds, greedy=self.greedy, temperature=self.temperature,
                                         top_p=self.top_p, max_new_tokens=self.max_new_tokens, stop=STOP_STRING,
                                         stop_token_ids=sorted(self.eos_ids), clickables=clickables)
        device = next(self.model.parameters()).device
        batch = len(prompts)
        pasts = pasts if (pasts is not None and self.reuse_cache) else [None] * batch
        past_lengths = [p.length if p is not None else 0 for p in pasts]
        new_tokens = [prompt[n:] for prompt, n in zip(prompts, past_lengths)]
        cache, attention, logits, next_position = self._prefill(new_tokens, pasts, past_lengths, device)

        rows = list(range(batch))  # original index of each live row
        tokens: list[list[int]] = [[] for _ in range(batch)]
        logps: list[list[float]] = [[] for _ in range(batch)]
        stops = ["length"] * batch
        new_pasts: list[Past | None] = [None] * batch
        for _ in range(self.max_new_tokens):
            logp_all = torch.log_softmax(logits.float(), dim=-1)  # (b, V) the policy itself
            if clickables is not None and self.click_constraint is not None:
                texts = [self.tokenizer.decode(tokens[row], skip_special_tokens=True) for row in rows]
                logits = self._constrain_clicks(logits, texts, [clickables[r] for r in rows])
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
                new_pasts[rows[j]] = extract_past(cache, j, attention[j]) if self.reuse_cache else None
            if not keep or last_step:
                break
            if len(keep) < len(rows):  # finished replies leave the batch
                index = torch.tensor(keep, device=device)
                cache.batch_select_indices(index)
                attention, chosen, next_position = attention[index], chosen[index], next_position[index]
                rows = [rows[j] for j in keep]
            attention = torch.cat([attention, attention.new_ones((len(rows), 1))], dim=1)
            out = self.model(input_ids=chosen[:, None], attention_mask=attention, position_ids=next_position,
                             cache=cache, use_cache=True)
            cache, logits = out.cache, out.logits[:, -1, :]
            next_position = next_position + 1
        return [(tokens[i], logps[i], stops[i], new_pasts[i]) for i in range(batch)]

    def _prefill(self, new_tokens: list[list[int]], pasts: list[Past | None], past_lengths: list[int],
                 device) -> tuple:
        """Encode every row's new tokens in one padded batch: ``(cache, attention (B, W), logits (B, V),
        next_position (B, 1))``, each row's real tokens right-aligned in ``attention``."""
        batch = len(new_tokens)
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
        cache = new_cache(self.model)
        if width_past:
            for layer, (keys, values) in zip(cache.layers, stack_pasts(pasts, width_past, device)):
                layer.update(keys, values)
        input_ids, attention, positions = input_ids.to(device), attention.to(device), positions.to(device)
        out = self.model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                         cache=cache, use_cache=True, logits_to_keep=1)  # only the last position's logits
        cache, logits = out.cache, out.logits[:, -1, :]  # (B, V)
        next_position = positions[:, -1:] + 1  # (B, 1)
        return cache, attention, logits, next_position

    def _constrain_clicks(self, logits: torch.Tensor, replies: list[str],
                          clickables: list[list[str]]) -> torch.Tensor:
        """``logits`` (b, V) with −inf on the tokens that would take a row's open click argument off its page
        (``replies``: each row's reply decoded so far)."""
        constrained = None
        for j, (reply, page) in enumerate(zip(replies, clickables)):
            allowed = self.click_constraint.allowed(reply, page)
            if allowed is not None:
                constrained = logits.clone() if constrained is None else constrained
                constrained[j] = constrained[j].masked_fill(~allowed.to(logits.device), float("-inf"))
        return logits if constrained is None else constrained

    def _ends_with_stop(self, ids: list[int]) -> bool:
        tail = self.tokenizer.decode(ids[-8:], skip_special_tokens=False)
        return tail.rstrip().endswith(STOP_STRING)

    def _sample(self, logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Next token per row of ``logits`` (b, V): the argmax with ``greedy``, otherwise a draw from
        softmax(logits / T) restricted to the top-p nucleus. Returns (b,) int64."""
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
        chosen = torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)
        return chosen


def rollout_goals(engine: RolloutEngine, shop: WebShop, goal_indices: Sequence[int], batch_size: int, seed: int,
                  observation_mode: str = "text", max_steps: int = 15, progress: bool = False,
                  description: str = "episodes", seed_offset: int = 0,
                  make_envs: Callable[[list[int], int], Sequence[WebShopEnv]] | None = None) -> list[Trajectory]:
    """Roll out ``engine``'s policy on every goal, ``batch_size`` episodes at a time, in goal order.

    The chunk starting at position ``k`` samples with ``derive_seed(seed, seed_offset + k)``, so the result depends
    only on ``seed`` and the goal list; a list split at multiples of ``batch_size`` and rolled out in parts with the
    parts' positions as ``seed_offset`` gives the same trajectories.

    Args:
        engine: the policy and how it decodes.
        shop: the catalog the envs share.
        goal_indices: the goals (repeat a goal for several samples of it).
        batch_size: episodes per rollout batch.
        seed: the sampling seed of this call (derive it from the run seed and the purpose).
        observation_mode, max_steps: the envs' settings.
        progress: show a progress bar (on stderr).
        description: the progress bar's label.
        make_envs: ``(goals, position) -> envs``, one env per goal of the chunk that starts at ``position`` (counted
            from ``seed_offset``), e.g. ``EnvConfig.training_envs``, whose episodes each show their own instruction;
            None: ``batch_size`` envs over ``shop``, reused.
    """
    envs = [] if make_envs is not None else [WebShopEnv(shop, observation_mode, max_steps=max_steps)
                                             for _ in range(min(batch_size, len(goal_indices)))]
    trajectories: list[Trajectory] = []
    bar = tqdm(total=len(goal_indices), desc=description, file=sys.stderr, disable=not progress, leave=False)
    for start in range(0, len(goal_indices), batch_size):
        chunk = list(goal_indices[start:start + batch_size])
        chunk_envs = make_envs(chunk, seed_offset + start) if make_envs is not None else envs[: len(chunk)]
        trajectories += engine.rollout(chunk_envs, chunk, seed=derive_seed(seed, seed_offset + start))
        bar.update(len(chunk))
    bar.close()
    return trajectories
