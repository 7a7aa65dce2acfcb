// The MoE experts' grouped GEMMs on Hopper's warpgroup MMA (grouped_gemm_wg.cuh): the row GEMMs
// and the weight gradients that run ours, on by default on a GPU of compute capability 9.0
// (HYBRID_MOE_WGMMA: auto, 0, 1; measured on the H200 in session 26: docs/hybrid.md, "The expert
// GEMMs on wgmma"). Same operands, walks, splits and contracts as experts.cu's rows_gemm and
// wgrad, which call moe_wg_rows / moe_wg_wgrad first and run their mma.sync kernels where these
// return 0. The same GEMMs warp-specialized (grouped_gemm_ws.cuh: HYBRID_MOE_WG_WS, and
// HYBRID_MOE_WG_TMA, HYBRID_MOE_WG_WS_STORE; by default every row GEMM with the plain store, by
// TMA and staged, ws_auto_pick, and every weight gradient, by TMA, wg_wgrad_launch) give the same
// bits.
// This file alone is built for sm_90a (Makefile: wgmma exists only there); HYBRID_MOE_WGMMA=1
// refuses a GPU that is not compute capability 9.0, and auto leaves such a GPU on mma.sync.
#include "kernels/cuda_backend.h"
#include "kernels/moe/experts_wg.h"
#include "kernels/moe/grouped_gemm_wg.cuh"
#include "kernels/moe/grouped_gemm_ws.cuh"
#include "kernels/moe/grouped_walk.cuh"
#include "kernels/norm_glu/glu.cuh"

// ---- the GLU fused into the row GEMMs around it (HYBRID_MOE_WG_GLU_FUSED=1) ----
// The experts' GLU (kernels/norm_glu/glu.cuh's elementwise math) reads the up projection's output
// hp and writes ap, and its backward reads dap and hp and writes dhp: passes over the rows that
// the GEMMs beside them can do in their epilogues, from the same bf16 values with the same
// per-element functions, so the bits are the separate passes' (test_moe compares them):
// - forward: a tile of hp holds the gate columns of BN / 2 hidden units in its first half and
//   their up columns (M further in W13) in its second (wg_load's hi_skip), so the epilogue has
//   both halves of every hidden unit it stores: hp's two halves to their places, ap from the
//   rounded values (M % (BN / 2) == 0);
// - backward: dgrad2's tile is dap for BN hidden units; the epilogue rounds it (as dap's store
//   did), reads those units' gate and up columns of hp and writes dhp; dap (scratch, the op
//   contract) is never written.
// Off by default: on the H200 the fused kernels were slower than the GEMM and the GLU pass apart
// (session 26, bench_moe: fwd13 + GLU 2.940 fused against 2.286 ms apart at d 2048, 64 experts,
// top-8, hidden 1024, 16384 tokens; 0.309 against 0.294 at KL-S; dgrad2 + GLU 1.908 against
// 1.641 and 0.266 against 0.228). HYBRID_MOE_WG_GLU_FUSED=1 fuses them (to measure again after a
// change); the tests force either (cuda_moe_set_wg_glu)
static int g_glu_forced = -1;
extern "C" void cuda_moe_set_wg_glu(int on) { g_glu_forced = on == 0 || on == 1 ? on : -1; }
static int wg_glu_on(void) { return g_glu_forced >= 0 ? g_glu_forced : env_flag("HYBRID_MOE_WG_GLU_FUSED"); }

// What a row GEMM's epilogue does with its tile (rows_wg_kernel: the walk and the tile are shared)
enum { WG_EPI_STORE, WG_EPI_GLU_FWD, WG_EPI_GLU_BWD };

// A row GEMM's operands. Y (rows, n_out) = X (rows, kd) W_e^T, W_e stored (n_out, kd) (W_T = false:
// K-major B) or (kd, n_out) (W_T = true: MN-major B), rows sorted by expert (offsets). The GLU
// epilogues: WG_EPI_GLU_FWD, Y is hp (n_out = 2M) and ap receives glu(hp) (rows, M); WG_EPI_GLU_BWD,
// the product is dap (n_out = M), never stored, and Y is dhp (rows, 2M), from hp's gate and up
// columns. kind, beta, lbeta: the GLU's (glu.cuh).
struct WgRows {
    bf16 *Y;
    const bf16 *X, *W;
    const int *offsets;
    int E, n_out, kd;
    bf16 *ap;
    const bf16 *hp;
    int kind;
    float beta, lbeta;
};

// the forward GLU's epilogue: the staged tile's gate half and up half of rows < m_lim to hp (rows
// of 2M) at columns n0h and M + n0h, and glu(gate, up) to ap (rows of M) at column n0h
template <int BN>
__device__ __forceinline__ void wg_store_glu_fwd(const float d[WgTile<BN>::NACC], unsigned char *ring, bf16 *hp,
                                                 bf16 *ap, int M, int m_lim, int kind, float beta, float lbeta) {
    constexpr int LDC = WgTile<BN>::LDC, H2 = BN / 2;
    bf16 *S = reinterpret_cast<bf16 *>(ring);
    wg_stage<BN>(d, S);
    wg_each_chunk<H2>(m_lim, H2, [&](int row, int col) {
        const bf16 *sg = S + row * LDC + col, *su = sg + H2;
        bf16 *h = hp + (long)row * 2 * M + col;
        *reinterpret_cast<uint4 *>(h) = *reinterpret_cast<const uint4 *>(sg);
        *reinterpret_cast<uint4 *>(h + M) = *reinterpret_cast<const uint4 *>(su);
        float g[8], u[8], a[8];
        load8(sg, g);
        load8(su, u);
#pragma unroll
        for (int j = 0; j < 8; j++) a[j] = glu_fwd_elem(g[j], u[j], kind, beta, lbeta);
        store8(ap + (long)row * M + col, a);
    });
    __syncthreads();  // the staging tile is read: the next tile may refill the ring
}

