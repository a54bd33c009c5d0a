"""The training policy's own weights out of a checkpoint written with Lightning's ``EMAWeightAveraging`` callback.

That callback saves the moving average of the policy's weights as the checkpoint's ``state_dict`` (what ``cli.py
test --ckpt_path …`` evaluates) and the weights the run was training as ``current_model_state``. This writes a copy
whose ``state_dict`` is the current weights, without the averaging state, so the same ``cli.py test`` command
evaluates the policy that sampled the run's trajectories at that step: a paired comparison of the average and the
current policy on the same goals, from one run.

    python docs/evidence/current_weights.py checkpoints/RUN/last.ckpt /tmp/RUN-last-current.ckpt
    python cli.py test $C --run_name RUN --ckpt_path /tmp/RUN-last-current.ckpt --model.results_dir results/RUN_current

Raises ``SystemExit`` when the checkpoint has no ``current_model_state`` (it was not written during a fit with a
weight-averaging callback).
"""

import argparse
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a checkpoint written during fit with EMAWeightAveraging")
    parser.add_argument("out", type=Path, help="where to write the copy with the current weights")
    args = parser.parse_args()
    checkpoint = torch.load(args.checkpoint, map_location="cpu", weights_only=False)
    if "current_model_state" not in checkpoint:
        raise SystemExit(f"{args.checkpoint} has no current_model_state: it was not saved by a fit with a "
                         "WeightAveraging callback, so its state_dict already is the policy it trained")
    average = checkpoint["state_dict"]
    checkpoint["state_dict"] = checkpoint.pop("current_model_state")
    checkpoint.pop("averaging_state", None)
    moved = sum(not torch.equal(average[name], value) for name, value in checkpoint["state_dict"].items())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, args.out)
    print(f"{args.out}: step {checkpoint['global_step']}, current weights; {moved} of "
          f"{len(checkpoint['state_dict'])} tensors differ from the average")


if __name__ == "__main__":
    main()
