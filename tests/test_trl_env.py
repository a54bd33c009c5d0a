"""The TRL adapter (``integrations/trl_env.py``): its tools play the same episodes as ``WebShopEnv``, refusals reach
the model as errors, the tool schemas TRL builds from it, the oracle's SFT rows (``integrations/trl_sft.py``), and
(slow, with trl installed) ``GRPOTrainer`` driving it: with scripted generation, and with a policy that TRL's
``SFTTrainer`` taught the tool-call format."""

import importlib.util
import itertools
import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, skip_unless_required

from apo_lightning.baselines.scripted import OraclePolicy, RulePolicy, scripted_steps
from apo_lightning.integrations.trl_env import TASK_PROMPT, WebShopToolEnv, goal_rows
from apo_lightning.integrations.trl_sft import FINAL_MESSAGE, oracle_sft_rows
from apo_lightning.webshop import WebShopEnv, parse_action


def test_scripted_policies_through_the_tools_play_the_engine_episodes_and_get_their_scores():
    tools = WebShopToolEnv(split="test")
    engine = WebShopEnv(tools.env.shop, "text", max_steps=15)
    scores = []
    for row, policy in itertools.product(goal_rows("test", limit=8), (OraclePolicy, RulePolicy)):
        steps = list(scripted_steps(engine, policy(), row["goal_index"]))
        page = tools.reset(**row)
        assert page == steps[0].observation
        for step in steps:
            name, argument = parse_action(step.action)
            assert page == step.observation
            page = getattr(tools, name)(argument)  # search(query) or click(element)
        assert page == engine.observation and tools.actions == [s.action for s in steps]
        assert tools.get_reward() == engine.reward and tools.ended
        scores.append(tools.get_reward())
    assert max(scores) == 1.0 and min(scores) < 1.0  # a win and a partial score were compared


def test_a_refused_action_raises_naming_what_the_page_offers_and_the_step_counts():
    tools = WebShopToolEnv(split="test", max_steps=3)
    tools.reset(**goal_rows("test", limit=1)[0])
    with pytest.raises(ValueError, match=r"click\[buy now\] is not possible on this page; it offers: search\."):
        tools.click("buy now")
    results = tools.search("shoes")
    assert "Next >" in results and tools.info["num_steps"] == 2
    with pytest.raises(ValueError, match=r"it offers: click 'back to search', click 'next >', click '.+'.*"
                                         r"The step limit has ended the episode without a purchase\."):
        tools.click("no such product")
    assert tools.ended and tools.get_reward() == 0.0 and tools.actions == ["click[buy now]", "search[shoes]",
                                                                           "click[no such product]"]
    with pytest.raises(ValueError, match="the episode has ended"):
        tools.search("again")


def test_reset_needs_the_goal_of_the_row_and_goal_rows_write_it():
    rows = goal_rows("val", limit=3)
    assert rows == [{"prompt": [{"role": "user", "content": TASK_PROMPT}], "goal_index": i} for i in (500, 501, 502)]
    assert len(goal_rows("test")) == 500
    tools = WebShopToolEnv(split="val")
    assert "Instruction:" in tools.reset(**rows[1]) and tools.info["goal_index"] == 501 and tools.actions == []
    with pytest.raises(ValueError, match=r"must hold a 'goal_index' \(see goal_rows\(\)\); got fields \['prompt'\]"):
        tools.reset(prompt=rows[0]["prompt"])
    with pytest.raises(ValueError, match=r"must be in split 'val' \[500, 1500\), got 3"):
        tools.reset(goal_index=3)
    with pytest.raises(ValueError, match="limit must be >= 1"):
        goal_rows("val", limit=0)


def test_trl_sees_two_tools_search_and_click_with_their_arguments_described():
    """TRL describes a tool to the model with transformers' ``get_json_schema`` of the bound method."""
    from transformers.utils import get_json_schema

    tools = WebShopToolEnv()
    schemas = {f.__name__: get_json_schema(f)["function"] for f in (tools.search, tools.click)}
    assert schemas["search"]["parameters"]["required"] == ["query"]
    assert schemas["click"]["parameters"]["required"] == ["element"]
    for schema in schemas.values():
        (argument,) = schema["parameters"]["properties"].values()
        assert argument["type"] == "string" and argument["description"] and schema["description"]
    public = {name for name in dir(WebShopToolEnv) if not name.startswith("_") and callable(getattr(tools, name))}
    assert public - {"reset", "get_reward"} == {"search", "click"}  # what TRL exposes as tools


