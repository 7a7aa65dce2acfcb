// The MoE expert GEMMs' 128 x 256 wgmma tile, warp-specialized (HYBRID_MOE_WG_WS=rows: the
// row GEMMs, any epilogue; =all: our weight gradients too; auto, the default: the row GEMMs with
// the plain store, by TMA and staged, where the H200 measured a gain (experts_wg.cu's ws_auto_pick),
// and the weight gradients by TMA, where the H100 did (experts_wg.cu's wg_wgrad_launch);
// kernels/moe/experts_wg.cu's rows_ws_kernel and wgrad_ws_kernel): the same product and the
// same bits as grouped_gemm_wg.cuh's wg_tile + wg_store (wg_store_grad), with the copies and the
// MMAs on different warps, so that neither waits for the other at every k-step.
//
// Why: Nsight Compute on the H200 (session 27; docs/hybrid.md, "The expert GEMMs on wgmma") put the
// KL-S row GEMMs at 35-56% of L2 throughput, 34-57% of the SMs' and 26-44% of DRAM's: nothing
// saturated, so the kernels wait on latency. In wg_tile every thread both copies and multiplies and
// the whole block meets at a __syncthreads each k-step; the prefetch distance is 2 of its 4 stages
// (a stage is refilled only once the block has passed the barrier after its wgmma), and the
// epilogue holds the ring, so the next tile's loads start only after the stores. Here:
//
//   block: 3 warpgroups (384 threads), one block an SM; the ring of wg_tile (4 stages of A 128 x 64
//     and B 256 x 64, bf16, 48 KiB a stage, the same layouts), then 8 mbarriers (kernels/mbarrier.cuh):
//     full[s] (128 arrivals: each producer thread's copies of stage s have landed) and empty[s]
//     (8 arrivals: each consumer warp has finished the wgmma that read stage s).
//   warpgroup 0, the producer: walks the block's tiles and k-steps in order, a ring step i in stage
//     i % 4: waits for empty[s] (the consumers are done with step i - 4), issues its share of the
//     step's cp.async (wg_load with NT = 128), and cp_async_mbar_arrive(full[s]); it runs up to 4
//     steps ahead of the MMAs, across tile boundaries (through the consumers' epilogue).
//   warpgroups 1 and 2, the consumers: rows 0-63 and 64-127 of the tile, as wg_tile's warpgroups
//     0 and 1. Step i: wait for full[s], fence the async proxy (cp.async writes are generic-proxy
//     writes; the tensor cores read through the async proxy), the four k16 wgmma, commit, wait
//     until only they are in flight; then step i - 1's wgmma are done, so its stage is released
//     (a fence, then one arrival a warp on empty). After the tile's last step: wait for all, release
//     it, and store the accumulators straight from registers (ws_put: no staging tile, the ring
//     stays the producer's).
//
// The same bits as wg_tile + wg_store: each accumulator sees the same wgmma in the same k order,
// and ws_put rounds it to bf16 once as wg_stage does (or adds into or stores fp32 as wg_store_grad). Each k-step's copies zero-fill outside
// (m_lim, n_lim, k_lim) as in wg_tile. The ring walk's parities: step i waits on full[i % 4] for
// parity (i / 4) & 1 and on empty[i % 4] for ((i / 4) & 1) ^ 1 (a fresh barrier passes parity 1:
// the first 4 steps wait for nothing).
#ifndef HYBRID_KERNELS_MOE_GROUPED_GEMM_WS_CUH
#define HYBRID_KERNELS_MOE_GROUPED_GEMM_WS_CUH

#include "kernels/mbarrier.cuh"
#include "kernels/moe/grouped_gemm_wg.cuh"
#include "kernels/tma.cuh"

