// The grouped GEMM tile of the MoE experts on Hopper's warpgroup MMA (kernels/wgmma.cuh), the
// sm_90a alternative to grouped_gemm.cuh's mma.sync tile that HYBRID_MOE_WGMMA=1 selects
// (kernels/moe/experts_wg.cu). One block of two warpgroups (256 threads) computes a
// WG_BM x BN = 128 x BN tile of A (m, k) B^T with fp32 accumulators in registers, warpgroup
// wg owning rows 64 wg .. 64 wg + 63 (BN / 2 accumulators a thread, wgmma.cuh's layout), k in
// increasing order (deterministic: the same inputs give the same bits), and stores it as bf16
// (the row GEMMs), adds it into an fp32 weight gradient or stores it as fp32 (a split's partial
// of a weight gradient), as grouped_gemm.cuh's GG_STORE, GG_ADD and GG_F32.
//
// Why these shapes: the mma.sync tile reaches ~40-45% of dense cuBLAS on the H200 (BENCHMARKS.md,
// "H200: the MoE layer against PyTorch"), and mma.sync itself issues at a fraction of the
// tensor cores' sm_90 rate; wgmma reads both operands from shared memory with no register
// fragments. Two tiles (WgTile<BN>), to be chosen by measurement (HYBRID_MOE_WG_BN):
//   BN = 256: 48 KiB of operands a k-step of 64 for 4.2 MFLOP (85 FLOP a byte from L2), 4 stages,
//     one block an SM (128 accumulators a thread): the tile for long reductions;
//   BN = 128: 32 KiB for 2.1 MFLOP (64 FLOP a byte), 3 stages (97 KiB), two blocks an SM (64
//     accumulators, at most 128 registers), so one block's prologue and epilogue overlap the
//     other's MMAs, which a lone block cannot hide when the reduction is a few k-steps long
//     (KL-S's fwd2: 4).
//
// Operands (bf16, row-major, in global memory), each K-major or MN-major (wgmma's transposed
// operand): A[m][k] = A[m lda + k] (A_T = false) or A[k lda + m] (A_T = true: the weight
// gradients' G^T); B[n][k] = B[n ldb + k] (B_T = false) or B[k ldb + n] (B_T = true). Entries
// outside (m_lim, n_lim, k_lim) load as zero (cp.async zero-fill), so partial tiles need no masks
// in the MMA loop. Requirements (the caller checks them, else it runs grouped_gemm.cuh's tile):
// every pointer 16-byte aligned, lda, ldb multiples of 8, and each operand's limit along its
// contiguous dimension (k_lim, or m_lim / n_lim when transposed) a multiple of 8, so a 16-byte
// chunk is wholly in or out.
//
// Shared memory (dynamic, WgTile<BN>::SMEM: 1024 bytes of alignment slack, then the ring): STAGES
// stages of A (128 rows x 64 k, 16 KiB) and B (BN x 64, BN / 8 KiB), each K-major, or MN-major
// in atoms of 64 m (n) x 8 k: the 8 k-atoms of an m-atom adjacent, m-atoms WG_MN_LBO = 8 KiB
// apart; each tile in wgmma.cuh's 128-byte-swizzled layout, 1024-byte aligned. cp.async chunks
// are assigned so a warp's 32 chunks fill four whole 128-byte rows (K-major: 4 rows x 8 chunks;
// MN-major: k rows of BN / 64 (B) or 2 (A) atoms x 8 chunks): four wavefronts for 512 bytes, the
// minimum.
//
// Pipeline, one k-step of 64 a stage, prefetch distance D = STAGES - 2 (2 at BN = 256, 1 at 128):
// step kt waits for its own copies (cp.async groups: at most D - 1 younger ones in flight),
// fences them to the async proxy, passes one barrier (everyone's copies of step kt landed;
// everyone has waited, at the end of step kt - 1, for its warpgroup's wgmma of step kt - 2),
// refills that step's stage with step kt + D, issues step kt's four k16 wgmma on its stage,
// commits them, and waits until only they are in flight (step kt - 1's done). So the tensor cores
// always have the next step's wgmma queued behind the current one, and D steps of loads are in
// flight behind them.
#ifndef HYBRID_KERNELS_MOE_GROUPED_GEMM_WG_CUH
#define HYBRID_KERNELS_MOE_GROUPED_GEMM_WG_CUH

