// The MoE experts' grouped row GEMMs on Hopper's warpgroup MMA (grouped_gemm_wg.cuh), selected by
// HYBRID_MOE_WGMMA=1 (off by default until measured on the H200: docs/hybrid.md, "Dropless
// permutation and grouped expert FFN"). Same operands, walk and contract as experts.cu's
// rows_gemm, which calls moe_wg_rows first and runs its mma.sync kernel where this returns 0.
// This file alone is built for sm_90a (Makefile: wgmma exists only there); the switch refuses a
// GPU that is not compute capability 9.0.
#include "kernels/cuda_backend.h"
#include "kernels/moe/experts_wg.h"
#include "kernels/moe/grouped_gemm_wg.cuh"
#include "kernels/moe/grouped_walk.cuh"

// Y (rows, n_out) = X (rows, kd) W_e^T, W_e stored (n_out, kd) (W_T = false: K-major B) or
// (kd, n_out) (W_T = true: MN-major B). The tiles, linearly: tile L = (row tile L / ny, column
// tile L % ny), ny = ceil(n_out / WG_BN), the row tiles expert by expert (WG_BM rows each, an
// expert's last one partial); block b computes tiles b, b + gridDim.x, ... (the grid is what fits
// on the GPU at once: one block an SM), as experts.cu's rows_gemm_kernel walks its tiles.
template <bool W_T>
__global__ void __launch_bounds__(WG_THREADS, 1)
    rows_gemm_wg_kernel(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd) {
    DYNAMIC_SMEM(unsigned char, raw);  // WG_SMEM_BYTES: 1024 of alignment slack, then the ring
    unsigned char *ring = wg_align1024(raw);
    const int ny = (n_out + WG_BN - 1) / WG_BN;
    int e, base, nt;  // (row tiles only increase along the walk)
    row_tiles_start<WG_BM>(offsets, e, base, nt);
    for (long L = blockIdx.x;; L += gridDim.x) {
        const int tile = (int)(L / ny), n0 = (int)(L % ny) * WG_BN;
        if (!row_tiles_seek<WG_BM>(tile, offsets, E, e, base, nt)) return;
        const int r0 = offsets[e] + (tile - base) * WG_BM, m_lim = min(WG_BM, offsets[e + 1] - r0);
        const int n_lim = min(WG_BN, n_out - n0);
        const bf16 *We = W + (size_t)e * n_out * kd;
        const bf16 *B = W_T ? We + n0 : We + (size_t)n0 * kd;
        float d[128];
        wg_tile<W_T>(d, ring, X + (size_t)r0 * kd, kd, B, W_T ? n_out : kd, m_lim, n_lim, kd);
        wg_store(d, ring, Y + (size_t)r0 * n_out + n0, n_out, m_lim, n_lim);
    }
}

// ---- the switch (HYBRID_MOE_WGMMA; tests: cuda_moe_set_wgmma) ----
static int g_env = -1, g_forced = -1;
static long g_launches;

int moe_wgmma_on(void) {
    if (g_forced >= 0) return g_forced;
    if (g_env < 0) {
        g_env = env_flag("HYBRID_MOE_WGMMA");
        if (g_env && g_cuda.cc != 90)
            die("HYBRID_MOE_WGMMA=1: the wgmma expert GEMMs are built for sm_90a (H100/H200); this GPU has compute "
                "capability %d.%d",
                g_cuda.cc / 10, g_cuda.cc % 10);
    }
    return g_env;
}

extern "C" void cuda_moe_set_wgmma(int on) { g_forced = on == 0 || on == 1 ? on : -1; }
extern "C" int cuda_moe_wgmma(void) { return moe_wgmma_on(); }
extern "C" long cuda_moe_wgmma_launches(void) { return g_launches; }

// The blocks resident at once (one an SM by design: 193 KiB of shared memory), asked once per
// kernel; under the emulator 3, prime to the emulated shapes' column tile counts (as experts.cu's
// gg_resident_blocks: each block walks several tiles)
template <bool W_T>
static unsigned wg_resident_blocks(void) {
#ifdef HYBRID_CUDA_EMU
    return 3;
#else
    static unsigned n;
    if (!n) {
        cuda_allow_dynamic_smem((const void *)rows_gemm_wg_kernel<W_T>, WG_SMEM_BYTES);
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rows_gemm_wg_kernel<W_T>, WG_THREADS,
                                                                 WG_SMEM_BYTES));
        n = (unsigned)((per_sm < 1 ? 1 : per_sm) * g_cuda.sm_count);
    }
    return n;
#endif
}

int moe_wg_rows(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd, int w_t) {
    if (!moe_wgmma_on() || n_out <= 0) return 0;
    if (!is_aligned16(Y) || !is_aligned16(X) || !is_aligned16(W) || n_out % 8 || kd % 8) return 0;
    g_launches++;
    if (w_t)
        launch_kernel(rows_gemm_wg_kernel<true>, dim3(wg_resident_blocks<true>()), dim3(WG_THREADS), WG_SMEM_BYTES, Y,
                      X, W, offsets, E, n_out, kd);
    else
        launch_kernel(rows_gemm_wg_kernel<false>, dim3(wg_resident_blocks<false>()), dim3(WG_THREADS), WG_SMEM_BYTES,
                      Y, X, W, offsets, E, n_out, kd);
    return 1;
}