// the backward GLU's epilogue: the staged tile (dap of BN hidden units, rounded once) of rows <
// m_lim, columns < n_lim, with hp's gate and up columns of those units, to dhp's two halves
template <int BN>
__device__ __forceinline__ void wg_store_glu_bwd(const float d[WgTile<BN>::NACC], unsigned char *ring, bf16 *dhp,
                                                 const bf16 *hp, int M, int m_lim, int n_lim, int kind, float beta,
                                                 float lbeta) {
    constexpr int LDC = WgTile<BN>::LDC;
    bf16 *S = reinterpret_cast<bf16 *>(ring);
    wg_stage<BN>(d, S);
    wg_each_chunk<BN>(m_lim, n_lim, [&](int row, int col) {
        const long o = (long)row * 2 * M + col;
        float dh[8], g[8], u[8], dg[8], du[8];
        load8(S + row * LDC + col, dh);
        load8(hp + o, g);
        load8(hp + o + M, u);
#pragma unroll
        for (int j = 0; j < 8; j++) glu_bwd_elem(g[j], u[j], dh[j], kind, beta, lbeta, dg[j], du[j]);
        store8(dhp + o, dg);
        store8(dhp + o + M, du);
    });
    __syncthreads();
}

// The row GEMMs (WgRows). The tiles, linearly: tile L = (row tile L / ny, column tile L % ny), the
// row tiles expert by expert (WG_BM rows each, an expert's last one partial; grouped_walk.cuh), a
// column tile BN columns of Y (WG_EPI_GLU_FWD: BN / 2 hidden units, their gate and up columns);
// block b computes tiles b, b + gridDim.x, ... (the grid is what fits on the GPU at once:
// WgTile<BN>::BLOCKS_PER_SM an SM), as experts.cu's rows_gemm_kernel walks its tiles.
template <int BN, bool W_T, int EPI>
__global__ void __launch_bounds__(WG_THREADS, WgTile<BN>::BLOCKS_PER_SM) rows_wg_kernel(WgRows a) {
    static_assert(EPI != WG_EPI_GLU_FWD || !W_T, "the fused forward GLU reads W13 K-major");
    DYNAMIC_SMEM(unsigned char, raw);  // WgTile<BN>::SMEM: 1024 of alignment slack, then the ring
    unsigned char *ring = wg_align1024(raw);
    constexpr int CW = EPI == WG_EPI_GLU_FWD ? BN / 2 : BN;  // Y's columns (or hidden units) a tile
    const int cols = EPI == WG_EPI_GLU_FWD ? a.n_out / 2 : a.n_out, ny = (cols + CW - 1) / CW;
    int e, base, nt;  // (row tiles only increase along the walk)
    row_tiles_start<WG_BM>(a.offsets, e, base, nt);
    for (long L = blockIdx.x;; L += gridDim.x) {
        const int tile = (int)(L / ny), n0 = (int)(L % ny) * CW;
        if (!row_tiles_seek<WG_BM>(tile, a.offsets, a.E, e, base, nt)) return;
        const int r0 = a.offsets[e] + (tile - base) * WG_BM, m_lim = min(WG_BM, a.offsets[e + 1] - r0);
        // (the fused forward's hidden units fill whole tiles: cols % CW == 0, checked at the launch)
        const int n_lim = EPI == WG_EPI_GLU_FWD ? BN : min(BN, cols - n0);
        const bf16 *We = a.W + (size_t)e * a.n_out * a.kd;
        const bf16 *B = W_T ? We + n0 : We + (size_t)n0 * a.kd;
        float d[WgTile<BN>::NACC];
        // B's rows BN / 2.. of the fused forward: the up rows, cols - CW further than the gate rows
        wg_tile<BN, false, W_T>(d, ring, a.X + (size_t)r0 * a.kd, a.kd, B, W_T ? a.n_out : a.kd, m_lim, n_lim, a.kd,
                                EPI == WG_EPI_GLU_FWD ? (long)(cols - CW) : 0);
        if (EPI == WG_EPI_STORE)
            wg_store<BN>(d, ring, a.Y + (size_t)r0 * a.n_out + n0, a.n_out, m_lim, n_lim);
        else if (EPI == WG_EPI_GLU_FWD)
            wg_store_glu_fwd<BN>(d, ring, a.Y + (size_t)r0 * a.n_out + n0, a.ap + (size_t)r0 * cols + n0, cols, m_lim,
                                 a.kind, a.beta, a.lbeta);
        else
            wg_store_glu_bwd<BN>(d, ring, a.Y + (size_t)r0 * 2 * cols + n0, a.hp + (size_t)r0 * 2 * cols + n0, cols,
                                 m_lim, n_lim, a.kind, a.beta, a.lbeta);
    }
}

