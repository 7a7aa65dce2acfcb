// grad1 of the tensor-core chunkwise backward (KDA / GDN / DeltaNet), the first of the default
// pair of gradient kernels (grad2: chunk_grad2_mma.cu), per (chunk slot, head), after the
// reverse walk (chunk_bwalk_mma.cu); docs/delta-rule.md, "Chunkwise backward" (stages B1 to
// B6) and "CUDA kernels" (the split of the grad kernel, its memory traffic, grad1 at two blocks
// an SM, Delta and dDelta stored split). It reads the recomputed workspace and the reverse
// walk's outputs (DrWsMma, chunk.cuh) and hands dA, dL, db, gend to grad2 through it; its
// shared-memory layout is stated at its sizes (grad1n_tiles_off) and in its comments; the pair
// and the single kernel it splits, below; the pieces the gradient kernels share, chunk_grad.cuh.
#include "kernels/delta_rule/chunk_grad.cuh"

// ---- grad: per (chunk slot, head) -----------------------------------------------------
// Stages B1, B3, the gradient of the triangular inverse, B4 and B6 (as chunk_bwd.cu's SIMT
// kernel), reading the tensor-core workspace: Gamma recomputed from g; T, Delta (ws.U), h
// (hi + lo), dH' (hi + lo), dDelta (their hi parts alone where !LO: chunk.cuh, dr_mma3x). Two
// kernels (branch dr-grad; the split keeps every sum in the same order, so the gradients are
// bit-identical to the single kernel):
//   grad1: B1, B3, the dGamma_end extras, dT's K part, Wbar / Ubar (dv) and the
//     triangular-inverse gradient; writes dA, dL ([64][64] fp32), the partial dbeta (db) and
//     gend to the workspace: dr_grad1_mma_kernel, 112.5 KiB at K = V = 128, 128 registers,
//     two blocks an SM. (A one-block version built on dr_grad_front, 165 KiB and 195
//     registers, gave the same bits and measured 9.87 against 8.72 ms for the pair at B8
//     T4096 H16 on the H200, docs/delta-rule.md: removed.)
//   grad2 (dr_grad2_mma_kernel): B4 and B6 (dr_grad_finish_v), with Gamma recomputed (from g
//     staged in the tile region), the dA / dL tiles and the Kr / Qr / Kb tiles by K halves of
//     32 columns, all one bf16 (one MMA a product), the chunk's k and q staged: 109.25 KiB at
//     K = 128, two blocks an SM.
// The single kernel (dr_grad_mma_kernel, 191 KiB: one block an SM; chunk_grad_ref_mma.cu) stays
// as the reference, run under HYBRID_DR_GRAD_REF=1 (read at each call; tests/gpu/test_delta_rule.c
// checks the bits of both).
// grad1: B1's tiles (10 of [64][40] bf16 and its q, k columns, 2 of [64][72]) are its largest
// use of the tile region (B3: 5 of [64][72]; the g tile [64][K8] bf16; T^T [64][65] fp32)

