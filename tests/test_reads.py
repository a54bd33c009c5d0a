"""Training that reads (``EnvConfig.vary_wording``): every training episode (SFT demonstrations and drills, stage-1
samples, stage-2 rollouts) shows its goal's instruction drawn afresh from the training family of phrasings or, a set
share of the time, in the generator's words; never in the held-out family. The oracle still wins those episodes and
searches with the words it is shown; the draws reproduce, vary between passes and samples, and key the caches."""

import json
import math
import random
import re
from pathlib import Path

import pytest
from lightning.pytorch import Callback

from apo_lightning.baselines.scripted import OraclePolicy, play_episode, said_words
from apo_lightning.lit import stage1 as stage1_module
from apo_lightning.lit.demos import demonstration_cache
from apo_lightning.lit.stage1 import Stage1, VStarConfig
from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.settings import RolloutSettings
from apo_lightning.webshop import WebShop
from apo_lightning.webshop.settings import EnvConfig, RewardSettings
from apo_lightning.webshop.wording import FAMILIES, drawn_goal, reworded_shop

from conftest import fit_in_process, imitated_actions

REPO = Path(__file__).resolve().parents[1]
SMOKE = str(REPO / "configs" / "smoke.yaml")
SFT_CONFIG = str(REPO / "configs" / "sft_quickstart.yaml")
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
#: a very small tiny policy for the SFT fits
TINY = ["--model.tiny.vocab_size=512", "--model.tiny.hidden_size=32", "--model.tiny.num_layers=2",
        "--model.tiny.num_heads=2", "--model.tiny.num_kv_heads=1", "--model.tiny.intermediate_size=64",
        "--model.tiny.corpus_goals=10"]
#: the opening words of each family's openers ("i'm looking for", ...), as in tests/test_wording.py
OPENERS = {name: [o.split("{")[0].strip().lower() for o in family.openers] for name, family in FAMILIES.items()}


def family_of(goal: dict, text: str) -> str:
    """Which words ``text`` is in, for ``goal``: "original" (the generator's text), "train", "heldout" (by the
    family's opener, at the start or after a leading price phrase) or "unknown"."""
    if text == goal.get("original_instruction_text", goal["instruction_text"]):
        return "original"
    first = re.split(r"[.?] ", text.lower())[0]
    found = [name for name, marks in OPENERS.items() if any(first.startswith(m) or f", {m}" in first for m in marks)]
    return found[0] if len(found) == 1 else "unknown"