// The fused GLU's epilogues straight from a consumer warpgroup's accumulators (grouped_gemm_ws.cuh's
// layout: this thread's column pairs 8 j + 2 t of rows 64 cw + 16 w + g + 8 h), the per-element
// arithmetic of wg_store_glu_fwd / _bwd on the same rounded values, so the same bits.
// Forward: the tile's columns 0..127 are the gate of 128 hidden units, 128..255 their up (j and
// j + 16 of one thread), so a thread has both halves of each unit it stores: hp's two halves (rows
// of 2M, at the unit's column and M further) and ap = glu(gate, up) (rows of M), rows < m_lim.
__device__ __forceinline__ void ws_put_glu_fwd(const float d[WsTile::NACC], bf16 *hp, bf16 *ap, int M, int m_lim,
                                               int kind, float beta, float lbeta) {
    constexpr int UP = WS_BN / 2 / 8 * 4;  // the up half's accumulators: 16 column blocks further
    ws_each_pair<WS_BN / 16>([&](int row, int col, int i) {
        if (row >= m_lim) return;
        const uint32_t gp = pack_bf16(d[i], d[i + 1]), up = pack_bf16(d[i + UP], d[i + UP + 1]);
        const float2 gv = bf16x2_to_float2(gp), uv = bf16x2_to_float2(up);
        bf16 *hr = hp + (long)row * 2 * M + col;
        *reinterpret_cast<uint32_t *>(hr) = gp;
        *reinterpret_cast<uint32_t *>(hr + M) = up;
        *reinterpret_cast<uint32_t *>(ap + (long)row * M + col) =
            pack_bf16(glu_fwd_elem(gv.x, uv.x, kind, beta, lbeta), glu_fwd_elem(gv.y, uv.y, kind, beta, lbeta));
    });
}
// Backward: the tile is dap for WS_BN hidden units, rounded once (as its store would), with hp's
// gate and up columns of those units to dhp's two halves, rows < m_lim, columns < n_lim
__device__ __forceinline__ void ws_put_glu_bwd(const float d[WsTile::NACC], bf16 *dhp, const bf16 *hp, int M,
                                               int m_lim, int n_lim, int kind, float beta, float lbeta) {
    ws_each_pair<WS_BN / 8>([&](int row, int col, int i) {
        if (row >= m_lim || col >= n_lim) return;
        const long o = (long)row * 2 * M + col;
        const float2 dh = bf16x2_to_float2(pack_bf16(d[i], d[i + 1])),
                     gv = bf16x2_to_float2(*reinterpret_cast<const uint32_t *>(hp + o)),
                     uv = bf16x2_to_float2(*reinterpret_cast<const uint32_t *>(hp + o + M));
        float dg0, du0, dg1, du1;
        glu_bwd_elem(gv.x, uv.x, dh.x, kind, beta, lbeta, dg0, du0);
        glu_bwd_elem(gv.y, uv.y, dh.y, kind, beta, lbeta, dg1, du1);
        *reinterpret_cast<uint32_t *>(dhp + o) = pack_bf16(dg0, dg1);
        *reinterpret_cast<uint32_t *>(dhp + o + M) = pack_bf16(du0, du1);
    });
}

// The row GEMMs warp-specialized (grouped_gemm_ws.cuh; HYBRID_MOE_WG_WS=rows or all), with any of
// rows_wg_kernel's epilogues (the GLU ones where HYBRID_MOE_WG_GLU_FUSED=1): the same tiles in the
// same walk as rows_wg_kernel<WS_BN, W_T, EPI>, warpgroup 0 copying every tile's k-steps into the
// ring, warpgroups 1 and 2 multiplying and storing. Both sides walk the tiles themselves (the walk
// is a function of the offsets alone), each in a loop of its own (one loop with the roles inside
// let the compiler keep the producer's hoisted addresses live through the consumers' code: spills).
// f(e, r0, m_lim, n0, n_lim) for each of this block's tiles, in order (n0: the tile's first column
// of Y, or with the forward GLU its first hidden unit)
template <int EPI, typename F>
__device__ __forceinline__ void ws_rows_walk(const WgRows &a, F f) {
    constexpr int CW = EPI == WG_EPI_GLU_FWD ? WS_BN / 2 : WS_BN;
    const int cols = EPI == WG_EPI_GLU_FWD ? a.n_out / 2 : a.n_out, ny = (cols + CW - 1) / CW;
    int e, base, nt;
    row_tiles_start<WG_BM>(a.offsets, e, base, nt);
    for (long L = blockIdx.x;; L += gridDim.x) {
        const int tile = (int)(L / ny), n0 = (int)(L % ny) * CW;
        if (!row_tiles_seek<WG_BM>(tile, a.offsets, a.E, e, base, nt)) return;
        const int r0 = a.offsets[e] + (tile - base) * WG_BM;
        f(e, r0, min(WG_BM, a.offsets[e + 1] - r0), n0, EPI == WG_EPI_GLU_FWD ? WS_BN : min(WS_BN, cols - n0));
    }
}
// TMA: WS_TMA_W, the weights copied by TMA through wmap (ws_produce_tile's TMA; HYBRID_MOE_WG_TMA=1);
// WS_TMA_ROWS, also whole tiles' rows of X through xmap (=2); 0, neither map is read. STAGED (the
// plain store only; HYBRID_MOE_WG_WS_STORE=staged): the tile stored through shared memory
// (ws_put_staged; WS_SMEM_STAGED bytes), else from registers (ws_put).
template <bool W_T, int TMA, int EPI, bool STAGED = false>
__global__ void __launch_bounds__(WS_THREADS, 1)
    rows_ws_kernel(WgRows a, const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap) {
    static_assert(EPI != WG_EPI_GLU_FWD || !W_T, "the fused forward GLU reads W13 K-major");
    static_assert(!STAGED || EPI == WG_EPI_STORE, "the staged store is the plain one's");
    constexpr bool HALVES = EPI == WG_EPI_GLU_FWD;
    // WS_SMEM: 1024 of alignment slack, the ring, its barriers (WS_SMEM_STAGED: the staging tiles too)
    DYNAMIC_SMEM(unsigned char, raw);
    unsigned char *ring = wg_align1024(raw);
    ws_ring_init(ring, TMA ? 129 : 128);
    const int cols = HALVES ? a.n_out / 2 : a.n_out;
    unsigned step = 0;  // the ring step of the next k-step (this side's count; the sides agree)
    if (threadIdx.x < 128) {
        ws_rows_walk<EPI>(a, [&](int e, int r0, int m_lim, int n0, int n_lim) {
            // B's rows WS_BN / 2.. of the fused forward: the up rows, cols - WS_BN / 2 further
            const long skip = HALVES ? (long)(cols - WS_BN / 2) : 0;
            const bf16 *We = a.W + (size_t)e * a.n_out * a.kd;
            ws_produce_tile<false, W_T, TMA, HALVES>(ring, step, a.X + (size_t)r0 * a.kd, a.kd,
                                                     W_T ? We + n0 : We + (size_t)n0 * a.kd, W_T ? a.n_out : a.kd,
                                                     m_lim, n_lim, a.kd, skip, &wmap, e, n0, &xmap, r0);
        });
        ws_produce_end(ring, step);
    } else {
        ws_rows_walk<EPI>(a, [&](int, int r0, int m_lim, int n0, int n_lim) {
            float d[WsTile::NACC];
            ws_consume_tile<false, W_T>(d, ring, step, a.kd);
            if (EPI == WG_EPI_STORE && STAGED)
                ws_put_staged(d, a.Y + (size_t)r0 * a.n_out + n0, a.n_out, m_lim, n_lim, ring);
            else if (EPI == WG_EPI_STORE)
                ws_put<GG_STORE>(d, a.Y + (size_t)r0 * a.n_out + n0, a.n_out, m_lim, n_lim);
            else if (EPI == WG_EPI_GLU_FWD)
                ws_put_glu_fwd(d, a.Y + (size_t)r0 * a.n_out + n0, a.ap + (size_t)r0 * cols + n0, cols, m_lim, a.kind,
                               a.beta, a.lbeta);
            else
                ws_put_glu_bwd(d, a.Y + (size_t)r0 * 2 * cols + n0, a.hp + (size_t)r0 * 2 * cols + n0, cols, m_lim,
                               n_lim, a.kind, a.beta, a.lbeta);
        });
    }
}

