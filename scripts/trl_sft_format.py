"""How often a policy SFT'd in TRL writes a tool call TRL can parse: the SFT of the slow test
``tests/test_trl_env.py::test_trl_sft_teaches_the_tool_call_format_and_grpo_samples_the_taught_policy`` for
``--steps`` steps, then replies sampled on goals it did not train on.

    pip install -e ".[trl]"
    python scripts/trl_sft_format.py --steps 200
    python scripts/trl_sft_format.py --steps 400

The SFT is the test's: ``models/quickstart-ref`` with TRL's Qwen2.5 tool template, 200 oracle episodes of the
synthetic catalog's train split, one per step, cut at 1,800 tokens, lr 3e-3 constant, float32, seed 0. Then, on the
train split's goals 200 to 215 (the goals the test's GRPO samples lie among), the first reply to each goal's first
page: one greedy and four sampled at each of T 0.5 and T 1 (torch seeds 0 to 3). A reply counts when the text
between ``<tool_call>`` and ``</tool_call>`` is JSON. Prints one line per setting.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)


def parses(text: str) -> bool:
    """Whether ``text`` holds a tool call whose body is JSON."""
    match = TOOL_CALL.search(text)
    if match is None:
        return False
    try:
        json.loads(match.group(1))
    except json.JSONDecodeError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="SFT steps (one episode each)")
    args = parser.parse_args()

    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    from trl.chat_template_utils import add_response_schema

    from apo_lightning.integrations.trl_env import WebShopToolEnv, goal_rows
    from apo_lightning.integrations.trl_sft import oracle_sft_rows, sft_dataset

    tokenizer = AutoTokenizer.from_pretrained(REPO / "models" / "quickstart-ref")
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    add_response_schema(tokenizer)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(REPO / "models" / "quickstart-ref", dtype=torch.float32)
    rows = oracle_sft_rows(WebShopToolEnv(split="train"), goal_rows("train", limit=200))
    with tempfile.TemporaryDirectory() as out:
        SFTTrainer(model=model, processing_class=tokenizer, train_dataset=sft_dataset(rows),
                   args=SFTConfig(output_dir=out, max_steps=args.steps, per_device_train_batch_size=1,
                                  learning_rate=3e-3, lr_scheduler_type="constant", assistant_only_loss=True,
                                  max_length=1800, gradient_checkpointing=False, report_to="none", use_cpu=True,
                                  bf16=False, save_strategy="no", seed=0, disable_tqdm=True)).train()
    model.eval()
    env = WebShopToolEnv(split="train")
    prompts = []
    for row in goal_rows("train")[200:216]:
        page = env.reset(**row)
        messages = [{"role": "user", "content": row["prompt"][0]["content"] + page}]
        prompts.append(tokenizer.apply_chat_template(messages, tools=[env.search, env.click],
                                                     add_generation_prompt=True, return_tensors="pt",
                                                     return_dict=True))
    for temperature in (None, 0.5, 1.0):
        seeds = range(4) if temperature else range(1)
        parsed = total = 0
        for inputs in prompts:
            for seed in seeds:
                torch.manual_seed(seed)
                with torch.no_grad():
                    out = model.generate(**inputs, max_new_tokens=80, do_sample=temperature is not None,
                                         temperature=temperature or 1.0)
                parsed += parses(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
                total += 1
        print(f"steps {args.steps}, {'greedy' if temperature is None else f'T {temperature}'}: "
              f"{parsed} of {total} replies parse as a tool call")


if __name__ == "__main__":
    main()
