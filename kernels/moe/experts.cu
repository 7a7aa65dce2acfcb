// The grouped expert GLU MLP (model/ops/moe/experts.c is the reference; docs/hybrid.md,
// "Routed and shared experts" and "Dropless permutation and grouped expert FFN") on tensor
// cores through grouped_gemm.cuh, no cuBLAS. Layouts (bf16, row-major): xp, yp, dyp, dxp
// (rows, C); hp, dhp (rows, 2M) rows [gate | up]; ap, dap (rows, M); w13 (E, 2M, C);
// w2 (E, C, M); rows = offsets[E], expert e owns sorted rows [offsets[e], offsets[e+1]).
// The row counts live on the device only (the plan is never read back): the row GEMMs run a
// fixed grid (gg_resident_blocks: the blocks resident at once) whose blocks walk the list of (row
// tile, column tile) pairs (row tiles expert by expert, GG_BM rows each, the last one of an
// expert partial) with a stride of the grid, each tile computed by one block. The weight
// gradients (fp32, as every parameter gradient: docs/cuda.md, "Precision"; dw13 and dw2 point to
// fp32 memory) run one block per (expert, tile of the gradient, split of the expert's rows):
// with one split (many experts or wide weights) the block reduces over all the expert's rows
// in order and adds once into the gradient (dW += tile, in fp32); with S > 1 splits
// (wgrad_splits: few experts, where one block per tile would leave SMs idle) each block writes
// its split's fp32 partial to scratch and wgrad_reduce_kernel sums the partials in split order
// and adds that sum once into the gradient. S depends on the shape only. No atomics anywhere:
// the results are the same bits run to run. An expert with no rows writes nothing.
// The GLU runs as a separate elementwise pass: the dense GLU's kernels (kernels/norm_glu/glu.cuh;
// the equations of model/ops/norm_glu/glu.c, in fp32), their row count offsets[E] read on the
// device.
// The default mode (HYBRID_MOE_GEMM=mixed) runs the forward's two GEMMs on ours and each of the
// backward's four on ours or on cuBLAS (its grouped batched GEMM for the data gradients, one
// cublasGemmEx per expert for the weight gradients) where gemm_on_cublas says
// (experts_cublas.h: the forward only issues the offsets' copy to the host; a backward that
// calls cuBLAS waits for it); HYBRID_MOE_GEMM=own runs all six on ours, HYBRID_MOE_GEMM=cublas
// the four row GEMMs on cuBLAS's grouped GEMM (the forward then copies the offsets once, one
// stream synchronization, and its backward reuses the copy) and the two weight gradients as one
// cublasGemmEx per expert (their fp32 output is no type cuBLAS's grouped GEMM takes:
// experts_cublas.h); the GLU passes are the same. On a GPU of compute capability 9.0
// (HYBRID_MOE_WGMMA=auto, the default) every GEMM of ours runs on the sm_90a warpgroup-MMA
// kernels (experts_wg.h; the same walks, splits and contracts), elsewhere on the mma.sync ones
// below.
#include "kernels/common.cuh"
#include "kernels/moe/experts_cublas.h"
#include "kernels/moe/experts_wg.h"
#include "kernels/moe/grouped_gemm.cuh"
#include "kernels/moe/grouped_walk.cuh"
#include "kernels/norm_glu/glu.cuh"

