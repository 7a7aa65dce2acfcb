// The grouped GEMM tile of the MoE experts (experts.cu) on tensor cores (kernels/mma.cuh:
// mma.m16n8k16 bf16 -> fp32, ldmatrix, cp.async). One block of 4 warps computes a
// GG_BM x GG_BN tile of A (m, k) B^T, B given as (n, k), with fp32 accumulators in registers,
// k in increasing order (deterministic), and hands the tile to gg_epilogue, which writes it
// (Y = bf16(tile)), adds it into an fp32 weight gradient (dW += tile; parameter gradients are
// fp32: docs/cuda.md, "Precision") or stores it as fp32 (a split-k partial of a weight
// gradient, experts.cu).
//
// Global operands (bf16, row-major) may be stored either way round:
//   A_T = false: A[m][k] = A[m lda + k] (k contiguous)   A_T = true: A[m][k] = A[k lda + m]
//   B_T = false: B[n][k] = B[n ldb + k] (k contiguous)   B_T = true: B[n][k] = B[k ldb + n]
// Entries outside (m_lim, n_lim, k_lim) load as zero, so partial tiles need no masks in the
// MMA loop and the epilogue masks only its stores.
//
// Pipeline: the k range runs in steps of GG_BK = 64 through a ring of GG_STAGES = 3 stages in
// dynamic shared memory (GG_SMEM_BYTES = 108 KiB, above the default 48 KiB: launch_kernel opts
// in; two blocks fill 216 of an H100/H200 SM's 228 KiB). Step kt waits for its stage (cp.async
// groups: at most GG_STAGES - 2 younger ones in flight), passes one barrier (every warp is done
// with step kt - 1, whose stage is the next to refill), issues the 16-byte cp.async copies of
// step kt + GG_STAGES - 1 into that stage and multiplies step kt (4 k16 sub-steps, 128 MMAs a
// warp between two barriers). One commit per step, empty or not, keeps the group count equal
// to the step count.
//
// Shared layout of one stage (bf16 elements): A's operand, then B's, GG_OPERAND each.
//   not transposed: S[mn][k], GG_BM (GG_BN) rows of GG_LDK = GG_BK + 8. A row is 144 bytes, so
//     the 8 row addresses of one ldmatrix phase (8 rows, same k) fall 144 bytes apart: 0, 144,
//     288, ... mod 128 are 8 distinct 16-byte bank groups (no conflict); a warp's 32 cp.async
//     chunks (4 rows x 8) land 4 to a bank group, the minimum for 512 bytes. Fragments: ldmatrix.
//   transposed: S[k][mn], GG_BK rows of GG_LDMN = 128 + 8 (a global row segment of 8 mn is one
//     16-byte copy; 8 consecutive copies fill one contiguous 128-byte shared line). Rows are 272
//     bytes apart, 272 mod 128 = 16: again 8 distinct bank groups. Fragments: ldmatrix.trans,
//     which hands each lane two adjacent k of one mn, the same registers as the k-contiguous case.
// Warps: 2 (m) x 2 (n), warp (wm, wn) owns the 64 x 64 sub-tile at rows 64 wm, columns 64 wn
// = GG_MI x GG_NI = 4 x 8 MMA tiles: 128 fp32 accumulators per thread. Per k16 sub-step a warp
// issues 8 ldmatrix.x4 (4 for A, 4 for B) for 32 MMAs: shared-memory reads per FLOP are 1/64 +
// 1/64 byte (1/BN + 1/BM for the cp.async fills besides), against 1/32 + 1/64 for the earlier
// 64 x 32 warp tile of 8 warps, whose ldmatrix traffic, not the tensor cores, bounded it.
// __launch_bounds__(GG_THREADS, 2): up to 255 registers, two blocks (8 warps) per SM, so one
// block's prologue, barriers and epilogue overlap the other's MMAs.
//
// VEC: the 16-byte paths (cp.async loads, 16-byte epilogue loads and stores). They need every
// pointer 16-byte aligned, every leading dimension a multiple of 8 and the limits along the
// contiguous dimension of each operand multiples of 8 (so that a 16-byte chunk is entirely in
// or entirely out); gg_vec_ok says whether a launch qualifies. VEC = false is the same tile
// with element-by-element loads and stores (any shape, any alignment).
#ifndef HYBRID_KERNELS_MOE_GROUPED_GEMM_CUH
#define HYBRID_KERNELS_MOE_GROUPED_GEMM_CUH
#include "kernels/mma.cuh"

