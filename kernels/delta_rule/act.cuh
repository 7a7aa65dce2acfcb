// Numerically stable scalar activations of the delta-rule layer ops, in fp32, with the values
// of the CPU reference's branches (model/ops/delta_rule/internal.h lin_sigmoid, layer_ops.c
// softplus): no exp of a large positive argument. Each takes the one exponential its branch
// would, e = exp(-|x|) (-|x| is -x or x exactly, so the same argument), and selects afterwards:
//   sigmoid(x)  = 1 / (1 + e) for x >= 0, e / (1 + e) below (the division is IEEE either way),
//   softplus(x) = x + log1p(e) for x > 0, log1p(e) otherwise,
// the same bits as the two-branch forms, without the branches: those diverged within a warp
// on mixed signs and ran both sides (the short convolution's SiLU measured this first, session
// 13). One exponential of the same argument also lets the compiler share it between a
// sigmoid and a softplus of one x (the decay gate's backward).
#ifndef HYBRID_KERNELS_DELTA_RULE_ACT_CUH
#define HYBRID_KERNELS_DELTA_RULE_ACT_CUH

#include "kernels/common.cuh"

__device__ __forceinline__ float dr_sigmoid(float x) {
    const float e = expf(-fabsf(x));
    return (x >= 0.f ? 1.f : e) / (1.f + e);
}

__device__ __forceinline__ float dr_softplus(float x) {
    const float l = log1pf(expf(-fabsf(x)));
    return x > 0.f ? x + l : l;
}

#endif
