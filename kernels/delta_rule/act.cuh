// Scalar activations of the delta-rule family's kernels, in fp32, on the special-function unit.
#ifndef HYBRID_KERNELS_DELTA_RULE_ACT_CUH
#define HYBRID_KERNELS_DELTA_RULE_ACT_CUH

#include "kernels/common.cuh"

// dr_exp(x) = e^x on the special-function unit: x log2(e) rounded to fp32, then ex2.approx.ftz
// (two instructions; expf's exactly range-reduced form is eight on sm_90: FFMA.SAT, FFMA.RM,
// FADD, SHF, two FFMAs, MUFU.EX2, FMUL). The error it adds: ex2.approx's 2 ulp and the rounding
// of x log2(e), |x| 2^-24 relative in the result, the size of the rounding already in every
// exponent of the chunk kernels (a difference of two cumulative log-gates, each rounded to fp32: |x| up to
// ~100 in a chunk of strong gates). Results below 2^-126 flush to 0 (-inf gives 0, a NaN stays
// a NaN). docs/delta-rule.md, "CUDA kernels". The CPU emulator takes expf.
__device__ __forceinline__ float dr_exp(float x) {
#ifdef HYBRID_CUDA_EMU
    return expf(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
#endif
}

// Numerically stable sigmoid and softplus with the values of the CPU reference's branches
// (model/ops/delta_rule/internal.h lin_sigmoid, layer_ops.c softplus): no exp of a large
// positive argument. Each takes the one exponential its branch would, e = exp(-|x|) (-|x| is
// -x or x exactly, so the same argument), and selects afterwards:
//   sigmoid(x)  = 1 / (1 + e) for x >= 0, e / (1 + e) below,
//   softplus(x) = x + log1p(e) for x > 0, log1p(e) otherwise,
// without branches: those diverged within a warp on mixed signs and ran both sides (the short
// convolution's SiLU measured this first, session 13). One exponential of the same argument
// also lets the compiler share it between a sigmoid and a softplus of one x (the decay gate's
// backward). e is dr_exp's and the division __fdividef's (MUFU.RCP and a multiply, ~2 ulp; the
// denominator is in [1, 2]): expf and the IEEE division were ~20 of the ~28 instructions an
// element of the short convolution's SiLU (SASS, session 22), whose kernels were bound by
// their instruction issue (Nsight Compute); a few ulp of fp32 against the bf16 rounding of
// every value they feed. (Until session 22: expf and an IEEE division.)
__device__ __forceinline__ float dr_sigmoid(float x) {
    const float e = dr_exp(-fabsf(x));
    return __fdividef(x >= 0.f ? 1.f : e, 1.f + e);
}

__device__ __forceinline__ float dr_softplus(float x) {
    const float l = log1pf(dr_exp(-fabsf(x)));
    return x > 0.f ? x + l : l;
}

#endif
