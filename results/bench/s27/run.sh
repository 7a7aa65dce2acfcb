#!/bin/bash
# Session 27's one call for two branches merged (device machines were scarce: one start for both):
# dr-bf16-default (the delta rule's default arithmetic flipped to one bf16 MMA a product) and
# moe-wg-bm192 (the MoE row GEMMs on 192 x 256 tiles behind HYBRID_MOE_WG_BM=192). In order of
# need, each step under the call's clock (what is cut still leaves the steps before it):
#   1. the GPU loss fingerprints of kda-tiny and kl-xs-3-1 with HYBRID_DR_BF16 unset, =1, =0: unset
#      must equal =1, =0 must equal results/bench/plugin-s23/fp.txt (the split arithmetic's bits);
#   2. test_delta_rule and test_model on the GPU (the flip's checks), test_moe (the 192 path);
#   3. bench_moe with BM 128 and 192, alternating, two rounds, and the medians;
#   4. the 3:1 hybrid at B64 T1024 in the default and in the split arithmetic;
#   5. Nsight Compute's throughput sections of the row GEMMs at KL-S, BM 128 and 192.
# Call: carry out/devrun (the Brown shards).
export NCCL_NVLS_ENABLE=0; set -u
. scripts/kernel_compare_lib.sh
kernel_data
make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/test_model out/build/gpu/test_moe out/build/gpu/bench_moe \
    > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
fp() { for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda "configs/$c.conf" 2>&1; done; }
(unset HYBRID_DR_BF16; fp) > $OUT/fp_default.txt
HYBRID_DR_BF16=1 fp > $OUT/fp_1.txt
HYBRID_DR_BF16=0 fp > $OUT/fp_0.txt
cmp -s $OUT/fp_default.txt $OUT/fp_1.txt && echo "default = HYBRID_DR_BF16=1: EQUAL" || { echo "default vs =1: DIFFER"; diff $OUT/fp_default.txt $OUT/fp_1.txt | head; }
cmp -s $OUT/fp_0.txt results/bench/plugin-s23/fp.txt && echo "HYBRID_DR_BF16=0 = session 23's split: EQUAL" || { echo "=0 vs session 23: DIFFER"; diff $OUT/fp_0.txt results/bench/plugin-s23/fp.txt | head; }
paste <(grep loss $OUT/fp_default.txt) <(grep loss $OUT/fp_0.txt) | awk '{d=$3-$8; if (d<0) d=-d; r=d/$8; if (r>m) m=r} END {printf "first 20 losses, one MMA vs split: max relative difference %.2e\n", m}'
echo "fingerprints at $SECONDS s"
for t in test_delta_rule test_moe test_model; do
    timeout 200 out/build/gpu/$t > $OUT/$t.log 2>&1; echo "$t rc $? at $SECONDS s: $(tail -1 $OUT/$t.log)"
    grep -m 4 "FAIL" $OUT/$t.log
done
cols=""
for i in 1 2; do
    for v in 128 192; do
        [ $SECONDS -lt 470 ] || break 2
        HYBRID_MOE_WG_BM=$v out/build/gpu/bench_moe --json $OUT/moe_bm${v}_$i.json > $OUT/bench_bm${v}_$i.log 2>&1 ||
            echo "bench_moe BM $v round $i failed"
        cols="$cols bm${v}_$i=$OUT/moe_bm${v}_$i.json"
    done
done
[ -n "$cols" ] && python3 scripts/bench_summary_moe.py paths $cols
grep -E "^gemm_|^fwdbwd|grouped GEMMs \(" $OUT/bench_bm*_1.log
echo "benches at $SECONDS s"
for a in default 0; do
    [ $SECONDS -lt 520 ] || break
    if [ $a = default ]; then (unset HYBRID_DR_BF16; BENCH_CASES=3:1-T1024 OUT=/tmp/hy_$a timeout 60 bash scripts/bench_hybrid.sh > $OUT/hybrid_$a.log 2>&1)
    else HYBRID_DR_BF16=0 BENCH_CASES=3:1-T1024 OUT=/tmp/hy_$a timeout 60 bash scripts/bench_hybrid.sh > $OUT/hybrid_$a.log 2>&1; fi
    grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/hy_$a/bench/hybrid_ours.json | tr '\n' ' '; echo " ($a)"
done
echo "hybrid at $SECONDS s"
for v in 128 192; do
    left=$((585 - SECONDS)); [ $left -gt 20 ] || break
    HYBRID_MOE_WG_BM=$v timeout $left ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        -k regex:rows_wg -c 4 out/build/gpu/bench_moe --shape config --reps 1 --warmup 0 --profile-reps 0 > $OUT/ncu_bm$v.txt 2>&1
    echo "ncu BM $v rc $? at $SECONDS s"
    grep -E "rows_wg_kernel|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|L1/TEX Hit|L2 Hit" $OUT/ncu_bm$v.txt | head -40
done
echo "total $SECONDS s"