def within_sampling(count: int, n: int, p: float) -> bool:
    """``count`` of ``n`` draws is within four binomial standard deviations of ``n * p``."""
    return abs(count - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1e-9


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def is_subsequence(part: list[str], whole: list[str]) -> bool:
    rest = iter(whole)
    return all(word in rest for word in part)


def search_of(trajectory) -> str:
    """The argument of an episode's first action, ``search[...]``."""
    action = trajectory.turns[0].action
    assert action.startswith("search["), action
    return action[len("search["):-1]


@pytest.fixture(scope="module")
def synthetic() -> WebShop:
    return EnvConfig(data_dir="synthetic").shop()


# ------------------------------------------------------------------------------------------------ the draw
def test_a_drawn_instruction_is_the_generators_or_the_training_familys_at_the_set_share(synthetic):
    goals = synthetic.goals[:400]
    for share in (0.0, 0.25, 0.6, 1.0):
        rng = random.Random(0)
        drawn = [drawn_goal(goal, rng, share) for goal in goals for _ in range(3)]
        families = [family_of(d, d["instruction_text"]) for d in drawn]
        assert set(families) <= {"original", "train"}, set(families)
        assert within_sampling(families.count("original"), len(drawn), share), (share, families.count("original"))
    # the reward's fields are the goal's; a goal reworded before is drawn from its generator's words again
    heldout = reworded_shop(synthetic, "heldout").goals[7]
    again = drawn_goal(heldout, random.Random(1), 0.0)
    assert {k: v for k, v in again.items() if "instruction" not in k} == {
        k: v for k, v in synthetic.goals[7].items() if "instruction" not in k}
    assert again["original_instruction_text"] == synthetic.goals[7]["instruction_text"]
    assert family_of(again, again["instruction_text"]) == "train"
    assert drawn_goal(heldout, random.Random(1), 1.0)["instruction_text"] == synthetic.goals[7]["instruction_text"]
    # the same random state draws the same words, and draws differ from one another
    assert drawn_goal(goals[3], random.Random(5), 0.25) == drawn_goal(goals[3], random.Random(5), 0.25)
    assert len({drawn_goal(goals[3], random.Random(s), 0.0)["instruction_text"] for s in range(20)}) >= 15
    with pytest.raises(ValueError, match=r"original_share must be in \[0, 1\], got 1.5"):
        drawn_goal(goals[0], random.Random(0), 1.5)


def test_training_envs_draw_per_episode_reproducibly_and_leave_the_catalog_alone(synthetic):
    env = EnvConfig(data_dir="synthetic", vary_wording=True, original_share=0.0)
    goal = env.split("train")[0]
    before = [g["instruction_text"] for g in synthetic.goals]

    def texts(envs, goals):
        return [e.reset(g) and e.instruction_text for e, g in zip(envs, goals)]

    goals = [goal] * 8 + [goal + 1] * 4
    first = texts(env.training_envs(goals, seed=3), goals)
    assert first == texts(env.training_envs(goals, seed=3), goals)  # reproducible
    assert len(set(first[:8])) >= 6  # each episode of one goal draws its own words
    assert texts(env.training_envs(goals, seed=4), goals) != first
    assert texts(env.training_envs(goals[5:], 5, seed=3), goals[5:]) == first[5:]  # a list played in parts
    assert [g["instruction_text"] for g in env.shop().goals] == before  # the catalog's goals are not touched
    one = env.training_envs([goal], seed=0)[0].shop
    assert len(one.goals) == len(synthetic.goals) and one.goals[goal + 1] is env.shop().goals[goal + 1]
    plain = EnvConfig(data_dir="synthetic").training_envs(goals, seed=3)
    assert texts(plain, goals) == [synthetic.goals[g]["instruction_text"] for g in goals]


# ------------------------------------------------------------------------------------------------ the demonstrator
def oracle_under_both_wordings(env: EnvConfig, goals: list[int]) -> tuple[list, list]:
    """The oracle's episodes on ``goals`` in the generator's words and in drawn training-family words."""
    original = [play_episode(e, OraclePolicy(), g) for e, g in zip(env.envs(len(goals)), goals)]
    reads = EnvConfig(**{**env.__dict__, "vary_wording": True, "original_share": 0.0})
    reworded = [play_episode(e, OraclePolicy(), g) for e, g in zip(reads.training_envs(goals, seed=0), goals)]
    return original, reworded


@pytest.mark.parametrize("catalog", ["synthetic", "real"])
def test_the_oracle_wins_as_often_in_other_words_and_searches_with_the_words_it_is_shown(catalog, request):
    data_dir = "synthetic" if catalog == "synthetic" else str(request.getfixturevalue("real_data_dir"))
    env = EnvConfig(data_dir=data_dir)
    goals = env.split("train")[:300]
    original, reworded = oracle_under_both_wordings(env, goals)
    rate = {name: sum(t.success for t in episodes) / len(goals)
            for name, episodes in (("original", original), ("reworded", reworded))}
    assert rate["reworded"] >= rate["original"] - 0.02, rate
    for trajectory, goal in zip(reworded, goals):
        shown = trajectory.instruction
        assert family_of(env.shop().goals[goal], shown) == "train"
        search = search_of(trajectory)
        assert search and is_subsequence(words(search), words(shown)), (shown, search)
        fields = env.shop().goals[goal]
        options = fields["goal_options"]
        for fact in [fields["query"], *fields["attributes"], *(options.values() if isinstance(options, dict) else [])]:
            assert " ".join(words(fact)) in " ".join(words(search)), (fact, search)  # every word of the goal
    # in the generator's words the oracle searches as it always did: the instruction up to its price clause
    assert [search_of(t) for t in original] == [OraclePolicy.queries_for(env.shop().goals[g])[0] for g in goals]


def test_said_words_keeps_the_instructions_order_and_writing():
    text = ("With a budget of $50, I need Double Sided decorative pillows in size 28\" x 28\". Make them machine "
            "washable.")
    assert said_words(text, ["machine washable", "decorative pillows", "double sided", "28\" x 28\"", "absent"]) == (
        "Double Sided decorative pillows 28\" x 28\" machine washable")
    assert said_words("long lasting lipstick, long lasting", ["long lasting lipstick", "long lasting"]) == (
        "long lasting lipstick")


# ------------------------------------------------------------------------------------------------ SFT data
@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, synthetic) -> Path:
    from apo_lightning.models.tiny import train_tiny_tokenizer

    path = tmp_path_factory.mktemp("reads") / "tokenizer"
    texts = [synthetic.goals[i]["instruction_text"] for i in synthetic.split("train")[:50]] + [
        "<think></think><answer>"]
    train_tiny_tokenizer(texts, path, vocab_size=320)
    return path


