#!/bin/bash
# Issue 18: the MoE KL-XS text sweep (`MOE=1 RUN_TASKS=lm`, the family as shipped), continued from
# this committed folder in one device call (started in session 17: 14 of at most 42 runs;
# docs/ablation.md, "What remains to be run").
# Here, before the call (the prose shards no longer fit a call next to the tree: an xz tarball):
#   make data CORPUS=prose
#   tar cf - -C out data/prose_train_000000.bin data/prose_val_000000.bin data/prose_manifest.txt \
#       data/.prose.stamp | xz -6 -T2 > out/devrun/prose.txz              # ~20 MB
# carry: out/devrun/prose.txz. usage (on the device): bash results/ablation/kl-xs-moe/run.sh SECONDS
# TASKS=mqar before it runs the MQAR half instead (generated sequences: no tarball, no carry;
# 35 runs at most, ~34 device minutes by
# `MOE=1 RUN_TASKS=mqar PLAN=1 FROM=results/ablation/kl-xs-moe OUT=/tmp/p scripts/ablate_gpu.sh`).
# The text half is done (session 19: docs/ablation.md, "The MoE sweep's text half").
# Back here: rm -rf out/ablation/kl-xs-moe && tar xzf <files_at>/kl-xs-moe.tgz -C out/ablation &&
#   rm -rf results/ablation/kl-xs-moe && cp -r out/ablation/kl-xs-moe results/ablation/ (this script
#   travels in the archive), then commit the folder.
set -u
export NCCL_NVLS_ENABLE=0
case " ${TASKS:-lm} " in
*" lm "*) mkdir -p out && tar xJf out/devrun/prose.txz -C out || { echo "run.sh: out/devrun/prose.txz missing (see the header)"; exit 2; } ;;
esac
make -j16 hybrid > /tmp/build.log 2>&1 || { tail -30 /tmp/build.log; exit 1; }
EXPORT=$OUT/kl-xs-moe.tgz MOE=1 RUN_TASKS=${TASKS:-lm} FROM=results/ablation/kl-xs-moe OUT=out/ablation/kl-xs-moe \
    BUDGET=$((${1:-560} - SECONDS - 10)) PLOT=0 scripts/ablate_gpu.sh 2>&1 | grep -v '^|' | tail -n 8
ls -l $OUT; echo "total $SECONDS s"
