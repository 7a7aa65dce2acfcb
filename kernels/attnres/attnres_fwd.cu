// The Block AttnRes op forward on CUDA (model/ops/attnres/attnres.h, attnres_forward;
// docs/hybrid.md, "AttnRes op forward"):
//   q = w * gamma;  rho_i = (mean_c V_i^2 + eps)^(-1/2);  z_i = rho_i (V_i . q)
//   p = softmax_i(z);  out = sum_i p_i V_i                          (saves p, z, rho: fp32)
// One warp per token; each source is read once (docs/hybrid.md, "AttnRes cost and
// precision": the op is memory-bound): the row's ||V_i||^2 and V_i . q come from the
// registers that then enter the weighted sum, which is an online softmax (the running sum
// rescaled by exp(m_old - m_new) when the running maximum m grows), so out never waits for
// the last logit. Layout and lane ownership: attnres.cuh.
#include "kernels/attnres/attnres.cuh"

#define AR_FWD_WARPS 8  // token rows per block

template <int W, int NV>
__global__ void ar_fwd_kernel(bf16 *out, float *probs, float *logits, float *rstd, ArSrcs srcs, int n, const bf16 *w,
                              const bf16 *gamma, int N, int C, float eps) {
    const int lane = threadIdx.x & 31, row = blockIdx.x * AR_FWD_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;  // the whole warp
    float q[NV][W], acc[NV][W];
    ar_query<W, NV>(q, acc, w, gamma, lane, C);
    const size_t st = (size_t)row * n;  // this row's statistics
    float m = -INFINITY, s = 0.f;       // running max of z and sum of exp(z - m)
    for (int i = 0; i < n; i++) {
        const bf16 *V = srcs.p[i] + (size_t)row * C;
        float v[NV][W], ss = 0.f, vq = 0.f;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            ar_load<W>(V, j, lane, C, v[j]);
#pragma unroll
            for (int k = 0; k < W; k++) {
                ss += v[j][k] * v[j][k];
                vq += v[j][k] * q[j][k];
            }
        }
        ss = warp_sum(ss);
        vq = warp_sum(vq);
        const float rho = rsqrtf(ss / C + eps), z = rho * vq;
        if (lane == ar_owner(i)) {
            logits[st + i] = z;
            rstd[st + i] = rho;
        }
        const float mn = fmaxf(m, z), scale = expf(m - mn), e = expf(z - mn);  // scale = 0 at i = 0
        s = s * scale + e;
#pragma unroll
        for (int j = 0; j < NV; j++)
#pragma unroll
            for (int k = 0; k < W; k++) acc[j][k] = acc[j][k] * scale + e * v[j][k];
        m = mn;
    }
    const float inv = 1.f / s;
#pragma unroll
    for (int j = 0; j < NV; j++) {
#pragma unroll
        for (int k = 0; k < W; k++) acc[j][k] *= inv;
        ar_store<W>(out + (size_t)row * C, j, lane, C, acc[j]);
    }
    // each lane reads back only the logits it wrote itself
    for (int i = lane; i < n; i += 32) probs[st + i] = expf(logits[st + i] - m) * inv;
}

template <int W, int NV>
static void ar_fwd_launch(bf16 *out, float *probs, float *logits, float *rstd, const ArSrcs &srcs, int n,
                          const bf16 *w, const bf16 *gamma, int N, int C, float eps) {
    launch_kernel(ar_fwd_kernel<W, NV>, dim3((unsigned)((N + AR_FWD_WARPS - 1) / AR_FWD_WARPS)),
                  dim3(32 * AR_FWD_WARPS), 0, out, probs, logits, rstd, srcs, n, w, gamma, N, C, eps);
}

extern "C" void cuda_attnres_forward(real *out, real *probs, real *logits, real *rstd, const real *const *srcs, int n,
                                     const real *w, const real *gamma, int N, int C, double eps) {
    PROFILE("attnres_fwd");
    if (n < 1 || n > AR_MAX_SRC) die("cuda_attnres_forward: %d sources outside [1, %d]", n, AR_MAX_SRC);
    if (N <= 0) return;
    ArSrcs s;
    int vec = is_aligned16(out) && is_aligned16(w) && is_aligned16(gamma);
    for (int i = 0; i < n; i++) {
        s.p[i] = (const bf16 *)srcs[i];
        vec = vec && is_aligned16(srcs[i]);
    }
    for (int i = n; i < AR_MAX_SRC; i++) s.p[i] = NULL;
    AR_DISPATCH(C, vec, "cuda_attnres_forward", ar_fwd_launch, (bf16 *)out, (float *)probs, (float *)logits,
                (float *)rstd, s, n, (const bf16 *)w, (const bf16 *)gamma, N, C, (float)eps);
}
