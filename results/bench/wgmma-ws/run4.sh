#!/bin/bash
# Session 32's short measurement of the default by its own name (what session 31 made auto: every
# weight gradient warp-specialized with its whole k-steps by TMA, `all` + HYBRID_MOE_WG_TMA=2 +
# staged) against rows2s (session 30's auto), at KL-S's MoE shape only: two rounds alternating,
# then the whole KL-S (MoE) 3:1 model with the default (make bench-moe-model). Ran as three short
# calls on a warm H100 at the end of session 32's budget (s32-h100/: bench_*.log, moe_*.json,
# model_auto.log, kl-s-3-1.log); this script is those calls in one. No PyTorch here: run3.sh has
# it. Call: carry out/data (`make data`). Outputs: $OUT/wgmma-ws4.tgz.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
for r in 1 2; do
    for v in auto rows2s; do
        ws=$v; tma=0; store=direct
        [ $v = rows2s ] && { ws=rows; tma=2; store=staged; }
        HYBRID_MOE_WG_WS=$ws HYBRID_MOE_WG_TMA=$tma HYBRID_MOE_WG_WS_STORE=$store timeout 50 \
            out/build/gpu/bench_moe --shape config --json $OUT/moe_${v}_$r.json > $OUT/bench_${v}_$r.log 2>&1 ||
            echo "bench_moe $v round $r failed"
        grep -E "^fwdbwd |efficiency" $OUT/bench_${v}_$r.log
    done
done
timeout 150 make bench-moe-model > $OUT/model_auto.log 2>&1 || echo "bench-moe-model failed"
tail -2 $OUT/model_auto.log; cp out/bench/kl-s-3-1.log $OUT/ 2>/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
(cd $OUT && tar czf wgmma-ws4.tgz --remove-files *.log *.json gpu.txt; ls -la $OUT)
