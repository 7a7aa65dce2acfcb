// Cached (decode-time) causal attention (model/ops/core/attention_cached.c): the last Tq
// rows of a KV cache of Tc packed bf16 rows qkv (Tc, 3C) attend to the rows up to
// themselves; out (Tq, C). Decoding is one new row at a time, so this is a latency op:
// one warp per (query row, head) walks the keys in order with an online softmax (running
// max m, denominator l, and the weighted value sum acc rescaled whenever m grows), the
// head's channels split over the lanes (at most 8 per lane: head size <= 256). fp32
// throughout; the order of every sum is fixed, so results are deterministic.
#include <math.h>

#include "kernels/common.cuh"

#define AC_MAX_PER_LANE 8

__global__ void attention_cached_kernel(bf16 *out, const bf16 *qkv, int Tq, int Tc, int C, int NH) {
    const int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32), lane = threadIdx.x & 31;
    if (warp >= Tq * NH) return;  // whole warps: blockDim is a multiple of 32
    const int r = warp / NH, h = warp % NH, hs = C / NH, i = Tc - Tq + r;
    const size_t C3 = 3 * (size_t)C;
    const bf16 *q = qkv + (size_t)i * C3 + (size_t)h * hs;
    float qv[AC_MAX_PER_LANE], acc[AC_MAX_PER_LANE];
#pragma unroll
    for (int t = 0; t < AC_MAX_PER_LANE; t++) {
        const int d = lane + 32 * t;
        qv[t] = d < hs ? __bfloat162float(q[d]) : 0.f;
        acc[t] = 0.f;
    }
    const float scale = rsqrtf((float)hs);
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j <= i; j++) {
        const bf16 *k = qkv + (size_t)j * C3 + C + (size_t)h * hs, *v = k + C;
        float s = 0.f;
#pragma unroll
        for (int t = 0; t < AC_MAX_PER_LANE; t++) {
            const int d = lane + 32 * t;
            if (d < hs) s += qv[t] * __bfloat162float(k[d]);
        }
        s = warp_sum(s) * scale;
        const float mn = fmaxf(m, s), corr = __expf(m - mn), p = __expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int t = 0; t < AC_MAX_PER_LANE; t++) {
            const int d = lane + 32 * t;
            if (d < hs) acc[t] = acc[t] * corr + p * __bfloat162float(v[d]);
        }
        m = mn;
    }
    bf16 *o = out + (size_t)r * C + (size_t)h * hs;
#pragma unroll
    for (int t = 0; t < AC_MAX_PER_LANE; t++) {
        const int d = lane + 32 * t;
        if (d < hs) o[d] = __float2bfloat16(acc[t] / l);
    }
}

void cuda_attention_cached(real *out, const real *qkv, int Tq, int Tc, int C, int NH) {
    PROFILE("attention_cached");
    if (NH <= 0 || C % NH) die("attention_cached: C = %d is not a multiple of the head count %d", C, NH);
    if (C / NH > 32 * AC_MAX_PER_LANE)
        die("attention_cached: head size %d exceeds %d", C / NH, 32 * AC_MAX_PER_LANE);
    if (Tq < 1 || Tq > Tc) die("attention_cached: %d query rows for a cache of %d rows", Tq, Tc);
    const int threads = 128, warps = Tq * NH;
    const unsigned grid = (unsigned)((warps * 32 + threads - 1) / threads);
    launch_kernel(attention_cached_kernel, grid, threads, 0, (bf16 *)out, (const bf16 *)qkv, Tq, Tc, C, NH);
}
