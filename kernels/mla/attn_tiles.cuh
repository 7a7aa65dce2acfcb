// Tile pieces of the MLA family's tensor-core attention (attention_mma.cu): 64-row bf16 tiles
// of q, k, v, dO in shared memory and the two warp-level products every kernel is made of.
// Fragment layouts: kernels/mma.cuh. Each of the 4 warps of a block owns 16 rows of the
// block's 64-row tile (rows 16w .. 16w+15); the C fragments of two adjacent 8-column tiles
// are the A fragment of one 16-wide k-step, so P and dS never leave registers.
#ifndef HYBRID_KERNELS_MLA_ATTN_TILES_CUH
#define HYBRID_KERNELS_MLA_ATTN_TILES_CUH

#include "kernels/common.cuh"
#include "kernels/mma.cuh"

#define MLA_TILE 64
#define MLA_THREADS 128
#define MLA_LOG2E 1.4426950408889634f
#define MLA_LN2 0.6931471805599453f

// 64 rows of D bf16 (D a multiple of 16). +8: rows 16 bytes apart modulo 128 (D + 8 is an
// odd multiple of 8 for D = 64, 128, 192), so ldmatrix's 8 row addresses hit distinct banks.
template <int D>
struct MTile {
    bf16 x[MLA_TILE][D + 8];
};

// Rows [0, 64) of a tile whose row 0 is at g (row stride rs elements), columns [0, cols)
// (cols a multiple of 8, <= D); rows >= valid and columns >= cols zero-filled (so a head
// narrower than D is padded with zeros, which add nothing to any dot product). Asynchronous
// (cp.async): complete after the matching cp_async_wait and a __syncthreads.
template <int D>
__device__ __forceinline__ void mtile_load(MTile<D> &s, const bf16 *g, size_t rs, int valid, int cols) {
    constexpr int VPR = D / 8;  // 16-byte vectors per row
    for (int i = threadIdx.x; i < MLA_TILE * VPR; i += MLA_THREADS) {
        const int r = i / VPR, c = (i % VPR) * 8;
        const bool ok = r < valid && c < cols;
        cp_async16(&s.x[r][c], ok ? g + (size_t)r * rs + c : g, ok);
    }
}

template <int N>
__device__ __forceinline__ void zero_acc(float acc[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// acc (16 x 64) += A (rows [a0, a0+16) of tile sa, D columns) @ sb^T, i.e. B[k = column][n =
// row of sb]: the scores of 16 rows of one tile against the 64 rows of another. The A
// fragments are re-read from shared memory per 16-wide step instead of held in registers
// (D/4 registers saved: 48 at D = 192).
template <int D>
__device__ __forceinline__ void mma_rows_tileT(float acc[8][4], const MTile<D> &sa, int a0, const MTile<D> &sb,
                                               int lane) {
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a[4];
        ldsm_x4(a, &sa.x[a0 + (lane & 15)][kk * 16 + 8 * (lane >> 4)]);
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            ldsm_x4(b, &sb.x[np * 16 + (lane & 7) + 8 * (lane >> 4)][kk * 16 + 8 * ((lane >> 3) & 1)]);
            mma16816(acc[2 * np], a, b[0], b[1]);
            mma16816(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 x D) += P (16 x 64, as C fragments p[8][4], rounded to bf16) @ sb (64 x D):
// B[k = row of sb][n = column]
template <int D>
__device__ __forceinline__ void mma_p_tile(float acc[D / 8][4], const float p[8][4], const MTile<D> &sb, int lane) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                         pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                         pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldsm_x4_t(b, &sb.x[kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)][dp * 16 + 8 * (lane >> 4)]);
            mma16816(acc[2 * dp], a, b[0], b[1]);
            mma16816(acc[2 * dp + 1], a, b[2], b[3]);
        }
    }
}

// Rows (row0 + g, row0 + g + 8) of a (16 x D) accumulator, times mul0 / mul1, to global rows
// of stride rs (elements); rows >= T and columns >= cols (a multiple of 8) not written.
template <int D>
__device__ __forceinline__ void store_rows(bf16 *dst, size_t rs, int row0, int T, int cols, const float acc[D / 8][4],
                                           float mul0, float mul1, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
        if (nt * 8 >= cols) break;
        const int d = nt * 8 + 2 * t;
        if (row0 + g < T)
            *reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)(row0 + g) * rs + d) =
                __floats2bfloat162_rn(acc[nt][0] * mul0, acc[nt][1] * mul0);
        if (row0 + g + 8 < T)
            *reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)(row0 + g + 8) * rs + d) =
                __floats2bfloat162_rn(acc[nt][2] * mul1, acc[nt][3] * mul1);
    }
}

#endif
