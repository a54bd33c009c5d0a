"""How much of one A*-PO step's gradient is signal: gradients of disjoint trajectory batches, compared.

    python benchmarks/gradient_signal.py --model models/webshop-1k-ref
    python benchmarks/gradient_signal.py --model models/webshop-1k-ref --batches 4 --batch-size 16 --threads 1

Not a speed benchmark: a measurement that says whether a training step can move the policy in a useful direction.
The policy (taken as π_ref too, i.e. θ = π_ref, the first step of stage 2) plays ``--batches × --batch-size``
randomly drawn training goals once, sampling at temperature 1.0. V* comes from the stage-1 cache (``--vstar``, a
``data/vstar/*.json`` file made by ``cli.py fit``; default: the largest there), and so do the prompt and reward
settings (``ChatFormat``, e.g. ``reward: success``), so that r and V* are measured alike. For each batch it
computes the A*-PO loss (Brantley et al. 2025, stage 2; ``apo_lightning.apo.objectives.apo.apo_loss``) and its gradient
over all parameters. Then it prints, for every pair of batches, the cosine between their gradients and the share
of coordinates where they agree in sign (AdamW steps by sign, roughly). Cosines near 0 and sign agreement near
50 % mean one step is mostly noise. The last line is one JSON object with every number.

Raises:
    FileNotFoundError: ``--vstar`` does not exist or is not a usable V* cache file (run ``cli.py fit`` first).
    KeyError: a drawn goal has no V* in the table (the table covers fewer training goals than ``--pool``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never download

import torch

from apo_lightning.rollout.chat import ChatFormat
from apo_lightning.rollout.engine import rollout_goals
from apo_lightning.models.loading import load_policy
from apo_lightning.rollout.collate import collate_trajectories
from apo_lightning.rollout.engine import RolloutEngine
from apo_lightning.apo.objectives.apo import apo_loss
from apo_lightning.apo.vstar import VStarCache, VStarTable
from apo_lightning.apo.logprobs import generated_logprobs
from apo_lightning.apo.logprobs import pack_generated
from apo_lightning.webshop import WebShop
from apo_lightning.webshop.datadir import resolve_data_dir


def batch_gradient(model, trajectories, pad_id: int, table: VStarTable, beta2: float) -> tuple[torch.Tensor, float]:
    """The A*-PO loss gradient of one batch at θ = π_ref, flattened over all trainable parameters (float32)."""
    batch = collate_trajectories(trajectories, pad_id)
    model.zero_grad()
    logp = generated_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["gen_mask"])
    packed, mask = pack_generated(logp, batch["gen_mask"], batch["traj_index"], len(trajectories))
    v_star = table.lookup([t.goal_index for t in trajectories])
    loss, _ = apo_loss(packed, packed.detach(), mask, batch["reward"], v_star, beta2)  # log π_ref = log π here
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]), loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/webshop-1k-ref")
    parser.add_argument("--data-dir", default=None, help="WebShop data folder (default: the data rule)")
    parser.add_argument("--vstar", default=None, help="V* cache file (default: the largest under data/vstar)")
    parser.add_argument("--pool", type=int, default=512, help="draw goals from the first N training goals")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--beta2", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    args.data_dir, description = resolve_data_dir(args.data_dir)
    print(description)
    torch.set_num_threads(args.threads)

    tables = sorted(Path("data/vstar").glob("*.json"), key=os.path.getsize)
    vstar = Path(args.vstar) if args.vstar else (tables[-1] if tables else Path("data/vstar"))
    stored = VStarCache(vstar.parent).load(vstar.stem) if vstar.is_file() else None  # validated, as in training
    if stored is None:
        raise FileNotFoundError(f"no usable V* table at {vstar}: run `python cli.py fit --config "
                                "configs/webshop_1k.yaml` (stage 1 writes it under data/vstar) or pass --vstar")
    table = VStarTable.from_rewards(vstar.stem, stored["rewards"], stored["beta1"])

    shop = WebShop.load(args.data_dir, goals="synthetic")
    goals = random.Random(args.seed).sample(list(shop.split("train"))[: args.pool], args.batches * args.batch_size)
    model, tokenizer = load_policy(args.model)
    chat = ChatFormat(**stored["key_parts"]["chat"])  # the table's prompt and reward settings: r and V* agree
    engine = RolloutEngine(model, tokenizer, chat, max_new_tokens=64, temperature=1.0, greedy=False)
    start = time.perf_counter()
    trajectories = rollout_goals(engine, shop, goals, 32, args.seed)
    rollout_s = time.perf_counter() - start
    model.train()

    grads, losses = [], []
    for b in range(args.batches):
        grad, loss = batch_gradient(model, trajectories[b * args.batch_size:(b + 1) * args.batch_size],
                                    tokenizer.pad_token_id, table, args.beta2)
        grads.append(grad)
        losses.append(loss)
        print(f"batch {b}: loss {loss:.4f}, gradient norm {grad.norm():.3f}")
    pairs = list(itertools.combinations(range(args.batches), 2))
    cosines = [torch.nn.functional.cosine_similarity(grads[i], grads[j], dim=0).item() for i, j in pairs]
    nonzero = [g != 0 for g in grads]
    agreement = [((grads[i].sign() == grads[j].sign()) & nonzero[i]).sum().item() / nonzero[i].sum().item()
                 for i, j in pairs]
    print(f"{len(trajectories)} trajectories in {rollout_s:.0f} s, success rate "
          f"{sum(t.success for t in trajectories) / len(trajectories):.3f}")
    print("pairwise gradient cosines:", " ".join(f"{c:+.3f}" for c in cosines))
    print("pairwise sign agreement:  ", " ".join(f"{a:.3f}" for a in agreement), "(chance: 0.5)")
    print(json.dumps({"vstar": str(vstar), "batches": args.batches, "batch_size": args.batch_size,
                      "losses": losses, "gradient_norms": [g.norm().item() for g in grads],
                      "cosines": cosines, "sign_agreement": agreement}))


if __name__ == "__main__":
    main()
