#!/bin/bash
# Session 22, call 3 (device): the short convolution's lean walks (a block or chunk inside one
# sequence: no cursor, no per-row sequence tests, the window shifted by renaming) and act.cuh's
# sigmoid / softplus on the special-function unit (dr_exp, __fdividef), against e11a7bc's
# short_conv.cu, act.cuh and chunk.cuh (carried in out/devrun/old/): the GPU tests, the
# convolution alone (B64 T1024 D768 W4, three rounds), scripts/kernel_ab.sh (test_delta_rule, the
# KDA benchmark, the fingerprints of both: they differ by design, the sigmoid's rounding moved;
# the 3:1 hybrid with both), then the 3:1 hybrid's per-op profile with both.
# Here first: for f in kernels/delta_rule/{short_conv.cu,act.cuh,chunk.cuh}; do git show e11a7bc:$f > out/devrun/old/$(basename $f); done
export NCCL_NVLS_ENABLE=0; set -u
B=out/build/gpu/bench_delta_rule; A="--conv 64,1024,768,4 --reps 50 --warmup 5"
FILES="kernels/delta_rule/short_conv.cu kernels/delta_rule/act.cuh kernels/delta_rule/chunk.cuh"
make -j16 $B hybrid out/build/gpu/test_delta_rule_layer out/build/gpu/test_delta_rule > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; out/build/gpu/test_delta_rule_layer 2>&1 | grep -E "FAIL|checks passed" | tail -8
cp $B /tmp/b_new; mkdir -p /tmp/tree; for f in $FILES; do cp $f /tmp/tree/; done
AB_FILES="$FILES" bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1; echo "kernel_ab rc $? at $SECONDS s"
grep -E "test_delta_rule|^kda|FINGERPRINTS|ms_per_step|kernel_ab: total" $OUT/ab.log
cp $B /tmp/b_old  # kernel_ab ends with the old files' build (and puts the tree's files back)
for i in 1 2 3; do for v in old new; do echo -n "$v "; /tmp/b_$v $A 2>&1 | grep '^conv' | tr '\n' ' '; echo; done; done
prof() {  # the 3:1 hybrid's per-op profile (6 steps), ms a step
    OUT=/tmp/bp_$1 BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /tmp/bp_$1.log 2>&1
    for f in /tmp/bp_$1/bench/logs/profile-*.log /tmp/bp_$1/logs/profile-*.log; do
        [ -f "$f" ] && cp "$f" $OUT/profile_$1.log && grep -E '^\s*[a-z_/]+ +[0-9.]+' "$f" | sort -k2 -n -r | head -30; done
}
swap() { for f in $FILES; do cp "$1/$(basename $f)" $f; done; make -j16 hybrid > /tmp/b_h.log 2>&1 || { tail -20 /tmp/b_h.log; exit 1; }; }
echo "== profile old"; swap out/devrun/old; prof old
echo "== profile new"; swap /tmp/tree; prof new
echo "total $SECONDS s"