// dW_e (P, Q) += G_e^T X_e over the expert's rows, G (rows, P) and X (rows, Q) both read MN-major
// (the reduction runs along their rows); grid (Q tiles of BN, P tiles of WG_BM, E S), as
// experts.cu's wgrad_kernel: S == 1, the block reduces over all the expert's rows and adds once
// into dW (fp32); S > 1, block (., ., e S + s) reduces over split s's rows (grouped_walk.cuh) and
// stores its fp32 partial at ws + (e S + s) P Q, which experts.cu's wgrad_reduce_kernel sums in
// split order. An empty expert or split stores nothing.
template <int BN>
__global__ void __launch_bounds__(WG_THREADS, WgTile<BN>::BLOCKS_PER_SM)
    wgrad_wg_kernel(float *dW, float *ws, const bf16 *G, const bf16 *X, const int *offsets, int P, int Q, int S) {
    DYNAMIC_SMEM(unsigned char, raw);
    unsigned char *ring = wg_align1024(raw);
    const int e = blockIdx.z / S;
    int r0;
    const int rows = wgrad_block_rows(offsets, e, blockIdx.z % S, S, &r0);
    if (rows <= 0) return;  // exactly nothing added (an empty expert; an empty split)
    const int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * BN;
    const int m_lim = min(WG_BM, P - m0), n_lim = min(BN, Q - n0);
    float d[WgTile<BN>::NACC];
    wg_tile<BN, true, true>(d, ring, G + (size_t)r0 * P + m0, P, X + (size_t)r0 * Q + n0, Q, m_lim, n_lim, rows);
    if (S == 1) wg_store_grad<BN, true>(d, ring, dW + (size_t)e * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
    else wg_store_grad<BN, false>(d, ring, ws + (size_t)blockIdx.z * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
}

// The weight gradients warp-specialized (grouped_gemm_ws.cuh; HYBRID_MOE_WG_WS=all): wgrad_wg_kernel<WS_BN>'s
// blocks as units, walked: unit u is that kernel's block (u % nx, u / nx % ny, u / (nx ny)) of
// its grid (nx, ny, E S), and block b takes units b, b + gridDim.x, ... (the grid is what fits at
// once), so a unit's epilogue runs while the producer copies the next unit's first k-steps. An
// empty expert or split is skipped by both sides (its rows come from the offsets alone). The
// epilogue from registers: S == 1 adds into dW (GG_ADD, fp32), S > 1 stores the fp32 partial (GG_F32),
// the same bits as wgrad_wg_kernel<WS_BN>'s staged epilogue. TMA == WS_TMA_ROWS
// (HYBRID_MOE_WG_TMA=2): the whole k-steps of both operands by TMA through gmap and xmap
// (ws_produce_wgrad_tma); 0: all by cp.async, the maps not read.
template <int TMA>
__global__ void __launch_bounds__(WS_THREADS, 1)
    wgrad_ws_kernel(float *dW, float *ws, const bf16 *G, const bf16 *X, const int *offsets, int E, int P, int Q, int S,
                    const __grid_constant__ CUtensorMap gmap, const __grid_constant__ CUtensorMap xmap) {
    static_assert(TMA == 0 || TMA == WS_TMA_ROWS, "the weight gradients' operands are rows: by TMA at =2 only");
    DYNAMIC_SMEM(unsigned char, raw);
    unsigned char *ring = wg_align1024(raw);
    ws_ring_init(ring, TMA ? 129 : 128);
    unsigned step = 0;
    // f(e, z, r0, rows, m0, m_lim, n0, n_lim) for each of this block's units that has rows
    auto walk = [&](auto f) {
        const int nx = (Q + WS_BN - 1) / WS_BN, ny = (P + WG_BM - 1) / WG_BM;
        const long units = (long)nx * ny * E * S;
        for (long u = blockIdx.x; u < units; u += gridDim.x) {
            const int x = (int)(u % nx), y = (int)(u / nx % ny), z = (int)(u / ((long)nx * ny)), e = z / S;
            int r0;
            const int rows = wgrad_block_rows(offsets, e, z % S, S, &r0);
            if (rows <= 0) continue;  // exactly nothing added (an empty expert; an empty split)
            const int m0 = y * WG_BM, n0 = x * WS_BN;
            f(e, z, r0, rows, m0, min(WG_BM, P - m0), n0, min(WS_BN, Q - n0));
        }
    };
    if (threadIdx.x < 128) {
        walk([&](int, int, int r0, int rows, int m0, int m_lim, int n0, int n_lim) {
            if constexpr (TMA == WS_TMA_ROWS)
                ws_produce_wgrad_tma(ring, step, G, P, X, Q, r0, rows, m0, m_lim, n0, n_lim, &gmap, &xmap);
            else
                ws_produce_tile<true, true>(ring, step, G + (size_t)r0 * P + m0, P, X + (size_t)r0 * Q + n0, Q, m_lim,
                                            n_lim, rows);
        });
        ws_produce_end(ring, step);
    } else {
        walk([&](int e, int z, int, int rows, int m0, int m_lim, int n0, int n_lim) {
            float d[WsTile::NACC];
            ws_consume_tile<true, true>(d, ring, step, rows);
            if (S == 1) ws_put<GG_ADD>(d, dW + (size_t)e * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
            else ws_put<GG_F32>(d, ws + (size_t)z * P * Q + (size_t)m0 * Q + n0, Q, m_lim, n_lim);
        });
    }
}

// ---- the switches (HYBRID_MOE_WGMMA, HYBRID_MOE_WG_BN, HYBRID_MOE_WG_WS, HYBRID_MOE_WG_TMA; tests:
// cuda_moe_set_wgmma, _set_wg_bn, _set_wg_ws, _set_wg_tma) ----
static int g_env = -1, g_forced = -1, g_bn_env = -1, g_bn_forced = -1, g_ws_env = -1, g_ws_forced = -1,
           g_tma_env = -1, g_tma_forced = -1;
static long g_launches, g_ws_launches, g_tma_launches, g_tma_rows_launches, g_tma_wgrad_launches;

// the tile width: HYBRID_MOE_WG_BN=256 (the default: unset or empty) or 128 (grouped_gemm_wg.cuh's
// two tiles; which is faster where is the H200's to say), anything else stops the run
static int wg_bn(void) {
    if (g_bn_forced > 0) return g_bn_forced;
    if (g_bn_env < 0) {
        static const char *const names[] = {"256", "128"};
        g_bn_env = env_choice("HYBRID_MOE_WG_BN", names, 2) ? 128 : 256;
    }
    return g_bn_env;
}
extern "C" void cuda_moe_set_wg_bn(int bn) { g_bn_forced = bn == 128 || bn == 256 ? bn : -1; }

// The warp-specialized kernels (grouped_gemm_ws.cuh): HYBRID_MOE_WG_WS=auto (the default: unset or
// empty; ws_auto_pick), 0 (off), WS_ROWS (`rows`: the row GEMMs, with any of their epilogues) or
// WS_ALL (`all`: those and our weight gradients); anything else stops the run. They exist for the
// 128 x 256 tile only, so rows or all with HYBRID_MOE_WG_BN=128 stops it too (auto keeps the
// 128-wide kernels there; the tests' forcing, cuda_moe_set_wg_ws, applies at width 256 only).
enum { WS_OFF, WS_ROWS, WS_ALL, WS_AUTO };
static int wg_ws(void) {
    if (g_ws_forced >= 0) return g_ws_forced;
    if (g_ws_env < 0) {
        static const char *const names[] = {"auto", "0", "rows", "all"};
        static const int level[] = {WS_AUTO, WS_OFF, WS_ROWS, WS_ALL};
        const int v = env_choice("HYBRID_MOE_WG_WS", names, 4);
        g_ws_env = level[v];
        if ((g_ws_env == WS_ROWS || g_ws_env == WS_ALL) && wg_bn() != WS_BN)
            die("HYBRID_MOE_WG_WS=%s: the warp-specialized GEMMs have 128 x %d tiles only, not HYBRID_MOE_WG_BN=%d",
                names[v], WS_BN, wg_bn());
    }
    return g_ws_env;
}
extern "C" void cuda_moe_set_wg_ws(int level) { g_ws_forced = level >= WS_OFF && level <= WS_AUTO ? level : -1; }
extern "C" int cuda_moe_wg_ws(void) { return wg_ws(); }

// An option of the warp-specialized kernels forced by HYBRID_MOE_WG_WS=rows or all (TMA, the staged
// store): its value by env_choice; any but the first (the default) with WS off or auto stops the
// run naming both switches (auto chooses its own kernels: ws_auto_pick).
static int ws_option(const char *name, const char *const *names, int n) {
    const int v = env_choice(name, names, n);
    if (v && wg_ws() != WS_ROWS && wg_ws() != WS_ALL)
        die("%s=%s: an option of the warp-specialized row GEMMs (set HYBRID_MOE_WG_WS=rows or all; auto, the "
            "default, chooses its own kernels)",
            name, names[v]);
    return v;
}

// The warp-specialized row GEMMs' copies by TMA (ws_produce_tile's TMA) under HYBRID_MOE_WG_WS=rows or
// all: HYBRID_MOE_WG_TMA=0 (the default: unset or empty), 1 (the weights, WS_TMA_W) or 2 (the
// weights and whole tiles' rows of X, WS_TMA_ROWS); 1 or 2 with WS off or auto stops the run (auto
// chooses TMA itself: ws_auto_pick), as does anything else. (A partial tile's rows stay on
// cp.async: the rows' count is on the device, which a map made on the host cannot bound.) Under
// `all`, =2 also copies the weight gradients' whole k-steps by TMA (ws_produce_wgrad_tma: both of
// their operands are rows, read MN-major; a unit's last, partial k-step stays on cp.async, since
// a box would run past the expert's or split's last row).
static int wg_tma(void) {
    if (g_tma_forced >= 0) return g_tma_forced;
    if (g_tma_env < 0) {
        static const char *const names[] = {"0", "1", "2"};
        g_tma_env = ws_option("HYBRID_MOE_WG_TMA", names, 3);
    }
    return g_tma_env;
}
extern "C" void cuda_moe_set_wg_tma(int level) { g_tma_forced = level >= 0 && level <= WS_TMA_ROWS ? level : -1; }

// The warp-specialized row GEMMs' plain store under HYBRID_MOE_WG_WS=rows or all:
// HYBRID_MOE_WG_WS_STORE=direct (the default: unset or empty; from registers, ws_put) or staged
// (through shared memory in 16-byte row segments, ws_put_staged; what auto runs); staged with WS
// off or auto stops the run (auto chooses it itself), as does anything else. The same bits either
// way.
static int g_stage_env = -1, g_stage_forced = -1;
static long g_staged_launches;
static int wg_ws_staged(void) {
    if (g_stage_forced >= 0) return g_stage_forced;
    if (g_stage_env < 0) {
        static const char *const names[] = {"direct", "staged"};
        g_stage_env = ws_option("HYBRID_MOE_WG_WS_STORE", names, 2);
    }
    return g_stage_env;
}
extern "C" void cuda_moe_set_wg_ws_staged(int on) { g_stage_forced = on == 0 || on == 1 ? on : -1; }
extern "C" int cuda_moe_wg_ws_staged(void) { return wg_ws_staged(); }
extern "C" long cuda_moe_wg_ws_staged_launches(void) { return g_staged_launches; }
extern "C" int cuda_moe_wg_tma(void) { return wg_tma(); }
extern "C" long cuda_moe_wg_tma_launches(void) { return g_tma_launches; }
extern "C" long cuda_moe_wg_tma_rows_launches(void) { return g_tma_rows_launches; }

// the TMA map of the expert weights W of a row GEMM (E experts of n_out x kd, K-major, W_T = false;
// or kd x n_out, MN-major), its boxes as ws_produce_tile's TMA takes them (halves: the fused
// forward GLU's two boxes of 128 rows)
static void ws_weight_map(CUtensorMap *m, const WgRows &a, bool w_t, bool halves) {
    const uint64_t inner = w_t ? a.n_out : a.kd, outer = w_t ? a.kd : a.n_out;
    const uint64_t dims[3] = {inner, outer, (uint64_t)a.E}, strides[2] = {inner * 2, inner * outer * 2};
    const uint32_t box[3] = {64, w_t ? 64u : halves ? (uint32_t)WS_BN / 2 : (uint32_t)WS_BN, 1};
    tma_map_bf16(m, a.W, 3, dims, strides, box);
}
// the TMA map of rows R (row-major, `cols` wide: a row GEMM's X, cols = kd; a weight gradient's G
// or X, cols = P or Q), boxes of {64 cols, box_rows rows}: a row GEMM's whole tile, {64 k, 128 rows}
// (ws_produce_tile's WS_TMA_ROWS), or one whole k-step's MN-major column of 64, {64, 64}
// (ws_produce_wgrad_tma). Its row count is 2^31, a bound and not R's: the op is not told R's rows
// (their count is the offsets' last, on the device), and only whole tiles or k-steps, every row
// of which is an expert's (a split's), go by TMA.
static void ws_rows_map(CUtensorMap *m, const bf16 *R, int cols, int box_rows) {
    const uint64_t dims[2] = {(uint64_t)cols, 1ull << 31}, strides[1] = {(uint64_t)cols * 2};
    const uint32_t box[2] = {64, (uint32_t)box_rows};
    tma_map_bf16(m, R, 2, dims, strides, box);
}
extern "C" long cuda_moe_wg_tma_wgrad_launches(void) { return g_tma_wgrad_launches; }
extern "C" long cuda_moe_wg_ws_launches(void) { return g_ws_launches; }

// wgmma on a GPU that is not compute capability 9.0 stops the run (the kernels exist for sm_90a only)
static void wgmma_gpu_check(const char *who) {
    if (g_cuda.cc != 90)
        die("%s: the wgmma expert GEMMs are built for sm_90a (H100/H200); this GPU has compute capability %d.%d", who,
            g_cuda.cc / 10, g_cuda.cc % 10);
}

// HYBRID_MOE_WGMMA: auto (the default: unset or empty) is on where the GPU is compute capability
// 9.0, 0 is off (our mma.sync kernels), 1 is on and stops the run on any other GPU; anything else
// stops the run naming the switch
int moe_wgmma_on(void) {
    if (g_forced >= 0) return g_forced;
    if (g_env < 0) {
        static const char *const names[] = {"auto", "0", "1"};
        const int v = env_choice("HYBRID_MOE_WGMMA", names, 3);
        if (v == 2) wgmma_gpu_check("HYBRID_MOE_WGMMA=1");
        g_env = v == 0 ? g_cuda.cc == 90 : v == 2;
    }
    return g_env;
}

extern "C" int cuda_moe_wgmma_supported(void) { return g_cuda.cc == 90; }
extern "C" void cuda_moe_set_wgmma(int on) {
    if (on == 1) wgmma_gpu_check("cuda_moe_set_wgmma(1)");
    g_forced = on == 0 || on == 1 ? on : -1;
}
extern "C" int cuda_moe_wgmma(void) { return moe_wgmma_on(); }
extern "C" long cuda_moe_wgmma_launches(void) { return g_launches; }

// The blocks of KERNEL (THREADS threads and SMEM bytes of dynamic shared memory a block) resident at
// once (WgTile<BN>::BLOCKS_PER_SM an SM by design, the warp-specialized kernels one), asked once per
// kernel; under the emulator 3, prime to the emulated shapes' column tile counts (as experts.cu's
// gg_resident_blocks: each block walks several tiles)
template <auto KERNEL, int THREADS, int SMEM>
static unsigned wg_resident_blocks(void) {
#ifdef HYBRID_CUDA_EMU
    return 3;
#else
    static unsigned n;
    if (!n) {
        cuda_allow_dynamic_smem((const void *)KERNEL, SMEM);
        CUDA_CHECK(cudaFuncSetAttribute((const void *)KERNEL, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, KERNEL, THREADS, SMEM));
        n = (unsigned)((per_sm < 1 ? 1 : per_sm) * g_cuda.sm_count);
    }
    return n;
#endif
}

template <int BN, bool W_T, int EPI>
static void wg_rows_run(const WgRows &a) {
    launch_kernel(rows_wg_kernel<BN, W_T, EPI>,
                  dim3(wg_resident_blocks<rows_wg_kernel<BN, W_T, EPI>, WG_THREADS, WgTile<BN>::SMEM>()),
                  dim3(WG_THREADS), WgTile<BN>::SMEM, a);
}
// HYBRID_MOE_WG_WS=auto: the warp-specialized kernel for every row GEMM with the plain store (both
// of a forward, both data gradients), its weights and whole tiles' rows by TMA, its store staged
// through shared memory; the default kernels for the GLU epilogues (HYBRID_MOE_WG_GLU_FUSED=1). The
// weight gradients: wg_wgrad_launch. From the H200 (docs/hybrid.md, "The expert GEMMs on wgmma"; session 30):
// that setting (rows, TMA 2, staged) took 16-36% off each of the four row GEMMs at KL-S, at the
// large shape and at C 384 / M 512, against the default kernels and against session 29's auto
// (the data gradients with reductions of 1024 or more, with TMA weights only), in the same call.
static bool ws_auto_pick(int epi) { return epi == WG_EPI_STORE; }

// one warp-specialized row GEMM kernel, a block an SM (its shared memory: the ring, and the
// staging tiles when STAGED)
template <bool W_T, int TMA, int EPI, bool STAGED>
static void ws_rows_kernel_launch(const WgRows &a, const CUtensorMap &wmap, const CUtensorMap &xmap) {
    constexpr int SMEM = STAGED ? WS_SMEM_STAGED : WS_SMEM;
    launch_kernel(rows_ws_kernel<W_T, TMA, EPI, STAGED>,
                  dim3(wg_resident_blocks<rows_ws_kernel<W_T, TMA, EPI, STAGED>, WS_THREADS, SMEM>()), dim3(WS_THREADS),
                  SMEM, a, wmap, xmap);
}
// the staged store exists for the plain store only (the GLU epilogues keep theirs)
template <bool W_T, int TMA, int EPI>
static void ws_rows_run(const WgRows &a, const CUtensorMap &wmap, const CUtensorMap &xmap, bool staged) {
    if constexpr (EPI == WG_EPI_STORE) {
        if (staged) {
            g_staged_launches++;
            ws_rows_kernel_launch<W_T, TMA, EPI, true>(a, wmap, xmap);
            return;
        }
    }
    ws_rows_kernel_launch<W_T, TMA, EPI, false>(a, wmap, xmap);
}
template <bool W_T, int EPI>
static void wg_rows_launch(const WgRows &a) {
    g_launches++;
    // (the switches read at every launch: a bad value stops the run)
    const int ws = wg_ws(), tma_switch = wg_tma(), staged_switch = wg_ws_staged();
    const bool pick = ws == WS_AUTO && ws_auto_pick(EPI);
    const int tma = pick ? WS_TMA_ROWS : tma_switch;
    if ((pick || ws == WS_ROWS || ws == WS_ALL) && wg_bn() == WS_BN) {
        g_ws_launches++;
        CUtensorMap wmap, xmap;
        memset(&wmap, 0, sizeof wmap), memset(&xmap, 0, sizeof xmap);
        if (tma) {
            g_tma_launches++;
            ws_weight_map(&wmap, a, W_T, EPI == WG_EPI_GLU_FWD);
        }
        if (tma == WS_TMA_ROWS) {
            g_tma_rows_launches++;
            ws_rows_map(&xmap, a.X, a.kd, WG_BM);
        }
        const bool staged = pick || staged_switch;
        if (tma == WS_TMA_ROWS) ws_rows_run<W_T, WS_TMA_ROWS, EPI>(a, wmap, xmap, staged);
        else if (tma) ws_rows_run<W_T, WS_TMA_W, EPI>(a, wmap, xmap, staged);
        else ws_rows_run<W_T, 0, EPI>(a, wmap, xmap, staged);
    } else if (wg_bn() == 128) wg_rows_run<128, W_T, EPI>(a);
    else wg_rows_run<256, W_T, EPI>(a);
}

int moe_wg_rows(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd, int w_t) {
    if (!moe_wgmma_on() || n_out <= 0 || !gg_vec_ok(Y, X, W, n_out, kd)) return 0;
    const WgRows a = {Y, X, W, offsets, E, n_out, kd, NULL, NULL, 0, 0.f, 0.f};
    if (w_t) wg_rows_launch<true, WG_EPI_STORE>(a);
    else wg_rows_launch<false, WG_EPI_STORE>(a);
    return 1;
}

// The split count of a weight gradient on these kernels, from its shape alone (experts.cu's
// wgrad_splits for 128 x BN tiles): tiles = E ceil(P/128) ceil(Q/BN) blocks of one split each fill
// the block slots of an H100/H200 (132 SMs x WgTile<BN>::BLOCKS_PER_SM, a constant) in
// ceil(tiles S / slots) waves; S is the smallest count whose waves are at least 90% full on
// average, at most 8. Not the device's SM count: the split decides the fp32 sum order, so the bits
// are the same on every GPU. BN = 256 (132 slots): KL-S (E 16, C 768, M 256) dW2 (768 x 256) 96
// tiles -> S 4 (384 blocks, 97%), dW13 (512 x 768) 192 tiles -> S 2 (97%); the large shape (E 64,
// C 2048, M 1024) 4096 and 8192 tiles, S 1. BN = 128 (264 slots): KL-S 192 -> S 4 (768, 97%),
// 384 -> S 2 (97%); large S 1.
template <int BN>
static int wg_wgrad_splits(int E, int P, int Q) {
    const long tiles = (long)E * ((P + WG_BM - 1) / WG_BM) * ((Q + BN - 1) / BN), slots = 132L * WgTile<BN>::BLOCKS_PER_SM;
    int S = 1;
    for (; S < 8; S++) {
        const long blocks = tiles * S, waves = (blocks + slots - 1) / slots;
        if (blocks * 10 >= waves * slots * 9) break;
    }
    return S;
}

// one warp-specialized weight-gradient kernel, a block an SM walking the units (no more blocks
// than units)
template <int TMA>
static void ws_wgrad_kernel_launch(long units, float *dW, float *ws, const bf16 *G, const bf16 *X, const int *offsets,
                                   int E, int P, int Q, int S, const CUtensorMap &gmap, const CUtensorMap &xmap) {
    const unsigned fit = wg_resident_blocks<wgrad_ws_kernel<TMA>, WS_THREADS, WS_SMEM>();
    launch_kernel(wgrad_ws_kernel<TMA>, dim3(units < fit ? (unsigned)units : fit), dim3(WS_THREADS), WS_SMEM, dW, ws, G,
                  X, offsets, E, P, Q, S, gmap, xmap);
}

template <int BN>
static int wg_wgrad_launch(float *dW, float **ws, const bf16 *G, const bf16 *X, const int *offsets, int E, int P,
                           int Q, int force_splits) {
    const int S = force_splits > 0 ? force_splits : wg_wgrad_splits<BN>(E, P, Q);
    *ws = S > 1 ? (float *)scratch_get(sizeof(float) * (size_t)E * S * P * Q) : NULL;
    // auto: every weight gradient warp-specialized, its whole k-steps by TMA (what `all` with
    // HYBRID_MOE_WG_TMA=2 runs). From the H100 (session 31; docs/hybrid.md, "The expert GEMMs on
    // wgmma"): 18-33% off both weight gradients at KL-S (dW13 0.300 -> 0.200 ms, dW2 0.185 ->
    // 0.152) and at C 384 / M 512, in the same call (the large shape's run on cuBLAS, the mixed
    // mode's rule, either way).
    const bool pick = wg_ws() == WS_AUTO;
    if (BN == WS_BN && (pick || wg_ws() == WS_ALL)) {
        g_ws_launches++;
        const long units = (long)((Q + BN - 1) / BN) * ((P + WG_BM - 1) / WG_BM) * E * S;
        CUtensorMap gmap, xmap;
        memset(&gmap, 0, sizeof gmap), memset(&xmap, 0, sizeof xmap);
        if (pick || wg_tma() == WS_TMA_ROWS) {
            g_tma_wgrad_launches++;
            ws_rows_map(&gmap, G, P, WG_BK), ws_rows_map(&xmap, X, Q, WG_BK);
            ws_wgrad_kernel_launch<WS_TMA_ROWS>(units, dW, *ws, G, X, offsets, E, P, Q, S, gmap, xmap);
        } else {
            ws_wgrad_kernel_launch<0>(units, dW, *ws, G, X, offsets, E, P, Q, S, gmap, xmap);
        }
        return S;
    }
    wg_resident_blocks<wgrad_wg_kernel<BN>, WG_THREADS, WgTile<BN>::SMEM>();  // (the shared-memory opt-in, once)
    launch_kernel(wgrad_wg_kernel<BN>, dim3((Q + BN - 1) / BN, (P + WG_BM - 1) / WG_BM, E * S), dim3(WG_THREADS),
                  WgTile<BN>::SMEM, dW, *ws, G, X, offsets, P, Q, S);
    return S;
}

int moe_wg_wgrad(float *dW, float **ws, const bf16 *G, const bf16 *X, const int *offsets, int E, int P, int Q,
                 int force_splits) {
    if (!moe_wgmma_on() || P <= 0 || Q <= 0 || !gg_vec_ok(dW, G, X, P, Q)) return 0;
    g_launches++;
    return wg_bn() == 128 ? wg_wgrad_launch<128>(dW, ws, G, X, offsets, E, P, Q, force_splits)
                          : wg_wgrad_launch<256>(dW, ws, G, X, offsets, E, P, Q, force_splits);
}

int moe_wg_rows_glu(bf16 *hp, bf16 *ap, const bf16 *xp, const bf16 *w13, const int *offsets, int E, int C, int M,
                    int kind, float beta, float lbeta) {
    if (!moe_wgmma_on() || !wg_glu_on() || M <= 0 || M % (wg_bn() / 2) || !gg_vec_ok(hp, xp, w13, C, 8) ||
        !is_aligned16(ap))
        return 0;
    wg_rows_launch<false, WG_EPI_GLU_FWD>(WgRows{hp, xp, w13, offsets, E, 2 * M, C, ap, NULL, kind, beta, lbeta});
    return 1;
}

int moe_wg_rows_dglu(bf16 *dhp, const bf16 *dyp, const bf16 *w2, const bf16 *hp, const int *offsets, int E, int C,
                     int M, int kind, float beta, float lbeta) {
    if (!moe_wgmma_on() || !wg_glu_on() || M <= 0 || !gg_vec_ok(dhp, dyp, w2, C, M) || !is_aligned16(hp)) return 0;
    wg_rows_launch<true, WG_EPI_GLU_BWD>(WgRows{dhp, dyp, w2, offsets, E, M, C, NULL, hp, kind, beta, lbeta});
    return 1;
}