// ---- grad1, two blocks an SM ----
// The same stages, products and sums as dr_grad_front in the single kernel (every element
// keeps its operations and their order, so ws.dA, dL, db, gend, dQ, dK, dG, dW and dv hold the
// same bits; tests/gpu/test_delta_rule.c checks the final gradients against the single kernel),
// reordered so that at most 128 registers and 112.5 KiB of shared memory (K = V = 128) are live,
// two blocks (16 warps) an SM where the earlier one-block version ran one (8 warps, latency-bound on its
// global round trips with nothing to overlap them). ptxas (sm_90, CUDA 13): 128 registers; spilled
// (stores / loads) 28 / 44 bytes with Delta / dDelta as stored pairs (SPLIT), 12 / 12 with them
// fp32 (HYBRID_DR_DELTA_F32=1), since session 16's swizzled Gamma tile (before it 0 / 0 and
// 4 / 4, and grad1 5% slower). The fragment epilogues store and load each row's column pair of dQ, dK,
// dG, dW as one 8-byte access and of dv as one 4-byte one (dr_st_pair: the 4 lanes of a row use
// a whole 32-byte sector). The price: stage 2 reads dO, Delta, dDelta and v once more, and T is read
// twice (688 KiB read a (chunk, head) at K = V = 128, the one-block version 592; writes the same
// 241 KiB), and 37 barriers a chunk instead of 34 (stage 2's 4 at V = 128).
//   1. Gamma (cumsum of a cp.async-staged g tile), beta.
//   2. dA = scale dO Delta^T (c <= r) straight to ws.dA, dT's V part dDelta V^T to shared memory:
//      their own pass over V tiles of 64 (the one-block version's first K tile carried these 32
//      accumulators next to the 48 of B1 / B3: 195 registers).
//   3. B1, B3 by K tiles of 64, V tiles of 32: HD, DK, dW, <h_i, dH'_i> (48 + 8 accumulators);
//      one MMA a product with the Delta pairs loads step j + 1's tiles during step j (PIPE).
//   4. the dGamma_end extras (k . dk over the rows, 16 rows' loads a batch).
//   5. dT's K part and Wbar, 6. Ubar: T^T rounded once into one [64][72] bf16 tile read by
//      ldmatrix (the one-block version held it, hi + lo, as 32 registers through both passes); dW and k
//      (5) arrive as 16-byte loads, all of a thread's issued before the first is rounded (one
//      global round trip a tile); dDelta (2, 3, 6) and Delta (2, 3) as their stored hi + lo
//      pairs by cp.async in the commit group of the tiles beside them (SPLIT; without it,
//      HYBRID_DR_DELTA_F32=1, fp32 by 16-byte loads split here, dr_tile_bf16).
//   7. the triangular-inverse gradient, T reloaded (cp.async) into the spent tiles.
// Shared memory (fp32 words): G [64][grad1_lg(K)] (swizzled: grad1_gx), dT [64][64], bs [64],
// db [64], dbp [2][64], gend [K], then the tile region: max(3: nine [64][40] + q, k [64][72]
// bf16 (2's six [64][72] fit in it); 5: five [64][72] bf16; 7: T, tmp [64][64] + T^T [64][65]
// fp32; 1: g [64][K8] bf16) = 63 KiB for K <= 256.
// grad1's Gamma tile: row stride K rounded up to 32, channel i of row r at column i ^ 8 (r & 3)
// (grad1_gx). Its readers take a row's column pair (i, i + 1) in the MMA fragments' layout (rows
// gq = 0..7, pairs t4 = 0..3 of a warp) and 4 channels a thread in stage 5; at the unswizzled
// row stride of 128 all 8 rows of a fragment read sat on the same 8 banks (8-way conflicts, the
// short-scoreboard waits of stage 3's and stage 6's epilogues: Nsight Compute, session 16).
// With rows r & 3 on distinct 8-bank groups, a half warp's float2 reads (4 rows x 4 pairs) and a
// quarter warp's float4 reads (8 groups of one row) are conflict-free. The XOR stays inside a
// 32-column block, so inside the row; the same values are read, so the bits stay. (grad2's
// Gamma layout, grad2_lg / dr_gsw, answers other reads and pads each row by 8 floats: 2 KiB
// more here, which two blocks an SM at K = V = 128 do not leave.)
__host__ __device__ __forceinline__ int grad1_lg(int K) { return (K + 31) & ~31; }
__device__ __forceinline__ int grad1_gx(int LG, int r, int i) { return r * LG + (i ^ ((r & 3) << 3)); }
// the pair (i, i + 1) of a Gamma row at p = G + grad1_gx(LG, r, i), i even (one 8-byte read;
// the pair stays adjacent under the swizzle); the second 0 where i + 1 is past K (both false)
__device__ __forceinline__ float2 grad1_g2(const float *p, bool both) {
    return both ? *reinterpret_cast<const float2 *>(p) : make_float2(p[0], 0.f);
}
__host__ __device__ __forceinline__ size_t grad1n_tiles_off(int K) {
    return ((size_t)DR_BT * grad1_lg(K) + DR_BT * DR_BT + 4 * DR_BT + (size_t)K + 7) & ~(size_t)7;
}
static size_t grad1n_mma_smem(int K) {
    const size_t b3 = (9 * DR_BT * 40 + 2 * DR_BT * 72) * 2, b5 = 5 * DR_BT * 72 * 2,
                 b7 = (2 * DR_BT * DR_BT + DR_BT * (DR_BT + 1)) * 4, bg = (size_t)DR_BT * ((K + 7) & ~7) * 2;
    size_t t = b3 > b5 ? b3 : b5;
    t = t > b7 ? t : b7;
    t = t > bg ? t : bg;
    return grad1n_tiles_off(K) * sizeof(float) + t;
}

// x (of operand op) as hi + lo bf16 at hi[0..3], lo[0..3] (dr_split each; 8-byte aligned)
__device__ __forceinline__ void dr_split4(DrSplitOperand op, float4 x, bf16 *hi, bf16 *lo) {
    uint2 h, l;
    dr_split_pair(op, x.x, x.y, h.x, l.x);
    dr_split_pair(op, x.z, x.w, h.y, l.y);
    *reinterpret_cast<uint2 *>(hi) = h;
    *reinterpret_cast<uint2 *>(lo) = l;
}
// x as 4 bf16 at hi[0..3] (an operand kept as one bf16: dr_split's hi alone; 8-byte aligned)
__device__ __forceinline__ void dr_round4(float4 x, bf16 *hi) {
    __nv_bfloat162 *H2 = (__nv_bfloat162 *)hi;
    H2[0] = __floats2bfloat162_rn(x.x, x.y);
    H2[1] = __floats2bfloat162_rn(x.z, x.w);
}
// p[0..3] (fp32) with entries at column c + u >= ncols, or when !in, zero: one 16-byte load
// where vec (the row stride and base a multiple of 4 floats) and the 4 columns are in range
__device__ __forceinline__ float4 dr_ld4f(const float *p, bool in, int c, int ncols, bool vec) {
    if (in && vec && c + 4 <= ncols) return *(const float4 *)p;
    float4 x;
    x.x = in && c < ncols ? p[0] : 0.f;
    x.y = in && c + 1 < ncols ? p[1] : 0.f;
    x.z = in && c + 2 < ncols ? p[2] : 0.f;
    x.w = in && c + 3 < ncols ? p[3] : 0.f;
    return x;
}
// p[0..3] (bf16) as their bits, entries at column c + u >= ncols, or when !in, +0: one 8-byte
// load where vec (the row stride and base a multiple of 4 elements) and the 4 columns are in range
__device__ __forceinline__ uint2 dr_ld4h(const bf16 *p, bool in, int c, int ncols, bool vec) {
    if (in && vec && c + 4 <= ncols) return *(const uint2 *)p;
    const unsigned short *b = (const unsigned short *)p;
    const uint32_t x0 = in && c < ncols ? b[0] : 0u, x1 = in && c + 1 < ncols ? b[1] : 0u,
                   x2 = in && c + 2 < ncols ? b[2] : 0u, x3 = in && c + 3 < ncols ? b[3] : 0u;
    uint2 u;
    u.x = x0 | x1 << 16, u.y = x2 | x3 << 16;
    return u;
}
// The thread's part of an fp32 tile [64][W] (row stride ld, rows >= n and columns >= ncols
// zero) into bf16 tiles of row stride lds: split hi + lo (LO: operand op) or rounded to one
// bf16 (Xh only; op, Xl unused), its W / 16 16-byte loads all issued first.
template <int W, bool LO>
__device__ __forceinline__ void dr_tile_bf16(DrSplitOperand op, bf16 *Xh, bf16 *Xl, int lds, const float *src,
                                             size_t ld, int n, int ncols, int tid) {
    constexpr int Q = W / 4, PER = DR_BT * Q / DR_THREADS;
    const bool vec = ld % 4 == 0 && ((uintptr_t)src & 15) == 0;
    float4 x[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int e = tid + u * DR_THREADS, r = e / Q, c = (e % Q) * 4;
        x[u] = dr_ld4f(src + (size_t)r * ld + c, r < n, c, ncols, vec);
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int e = tid + u * DR_THREADS, r = e / Q, c = (e % Q) * 4;
        if (LO) dr_split4(op, x[u], Xh + r * lds + c, Xl + r * lds + c);
        else dr_round4(x[u], Xh + r * lds + c);
    }
}
// an fp32 tile rounded to one bf16 tile (dr_tile_bf16; an operand with no lo part)
template <int W>
__device__ __forceinline__ void dr_round_tile(bf16 *Xh, int lds, const float *src, size_t ld, int n, int ncols,
                                              int tid) {
    dr_tile_bf16<W, false>(DRS_COUNT, Xh, NULL, lds, src, ld, n, ncols, tid);
}