def test_oracle_sft_rows_alternate_as_trl_expects_and_replay_to_the_oracles_pages_and_score():
    from transformers.utils import get_json_schema

    rows = goal_rows("test", limit=8)
    env = WebShopToolEnv(split="test")
    engine = WebShopEnv(env.env.shop, "text", max_steps=15)
    scores = []
    for row, sft_row in zip(rows, oracle_sft_rows(env, rows), strict=True):
        messages = sft_row["messages"]
        roles = [m["role"] for m in messages]
        assert roles == ["user"] + ["assistant", "tool"] * ((len(roles) - 2) // 2) + ["assistant"] and len(roles) >= 6
        assert sft_row["tools"] == [get_json_schema(env.click), get_json_schema(env.search)]  # TRL's order: by name
        replay = WebShopToolEnv(split="test")
        assert messages[0]["content"] == TASK_PROMPT + replay.reset(**row)  # GRPOTrainer appends reset's page
        page = messages[0]["content"]
        for call, result in zip(messages[1:-1:2], messages[2:-1:2], strict=True):
            (tool_call,) = call["tool_calls"]
            function = tool_call["function"]
            assert tool_call["type"] == "function" and call["content"] == "" and result["name"] == function["name"]
            if function["name"] == "click":  # written as the page shows it ("Buy Now", "B07..."), not lower-cased
                assert f"[SEP] {function['arguments']['element']} [SEP]" in page + " [SEP]"
            page = result["content"]
            assert getattr(replay, function["name"])(**function["arguments"]) == result["content"]
        assert replay.ended and messages[-1] == {"role": "assistant", "content": FINAL_MESSAGE}
        oracle = list(scripted_steps(engine, OraclePolicy(), row["goal_index"]))
        assert [a.lower() for a in replay.actions] == [s.action.lower() for s in oracle]  # the oracle's episode
        assert replay.get_reward() == engine.reward
        scores.append(replay.get_reward())
    assert max(scores) == 1.0  # the oracle won at least once, so the replay reached a purchase


def tool_call_format(completions, **kwargs) -> list[float]:
    """A format reward for ``GRPOTrainer``: the fraction of a rollout's assistant turns TRL parsed into a tool call
    (the last turn of a finished episode has none)."""
    return [sum(bool(m.get("tool_calls")) for m in c if m["role"] == "assistant")
            / max(1, sum(m["role"] == "assistant" for m in c)) for c in completions]


def scripted_tool_caller(tokenizer, model_class):
    """A causal LM whose ``generate`` writes, in the chat template's tool-call format, the WebShop rule baseline
    (search the instruction, open a listed product, buy; then a last message): the ``i``-th row of a batch opens the
    ``i``-th listed product, so the two rollouts of a group differ. Its parameters train as any model's."""
    import torch

    def call(name: str, **arguments) -> str:
        return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call><|im_end|>'

    class ToolCaller(model_class):
        def generate(self, input_ids, attention_mask, **kwargs):
            rows = []
            for row, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
                text = tokenizer.decode(ids[mask.bool()])
                pages = text.split("<tool_response>")
                if len(pages) == 1:
                    instruction = re.search(r"Instruction: \[SEP\] (.*?) \[SEP\] Search", text).group(1)
                    reply = call("search", query=instruction)
                elif len(pages) == 2:
                    reply = call("click", element=re.findall(r"\[SEP\] ([A-Z0-9]{10}) \[SEP\]", pages[-1])[row])
                elif len(pages) == 3:
                    reply = call("click", element="Buy Now")
                else:
                    reply = "Bought.<|im_end|>"
                rows.append(ids.tolist() + tokenizer(reply, add_special_tokens=False)["input_ids"])
            width = max(map(len, rows))
            return torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])

    return ToolCaller


