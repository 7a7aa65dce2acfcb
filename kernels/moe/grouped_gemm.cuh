// The grouped GEMM tile of the MoE experts (experts.cu) on tensor cores (kernels/mma.cuh,
// mma.m16n8k16 bf16 -> fp32). One block of 4 warps computes a GG_BM x GG_BN tile of
// A (m, k) B^T, B given as (n, k), over k in steps of GG_BK; warp w owns the 32 x 32
// sub-tile at rows (w / 2) 32, columns (w % 2) 32 (2 x 4 MMA tiles). Operands are staged
// in shared memory as As[m][k] and Bs[n][k] (k contiguous, rows padded by 8 elements so
// that the fragment reads of a warp spread over the banks), so one fragment register is
// two adjacent k of one row in both (the A and B layouts of mma.cuh). The global operands
// may be stored either way: A_T (A[m][k] = A[k lda + m]) and B_T (B[n][k] = B[k ldb + n])
// select the transposed reads; entries outside (m_lim, n_lim, k_lim) load as zero, so
// every shared element is written before it is read and partial tiles need no masks in
// the MMA loop. Accumulation is fp32 in registers, k in increasing order: deterministic.
#ifndef HYBRID_KERNELS_MOE_GROUPED_GEMM_CUH
#define HYBRID_KERNELS_MOE_GROUPED_GEMM_CUH
#include "kernels/mma.cuh"

#define GG_BM 64
#define GG_BN 64
#define GG_BK 32
#define GG_LDS (GG_BK + 8)
#define GG_THREADS 128

// acc[mi][ni][r]: MMA tile (mi, ni) of this warp, register r (mma.cuh's C layout)
template <bool A_T, bool B_T>
__device__ __forceinline__ void gg_tile(float acc[2][4][4], const bf16 *A, long lda, const bf16 *B, long ldb, int m_lim,
                                        int n_lim, int k_lim, bf16 (*As)[GG_LDS], bf16 (*Bs)[GG_LDS]) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3, wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    for (int mi = 0; mi < 2; mi++)
        for (int ni = 0; ni < 4; ni++)
            for (int r = 0; r < 4; r++) acc[mi][ni][r] = 0.f;
    const bf16 zero = __float2bfloat16(0.f);
    for (int k0 = 0; k0 < k_lim; k0 += GG_BK) {
        __syncthreads();  // the previous step's fragment reads are done
        for (int idx = tid; idx < GG_BM * GG_BK; idx += GG_THREADS) {
            // consecutive threads read consecutive addresses of the global operand
            int m = A_T ? idx % GG_BM : idx / GG_BK, k = A_T ? idx / GG_BM : idx % GG_BK;
            bool ok = m < m_lim && k0 + k < k_lim;
            As[m][k] = ok ? (A_T ? A[(long)(k0 + k) * lda + m] : A[(long)m * lda + k0 + k]) : zero;
        }
        for (int idx = tid; idx < GG_BN * GG_BK; idx += GG_THREADS) {
            int n = B_T ? idx % GG_BN : idx / GG_BK, k = B_T ? idx / GG_BN : idx % GG_BK;
            bool ok = n < n_lim && k0 + k < k_lim;
            Bs[n][k] = ok ? (B_T ? B[(long)(k0 + k) * ldb + n] : B[(long)n * ldb + k0 + k]) : zero;
        }
        __syncthreads();
        for (int kk = 0; kk < GG_BK; kk += 16) {
            uint32_t a[2][4], b[4][2];
            for (int mi = 0; mi < 2; mi++) {
                const int r = wm + mi * 16 + g, c = kk + 2 * t;
                a[mi][0] = *reinterpret_cast<const uint32_t *>(&As[r][c]);
                a[mi][1] = *reinterpret_cast<const uint32_t *>(&As[r + 8][c]);
                a[mi][2] = *reinterpret_cast<const uint32_t *>(&As[r][c + 8]);
                a[mi][3] = *reinterpret_cast<const uint32_t *>(&As[r + 8][c + 8]);
            }
            for (int ni = 0; ni < 4; ni++) {
                const int n = wn + ni * 8 + g, c = kk + 2 * t;
                b[ni][0] = *reinterpret_cast<const uint32_t *>(&Bs[n][c]);
                b[ni][1] = *reinterpret_cast<const uint32_t *>(&Bs[n][c + 8]);
            }
            for (int mi = 0; mi < 2; mi++)
                for (int ni = 0; ni < 4; ni++) mma16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
    }
}

// the tile coordinates of acc[mi][ni][r]
__device__ __forceinline__ int gg_row(int mi, int r) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    return (warp >> 1) * 32 + mi * 16 + (lane >> 2) + (r >= 2 ? 8 : 0);
}
__device__ __forceinline__ int gg_col(int ni, int r) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    return (warp & 1) * 32 + ni * 8 + 2 * (lane & 3) + (r & 1);
}

#endif
