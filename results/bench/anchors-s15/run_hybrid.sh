#!/bin/bash
# session 15, device call 4 (issues 16, 18): as run (carry out/devrun with the Triton cache of call 3 as
# out/devrun/tc.tgz, and out/peers/fla with a COMMIT file). EXPORT: the MQAR folder, now results/ablation/mqar-p16-attn.
# session 15 call 4: MQAR at 16 pairs for 0:1 (results/ablation/mqar-p16-attn, seeds 0 and 1), then
# the 3:1 hybrid B64 T1024, ours (main's kernels) and fla's KDAForCausalLM in the same call
# (make bench-hybrid, BENCH_CASES=3:1-T1024), fla bounded by the call's time.
set -u
export NCCL_NVLS_ENABLE=0
export TRITON_CACHE_DIR=/tmp/tc; mkdir -p $TRITON_CACHE_DIR
[ -f out/devrun/tc.tgz ] && tar xzf out/devrun/tc.tgz -C /tmp && echo "Triton cache carried in"
nvidia-smi -L
mkdir -p out/data && cp out/devrun/data/* out/data/
make -j16 hybrid > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built at $SECONDS s"
bash results/ablation/mqar-p16-attn/run.sh ${MQAR_S:-160}
echo "mqar done at $SECONDS s"
BENCH_CASES=3:1-T1024 FLA_DIR=out/peers/fla FLA_TIMEOUT=$((520 - SECONDS)) bash scripts/bench_hybrid.sh 2>&1 | tail -25
cp out/bench/hybrid_*.json $OUT/ 2>/dev/null
ls -l $OUT; echo "total $SECONDS s"
