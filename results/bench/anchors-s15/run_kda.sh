#!/bin/bash
# session 15, device call 3 (issues 15, 18): as run (carry out/devrun, with the Brown shards in out/devrun/data/,
# and out/peers/fla, fla bc3b101d prepared as BENCHMARKS.md's KDA section says). kda_fla.json here says
# fla_commit 41065c6...: that is a commit of this repository (git climbed from the copy to the enclosing
# checkout), which scripts/fla_peer.py reported for a prepared copy without a COMMIT file until this
# session (fixed; tests/fla_peer_commit.sh); the copy was fla bc3b101d.
# session 15 call 3: MQAR seed 3 of 1:1 / 7:1 (results/ablation/mqar-p16-more), then the anchor
# again: ours and fla's chunk_kda in the same call (make bench-kda, --kinds kda, the three shapes of
# issue 15), fla bounded by the call's time; the Triton cache comes back as $OUT/tc.tgz.* parts.
set -u
export NCCL_NVLS_ENABLE=0
export TRITON_CACHE_DIR=/tmp/tc; mkdir -p $TRITON_CACHE_DIR
[ -f out/devrun/tc.tgz ] && tar xzf out/devrun/tc.tgz -C /tmp && echo "Triton cache carried in"
nvidia-smi -L
make -j16 hybrid out/build/gpu/bench_delta_rule > /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
echo "built at $SECONDS s"
bash results/ablation/mqar-p16-more/run.sh 170
echo "mqar done at $SECONDS s"
make bench-kda KDA_BENCH_ARGS="--kinds kda" FLA_DIR=out/peers/fla KDA_FLA_TIMEOUT=$((565 - SECONDS)) 2>&1 | tail -40
echo "bench at $SECONDS s"
cp out/bench/kda_*.json $OUT/ 2>/dev/null
tar czf /tmp/tc.tgz -C /tmp tc && split -b 15M /tmp/tc.tgz $OUT/tc.tgz.; ls -l $OUT; echo "total $SECONDS s"
