#!/bin/bash
# Session 26's second MoE call (branch moe-wg-overlap): the wgmma row GEMMs with the next tile's
# loads issued before the epilogue (new) against main's wgmma kernels (old: out/devrun/old_wg/,
# `git show main:<file>` of kernels/moe/experts_wg.cu and grouped_gemm_wg.cuh) and against our
# mma.sync kernels (HYBRID_MOE_WGMMA=0, the default before session 26), each bench_moe in the
# default mixed mode; test_moe on the GPU; the KL-S (MoE) model; then `make bench-moe` with
# PyTorch in what is left of the call. Call: carry out/data and out/devrun.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/test_moe out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; echo "test_moe rc $?"; tail -1 $OUT/test_moe.log
grep -n "FAIL" $OUT/test_moe.log | head -10
out/build/gpu/bench_moe --json $OUT/moe_new.json > $OUT/bench_new.log 2>&1; echo "bench_moe new rc $?"
HYBRID_MOE_WGMMA=0 out/build/gpu/bench_moe --json $OUT/moe_mma.json > $OUT/bench_mma.log 2>&1; echo "bench_moe mma.sync rc $?"
mkdir -p /tmp/keep_wg && cp kernels/moe/experts_wg.cu kernels/moe/grouped_gemm_wg.cuh /tmp/keep_wg/
cp out/devrun/old_wg/experts_wg.cu out/devrun/old_wg/grouped_gemm_wg.cuh kernels/moe/
make -j16 out/build/gpu/bench_moe > $OUT/build_old.log 2>&1 || tail -20 $OUT/build_old.log
out/build/gpu/bench_moe --json $OUT/moe_old.json > $OUT/bench_old.log 2>&1; echo "bench_moe old rc $?"
cp /tmp/keep_wg/experts_wg.cu /tmp/keep_wg/grouped_gemm_wg.cuh kernels/moe/
python3 scripts/bench_summary_moe.py paths mma=$OUT/moe_mma.json old=$OUT/moe_old.json new=$OUT/moe_new.json
make -j16 hybrid out/build/gpu/bench_moe > $OUT/build_new2.log 2>&1 || tail -20 $OUT/build_new2.log
echo "at $SECONDS s"
timeout 100 make bench-moe-model > $OUT/model.log 2>&1; echo "== bench-moe-model (rc $?)"; tail -3 $OUT/model.log
left=$((575 - SECONDS)); echo "make bench-moe with $left s left"
MOE_TORCH_TIMEOUT=$((left - 40)) timeout $left make bench-moe > $OUT/bench_moe_torch.log 2>&1
echo "== make bench-moe (rc $?)"; tail -24 $OUT/bench_moe_torch.log
echo "total $SECONDS s"
