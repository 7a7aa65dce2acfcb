#!/bin/bash
# session 17, call 4 (issue 16): the per-op GPU profile of the 3:1 hybrid at B64 T1024 with main's
# kernels after the K = V = 128 instances (a714c29), and its timed run (ours only).
set -u
export NCCL_NVLS_ENABLE=0
nvidia-smi -L
make -j16 hybrid > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built at $SECONDS s"
OUT=/tmp/bh BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /tmp/bh.log 2>&1; echo "bench rc $?"
tail -5 /tmp/bh.log
grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bh/bench/hybrid_ours.json | tr '\n' ' '; echo
cp /tmp/bh/bench/hybrid_ours.json $OUT/ 2>/dev/null
for f in /tmp/bh/bench/logs/profile-*.log /tmp/bh/logs/profile-*.log; do [ -f "$f" ] && cp "$f" $OUT/ && grep -E '^\s*[a-z_/]+ +[0-9.]+' "$f" | sort -k2 -n -r | head -45; done
ls -l $OUT; echo "total $SECONDS s"
