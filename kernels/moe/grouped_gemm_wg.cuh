// The grouped row GEMM tile of the MoE experts on Hopper's warpgroup MMA (kernels/wgmma.cuh), the
// sm_90a alternative to grouped_gemm.cuh's mma.sync tile that HYBRID_MOE_WGMMA=1 selects
// (kernels/moe/experts_wg.cu). One block of two warpgroups (256 threads) computes a
// WG_BM x WG_BN = 128 x 256 tile of A (m, k) B^T with fp32 accumulators in registers, warpgroup
// wg owning rows 64 wg .. 64 wg + 63 (128 accumulators a thread, wgmma.cuh's layout), k in
// increasing order (deterministic: the same inputs give the same bits), and stores it as bf16.
//
// Why this shape: the mma.sync tile reaches ~40-45% of dense cuBLAS on the H200 (BENCHMARKS.md,
// "H200: the MoE layer against PyTorch"), and mma.sync itself issues at a fraction of the
// tensor cores' sm_90 rate; wgmma reads both operands from shared memory with no register
// fragments. A 128 x 256 tile needs 48 KiB of operands a k-step of 64 for 4.2 MFLOP (85 FLOP a
// byte from L2; a 128 x 128 tile, 64, asks more of L2 than it gives at the tensor cores' rate).
//
// Operands (bf16, row-major, in global memory): A[m][k] = A[m lda + k] (k contiguous); B either
// K-major, B[n][k] = B[n ldb + k] (B_T = false), or MN-major, B[n][k] = B[k ldb + n] (B_T = true,
// wgmma's transposed B). Entries outside (m_lim, n_lim, k_lim) load as zero (cp.async zero-fill),
// so partial tiles need no masks in the MMA loop. Requirements (the caller checks them, else it
// runs grouped_gemm.cuh's tile): every pointer 16-byte aligned, lda, ldb multiples of 8, and
// k_lim (B_T = false) or n_lim (B_T = true) multiples of 8, so a 16-byte chunk is wholly in or out.
//
// Shared memory (dynamic, WG_SMEM_BYTES: 1024 bytes of alignment slack, then the ring): WG_STAGES
// = 4 stages of A (128 rows x 64 k, K-major, 16 KiB) and B (256 x 64, 32 KiB; K-major, or
// MN-major in atoms of 64 n x 8 k: the 8 k-atoms of an n-atom adjacent, n-atoms WG_B_LBO = 8 KiB
// apart), each tile in wgmma.cuh's 128-byte-swizzled layout, 1024-byte aligned. cp.async chunks
// are assigned so a warp's 32 chunks fill four whole 128-byte rows (K-major: 4 rows x 8 chunks;
// MN-major: one k row of 4 atoms x 8 chunks): four wavefronts for 512 bytes, the minimum.
//
// Pipeline, one k-step of 64 a stage, prefetch distance WG_STAGES - 2 = 2: step kt waits for its
// own copies (cp.async groups: at most WG_STAGES - 3 younger ones in flight), fences them to the
// async proxy, passes one barrier (everyone's copies of step kt landed; everyone has waited, at
// the end of step kt - 1, for its warpgroup's wgmma of step kt - 2), refills that step's stage
// with step kt + 2, issues step kt's four k16 wgmma on its stage, commits them, and waits until
// only they are in flight (step kt - 1's done). So the tensor cores always have the next step's
// wgmma queued behind the current one, and two steps of loads are in flight behind them.
#ifndef HYBRID_KERNELS_MOE_GROUPED_GEMM_WG_CUH
#define HYBRID_KERNELS_MOE_GROUPED_GEMM_WG_CUH

#include "kernels/mma.cuh"
#include "kernels/wgmma.cuh"

#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#define WG_STAGES 4
#define WG_THREADS 256
#define WG_A_BYTES (WG_BM * WG_BK * 2)                     // 16 KiB
#define WG_B_BYTES (WG_BN * WG_BK * 2)                     // 32 KiB
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)           // 48 KiB (a multiple of 1024)
#define WG_B_LBO (WG_BK / 8 * 1024)                        // MN-major B: bytes between n-atoms
#define WG_SMEM_BYTES (1024 + WG_STAGES * WG_STAGE_BYTES)  // 197,632
#define WG_LDC (WG_BN + 8)  // row stride (bf16) of the epilogue's staging tile
static_assert(WG_BK == 64, "a K-major row of the tile is one 128-byte swizzle row");
static_assert(WG_BM == 128 && WG_THREADS == 256, "two warpgroups of 64 rows");
static_assert(WG_BM * WG_LDC * 2 <= WG_STAGES * WG_STAGE_BYTES, "the staging tile fits the ring");
static_assert(WG_SMEM_BYTES <= 227 * 1024, "one block's shared memory fits an H200 SM");

