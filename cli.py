"""apo_lightning command line (LightningCLI): fit | validate | test, configured by YAML files in configs/.

    python cli.py fit --config configs/sft_quickstart.yaml      # SFT warm-start of the tiny policy -> pi_ref
    python cli.py fit --config configs/quickstart.yaml          # A*-PO on the synthetic catalog
    python cli.py test --config configs/quickstart.yaml --ckpt_path last
    python cli.py fit --config configs/quickstart.yaml --help    # its settings, one line each
    python cli.py fit --config configs/quickstart.yaml --print_config=comments   # the full config, documented

The same command is installed as ``apo-lightning`` (see ``apo_lightning/lit/cli.py``).
"""

from apo_lightning.lit.cli import APOLightningCLI, main

__all__ = ["APOLightningCLI", "main"]

if __name__ == "__main__":
    main()