// Delta and dDelta's columns [j0, j0 + W) into their bf16 tiles (hi; lo where LO): SPLIT, the
// stored pairs by cp.async; else the fp32 values split (or rounded) here. Commits one cp.async
// group between the two (the caller's loads issued before it join that group).
template <int W, bool SPLIT, bool LO>
__device__ __forceinline__ void dr_grad1_deltas(bf16 *Dh, bf16 *Dl, bf16 *dDh, bf16 *dDl, int lds, const float *D,
                                                const float *dD, int V, int j0, int n, int tid) {
    if (SPLIT) {
        dr_load_split_tile<W, DR_THREADS, LO>(Dh, Dl, lds, (const bf16 *)D, V, j0, n, tid);
        dr_load_split_tile<W, DR_THREADS, LO>(dDh, dDl, lds, (const bf16 *)dD, V, j0, n, tid);
    }
    cp_async_commit();
    if (!SPLIT) {
        dr_tile_bf16<W, LO>(DRS_DELTA, Dh, Dl, lds, D + j0, V, n, V - j0, tid);
        dr_tile_bf16<W, LO>(DRS_DDELTA, dDh, dDl, lds, dD + j0, V, n, V - j0, tid);
    }
}

// LO: the split arithmetic, else one MMA a product (chunk.cuh, dr_mma3x: Delta, dDelta, h and dH'
// as their hi parts alone, their lo tiles never filled). SPLIT: Delta, dDelta as hi + lo pairs
// (ws.dsplit): cp.async; else fp32, split here. KV: 0, or DR_KV_FIXED (chunk.cuh)
template <bool LO, bool SPLIT, int KV, bool FULL>  // FULL: whole chunks only (dr_full_chunks; chunk.cuh)
__global__ void __launch_bounds__(DR_THREADS, 2)  // 2 blocks an SM: at most 128 registers
    dr_grad1_mma_kernel(DrWsMma ws, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                        const bf16 *g, const bf16 *beta, int gate, float scale, int Tlen, int H, int K_arg, int V_arg,
                        const int *offsets, int N) {
    const int K = KV ? KV : K_arg, V = KV ? KV : V_arg;
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    static_assert(!FULL || KV, "FULL instances are built for K = V = DR_KV_FIXED only");
    if (FULL) n = DR_BT;
    const size_t sh = (size_t)x * H + h;
    DYNAMIC_SMEM(float, sm);
    const float *Tg = ws.T + sh * C * C, *D = ws.U + sh * C * V, *dD = ws.dD + sh * C * V;
    const bf16 *Hh = ws.h + sh * K * V, *Hl = ws.hl + sh * K * V, *dHh = ws.dh + sh * K * V, *dHl = ws.dhl + sh * K * V;
    float *dQ = ws.dQ + sh * C * K, *dK = ws.dK + sh * C * K, *dG = ws.dG + sh * C * K;
    bf16 *dW = ws.dW + sh * C * K;  // (bf16: stage 5 rounds it anyway; chunk.cuh)
    float *dAg = ws.dA + sh * C * C, *dLg = ws.dL + sh * C * C;
    const int LG = grad1_lg(K);
    float *G = sm, *dT = G + C * LG, *bs = dT + C * C, *db = bs + C, *dbp = db + C, *gend = dbp + 2 * C;
    // the fragment epilogues' column pairs as single accesses (dr_ld_pair): K (V) even, dv
    // 4-byte aligned (the workspace arrays are 256-byte aligned)
    const bool kpairs = (K & 1) == 0, vpairs = (V & 1) == 0 && ((uintptr_t)dv & 3) == 0;
    bf16 *tiles = (bf16 *)(sm + grad1n_tiles_off(K));
    const int mt = warp & 3, half = warp >> 2, c0 = half * 32, gq = lane >> 2, t4 = lane & 3;

    // 1. Gamma (as dr_grad_front: the same sums in the same order), beta
    const int K8 = (K + 7) & ~7;
    if (gate == DRG_CHANNEL) {
        dr_load_tile(tiles, K8, g + ((size_t)tok0 * H + h) * K, (size_t)H * K, C, K8, n, K, tid, DR_THREADS);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    }
    for (int i = tid; i < K; i += DR_THREADS) {
        float acc = 0.f;
        for (int r = 0; r < C; r++) {
            if (r < n) acc += gate == DRG_CHANNEL ? __bfloat162float(tiles[r * K8 + i])
                                                  : dr_gate(g, gate, (size_t)(tok0 + r), h, i, H, K);
            G[grad1_gx(LG, r, i)] = acc;
        }
    }
    for (int r = tid; r < C; r += DR_THREADS) {
        bs[r] = r < n ? dr_ld(beta + (size_t)(tok0 + r) * H + h) : 0.f;
        db[r] = 0.f;
    }
    __syncthreads();  // G written; the g tile is spent

    // 2. dA = scale dO Delta^T (c <= r, to ws.dA), dT = dDelta V^T (V part, to shared memory), by
    // V tiles of 64 (six [64][72] tiles: the tile region has room for them, and half the tiles of
    // 32 are half the cp.async waits and barriers); warp: rows 16 (w % 4).., columns 32 (w / 4)..;
    // per element the MMAs of the one-block version's first K tile in its order (its k-steps of
    // 16 over V ascending, as the tiles of 32 took them; where V is not a multiple of 64 the last
    // tile's k-steps past V multiply zeros, and an accumulator that starts at +0 is never -0, so
    // adding their +0 changes no bit)
    {
        const int LB = 72;
        bf16 *dOt = tiles, *Dh = dOt + C * LB, *Dl = Dh + C * LB, *dDh = Dl + C * LB, *dDl = dDh + C * LB,
             *vt = dDl + C * LB;
        float aa[4][4] = {}, at[4][4] = {};
        for (int j0 = 0; j0 < V; j0 += 64) {
            dr_load_tile(dOt, LB, dout + ROWV(0) + j0, (size_t)H * V, C, 64, n, V - j0, tid, DR_THREADS);
            dr_load_tile(vt, LB, v + ROWV(0) + j0, (size_t)H * V, C, 64, n, V - j0, tid, DR_THREADS);
            dr_grad1_deltas<64, SPLIT, LO>(Dh, Dl, dDh, dDl, LB, D, dD, V, j0, n, tid);
            cp_async_wait<0>();
            __syncthreads();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t ao[4], agh[4], agl[4];
                dr_lda(ao, dOt, LB, mt * 16, kk * 16, lane);
                dr_lda(agh, dDh, LB, mt * 16, kk * 16, lane);
                if constexpr (LO) dr_lda(agl, dDl, LB, mt * 16, kk * 16, lane);
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    const int n0 = c0 + p * 16;
                    uint32_t bh[4], bl[4], bv[4];
                    dr_ldb_nk(bh, Dh, LB, kk * 16, n0, lane);
                    if constexpr (LO) dr_ldb_nk(bl, Dl, LB, kk * 16, n0, lane);
                    dr_ldb_nk(bv, vt, LB, kk * 16, n0, lane);
                    for (int u = 0; u < 2; u++) {
                        if constexpr (LO) mma16816(aa[2 * p + u], ao, bl[2 * u], bl[2 * u + 1]);
                        mma16816(aa[2 * p + u], ao, bh[2 * u], bh[2 * u + 1]);
                        if constexpr (LO) mma16816(at[2 * p + u], agl, bv[2 * u], bv[2 * u + 1]);
                        mma16816(at[2 * p + u], agh, bv[2 * u], bv[2 * u + 1]);
                    }
                }
            }
            __syncthreads();  // the tiles are reloaded
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), cc = c0 + nt * 8 + 2 * t4 + (e & 1);
                dAg[r * C + cc] = (cc <= r && r < n) ? scale * aa[nt][e] : 0.f;
                dT[r * C + cc] = at[nt][e];
            }
    }

    // 3. B1 and B3 (dr_grad_front's, without the first K tile's dA, dT): HD, DK, dW and <h_i, dH'_i>
    {
        const int LB = 40, LQ = 72, nkt = (dr_pad16(K) + 63) / 64;
        bf16 *dOt = tiles, *Dh = dOt + C * LB, *Dl = Dh + C * LB, *dDh = Dl + C * LB, *dDl = dDh + C * LB,
             *hh = dDl + C * LB, *hl = hh + C * LB, *gh = hl + C * LB, *gl = gh + C * LB, *qs = gl + C * LB,
             *ks = qs + C * LQ;
        // One MMA a product with the Delta pairs (PIPE): a second set of the step's five tiles in
        // the four lo tiles it leaves free and in qs (qs, ks then arrive after the V steps, for the
        // epilogue), so step j + 1's tiles load while step j multiplies; the other instances load
        // a step's tiles and wait for them (below, unchanged). Stage 3's waits for its tiles were
        // most of grad1's warp samples (docs/delta-rule.md, "CUDA kernels"). Set 1: dOt in qs,
        // Delta in Dl, dDelta in dDl, h in hl, dH' in gl (selects, not an indexed array: that went
        // to the stack).
        constexpr bool PIPE = !LO && SPLIT;
        auto set_o = [&](int st) { return st ? qs : dOt; };
        auto set_d = [&](int st) { return st ? Dl : Dh; };
        auto set_dd = [&](int st) { return st ? dDl : dDh; };
        auto set_h = [&](int st) { return st ? hl : hh; };
        auto set_g = [&](int st) { return st ? gl : gh; };
        for (int kt = 0; kt < nkt; kt++) {
            const int i0 = kt * 64;
            float aq[4][4] = {}, ak[4][4] = {}, aw[4][4] = {};
            float hd[8] = {};
            if constexpr (PIPE) {
                if (kt > 0) __syncthreads();  // the previous epilogue has read qs, ks
                auto issue = [&](int j0, int st) {  // step j0's five tiles into set st, one commit group
                    dr_load_tile(set_o(st), LB, dout + ROWV(0) + j0, (size_t)H * V, C, 32, n, V - j0, tid, DR_THREADS);
                    dr_load_tile(set_h(st), LB, Hh + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                    dr_load_tile(set_g(st), LB, dHh + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                    dr_load_split_tile<32, DR_THREADS, false>(set_d(st), set_d(st), LB, (const bf16 *)D, V, j0, n, tid);
                    dr_load_split_tile<32, DR_THREADS, false>(set_dd(st), set_dd(st), LB, (const bf16 *)dD, V, j0, n, tid);
                    cp_async_commit();
                };
                const int nj = (V + 31) / 32;
                issue(0, 0);
                for (int j = 0; j < nj; j++) {
                    if (j + 1 < nj) {  // (set (j + 1) & 1 was last read by step j - 1, before its barrier)
                        issue((j + 1) * 32, (j + 1) & 1);
                        cp_async_wait<1>();
                    } else {
                        cp_async_wait<0>();
                    }
                    __syncthreads();
                    const int st = j & 1;
                    const bf16 *tO = set_o(st), *tD = set_d(st), *tdD = set_dd(st), *th = set_h(st), *tg = set_g(st);
                    // the products below, one MMA each (the lo parts absent)
#pragma unroll
                    for (int kk = 0; kk < 2; kk++) {
                        uint32_t ao[4], ad[4], ag[4];
                        dr_lda(ao, tO, LB, mt * 16, kk * 16, lane);
                        dr_lda(ad, tD, LB, mt * 16, kk * 16, lane);
                        dr_lda(ag, tdD, LB, mt * 16, kk * 16, lane);
#pragma unroll
                        for (int p = 0; p < 2; p++) {
                            const int n0 = c0 + p * 16;
                            uint32_t b[4];
                            dr_ldb_nk(b, th, LB, kk * 16, n0, lane);
                            for (int u = 0; u < 2; u++) {
                                mma16816(aq[2 * p + u], ao, b[2 * u], b[2 * u + 1]);
                                mma16816(aw[2 * p + u], ag, b[2 * u], b[2 * u + 1]);
                            }
                            dr_ldb_nk(b, tg, LB, kk * 16, n0, lane);
                            for (int u = 0; u < 2; u++) mma16816(ak[2 * p + u], ad, b[2 * u], b[2 * u + 1]);
                        }
                    }
                    if (j * 32 + lane < V)
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            const int xx = (warp + 8 * u) * LB + lane;
                            hd[u] += __bfloat162float(th[xx]) * __bfloat162float(tg[xx]);
                        }
                    __syncthreads();  // set st is refilled by step j + 2 (or qs below)
                }
                dr_load_tile(qs, LQ, q + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
                dr_load_tile(ks, LQ, k + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
                cp_async_commit();
                cp_async_wait<0>();
                __syncthreads();
            } else {
                if (kt > 0) __syncthreads();  // the previous epilogue has read qs, ks
                dr_load_tile(qs, LQ, q + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
                dr_load_tile(ks, LQ, k + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
                for (int j0 = 0; j0 < V; j0 += 32) {
                    dr_load_tile(dOt, LB, dout + ROWV(0) + j0, (size_t)H * V, C, 32, n, V - j0, tid, DR_THREADS);
                    dr_load_tile(hh, LB, Hh + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                    if constexpr (LO)
                        dr_load_tile(hl, LB, Hl + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                    dr_load_tile(gh, LB, dHh + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                    if constexpr (LO)
                        dr_load_tile(gl, LB, dHl + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                    dr_grad1_deltas<32, SPLIT, LO>(Dh, Dl, dDh, dDl, LB, D, dD, V, j0, n, tid);
                    cp_async_wait<0>();
                    __syncthreads();
#pragma unroll
                    for (int kk = 0; kk < 2; kk++) {
                        uint32_t ao[4], adh[4], adl[4], agh[4], agl[4];
                        dr_lda(ao, dOt, LB, mt * 16, kk * 16, lane);
                        dr_lda(adh, Dh, LB, mt * 16, kk * 16, lane);
                        if constexpr (LO) dr_lda(adl, Dl, LB, mt * 16, kk * 16, lane);
                        dr_lda(agh, dDh, LB, mt * 16, kk * 16, lane);
                        if constexpr (LO) dr_lda(agl, dDl, LB, mt * 16, kk * 16, lane);
#pragma unroll
                        for (int p = 0; p < 2; p++) {
                            const int n0 = c0 + p * 16;
                            uint32_t bh[4], bl[4];
                            dr_ldb_nk(bh, hh, LB, kk * 16, n0, lane);
                            if constexpr (LO) dr_ldb_nk(bl, hl, LB, kk * 16, n0, lane);
                            for (int u = 0; u < 2; u++) {  // dO exact: two MMAs (one: !LO)
                                dr_mma2x<LO>(aq[2 * p + u], ao, bh + 2 * u, bl + 2 * u);
                                dr_mma3x<LO>(aw[2 * p + u], agh, agl, bh + 2 * u, bl + 2 * u);
                            }
                            dr_ldb_nk(bh, gh, LB, kk * 16, n0, lane);
                            if constexpr (LO) dr_ldb_nk(bl, gl, LB, kk * 16, n0, lane);
                            for (int u = 0; u < 2; u++) dr_mma3x<LO>(ak[2 * p + u], adh, adl, bh + 2 * u, bl + 2 * u);
                        }
                    }
                    if (j0 + lane < V)
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            const int xx = (warp + 8 * u) * LB + lane;
                            if constexpr (LO)
                                hd[u] += (__bfloat162float(hh[xx]) + __bfloat162float(hl[xx])) *
                                         (__bfloat162float(gh[xx]) + __bfloat162float(gl[xx]));
                            else hd[u] += __bfloat162float(hh[xx]) * __bfloat162float(gh[xx]);
                        }
                    __syncthreads();  // the tiles are reloaded
                }
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int i = i0 + warp + 8 * u;
                const float acc = warp_sum(hd[u]);
                if (lane == 0 && i < K) gend[i] = acc * dr_exp(G[grad1_gx(LG, n - 1, i)]);
            }
            // each row's column pair (i, i + 1) as one 8-byte store (dr_st_pair): whole sectors
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int r = mt * 16 + gq + 8 * hr, cc = c0 + nt * 8 + 2 * t4, i = i0 + cc;
                    if (r >= n || i >= K) continue;
                    float vq[2] = {}, vk[2] = {}, vg[2] = {}, vw[2] = {};
                    const float2 gr2 = grad1_g2(G + grad1_gx(LG, r, i), i + 1 < K);
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const int e = 2 * hr + c;
                        if (i + c >= K) break;
                        // (Gamma_end: one row for the whole warp, a broadcast)
                        const float gr = c ? gr2.y : gr2.x, dqv = scale * dr_exp(gr) * aq[nt][e],
                                    dkv = ak[nt][e] * dr_exp(G[grad1_gx(LG, n - 1, i + c)] - gr);
                        vq[c] = dqv;
                        vk[c] = dkv;
                        vg[c] = dr_dg_term(__bfloat162float(qs[r * LQ + cc + c]), dqv, __bfloat162float(ks[r * LQ + cc + c]), dkv);
                        vw[c] = -aw[nt][e];
                    }
                    const bool in1 = i + 1 < K;
                    dr_st_pair(dQ + r * K + i, kpairs, true, in1, vq[0], vq[1]);
                    dr_st_pair(dK + r * K + i, kpairs, true, in1, vk[0], vk[1]);
                    dr_st_pair(dG + r * K + i, kpairs, true, in1, vg[0], vg[1]);
                    dr_st_pair(dW + r * K + i, kpairs, true, in1, vw[0], vw[1]);
                }
        }
    }
    __syncthreads();

    // 4. the dGamma_end extras: e^Gamma_end <h[n]_i, dH'_i> + sum_r k_r[i] dk_r[i], the rows in
    // order. k and the dK just stored go to shared memory first (the free tile region, by passes
    // of up to 128 channels: [64][W8] bf16 + [64][W4] fp32, 48 KiB at 128), one cp.async round
    // trip, then a thread per channel sums down the rows from there. Until session 13 each thread
    // read its 64 rows of k and dK from global memory, and the `in ? load : 0` of each compiled
    // to a branch around the load with its use right behind it: 64 dependent round trips a
    // thread while the other four warps waited at the next barrier (Nsight Compute's source
    // view: ~20% of grad1's warp samples). The same products and sums in the same order.
    {
        const int W = K < 128 ? K : 128, W8 = (W + 7) & ~7, W4 = (W + 3) & ~3;
        bf16 *kst = tiles;
        float *dks = (float *)(tiles + C * W8);
        const bool dvec = K % 4 == 0;  // dK rows 16-byte aligned (the workspace arrays are 256-byte aligned)
        for (int i0 = 0; i0 < K; i0 += W) {
            const int w = K - i0 < W ? K - i0 : W, c4 = W4 / 4;
            if (i0 > 0) __syncthreads();  // the previous pass has read the tiles
            dr_load_tile(kst, W8, k + ROWQK(0) + i0, (size_t)H * K, C, W8, n, w, tid, DR_THREADS);
            for (int e = tid; e < C * c4; e += DR_THREADS) {
                const int r = e / c4, c = (e % c4) * 4;
                float *d = dks + r * W4 + c;
                const bool in = r < n && c < w;
                const float *src = dK + (size_t)r * K + i0 + c;
                if (dvec && (!in || c + 4 <= w))
                    cp_async16((bf16 *)d, (const bf16 *)(in ? src : dK), in);
                else
                    for (int u = 0; u < 4; u++) d[u] = in && c + u < w ? src[u] : 0.f;
            }
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();
            for (int i = tid; i < w; i += DR_THREADS) {
                float acc = gend[i0 + i];
                for (int r = 0; r < n; r++) acc += __bfloat162float(kst[r * W8 + i]) * dks[r * W4 + i];
                gend[i0 + i] = acc;
            }
        }
        __syncthreads();  // 5. writes Th into the tile region
    }

    // 5, 6. dT's K part and Wbar = T^T dW by K tiles of 64, then Ubar = T^T dU by V tiles of 64
    // (dr_grad_front's, the A operand T^T from the Th tile); warp: rows 16 (w % 4)..,
    // columns 32 (w / 4)..; T^T, dW and Kb are one bf16 each (their lo parts dropped in branch
    // dr-fewer-mma, docs/delta-rule.md, "Accuracy: the per-operand audit"): dW Kb^T and T^T dW
    // one MMA a k-step, T^T dDelta two (dDelta hi + lo).
    {
        const int LT = 72;
        bf16 *Xh = tiles, *Xl = Xh + C * LT, *Bh = Xl + C * LT, *Xs = Bh + C * LT, *Th = Xs + C * LT;
        // T ([64][64] fp32, row-major) as one bf16 tile Th, row-major (A = T^T by the transposed load)
        dr_round_tile<64>(Th, LT, Tg, C, C, C, tid);
        float part[2] = {0.f, 0.f};  // dbeta partials of rows gq, gq + 8 of the m-tile
        float dtk[4][4] = {};
        const bool kvec = K % 4 == 0 && ((uintptr_t)k & 7) == 0;
        for (int i0 = 0; i0 < K; i0 += 64) {
            __syncthreads();  // the previous pass (or 4.) is done with the tiles (and dK, dG)
            dr_load_tile(Xs, LT, k + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
            cp_async_commit();
            // dW (Xh: stored bf16, copied as it is) and Kb = k e^Gamma (Bh): the thread's 4 x 4
            // columns, loads first
            uint2 wv[4];
            float kq[4][4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = tid + u * DR_THREADS, r = e / 16, c = (e % 16) * 4, i = i0 + c;
                const bool in = r < n;
                wv[u] = dr_ld4h(dW + (size_t)r * K + i, in, i, K, K % 4 == 0);
                const bf16 *kp = k + ROWQK(r) + i;
                if (in && kvec && i + 4 <= K) {
                    const uint2 w2 = *(const uint2 *)kp;
                    const __nv_bfloat162 a = *(const __nv_bfloat162 *)&w2.x, b = *(const __nv_bfloat162 *)&w2.y;
                    kq[u][0] = __low2float(a), kq[u][1] = __high2float(a), kq[u][2] = __low2float(b),
                    kq[u][3] = __high2float(b);
                } else
#pragma unroll
                    for (int z = 0; z < 4; z++) kq[u][z] = in && i + z < K ? dr_ld(kp + z) : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = tid + u * DR_THREADS, r = e / 16, c = (e % 16) * 4, i = i0 + c;
                *reinterpret_cast<uint2 *>(Xh + r * LT + c) = wv[u];
                float4 kb, g4;  // (channels i.. stay together under grad1_gx: i % 4 == 0)
                if (i + 4 <= K) g4 = *reinterpret_cast<const float4 *>(G + grad1_gx(LG, r, i));
                else
                    g4 = make_float4(i < K ? G[grad1_gx(LG, r, i)] : 0.f, i + 1 < K ? G[grad1_gx(LG, r, i + 1)] : 0.f,
                                     i + 2 < K ? G[grad1_gx(LG, r, i + 2)] : 0.f, 0.f);
                // (the exponentials unconditional, then the selects: chunk.cuh's dr_exp_note)
                const float e0 = dr_eval(dr_exp(g4.x)), e1 = dr_eval(dr_exp(g4.y)), e2 = dr_eval(dr_exp(g4.z)),
                            e3 = dr_eval(dr_exp(g4.w));
                kb.x = r < n && i < K ? kq[u][0] * e0 : 0.f;
                kb.y = r < n && i + 1 < K ? kq[u][1] * e1 : 0.f;
                kb.z = r < n && i + 2 < K ? kq[u][2] * e2 : 0.f;
                kb.w = r < n && i + 3 < K ? kq[u][3] * e3 : 0.f;
                dr_round4(kb, Bh + r * LT + c);
            }
            cp_async_wait<0>();
            __syncthreads();
            float wb[4][4] = {};
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t ah[4];
                dr_lda(ah, Xh, LT, mt * 16, kk * 16, lane);  // dW: rows r, k = i
                for (int p = 0; p < 2; p++) {
                    uint32_t bh[4];
                    dr_ldb_nk(bh, Bh, LT, kk * 16, c0 + p * 16, lane);  // B[k = i][n = c] = Kb[c][i]
                    mma16816(dtk[2 * p], ah, bh[0], bh[1]);
                    mma16816(dtk[2 * p + 1], ah, bh[2], bh[3]);
                }
                if (kk >= mt) {  // Wbar: A = T^T (k = m), B[k = m][n = i] = dW[m][i]
                    uint32_t th[4];
                    dr_lda_t(th, Th, LT, mt * 16, kk * 16, lane);
                    for (int p = 0; p < 2; p++) {
                        uint32_t bh[4];
                        dr_ldb_kn(bh, Xh, LT, kk * 16, c0 + p * 16, lane);
                        mma16816(wb[2 * p], th, bh[0], bh[1]);
                        mma16816(wb[2 * p + 1], th, bh[2], bh[3]);
                    }
                }
            }
            float ok[4][4], og[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {  // row pairs as one 8-byte load (dr_ld_pair)
                    const int r = mt * 16 + gq + 8 * hr, i = i0 + c0 + nt * 8 + 2 * t4;
                    const bool in0 = r < n && i < K, in1 = r < n && i + 1 < K;
                    dr_ld_pair(dK + r * K + i, kpairs, in0, in1, ok[nt][2 * hr], ok[nt][2 * hr + 1]);
                    dr_ld_pair(dG + r * K + i, kpairs, in0, in1, og[nt][2 * hr], og[nt][2 * hr + 1]);
                }
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int hr = 0; hr < 2; hr++) {
                    const int r = mt * 16 + gq + 8 * hr, ii = c0 + nt * 8 + 2 * t4, i = i0 + ii;
                    if (r >= n || i >= K) continue;
                    float vk[2] = {}, vg[2] = {};
                    const float2 g2 = grad1_g2(G + grad1_gx(LG, r, i), i + 1 < K);
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const int e = 2 * hr + c;
                        if (i + c >= K) break;
                        const float eg = dr_exp(c ? g2.y : g2.x), kb = __bfloat162float(Xs[r * LT + ii + c]) * eg,
                                    w = wb[nt][e];
                        part[hr] += w * kb;
                        vk[c] = ok[nt][e] + bs[r] * w * eg;
                        vg[c] = og[nt][e] + bs[r] * w * kb;
                    }
                    dr_st_pair(dK + r * K + i, kpairs, true, i + 1 < K, vk[0], vk[1]);
                    dr_st_pair(dG + r * K + i, kpairs, true, i + 1 < K, vg[0], vg[1]);
                }
        }
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) {
                const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), c = c0 + nt * 8 + 2 * t4 + (e & 1);
                dT[r * C + c] = (c < r && r < n) ? bs[c] * (dT[r * C + c] + dtk[nt][e]) : 0.f;
            }
        for (int j0 = 0; j0 < V; j0 += 64) {
            __syncthreads();  // the tiles are refilled
            dr_load_tile(Xs, LT, v + ROWV(0) + j0, (size_t)H * V, C, 64, n, V - j0, tid, DR_THREADS);
            if (SPLIT) dr_load_split_tile<64, DR_THREADS, LO>(Xh, Xl, LT, (const bf16 *)dD, V, j0, n, tid);
            cp_async_commit();
            if (!SPLIT) dr_tile_bf16<64, LO>(DRS_DDELTA, Xh, Xl, LT, dD + j0, V, n, V - j0, tid);
            cp_async_wait<0>();
            __syncthreads();
            float ub[4][4] = {};
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                if (kk < mt) continue;
                uint32_t th[4];
                dr_lda_t(th, Th, LT, mt * 16, kk * 16, lane);
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    uint32_t bh[4], bl[4];
                    dr_ldb_kn(bh, Xh, LT, kk * 16, c0 + p * 16, lane);
                    if constexpr (LO) dr_ldb_kn(bl, Xl, LT, kk * 16, c0 + p * 16, lane);
                    dr_mma2x<LO>(ub[2 * p], th, bh, bl);
                    dr_mma2x<LO>(ub[2 * p + 1], th, bh + 2, bl + 2);
                }
            }
            for (int nt = 0; nt < 4; nt++)
                for (int hr = 0; hr < 2; hr++) {  // dv's row pairs as one 4-byte store
                    const int r = mt * 16 + gq + 8 * hr, jj = c0 + nt * 8 + 2 * t4, j = j0 + jj;
                    if (r >= n || j >= V) continue;
                    float vv[2] = {};
                    for (int c = 0; c < 2; c++) {
                        const int e = 2 * hr + c;
                        if (j + c >= V) break;
                        vv[c] = bs[r] * ub[nt][e];
                        part[hr] += ub[nt][e] * __bfloat162float(Xs[r * LT + jj + c]);
                    }
                    dr_st_pair(dv + ROWV(r) + j, vpairs, true, j + 1 < V, vv[0], vv[1]);
                }
        }
        for (int u = 0; u < 2; u++) {
            part[u] += __shfl_xor_sync(0xffffffffu, part[u], 1);
            part[u] += __shfl_xor_sync(0xffffffffu, part[u], 2);
        }
        if (t4 == 0) {
            dbp[half * C + mt * 16 + gq] = part[0];
            dbp[half * C + mt * 16 + gq + 8] = part[1];
        }
        __syncthreads();  // dbp and dT written, the tiles spent
        if (tid < C) db[tid] += dbp[tid] + dbp[C + tid];
    }

    // 7. the triangular-inverse gradient (dT becomes dL), T back from the workspace into the tiles
    {
        float *Tm = (float *)tiles, *tmp = Tm + C * C, *TmT = tmp + C * C;
        for (int e = tid; e < C * C / 4; e += DR_THREADS)
            cp_async16((bf16 *)(Tm + 4 * e), (const bf16 *)(Tg + 4 * e), true);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        dr_tri_inverse_grad(dT, Tm, tmp, n, TmT);
    }
    for (int e = tid; e < C * C / 4; e += DR_THREADS) ((float4 *)dLg)[e] = ((const float4 *)dT)[e];
    for (int r = tid; r < C; r += DR_THREADS) ws.db[sh * C + r] = db[r];
    for (int i = tid; i < K; i += DR_THREADS) ws.gend[sh * K + i] = gend[i];
}

