#!/bin/bash
# Session 35's mixed rule for the MoE weight gradients (kernels/moe/experts.cu: at least 8 x 264
# tiles -> one cublasGemmEx per expert, fp32 C) measured whole: bench_moe's default (mixed) against
# HYBRID_MOE_GEMM=own (every GEMM ours: on wgmma the mixed mode's row GEMMs are ours too, so the
# two differ by the weight gradients' path alone) at KL-S's shape (the rule keeps ours there: the
# two should match) and the large shape (d 2048, 64 experts top-8, hidden 1024, 16384 tokens: the
# rule sends both weight gradients to cuBLAS), two rounds alternating; then the whole KL-S (MoE)
# 3:1 model (make bench-moe-model). On an H200 the KL-S lines are also issue 17's 70% target
# (grouped GEMMs against dense cuBLAS of the same FLOPs). Call: carry out/data. Outputs:
# $OUT/mixed-wgrad.tgz.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/bench_moe > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built at $SECONDS s"
for r in 1 2; do
    for mode in mixed own; do
        for s in config 2048,64,8,1024,0,16384; do
            HYBRID_MOE_GEMM=$mode timeout 60 out/build/gpu/bench_moe --shape $s --json $OUT/moe_${mode}_${s%%,*}_$r.json \
                > $OUT/moe_${mode}_${s%%,*}_$r.log 2>&1 || echo "bench_moe $mode $s round $r failed"
            grep -E "^fwdbwd |efficiency|gemm_wgrad" $OUT/moe_${mode}_${s%%,*}_$r.log | grep -v "moe_experts/" |
                sed "s/^/$mode ${s%%,*} r$r: /"
        done
    done
done
echo "at $SECONDS s"
timeout 150 make bench-moe-model > $OUT/model.log 2>&1 || echo "bench-moe-model failed"
tail -2 $OUT/model.log; cp out/bench/kl-s-3-1.log $OUT/ 2>/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
(cd $OUT && tar czf mixed-wgrad.tgz --remove-files *.log *.json gpu.txt; ls -la $OUT)
