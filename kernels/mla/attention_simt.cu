// Causal attention with strided q, k, v and any head widths up to MLA_SIMT_MAXD, on plain
// fp32 lanes (the fallback of attention.cu where the tensor-core kernels of attention_mma.cu do
// not apply: widths or strides not multiples of 8, wider heads; also the cross-check of the
// tensor-core path in tests/gpu/test_mla.c). Same equations (docs/hybrid.md, "Causal
// attention with a stored logsumexp"): one warp per row, lane l owning dims l, l + 32, ...
//   forward  one warp per query row: online softmax over its keys j <= i, one key at a time.
//   backward one warp per query row for dq (keys j <= i in order), then one warp per key row
//            for dk and dv (queries i >= j in order): one writer per element, deterministic.
#include <math.h>

#include "kernels/mla/attention.cuh"

#define SIMT_M (MLA_SIMT_MAXD / 32)  // dims per lane
#define SIMT_WARPS 8                 // rows per block

// x[d] of a row for the lane's dims d = lane + 32 m (0 past n)
__device__ __forceinline__ void simt_load(float x[SIMT_M], const bf16 *row, int n, int lane) {
#pragma unroll
    for (int m = 0; m < SIMT_M; m++) {
        const int d = lane + 32 * m;
        x[m] = d < n ? __bfloat162float(row[d]) : 0.f;
    }
}

__device__ __forceinline__ float simt_dot(const float x[SIMT_M], const bf16 *row, int n, int lane) {
    float s = 0.f;
#pragma unroll
    for (int m = 0; m < SIMT_M; m++) {
        const int d = lane + 32 * m;
        if (d < n) s += x[m] * __bfloat162float(row[d]);
    }
    return warp_sum(s);
}

__device__ __forceinline__ void simt_store(bf16 *row, const float x[SIMT_M], float mul, int n, int lane) {
#pragma unroll
    for (int m = 0; m < SIMT_M; m++) {
        const int d = lane + 32 * m;
        if (d < n) row[d] = __float2bfloat16(x[m] * mul);
    }
}

__global__ void mla_attn_fwd_simt_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                         AttnDev a) {
    const size_t idx = (size_t)blockIdx.x * SIMT_WARPS + (threadIdx.x >> 5);
    if (idx >= (size_t)a.B * a.NH * a.T) return;  // whole warps
    const int lane = threadIdx.x & 31, T = a.T, i = (int)(idx % T), bh = (int)(idx / T), b = bh / a.NH,
              h = bh % a.NH;
    const size_t r0 = (size_t)b * T;
    float qi[SIMT_M], o[SIMT_M];
    simt_load(qi, q + (r0 + i) * a.q_row + (size_t)h * a.q_head, a.dqk, lane);
    for (int m = 0; m < SIMT_M; m++) o[m] = 0.f;
    float mx = -INFINITY, l = 0.f;
    for (int j = 0; j <= i; j++) {
        const float s = simt_dot(qi, k + (r0 + j) * a.k_row + (size_t)h * a.k_head, a.dqk, lane) * a.scale;
        const bf16 *vj = v + (r0 + j) * a.v_row + (size_t)h * a.v_head;
        const float mn = fmaxf(mx, s), c = expf(mx - mn), p = expf(s - mn);
        l = l * c + p;
#pragma unroll
        for (int m = 0; m < SIMT_M; m++) {
            const int d = lane + 32 * m;
            o[m] = o[m] * c + (d < a.dv ? p * __bfloat162float(vj[d]) : 0.f);
        }
        mx = mn;
    }
    simt_store(out + (r0 + i) * a.NH * a.dv + (size_t)h * a.dv, o, 1.f / l, a.dv, lane);
    if (lane == 0) lse[(size_t)bh * T + i] = mx + logf(l);
}

