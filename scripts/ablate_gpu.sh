#!/bin/sh
# The KDA:MLA ratio ablation on one GPU (docs/ablation.md): scripts/ablate_ratio.sh with
# PRESET=gpu, i.e. the KL-XS family (FAMILY=kl-s for KL-S) at 0:1 1:1 3:1 7:1 1:0, dense
# (MOE=1 keeps the MoE), the 0:1 model with RoPE on its MLA (0-1-rope; ROPE_ARM=0 leaves it
# out) and a GPT-2 of matched active parameters; seeds 0 and 1; 250 steps x 65,536 tokens of
# the prose corpus (make data CORPUS=prose) at lrs 2.5e-4 5e-4 1e-3 2e-3 4e-3, and 1000 steps x 16,384
# tokens of MQAR (256-token vocabulary, 64-token sequences, 8 pairs) at lrs 3e-5 1e-4 3e-4 1e-3
# (each model's sweep grown from the middle lr until its best has a run on each side), evaluated
# at 4, 8 and 16 pairs. Every variable of
# scripts/ablate_ratio.sh still applies (BUDGET, PLAN, GPUS, OUT, ...).
#
# usage: [PLAN=1] [BUDGET=seconds] scripts/ablate_gpu.sh [BASE.conf] [--key value ...]
# On the device machine, which sets its own $OUT, name OUT (and EXPORT=$OUT/<name>.tgz first); the
# commands and the budget: docs/ablation.md, "Commands".
PRESET=gpu exec sh "$(dirname "$0")/ablate_ratio.sh" "$@"
