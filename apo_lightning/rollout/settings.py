"""How rollouts sample replies (``RolloutSettings``), and the engine those settings build."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from ..utils.settings import check_settings
from ..webshop.settings import RewardSettings
from .chat import ChatFormat
from .engine import RolloutEngine
from .vllm_backend import VLLMBackend, VLLMSettings

Backend = Literal["hf", "vllm"]


@dataclass
class RolloutSettings:
    """How rollouts sample replies.

    Args:
        temperature: sampling temperature (> 0). The losses always read the untempered log π and log π_ref, so a
            sharper sampler (T < 1, nearer the greedy policy that is evaluated) changes which trajectories are
            regressed on, not the regression target.
        top_p: nucleus sampling mass, in (0, 1] (1.0 = off).
        max_new_tokens: reply token limit per turn.
        valid_clicks: constrain every click argument to the page's clickables (``rollout.constrained``), greedy and
            sampled alike (off: the policy writes what it writes).
        pack_weights: on a CPU, decode with oneDNN-packed copies of the linear weights, made afresh for each rollout
            (``rollout.packed``; the samples equal plain decoding's up to float rounding). No effect elsewhere.
        backend: what samples the replies: "hf" (the project's own batched decoder over the policy itself, any
            model) or "vllm" (a vLLM server per process in vLLM's own environment, ``rollout.vllm_backend``; the
            policy's weights reach it after every update). Both take the same prompt token ids and seeds and
            return the same trajectories' fields; ``pack_weights`` is the "hf" decoder's.
        vllm: how the vLLM server runs (with ``backend: vllm``).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    valid_clicks: bool = False
    pack_weights: bool = False
    backend: Backend = "hf"
    vllm: VLLMSettings = field(default_factory=VLLMSettings)

    def __post_init__(self) -> None:
        """Raise ValueError naming the first setting out of range, as ``rollout.<setting>`` (``check_settings``)."""
        check_settings("rollout.", [("temperature", self.temperature, self.temperature > 0, "> 0"),
                                    ("top_p", self.top_p, 0 < self.top_p <= 1, "in (0, 1]"),
                                    ("max_new_tokens", self.max_new_tokens, self.max_new_tokens >= 1, ">= 1"),
                                    ("backend", self.backend, self.backend in get_args(Backend),
                                     f"one of {get_args(Backend)}")])

    def engine(self, model, tokenizer, chat: ChatFormat, reward: RewardSettings | None = None, greedy: bool = False,
               backend: VLLMBackend | None = None) -> RolloutEngine:
        """A :class:`RolloutEngine` for ``model`` that samples as these settings say (``greedy``: argmax instead),
        its trajectories rewarded by ``reward`` (None: ``RewardSettings()``),
        through ``backend`` (the process's vLLM server, already holding the weights to sample) when ``backend`` is
        "vllm".

        Raises:
            ValueError: as :class:`RolloutEngine` does (``temperature`` ≤ 0, ``top_p`` outside (0, 1], ...), or
                ``backend`` "vllm" without a server.
        """
        if self.backend == "vllm" and backend is None:
            raise ValueError("rollout.backend is 'vllm' but no vLLM server was given to the engine")
        return RolloutEngine(model, tokenizer, chat, reward, max_new_tokens=self.max_new_tokens,
                             temperature=self.temperature,
                             top_p=self.top_p, greedy=greedy, valid_clicks=self.valid_clicks,
                             pack_weights=self.pack_weights, backend=backend if self.backend == "vllm" else None)