#define GG_BM 128
#define GG_BN 128
#define GG_BK 64
#define GG_STAGES 3
#define GG_WARPS_N 2                   // warps along n (GG_BM / GG_WM along m)
#define GG_WM 64                       // warp tile rows
#define GG_WN 64                       // warp tile columns
#define GG_THREADS (32 * (GG_BM / GG_WM) * GG_WARPS_N)  // 128
#define GG_BLOCKS_PER_SM 2             // (__launch_bounds__ minimum; the smem allows 2)
#define GG_MI (GG_WM / 16)
#define GG_NI (GG_WN / 8)
#define GG_LDK (GG_BK + 8)             // row stride of a k-contiguous operand tile
#define GG_LDMN (128 + 8)              // row stride of a transposed operand tile (BM, BN <= 128)
#define GG_OPERAND (128 * GG_LDK)      // elements of one operand in one stage (>= GG_BK * GG_LDMN)
#define GG_STAGE (2 * GG_OPERAND)
#define GG_SMEM_BYTES (GG_STAGES * GG_STAGE * (int)sizeof(bf16))  // 110592
#define GG_LDC (GG_BN + 8)             // row stride of the epilogue's fp32 tile (see gg_epilogue)
static_assert(GG_BM <= 128 && GG_BN <= 128 && GG_BK % 16 == 0 && GG_NI % 2 == 0, "grouped GEMM tile shape");
static_assert(GG_BN == GG_WARPS_N * GG_WN && GG_BM % GG_WM == 0, "the warps cover the tile");
static_assert(GG_BK * GG_LDMN <= GG_OPERAND, "a transposed operand tile fits its stage slot");
static_assert(GG_BM * GG_LDC * (int)sizeof(float) <= GG_SMEM_BYTES, "the epilogue tile fits the ring");
static_assert(GG_BLOCKS_PER_SM * (GG_SMEM_BYTES + 1024) <= 228 * 1024, "two blocks' shared memory fit an SM");

// One operand's k-step [k0, k0 + GG_BK) into its stage slot S (ROWS = GG_BM or GG_BN rows of
// the tile; P = the operand at the tile's first row/column, ld its leading dimension).
template <bool T, int ROWS, bool VEC>
__device__ __forceinline__ void gg_load(bf16 *S, const bf16 *P, long ld, int mn_lim, int k0, int k_lim) {
    constexpr int per_row = T ? ROWS / 8 : GG_BK / 8;  // 16-byte chunks per shared row
    constexpr int chunks = ROWS * GG_BK / 8;
    static_assert(chunks % GG_THREADS == 0, "whole chunks per thread");
#pragma unroll
    for (int i = 0; i < chunks / GG_THREADS; i++) {
        // consecutive threads: consecutive chunks along the operand's contiguous dimension
        const int c = i * GG_THREADS + threadIdx.x;
        const int r = c / per_row, c8 = (c % per_row) * 8;
        const int mn = T ? c8 : r, k = k0 + (T ? r : c8);
        bf16 *s = S + r * (T ? GG_LDMN : GG_LDK) + c8;
        if (VEC) {
            const bool ok = mn < mn_lim && k < k_lim;
            cp_async16(s, ok ? P + (T ? (long)k * ld + mn : (long)mn * ld + k) : P, ok);
        } else {
            for (int j = 0; j < 8; j++) {
                const int mj = T ? mn + j : mn, kj = T ? k : k + j;
                s[j] = mj < mn_lim && kj < k_lim ? P[T ? (long)kj * ld + mj : (long)mj * ld + kj]
                                                 : __float2bfloat16(0.f);
            }
        }
    }
}