#define WS_BN 256
#define WS_THREADS 384  // a producer warpgroup, two consumer warpgroups
#define WS_CONSUMER_WARPS 8
using WsTile = WgTile<WS_BN>;
// the ring, then full[STAGES] and empty[STAGES]
#define WS_SMEM (WsTile::SMEM + 2 * WsTile::STAGES * 8)
static_assert(WS_SMEM <= 227 * 1024, "one block's shared memory fits an H200 SM");
// with the staged store (ws_put_staged): then, 128 bytes past the ring, a staging tile of 16 rows
// x 128 columns of bf16 (4 KiB) for each consumer warp
#define WS_STAGE_WARP_BYTES 4096
#define WS_SMEM_STAGED (WsTile::SMEM + 128 + WS_CONSUMER_WARPS * WS_STAGE_WARP_BYTES)
static_assert(WS_SMEM_STAGED <= 227 * 1024, "one block's shared memory fits an H200 SM");

// the ring's barriers, right after its stages (8-byte aligned: the stages are multiples of 1024)
__device__ __forceinline__ uint64_t *ws_full(unsigned char *ring) {
    return reinterpret_cast<uint64_t *>(ring + WsTile::STAGES * WsTile::STAGE_BYTES);
}
__device__ __forceinline__ uint64_t *ws_empty(unsigned char *ring) { return ws_full(ring) + WsTile::STAGES; }

// thread 0 initialises the barriers (full_arrivals: each stage's arrivals, 128 producer threads'
// copies, + 1 with the weights on TMA); then a __syncthreads (the last one of the kernel)
__device__ __forceinline__ void ws_ring_init(unsigned char *ring, unsigned full_arrivals = 128) {
    if (threadIdx.x == 0)
        for (int s = 0; s < WsTile::STAGES; s++) {
            mbar_init(ws_full(ring) + s, full_arrivals);
            mbar_init(ws_empty(ring) + s, WS_CONSUMER_WARPS);
        }
    __syncthreads();
}

// The producer's k-steps of one tile (warpgroup 0: threadIdx.x < 128), operands as wg_tile's: A
// (m_lim rows of the tile) K-major (A_T = false: A[m lda + k]) or MN-major (A[k lda + m]), B (n_lim
// rows) K-major (B[n ldb + k]) or MN-major (B_T: B[k ldb + n]); k_lim the reduction's length. step:
// the ring step of the tile's first k-step, advanced past its last.
// b_hi_skip (K-major B only): B's rows WS_BN / 2.. come from b_hi_skip rows further (wg_load's
// hi_skip: the fused forward GLU's up rows).
// TMA (HYBRID_MOE_WG_TMA=1; the row GEMMs, A K-major): B, the expert weights, copied by TMA through
// map wmap (rank 3, the expert e its third coordinate) instead of B and ldb: thread 0 announces
// B's 32 KiB on full[s] (its 129th arrival) and issues B's boxes: K-major (B_T = false: dims {k, n,
// e}), one box {64 k, 256 n} at row n0 of B, or with HALVES (the fused forward GLU) two boxes
// {64 k, 128 n} (the map's box then), at rows n0 and n0 + 128 + b_hi_skip; MN-major (dims {n, k, e}), four boxes {64 n,
// 64 k}, one for each column of 64 n (WG_MN_LBO apart). Rows past the tensor's n and k read as
// zero, as the cp.async zero-fill gives.
// TMA == WS_TMA_ROWS (HYBRID_MOE_WG_TMA=2): also A, the rows, of a whole tile (m_lim == WG_BM), by
// TMA through xmap (rank 2, dims {k, rows}: one box {64 k, 128 rows} at row a_row), which thread 0
// announces with B's; a partial tile's rows stay on cp.async, whose zero-fill stops at m_lim. Only
// whole tiles go by TMA because the rows' count is on the device: the map's row count is a bound
// no box reaches (every row of a whole tile is one of the expert's), not the buffer's.
#define WS_TMA_W 1     // the weights by TMA
#define WS_TMA_ROWS 2  // the weights and whole tiles' rows
template <bool A_T, bool B_T, int TMA = 0, bool HALVES = false>
__device__ __forceinline__ void ws_produce_tile(unsigned char *ring, unsigned &step, const bf16 *A, long lda,
                                                const bf16 *B, long ldb, int m_lim, int n_lim, int k_lim,
                                                long b_hi_skip = 0, const CUtensorMap *wmap = nullptr, int e = 0,
                                                int n0 = 0, const CUtensorMap *xmap = nullptr, int a_row = 0) {
    static_assert(!TMA || !A_T, "TMA: the row GEMMs' weights (and rows, K-major)");
    constexpr int S = WsTile::STAGES;
    const int nk = (k_lim + WG_BK - 1) / WG_BK;
    const bool a_tma = TMA == WS_TMA_ROWS && m_lim == WG_BM;
    for (int kt = 0; kt < nk; kt++, step++) {
        const int s = step % S;
        mbar_wait(ws_empty(ring) + s, ((step / S) & 1) ^ 1);
        unsigned char *sa = ring + s * WsTile::STAGE_BYTES, *sb = sa + WG_A_BYTES;
        uint64_t *full = ws_full(ring) + s;
        if (!TMA) {
            wg_load<B_T, WS_BN, 128>(sb, B, ldb, n_lim, kt * WG_BK, k_lim, b_hi_skip);
        } else if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(full, WsTile::B_BYTES + (a_tma ? WG_A_BYTES : 0));
            if (a_tma) tma_load_2d(sa, xmap, kt * WG_BK, a_row, full);
            if (B_T) {
                for (int j = 0; j < WS_BN / 64; j++) tma_load_3d(sb + j * WG_MN_LBO, wmap, n0 + 64 * j, kt * WG_BK, e, full);
            } else if (HALVES) {
                tma_load_3d(sb, wmap, kt * WG_BK, n0, e, full);
                tma_load_3d(sb + WS_BN / 2 * 128, wmap, kt * WG_BK, n0 + WS_BN / 2 + (int)b_hi_skip, e, full);
            } else {
                tma_load_3d(sb, wmap, kt * WG_BK, n0, e, full);
            }
        }
        if (!a_tma) wg_load<A_T, WG_BM, 128>(sa, A, lda, m_lim, kt * WG_BK, k_lim);
        cp_async_mbar_arrive(full);
    }
}

