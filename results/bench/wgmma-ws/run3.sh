#!/bin/bash
# The device call after session 30 made HYBRID_MOE_WG_WS=auto the warp-specialized kernel for every
# row GEMM with the plain store, its weights and whole tiles' rows by TMA, stored staged (the
# setting `rows` + HYBRID_MOE_WG_TMA=2 + HYBRID_MOE_WG_WS_STORE=staged that run2.sh measured
# fastest at every shape) and gave `all` with TMA 2 the weight gradients' whole k-steps by TMA.
# In order of need, each step skipped past its share of END (the seconds the call may take):
# test_moe on the GPU (every variant against the default kernels, bit for bit); bench_moe round 1:
# the new default, the same setting named (the same kernels: the same times expected), and `all`
# + TMA 2 + staged (the weight gradients by TMA as well); test_core and test_mla (issue 19's
# attention parity, cuDNN and ours); the whole KL-S (MoE) 3:1 model's tokens per second (make
# bench-moe-model) with the new default; bench_moe round 2; PyTorch side by side; the model with
# HYBRID_MOE_WG_WS=0. Call: carry out/data (`make data`). Outputs: $OUT/wgmma-ws3.tgz.
# (Ran in session 31 on an H100: call3-h100/. Since then auto is all2s's kernels, and rows2s is
# session 30's auto: the same script measures the new default by name against both.)
export NCCL_NVLS_ENABLE=0; set -u
END=${END:-540}
pack() { (cd $OUT && tar czf wgmma-ws3.tgz --remove-files *.log *.json 2>/dev/null; ls -la $OUT); }
make -j16 out/build/gpu/test_moe out/build/gpu/bench_moe out/build/gpu/test_core out/build/gpu/test_mla hybrid > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
timeout 120 out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; rc=$?
echo "test_moe rc $rc at $SECONDS s: $(tail -1 $OUT/test_moe.log)"
[ $rc -eq 0 ] || { grep -m5 FAIL $OUT/test_moe.log; pack; exit 1; }
SHAPES="--shape config --shape 2048,64,8,1024,0,16384 --shape 384,16,2,512,0,65536"
cols=""
bench_round() {
    for v in auto all2s rows2s; do
        [ $SECONDS -lt $2 ] || return
        ws=$v; tma=0; store=direct
        case $v in rows2s) ws=rows tma=2 store=staged ;; all2s) ws=all tma=2 store=staged ;; esac
        HYBRID_MOE_WG_WS=$ws HYBRID_MOE_WG_TMA=$tma HYBRID_MOE_WG_WS_STORE=$store timeout 100 out/build/gpu/bench_moe $SHAPES \
            --json $OUT/moe_ws${v}_$1.json > $OUT/bench_ws${v}_$1.log 2>&1 || echo "bench_moe WS $v round $1 failed"
        cols="$cols ws${v}_$1=$OUT/moe_ws${v}_$1.json"
        echo "bench WS $v round $1 at $SECONDS s"
    done
}
model() {
    [ $SECONDS -lt $((END - 55)) ] || return
    HYBRID_MOE_WG_WS=$1 timeout 100 make bench-moe-model > $OUT/model_ws$1.log 2>&1
    echo "KL-S model, HYBRID_MOE_WG_WS=$1: rc $? at $SECONDS s"; tail -3 $OUT/model_ws$1.log
    cp out/bench/runs/kl-s-3-1/metrics.jsonl $OUT/model_ws${1}_metrics.json 2>/dev/null
}
bench_round 1 $((END - 110))
grep -h "launches" $OUT/bench_ws*_1.log
# (issue 19's parity on the GPU: the attention ops on cuDNN and on ours, core and MLA)
for t in test_core test_mla; do
    left=$(( END - SECONDS > 100 ? 100 : END - SECONDS )); [ $left -gt 20 ] || break
    timeout $left out/build/gpu/$t > $OUT/$t.log 2>&1; echo "$t rc $? at $SECONDS s: $(tail -1 $OUT/$t.log)"
done
model auto
bench_round 2 $((END - 60))
[ -n "$cols" ] && python3 scripts/bench_summary_moe.py paths $cols | grep -E "^C |gemm_|grouped GEMMs|layer fwd|^\| part"
if [ $SECONDS -lt $((END - 100)) ]; then
    timeout $((END - SECONDS - 20)) python3 -u scripts/bench_torch_moe.py $SHAPES --json $OUT/moe_torch.json > $OUT/torch.log 2>&1
    echo "torch rc $? at $SECONDS s"
    [ -f $OUT/moe_torch.json ] && python3 scripts/bench_summary_moe.py $OUT/moe_wsauto_1.json $OUT/moe_torch.json | grep -E "fwdbwd|targets"
fi
model 0
echo "total $SECONDS s"
pack
