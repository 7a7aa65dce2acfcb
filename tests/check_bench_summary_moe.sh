#!/bin/sh
# scripts/bench_summary_moe.py paths: two synthetic bench_moe runs of one shape, one with the GLU
# as its own passes and one with it fused into the GEMMs (no glu_* parts): the table marks the
# faster run of each part, adds a fused pair (gemm_fwd13 + glu_fwd) right, marks the faster layer,
# says "-" where a run has no such part; a malformed argument is refused; repeated runs (STEM1,
# STEM2, ...) get their medians and spread per stem, and only they.
set -u
t=$(mktemp -d /tmp/bench_summary_moe.XXXXXX)
trap 'rm -rf "$t"' EXIT
shape='"C": 768, "E": 16, "K": 2, "M": 256, "S": 512, "N": 65536'
cat > "$t/a.json" <<J
{"impl": "hybrid.c", "emulated": false, "records": [
  {"name": "config", $shape, "pass": "fwdbwd", "status": "ok", "median_ms": 3.354, "min_ms": 3.3, "peak_bytes": 1}],
 "shapes": [{"name": "config", $shape, "grouped_gemm_ms": 1.753,
   "ops_ms": {"moe_experts/gemm_fwd13": 0.400, "moe_experts/glu_fwd": 0.070, "moe_experts/gemm_dgrad2": 0.220,
              "moe_experts/glu_bwd": 0.080}}]}
J
cat > "$t/b.json" <<J
{"impl": "hybrid.c", "emulated": false, "records": [
  {"name": "config", $shape, "pass": "fwdbwd", "status": "ok", "median_ms": 2.900, "min_ms": 2.8, "peak_bytes": 1}],
 "shapes": [{"name": "config", $shape, "grouped_gemm_ms": 1.300,
   "ops_ms": {"moe_experts/gemm_fwd13": 0.430, "moe_experts/gemm_dgrad2": 0.310}}]}
J
out=$(python3 scripts/bench_summary_moe.py paths apart="$t/a.json" fused="$t/b.json") || { echo "check_bench_summary_moe: FAILED: rc $?"; exit 1; }
want() {
    printf '%s\n' "$out" | grep -qF -- "$1" || { echo "check_bench_summary_moe: FAILED: no line '$1' in:"; printf '%s\n' "$out"; exit 1; }
}
want "| gemm_fwd13 | 0.400 * | 0.430 |"
want "| glu_fwd | 0.070 * | - |"
want "| fwd13 + glu_fwd | 0.470 | 0.430 * |"
want "| dgrad2 + glu_bwd | 0.300 * | 0.310 |"
want "| layer fwd+bwd (median) | 3.354 | 2.900 * |"
# repeats: runs x1..x3 and y1..y3 (layer 3.0, 3.4, 3.1 and 2.9, 3.5, 3.0): per stem the median
# and the spread, the smaller median marked (y: 3.0 against x's 3.1)
for r in x1:3.0 x2:3.4 x3:3.1 y1:2.9 y2:3.5 y3:3.0; do
    sed "s/\"median_ms\": 3.354/\"median_ms\": ${r#*:}/" "$t/a.json" > "$t/${r%%:*}.json"
done
out=$(python3 scripts/bench_summary_moe.py paths x1="$t/x1.json" y1="$t/y1.json" x2="$t/x2.json" y2="$t/y2.json" \
      x3="$t/x3.json" y3="$t/y3.json") || { echo "check_bench_summary_moe: FAILED: rc $? (repeats)"; exit 1; }
want "| part | x (3 runs) | y (3 runs) |"
want "| layer fwd+bwd (median) | 3.100 (3.000-3.400) | 3.000 * (2.900-3.500) |"
want "| gemm_fwd13 | 0.400 * (0.400-0.400) | 0.400 * (0.400-0.400) |"
out=$(python3 scripts/bench_summary_moe.py paths apart="$t/a.json" fused="$t/b.json")
if printf '%s\n' "$out" | grep -q "medians over the repeated runs"; then
    echo "check_bench_summary_moe: FAILED: a medians table without repeated runs"; exit 1
fi
if python3 scripts/bench_summary_moe.py paths "$t/a.json" > /dev/null 2>&1; then
    echo "check_bench_summary_moe: FAILED: a run without NAME= was accepted"; exit 1
fi
echo "check_bench_summary_moe: ok (the fastest part and layer marked, fused pairs added, missing parts '-'; repeated runs' medians and spread)"
