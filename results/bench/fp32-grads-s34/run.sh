#!/bin/bash
# Session 34: the CUDA backend's fp32 parameter gradients (docs/cuda.md, "Precision")
# against main before them (5a8267a, bf16 gradients), on one machine: GPT-2 124M
# (bench_gpt2 64 1024 20), the KL-S (MoE) layer's grouped expert GEMMs against dense cuBLAS of
# the same FLOPs (bench_moe --shape config) and the large MoE shape (d 2048, 64 experts top-8,
# hidden 1024, 16384 tokens: its weight gradients moved from cuBLAS's grouped GEMM, which writes
# no fp32, to ours), each version after the other; then, while time is left (T0: the call's
# start, `date +%s`; 570 s), the KL-S (MoE) 3:1 model (make bench-moe-model) and PyTorch's GPT-2.
# The base build: out/base-5a8267a.tgz (`git archive 5a8267a --prefix=base/ -- Makefile base
# model kernels dist optim train tests include configs scripts data checkpoints | gzip`), built
# in /tmp/base (started beside the tests by the call, or here). Call: carry out/base-5a8267a.tgz
# and out/data. Outputs: $OUT/fp32-grads.tgz.
export NCCL_NVLS_ENABLE=0; set -u
T0=${T0:-$(date +%s)}
left() { echo $((570 - $(date +%s) + T0)); }
if [ ! -x /tmp/base/out/build/gpu/bench_moe ]; then
    [ -d /tmp/base ] || tar xzf out/base-5a8267a.tgz -C /tmp
    (cd /tmp/base && make -j16 out/build/gpu/bench_gpt2 out/build/gpu/bench_moe > $OUT/build-base.log 2>&1)
fi
wait
make -j16 hybrid out/build/gpu/bench_gpt2 out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $(( $(date +%s) - T0 )) s"
for v in new base; do
    dir=.; [ $v = base ] && dir=/tmp/base
    [ -x $dir/out/build/gpu/bench_moe ] || { echo "no $v build"; tail -20 $OUT/build-base.log; continue; }
    (cd $dir && timeout 90 out/build/gpu/bench_gpt2 64 1024 20) > $OUT/gpt2_$v.log 2>&1 || echo "bench_gpt2 $v failed"
    echo "gpt2 $v: $(grep -iE "ms/step|peak" $OUT/gpt2_$v.log | head -3 | tr '\n' ' ')"
    for s in config 2048,64,8,1024,0,16384; do
        (cd $dir && timeout 60 out/build/gpu/bench_moe --shape $s) > $OUT/moe_${v}_${s%%,*}.log 2>&1 || echo "bench_moe $v $s failed"
        grep -E "^fwdbwd |efficiency|wgrad" $OUT/moe_${v}_${s%%,*}.log | head -12 | sed "s/^/moe $v ${s%%,*}: /"
    done
    echo "at $(( $(date +%s) - T0 )) s"
done
# session 35: the weight gradients on cuBLAS (HYBRID_MOE_GEMM=cublas: one cublasGemmEx per expert,
# fp32 C) against ours (the runs above), both shapes
for s in config 2048,64,8,1024,0,16384; do
    HYBRID_MOE_GEMM=cublas timeout 60 out/build/gpu/bench_moe --shape $s > $OUT/moe_cublas_${s%%,*}.log 2>&1 || echo "bench_moe cublas $s failed"
    grep -E "^fwdbwd |efficiency|wgrad|dgrad|fwd13|fwd2" $OUT/moe_cublas_${s%%,*}.log | head -12 | sed "s/^/moe cublas ${s%%,*}: /"
done
echo "at $(( $(date +%s) - T0 )) s"
[ $(left) -gt 170 ] && { timeout 150 make bench-moe-model > $OUT/model.log 2>&1 || echo "bench-moe-model failed"; tail -2 $OUT/model.log; cp out/bench/kl-s-3-1.log $OUT/ 2>/dev/null; }
[ $(left) -gt 120 ] && { timeout $(left) python3 scripts/bench_pytorch_gpt2.py --batch 64 --seq 1024 --steps 20 > $OUT/pytorch.log 2>&1; tail -3 $OUT/pytorch.log; }
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
(cd $OUT && tar czf fp32-grads.tgz --remove-files *.log gpu.txt; ls -la $OUT)
