#!/bin/sh
# The delta rule's one-MMA arithmetic (HYBRID_DR_BF16=1) is the split arithmetic with every lo
# part zero, bit for bit (docs/delta-rule.md, "One MMA a product"): the one-MMA kernels drop
# the lo work at compile time (kernels/delta_rule/chunk.cuh, the template flag LO), the
# precision audit's build zeroes every lo part of the split kernels at run time (--mask all;
# a zero lo adds exact zeros). tests/gpu/hash_delta_rule.c hashes every output of the forward
# and the backward over its cases; both runs must print the same hashes (the first line, the
# mask, and the last, the time, differ by design), and so must the one-MMA run with Delta and
# dDelta in the workspace's fp32 layout (HYBRID_DR_DELTA_F32=1: the layout changes no bit). The
# one-MMA prep computes its diagonal blocks on tensor cores where their gates allow (chunk.cuh,
# DR_DIAG_BOUND), the split kernels in fp32 SIMT: the one-MMA runs compared here put every
# diagonal block in SIMT (HYBRID_DR_DIAG_SIMT=1), and the one-MMA run with the tensor-core blocks
# must differ from them somewhere (else those blocks never ran). Run by `make test` (tests/run_all.sh runs
# every tests/*.sh) on the CPU emulator's audit build, which has both paths (the one-MMA kernels
# never call the audit's hook); test-only builds it wherever it builds the emulator's tests.
# usage: tests/check_one_mma.sh [HASH_DELTA_RULE_AUDIT_BINARY]   (default: $BUILD/emu/hash_delta_rule_audit)
set -u
bin=${1:-${BUILD:-out/build}/emu/hash_delta_rule_audit}
if [ ! -x "$bin" ]; then
    echo "skipped: check_one_mma: $bin is not built (make $bin; a sanitizer build has no emulator tests)"
    exit 77
fi
a=$(mktemp /tmp/one_mma.XXXXXX) b=$(mktemp /tmp/one_mma.XXXXXX) c=$(mktemp /tmp/one_mma.XXXXXX) d=$(mktemp /tmp/one_mma.XXXXXX)
trap 'rm -f "$a" "$b" "$c" "$d" "$a.h" "$b.h" "$c.h" "$d.h"' EXIT
export HYBRID_DR_DIAG_SIMT=1
HYBRID_DR_BF16=1 HYBRID_DR_DELTA_F32=0 "$bin" > "$a" 2>/dev/null ||
    { echo "check_one_mma: $bin failed under HYBRID_DR_BF16=1 HYBRID_DR_DIAG_SIMT=1"; exit 1; }
HYBRID_DR_BF16=0 HYBRID_DR_DELTA_F32=0 "$bin" --mask all > "$b" 2>/dev/null || { echo "check_one_mma: $bin --mask all failed"; exit 1; }
HYBRID_DR_BF16=1 HYBRID_DR_DELTA_F32=1 "$bin" > "$c" 2>/dev/null ||
    { echo "check_one_mma: $bin failed under HYBRID_DR_BF16=1 HYBRID_DR_DIAG_SIMT=1 HYBRID_DR_DELTA_F32=1"; exit 1; }
HYBRID_DR_DIAG_SIMT=0 HYBRID_DR_BF16=1 HYBRID_DR_DELTA_F32=0 "$bin" > "$d" 2>/dev/null ||
    { echo "check_one_mma: $bin failed under HYBRID_DR_BF16=1"; exit 1; }
sed '1d;$d' "$a" > "$a.h"
sed '1d;$d' "$b" > "$b.h"
sed '1d;$d' "$c" > "$c.h"
sed '1d;$d' "$d" > "$d.h"
n=$(wc -l < "$a.h")
if [ "$n" -lt 100 ]; then echo "check_one_mma: only $n hash lines from $bin"; exit 1; fi
if ! cmp -s "$a.h" "$b.h"; then
    echo "check_one_mma: FAILED: the one-MMA kernels (diagonal blocks in SIMT) and the split kernels with every lo zeroed differ:"
    diff "$a.h" "$b.h" | head -20
    exit 1
fi
if ! cmp -s "$a.h" "$c.h"; then
    echo "check_one_mma: FAILED: the one-MMA kernels give other bits with Delta, dDelta fp32 (HYBRID_DR_DELTA_F32=1):"
    diff "$a.h" "$c.h" | head -20
    exit 1
fi
if cmp -s "$a.h" "$d.h"; then
    echo "check_one_mma: FAILED: the one-MMA run with diagonal blocks on tensor cores gives the bits of every block in SIMT"
    exit 1
fi
echo "check_one_mma: ok (the one-MMA kernels, diagonal blocks in SIMT, = the split kernels with every lo zeroed, either Delta layout: $n hashes; the tensor-core diagonal blocks differ)"
