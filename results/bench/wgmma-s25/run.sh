#!/bin/bash
# The first device calls for the MoE experts' wgmma GEMMs (kernels/moe/experts_wg.cu, written in
# session 25, which had no device): does the H200 read the swizzled layouts and descriptors as the
# CPU emulator does, and how fast is it. One part a call (each fits the 600 s of a call; the
# machine keeps the build between calls while it stays warm):
#   bash results/bench/wgmma-s25/run.sh 1   build; probe_wgmma (each operand layout on the GPU);
#                                            test_moe on the GPU (its "on wgmma" lines)
#   bash results/bench/wgmma-s25/run.sh 2   bench_moe five ways: the default (HYBRID_MOE_GEMM=mixed),
#       own (all six on our mma.sync kernels), own with HYBRID_MOE_WGMMA=1 (all six on wgmma) at both
#       tile widths (HYBRID_MOE_WG_BN=256, 128), and once with the GLU apart (HYBRID_MOE_WG_GLU_APART=1:
#       then gemm_fwd13 and gemm_dgrad2 are GEMMs alone, comparable with dense; fused, they hold the
#       GLU too); then scripts/bench_summary_moe.py paths side by side: compare the
#       moe_experts/gemm_* lines ("of dense", target 70%) and the layer's fwd+bwd, then choose the
#       mixed mode's rule and the tile per GEMM
#   bash results/bench/wgmma-s25/run.sh 3   make bench-moe with PyTorch in the same call, ours on wgmma
#   bash results/bench/wgmma-s25/run.sh 4   with out/data carried (the Brown shards: `make data` here
#       first): the whole KL-S (MoE) 3:1 model's training tok/s, the default against wgmma
export NCCL_NVLS_ENABLE=0; set -u
part=${1:?usage: run.sh 1|2|3|4}
make -j16 hybrid out/build/gpu/probe_wgmma out/build/gpu/test_moe out/build/gpu/bench_moe > $OUT/build_$part.log 2>&1 ||
    { tail -40 $OUT/build_$part.log; exit 1; }
case $part in
1)
    # does the hardware read kernels/wgmma.cuh's layouts as the emulator does (and if not, which
    # variant of the MN-major descriptor it reads)
    out/build/gpu/probe_wgmma; echo "probe_wgmma rc $?"
    grep -B2 "Used" out/build/cu/kernels/moe/experts_wg.o.res | grep "properties\|Used\|spill"
    out/build/gpu/test_moe > $OUT/test_moe.log 2>&1; echo "test_moe rc $?"; tail -1 $OUT/test_moe.log
    grep -n "FAIL" $OUT/test_moe.log | head -20
    ;;
2)
    for run in "mixed:" "own:" "wg:HYBRID_MOE_WGMMA=1" "wg128:HYBRID_MOE_WGMMA=1 HYBRID_MOE_WG_BN=128" \
        "wgapart:HYBRID_MOE_WGMMA=1 HYBRID_MOE_WG_GLU_APART=1"; do
        name=${run%%:*}; envs=${run#*:}
        mode=$name; case $name in wg*) mode=own;; esac
        env HYBRID_MOE_GEMM=$mode $envs out/build/gpu/bench_moe --json $OUT/moe_$name.json > $OUT/bench_$name.log 2>&1
        echo "== bench_moe $name (rc $?)"; grep -A8 "grouped GEMM (profiled)" $OUT/bench_$name.log
        grep "fwdbwd" $OUT/bench_$name.log | head -4
    done
    python3 scripts/bench_summary_moe.py paths mixed=$OUT/moe_mixed.json own=$OUT/moe_own.json wg=$OUT/moe_wg.json \
        wg128=$OUT/moe_wg128.json wgapart=$OUT/moe_wgapart.json
    ;;
3)
    # PyTorch's compile takes a while: the anchor, ours on wgmma beside it in the same call (make
    # bench-moe: bench_moe then scripts/bench_torch_moe.py, the side-by-side at the end)
    HYBRID_MOE_GEMM=own HYBRID_MOE_WGMMA=1 MOE_TORCH_TIMEOUT=240 make bench-moe > $OUT/bench_moe_torch.log 2>&1
    echo "== make bench-moe, ours on wgmma (rc $?)"; tail -25 $OUT/bench_moe_torch.log
    cp out/bench/moe_*.json $OUT/ 2>/dev/null
    ;;
4)
    for run in "mixed:" "wg:HYBRID_MOE_WGMMA=1"; do
        name=${run%%:*}; envs=${run#*:}
        env $envs make bench-moe-model > $OUT/model_$name.log 2>&1
        echo "== bench-moe-model $name (rc $?)"; tail -6 $OUT/model_$name.log
    done
    ;;
*) echo "usage: run.sh 1|2|3|4"; exit 2 ;;
esac
echo "total $SECONDS s"