// this lane's ldmatrix row address for the 16 x 16 block at (mn, k) of a stage slot: lanes
// 8j..8j+7 address matrix j's rows. For A the four matrices are (mn +0/+8, k +0/+8) in the
// order a0..a3 (mn first); for B they are b0, b1 of the n-tile mn, then b0, b1 of mn + 8 (k
// first): B_ORDER swaps the roles of j's two bits.
template <bool T, bool B_ORDER>
__device__ __forceinline__ const bf16 *gg_frag_addr(const bf16 *S, int mn, int k) {
    const int lane = threadIdx.x & 31, j = lane >> 3, r = lane & 7;
    const int dmn = (B_ORDER ? j >> 1 : j & 1) * 8, dk = (B_ORDER ? j & 1 : j >> 1) * 8;
    return T ? S + (k + dk + r) * GG_LDMN + mn + dmn : S + (mn + dmn + r) * GG_LDK + k + dk;
}

// acc[mi][ni][r]: MMA tile (mi, ni) of this warp, register r (mma.cuh's C layout).
// smem: GG_SMEM_BYTES of dynamic shared memory; free again when this returns.
template <bool A_T, bool B_T, bool VEC>
__device__ __forceinline__ void gg_tile(float acc[GG_MI][GG_NI][4], bf16 *smem, const bf16 *A, long lda,
                                        const bf16 *B, long ldb, int m_lim, int n_lim, int k_lim) {
    const int warp = threadIdx.x >> 5, wm = (warp / GG_WARPS_N) * GG_WM, wn = (warp % GG_WARPS_N) * GG_WN;
#pragma unroll
    for (int mi = 0; mi < GG_MI; mi++)
#pragma unroll
        for (int ni = 0; ni < GG_NI; ni++)
#pragma unroll
            for (int r = 0; r < 4; r++) acc[mi][ni][r] = 0.f;
    const int nk = (k_lim + GG_BK - 1) / GG_BK;
    auto load = [&](int step) {
        bf16 *S = smem + (step % GG_STAGES) * GG_STAGE;
        gg_load<A_T, GG_BM, VEC>(S, A, lda, m_lim, step * GG_BK, k_lim);
        gg_load<B_T, GG_BN, VEC>(S + GG_OPERAND, B, ldb, n_lim, step * GG_BK, k_lim);
    };
#pragma unroll
    for (int s = 0; s < GG_STAGES - 1; s++) {
        if (s < nk) load(s);
        cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<GG_STAGES - 2>();  // step kt's copies (this thread's) have landed
        __syncthreads();                 // everyone's have; everyone is done with step kt - 1
        if (kt + GG_STAGES - 1 < nk) load(kt + GG_STAGES - 1);  // into step kt - 1's stage
        cp_async_commit();
        const bf16 *As = smem + (kt % GG_STAGES) * GG_STAGE, *Bs = As + GG_OPERAND;
#pragma unroll
        for (int kk = 0; kk < GG_BK; kk += 16) {
            uint32_t a[GG_MI][4], b[GG_NI][2];
#pragma unroll
            for (int mi = 0; mi < GG_MI; mi++) {
                const bf16 *p = gg_frag_addr<A_T, false>(As, wm + mi * 16, kk);
                if (A_T) ldsm_x4_t(a[mi], p);
                else ldsm_x4(a[mi], p);
            }
#pragma unroll
            for (int ni = 0; ni < GG_NI; ni += 2) {
                uint32_t q[4];
                const bf16 *p = gg_frag_addr<B_T, true>(Bs, wn + ni * 8, kk);
                if (B_T) ldsm_x4_t(q, p);
                else ldsm_x4(q, p);
                b[ni][0] = q[0], b[ni][1] = q[1], b[ni + 1][0] = q[2], b[ni + 1][1] = q[3];
            }
#pragma unroll
            for (int mi = 0; mi < GG_MI; mi++)
#pragma unroll
                for (int ni = 0; ni < GG_NI; ni++) mma16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
    }
    cp_async_wait<0>();  // (only empty groups are left)
    __syncthreads();     // every warp is done with the ring: the epilogue may reuse it
}

// What gg_epilogue does with the tile: GG_STORE: D = bf16(acc) (the row GEMMs' activations);
// GG_ADD: D += acc in fp32 (a weight gradient: parameter gradients are fp32, accumulated, never
// rounded to bf16; D is float *); GG_F32: D = acc as fp32 (a split-k partial; D is float *).
enum { GG_STORE = 0, GG_ADD = 1, GG_F32 = 2 };

// 8 consecutive fp32 values s (16-byte aligned) to d as MODE says (GG_STORE bf16(s), GG_ADD
// d + s in fp32, GG_F32 s), by 16-byte accesses (d 16-byte aligned); the mma.sync and the wgmma
// epilogues' (grouped_gemm_wg.cuh) last step
template <int MODE, typename TD>
__device__ __forceinline__ void gg_put8(TD *d, const float *s) {
    static_assert((MODE != GG_STORE) == (sizeof(TD) == 4), "GG_STORE writes bf16, GG_ADD and GG_F32 float");
    float v[8];
    *reinterpret_cast<float4 *>(v) = *reinterpret_cast<const float4 *>(s);
    *reinterpret_cast<float4 *>(v + 4) = *reinterpret_cast<const float4 *>(s + 4);
    if constexpr (MODE == GG_STORE) {
        store8(d, v);
    } else {
        if constexpr (MODE == GG_ADD) {
            float old[8];
            *reinterpret_cast<float4 *>(old) = *reinterpret_cast<const float4 *>(d);
            *reinterpret_cast<float4 *>(old + 4) = *reinterpret_cast<const float4 *>(d + 4);
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] += old[j];
        }
        *reinterpret_cast<float4 *>(d) = *reinterpret_cast<const float4 *>(v);
        *reinterpret_cast<float4 *>(d + 4) = *reinterpret_cast<const float4 *>(v + 4);
    }
}

