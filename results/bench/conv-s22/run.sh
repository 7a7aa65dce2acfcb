#!/bin/bash
# Session 22, call 2 (device; ran at 3c2667e, whose short_conv.cu had the tile macros this sets: they were removed again in a15357d): the short convolution's staged passes double-buffered (the next
# pass's cp.async copies in flight while a pass is walked), against main's single buffer, at the
# 3:1 hybrid's shape (B64 T1024 D768 W4, SiLU; medians of 50 after 5, three rounds); four builds
# of short_conv.cu that set its tile macros (A: main's geometry in the new code); Nsight Compute
# of A's two kernels; the GPU test of the tree's default; the 3:1 hybrid with e11a7bc's
# short_conv.cu (the step time the A/B of call 1 lost to its output's tail).
# Here first: mkdir -p out/devrun/old_s22 && git show e11a7bc:kernels/delta_rule/short_conv.cu > out/devrun/old_s22/short_conv.cu
export NCCL_NVLS_ENABLE=0; set -u
B=out/build/gpu/bench_delta_rule; F=kernels/delta_rule/short_conv.cu; A="--conv 64,1024,768,4 --reps 50 --warmup 5"
make -j16 $B hybrid out/build/gpu/test_delta_rule_layer > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; out/build/gpu/test_delta_rule_layer 2>&1 | grep -E "FAIL|checks passed" | tail -5
cp $F /tmp/tree.cu
variant() {  # name, then "bwd stages, bwd tile, fwd rows, fwd pass, fwd stages"
    cp /tmp/tree.cu $F
    sed -i "s/^#define CONV_BWD_STAGES [0-9]*/#define CONV_BWD_STAGES $2/; s/^#define CONV_BWD_TILE [0-9]*/#define CONV_BWD_TILE $3/;
            s/^#define CONV_FWD_ROWS [0-9]*/#define CONV_FWD_ROWS $4/; s/^#define CONV_FWD_PASS [0-9]*/#define CONV_FWD_PASS $5/;
            s/^#define CONV_FWD_STAGES [0-9]*/#define CONV_FWD_STAGES $6/" $F
    grep -c "^#define CONV_\(BWD_STAGES $2\|BWD_TILE $3\|FWD_ROWS $4\|FWD_PASS $5\|FWD_STAGES $6\) " $F | grep -q 5 || { echo "variant $1: sed failed"; exit 1; }
    make -j16 $B > /tmp/b_$1.log 2>&1 || { tail -20 /tmp/b_$1.log; exit 1; }; cp $B /tmp/b_$1
}
variant A 1 34 64 64 1
variant B 2 34 256 64 2
variant C 2 26 128 32 2
variant D 2 18 32 32 1
cp /tmp/tree.cu $F
echo "built all $SECONDS s"
for i in 1 2 3; do for v in A B C D; do echo -n "$v "; /tmp/b_$v $A 2>&1 | grep '^conv' | tr '\n' ' '; echo; done; done
ncu --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    -k regex:"conv_(fwd_fast|bwd_fused)" -c 2 /tmp/b_A --conv 64,1024,768,4 --reps 1 --warmup 0 > $OUT/ncu_A.txt 2>&1
echo "ncu rc $? $SECONDS s"
cp out/devrun/old_s22/short_conv.cu $F; make -j16 hybrid > /tmp/b_h.log 2>&1 || { tail -20 /tmp/b_h.log; exit 1; }
BENCH_CASES=3:1-T1024 OUT=/tmp/h_old bash scripts/bench_hybrid.sh > /tmp/h_old.log 2>&1
grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/h_old/bench/hybrid_ours.json | tr '\n' ' '; echo " (e11a7bc)"
cp /tmp/tree.cu $F
echo "total $SECONDS s"