#include "kernels/mma.cuh"
#include "kernels/moe/grouped_gemm.cuh"  // gg_put8, GG_ADD / GG_F32: the epilogues' last step
#include "kernels/wgmma.cuh"

#define WG_BM 128
#define WG_BK 64
#define WG_THREADS 256
#define WG_A_BYTES (WG_BM * WG_BK * 2)  // 16 KiB
#define WG_MN_LBO (WG_BK / 8 * 1024)    // an MN-major tile: bytes between m (n) atoms
static_assert(WG_BK == 64, "a K-major row of the tile is one 128-byte swizzle row");
static_assert(WG_BM == 128 && WG_THREADS == 256, "two warpgroups of 64 rows");

// the tile of width BN (128 or 256): its ring, blocks an SM and staging stride
template <int BN>
struct WgTile {
    static_assert(BN == 128 || BN == 256, "the wgmma tiles built: 128 x 128, 128 x 256");
    static constexpr int STAGES = BN == 256 ? 4 : 3;
    static constexpr int BLOCKS_PER_SM = BN == 256 ? 1 : 2;
    static constexpr int NACC = BN / 2;                       // accumulators a thread
    static constexpr int B_BYTES = BN * WG_BK * 2;
    static constexpr int STAGE_BYTES = WG_A_BYTES + B_BYTES;  // a multiple of 1024
    static constexpr int SMEM = 1024 + STAGES * STAGE_BYTES;  // 197,632 / 99,328
    static constexpr int LDC = BN + 8;  // row stride (bf16 or fp32) of the epilogue's staging tile
    static_assert(WG_BM * LDC * 4 <= STAGES * STAGE_BYTES, "the fp32 staging tile fits the ring");
    static_assert(BLOCKS_PER_SM * (SMEM + 1024) <= 228 * 1024, "the blocks' shared memory fits an H200 SM");
};

// one operand's k-step [k0, k0 + 64) into its stage tile S (ROWS = WG_BM or BN rows of m or n;
// P at the tile's first row, ld its leading dimension, mn_lim its rows in range). hi_skip (K-major
// only): the tile's rows ROWS / 2.. come from hi_skip rows further down P (0: the rows in order;
// the fused GLU's tile takes the gate rows of its hidden units, then their up rows M further). NT: the threads that copy, threadIdx.x 0 .. NT - 1 (the
// whole block, or the warp-specialized kernels' producer warpgroup: grouped_gemm_ws.cuh)
template <bool T, int ROWS, int NT = WG_THREADS>
__device__ __forceinline__ void wg_load(unsigned char *S, const bf16 *P, long ld, int mn_lim, int k0, int k_lim,
                                        long hi_skip = 0) {
    constexpr int chunks = ROWS * WG_BK / 8, per_k_row = ROWS / 8;
    static_assert(chunks % NT == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < chunks / NT; i++) {
        const int c = i * NT + threadIdx.x;
        if (T) {  // MN-major: (k row c / per_k_row, mn chunk c % per_k_row); a global row is one k's ROWS values
            const int kr = c / per_k_row, mn = (c % per_k_row) * 8, k = k0 + kr;
            const bool ok = mn < mn_lim && k < k_lim;
            cp_async16(reinterpret_cast<bf16 *>(S + wg_mnmajor_offset(mn, kr, WG_MN_LBO)), ok ? P + (long)k * ld + mn : P,
                       ok);
        } else {  // K-major: (row c / 8, k chunk c % 8)
            const int r = c >> 3, k = k0 + (c & 7) * 8;
            const bool ok = r < mn_lim && k < k_lim;
            const long gr = r + (r >= ROWS / 2 ? hi_skip : 0);
            cp_async16(reinterpret_cast<bf16 *>(S + wg_kmajor_offset(r, (c & 7) * 8)), ok ? P + gr * ld + k : P, ok);
        }
    }
}

