#!/bin/bash
# Session 22, call 4 (device): the gated RMSNorm's register kernels with more rows in flight
# (backward: the warp's next row loaded before this one is computed; forward: two rows a warp,
# both loaded first) against a15357d's gated_rmsnorm.cu and row_vec.cuh (carried in
# out/devrun/old_grn/), in the 3:1 hybrid's per-op profile (B64 T1024); a third build with the
# backward capped at 64 registers (__launch_bounds__(256, 4): 4 blocks an SM, a 32-byte spill);
# and the short convolution's backward at two channels a thread instead of four (bench_delta_rule
# --conv, three rounds). GPU tests of the tree first.
# Here first: git show a15357d:kernels/delta_rule/{gated_rmsnorm.cu,row_vec.cuh} > out/devrun/old_grn/...
export NCCL_NVLS_ENABLE=0; set -u
G=kernels/delta_rule/gated_rmsnorm.cu; R=kernels/delta_rule/row_vec.cuh; S=kernels/delta_rule/short_conv.cu
B=out/build/gpu/bench_delta_rule
make -j16 hybrid $B out/build/gpu/test_delta_rule_layer > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; out/build/gpu/test_delta_rule_layer 2>&1 | grep -E "FAIL|checks passed" | tail -8
mkdir -p /tmp/tree; cp $G $R $S /tmp/tree/; cp $B /tmp/b_v4
prof() {  # the 3:1 hybrid: timed run and per-op profile (6 steps), ms a step
    make -j16 hybrid > /tmp/b_$1.log 2>&1 || { tail -20 /tmp/b_$1.log; exit 1; }
    OUT=/tmp/bp_$1 BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /tmp/bp_$1.log 2>&1
    grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bp_$1/bench/hybrid_ours.json | tr '\n' ' '; echo " ($1)"
    for f in /tmp/bp_$1/bench/logs/profile-*.log /tmp/bp_$1/logs/profile-*.log; do
        [ -f "$f" ] && cp "$f" $OUT/profile_$1.log && grep -E '^(gated_rmsnorm|short_conv|decay_gate|l2norm)' "$f"; done
}
prof new
sed -i 's/^__global__ void grn_bwd_reg_kernel(/__global__ void __launch_bounds__(256, 4) grn_bwd_reg_kernel(/' $G
grep -q "__launch_bounds__(256, 4) grn_bwd_reg_kernel" $G || { echo "sed failed (lb)"; exit 1; }
prof lb
cp out/devrun/old_grn/gated_rmsnorm.cu $G; cp out/devrun/old_grn/row_vec.cuh $R
prof old
cp /tmp/tree/gated_rmsnorm.cu $G; cp /tmp/tree/row_vec.cuh $R
sed -i 's/            const int V = conv_vec(D, x, dy, dx);/            const int V = conv_vec(D, x, dy, dx) == 4 ? 2 : conv_vec(D, x, dy, dx);/' $S
grep -q "conv_vec(D, x, dy, dx) == 4 ? 2" $S || { echo "sed failed (conv)"; exit 1; }
make -j16 $B > /tmp/b_c.log 2>&1 || { tail -20 /tmp/b_c.log; exit 1; }; cp $B /tmp/b_v2; cp /tmp/tree/short_conv.cu $S
A="--conv 64,1024,768,4 --reps 50 --warmup 5"
for i in 1 2 3; do for v in v4 v2; do echo -n "$v "; /tmp/b_$v $A 2>&1 | grep '^conv' | tr '\n' ' '; echo; done; done
echo "total $SECONDS s"
