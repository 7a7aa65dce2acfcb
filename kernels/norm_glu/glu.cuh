// The gated linear units' kernels (model/ops/norm_glu/glu.c gives the equations), shared by the
// dense GLU (kernels/norm_glu/glu.cu: N rows, known on the host) and the MoE experts' GLU pass
// (kernels/moe/experts.cu: offsets[E] rows, the routed rows, known only on the device; the
// plan is never read back). Layouts (bf16, row-major): inp (rows, 2H) rows [gate g | up u],
// out (rows, H); dinp as inp, dout as out. kind 0 SwiGLU, 1 SiTU (beta; lbeta, its
// linear_beta: 0 leaves u linear). Math in fp32; grid-stride loops, any grid: the bits do not
// depend on it. The backward recomputes from inp.
// The row count is the kernels' template argument Rows: an int (the count itself) or a
// const int * (where the device holds it; every thread reads it).
#ifndef HYBRID_KERNELS_NORM_GLU_GLU_CUH
#define HYBRID_KERNELS_NORM_GLU_GLU_CUH

#include "kernels/common.cuh"

__device__ __forceinline__ size_t glu_rows(int n) { return (size_t)n; }
__device__ __forceinline__ size_t glu_rows(const int *n) { return (size_t)*n; }

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

// The per-element math, shared by the scalar and the vector kernels (so both give the same bits).
__device__ __forceinline__ float glu_fwd_elem(float g, float u, int kind, float beta, float lbeta) {
    if (kind == 0) return g * sigmoidf_(g) * u;
    float a = beta * tanhf(g / beta) * sigmoidf_(g);
    float cu = lbeta > 0.f ? lbeta * tanhf(u / lbeta) : u;
    return a * cu;
}

__device__ __forceinline__ void glu_bwd_elem(float g, float u, float dh, int kind, float beta, float lbeta, float &dg,
                                             float &du) {
    if (kind == 0) {
        float s = sigmoidf_(g);
        dg = dh * u * s * (1.f + g * (1.f - s));
        du = dh * g * s;
        return;
    }
    float tau = tanhf(g / beta), s = sigmoidf_(g);
    float a = beta * tau * s;
    float da = (1.f - tau * tau) * s + beta * tau * s * (1.f - s);
    float cu, dc;
    if (lbeta > 0.f) {
        float kappa = tanhf(u / lbeta);
        cu = lbeta * kappa;
        dc = 1.f - kappa * kappa;
    } else {
        cu = u;
        dc = 1.f;
    }
    dg = dh * cu * da;
    du = dh * a * dc;
}

// Scalar kernels (any H, any alignment): one thread per output element, grid-stride.
template <typename Rows>
__global__ void glu_forward_kernel(bf16 *out, const bf16 *inp, Rows rows, int H, int kind, float beta, float lbeta) {
    size_t n = glu_rows(rows) * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / H, c = i % H;
        float g = __bfloat162float(inp[row * 2 * H + c]), u = __bfloat162float(inp[row * 2 * H + H + c]);
        out[i] = __float2bfloat16(glu_fwd_elem(g, u, kind, beta, lbeta));
    }
}

template <typename Rows>
__global__ void glu_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, Rows rows, int H, int kind,
                                    float beta, float lbeta) {
    size_t n = glu_rows(rows) * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / H, c = i % H;
        float g = __bfloat162float(inp[row * 2 * H + c]), u = __bfloat162float(inp[row * 2 * H + H + c]);
        float dg, du;
        glu_bwd_elem(g, u, __bfloat162float(dout[i]), kind, beta, lbeta, dg, du);
        dinp[row * 2 * H + c] = __float2bfloat16(dg);
        dinp[row * 2 * H + H + c] = __float2bfloat16(du);
    }
}

// Vector kernels (H % 8 == 0, 16-byte aligned buffers: glu_vec_ok): a thread takes 8
// consecutive columns of one row, g and u as two 16-byte loads and the result as 16-byte
// stores; the flat index over (row, 8-column group) is split once per 8 elements, not per
// element. The scalar kernels' 2-byte accesses and 64-bit division per element ran these
// passes at ~1.8 TB/s (the dense GLU) and ~1.1 TB/s (the experts' at KL-S) on the H200.
template <typename Rows>
__global__ void glu_forward_vec_kernel(bf16 *out, const bf16 *inp, Rows rows, int H, int kind, float beta,
                                       float lbeta) {
    const int groups = H / 8;
    const size_t n = glu_rows(rows) * groups;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / groups, c = (i % groups) * 8;
        float g[8], u[8], h[8];
        load8(inp + row * 2 * H + c, g);
        load8(inp + row * 2 * H + H + c, u);
#pragma unroll
        for (int j = 0; j < 8; j++) h[j] = glu_fwd_elem(g[j], u[j], kind, beta, lbeta);
        store8(out + row * H + c, h);
    }
}

template <typename Rows>
__global__ void glu_backward_vec_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, Rows rows, int H, int kind,
                                        float beta, float lbeta) {
    const int groups = H / 8;
    const size_t n = glu_rows(rows) * groups;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / groups, c = (i % groups) * 8;
        float g[8], u[8], dh[8], dg[8], du[8];
        load8(inp + row * 2 * H + c, g);
        load8(inp + row * 2 * H + H + c, u);
        load8(dout + row * H + c, dh);
#pragma unroll
        for (int j = 0; j < 8; j++) glu_bwd_elem(g[j], u[j], dh[j], kind, beta, lbeta, dg[j], du[j]);
        store8(dinp + row * 2 * H + c, dg);
        store8(dinp + row * 2 * H + H + c, du);
    }
}

// the vector kernels' conditions: H % 8 == 0 and every buffer (c may be NULL) 16-byte aligned
static inline int glu_vec_ok(const void *a, const void *b, const void *c, int H) {
    return H % 8 == 0 && is_aligned16(a) && is_aligned16(b) && (!c || is_aligned16(c));
}

#endif
