// Numerically stable scalar activations of the delta-rule layer ops, in fp32, with the same
// branches as the CPU reference (model/ops/delta_rule/internal.h lin_sigmoid, layer_ops.c
// softplus): no exp of a large positive argument.
#ifndef HYBRID_KERNELS_DELTA_RULE_ACT_CUH
#define HYBRID_KERNELS_DELTA_RULE_ACT_CUH

#include "kernels/common.cuh"

__device__ __forceinline__ float dr_sigmoid(float x) {
    if (x >= 0.f) return 1.f / (1.f + expf(-x));
    const float e = expf(x);
    return e / (1.f + e);
}

__device__ __forceinline__ float dr_softplus(float x) { return x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x)); }

#endif
