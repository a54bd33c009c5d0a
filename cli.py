"""apo_lightning command line (LightningCLI): fit | validate | test, configured by YAML files in configs/.

    python cli.py fit --config configs/sft_tiny.yaml            # SFT warm-start of the tiny policy -> pi_ref
    python cli.py fit --config configs/quickstart.yaml          # A*-PO on the synthetic catalog
    python cli.py test --config configs/quickstart.yaml --ckpt_path last
    python cli.py fit --config configs/quickstart.yaml --print_config
"""

from __future__ import annotations

import os

import torch
from lightning.pytorch.cli import LightningCLI


class APOLightningCLI(LightningCLI):
    """LightningCLI with a per-process torch thread setting (default 1: on a 2-core machine, more threads make
    small matmuls far slower whenever the other core is busy)."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--num_threads", type=int, default=int(os.environ.get("APO_NUM_THREADS", "1")),
                            help="torch intra-op threads per process")
        # one policy path for both: the data module builds/tokenizes with it, the module trains it
        parser.link_arguments("model.init_args.model_name_or_path", "data.init_args.model_name_or_path")
        parser.link_arguments("model.init_args.max_new_tokens", "data.init_args.max_new_tokens")

    def _parse_ckpt_path(self) -> None:
        """Build the model from the config files and the command line, never from a checkpoint's hyperparameters.

        Lightning 2.6 overwrites the parsed model settings with those saved in a ``--ckpt_path`` *file* (not with
        ``last``/``best``), so ``cli.py test --ckpt_path run/best.ckpt --model.results_dir out`` silently wrote to
        the training run's results folder (Lightning-AI/pytorch-lightning#21455). Here, as in training, the
        configuration says what the model is; the checkpoint restores its weights (and, for ``fit``, the optimizer,
        step and goal cursor). A checkpoint of a different architecture fails to load with Lightning's
        missing/unexpected-keys error.
        """

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        torch.set_num_threads(config.num_threads)


def main(args: list[str] | None = None) -> APOLightningCLI:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return APOLightningCLI(subclass_mode_model=True, subclass_mode_data=True, args=args,
                           save_config_kwargs={"overwrite": True})


if __name__ == "__main__":
    main()
