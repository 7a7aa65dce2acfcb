// The grouped expert GLU MLP (model/ops/moe/experts.c is the reference; docs/hybrid.md,
// "Routed and shared experts" and "Dropless permutation and grouped expert FFN") on tensor
// cores through grouped_gemm.cuh, no cuBLAS. Layouts (bf16, row-major): xp, yp, dyp, dxp
// (rows, C); hp, dhp (rows, 2M) rows [gate | up]; ap, dap (rows, M); w13 (E, 2M, C);
// w2 (E, C, M); rows = offsets[E], expert e owns sorted rows [offsets[e], offsets[e+1]).
// The row counts live on the device only (the plan is never read back): the row GEMMs run a
// fixed grid (x: gg_grid_x blocks, y: column tiles) whose blocks walk the list of row
// tiles (expert by expert, GG_BM rows each, the last one of an expert partial) with a
// stride of gridDim.x, each tile computed by one block; the weight gradients run one block
// per (expert, tile of the gradient) that reduces over all the expert's rows in order and
// adds once into the bf16 gradient (fp32 sum, then one rounding): no atomics, deterministic.
// An expert with no rows writes nothing. The GLU runs as a separate elementwise pass (the
// equations of model/ops/norm_glu/glu.c, in fp32 as kernels/norm_glu/glu.cu).
#include "kernels/common.cuh"
#include "kernels/moe/grouped_gemm.cuh"

// Y (rows, n_out) = X (rows, kd) W_e^T, W_e stored (n_out, kd) (W_T = false) or (kd, n_out)
// (W_T = true); blockIdx.y = the column tile.
template <bool W_T, bool VEC>
__global__ void __launch_bounds__(GG_THREADS, GG_BLOCKS_PER_SM)
    rows_gemm_kernel(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd) {
    DYNAMIC_SMEM(bf16, smem);  // GG_SMEM_BYTES: the tile's ring, then its epilogue
    const int n0 = blockIdx.y * GG_BN, n_lim = min(GG_BN, n_out - n0);
    for (int tile = blockIdx.x;; tile += gridDim.x) {
        // this tile's expert and rows (the same in every thread: the loop exit is uniform)
        int e = 0, base = 0, r0 = 0, m_lim = 0;
        for (; e < E; e++) {
            const int c = offsets[e + 1] - offsets[e], nt = (c + GG_BM - 1) / GG_BM;
            if (tile < base + nt) {
                r0 = offsets[e] + (tile - base) * GG_BM;
                m_lim = min(GG_BM, offsets[e + 1] - r0);
                break;
            }
            base += nt;
        }
        if (e == E) return;
        const bf16 *We = W + (size_t)e * n_out * kd;
        const bf16 *B = W_T ? We + n0 : We + (size_t)n0 * kd;
        float acc[GG_MI][GG_NI][4];
        gg_tile<false, W_T, VEC>(acc, smem, X + (size_t)r0 * kd, kd, B, W_T ? n_out : kd, m_lim, n_lim, kd);
        gg_epilogue<false, VEC>(acc, smem, Y + (size_t)r0 * n_out + n0, n_out, m_lim, n_lim);
    }
}

// dW_e (P, Q) += G_e^T X_e over the expert's rows: G (rows, P), X (rows, Q), both read
// transposed (the reduction runs along their rows); grid (Q tiles, P tiles, E)
template <bool VEC>
__global__ void __launch_bounds__(GG_THREADS, GG_BLOCKS_PER_SM)
    wgrad_kernel(bf16 *dW, const bf16 *G, const bf16 *X, const int *offsets, int P, int Q) {
    DYNAMIC_SMEM(bf16, smem);
    const int e = blockIdx.z, r0 = offsets[e], rows = offsets[e + 1] - r0;
    if (rows <= 0) return;  // exactly nothing added
    const int m0 = blockIdx.y * GG_BM, n0 = blockIdx.x * GG_BN;
    const int m_lim = min(GG_BM, P - m0), n_lim = min(GG_BN, Q - n0);
    float acc[GG_MI][GG_NI][4];
    gg_tile<true, true, VEC>(acc, smem, G + (size_t)r0 * P + m0, P, X + (size_t)r0 * Q + n0, Q, m_lim, n_lim, rows);
    gg_epilogue<true, VEC>(acc, smem, dW + (size_t)e * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
}

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + __expf(-x)); }

