// One warp per row of D = 32 K bf16 values (kernels/delta_rule/gated_rmsnorm.cu, layer_ops.cu):
// a lane holds either the strided set of the row (elements lane + 32 k, k < K, in that order:
// the set whose per-lane partial sums fix the bits of a warp_sum over the row) or the contiguous
// set (elements K lane + k), loaded and stored as one K-bf16 vector (K = 2, 4, 8). row_to_strided
// moves values from the contiguous to the strided layout, so a row sum can keep the strided
// set's order while the loads are vectors.
#ifndef HYBRID_KERNELS_DELTA_RULE_ROW_VEC_CUH
#define HYBRID_KERNELS_DELTA_RULE_ROW_VEC_CUH

#include "kernels/common.cuh"

template <int K> struct RowRaw { typedef uint4 T; };  // K bf16 as one load (K = 8: 16 bytes)
template <> struct RowRaw<4> { typedef uint2 T; };
template <> struct RowRaw<2> { typedef unsigned T; };

// the K floats of a loaded vector
template <int K> __device__ __forceinline__ void row_unpack(float *v, const typename RowRaw<K>::T &u) {
    const bf16 *h = (const bf16 *)&u;
#pragma unroll
    for (int k = 0; k < K; k++) v[k] = __bfloat162float(h[k]);
}

template <int K> __device__ __forceinline__ void row_load(float *v, const bf16 *p) {
    row_unpack<K>(v, *(const typename RowRaw<K>::T *)p);
}

template <int K> __device__ __forceinline__ void row_store(bf16 *p, const float *v) {
    typename RowRaw<K>::T u;
    bf16 *h = (bf16 *)&u;
#pragma unroll
    for (int k = 0; k < K; k++) h[k] = __float2bfloat16(v[k]);
    *(typename RowRaw<K>::T *)p = u;
}

// v[j] at runtime index j < K
template <int K> __device__ __forceinline__ float row_pick(const float *v, int j) {
    float r = v[0];
#pragma unroll
    for (int k = 1; k < K; k++) r = j == k ? v[k] : r;
    return r;
}

// v[k] of element K lane + k in, out[k] of element lane + 32 k (k < K, D = 32 K). Round j: lane L
// reads the element of k = (L % K + j) % K from lane L / K + (32 / K) k, slot L % K; each lane is
// read by exactly one lane a round, so it sends slot (lane / (32 / K) - j) % K.
template <int K> __device__ __forceinline__ void row_to_strided(float *out, const float *v) {
    const int lane = threadIdx.x & 31, G = 32 / K, q = lane & (K - 1);
    float got[K];
#pragma unroll
    for (int j = 0; j < K; j++) {
        const float send = row_pick<K>(v, ((lane / G) - j) & (K - 1));
        got[j] = __shfl_sync(0xffffffffu, send, lane / K + G * ((q + j) & (K - 1)));
    }
#pragma unroll
    for (int k = 0; k < K; k++) out[k] = row_pick<K>(got, (k - q) & (K - 1));
}

// the lane's values in the strided layout: moved (VEC) or copied
template <int K, bool VEC> __device__ __forceinline__ void row_strided(float *out, const float *v) {
    if (VEC) {
        row_to_strided<K>(out, v);
    } else {
#pragma unroll
        for (int k = 0; k < K; k++) out[k] = v[k];
    }
}

// The L2 norm of a row held as contiguous sets (xv, K values a lane): yv = xv rstd, rstd = 1 /
// sqrt(sum x^2 + eps) (returned), the squares summed over the strided set in its order and then
// over the warp. l2norm_fwd_vec_kernel (layer_ops.cu) and the fused convolution + L2 norm
// (short_conv.cu) share it, so they give the same bits.
template <int K> __device__ __forceinline__ float row_l2norm(float *yv, const float *xv, float eps) {
    float xs[K];
    row_to_strided<K>(xs, xv);
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++) ss += xs[k] * xs[k];
    const float rs = rsqrtf(warp_sum(ss) + eps);
#pragma unroll
    for (int k = 0; k < K; k++) yv[k] = xv[k] * rs;
    return rs;
}

// K = 2, 4, 8 (one vector a lane), D = 32 K, and every pointer 2K-byte aligned (NULL passes)
static inline bool row_vec_ok(int D, const void *a, const void *b, const void *c = NULL, const void *d = NULL,
                              const void *e = NULL, const void *f = NULL) {
    const int K = D / 32;
    if (D % 32 || (K != 2 && K != 4 && K != 8)) return false;
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e | (uintptr_t)f) % (2 * K)) == 0;
}

#endif
