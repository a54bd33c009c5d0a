#!/bin/bash
# The real-data pipeline of docs/experiments.md ("Twenty-third" to "Twenty-fifth session") at one run seed:
# stage 0 (one SFT pass from the shipped reference over the training goals' oracle demonstrations), stage 1 and
# 50 minutes of A*-PO stage 2 from its result, float32; then the greedy test of the last checkpoint and of the SFT'd
# reference, each compared, paired, with the shipped reference's test (results/webshop-1k-ref-vc, made first by
#   python cli.py test $C --model.method_name reference --run_name webshop-1k-ref-vc).
# Usage, from the repository root:  bash docs/evidence/stage0_pipeline.sh SEED    (about 1 h 40 min on 2 CPU cores)
# Run seeds 1 and 2 were run by these commands (seed 2's stage 2 and tests in a later session, on the same data/);
# run seed 0 (twenty-third session) by the same ones with the names data/models/webshop-1k-more and
# webshop_1k_stage0_fp32 (no -s0 suffix).
set -euo pipefail
S=${1:?usage: stage0_pipeline.sh SEED}
export APO_WEBSHOP_DATA=${APO_WEBSHOP_DATA:-../shared/webshop_data}
C="--config configs/webshop_1k.yaml --config configs/webshop_1k_cpu.yaml --config configs/webshop_1k_2h.yaml"
M=data/models/webshop-1k-more-s$S
R=webshop_1k_stage0_fp32_s$S
A="--model.model_name_or_path=$M --trainer.max_time=00:00:50:00"
t0=$(date +%s)
python cli.py fit --config configs/sft_tiny_cpu.yaml --config configs/sft_webshop_1k_stage0.yaml \
    --seed_everything=$S --run_name sft_1k_more_s$S --model.export_dir=$M
t1=$(date +%s); echo "stage 0: $((t1 - t0)) s"
python cli.py fit $C --seed_everything=$S --run_name $R $A
t2=$(date +%s); echo "stages 1 + 2: $((t2 - t1)) s; pipeline $((t2 - t0)) s"
python cli.py test $C --seed_everything=$S --run_name $R $A --ckpt_path last --model.results_dir results/${R}_last
python -m apo_lightning.eval evaluate --model $M --split test --limit 500 --max-steps 15 --max-new-tokens 64 \
    --valid-clicks --processes 2 --results-dir results/test_vc_webshop-1k-more-s$S
python -m apo_lightning.eval compare results/webshop-1k-ref-vc results/${R}_last                    # the pipeline
python -m apo_lightning.eval compare results/test_vc_webshop-1k-more-s$S results/${R}_last          # A*-PO's share
python -m apo_lightning.eval compare results/webshop-1k-ref-vc results/test_vc_webshop-1k-more-s$S  # stage 0's share
