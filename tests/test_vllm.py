"""The vLLM sampling backend (``rollout.vllm_backend``): the same episodes as the project's own decoder, the weight
sync after an update, A*-PO through ``cli.py fit`` on two ranks with an exact resume, and the one-line refusals.

The slow tests need vLLM in its own environment (README, "vLLM"): ``$APO_VLLM_PYTHON`` or ``.venv-vllm/bin/python``
in the repository; without it they skip (CI sets ``APO_REQUIRE_SLOW_DEPS=1``: they fail).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import DDP_SCRIPT, REPO_ROOT, link_smollm2, skip_unless_required

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
#: the smoke policy with head size 64 (128 / 2 heads), which vLLM's CPU attention runs (the smoke's 16 it does not)
HEAD_64 = ["--model.tiny.hidden_size=128", "--model.tiny.intermediate_size=128",
           "--model.model_name_or_path=data/models/tiny-vllm"]


@pytest.fixture(scope="module")
def vllm_python() -> str:
    """The interpreter of vLLM's environment, or a skip (a failure under ``APO_REQUIRE_SLOW_DEPS=1``)."""
    python = os.environ.get("APO_VLLM_PYTHON") or str(REPO_ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).is_file():
        skip_unless_required(f"no vLLM environment at {python} (README, \"vLLM\")")
    found = subprocess.run([python, "-c", "import vllm"], capture_output=True, text=True)
    if found.returncode:
        skip_unless_required(f"{python} cannot import vllm: {found.stderr.strip().splitlines()[-1]}")
    return python


