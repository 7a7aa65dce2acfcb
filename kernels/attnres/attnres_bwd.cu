// The Block AttnRes op backward on CUDA (model/ops/attnres/attnres.h, attnres_backward;
// docs/hybrid.md, "AttnRes op backward"):
//   pi_i = dout . V_i;  dz_i = p_i (pi_i - sum_j p_j pi_j)
//   dV_i += p_i dout + dz_i rho_i q - (dz_i z_i rho_i^2 / C) V_i       (bf16, accumulated)
//   dq = sum_tokens sum_i dz_i rho_i V_i;  dw += dq * gamma;  dgamma += dq * w   (fp32: the
//   parameter gradients, model/backend.h, `grad_size`)
// One warp per token row, blocks of AR_BWD_WARPS warps over a fixed chunk of rows: pass 1
// reads every V_i for pi_i (kept in `work` by the source's owner lane, attnres.cuh), pass 2
// reads V_i again for dV_i and adds dz_i rho_i V_i into the warp's dq registers; then the
// block adds its warps' dq in warp order into one fp32 partial per chunk, and
// ar_dq_reduce_kernel adds the chunks in order (deterministic: no atomics; the scheme of
// kernels/norm_rows.cuh). `work` ends holding dz_i rho_i, as the CPU op leaves it.
#include "kernels/attnres/attnres.cuh"

#define AR_BWD_WARPS 8
#define AR_ROWS_PER_CHUNK 32  // rows of one dq partial (4 per warp)
#define AR_MAX_CHUNKS 2048