def sft_module(tokenizer_dir: Path, cache: Path, **env_settings):
    from apo_lightning.lit.sft_data import DrillSettings, SFTDataModule

    module = SFTDataModule(env=EnvConfig(data_dir="synthetic", max_steps=10, **env_settings),
                           model_name_or_path=str(tokenizer_dir), num_demos=200, num_val_demos=20, demo_epochs=2,
                           val_goals=0, cache_dir=str(cache), drills=DrillSettings(steps=1, held_out_goals=10))
    module.setup("fit")
    return module


def shown(example: dict, tokenizer) -> tuple[str, list[str]]:
    """The instruction a training example shows and the actions of the replies it learns."""
    text = tokenizer.decode(example["input_ids"])
    (instruction,) = re.findall(r"\nInstruction: (.*)\n", text)
    return instruction, imitated_actions(example, tokenizer)


def pass_instructions(module, examples: list[dict]) -> dict[int, str]:
    """Goal index -> the instruction its demonstration shows (every segment of a demonstration shows the same), and
    checks that each search reply searches with the words of that instruction."""
    seen: dict[int, str] = {}
    for example in examples:
        instruction, actions = shown(example, module.tokenizer)
        assert seen.setdefault(example["goal_index"], instruction) == instruction
        for action in actions:
            if action.startswith("search["):
                assert is_subsequence(words(action[len("search["):-1]), words(instruction)), (instruction, action)
    return seen


@pytest.mark.parametrize("wording", ["original", "heldout"])
def test_an_sft_course_draws_its_instructions_afresh_each_pass_from_the_training_family(tokenizer_dir, tmp_path,
                                                                                         wording):
    """Demonstrations and drills, under the evaluation wording "original" and "heldout" alike: each pass its own
    draw, only the training family or the generator's words, the generator's at the set share, searches with the
    words shown; validation in ``wording``."""
    module = sft_module(tokenizer_dir, tmp_path / "sft", vary_wording=True, original_share=0.25, wording=wording)
    goals = module.shop.goals
    passes = [pass_instructions(module, examples) for examples in module.train_passes]
    assert len(passes) == 2 and passes[0].keys() == passes[1].keys() and len(passes[0]) >= 190
    differ = sum(passes[0][g] != passes[1][g] for g in passes[0])
    assert differ >= 0.8 * len(passes[0]), differ  # both draws of a goal are the generator's words 1/16 of the time
    families = [family_of(goals[g], text) for p in passes for g, text in p.items()]
    assert set(families) <= {"original", "train"}, set(families)
    assert within_sampling(families.count("original"), len(families), 0.25), families.count("original")
    # the training batches of pass k show pass k's draws
    for k in range(2):
        batch = module.train_batch(module.drills.steps + k * module.demo_batches_per_epoch())
        rows = [module.tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(batch["input_ids"],
                                                                                 batch["attention_mask"])]
        texts = [re.findall(r"\nInstruction: (.*)\n", row)[0] for row in rows]
        assert batch["phase"] == "demos" and set(texts) <= set(passes[k].values())
        assert not set(texts) <= set(passes[1 - k].values())
    # the drills draw too, and their search replies search with the drawn words
    originals = {g.get("original_instruction_text", g["instruction_text"]) for g in goals}
    rng = random.Random(0)
    drill_families = []
    for _ in range(300):
        instruction, (action,) = shown(module.drill_source.draw(rng, kind="index", splice=False), module.tokenizer)
        drill_families.append("original" if instruction in originals else family_of({"instruction_text": ""},
                                                                                    instruction))
        assert is_subsequence(words(action[len("search["):-1]), words(instruction)), (instruction, action)
    assert set(drill_families) == {"original", "train"}, set(drill_families)
    assert within_sampling(drill_families.count("original"), 300, 0.25), drill_families.count("original")
    # validation shows the evaluation wording: one fixed text per goal, the goal's own
    val_families = set()
    for example in module.val_examples:
        instruction, _ = shown(example, module.tokenizer)
        assert instruction == goals[example["goal_index"]]["instruction_text"]
        val_families.add(family_of({"instruction_text": ""}, instruction) if wording != "original" else "original")
    assert val_families == {wording}