// The weight gradients' producer with their rows by TMA (HYBRID_MOE_WG_WS=all with
// HYBRID_MOE_WG_TMA=2): ws_produce_tile<true, true>'s k-steps of one unit, G (rows, P) and X (rows,
// Q) both MN-major from the unit's first row r0 (the reduction runs along the rows), with each
// whole k-step (64 rows, every one of them the unit's) copied by TMA: G's columns m0 .. m0 + 127 as
// two boxes {64 p, 64 rows} and X's n0 .. n0 + 255 as four boxes {64 q, 64 rows}, one MN-major
// column of 64 (WG_MN_LBO apart) each, through gmap and xmap (rank 2, dims {P or Q, 2^31 rows}:
// columns past P or Q read as zero, the rows' bound one no box reaches). The unit's last k-step,
// when partial, stays on cp.async, whose zero-fill stops at the unit's last row where a box would
// run on into the next expert's or split's rows. Thread 0 arrives on every step (announcing the
// boxes' bytes, or plainly on a partial step): full[s] takes 129 arrivals (ws_ring_init). The same
// values in the same places, so the same bits.
__device__ __forceinline__ void ws_produce_wgrad_tma(unsigned char *ring, unsigned &step, const bf16 *G, int P,
                                                     const bf16 *X, int Q, int r0, int rows, int m0, int m_lim, int n0,
                                                     int n_lim, const CUtensorMap *gmap, const CUtensorMap *xmap) {
    constexpr int S = WsTile::STAGES;
    const int nk = (rows + WG_BK - 1) / WG_BK;
    for (int kt = 0; kt < nk; kt++, step++) {
        const int s = step % S;
        mbar_wait(ws_empty(ring) + s, ((step / S) & 1) ^ 1);
        unsigned char *sa = ring + s * WsTile::STAGE_BYTES, *sb = sa + WG_A_BYTES;
        uint64_t *full = ws_full(ring) + s;
        if ((kt + 1) * WG_BK <= rows) {
            if (threadIdx.x == 0) {
                const int row = r0 + kt * WG_BK;
                mbar_arrive_expect_tx(full, WsTile::STAGE_BYTES);
                for (int j = 0; j < WG_BM / 64; j++) tma_load_2d(sa + j * WG_MN_LBO, gmap, m0 + 64 * j, row, full);
                for (int j = 0; j < WS_BN / 64; j++) tma_load_2d(sb + j * WG_MN_LBO, xmap, n0 + 64 * j, row, full);
            }
        } else {
            wg_load<true, WG_BM, 128>(sa, G + (size_t)r0 * P + m0, P, m_lim, kt * WG_BK, rows);
            wg_load<true, WS_BN, 128>(sb, X + (size_t)r0 * Q + n0, Q, n_lim, kt * WG_BK, rows);
            if (threadIdx.x == 0) mbar_arrive(full);
        }
        cp_async_mbar_arrive(full);
    }
}