// Y (rows, n_out) = X (rows, kd) W_e^T, W_e stored (n_out, kd) (W_T = false) or (kd, n_out)
// (W_T = true). The tiles, linearly: tile L = (row tile L / ny, column tile L % ny), ny =
// ceil(n_out / GG_BN), the row tiles expert by expert (GG_BM rows each, an expert's last one
// partial); block b computes tiles b, b + gridDim.x, ... (the grid is what fits on the GPU at
// once, so no block waits for a slot: every block is resident from the start and the tiles
// spread over all of them to within one; consecutive blocks share a row tile, whose A rows
// are then read from L2).
template <bool W_T, bool VEC>
__global__ void __launch_bounds__(GG_THREADS, GG_BLOCKS_PER_SM)
    rows_gemm_kernel(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd) {
    DYNAMIC_SMEM(bf16, smem);  // GG_SMEM_BYTES: the tile's ring, then its epilogue
    const int ny = (n_out + GG_BN - 1) / GG_BN;
    int e, base, nt;  // (row tiles only increase along the walk)
    row_tiles_start<GG_BM>(offsets, e, base, nt);
    for (long L = blockIdx.x;; L += gridDim.x) {
        const int tile = (int)(L / ny), n0 = (int)(L % ny) * GG_BN;
        if (!row_tiles_seek<GG_BM>(tile, offsets, E, e, base, nt)) return;
        const int r0 = offsets[e] + (tile - base) * GG_BM, m_lim = min(GG_BM, offsets[e + 1] - r0);
        const int n_lim = min(GG_BN, n_out - n0);
        const bf16 *We = W + (size_t)e * n_out * kd;
        const bf16 *B = W_T ? We + n0 : We + (size_t)n0 * kd;
        float acc[GG_MI][GG_NI][4];
        gg_tile<false, W_T, VEC>(acc, smem, X + (size_t)r0 * kd, kd, B, W_T ? n_out : kd, m_lim, n_lim, kd);
        gg_epilogue<GG_STORE, VEC>(acc, smem, Y + (size_t)r0 * n_out + n0, n_out, m_lim, n_lim);
    }
}