# ------------------------------------------------------------------------------------------------ caches, settings
def test_every_wording_setting_is_a_part_of_the_v_star_and_demonstration_keys(tmp_path):
    plain = dict(data_dir="synthetic")
    configs = [EnvConfig(**plain), EnvConfig(**plain, vary_wording=True),
               EnvConfig(**plain, vary_wording=True, original_share=0.5),
               EnvConfig(**plain, vary_wording=True, wording="heldout"),
               EnvConfig(**plain, vary_wording=True, wording="heldout", wording_seed=1)]
    keys = {json.dumps(Stage1(VStarConfig(), env, ChatFormat(), RewardSettings(), RolloutSettings(), seed=0)
                       .key_parts("ref", [1500]), sort_keys=True) for env in configs}
    assert len(keys) == len(configs)
    assert EnvConfig(**plain).key_parts() == EnvConfig(**plain).__dict__  # every setting
    tokenizer = str(REPO / "models" / "quickstart-ref")

    def demos(env, seed=0, draw=0):
        return demonstration_cache(tmp_path, env, ChatFormat(), tokenizer, {"train": [1500]}, max_new_tokens=64,
                                   seed=seed, draw=draw)

    files = [demos(env) for env in configs] + [demos(configs[1], draw=1), demos(configs[1], seed=1)]
    assert len(set(files)) == len(files)  # each setting, each pass's draw and the run seed that seeds the draws
    assert demos(configs[0], draw=1) == demos(configs[0], seed=1) == files[0]  # without draws, neither matters


def test_a_share_out_of_range_is_one_line_naming_the_setting(capfd):
    from apo_lightning.lit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", SMOKE, "--data.env.vary_wording=true", "--data.env.original_share=1.5"])
    out, err = capfd.readouterr()
    errors = [line for line in (out + err).splitlines() if line.startswith("error:")]
    assert exit_info.value.code == 2
    assert errors == ["error: data.env.original_share must be in [0, 1] (the share of training episodes in the "
                      "generator's words), got 1.5"]


