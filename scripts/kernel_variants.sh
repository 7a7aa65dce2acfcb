#!/bin/bash
# Several versions of the same delta-rule kernel files timed in one device call, interleaved
# (docs/cuda.md, "Measuring a kernel change against main"): where scripts/kernel_ab.sh compares
# the tree with one old version in full (test, benchmark, profile, fingerprints, hybrid), this
# ranks a few candidates by speed first, so one call can try several. Speeds of different calls
# differ by a few percent, so the candidates belong in one call, and interleaving the rounds
# (tree, a, b, tree, a, b) keeps a drift of the machine from favouring one of them.
#
# Here, before the call: each variant NAME's versions of the files (by their basenames) in
# out/devrun/variants/NAME/; the tree's own files are the variant `tree`, e.g.
#   mkdir -p out/devrun/variants/a && cp <candidate>/chunk_grad1_mma.cu out/devrun/variants/a/
# On the device (carry out/devrun):
#   VAR_FILES="kernels/delta_rule/chunk_grad1_mma.cu" VARIANTS="tree a b" bash scripts/kernel_variants.sh
# Each round builds every variant's bench_delta_rule and prints, a line each prefixed by its
# name, the KDA forward + backward at VAR_SHAPE (8,4096,16,128,128) twice and the per-kernel
# timers matching VAR_TIMERS (an extended regex; default the prep and both gradient kernels);
# ROUNDS rounds (2). VAR_FP=1 then builds ./hybrid with each variant (and the tree) and writes
# the GPU loss fingerprints (kernel_fingerprints, scripts/kernel_compare_lib.sh) to
# $OUT/fp_NAME.txt, with EQUAL, DIFFER or FAILED against the tree's (kernel_fp_verdict): a
# candidate meant to keep the bits must say EQUAL.
# The tree's files are put back when it ends (also on a failed build or an interrupt).
set -u
export NCCL_NVLS_ENABLE=0
: "${VAR_FILES:?VAR_FILES: the kernel files the variants replace, relative to the repository root}"
: "${VARIANTS:?VARIANTS: the variants to time, e.g. \"tree a b\" (tree: the files as they are)}"
DIR=${VAR_DIR:-out/devrun/variants}
SHAPE=${VAR_SHAPE:-8,4096,16,128,128}
TIMERS=${VAR_TIMERS:-delta_chunk/(prep|grad1|grad2)}
ROUNDS=${ROUNDS:-2}
for f in $VAR_FILES; do
    [ -f "$f" ] || { echo "kernel_variants: $f: no such file in the tree"; exit 2; }
    for v in $VARIANTS; do
        [ "$v" = tree ] || [ -f "$DIR/$v/$(basename "$f")" ] ||
            { echo "kernel_variants: $DIR/$v/$(basename "$f"): missing (variant $v's version of $f)"; exit 2; }
    done
done
. "$(dirname "$0")/kernel_compare_lib.sh"
kernel_files_save kernel_variants $VAR_FILES
use() {  # VARIANT: its files into the tree
    for f in $VAR_FILES; do
        if [ "$1" = tree ]; then cp "$KF_SAVE/$(basename "$f")" "$f"; else cp "$DIR/$1/$(basename "$f")" "$f"; fi
    done
}
for r in $(seq "$ROUNDS"); do
    for v in $VARIANTS; do
        use "$v"
        make -j16 out/build/gpu/bench_delta_rule > "/tmp/kv_build_$v.log" 2>&1 ||
            { echo "$v: build failed"; tail -8 "/tmp/kv_build_$v.log"; continue; }
        for i in 1 2; do
            out/build/gpu/bench_delta_rule --shape "$SHAPE" --kinds kda 2>&1 | grep -E '^kda.*fwdbwd' | sed "s/^/$v /"
        done
        HYBRID_CUDA_PROFILE=1 out/build/gpu/bench_delta_rule --shape "$SHAPE" --kinds kda --reps 3 --warmup 1 2>&1 |
            grep -E "$TIMERS" | sort -u | sed "s/^/$v /"
    done
    echo "== round $r done at $SECONDS s"
done
if [ "${VAR_FP:-0}" = 1 ]; then
    : "${OUT:?OUT: the folder for the fingerprints (VAR_FP=1)}"
    mkdir -p "$OUT"
    kernel_data
    others=$(for v in $VARIANTS; do [ "$v" = tree ] || echo "$v"; done)
    for v in tree $others; do  # (the tree's always: the others are compared with it)
        use "$v"
        make -j16 hybrid > "/tmp/kv_hybrid_$v.log" 2>&1 || { echo "$v: hybrid build failed"; continue; }
        rm -f "$OUT/fp_$v.txt"
        kernel_fingerprints "$OUT/fp_$v.txt"
    done
    for v in $others; do
        echo "$v against the tree: $(kernel_fp_verdict "$OUT/fp_$v.txt" "$OUT/fp_tree.txt")"
    done
fi
echo "kernel_variants: total $SECONDS s"