// ap = act(hp) over rows = offsets[E] (kind 0 SwiGLU, 1 SiTU)
__global__ void experts_glu_forward_kernel(bf16 *ap, const bf16 *hp, const int *offsets, int E, int M, int kind,
                                           float beta, float lbeta) {
    const size_t n = (size_t)offsets[E] * M;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / M, c = i % M;
        const float g = __bfloat162float(hp[row * 2 * M + c]), u = __bfloat162float(hp[row * 2 * M + M + c]);
        float h;
        if (kind == 0) {
            h = g * sigm(g) * u;
        } else {
            const float a = beta * tanhf(g / beta) * sigm(g), cu = lbeta > 0.f ? lbeta * tanhf(u / lbeta) : u;
            h = a * cu;
        }
        ap[i] = __float2bfloat16(h);
    }
}

// dhp = d act(hp) / d hp * dap
__global__ void experts_glu_backward_kernel(bf16 *dhp, const bf16 *dap, const bf16 *hp, const int *offsets, int E,
                                            int M, int kind, float beta, float lbeta) {
    const size_t n = (size_t)offsets[E] * M;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t row = i / M, c = i % M;
        const float g = __bfloat162float(hp[row * 2 * M + c]), u = __bfloat162float(hp[row * 2 * M + M + c]);
        const float dh = __bfloat162float(dap[i]);
        float dg, du;
        if (kind == 0) {
            const float s = sigm(g);
            dg = dh * u * s * (1.f + g * (1.f - s));
            du = dh * g * s;
        } else {
            const float tau = tanhf(g / beta), s = sigm(g);
            const float a = beta * tau * s, da = (1.f - tau * tau) * s + beta * tau * s * (1.f - s);
            float cu = u, dc = 1.f;
            if (lbeta > 0.f) {
                const float kappa = tanhf(u / lbeta);
                cu = lbeta * kappa;
                dc = 1.f - kappa * kappa;
            }
            dg = dh * cu * da;
            du = dh * a * dc;
        }
        dhp[row * 2 * M + c] = __float2bfloat16(dg);
        dhp[row * 2 * M + M + c] = __float2bfloat16(du);
    }
}

// the row GEMMs' fixed grid.x: enough blocks to fill the GPU (GG_BLOCKS_PER_SM per SM) with
// the column tiles. Under the emulator, 3 blocks: the emulated shapes then have more row
// tiles than blocks, so the tile walk (a block taking tiles x, x + 3, ...) is what the
// emulated test checks.
static unsigned gg_grid_x(int n_out) {
#ifdef HYBRID_CUDA_EMU
    (void)n_out;
    return 3;
#endif
    int ny = (n_out + GG_BN - 1) / GG_BN;
    int gx = (GG_BLOCKS_PER_SM * g_cuda.sm_count + ny - 1) / ny;
    return (unsigned)(gx < 1 ? 1 : gx);
}

// the 16-byte paths' conditions (grouped_gemm.cuh, "VEC"): pointers 16-byte aligned, every
// leading dimension and tile limit along a contiguous dimension a multiple of 8. The configs'
// widths (C, M) all are; a parameter tensor at an offset that is not 16-byte aligned takes the
// element-by-element path (correct, slower).
static int gg_vec_ok(const void *a, const void *b, const void *c, int d0, int d1) {
    return is_aligned16(a) && is_aligned16(b) && is_aligned16(c) && d0 % 8 == 0 && d1 % 8 == 0;
}

template <bool W_T>
static void rows_gemm(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd) {
    if (n_out <= 0) return;
    const dim3 grid(gg_grid_x(n_out), (n_out + GG_BN - 1) / GG_BN);
    if (gg_vec_ok(Y, X, W, n_out, kd))
        launch_kernel(rows_gemm_kernel<W_T, true>, grid, dim3(GG_THREADS), GG_SMEM_BYTES, Y, X, W, offsets, E, n_out,
                      kd);
    else
        launch_kernel(rows_gemm_kernel<W_T, false>, grid, dim3(GG_THREADS), GG_SMEM_BYTES, Y, X, W, offsets, E, n_out,
                      kd);
}