# ------------------------------------------------------------------------------------------------ end to end
class Batches(Callback):
    """The trajectories (RL) or the decoded instructions (SFT) of every training batch."""

    def __init__(self):
        self.trajectories, self.instructions = [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if "trajectories" in batch:
            self.trajectories += batch["trajectories"]
        else:
            tokenizer = trainer.datamodule.tokenizer
            rows = [tokenizer.decode(ids[mask.bool()]) for ids, mask in zip(batch["input_ids"],
                                                                             batch["attention_mask"])]
            self.instructions.append((batch["phase"], [re.findall(r"\nInstruction: (.*)\n", r)[0] for r in rows]))


def test_a_tiny_rl_fit_samples_stage_1_and_stage_2_in_the_same_drawn_words(workdir, monkeypatch):
    sampled = []

    def recording(*args, **kwargs):
        trajectories = rollout_goals(*args, **kwargs)
        sampled.extend(trajectories)
        return trajectories

    rollout_goals = stage1_module.rollout_goals
    monkeypatch.setattr(stage1_module, "rollout_goals", recording)
    batches = Batches()
    cli = fit_in_process("--config", SMOKE, *QUIET, "--run_name=reads_smoke", "--data.env.vary_wording=true",
                         "--data.env.original_share=0.5", "--data.vstar.num_samples=4", "--data.batch_size=4",
                         callbacks=[batches])
    data = cli.datamodule
    assert cli.trainer.global_step == 2 and Path("checkpoints/reads_smoke/last.ckpt").is_file()
    assert data.stage1.env is data.env and data.env.vary_wording  # one set of wording settings for both stages
    goals = data.shop.goals
    for stage, trajectories in (("stage 1", sampled), ("stage 2", batches.trajectories)):
        families = [family_of(goals[t.goal_index], t.instruction) for t in trajectories]
        assert set(families) == {"original", "train"}, (stage, families)  # 16 and 8 draws at a share of 0.5
    per_goal = {}
    for t in sampled:
        per_goal.setdefault(t.goal_index, set()).add(t.instruction)
    assert len(per_goal) == 4 and all(len(texts) >= 2 for texts in per_goal.values())  # V* over the wordings


def test_a_tiny_sft_fit_trains_each_pass_on_its_own_drawn_words(workdir):
    batches = Batches()
    cli = fit_in_process(
        "--config", SFT_CONFIG, *QUIET, *TINY, "--run_name=reads_sft", "--trainer.callbacks=[]",
        "--trainer.devices=1", "--trainer.strategy=auto", "--trainer.enable_checkpointing=false",
        "--trainer.logger=false", "--trainer.limit_val_batches=0", "--model.export_dir=null",
        "--model.model_name_or_path=data/models/reads-init", "--model.warmup_steps=1", "--data.drills.steps=2",
        "--data.drills.batch_size=4", "--data.drills.checks_per_kind=0", "--data.num_demos=8",
        "--data.num_val_demos=2", "--data.demo_epochs=2", "--data.batch_size=2", "--data.val_goals=0",
        "--data.env.max_steps=10", "--data.env.vary_wording=true", "--data.env.original_share=0.25",
        callbacks=[batches])
    data = cli.datamodule
    per_pass = data.demo_batches_per_epoch()
    assert cli.trainer.global_step == data.course_length() == 2 + 2 * per_pass and per_pass >= 3
    assert [phase for phase, _ in batches.instructions] == ["drills"] * 2 + ["demos"] * 2 * per_pass
    first, second = ({text for _, texts in batches.instructions[2 + k * per_pass:2 + (k + 1) * per_pass]
                      for text in texts} for k in range(2))
    assert first != second
    originals = {g["instruction_text"] for g in data.shop.goals}
    seen = [text for _, texts in batches.instructions for text in texts]
    assert any(text not in originals for text in seen)
    assert {"train"} == {family_of({"instruction_text": ""}, text) for text in seen if text not in originals}


# ------------------------------------------------------------------------------------------------ configs
def parse(*names: str):
    from apo_lightning.lit.cli import build_cli

    args = [a for name in names for a in ("--config", str(REPO / "configs" / name))]
    return build_cli([*args, "--trainer.logger=false", "--trainer.accelerator=cpu", "--trainer.devices=1",
                      "--trainer.strategy=auto"], run=False)


def test_the_reads_configs_are_the_real_data_recipes_with_drawn_words_into_new_folders():
    """``sft_webshop_1k_reads.yaml`` is the course that made ``models/webshop-1k-ref`` (the same untrained start,
    drills, passes and seed) with drawn words, exported to a new folder; ``webshop_1k_reads.yaml`` is the two-hour
    A*-PO recipe from that folder with drawn words in both stages."""
    base, reads = parse("sft_tiny_cpu.yaml"), parse("sft_tiny_cpu.yaml", "sft_webshop_1k_reads.yaml")
    assert (reads.datamodule.env.vary_wording, reads.datamodule.env.original_share) == (True, 0.25)
    assert reads.model.hparams.export_dir == "data/models/webshop-1k-reads" != base.model.hparams.export_dir
    assert {**dict(reads.model.hparams), "export_dir": None} == {**dict(base.model.hparams), "export_dir": None}
    for name in ("model_name_or_path", "drills", "num_demos", "demo_epochs", "batch_size", "seed"):
        assert getattr(reads.datamodule, name) == getattr(base.datamodule, name), name
    assert {**reads.datamodule.env.__dict__, "vary_wording": False} == base.datamodule.env.__dict__
    recipe = ("webshop_1k.yaml", "webshop_1k_cpu.yaml", "webshop_1k_2h.yaml")
    base, reads = parse(*recipe), parse(*recipe, "webshop_1k_reads.yaml")
    assert reads.model.hparams.model_name_or_path == "data/models/webshop-1k-reads"
    assert reads.datamodule.stage1.env is reads.datamodule.env and reads.datamodule.env.vary_wording
    assert reads.model.hparams.results_dir == "results/webshop_1k_reads"  # the run's own name
    assert {**dict(reads.model.hparams), "model_name_or_path": None, "results_dir": None} == {
        **dict(base.model.hparams), "model_name_or_path": None, "results_dir": None}
    for name in ("train_goals", "vstar", "rollout", "chat", "batch_size", "seed"):
        assert getattr(reads.datamodule, name) == getattr(base.datamodule, name), name
