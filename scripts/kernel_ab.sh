#!/bin/bash
# A/B of a delta-rule kernel change on the device machine, in one call (docs/cuda.md, "Measuring
# a kernel change against main"): the tree's kernels (new) against the same files from another
# commit (old), with the parity test, the KDA benchmark, the GPU loss fingerprints of both (a
# change meant to keep the bits must give equal ones) and the 3:1 hybrid with both.
#
# Here, before the call (files named relative to the repository root):
#   mkdir -p out/devrun/old && for f in FILES; do git show main:$f > out/devrun/old/$(basename $f); done
#   cp out/data/brown_* out/devrun/data/          # the Brown shards of `make data`
# On the device (carry out/devrun):
#   AB_FILES="kernels/delta_rule/chunk_grad1_mma.cu ..." bash scripts/kernel_ab.sh
# Writes fp_new.txt and fp_old.txt under $OUT; prints the rest. AB_OLD: the folder of the old
# files (out/devrun/old); AB_HYBRID=0 skips the hybrid runs.
# AB_CHECK=1, here on the CPU before the call (no GPU, no OUT): whether the old files build
# with the tree's other files. They must be a consistent set, every file that changed since
# their commit: session 18's first A/B took an older chunk.cuh than the tree's reverse walk
# needed, and its old build failed after minutes of device time. Builds the CPU emulator's
# objects (the emulated families' kernels, delta_rule included: the same sources, by g++) with
# the old files in place, then puts the tree's back; exit status 1 with the first errors if
# they do not build.
set -u
export NCCL_NVLS_ENABLE=0
: "${AB_FILES:?AB_FILES: the kernel files to swap, relative to the repository root}"
OLD=${AB_OLD:-out/devrun/old}
for f in $AB_FILES; do
    [ -f "$f" ] || { echo "kernel_ab: $f: no such file in the tree"; exit 2; }
    [ -f "$OLD/$(basename "$f")" ] || { echo "kernel_ab: $OLD/$(basename "$f"): missing (git show main:$f > it)"; exit 2; }
done
. "$(dirname "$0")/kernel_compare_lib.sh"
if [ "${AB_CHECK:-0}" = 1 ]; then
    kernel_files_save kernel_ab $AB_FILES
    for f in $AB_FILES; do cp "$OLD/$(basename "$f")" "$f"; done
    if make -j2 out/build/emu/hash_delta_rule > /tmp/ab_check.log 2>&1; then
        echo "kernel_ab: the old files build with the tree's other files (CPU emulator)"
        exit 0
    fi
    grep -m 6 -E 'error' /tmp/ab_check.log
    echo "kernel_ab: the old files do not build with the tree's other files: add the files changed since their commit to AB_FILES (log: /tmp/ab_check.log)"
    exit 1
fi
: "${OUT:?OUT: the folder for the fingerprints}"
mkdir -p "$OUT"
kernel_files_save kernel_ab $AB_FILES
kernel_data
B="hybrid out/build/gpu/test_delta_rule out/build/gpu/bench_delta_rule"
hyb() {  # the 3:1 hybrid, B64 T1024: ms/step, tok/s, peak
    [ "${AB_HYBRID:-1}" = 1 ] || return 0
    BENCH_CASES=3:1-T1024 OUT=/tmp/ab_$1 bash scripts/bench_hybrid.sh > /dev/null 2>&1
    grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/ab_$1/bench/hybrid_ours.json | tr '\n' ' '
    echo " ($1)"
}
profile() {  # the per-kernel times at B8 T4096 H16
    HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda --reps 3 --warmup 1 2>&1 |
        grep 'delta_chunk/'
}
fingerprints() { kernel_fingerprints "$OUT/fp_$1.txt"; }
make -j16 $B > /tmp/ab_build_new.log 2>&1 || { tail -30 /tmp/ab_build_new.log; echo "kernel_ab: build failed (new)"; exit 1; }
echo "== new kernels: built at $SECONDS s"
out/build/gpu/test_delta_rule > /tmp/ab_test.log 2>&1; echo "test_delta_rule rc $?"; tail -1 /tmp/ab_test.log
out/build/gpu/bench_delta_rule --kinds kda 2>&1 | grep -E '^kda'
profile
fingerprints new
hyb new
for f in $AB_FILES; do cp "$OLD/$(basename "$f")" "$f"; done
make -j16 $B > /tmp/ab_build_old.log 2>&1 || { tail -30 /tmp/ab_build_old.log; echo "kernel_ab: build failed (old)"; exit 1; }
echo "== old kernels: built at $SECONDS s"
fingerprints old
kernel_fp_verdict "$OUT/fp_new.txt" "$OUT/fp_old.txt"
out/build/gpu/bench_delta_rule --shape 8,4096,16,128,128 --kinds kda 2>&1 | grep -E '^kda'
profile
hyb old
echo "kernel_ab: total $SECONDS s"