// grad1's instance for the arithmetic LO, the Delta layout ws->dsplit and (kv128, full)
template <bool LO>
static void dr_grad1_launch_lo(const DrWsMma *ws, size_t slots, bool kv128, bool full, bf16 *dv, const bf16 *dout,
                               const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta, int gate,
                               float scale, int T, int H, int K, int V, const int *offsets, int N) {
    launch_kernel(DR_INSTANCE(dr_grad1_mma_kernel, LO, ws->dsplit, kv128, full), dim3((unsigned)slots, H),
                  dim3(DR_THREADS), grad1n_mma_smem(K), *ws, dv, dout, q, k, v, g, beta, gate, scale, T, H, K, V,
                  offsets, N);
}

// grad1 over the slots x H (chunk slot, head) blocks, built for the workspace's arithmetic
// (ws->lo) and Delta layout (ws->dsplit); grad2 (chunk_grad2_mma.cu) runs next
void dr_grad1_launch(const DrWsMma *ws, size_t slots, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                     const bf16 *v, const bf16 *g, const bf16 *beta, int gate, float scale, int T, int H, int K, int V,
                     const int *offsets, int N) {
    dr_audit_upload();
    PROFILE("delta_chunk/grad1");  // (inside delta_chunk/grad: HYBRID_CUDA_PROFILE=1 prints both)
    const bool kv128 = dr_kv_fixed(K, V), full = kv128 && dr_full_chunks(offsets, T);
    if (ws->lo)
        dr_grad1_launch_lo<true>(ws, slots, kv128, full, dv, dout, q, k, v, g, beta, gate, scale, T, H, K, V, offsets, N);
    else
        dr_grad1_launch_lo<false>(ws, slots, kv128, full, dv, dout, q, k, v, g, beta, gate, scale, T, H, K, V, offsets,
                                  N);
}