@pytest.fixture
def trl_tokenizer(monkeypatch):
    """The quick start's tokenizer with TRL's Qwen2.5 chat template and its response schema (TRL parses the tool calls
    of the templates it knows). Skips, saying why, when trl is not installed."""
    if importlib.util.find_spec("trl") is None:
        skip_unless_required('trl is not installed (pip install -e ".[trl]")')
    import trl
    from transformers import AutoTokenizer
    from trl.chat_template_utils import add_response_schema

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = AutoTokenizer.from_pretrained(REPO_ROOT / "models" / "quickstart-ref")
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    add_response_schema(tokenizer)
    return tokenizer


def recording_factory(made: list):
    """An ``environment_factory`` for TRL that appends each ``WebShopToolEnv`` it makes (train goals) to ``made``."""
    def factory() -> WebShopToolEnv:
        made.append(WebShopToolEnv(split="train"))
        return made[-1]
    return factory


@pytest.mark.slow
def test_trl_grpo_trainer_runs_two_optimizer_steps_on_episodes_played_through_the_tools(tmp_path, trl_tokenizer):
    """TRL's ``GRPOTrainer`` with ``environment_factory``: it finds the two tools and the env's reward, its parsed
    tool calls step the env, the rewards it trains on are the env's scores of those episodes, and two optimizer steps
    change the policy. The policy is a tiny random Qwen2 on the quick start's tokenizer with TRL's Qwen2.5 chat template;
    its generation is scripted (:func:`scripted_tool_caller`), because a policy that writes the tool-call format by
    itself is not trained yet."""
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = trl_tokenizer
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = scripted_tool_caller(tokenizer, Qwen2ForCausalLM)(config)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    made: list[WebShopToolEnv] = []
    factory = recording_factory(made)

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=2,
                      max_completion_length=3072, max_tool_calling_iterations=4, learning_rate=1e-2,
                      logging_steps=1, report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0)
    rows = goal_rows("train", limit=4)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=Dataset.from_list(rows),
                          environment_factory=factory)
    assert sorted(tool.__name__ for tool in trainer.tools) == ["click", "search"]
    assert trainer.reward_func_names == ["WebShopToolEnv"]  # the env owns the reward (get_reward)
    trainer.train()

    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and all(h["tools/call_frequency"] == 3 and h["tools/failure_frequency"] == 0 for h in logged)
    # the last generation batch: one env per rollout, in the batch's order; TRL's rewards are their scores
    episodes, rewards = made[:4], list(trainer._logs["rewards"]["WebShopToolEnv"])
    assert rewards == pytest.approx([env.get_reward() for env in episodes]) and len(set(rewards)) > 1  # float32
    assert logged[-1]["rewards/WebShopToolEnv/mean"] == pytest.approx(sum(rewards) / 4)
    for env, completion in zip(episodes, trainer._logs["completion"]):
        assert env.ended and [a.split("[")[0] for a in env.actions] == ["search", "click", "click"]
        assert env.actions[-1] == "click[Buy Now]"
        pages = [m["content"] for m in completion if m["role"] == "tool"]
        assert len(pages) == 3 and "Your score (min 0.0, max 1.0)" in pages[-1]  # the env's own done page
    goals = [env.info["goal_index"] for env in episodes]
    assert goals[0] == goals[1] and goals[2] == goals[3] and set(goals) <= {r["goal_index"] for r in rows}
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert any("layers.0.self_attn" in name for name in changed) and any("layers.1.mlp" in name for name in changed)