// dW_e (P, Q) += G_e^T X_e over the expert's rows: G (rows, P), X (rows, Q), both read
// transposed (the reduction runs along their rows); grid (Q tiles, P tiles, E S).
// S == 1: the block reduces over all the expert's rows and adds into dW (fp32).
// S > 1: block (., ., e S + s) reduces over split s's rows and stores the fp32 partial at
//   ws + (e S + s) P Q (ws: (E, S, P, Q) fp32, row-major); an empty split stores nothing
//   (wgrad_reduce_kernel reads only the non-empty ones).
template <bool VEC>
__global__ void __launch_bounds__(GG_THREADS, GG_BLOCKS_PER_SM)
    wgrad_kernel(float *dW, float *ws, const bf16 *G, const bf16 *X, const int *offsets, int P, int Q, int S) {
    DYNAMIC_SMEM(bf16, smem);
    const int e = blockIdx.z / S;
    int r0;
    const int rows = wgrad_block_rows(offsets, e, blockIdx.z % S, S, &r0);
    if (rows <= 0) return;  // exactly nothing added (an empty expert; an empty split)
    const int m0 = blockIdx.y * GG_BM, n0 = blockIdx.x * GG_BN;
    const int m_lim = min(GG_BM, P - m0), n_lim = min(GG_BN, Q - n0);
    float acc[GG_MI][GG_NI][4];
    gg_tile<true, true, VEC>(acc, smem, G + (size_t)r0 * P + m0, P, X + (size_t)r0 * Q + n0, Q, m_lim, n_lim, rows);
    if (S == 1)
        gg_epilogue<GG_ADD, VEC>(acc, smem, dW + (size_t)e * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
    else
        gg_epilogue<GG_F32, VEC>(acc, smem, ws + (size_t)blockIdx.z * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
}

// dW_e += (p_0 + p_1) + ... + p_{n-1} (fp32) over the n non-empty splits of each expert with
// rows (ws as wgrad_kernel's, PQ = P Q); an expert with no rows is left untouched. VEC: 8
// consecutive elements a thread (PQ % 8 == 0, dW 16-byte aligned), else one.
template <bool VEC>
__global__ void wgrad_reduce_kernel(float *dW, const float *ws, const int *offsets, int E, int S, long PQ) {
    constexpr int W = VEC ? 8 : 1;
    const long per_e = PQ / W, n = (long)E * per_e;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        const int e = (int)(i / per_e);
        const long j = (i % per_e) * W;
        const int rows = offsets[e + 1] - offsets[e];
        if (rows <= 0) continue;
        const int ch = wgrad_split_rows(rows, S), ns = (rows + ch - 1) / ch;
        const float *p = ws + (size_t)e * S * PQ + j;
        float v[W], q[W];
        auto load = [&](float *r, const float *a) {  // W floats r = a (VEC: two 16-byte copies)
            if (VEC) {
                *reinterpret_cast<float4 *>(r) = *reinterpret_cast<const float4 *>(a);
                *reinterpret_cast<float4 *>(r + W / 2) = *reinterpret_cast<const float4 *>(a + W / 2);
            } else {
                r[0] = a[0];
            }
        };
        load(v, p);
        for (int s = 1; s < ns; s++) {
            load(q, p + (size_t)s * PQ);
#pragma unroll
            for (int k = 0; k < W; k++) v[k] += q[k];
        }
        float *d = dW + (size_t)e * PQ + j, old[W];
        load(old, d);
#pragma unroll
        for (int k = 0; k < W; k++) v[k] += old[k];
        load(d, v);
    }
}

static int experts_glu_vec_mode = 1;  // cuda_moe_set_glu_vec (tests)
static long experts_glu_vec_launches;
extern "C" void cuda_moe_set_glu_vec(int on) { experts_glu_vec_mode = on != 0; }
extern "C" long cuda_moe_glu_vec_launches(void) { return experts_glu_vec_launches; }
// the GLU pass takes the vector kernels where glu_vec_ok allows and the tests have not switched
// them off (cuda_moe_set_glu_vec(0): the scalar kernels, to compare the bits); counts them
static int experts_glu_vec(int M, const void *a, const void *b, const void *c) {
    const int ok = experts_glu_vec_mode && glu_vec_ok(a, b, c, M);
    experts_glu_vec_launches += ok;
    return ok;
}

// The blocks of KERNEL (GG_THREADS threads, GG_SMEM_BYTES) resident at once on the GPU, asked
// once per kernel: the occupancy API's blocks per SM (2 by design: __launch_bounds__ and 2 x
// 109 KiB of shared memory; the largest shared-memory carveout is requested, a hint the
// driver should not need) times the SMs. The row GEMMs launch exactly this many blocks, each
// walking the tiles with a stride of the grid: a block that did not fit would run its whole
// share after the others (the earlier grid, ceil(2 x 132 / column tiles) blocks per column
// tile, was 272 blocks for 264 slots at n_out 2048). Which block computes a tile does not
// change its bits. Under the emulator, 5 blocks: the emulated shapes then have more tiles
// than blocks, and 5 is prime to their column tile counts, so each block walks several rows
// and columns (the walk is what the emulated test checks).
template <auto KERNEL>
static unsigned gg_resident_blocks(void) {
#ifdef HYBRID_CUDA_EMU
    return 5;
#else
    static unsigned n;
    if (!n) {
        cuda_allow_dynamic_smem((const void *)KERNEL, GG_SMEM_BYTES);
        CUDA_CHECK(cudaFuncSetAttribute((const void *)KERNEL, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, KERNEL, GG_THREADS, GG_SMEM_BYTES));
        n = (unsigned)((per_sm < 1 ? 1 : per_sm) * g_cuda.sm_count);
    }
    return n;
#endif
}

template <bool W_T>
static void rows_gemm(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd) {
    if (n_out <= 0) return;
    if (moe_wg_rows(Y, X, W, offsets, E, n_out, kd, W_T)) return;  // on wgmma (experts_wg.cu)
    if (gg_vec_ok(Y, X, W, n_out, kd))
        launch_kernel(rows_gemm_kernel<W_T, true>, dim3(gg_resident_blocks<rows_gemm_kernel<W_T, true>>()),
                      dim3(GG_THREADS), GG_SMEM_BYTES, Y, X, W, offsets, E, n_out, kd);
    else
        launch_kernel(rows_gemm_kernel<W_T, false>, dim3(gg_resident_blocks<rows_gemm_kernel<W_T, false>>()),
                      dim3(GG_THREADS), GG_SMEM_BYTES, Y, X, W, offsets, E, n_out, kd);
}

// The split count of a weight gradient (wgrad_kernel) from its shape alone: tiles = E ceil(P/128)
// ceil(Q/128) blocks of one split each fill GG_REF_SLOTS = 2 x 132 block slots (an H100/H200's SMs
// at two blocks each) in ceil(tiles S / slots) waves; S is the smallest count whose last wave is
// at least 90% full on average (tiles S / (slots waves) >= 0.9), at most 8. A constant, not the
// device's SM count: the split decides the fp32 sum order, so the gradient's bits are the same on
// every GPU. KL-S (E 16, C 768, M 256): dW2 192 tiles, 73% with one split -> S 4 (768 blocks,
// 97%); dW13 384 tiles -> S 2 (768, 97%). Large (E 64, C 2048, M 1024): 8192 and 16384 tiles,
// S 1. Each split > 1 costs scratch (E S P Q floats) and one more pass over it (the reduction).
#define GG_REF_SLOTS (2 * 132)
static int wgrad_split_force;  // tests: > 0 forces the split count (cuda_moe_set_wgrad_split)
extern "C" void cuda_moe_set_wgrad_split(int s) { wgrad_split_force = s > 0 ? s : 0; }

// the 128 x 128 output tiles of a weight gradient dW (E, P, Q)
static long wgrad_tiles(int E, int P, int Q) { return (long)E * ((P + GG_BM - 1) / GG_BM) * ((Q + GG_BN - 1) / GG_BN); }

static int wgrad_splits(int E, int P, int Q) {
    if (wgrad_split_force) return wgrad_split_force;
    const long tiles = wgrad_tiles(E, P, Q);
    int S = 1;
    for (; S < 8; S++) {
        const long blocks = tiles * S, waves = (blocks + GG_REF_SLOTS - 1) / GG_REF_SLOTS;
        if (blocks * 10 >= waves * GG_REF_SLOTS * 9) break;
    }
    return S;
}

// dW_e += the sum of its S splits' fp32 partials ws (E, S, P, Q), in split order (fp32 throughout):
// the second pass of a split weight gradient (in the GEMM's profiled part)
static void wgrad_reduce(float *dW, const float *ws, const int *offsets, int E, int S, int P, int Q, bool vec) {
    PROFILE("moe_experts/wgrad_reduce");  // (inside its gemm_wgrad part: shown, not counted twice)
    const long PQ = (long)P * Q;
    if (vec)
        launch_kernel(wgrad_reduce_kernel<true>, dim3(grid_for((size_t)E * PQ / 8, 256, 8)), dim3(256), 0, dW, ws,
                      offsets, E, S, PQ);
    else
        launch_kernel(wgrad_reduce_kernel<false>, dim3(grid_for((size_t)E * PQ, 256, 8)), dim3(256), 0, dW, ws,
                      offsets, E, S, PQ);
}

// dW_e += G_e^T X_e for every expert with rows: one launch of wgrad_kernel (E S blocks along z),
// then, with S > 1, the ordered reduction of the partials (in the same profiled part).
static void wgrad(float *dW, const bf16 *G, const bf16 *X, const int *offsets, int E, int P, int Q) {
    if (P <= 0 || Q <= 0) return;
    const bool vec = gg_vec_ok(dW, G, X, P, Q);
    float *ws = NULL;
    // on wgmma (experts_wg.cu): its kernel, with its own split rule, then our reduction
    int S = moe_wg_wgrad(dW, &ws, G, X, offsets, E, P, Q, wgrad_split_force);
    if (S) {
        if (S > 1) wgrad_reduce(dW, ws, offsets, E, S, P, Q, vec);
        return;
    }
    S = wgrad_splits(E, P, Q);
    if (S > 1) ws = (float *)scratch_get(sizeof(float) * (size_t)E * S * P * Q);
    const dim3 grid((Q + GG_BN - 1) / GG_BN, (P + GG_BM - 1) / GG_BM, E * S);
    if (vec) {
        gg_resident_blocks<wgrad_kernel<true>>();  // (the carveout hint, once)
        launch_kernel(wgrad_kernel<true>, grid, dim3(GG_THREADS), GG_SMEM_BYTES, dW, ws, G, X, offsets, P, Q, S);
    } else {
        gg_resident_blocks<wgrad_kernel<false>>();
        launch_kernel(wgrad_kernel<false>, grid, dim3(GG_THREADS), GG_SMEM_BYTES, dW, ws, G, X, offsets, P, Q, S);
    }
    if (S > 1) wgrad_reduce(dW, ws, offsets, E, S, P, Q, vec);
}

// ---- HYBRID_MOE_GEMM=mixed: which GEMM runs where ----
// Measured on the H200 (2026-12-02, bench_moe, both paths; docs/hybrid.md, "Dropless permutation
// and grouped expert FFN"): cuBLAS's grouped GEMM loses to ours on the forward's row GEMMs
// (fwd13 0.451 vs 0.423 ms KL-S, 3.946 vs 3.712 large; fwd2 likewise) and wins the dgrads a
// little (dgrad2 0.219 vs 0.240, 1.917 vs 2.041; dgrad13 0.450 vs 0.483, 3.733 vs 4.017). So:
//   fwd13, fwd2: ours (the forward then never waits for the host copy of the offsets);
//   dgrad2, dgrad13: cuBLAS.
// With ours on wgmma (experts_wg.cu; measured on the H200 2026-12-05, bench_moe, the GLU apart;
// docs/hybrid.md, "The expert GEMMs on wgmma") the row GEMMs beat cuBLAS's everywhere (dgrad2
// 0.142 vs 0.232 ms KL-S, 1.302 vs 2.005 large; dgrad13 0.302 vs 0.478, 2.553 vs 3.921; the
// forward's likewise). So on wgmma all four run ours.
// The weight gradients are parameter gradients, fp32 (docs/cuda.md, "Precision"), and cuBLAS's
// grouped GEMM takes bf16 A and B with a bf16 C only, so on cuBLAS they run one cublasGemmEx
// per expert (fp32 C; experts_cublas.h). Measured on an H100 (2026-12-06, bench_moe, session 35;
// docs/hybrid.md, "The expert GEMMs on wgmma"): those per-expert calls win on the large shape's
// many tiles (wgrad2 1.302 vs ours on wgmma 1.776 ms, wgrad13 2.491 vs 3.471) and lose at KL-S
// (0.272 vs 0.157, 0.337 vs 0.215), as cuBLAS's grouped GEMM did with a bf16 C (the H200,
// session 26: 1.182 vs 1.791 and 2.001 vs 3.434 large; 0.300 vs 0.184 and 0.341 vs 0.314 KL-S).
// So on wgmma:
//   fwd13, fwd2, dgrad2, dgrad13: ours;
//   wgrad2, wgrad13: cuBLAS when the gradient has at least MIXED_WG_CUBLAS_TILES 128 x 128 tiles
//   (8 waves of GG_REF_SLOTS: KL-S's 192 and 384 below, the large shape's 8192 and 16384 above;
//   no shape between those was measured), else ours.
// With ours on mma.sync (no wgmma: a GPU other than compute capability 9.0) the dgrads go to
// cuBLAS, and the weight gradients unless they have fewer than GG_REF_SLOTS tiles (the rule of
// session 25's H200 table, from cuBLAS's grouped GEMM with a bf16 C; not measured again with
// the per-expert fp32 calls).
// The rule reads the shape and whether ours run on wgmma alone, so which path, and so which
// bits, a GEMM gets does not depend on the run. Which GPU runs decides wgmma (auto), and so which
// bits a GEMM gives: an H200 and an A100 give different bits for the same MoE step, each the
// same run to run.
#define MIXED_WG_CUBLAS_TILES (8 * GG_REF_SLOTS)
static int mixed_wgrad_force = -1;  // tests: 0 or 1 forces the weight gradients' path (cuda_moe_set_mixed_wgrad)
extern "C" void cuda_moe_set_mixed_wgrad(int mode) { mixed_wgrad_force = mode == 0 || mode == 1 ? mode : -1; }

static int mixed_wgrad_on_cublas(int E, int P, int Q) {
    if (mixed_wgrad_force >= 0) return mixed_wgrad_force;
    return wgrad_tiles(E, P, Q) >= (moe_wgmma_on() ? MIXED_WG_CUBLAS_TILES : GG_REF_SLOTS);
}

enum { G_FWD13, G_FWD2, G_DGRAD2, G_WGRAD2, G_DGRAD13, G_WGRAD13 };

// 1: GEMM g of the expert op (E, C, M) goes to cuBLAS in mode `mode` (moe_gemm_mode), operands
// aside (one that does not suit cuBLAS runs ours: moe_cublas_rows / moe_cublas_wgrad return 0)
static int gemm_on_cublas(int mode, int g, int E, int C, int M) {
    if (mode == MOE_GEMM_CUBLAS) return 1;
    if (mode != MOE_GEMM_MIXED) return 0;
    switch (g) {
    case G_DGRAD2:
    case G_DGRAD13: return !moe_wgmma_on();
    case G_WGRAD2: return mixed_wgrad_on_cublas(E, C, M);       // dW2 (E, C, M)
    case G_WGRAD13: return mixed_wgrad_on_cublas(E, 2 * M, C);  // dW13 (E, 2M, C)
    default: return 0;                                          // the forward's
    }
}

extern "C" int cuda_moe_gemm_on_cublas(int g, int E, int C, int M) {
    return gemm_on_cublas(moe_gemm_mode(E), g, E, C, M);
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
    // grouped GEMMs, on either path, that tests/gpu/bench_moe.c compares with dense cuBLAS GEMMs
    // of the same FLOPs)
    // hoff: the host copy of the offsets on the cuBLAS path (NULL: our kernels); a GEMM whose
    // operands do not suit cuBLAS (experts_cublas.h) runs our kernel. The mixed mode runs both
    // GEMMs on ours and only issues the copy for its backward (pinned memory: nothing waits; a
    // backward whose GEMMs all run ours never reads it).
    const int mode = moe_gemm_mode(E);
    const int *hoff = NULL;
    if (mode == MOE_GEMM_CUBLAS) {
        PROFILE("moe_experts/offsets_to_host");
        hoff = moe_cublas_offsets(offsets, E, 1);
    } else if (mode == MOE_GEMM_MIXED) {
        PROFILE("moe_experts/offsets_to_host");
        moe_cublas_offsets_async(offsets, E);
    }
    bool glu_done = false;  // the GLU fused into fwd13 (HYBRID_MOE_WG_GLU_FUSED=1: experts_wg.cu)
    {
        PROFILE("moe_experts/gemm_fwd13");
        if (!hoff || !gemm_on_cublas(mode, G_FWD13, E, C, M) ||
            !moe_cublas_rows((bf16 *)hp, (const bf16 *)xp, (const bf16 *)w13, hoff, offsets, E, 2 * M, C, 0)) {
            glu_done = moe_wg_rows_glu((bf16 *)hp, (bf16 *)ap, (const bf16 *)xp, (const bf16 *)w13, offsets, E, C, M,
                                       kind, (float)act.beta, (float)act.linear_beta);
            if (!glu_done) rows_gemm<false>((bf16 *)hp, (const bf16 *)xp, (const bf16 *)w13, offsets, E, 2 * M, C);
        }
    }
    if (!glu_done) {
        PROFILE("moe_experts/glu_fwd");
        launch_kernel(experts_glu_vec(M, ap, hp, NULL) ? glu_forward_vec_kernel<const int *>
                                                       : glu_forward_kernel<const int *>,
                      dim3(4 * g_cuda.sm_count), dim3(256), 0, (bf16 *)ap, (const bf16 *)hp, offsets + E, M, kind,
                      (float)act.beta, (float)act.linear_beta);
    }
    {
        PROFILE("moe_experts/gemm_fwd2");
        if (!hoff || !gemm_on_cublas(mode, G_FWD2, E, C, M) ||
            !moe_cublas_rows((bf16 *)yp, (const bf16 *)ap, (const bf16 *)w2, hoff, offsets, E, C, M, 0))
            rows_gemm<false>((bf16 *)yp, (const bf16 *)ap, (const bf16 *)w2, offsets, E, C, M);
    }
}

void cuda_moe_experts_backward(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                               const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                               const int *offsets, int E, int C, int M, GluAct act) {
    PROFILE("moe_experts_bwd");
    const int kind = act_kind(act);
    if (E <= 0) return;
    // which GEMMs run on cuBLAS (the mode's rule, and operands that suit it)
    const int mode = moe_gemm_mode(E);
    const bool c_dgrad2 = gemm_on_cublas(mode, G_DGRAD2, E, C, M) && moe_cublas_suits(dap, dyp, w2, M, C),
               c_dgrad13 = gemm_on_cublas(mode, G_DGRAD13, E, C, M) && moe_cublas_suits(dxp, dhp, w13, C, 2 * M),
               c_wgrad2 = gemm_on_cublas(mode, G_WGRAD2, E, C, M) && moe_cublas_suits(dw2, dyp, ap, C, M),
               c_wgrad13 = gemm_on_cublas(mode, G_WGRAD13, E, C, M) && moe_cublas_suits(dw13, dhp, xp, 2 * M, C);
    // the forward's host copy of these offsets: cublas, no synchronization (the forward waited);
    // mixed, one event synchronization on the copy the forward issued (done long ago: the rest of
    // the forward ran since), and none where no GEMM here runs on cuBLAS. A backward whose forward
    // did not run at this offsets pointer copies them itself, in this part. (Fetched before the
    // first GEMM's part, so the GEMM parts time GEMMs only.)
    const int *hoff = NULL;
    if (mode == MOE_GEMM_CUBLAS || c_dgrad2 || c_dgrad13 || c_wgrad2 || c_wgrad13) {
        PROFILE("moe_experts/offsets_to_host");
        hoff = moe_cublas_offsets(offsets, E, 0);
    }
    bool dglu_done = false;  // the GLU's backward fused into dgrad2 (HYBRID_MOE_WG_GLU_FUSED=1; dap not written)
    {
        PROFILE("moe_experts/gemm_dgrad2");  // dap = dyp W2_e
        if (!c_dgrad2 || !moe_cublas_rows((bf16 *)dap, (const bf16 *)dyp, (const bf16 *)w2, hoff, offsets, E, M, C, 1)) {
            dglu_done = moe_wg_rows_dglu((bf16 *)dhp, (const bf16 *)dyp, (const bf16 *)w2, (const bf16 *)hp, offsets, E,
                                         C, M, kind, (float)act.beta, (float)act.linear_beta);
            if (!dglu_done) rows_gemm<true>((bf16 *)dap, (const bf16 *)dyp, (const bf16 *)w2, offsets, E, M, C);
        }
    }
    {
        PROFILE("moe_experts/gemm_wgrad2");  // dW2_e += dyp^T ap (fp32 dW2)
        if (!c_wgrad2 ||
            !moe_cublas_wgrad((float *)dw2, (const bf16 *)dyp, (const bf16 *)ap, hoff, offsets, E, C, M))
            wgrad((float *)dw2, (const bf16 *)dyp, (const bf16 *)ap, offsets, E, C, M);
    }
    if (!dglu_done) {
        PROFILE("moe_experts/glu_bwd");
        launch_kernel(experts_glu_vec(M, dhp, dap, hp) ? glu_backward_vec_kernel<const int *>
                                                       : glu_backward_kernel<const int *>,
                      dim3(4 * g_cuda.sm_count), dim3(256), 0, (bf16 *)dhp, (const bf16 *)dap, (const bf16 *)hp,
                      offsets + E, M, kind, (float)act.beta, (float)act.linear_beta);
    }
    {
        PROFILE("moe_experts/gemm_dgrad13");  // dxp = dhp W13_e
        if (!c_dgrad13 ||
            !moe_cublas_rows((bf16 *)dxp, (const bf16 *)dhp, (const bf16 *)w13, hoff, offsets, E, C, 2 * M, 1))
            rows_gemm<true>((bf16 *)dxp, (const bf16 *)dhp, (const bf16 *)w13, offsets, E, C, 2 * M);
    }
    {
        PROFILE("moe_experts/gemm_wgrad13");  // dW13_e += dhp^T xp (fp32 dW13)
        if (!c_wgrad13 ||
            !moe_cublas_wgrad((float *)dw13, (const bf16 *)dhp, (const bf16 *)xp, hoff, offsets, E, 2 * M, C))
            wgrad((float *)dw13, (const bf16 *)dhp, (const bf16 *)xp, offsets, E, 2 * M, C);
    }
}
