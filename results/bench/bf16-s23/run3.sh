#!/bin/bash
# Session 23, call 5 (device, ~300 s left): what the one-MMA arithmetic does to training. The GPU
# loss fingerprints of kda-tiny and kl-xs-3-1 under HYBRID_DR_BF16=1 (the first 20 losses,
# against the split arithmetic's of call 1, results/bench/plugin-s23/fp.txt: the same tree's
# split machine code), then GDN at the three shapes in both arithmetics.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built $SECONDS s"
. scripts/kernel_compare_lib.sh; kernel_data
HYBRID_DR_BF16=1 kernel_fingerprints $OUT/fp_bf16.txt
python3 - results/bench/plugin-s23/fp.txt $OUT/fp_bf16.txt <<'PY'
import sys
def losses(p):
    out, cur = {}, None
    for line in open(p):
        if line.startswith("=="): cur = line.split()[1]; out[cur] = []
        elif " loss " in line and cur: out[cur].append(float(line.split()[2]))
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
for c in a:
    d = [abs(x - y) / abs(x) for x, y in zip(a[c], b.get(c, []))]
    print(c, "steps", len(d), "max rel diff %.2e" % max(d) if d else "none", "step 20: %s vs %s" % (a[c][-1], b[c][-1]) if d else "")
PY
echo "fingerprints at $SECONDS s"
out/build/gpu/bench_delta_rule --kinds gdn --json $OUT/gdn_split.json > $OUT/gdn_split.log 2>&1
HYBRID_DR_BF16=1 out/build/gpu/bench_delta_rule --kinds gdn --json $OUT/gdn_bf16.json > $OUT/gdn_bf16.log 2>&1
python3 scripts/bench_summary_kda.py $OUT/gdn_bf16.json $OUT/gdn_split.json 2>&1 | grep "| GDN"
echo "total $SECONDS s"