// which = 0: dq of query row r (keys o <= r); which = 1: dk, dv of key row r (queries o >= r)
__global__ void mla_attn_bwd_simt_kernel(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
                                         const bf16 *k, const bf16 *v, const float *lse, const float *Dg, AttnDev a,
                                         int which) {
    const size_t idx = (size_t)blockIdx.x * SIMT_WARPS + (threadIdx.x >> 5);
    if (idx >= (size_t)a.B * a.NH * a.T) return;
    const int lane = threadIdx.x & 31, T = a.T, r = (int)(idx % T), bh = (int)(idx / T), b = bh / a.NH,
              h = bh % a.NH;
    const size_t r0 = (size_t)b * T, orow = (size_t)a.NH * a.dv;
    const float *L = lse + (size_t)bh * T, *D = Dg + (size_t)bh * T;
    auto qrow = [&](int t) { return q + (r0 + t) * a.q_row + (size_t)h * a.q_head; };
    auto krow = [&](int t) { return k + (r0 + t) * a.k_row + (size_t)h * a.k_head; };
    auto vrow = [&](int t) { return v + (r0 + t) * a.v_row + (size_t)h * a.v_head; };
    auto orow_ = [&](int t) { return dout + (r0 + t) * orow + (size_t)h * a.dv; };
    // which 0: x = q_r (dqk), y = dO_r (dv); which 1: x = k_r, y = v_r
    float x[SIMT_M], y[SIMT_M], acc1[SIMT_M], acc2[SIMT_M];
    simt_load(x, which ? krow(r) : qrow(r), a.dqk, lane);
    simt_load(y, which ? vrow(r) : orow_(r), a.dv, lane);
    for (int m = 0; m < SIMT_M; m++) acc1[m] = acc2[m] = 0.f;
    const int lo = which ? r : 0, hi = which ? T - 1 : r;
    for (int o = lo; o <= hi; o++) {
        // the other row: which 0 -> key/value row o; which 1 -> query/dO row o
        const bf16 *xo = which ? qrow(o) : krow(o), *yo = which ? orow_(o) : vrow(o);
        const int qi = which ? o : r;
        const float s = simt_dot(x, xo, a.dqk, lane) * a.scale, dp = simt_dot(y, yo, a.dv, lane);
        const float p = expf(s - L[qi]), ds = p * (dp - D[qi]);
#pragma unroll
        for (int m = 0; m < SIMT_M; m++) {
            const int d = lane + 32 * m;
            if (d < a.dqk) acc1[m] += ds * __bfloat162float(xo[d]);  // dq += ds k  |  dk += ds q
            if (which && d < a.dv) acc2[m] += p * __bfloat162float(yo[d]);  // dv += p dO
        }
    }
    if (!which) {
        simt_store(dq + (r0 + r) * a.q_row + (size_t)h * a.q_head, acc1, a.scale, a.dqk, lane);
    } else {
        simt_store(dk + (r0 + r) * a.k_row + (size_t)h * a.k_head, acc1, a.scale, a.dqk, lane);
        simt_store(dv + (r0 + r) * a.v_row + (size_t)h * a.v_head, acc2, 1.f, a.dv, lane);
    }
}

static unsigned simt_blocks(const AttnDev &a) {
    return (unsigned)(((size_t)a.B * a.NH * a.T + SIMT_WARPS - 1) / SIMT_WARPS);
}

void mla_attn_simt_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const AttnDev &a) {
    launch_kernel(mla_attn_fwd_simt_kernel, dim3(simt_blocks(a)), dim3(32 * SIMT_WARPS), 0, out, lse, q, k, v, a);
}

void mla_attn_simt_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                            const bf16 *v, const float *lse, const float *D, const AttnDev &a) {
    for (int which = 0; which < 2; which++)
        launch_kernel(mla_attn_bwd_simt_kernel, dim3(simt_blocks(a)), dim3(32 * SIMT_WARPS), 0, dq, dk, dv, dout, q,
                      k, v, lse, D, a, which);
}