// One k-step's four k16 wgmma into d, warpgroup wg's 64 rows of A: the stage's A at sa and B at sb
// (wg_load's layouts). Warpgroup wg's rows of A are 8 KiB in either layout (8 K-major atoms, or
// one MN-major m-atom column); a k16 step is 32 bytes along a K-major row, two k-atoms (2 KiB) of
// an MN-major tile. Issued only: the caller fences, commits and waits.
template <int BN, bool A_T, bool B_T>
__device__ __forceinline__ void wg_step_mma(float d[WgTile<BN>::NACC], const unsigned char *sa, const unsigned char *sb,
                                            int wg) {
#pragma unroll
    for (int kk = 0; kk < WG_BK / 16; kk++) {
        const uint64_t da = A_T ? wg_desc(sa + wg * WG_MN_LBO + kk * 2048, WG_MN_LBO, 1024)
                                : wg_desc(sa + wg * (64 * 128) + kk * 32, 16, 1024);
        const uint64_t db = B_T ? wg_desc(sb + kk * 2048, WG_MN_LBO, 1024) : wg_desc(sb + kk * 32, 16, 1024);
        wgmma_m64k16_bf16<BN, A_T, B_T>(d, da, db, 1);
    }
}

// The tile's product into d (this thread's BN / 2 accumulators: warpgroup threadIdx.x / 128's
// rows). ring: the 1024-aligned ring (wg_align1024 of the dynamic shared memory); free again on
// return. b_hi_skip: wg_load's hi_skip for B (K-major B only).
template <int BN, bool A_T, bool B_T>
__device__ __forceinline__ void wg_tile(float d[WgTile<BN>::NACC], unsigned char *ring, const bf16 *A, long lda,
                                        const bf16 *B, long ldb, int m_lim, int n_lim, int k_lim, long b_hi_skip = 0) {
    using Cfg = WgTile<BN>;
    constexpr int S = Cfg::STAGES, D = S - 2;
#pragma unroll
    for (int i = 0; i < Cfg::NACC; i++) d[i] = 0.f;
    const int nk = (k_lim + WG_BK - 1) / WG_BK, wg = threadIdx.x >> 7;
    auto load = [&](int step) {
        unsigned char *sa = ring + (step % S) * Cfg::STAGE_BYTES;
        wg_load<A_T, WG_BM>(sa, A, lda, m_lim, step * WG_BK, k_lim);
        wg_load<B_T, BN>(sa + WG_A_BYTES, B, ldb, n_lim, step * WG_BK, k_lim, b_hi_skip);
    };
#pragma unroll
    for (int s = 0; s < D; s++) {
        if (s < nk) load(s);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<D - 1>();  // this thread's copies of step kt have landed
        fence_proxy_async();     // ... and are visible to the tensor cores' reads
        __syncthreads();         // everyone's; step kt - 2's wgmma done in both warpgroups
        if (kt + D < nk) load(kt + D);  // into step kt - 2's stage
        cp_async_commit();
        const unsigned char *sa = ring + (kt % S) * Cfg::STAGE_BYTES, *sb = sa + WG_A_BYTES;
        wgmma_fence();
        wg_step_mma<BN, A_T, B_T>(d, sa, sb, wg);
        wgmma_commit();
        wgmma_wait<1, Cfg::NACC>(d);  // step kt - 1's wgmma done (this warpgroup's)
    }
    wgmma_wait<0, Cfg::NACC>(d);
    cp_async_wait<0>();  // (only empty groups are left)
    __syncthreads();     // every warpgroup is done with the ring: the epilogue may reuse it
}

