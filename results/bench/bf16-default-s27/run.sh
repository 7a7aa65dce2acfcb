#!/bin/bash
# Session 27 (branch dr-bf16-default): the delta rule's default arithmetic flipped to one bf16 MMA a
# product (HYBRID_DR_BF16 unset = 1; =0 the split products). One call, carry out/devrun (the Brown
# shards for the fingerprints):
#   the GPU loss fingerprints of kda-tiny and kl-xs-3-1 with HYBRID_DR_BF16 unset, =1 and =0: unset
#   must equal =1, and =0 must equal results/bench/plugin-s23/fp.txt (the split arithmetic's bits,
#   unchanged since session 23);
#   the 3:1 hybrid at B64 T1024 in the default and in the split arithmetic;
#   `make test-gpu` (every GPU test in the default arithmetic, test_delta_rule's split checks pinned
#   by the test itself), its logs copied to $OUT.
export NCCL_NVLS_ENABLE=0; set -u
. scripts/kernel_compare_lib.sh
kernel_data
make -j16 hybrid out/build/gpu/test_delta_rule out/build/gpu/test_model > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
fp() { for c in kda-tiny kl-xs-3-1; do sh scripts/loss_fingerprint.sh --device cuda "configs/$c.conf" 2>&1; done; }
(unset HYBRID_DR_BF16; fp) > $OUT/fp_default.txt
HYBRID_DR_BF16=1 fp > $OUT/fp_1.txt
HYBRID_DR_BF16=0 fp > $OUT/fp_0.txt
cmp -s $OUT/fp_default.txt $OUT/fp_1.txt && echo "default = HYBRID_DR_BF16=1: EQUAL" || { echo "default vs =1: DIFFER"; diff $OUT/fp_default.txt $OUT/fp_1.txt | head; }
cmp -s $OUT/fp_0.txt results/bench/plugin-s23/fp.txt && echo "HYBRID_DR_BF16=0 = session 23's split: EQUAL" || { echo "=0 vs session 23: DIFFER"; diff $OUT/fp_0.txt results/bench/plugin-s23/fp.txt | head; }
paste <(grep loss $OUT/fp_default.txt | head -40) <(grep loss $OUT/fp_0.txt | head -40) | awk '{d=$3-$8; if (d<0) d=-d; r=d/$8; if (r>m) m=r} END {printf "first 20 losses, one MMA vs split: max relative difference %.2e\n", m}'
echo "fingerprints at $SECONDS s"
for a in default 0; do
    if [ $a = default ]; then (unset HYBRID_DR_BF16; BENCH_CASES=3:1-T1024 OUT=/tmp/hy_$a bash scripts/bench_hybrid.sh > $OUT/hybrid_$a.log 2>&1)
    else HYBRID_DR_BF16=0 BENCH_CASES=3:1-T1024 OUT=/tmp/hy_$a bash scripts/bench_hybrid.sh > $OUT/hybrid_$a.log 2>&1; fi
    grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/hy_$a/bench/hybrid_ours.json | tr '\n' ' '; echo " ($a)"
done
echo "hybrid at $SECONDS s"
left=$((585 - SECONDS))
timeout $left make -j16 test-gpu > $OUT/test_gpu.log 2>&1; echo "make test-gpu rc $? (limit $left s)"
grep -E "checks passed|passed|FAIL|skipped" $OUT/test_gpu.log | tail -25
mkdir -p $OUT/logs && cp out/build/gpu/*.log $OUT/logs/ 2>/dev/null
echo "total $SECONDS s"
