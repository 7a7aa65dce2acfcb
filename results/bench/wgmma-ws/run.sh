#!/bin/bash
# One device call for the warp-specialized MoE GEMMs (HYBRID_MOE_WG_WS=rows|all, with
# HYBRID_MOE_WG_TMA=1 the row GEMMs' weights by TMA; kernels/moe/grouped_gemm_ws.cuh; issue 17),
# on main. In order of need, each step under the call's clock (what is cut still leaves the
# steps before it):
#   1. test_moe on the GPU (the WS and TMA kernels against the default bit for bit, every case);
#   2. bench_moe with HYBRID_MOE_WG_WS=0, =all, =all + TMA and =all + TMA + the GLU fused
#      (HYBRID_MOE_WG_GLU_FUSED=1), alternating, up to three rounds (each run prints every GEMM's
#      time, so `all` shows the row GEMMs and the weight gradients apart), then the per-stem
#      medians (scripts/bench_summary_moe.py paths); in round 1 also all + TMA with
#      HYBRID_MOE_GEMM=own ("ownall": the large shape's weight gradients on ours,
#      warp-specialized, against cuBLAS's in the mixed mode: is the mixed rule's threshold still
#      right?);
#   3. PyTorch's reference on the same shapes (the large layer's 1.5x in the same call) and the
#      side-by-side with each setting's first run;
#   4. Nsight Compute (SpeedOfLight, WarpStateStats) of the row GEMMs at KL-S, both kernels.
# Call: carry nothing. Outputs under $OUT.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 out/build/gpu/test_moe out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
grep -h -A3 "Compiling entry function .*_ws_kernel" out/build/cu/kernels/moe/experts_wg.o.res | grep -E "Compiling|spill|Used"  # (ptxas: registers, spills)
timeout 200 out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; rc=$?
echo "test_moe rc $rc at $SECONDS s: $(tail -1 $OUT/test_moe.log)"
# (a failing or hanging test: the warp-specialized kernels are not benchmarked, the default is)
settings="0 all tma glu ownall"; [ $rc -eq 0 ] || settings=0
grep -m 6 "FAIL\|warp-specialized all  \|+ TMA  " $OUT/test_moe.log
cols=""
for i in 1 2 3; do
    for v in $settings; do
        [ $SECONDS -lt 330 ] || break 2
        [ $v = ownall ] && [ $i -gt 1 ] && continue
        ws=$v; tma=0; glu=0; gemm=mixed
        case $v in tma) ws=all tma=1 ;; glu) ws=all tma=1 glu=1 ;; ownall) ws=all tma=1 gemm=own ;; esac
        HYBRID_MOE_GEMM=$gemm HYBRID_MOE_WG_WS=$ws HYBRID_MOE_WG_TMA=$tma HYBRID_MOE_WG_GLU_FUSED=$glu \
            timeout 150 out/build/gpu/bench_moe --json $OUT/moe_ws${v}_$i.json > $OUT/bench_ws${v}_$i.log 2>&1 ||
            echo "bench_moe WS $v round $i failed"
        cols="$cols ws${v}_$i=$OUT/moe_ws${v}_$i.json"
        echo "bench WS $v round $i at $SECONDS s"
    done
done
[ -n "$cols" ] && python3 scripts/bench_summary_moe.py paths $cols
grep -E "^gemm_|^fwdbwd|grouped GEMMs \(|launches" $OUT/bench_ws*_1.log
left=$((500 - SECONDS))
if [ $left -gt 60 ]; then
    timeout $left python3 -u scripts/bench_torch_moe.py --json $OUT/moe_torch.json > $OUT/torch.log 2>&1
    echo "torch rc $? at $SECONDS s"
    for v in 0 all tma glu; do
        [ -f $OUT/moe_ws${v}_1.json ] && [ -f $OUT/moe_torch.json ] &&
            { echo "== WS $v vs PyTorch"; python3 scripts/bench_summary_moe.py $OUT/moe_ws${v}_1.json $OUT/moe_torch.json; }
    done
fi
for v in 0 all; do
    left=$((585 - SECONDS)); [ $left -gt 20 ] || break
    HYBRID_MOE_WG_WS=$v timeout $left ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        -k regex:"rows_w|wgrad_w" -c 6 out/build/gpu/bench_moe --shape config --reps 1 --warmup 0 --profile-reps 0 > $OUT/ncu_ws$v.txt 2>&1
    echo "ncu WS $v rc $? at $SECONDS s"
    grep -E "rows_w[gs]_kernel|wgrad_w[gs]_kernel|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|Stall|Warp Cycles" $OUT/ncu_ws$v.txt | head -40
done
echo "total $SECONDS s"
# (at most 8 files come back from $OUT: everything travels as one archive)
(cd $OUT && tar czf wgmma-ws.tgz --remove-files *.log *.json *.txt 2>/dev/null; ls -la $OUT)
