"""The TRL adapter (``integrations/trl_env.py``): its tools play the same episodes as ``WebShopEnv``, refusals reach
the model as errors, the tool schemas TRL builds from it, and (slow, with trl installed) ``GRPOTrainer`` driving it."""

import importlib.util
import itertools
import json
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT, skip_unless_required

from apo_lightning.baselines.scripted import OraclePolicy, RulePolicy, scripted_steps
from apo_lightning.integrations.trl_env import TASK_PROMPT, WebShopToolEnv, goal_rows
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


@pytest.mark.slow
def test_trl_grpo_trainer_runs_two_optimizer_steps_on_episodes_played_through_the_tools(tmp_path, monkeypatch):
    """TRL's ``GRPOTrainer`` with ``environment_factory``: it finds the two tools and the env's reward, its parsed
    tool calls step the env, the rewards it trains on are the env's scores of those episodes, and two optimizer steps
    change the policy. The policy is a tiny random Qwen2 on the quick start's tokenizer with TRL's Qwen2.5 chat template;
    its generation is scripted (:func:`scripted_tool_caller`), because a policy that writes the tool-call format by
    itself is not trained yet."""
    if importlib.util.find_spec("trl") is None:
        skip_unless_required('trl is not installed (pip install -e ".[trl]")')
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import add_response_schema

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = AutoTokenizer.from_pretrained(REPO_ROOT / "models" / "quickstart-ref")
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    add_response_schema(tokenizer)  # TRL parses tool calls of the templates it knows
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = scripted_tool_caller(tokenizer, Qwen2ForCausalLM)(config)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    made: list[WebShopToolEnv] = []

    def factory() -> WebShopToolEnv:
        made.append(WebShopToolEnv(split="train"))
        return made[-1]

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=2,
                      max_completion_length=3072, max_tool_calling_iterations=4, learning_rate=1e-2,
                      logging_steps=1, report_to="none", use_cpu=True, save_strategy="no", seed=0)
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