// The tile to D (row-major, leading dimension ldd in elements of D's type, at the tile's
// corner), rows < m_lim and columns < n_lim only, as MODE says. The accumulators go through
// shared memory first (fp32 [GG_BM][GG_LDC] over the ring: each thread writes float2 pairs;
// GG_LDC = GG_BN + 8 puts the 16 lanes of a half-warp's 8-byte stores, rows g and columns 2t,
// on 16 distinct bank pairs), then each thread moves 8 consecutive columns of a row at a time:
// 16-byte global loads and stores (two of each for fp32).
template <int MODE, bool VEC, typename TD>
__device__ __forceinline__ void gg_epilogue(const float acc[GG_MI][GG_NI][4], bf16 *smem, TD *D, long ldd,
                                            int m_lim, int n_lim) {
    static_assert((MODE != GG_STORE) == (sizeof(TD) == 4), "GG_STORE writes bf16, GG_ADD and GG_F32 float");
    float *Cs = reinterpret_cast<float *>(smem);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = (warp / GG_WARPS_N) * GG_WM, wn = (warp % GG_WARPS_N) * GG_WN, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < GG_MI; mi++)
#pragma unroll
        for (int ni = 0; ni < GG_NI; ni++) {
            float *c = Cs + (wm + mi * 16 + g) * GG_LDC + wn + ni * 8 + 2 * t;
            *reinterpret_cast<float2 *>(c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
            *reinterpret_cast<float2 *>(c + 8 * GG_LDC) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
        }
    __syncthreads();
    constexpr int per_row = GG_BN / 8;
    for (int c = threadIdx.x; c < GG_BM * per_row; c += GG_THREADS) {
        const int row = c / per_row, col = (c % per_row) * 8;
        if (row >= m_lim || col >= n_lim) continue;
        const float *s = Cs + row * GG_LDC + col;
        TD *d = D + (long)row * ldd + col;
        if (VEC) {
            gg_put8<MODE>(d, s);
        } else {
            for (int j = 0; j < 8 && col + j < n_lim; j++) {
                if constexpr (MODE == GG_STORE) d[j] = __float2bfloat16(s[j]);
                else d[j] = MODE == GG_ADD ? d[j] + s[j] : s[j];
            }
        }
    }
    __syncthreads();  // the shared tile is read: the next gg_tile may refill the ring
}

#endif
