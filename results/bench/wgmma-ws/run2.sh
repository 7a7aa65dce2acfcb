#!/bin/bash
# The next device call for the warp-specialized MoE GEMMs, after session 29 made
# HYBRID_MOE_WG_WS=auto the default (kernels/moe/experts_wg.cu, ws_auto_pick: the data gradients
# with reductions of 1024 or more warp-specialized with TMA weights; BENCHMARKS.md, "H200: the MoE
# layer against PyTorch"): the setting itself, measured against HYBRID_MOE_WG_WS=0 (session 26's
# kernels everywhere), and the warp-specialized row GEMMs (`rows`) with the weights by TMA (=1,
# measured in session 29) and with whole tiles' rows by TMA too (=2, not yet run on a GPU), and
# that with the staged store (HYBRID_MOE_WG_WS_STORE=staged: 16-byte row segments through shared
# memory instead of 4-byte pairs from registers, which Nsight Compute blamed for KL-S's fwd2), on
# KL-S, the large shape, and a third shape whose reductions are 1024 exactly (C 384 as KL-S's
# variant B's latent width, expert hidden 512: dgrad13's reduction 1024, dgrad2's 384),
# alternating, up to three rounds; then PyTorch's reference on the same three shapes and the
# side-by-side per setting. test_moe first (its =2 variant against the default bit for bit: if
# it fails, only auto and 0 are measured). Call: carry nothing. Outputs: $OUT/wgmma-ws2.tgz.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 out/build/gpu/test_moe out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
timeout 200 out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; rc=$?
echo "test_moe rc $rc at $SECONDS s: $(tail -1 $OUT/test_moe.log)"
settings="auto 0 rows1 rows2 rows2s"; [ $rc -eq 0 ] || settings="auto 0"
SHAPES="--shape config --shape 2048,64,8,1024,0,16384 --shape 384,16,2,512,0,65536"
cols=""
for i in 1 2 3; do
    for v in $settings; do
        [ $SECONDS -lt 330 ] || break 2
        ws=$v; tma=0; store=direct
        case $v in rows1) ws=rows tma=1 ;; rows2) ws=rows tma=2 ;; rows2s) ws=rows tma=2 store=staged ;; esac
        HYBRID_MOE_WG_WS=$ws HYBRID_MOE_WG_TMA=$tma HYBRID_MOE_WG_WS_STORE=$store timeout 150 out/build/gpu/bench_moe $SHAPES --json $OUT/moe_ws${v}_$i.json \
            > $OUT/bench_ws${v}_$i.log 2>&1 || echo "bench_moe WS $v round $i failed"
        cols="$cols ws${v}_$i=$OUT/moe_ws${v}_$i.json"
        echo "bench WS $v round $i at $SECONDS s"
    done
done
[ -n "$cols" ] && python3 scripts/bench_summary_moe.py paths $cols
grep -h "launches" $OUT/bench_ws*_1.log
left=$((560 - SECONDS))
if [ $left -gt 60 ]; then
    timeout $left python3 -u scripts/bench_torch_moe.py $SHAPES --json $OUT/moe_torch.json > $OUT/torch.log 2>&1
    echo "torch rc $? at $SECONDS s"
    for v in $settings; do
        [ -f $OUT/moe_ws${v}_1.json ] && [ -f $OUT/moe_torch.json ] &&
            { echo "== WS $v vs PyTorch"; python3 scripts/bench_summary_moe.py $OUT/moe_ws${v}_1.json $OUT/moe_torch.json; }
    done
fi
echo "total $SECONDS s"
# (at most 8 files come back from $OUT: everything travels as one archive)
(cd $OUT && tar czf wgmma-ws2.tgz --remove-files *.log *.json 2>/dev/null; ls -la $OUT)