def _cli(*args, cwd, env=None, check=True):
    return subprocess.run([sys.executable, str(REPO_ROOT / "cli.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}, check=False)


# ------------------------------------------------------------------------------------------------ refusals
def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("override, expected", [
    (["--data.rollout.backend=vlm"], "error: data.rollout.backend"),
    (["--data.rollout.backend=vllm", "--data.rollout.vllm.python=/nowhere/bin/python"],
     "error: data.rollout.vllm.python '/nowhere/bin/python': no such interpreter; install vLLM in its own "
     "environment"),
    (["--data.rollout.backend=vllm", f"--data.rollout.vllm.python={sys.executable}"],
     f"error: data.rollout.vllm.python {sys.executable!r} cannot import vllm (ModuleNotFoundError: No module named "
     "'vllm'); install vLLM in its own environment"),
    pytest.param(["--data.rollout.backend=vllm", "VLLM"],
                 "error: data.rollout.backend 'vllm': the model's head size 16", marks=pytest.mark.slow),
    pytest.param(["--data.rollout.backend=vllm", "VLLM", "--model.lora.rank=16", *HEAD_64],
                 "error: data.rollout.vllm.max_lora_rank 8 is below the policy's LoRA rank 16: set it to at least 16",
                 marks=pytest.mark.slow),
    pytest.param(["--data.rollout.backend=vllm", "VLLM", "--data.chat.context_budget=8192", *HEAD_64],
                 "error: data.rollout.vllm.max_model_len 4096 is below data.chat.context_budget 8192",
                 marks=pytest.mark.slow),
])
def test_a_setting_vllm_cannot_run_is_one_line_and_writes_nothing(tmp_path, override, expected, request):
    """Each refusal leads with the setting and its value, exit status 2, no traceback, and not a file written
    ("VLLM": a working vLLM interpreter, so that the later checks are reached)."""
    if "VLLM" in override:
        python = request.getfixturevalue("vllm_python")
        override = [f"--data.rollout.vllm.python={python}" if a == "VLLM" else a for a in override]
    before = _files(tmp_path)
    done = _cli("fit", "--config", SMOKE, *QUIET, *override, cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith(expected), errors
    assert _files(tmp_path) == before


def test_a_python_without_vllm_is_one_line(tmp_path):
    """A vLLM environment that cannot import vllm (here: this project's own, which has none) stops the server's start
    with one line that says so and how to install it."""
    from apo_lightning.rollout.vllm_backend import VLLMBackend, VLLMSettings, VLLMSetupError

    found = subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True)
    if found.returncode == 0:
        pytest.skip("this environment has vllm")
    model = tmp_path / "m"
    model.mkdir()
    backend = VLLMBackend(VLLMSettings(python=sys.executable, eager=True, start_timeout=120), str(model))
    with pytest.raises(VLLMSetupError, match=r"^rollout.backend 'vllm': the server \(.*\) exited with code 1: "
                                             r"ModuleNotFoundError: No module named 'vllm' \(install vLLM in its "
                                             r"own environment"):
        backend.start()
    backend.close()


# ------------------------------------------------------------------------------------------------ with vLLM
@pytest.mark.slow
def test_vllm_plays_the_episodes_of_the_projects_decoder(vllm_python, smollm2_base, real_data_dir, workdir):
    """SmolLM2 with the shipped reads adapter (a LoRA request), float32 in both, valid clicks on, on 2 real test goals:
    vLLM's greedy episodes are the project's decoder's token for token, its raw log-probs within 1e-3 of the ones
    the decoder records, and a sampled rollout repeats exactly with the same seed. After an update of the policy
    adapter, ``sync`` makes vLLM sample the updated policy (its greedy episodes again the decoder's, and no longer
    the reference's)."""
    from apo_lightning.models.lora import LoraSettings, load_for_training
    from apo_lightning.models.loading import load_policy
    from apo_lightning.rollout.chat import ChatFormat
    from apo_lightning.rollout.engine import rollout_goals
    from apo_lightning.rollout.settings import RolloutSettings
    from apo_lightning.rollout.vllm_backend import VLLMBackend, VLLMSettings
    from apo_lightning.webshop.settings import EnvConfig, RewardSettings

    link_smollm2(workdir, smollm2_base)
    adapter = str(REPO_ROOT / "models" / "smollm2-webshop-1k-reads")
    env = EnvConfig(data_dir=str(real_data_dir), max_steps=4)
    shop, goals = env.shop(), env.split("test")[:2]
    chat, reward = ChatFormat(context_budget=2048), RewardSettings(kind="success")
    model, tokenizer = load_policy(adapter)
    settings = VLLMSettings(python=vllm_python, dtype="float32", eager=True, max_model_len=2048)
    backend = VLLMBackend(settings, adapter)
    try:
        backend.use_reference()

        def play(backend_name, policy, greedy=True, seed=0):
            engine = RolloutSettings(max_new_tokens=48, valid_clicks=True, backend=backend_name).engine(
                policy, tokenizer, chat, reward, greedy=greedy, backend=backend)
            return rollout_goals(engine, shop, goals, len(goals), seed=seed, max_steps=env.max_steps)

        def tokens(trajectories):
            return [[s.token_ids for s in t.segments] for t in trajectories]

        hf, vllm = play("hf", model), play("vllm", model)
        assert tokens(vllm) == tokens(hf)
        assert sum(len(t.turns) for t in hf) >= 4  # episodes of several turns, not one reply each
        gaps = [abs(a - b) for t, u in zip(hf, vllm) for s, r in zip(t.segments, u.segments)
                for a, b, m in zip(s.old_logp, r.old_logp, s.gen_mask) if m]
        assert gaps and max(gaps) < 1e-3
        sampled = [play("vllm", model, greedy=False, seed=s) for s in (5, 5, 6)]
        assert tokens(sampled[0]) == tokens(sampled[1]) != tokens(sampled[2])
        long = [list(range(1000 + i, 2900 + i)) for i in range(3)]  # more tokens than one chunked-prefill step
        replies = backend.generate(long, [1, 2, 3], greedy=False, temperature=1.0, top_p=1.0, max_new_tokens=2,
                                   stop="</answer>", stop_token_ids=[])
        assert [len(ids) for ids, *_ in replies] == [2, 2, 2]

        start = load_for_training(adapter, LoraSettings(rank=8, alpha=16, target_modules=[
            "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
        policy = start.policy.eval()
        with torch.no_grad():  # an "update": the policy adapter's B matrices scaled
            moved = [p.mul_(4.0) for n, p in policy.named_parameters() if "lora_B" in n and ".policy." in n]
        assert moved
        backend.sync(policy, 1)
        updated_hf, updated_vllm = play("hf", policy), play("vllm", policy)
        assert tokens(updated_vllm) == tokens(updated_hf) != tokens(hf)
    finally:
        backend.close()


@pytest.mark.slow
def test_apo_with_vllm_on_two_ranks_resumes_exactly(vllm_python, workdir, tmp_path):
    """``cli.py fit`` with ``data.rollout.backend: vllm`` on two DDP ranks, one server each (full fine-tuning: the
    weights are loaded into each engine in place after every update): the ranks agree, the parameters move, and a
    run resumed from the step-1 checkpoint ends with the uninterrupted run's parameters, batch for batch."""
    checkpoints = tmp_path / "ckpt"
    common = ["fit", "--config", SMOKE, *QUIET, *HEAD_64, "--trainer.strategy=ddp_fork", "--trainer.devices=2",
              "--trainer.max_steps=2", "--trainer.callbacks=[]", "--trainer.logger=false",
              "--data.vstar.cache_dir=vstar_vllm", "--data.rollout.backend=vllm",
              f"--data.rollout.vllm.python={vllm_python}", "--data.rollout.vllm.eager=true",
              "--data.rollout.vllm.dtype=float32", "--data.rollout.vllm.max_model_len=4096"]
    audit = ["--trainer.callbacks+=tests.rank_audit.RankAudit", "--trainer.callbacks.out_dir={}"]
    keep = ["--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
            f"--trainer.callbacks.dirpath={checkpoints}", "--trainer.callbacks.filename={step}",
            "--trainer.callbacks.save_top_k=-1", "--trainer.callbacks.every_n_train_steps=1"]
    straight = [*common, *keep, audit[0], audit[1].format(tmp_path / "straight")]
    resumed = [*common, "--trainer.enable_checkpointing=false", audit[0], audit[1].format(tmp_path / "resumed"),
               f"--ckpt_path={checkpoints / 'step=1.ckpt'}"]
    script = tmp_path / "ddp_runs.py"
    script.write_text(DDP_SCRIPT)
    subprocess.run([sys.executable, str(script), json.dumps([straight, resumed])], check=True, cwd=workdir,
                   timeout=900, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    straight, resumed = ([json.loads((tmp_path / run / f"rank{r}.json").read_text()) for r in (0, 1)]
                         for run in ("straight", "resumed"))
    assert [r["global_step"] for r in straight] == [2, 2]
    assert not set(straight[0]["goals"]) & set(straight[1]["goals"])
    assert straight[0]["parameters_sha256"] == straight[1]["parameters_sha256"]
    first, last = (torch.load(checkpoints / f"step={n}.ckpt", weights_only=False)["state_dict"] for n in (1, 2))
    assert any(not torch.equal(first[k], last[k]) for k in first)  # the update moved the parameters
    for r, s in zip(resumed, straight):
        assert r["batches"] == s["batches"][1:]
        assert r["parameters_sha256"] == s["parameters_sha256"]
    (table,) = (workdir / "vstar_vllm").glob("*.json")
    assert json.loads(table.read_text())["key_parts"]["backend"] == "vllm"