// one k-step [k0, k0 + 64) of A and B into a stage (sa, sb: its 1024-aligned tiles)
template <bool B_T>
__device__ __forceinline__ void wg_load(unsigned char *sa, unsigned char *sb, const bf16 *A, long lda, const bf16 *B,
                                        long ldb, int m_lim, int n_lim, int k0, int k_lim) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < WG_BM * 8 / WG_THREADS; i++) {  // 4 chunks: (row c / 8, k chunk c % 8)
        const int c = i * WG_THREADS + tid, r = c >> 3, k = k0 + (c & 7) * 8;
        const bool ok = r < m_lim && k < k_lim;
        cp_async16(reinterpret_cast<bf16 *>(sa + wg_kmajor_offset(r, (c & 7) * 8)), ok ? A + (long)r * lda + k : A, ok);
    }
#pragma unroll
    for (int i = 0; i < WG_BN * 8 / WG_THREADS; i++) {  // 8 chunks
        const int c = i * WG_THREADS + tid;
        if (B_T) {  // (k row c / 32, n chunk c % 32): a global row of B^T is 256 n of one k
            const int kr = c >> 5, n = (c & 31) * 8, k = k0 + kr;
            const bool ok = n < n_lim && k < k_lim;
            cp_async16(reinterpret_cast<bf16 *>(sb + wg_mnmajor_offset(n, kr, WG_B_LBO)), ok ? B + (long)k * ldb + n : B,
                       ok);
        } else {  // (n row c / 8, k chunk c % 8)
            const int n = c >> 3, k = k0 + (c & 7) * 8;
            const bool ok = n < n_lim && k < k_lim;
            cp_async16(reinterpret_cast<bf16 *>(sb + wg_kmajor_offset(n, (c & 7) * 8)), ok ? B + (long)n * ldb + k : B,
                       ok);
        }
    }
}

// The tile's product into d (this thread's 128 accumulators: warpgroup threadIdx.x / 128's rows).
// ring: the 1024-aligned ring (wg_align1024 of the dynamic shared memory); free again on return.
template <bool B_T>
__device__ __forceinline__ void wg_tile(float d[128], unsigned char *ring, const bf16 *A, long lda, const bf16 *B,
                                        long ldb, int m_lim, int n_lim, int k_lim) {
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.f;
    const int nk = (k_lim + WG_BK - 1) / WG_BK, wg = threadIdx.x >> 7;
    auto load = [&](int step) {
        unsigned char *sa = ring + (step % WG_STAGES) * WG_STAGE_BYTES;
        wg_load<B_T>(sa, sa + WG_A_BYTES, A, lda, B, ldb, m_lim, n_lim, step * WG_BK, k_lim);
    };
#pragma unroll
    for (int s = 0; s < WG_STAGES - 2; s++) {
        if (s < nk) load(s);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<WG_STAGES - 3>();  // this thread's copies of step kt have landed
        fence_proxy_async();             // ... and are visible to the tensor cores' reads
        __syncthreads();                 // everyone's; step kt - 2's wgmma done in both warpgroups
        if (kt + WG_STAGES - 2 < nk) load(kt + WG_STAGES - 2);  // into step kt - 2's stage
        cp_async_commit();
        const unsigned char *sa = ring + (kt % WG_STAGES) * WG_STAGE_BYTES, *sb = sa + WG_A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++) {
            const uint64_t da = wg_desc(sa + wg * (64 * 128) + kk * 32, 16, 1024);
            if (B_T) wgmma_m64n256k16_bf16<1>(d, da, wg_desc(sb + kk * 2048, WG_B_LBO, 1024), 1);
            else wgmma_m64n256k16_bf16<0>(d, da, wg_desc(sb + kk * 32, 16, 1024), 1);
        }
        wgmma_commit();
        wgmma_wait<1>(d);  // step kt - 1's wgmma done (this warpgroup's)
    }
    wgmma_wait<0>(d);
    cp_async_wait<0>();  // (only empty groups are left)
    __syncthreads();     // every warpgroup is done with the ring: the epilogue may reuse it
}

// The tile as bf16 to D (row-major, leading dimension ldd, at the tile's corner), rows < m_lim and
// columns < n_lim (n_lim a multiple of 8) only: the accumulators go through a bf16 staging tile
// [WG_BM][WG_LDC] over the ring (one rounding, as the mma.sync tile's GG_STORE), then 16-byte row
// segments to global memory. (WG_LDC = 264: the 32 lanes' 4-byte stores of one register, rows
// g + 16 w and columns 2t, fall on 32 distinct banks.)
__device__ __forceinline__ void wg_store(const float d[128], unsigned char *ring, bf16 *D, long ldd, int m_lim,
                                         int n_lim) {
    bf16 *S = reinterpret_cast<bf16 *>(ring);
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int j = 0; j < WG_BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = 64 * wg + 16 * w + g + 8 * h;
            *reinterpret_cast<uint32_t *>(S + row * WG_LDC + 8 * j + 2 * t) = pack_bf16(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
    __syncthreads();
    constexpr int per_row = WG_BN / 8;
    for (int c = tid; c < WG_BM * per_row; c += WG_THREADS) {
        const int row = c / per_row, col = (c % per_row) * 8;
        if (row < m_lim && col < n_lim)
            *reinterpret_cast<uint4 *>(D + (long)row * ldd + col) = *reinterpret_cast<const uint4 *>(S + row * WG_LDC + col);
    }
    __syncthreads();  // the staging tile is read: the next wg_tile may refill the ring
}

#endif
