#!/bin/bash
# Session 26's MoE call, after the wgmma kernels became the default on compute capability 9.0
# (HYBRID_MOE_WGMMA=auto; the mixed rule on wgmma: the four row GEMMs ours, the weight gradients
# ours below MIXED_WG_CUBLAS_TILES, the GLU apart): test_moe on the GPU, `make bench-moe` (our
# layer and PyTorch's in the same call), the KL-S (MoE) 3:1 model's tok/s. The comparison with
# the previous default (ours on mma.sync) is results/bench/wgmma-s25/run.sh 2's "mixed" column,
# measured earlier in the same session. Call: carry out/data (the Brown shards of `make data`).
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/test_moe out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; echo "test_moe rc $?"; tail -1 $OUT/test_moe.log
grep -n "FAIL" $OUT/test_moe.log | head -10
MOE_TORCH_TIMEOUT=240 timeout 400 make bench-moe > $OUT/bench_moe_torch.log 2>&1
echo "== make bench-moe (rc $?) at $SECONDS s"; grep -A9 "grouped GEMM (profiled)" $OUT/bench_moe_torch.log; tail -22 $OUT/bench_moe_torch.log
cp out/bench/moe_*.json $OUT/ 2>/dev/null
timeout 120 make bench-moe-model > $OUT/model.log 2>&1; echo "== bench-moe-model (rc $?)"; tail -4 $OUT/model.log
echo "total $SECONDS s"
