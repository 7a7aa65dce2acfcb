#!/bin/bash
# The device call after session 30 made HYBRID_MOE_WG_WS=auto the warp-specialized kernel for every
# row GEMM with the plain store, its weights and whole tiles' rows by TMA, stored staged (the
# setting `rows` + HYBRID_MOE_WG_TMA=2 + HYBRID_MOE_WG_WS_STORE=staged that run2.sh measured
# fastest at every shape): test_moe on the GPU (auto against the default kernels, bit for bit),
# test_core and test_mla (issue 19's attention parity, cuDNN and ours),
# bench_moe with the new default against that explicit setting (the same kernels: the same times
# expected), two rounds alternating, PyTorch side by side, then the
# whole KL-S (MoE) 3:1 model's tokens per second (make bench-moe-model) with the new default and
# with HYBRID_MOE_WG_WS=0. Call: carry out/data (`make data`). Outputs: $OUT/wgmma-ws3.tgz.
export NCCL_NVLS_ENABLE=0; set -u
END=${END:-540}  # the seconds this call may take (each later step is skipped past its share)
make -j16 out/build/gpu/test_moe out/build/gpu/bench_moe out/build/gpu/test_core out/build/gpu/test_mla hybrid > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
timeout 120 out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; rc=$?
echo "test_moe rc $rc at $SECONDS s: $(tail -1 $OUT/test_moe.log)"
[ $rc -eq 0 ] || { (cd $OUT && tar czf wgmma-ws3.tgz --remove-files *.log); exit 1; }
SHAPES="--shape config --shape 2048,64,8,1024,0,16384 --shape 384,16,2,512,0,65536"
cols=""
for i in 1 2; do
    for v in auto rows2s; do
        [ $SECONDS -lt $((END * 55 / 100)) ] || break 2
        ws=$v; tma=0; store=direct
        case $v in rows2s) ws=rows tma=2 store=staged ;; esac
        HYBRID_MOE_WG_WS=$ws HYBRID_MOE_WG_TMA=$tma HYBRID_MOE_WG_WS_STORE=$store timeout 100 out/build/gpu/bench_moe $SHAPES \
            --json $OUT/moe_ws${v}_$i.json > $OUT/bench_ws${v}_$i.log 2>&1 || echo "bench_moe WS $v round $i failed"
        cols="$cols ws${v}_$i=$OUT/moe_ws${v}_$i.json"
        echo "bench WS $v round $i at $SECONDS s"
    done
done
[ -n "$cols" ] && python3 scripts/bench_summary_moe.py paths $cols | grep -E "^C |grouped GEMMs|layer fwd|^\| part"
grep -h "launches" $OUT/bench_ws*_1.log
if [ $SECONDS -lt $((END * 65 / 100)) ]; then
    timeout 120 python3 -u scripts/bench_torch_moe.py $SHAPES --json $OUT/moe_torch.json > $OUT/torch.log 2>&1
    echo "torch rc $? at $SECONDS s"
    [ -f $OUT/moe_torch.json ] && python3 scripts/bench_summary_moe.py $OUT/moe_wsauto_1.json $OUT/moe_torch.json | grep -E "fwdbwd|efficiency|^\| config|^\| large|^\| custom|targets"
fi
# (issue 19's parity on the GPU: the attention ops on cuDNN and on ours, core and MLA)
for t in test_core test_mla; do
    left=$(( END - SECONDS > 100 ? 100 : END - SECONDS )); [ $left -gt 20 ] || break
    timeout $left out/build/gpu/$t > $OUT/$t.log 2>&1; echo "$t rc $? at $SECONDS s: $(tail -1 $OUT/$t.log)"
done
for v in auto 0; do
    [ $SECONDS -lt $((END - 55)) ] || break
    HYBRID_MOE_WG_WS=$v timeout 100 make bench-moe-model > $OUT/model_ws$v.log 2>&1
    echo "KL-S model, HYBRID_MOE_WG_WS=$v: rc $? at $SECONDS s"; tail -4 $OUT/model_ws$v.log
    cp out/bench/runs/kl-s-3-1/metrics.jsonl $OUT/model_ws${v}_metrics.json 2>/dev/null
done
echo "total $SECONDS s"
(cd $OUT && tar czf wgmma-ws3.tgz --remove-files *.log *.json 2>/dev/null; ls -la $OUT)