// The producer's last act: wait until the consumers have released every stage it filled (its
// steps 0 .. step - 1), so that every phase of every barrier it armed completes before it exits
__device__ __forceinline__ void ws_produce_end(unsigned char *ring, unsigned step) {
    constexpr int S = WsTile::STAGES;
    for (unsigned i = step < S ? 0 : step - S; i < step; i++) mbar_wait(ws_empty(ring) + i % S, (i / S) & 1);
}

// this consumer thread's warp releases stage s (lane 0 arrives, after the warp's fence): its
// wgmma that read the stage are done
__device__ __forceinline__ void ws_release(unsigned char *ring, int s) {
    fence_proxy_async();  // (the tensor cores' reads before the producer's next writes)
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(ws_empty(ring) + s);
}

// A consumer warpgroup's product of one tile into d (this thread's 128 accumulators of rows
// 64 cw .. 64 cw + 63, cw = threadIdx.x / 128 - 1), from the ring steps step .. step + nk - 1
// (advanced past them): wg_tile's MMAs, waiting on the barriers instead of the block
template <bool A_T, bool B_T>
__device__ __forceinline__ void ws_consume_tile(float d[WsTile::NACC], unsigned char *ring, unsigned &step,
                                                int k_lim) {
    constexpr int S = WsTile::STAGES;
    const int nk = (k_lim + WG_BK - 1) / WG_BK, cw = (threadIdx.x >> 7) - 1;
#pragma unroll
    for (int i = 0; i < WsTile::NACC; i++) d[i] = 0.f;
    for (int kt = 0; kt < nk; kt++, step++) {
        const int s = step % S;
        mbar_wait(ws_full(ring) + s, (step / S) & 1);
        fence_proxy_async();  // the producer's cp.async writes, visible to the tensor cores
        const unsigned char *sa = ring + s * WsTile::STAGE_BYTES, *sb = sa + WG_A_BYTES;
        wgmma_fence();
        wg_step_mma<WS_BN, A_T, B_T>(d, sa, sb, cw);  // (wg_tile's k-step, warpgroup cw's rows)
        wgmma_commit();
        wgmma_wait<1, WsTile::NACC>(d);  // step - 1's wgmma done (this warpgroup's)
        if (kt > 0) ws_release(ring, (step - 1) % S);
    }
    wgmma_wait<0, WsTile::NACC>(d);
    if (nk > 0) ws_release(ring, (step - 1) % S);
}

// f(row, col, i) for each accumulator pair of this consumer thread in the tile's blocks of 8
// columns j0 .. j0 + J - 1: d[i] and d[i + 1] are row `row`, columns col and col + 1 (wgmma.cuh's
// layout, warpgroup cw = threadIdx.x / 128 - 1 owning rows 64 cw ..; warp w of it rows 16 w ..).
// Unrolled (j0 a constant where the caller's loop is), so i is a constant and d stays in
// registers: every epilogue of the consumers walks its accumulators through this.
template <int J, typename F>
__device__ __forceinline__ void ws_each_pair(F f, int j0 = 0) {
    const int tid = threadIdx.x, cw = (tid >> 7) - 1, w = (tid >> 5) & 3, g = (tid & 31) >> 2, t = tid & 3;
#pragma unroll
    for (int j = j0; j < j0 + J; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) f(64 * cw + 16 * w + g + 8 * h, 8 * j + 2 * t, 4 * j + 2 * h);
}