template <int W, int NV>
__global__ void ar_bwd_kernel(ArDsrcs dsrcs, float *partial, float *work, const bf16 *dout, ArSrcs srcs, int n,
                              const bf16 *w, const bf16 *gamma, const float *probs, const float *logits,
                              const float *rstd, int N, int C, int rows_per_chunk) {
    DYNAMIC_SMEM(float, sh);  // C: the block's dq partial
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row0 = blockIdx.x * rows_per_chunk, row1 = min(row0 + rows_per_chunk, N);
    float q[NV][W], dq[NV][W];
    ar_query<W, NV>(q, dq, w, gamma, lane, C);
    for (int row = row0 + warp; row < row1; row += AR_BWD_WARPS) {
        const size_t st = (size_t)row * n, off = (size_t)row * C;
        float dh[NV][W];
#pragma unroll
        for (int j = 0; j < NV; j++) ar_load<W>(dout + off, j, lane, C, dh[j]);
        // pass 1: pi_i, and their mean under p
        float mean = 0.f;
        for (int i = 0; i < n; i++) {
            float v[NV][W], s = 0.f;
#pragma unroll
            for (int j = 0; j < NV; j++) {
                ar_load<W>(srcs.p[i] + off, j, lane, C, v[j]);
#pragma unroll
                for (int k = 0; k < W; k++) s += dh[j][k] * v[j][k];
            }
            s = warp_sum(s);
            mean += probs[st + i] * s;
            if (lane == ar_owner(i)) work[st + i] = s;
        }
        // pass 2: dV_i and the dq contributions
        for (int i = 0; i < n; i++) {
            const int own = ar_owner(i);
            const float pi = __shfl_sync(0xffffffffu, lane == own ? work[st + i] : 0.f, own);
            const float p = probs[st + i], z = logits[st + i], rho = rstd[st + i];
            const float dz = p * (pi - mean), a = dz * rho, b = dz * z * rho * rho / C;
            if (lane == own) work[st + i] = a;
            float v[NV][W];
#pragma unroll
            for (int j = 0; j < NV; j++) {
                ar_load<W>(srcs.p[i] + off, j, lane, C, v[j]);
#pragma unroll
                for (int k = 0; k < W; k++) dq[j][k] += a * v[j][k];
            }
            bf16 *dV = dsrcs.p[i];
            if (!dV) continue;  // the same for the whole warp
#pragma unroll
            for (int j = 0; j < NV; j++) {
                float g[W];
                ar_load<W>(dV + off, j, lane, C, g);
#pragma unroll
                for (int k = 0; k < W; k++) g[k] += p * dh[j][k] + a * q[j][k] - b * v[j][k];
                ar_store<W>(dV + off, j, lane, C, g);
            }
        }
    }
    // the warps' dq, added in warp order (each lane writes only its own channels)
    for (int wi = 0; wi < AR_BWD_WARPS; wi++) {
        if (warp == wi) {
#pragma unroll
            for (int j = 0; j < NV; j++) {
                const int c = (j * 32 + lane) * W;
                if (c >= C) continue;
#pragma unroll
                for (int k = 0; k < W; k++) sh[c + k] = wi ? sh[c + k] + dq[j][k] : dq[j][k];
            }
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) partial[(size_t)blockIdx.x * C + c] = sh[c];
}

// dq[c] = sum of the chunks' partials in chunk order; dw += dq gamma, dgamma += dq w (fp32)
__global__ void ar_dq_reduce_kernel(float *dw, float *dgamma, const float *partial, int chunks, const bf16 *w,
                                    const bf16 *gamma, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dq = 0.f;
    for (int k = 0; k < chunks; k++) dq += partial[(size_t)k * C + c];
    dw[c] += dq * __bfloat162float(gamma[c]);
    dgamma[c] += dq * __bfloat162float(w[c]);
}

template <int W, int NV>
static void ar_bwd_launch(const ArDsrcs &dsrcs, float *partial, float *work, const bf16 *dout, const ArSrcs &srcs,
                          int n, const bf16 *w, const bf16 *gamma, const float *probs, const float *logits,
                          const float *rstd, int N, int C, int chunks, int rows_per_chunk) {
    launch_kernel(ar_bwd_kernel<W, NV>, dim3((unsigned)chunks), dim3(32 * AR_BWD_WARPS), (size_t)C * sizeof(float),
                  dsrcs, partial, work, dout, srcs, n, w, gamma, probs, logits, rstd, N, C, rows_per_chunk);
}

extern "C" void cuda_attnres_backward(real *const *dsrcs, real *dw, real *dgamma, real *work, const real *dout,
                                      const real *const *srcs, int n, const real *w, const real *gamma,
                                      const real *probs, const real *logits, const real *rstd, int N, int C) {
    PROFILE("attnres_bwd");
    if (n < 1 || n > AR_MAX_SRC) die("cuda_attnres_backward: %d sources outside [1, %d]", n, AR_MAX_SRC);
    if (N <= 0) return;
    ArSrcs s;
    ArDsrcs d;
    int vec = is_aligned16(dout) && is_aligned16(w) && is_aligned16(gamma);
    for (int i = 0; i < n; i++) {
        s.p[i] = (const bf16 *)srcs[i];
        d.p[i] = (bf16 *)dsrcs[i];
        vec = vec && is_aligned16(srcs[i]) && is_aligned16(dsrcs[i]);  // NULL is aligned
    }
    for (int i = n; i < AR_MAX_SRC; i++) s.p[i] = NULL, d.p[i] = NULL;
    // fixed row chunks (they depend on N only, so the sums' order does too)
    int chunks = (N + AR_ROWS_PER_CHUNK - 1) / AR_ROWS_PER_CHUNK;
    if (chunks > AR_MAX_CHUNKS) chunks = AR_MAX_CHUNKS;
    const int per = (N + chunks - 1) / chunks;
    chunks = (N + per - 1) / per;
    float *partial = (float *)scratch_get((size_t)chunks * C * sizeof(float));
    AR_DISPATCH(C, vec, "cuda_attnres_backward", ar_bwd_launch, d, partial, (float *)work, (const bf16 *)dout, s, n,
                (const bf16 *)w, (const bf16 *)gamma, (const float *)probs, (const float *)logits,
                (const float *)rstd, N, C, chunks, per);
    launch_kernel(ar_dq_reduce_kernel, dim3((unsigned)((C + 127) / 128)), dim3(128), 0, (float *)dw, (float *)dgamma,
                  (const float *)partial, chunks, (const bf16 *)w, (const bf16 *)gamma, C);
}