// One block per (expert, gradient tile), reducing over all the expert's rows: the sum order
// is fixed and the gradient is read and written once, with no atomics and no partial-sum
// buffer. Parallelism: E ceil(P/128) ceil(Q/128) blocks, 384 (dW13) and 192 (dW2) at KL-S
// (E 16, C 768, M 256), thousands at the large shape, against 2 x 132 block slots on an
// H200; each block streams c_e / 32 k-steps (about 256 at KL-S), so the fill is the only
// loss (dW2 at KL-S: 192 blocks on 264 slots). Splitting the rows (split-k into fp32 partials,
// then a fixed-order sum) would fill it, at the price of a second pass; not done until measured.
static void wgrad(bf16 *dW, const bf16 *G, const bf16 *X, const int *offsets, int E, int P, int Q) {
    if (P <= 0 || Q <= 0) return;
    const dim3 grid((Q + GG_BN - 1) / GG_BN, (P + GG_BM - 1) / GG_BM, E);
    if (gg_vec_ok(dW, G, X, P, Q))
        launch_kernel(wgrad_kernel<true>, grid, dim3(GG_THREADS), GG_SMEM_BYTES, dW, G, X, offsets, P, Q);
    else
        launch_kernel(wgrad_kernel<false>, grid, dim3(GG_THREADS), GG_SMEM_BYTES, dW, G, X, offsets, P, Q);
}

static int act_kind(GluAct act) {
    if (act.kind != GLU_SWIGLU && act.kind != GLU_SITU) die("moe experts: unknown activation kind %d", (int)act.kind);
    return (int)act.kind;
}

void cuda_moe_experts_forward(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                              const int *offsets, int E, int C, int M, GluAct act) {
    PROFILE("moe_experts_fwd");
    const int kind = act_kind(act);
    if (E <= 0) return;
    // (the PROFILE parts: HYBRID_CUDA_PROFILE=1 times each kernel; "moe_experts/gemm_*" are the
    // grouped GEMMs that tests/gpu/bench_moe.c compares with dense cuBLAS GEMMs of the same FLOPs)
    {
        PROFILE("moe_experts/gemm_fwd13");
        rows_gemm<false>((bf16 *)hp, (const bf16 *)xp, (const bf16 *)w13, offsets, E, 2 * M, C);
    }
    {
        PROFILE("moe_experts/glu_fwd");
        launch_kernel(experts_glu_forward_kernel, dim3(4 * g_cuda.sm_count), dim3(256), 0, (bf16 *)ap,
                      (const bf16 *)hp, offsets, E, M, kind, (float)act.beta, (float)act.linear_beta);
    }
    {
        PROFILE("moe_experts/gemm_fwd2");
        rows_gemm<false>((bf16 *)yp, (const bf16 *)ap, (const bf16 *)w2, offsets, E, C, M);
    }
}

void cuda_moe_experts_backward(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                               const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                               const int *offsets, int E, int C, int M, GluAct act) {
    PROFILE("moe_experts_bwd");
    const int kind = act_kind(act);
    if (E <= 0) return;
    {
        PROFILE("moe_experts/gemm_dgrad2");
        rows_gemm<true>((bf16 *)dap, (const bf16 *)dyp, (const bf16 *)w2, offsets, E, M, C);  // dap = dyp W2_e
    }
    {
        PROFILE("moe_experts/gemm_wgrad2");
        wgrad((bf16 *)dw2, (const bf16 *)dyp, (const bf16 *)ap, offsets, E, C, M);  // dW2_e += dyp^T ap
    }
    {
        PROFILE("moe_experts/glu_bwd");
        launch_kernel(experts_glu_backward_kernel, dim3(4 * g_cuda.sm_count), dim3(256), 0, (bf16 *)dhp,
                      (const bf16 *)dap, (const bf16 *)hp, offsets, E, M, kind, (float)act.beta,
                      (float)act.linear_beta);
    }
    {
        PROFILE("moe_experts/gemm_dgrad13");
        rows_gemm<true>((bf16 *)dxp, (const bf16 *)dhp, (const bf16 *)w13, offsets, E, C, 2 * M);  // dxp = dhp W13_e
    }
    {
        PROFILE("moe_experts/gemm_wgrad13");
        wgrad((bf16 *)dw13, (const bf16 *)dhp, (const bf16 *)xp, offsets, E, 2 * M, C);  // dW13_e += dhp^T xp
    }
}