// A consumer warpgroup's accumulators (wgmma.cuh's layout, rows 64 cw ..) to D (row-major, leading
// dimension ldd, at the tile's corner), rows < m_lim and columns < n_lim (a multiple of 8) only,
// each register pair (two adjacent columns) in one access, as MODE (grouped_gemm.cuh) says:
// GG_STORE, bf16 rounded once (4 bytes), as wg_stage rounds it, so the bits are wg_store's; GG_ADD
// (an fp32 weight gradient), D += tile in fp32 (an 8-byte read and write), gg_put8's arithmetic;
// GG_F32, the fp32 pair (8 bytes)
template <int MODE, typename TD>
__device__ __forceinline__ void ws_put(const float d[WsTile::NACC], TD *D, long ldd, int m_lim, int n_lim) {
    static_assert((MODE != GG_STORE) == (sizeof(TD) == 4), "GG_STORE writes bf16, GG_ADD and GG_F32 float");
    ws_each_pair<WS_BN / 8>([&](int row, int col, int i) {
        if (row >= m_lim || col >= n_lim) return;
        float v0 = d[i], v1 = d[i + 1];
        TD *p = D + (long)row * ldd + col;
        if constexpr (MODE == GG_STORE) {
            *reinterpret_cast<uint32_t *>(p) = pack_bf16(v0, v1);
        } else {
            if constexpr (MODE == GG_ADD) {
                const float2 old = *reinterpret_cast<const float2 *>(p);
                v0 += old.x, v1 += old.y;
            }
            *reinterpret_cast<float2 *>(p) = make_float2(v0, v1);
        }
    });
}

// ws_put<GG_STORE>'s values, stored in 16-byte row segments through shared memory
// (HYBRID_MOE_WG_WS_STORE=staged): each consumer warp rounds its 16 rows x 128 columns of
// accumulator pairs into its own staging tile (ring's end + 128 + 4 KiB a warp; the 16-byte chunk c
// of row r at chunk c ^ (r % 8), so the pairs of a warp's store land in distinct banks), then
// copies the tile out, two rows of 256 bytes a warp instruction; twice, for columns 0-127 and
// 128-255. Only __syncwarp between the phases: the tile is the warp's own. Nsight Compute on the
// H200 (session 29) put the direct pair stores of the KL-S fwd2 (4 k-steps a tile, so the
// epilogue is a large share) at 80% of L2's throughput, its warps stalled a third of the time on
// the full global-memory queue; the same values, the same bits. n_lim a multiple of 8, D and ldd
// 16-byte aligned (the row GEMMs' gg_vec_ok).
__device__ __forceinline__ void ws_put_staged(const float d[WsTile::NACC], bf16 *D, long ldd, int m_lim, int n_lim,
                                              unsigned char *ring) {
    const int lane = threadIdx.x & 31, row0 = 16 * ((threadIdx.x >> 5) - 4);  // the warp's first row of the tile
    unsigned char *st = ring + WsTile::STAGES * WsTile::STAGE_BYTES + 128 + ((threadIdx.x >> 5) - 4) * WS_STAGE_WARP_BYTES;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        ws_each_pair<WS_BN / 16>(
            [&](int row, int col, int i) {  // row r of the warp's 16, byte 2 c of the half's 256
                const int r = row - row0, c = col - 128 * half;
                *reinterpret_cast<uint32_t *>(st + r * 256 + (((c >> 3) ^ (r & 7)) << 4) + 2 * (c & 7)) =
                    pack_bf16(d[i], d[i + 1]);
            },
            16 * half);
        __syncwarp();
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const int r = 2 * q + (lane >> 4), c = lane & 15, row = row0 + r, col = 128 * half + 8 * c;
            if (row < m_lim && col < n_lim)
                *reinterpret_cast<uint4 *>(D + (long)row * ldd + col) =
                    *reinterpret_cast<const uint4 *>(st + r * 256 + ((c ^ (r & 7)) << 4));
        }
        __syncwarp();
    }
}

#endif