// The accumulators (wgmma.cuh's layout, warpgroup threadIdx.x / 128's rows) into the staging tile
// S [WG_BM][LDC] over the ring, as bf16 (one rounding) or fp32, each register pair (two adjacent
// columns) in one 4- or 8-byte store; ends after a barrier (the tile is complete)
template <int BN, typename T>
__device__ __forceinline__ void wg_stage(const float d[WgTile<BN>::NACC], T *S) {
    const int tid = threadIdx.x, wg = tid >> 7, w = (tid >> 5) & 3, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            T *p = S + (64 * wg + 16 * w + g + 8 * h) * WgTile<BN>::LDC + 8 * j + 2 * t;
            if constexpr (sizeof(T) == 2) *reinterpret_cast<uint32_t *>(p) = pack_bf16(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            else *reinterpret_cast<float2 *>(p) = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        }
    __syncthreads();
}

// f(row, col) for each 8-column chunk of a staged tile ([WG_BM][COLS]) with row < m_lim and col <
// n_lim, spread over the block's threads (consecutive threads: consecutive chunks of a row, so a
// warp's 16-byte accesses are contiguous); every epilogue's second half
template <int COLS, typename F>
__device__ __forceinline__ void wg_each_chunk(int m_lim, int n_lim, F f) {
    constexpr int per_row = COLS / 8;
    for (int c = threadIdx.x; c < WG_BM * per_row; c += WG_THREADS) {
        const int row = c / per_row, col = (c % per_row) * 8;
        if (row < m_lim && col < n_lim) f(row, col);
    }
}

// The tile as bf16 to D (row-major, leading dimension ldd, at the tile's corner), rows < m_lim and
// columns < n_lim (n_lim a multiple of 8) only: the accumulators go through a bf16 staging tile
// [WG_BM][LDC] over the ring (one rounding, as the mma.sync tile's GG_STORE), then 16-byte row
// segments to global memory. (LDC = BN + 8: consecutive rows start 4 banks apart, so the 32 lanes'
// 4-byte stores of one register, rows g + 16 w and columns 2t, fall on 32 distinct banks.)
template <int BN>
__device__ __forceinline__ void wg_store(const float d[WgTile<BN>::NACC], unsigned char *ring, bf16 *D, long ldd,
                                         int m_lim, int n_lim) {
    constexpr int LDC = WgTile<BN>::LDC;
    bf16 *S = reinterpret_cast<bf16 *>(ring);
    wg_stage<BN>(d, S);
    wg_each_chunk<BN>(m_lim, n_lim, [&](int row, int col) {
        *reinterpret_cast<uint4 *>(D + (long)row * ldd + col) = *reinterpret_cast<const uint4 *>(S + row * LDC + col);
    });
    __syncthreads();  // the staging tile is read: the next wg_tile may refill the ring
}

// The tile into a weight gradient (fp32, as every parameter gradient: docs/cuda.md, "Precision"):
// ADD = true, D += tile in fp32 (GG_ADD); ADD = false, D = the tile (a split's partial, GG_F32).
// Rows < m_lim, columns < n_lim (a multiple of 8). Through an fp32 staging tile [WG_BM][LDC] over
// the ring (LDC = BN + 8 = 8 mod 32: a half-warp's 8-byte stores, rows g and columns 2t, fall on
// 16 distinct bank pairs), then grouped_gemm.cuh's gg_put8 a chunk.
template <int BN, bool ADD>
__device__ __forceinline__ void wg_store_grad(const float d[WgTile<BN>::NACC], unsigned char *ring, float *D, long ldd,
                                              int m_lim, int n_lim) {
    constexpr int LDC = WgTile<BN>::LDC;
    float *S = reinterpret_cast<float *>(ring);
    wg_stage<BN>(d, S);
    wg_each_chunk<BN>(m_lim, n_lim, [&](int row, int col) {
        gg_put8<ADD ? GG_ADD : GG_F32>(D + (long)row * ldd + col, S + row * LDC + col);
    });
    __syncthreads();
}

#endif