@pytest.mark.slow
def test_trl_sft_teaches_the_tool_call_format_and_grpo_samples_the_taught_policy(tmp_path, trl_tokenizer):
    """TRL's ``SFTTrainer`` teaches the quick start's reference policy TRL's Qwen2.5 tool-call format on oracle
    episodes (:func:`oracle_sft_rows`); TRL's ``GRPOTrainer`` with ``environment_factory`` then samples that policy:
    its parsed tool calls step the env, the rewards it trains on are the env's scores of those episodes, and two
    optimizer steps change the policy. The env's score is often 0 for so briefly taught a policy (it seldom buys), so
    a format reward (:func:`tool_call_format`) gives the groups the spread GRPO needs to move the parameters."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from apo_lightning.integrations.trl_sft import sft_dataset

    tokenizer = trl_tokenizer
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(REPO_ROOT / "models" / "quickstart-ref", dtype=torch.float32)

    # float32 throughout (bf16=False): TRL's default bfloat16 is emulated, and far slower, on a CPU without
    # AVX512-BF16 or AMX. SFT: 200 oracle episodes, two passes of one per step, cut at 1,800 tokens (the search call
    # and the product click after the ~1,000-token prompt, whose tool schemas alone take ~800): the format is the
    # same at every turn, and the cut keeps it within a few CPU minutes. Loss on the assistant turns only (TRL's
    # training template marks them). Two passes, because after one a GRPO batch of 8 often holds no tool call TRL can
    # parse (docs/experiments.md, "The environment in TRL and verifiers": scripts/trl_sft_format.py).
    sft_rows = oracle_sft_rows(WebShopToolEnv(split="train"), goal_rows("train", limit=200))
    sft = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=sft_dataset(sft_rows),
                     args=SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=400, per_device_train_batch_size=1,
                                    learning_rate=3e-3, lr_scheduler_type="constant", assistant_only_loss=True,
                                    max_length=1800, gradient_checkpointing=False, logging_steps=10,
                                    report_to="none", use_cpu=True, bf16=False, save_strategy="no", seed=0))
    sft.train()
    losses = [h["loss"] for h in sft.state.log_history if "loss" in h]
    assert losses[-1] < losses[0] / 5

    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    made: list[WebShopToolEnv] = []
    factory = recording_factory(made)

    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=2,
                      max_steps=2, max_completion_length=3200, max_tool_calling_iterations=8, temperature=0.5,
                      learning_rate=1e-3, gradient_checkpointing=False, logging_steps=1, report_to="none",
                      use_cpu=True, bf16=False, save_strategy="no", seed=0)
    rows = goal_rows("train")[200:204]  # goals the SFT did not show
    trainer = GRPOTrainer(model=model, reward_funcs=tool_call_format, processing_class=tokenizer, args=args,
                          train_dataset=Dataset.from_list(rows), environment_factory=factory)
    assert sorted(tool.__name__ for tool in trainer.tools) == ["click", "search"]
    assert trainer.reward_func_names == ["tool_call_format", "WebShopToolEnv"]  # the env owns its reward
    batches = []  # per optimizer step: its generation batch's envs' (actions, score) and what TRL scored and logged

    class Snapshot(TrainerCallback):
        def on_step_end(self, *args, **kwargs):
            batches.append(([(list(env.actions), env.get_reward(), env.info["goal_index"]) for env in made[:4]],
                            {name: list(r) for name, r in trainer._logs["rewards"].items()},
                            list(trainer._logs["completion"])))

    trainer.add_callback(Snapshot())
    trainer.train()

    assert trainer.state.global_step == 2 and len(batches) == 2 and len(made) == 4  # one env per rollout, reused
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2 and sum(h["tools/call_frequency"] for h in logged) > 0
    for (episodes, rewards, completions), log in zip(batches, logged, strict=True):
        # TRL's env rewards are the scores of the episodes its parsed calls played, in the batch's order
        assert rewards["WebShopToolEnv"] == pytest.approx([score for _, score, _ in episodes])  # float32
        assert log["rewards/WebShopToolEnv/mean"] == pytest.approx(sum(rewards["WebShopToolEnv"]) / 4)
        assert rewards["tool_call_format"] == pytest.approx(tool_call_format(completions))
        for (actions, _, _), completion in zip(episodes, completions, strict=True):
            calls = [f'{c["function"]["name"]}[{v}]' for m in completion for c in m.get("tool_calls") or ()
                     for v in c["function"]["arguments"].values()]
            assert set(actions) <= set(calls)  # every action the env took is a call the policy wrote
        goals = [goal for _, _, goal in episodes]
        assert goals[0] == goals[1] and goals[2] == goals[3] and set(goals) <= {r["goal_index"] for r in rows}
    assert any(actions for episodes, _, _ in batches for actions, _, _ in episodes)  # calls reached the env
    changed = [name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])]
    assert any("layers.0.self_attn" in name for name in changed) and any("layers.3.mlp" in name for name in changed)
