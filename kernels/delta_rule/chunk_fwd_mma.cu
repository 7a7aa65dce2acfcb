// Chunkwise forward of KDA / GDN / DeltaNet on tensor cores (bf16 MMA, fp32 accumulation):
// the same decomposition as chunk_fwd.cu (prep, walk, output; kernels/delta_rule/chunk.cuh),
// its products as mma.m16n8k16 through kernels/mma.cuh, the workspace in bf16 (DrWsMma).
// The prep kernel is in chunk_prep_mma.cu; here the walk, the output kernel and the entry.
// What stays fp32: Gamma, the exponentials, L and the triangular inverse T (SIMT, in shared
// memory), every accumulator, and the state h (registers of the walk; bf16 only as an MMA
// operand and in the workspace copy that the output kernel multiplies by).
#include "kernels/delta_rule/chunk.cuh"
#include "kernels/delta_rule/walk.cuh"

#define DRO_THREADS 128  // output: 4 warps, one 16-row m-tile each

// ---- walk: one block per (sequence, head, V-tile of BV), the chunks in order ------------
// The state tile h [KP][BV] lives in registers as fp32 MMA accumulators: warp w owns the
// 16-row m-tiles w + 8u (u < MU: MU = 1 for K <= 128, 2 up to 256), all BV / 8 column tiles.
// Per chunk:
//   a. h[n] goes to shared memory as hi + lo (the B operand; a fragment's column pair a 4-byte
//      store) and, after the barrier, from there to the workspace by 16-byte row segments (h,
//      and the backward's hl); W and Ke of the chunk (hi + lo) arrive by cp.async, W issued
//      during the previous chunk's step c and Ke during its last barrier, so each load overlaps
//      a compute step without a second buffer;
//   b. Delta = U - W h[n]: warp (m-tile w % 4, columns BV / 2 (w / 4)..), A = W, B = h (U read
//      at the chunk's start, 8 bytes a lane); after a barrier (every warp has read h) Delta
//      overwrites h in shared memory (hi + lo: h is spent until the next chunk's step a), and
//      after the next barrier U in the workspace, as pairs by 16-byte groups from those tiles
//      (fp32 from the fragments under HYBRID_DR_DELTA_F32=1);
//   c. h[n+1] = diag(e^Gamma_end) h[n] + Ke^T Delta: A = Ke^T (the transposing ldmatrix), B = Delta.
// Every product on three MMAs (hi hi + hi lo + lo hi; one, of the hi parts, where !LO: chunk.cuh,
// dr_mma3x, with no lo tiles or stores). Each column's operations and their order
// are the same for any BV, so the tile (walk.cuh) changes no bit.
// Shared memory (bf16): W, Wl, Ke, Kel [64][LK]; h, hl (then Delta, Deltal) [max(KP, 64)][BV + 8].
// K = V = 128, BV = 64: 104 KiB (122 before Delta shared h's buffer), so two blocks an SM with
// MU = 1's 128 registers; 256 blocks at B8 H16 fit one wave of 264 on the H200's 132 SMs.
// One MMA a product (!LO; chunk.cuh, dr_mma3x): no lo tiles, 52 KiB there. Its forward (o given)
// runs the OUT instances, which form o too (below: the output kernel's products) and store
// neither h[n] nor Delta: 78 KiB, still two blocks an SM (K = V = 128, BV = 64: 124 registers,
// spilling 8 bytes at BV = 64 with K = V = 128 fixed).
// OUT (one MMA a product's forward): + Qg [64][LK] and Aqk [64][72] (26 KiB at K = 128).
static size_t walk_mma_smem(int K, int BV, bool lo, bool out) {
    const size_t KP = dr_pad16(K), LK = KP + DR_PAD, HR = KP > DR_BT ? KP : DR_BT, parts = lo ? 2 : 1;
    return (2 * parts * DR_BT * LK + parts * HR * (BV + DR_PAD) + (out ? DR_BT * (LK + 72) : 0)) * 2;
}

// OUT (one MMA a product only): the output kernel's o = scale Qg h[n] + Aqk Delta of the chunk and
// V tile, here (the forward with o; the backward's recomputation has none): Qg h[n] beside W
// h[n] in step b (the same h fragments), Aqk Delta after it, so neither h[n] nor Delta goes to
// the workspace (the output kernel read them back); each accumulator takes the output kernel's
// products in its order, so o has its bits. Qg and Aqk arrive by cp.async in a group of their own
// between W's and Ke's, issued after the chunk before is done with them.
template <bool LO, int BV, int MU, int KV, bool OUT = false>  // LO: chunk.cuh's dr_mma3x; KV: 0, or DR_KV_FIXED (chunk.cuh)
__global__ void __launch_bounds__(DRM_THREADS, MU == 1 ? 2 : 1)  // MU = 1: 2 blocks an SM, <= 128 registers
    dr_walk_mma_kernel(DrWsMma ws, float *hT, const float *h0, int Tlen, int H, int K_arg, int V_arg,
                       const int *offsets, bf16 *o, float scale) {
    static_assert(!OUT || !LO, "the walk computes o in one MMA a product only");
    const int K = KV ? KV : K_arg, V = KV ? KV : V_arg;
    // NT column tiles of the state, NB of a warp's Delta (BV / 2 columns)
    constexpr int NT = BV / 8, NB = BV / 16;
    static_assert(BV % 32 == 0, "step b: pairs of 8-column tiles in each warp's half");
    // blockIdx.x = sequence * V-tiles + V-tile: a sequence's V-tiles run side by side and
    // share W and Ke through L2
    const int vt = (V + BV - 1) / BV, s = blockIdx.x / vt, h = blockIdx.y, j0 = (blockIdx.x % vt) * BV;
    const int tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    const int KP = dr_pad16(K), LK = KP + DR_PAD, LH = BV + DR_PAD, nmt = KP / 16, HR = KP > C ? KP : C;
    const int bv = V - j0 < BV ? V - j0 : BV;
    DYNAMIC_SMEM(bf16, sm);
    // (!LO: no lo tiles; Wl, Kl, hl name the next tile and are never touched)
    bf16 *Wh = sm, *Wl = Wh + C * LK, *Kh = LO ? Wl + C * LK : Wl, *Kl = Kh + C * LK, *hh = LO ? Kl + C * LK : Kl,
         *hl = hh + HR * LH, *Dh = hh, *Dl = hl;  // Delta [64][LH] over h (step b)
    bf16 *Qs = hl, *As = Qs + C * LK;  // OUT: Qg [64][LK], Aqk [64][72] (!LO: hl names the end)
    int bos, len;
    dr_seq_range(offsets, Tlen, s, &bos, &len);
    const int base = dr_seq_base(bos, s), nch = (len + C - 1) / C;
    const size_t task = (size_t)s * H + h;  // (N, H, K, V) states

    // h: hacc[u][nt] is the C fragment of rows 16 (warp + 8u).., columns 8 nt..
    float hacc[MU][NT][4];
#pragma unroll
    for (int u = 0; u < MU; u++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = (warp + 8 * u) * 16 + gq + (e >= 2 ? 8 : 0), jj = nt * 8 + 2 * t4 + (e & 1);
                hacc[u][nt][e] = (h0 && i < K && jj < bv) ? h0[(task * K + i) * V + j0 + jj] : 0.f;
            }
    // W of chunk n + 1 loads during chunk n's h update, Ke of chunk n + 1 during chunk n + 1's
    // Delta: one buffer each, every load in flight behind a compute step
    auto issue_w = [&](int ci) {
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Wh, LK, ws.W + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        if constexpr (LO) dr_load_tile(Wl, LK, ws.Wl + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        cp_async_commit();
    };
    auto issue_k = [&](int ci) {
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Kh, LK, ws.Ke + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        if constexpr (LO) dr_load_tile(Kl, LK, ws.Kel + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        cp_async_commit();
    };
    auto issue_qa = [&](int ci) {  // OUT: Qg, Aqk of chunk ci
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Qs, LK, ws.Qg + sh * C * K, K, C, KP, n, K, tid, DRM_THREADS);
        dr_load_tile(As, 72, ws.Aqk + sh * C * C, C, C, C, n, C, tid, DRM_THREADS);
        cp_async_commit();
    };
    if (nch > 0) {
        issue_w(0);
        if constexpr (OUT) issue_qa(0);
        issue_k(0);
    }
    for (int ci = 0; ci < nch; ci++) {
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        bf16 *hg = ws.h + sh * K * V, *hgl = ws.hl ? ws.hl + sh * K * V : NULL;  // (lo: the backward's only)
        float *Ug = ws.U + sh * C * V;
        const int mtb = warp & 3, c0 = (warp >> 2) * (BV / 2);
        // this thread's U entries of step b and e^Gamma_end rows of step c, loaded early; U by
        // column pairs (8 bytes: a row's 4 lanes fill a 32-byte sector) where V is even (then
        // so is bv, and jj < bv covers jj + 1)
        float uv[NB][4], ge[MU][2];
#pragma unroll
        for (int nt = 0; nt < NB; nt++)
#pragma unroll
            for (int e2 = 0; e2 < 4; e2 += 2) {
                const int r = mtb * 16 + gq + (e2 ? 8 : 0), jj = c0 + nt * 8 + 2 * t4;
                const float *pu = Ug + (size_t)r * V + j0 + jj;
                if (V % 2 == 0) {
                    const float2 x = r < n && jj < bv ? *reinterpret_cast<const float2 *>(pu) : make_float2(0.f, 0.f);
                    uv[nt][e2] = x.x, uv[nt][e2 + 1] = x.y;
                } else {
                    uv[nt][e2] = r < n && jj < bv ? pu[0] : 0.f;
                    uv[nt][e2 + 1] = r < n && jj + 1 < bv ? pu[1] : 0.f;
                }
            }
#pragma unroll
        for (int u = 0; u < MU; u++) {
            const int i0 = (warp + 8 * u) * 16 + gq, i1 = i0 + 8;
            ge[u][0] = i0 < K ? ws.ge[sh * K + i0] : 0.f;
            ge[u][1] = i1 < K ? ws.ge[sh * K + i1] : 0.f;
        }
        // a. h[n] to shared memory (hi + lo, a column pair a 4-byte store) while the tiles are in
        // flight; to the workspace after the barrier, by 16-byte row segments
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (warp + 8 * u < nmt)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e2 = 0; e2 < 4; e2 += 2) {
                        const int i = (warp + 8 * u) * 16 + gq + (e2 ? 8 : 0), jj = nt * 8 + 2 * t4;
                        dr_walk_put2<LO>(DRS_H, hacc[u][nt][e2], hacc[u][nt][e2 + 1], hh, hl, i * LH + jj);
                    }
        cp_async_wait<1>();  // W (and OUT's Qg, Aqk) of this chunk (its Ke may still be in flight)
        __syncthreads();
        if constexpr (!OUT) dr_walk_store_tile(hg + j0, V, hh, LH, K, bv, BV, tid, DRM_THREADS);  // (before step b's barrier)
        if (LO && hgl) dr_walk_store_tile(hgl + j0, V, hl, LH, K, bv, BV, tid, DRM_THREADS);
        // OUT: this warp's part of o (rows of m-tile mtb, columns c0..), as the output kernel's acc
        float oacc[OUT ? NB : 1][4] = {};
        // b. Delta = U - W h[n] (OUT: and Qg h[n])
        {
            const int mt = mtb;
            float acc[NB][4] = {};
            for (int kk = 0; kk < nmt; kk++) {
                uint32_t ah[4], al[4], qa[4];
                dr_lda(ah, Wh, LK, mt * 16, kk * 16, lane);
                if constexpr (LO) dr_lda(al, Wl, LK, mt * 16, kk * 16, lane);
                if constexpr (OUT) dr_lda(qa, Qs, LK, mt * 16, kk * 16, lane);
#pragma unroll
                for (int p = 0; p < NB / 2; p++) {
                    uint32_t bh[4], bl[4];
                    dr_ldb_kn(bh, hh, LH, kk * 16, c0 + p * 16, lane);
                    if constexpr (LO) dr_ldb_kn(bl, hl, LH, kk * 16, c0 + p * 16, lane);
                    dr_mma3x<LO>(acc[2 * p], ah, al, bh, bl);
                    dr_mma3x<LO>(acc[2 * p + 1], ah, al, bh + 2, bl + 2);
                    if constexpr (OUT) {
                        mma16816(oacc[2 * p], qa, bh[0], bh[1]);
                        mma16816(oacc[2 * p + 1], qa, bh[2], bh[3]);
                    }
                }
            }
            __syncthreads();  // every warp has read h: Delta takes its buffer
#pragma unroll
            for (int nt = 0; nt < NB; nt++)
#pragma unroll
                for (int e2 = 0; e2 < 4; e2 += 2) {  // columns jj, jj + 1 of row r
                    const int r = mt * 16 + gq + (e2 ? 8 : 0), jj = c0 + nt * 8 + 2 * t4;
                    const bool in0 = r < n && jj < bv, in1 = r < n && jj + 1 < bv;
                    const float d0 = in0 ? uv[nt][e2] - acc[nt][e2] : 0.f, d1 = in1 ? uv[nt][e2 + 1] - acc[nt][e2 + 1] : 0.f;
                    dr_walk_put2<LO>(DRS_DELTA, d0, d1, Dh, Dl, r * LH + jj);
                    if (!OUT && !ws.dsplit) {  // the fp32 layout (HYBRID_DR_DELTA_F32=1); pairs: after the barrier
                        if (in0) Ug[(size_t)r * V + j0 + jj] = d0;
                        if (in1) Ug[(size_t)r * V + j0 + jj + 1] = d1;
                    }
                }
        }
        cp_async_wait<0>();  // Ke of this chunk
        __syncthreads();
        if (ci + 1 < nch) issue_w(ci + 1);
        // Delta's hi + lo pairs over U (chunk.cuh, the Delta pair layout) from the shared tiles by
        // 16-byte groups. Every thread's U loads of this chunk have completed (their values are
        // in Delta, before the barrier), so the copy may write entries that other threads read.
        if (!OUT && ws.dsplit) dr_walk_store_split_tile<LO>((bf16 *)Ug, V, j0, Dh, Dl, LH, n, bv, BV, tid, DRM_THREADS);
        if constexpr (OUT) {  // o = scale Qg h[n] + Aqk Delta (Aqk lower triangular: k-steps kk <= mtb)
#pragma unroll
            for (int nt = 0; nt < NB; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) oacc[nt][e] *= scale;
            for (int kk = 0; kk <= mtb; kk++) {
                uint32_t aa[4];
                dr_lda(aa, As, 72, mtb * 16, kk * 16, lane);
#pragma unroll
                for (int p = 0; p < NB / 2; p++) {
                    uint32_t bh[4];
                    dr_ldb_kn(bh, Dh, LH, kk * 16, c0 + p * 16, lane);
                    mma16816(oacc[2 * p], aa, bh[0], bh[1]);
                    mma16816(oacc[2 * p + 1], aa, bh[2], bh[3]);
                }
            }
            bf16 *og = o + ((size_t)(bos + ci * C) * H + h) * V + j0;  // row r of the chunk at og + r H V
#pragma unroll
            for (int nt = 0; nt < NB; nt++)
#pragma unroll
                for (int e2 = 0; e2 < 4; e2 += 2) {
                    const int r = mtb * 16 + gq + (e2 ? 8 : 0), jj = c0 + nt * 8 + 2 * t4;
                    if (r >= n || jj >= bv) continue;
                    bf16 *d = og + (size_t)r * H * V + jj;
                    if (jj + 1 < bv && V % 2 == 0) *reinterpret_cast<uint32_t *>(d) = pack_bf16(oacc[nt][e2], oacc[nt][e2 + 1]);
                    else {
                        d[0] = __float2bfloat16(oacc[nt][e2]);
                        if (jj + 1 < bv) d[1] = __float2bfloat16(oacc[nt][e2 + 1]);
                    }
                }
        }
        // c. h[n+1] = diag(e^Gamma_end) h[n] + Ke^T Delta
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (warp + 8 * u < nmt) {
                const int m0 = (warp + 8 * u) * 16;
                const float e0 = ge[u][0], e1 = ge[u][1];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    hacc[u][nt][0] *= e0, hacc[u][nt][1] *= e0;
                    hacc[u][nt][2] *= e1, hacc[u][nt][3] *= e1;
                }
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    uint32_t ah[4], al[4];
                    dr_lda_t(ah, Kh, LK, m0, kk * 16, lane);
                    if constexpr (LO) dr_lda_t(al, Kl, LK, m0, kk * 16, lane);
#pragma unroll
                    for (int p = 0; p < NT / 2; p++) {
                        uint32_t bh[4], bl[4];
                        dr_ldb_kn(bh, Dh, LH, kk * 16, p * 16, lane);
                        if constexpr (LO) dr_ldb_kn(bl, Dl, LH, kk * 16, p * 16, lane);
                        dr_mma3x<LO>(hacc[u][2 * p], ah, al, bh, bl);
                        dr_mma3x<LO>(hacc[u][2 * p + 1], ah, al, bh + 2, bl + 2);
                    }
                }
            }
        __syncthreads();  // Ke, h and Delta are rewritten (OUT: Qg, Aqk too)
        if (OUT && ci + 1 < nch) issue_qa(ci + 1);
        if (ci + 1 < nch) issue_k(ci + 1);
    }
    if (hT)
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (warp + 8 * u < nmt)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = (warp + 8 * u) * 16 + gq + (e >= 2 ? 8 : 0), jj = nt * 8 + 2 * t4 + (e & 1);
                        if (i < K && jj < bv) hT[(task * K + i) * V + j0 + jj] = hacc[u][nt][e];
                    }
}

// The walk's tiles at head size K: BV = 32 and 64, built with MU = 1 (K <= 128: 2 blocks an
// SM by registers) or 2 (1 block); lo: the split arithmetic's shared memory, else one MMA a
// product's.
static void dr_walk_tiles(int K, bool lo, bool out, DrWalkTile tiles[2]) {
    const int rb = dr_pad16(K) <= 128 ? 2 : 1;
    tiles[0] = DrWalkTile{32, walk_mma_smem(K, 32, lo, out), rb};
    tiles[1] = DrWalkTile{64, walk_mma_smem(K, 64, lo, out), rb};
}

// The V tile width the walk launches with for `pairs` (sequence, head) pairs at K, V in the
// split arithmetic: walk.cuh's choice, HYBRID_DR_WALK_BV included (tests/gpu/test_delta_rule.c
// forces the other tile).
extern "C" int cuda_delta_walk_tile(int K, int V, int pairs) {
    DrWalkTile tiles[2];
    dr_walk_tiles(K, true, false, tiles);
    return tiles[dr_walk_pick(tiles, 2, (size_t)pairs, V, "HYBRID_DR_WALK_BV")].bv;
}

// Launches the walk for N sequences at the tile of walk.cuh's choice: BV = 32 or 64,
// MU = 1 (K <= 128: 2 blocks an SM where the shared memory allows) or 2. OUT: o of the chunks
// too (one MMA a product's forward: the walk's OUT instances).
template <bool LO, int MU, bool OUT = false>
static void dr_walk_launch(const DrWsMma *ws, float *hT, const float *h0, int T, int H, int K, int V,
                           const int *offsets, int N, bf16 *o = NULL, float scale = 0.f) {
    DrWalkTile tiles[2];
    dr_walk_tiles(K, LO, OUT, tiles);
    const int a = dr_walk_pick(tiles, 2, (size_t)N * H, V, "HYBRID_DR_WALK_BV");
    const unsigned vt = (unsigned)((V + tiles[a].bv - 1) / tiles[a].bv);
    constexpr int K1 = MU == 1 ? DR_KV_FIXED : 0;  // (K = DR_KV_FIXED runs at MU = 1 only)
    const bool kv128 = dr_kv_fixed(K, V);
    if (tiles[a].bv == 32)
        launch_kernel(kv128 ? dr_walk_mma_kernel<LO, 32, MU, K1, OUT> : dr_walk_mma_kernel<LO, 32, MU, 0, OUT>,
                      dim3(N * vt, H), dim3(DRM_THREADS), tiles[a].smem, *ws, hT, h0, T, H, K, V, offsets, o, scale);
    else
        launch_kernel(kv128 ? dr_walk_mma_kernel<LO, 64, MU, K1, OUT> : dr_walk_mma_kernel<LO, 64, MU, 0, OUT>,
                      dim3(N * vt, H), dim3(DRM_THREADS), tiles[a].smem, *ws, hT, h0, T, H, K, V, offsets, o, scale);
}

// ---- output: one block per (chunk slot, head, V-tile of 64), 4 warps ---------------------
// (The split arithmetic's forward; one MMA a product's forms o in the walk, OUT above, with the
// same products in the same order, so the same bits: the emulated hashes of o equal.)
// o = scale Qg h[n] + Aqk Delta (Aqk carries scale): warp w the rows 16w.., all 64 columns;
// Aqk is lower triangular, so the Delta product takes k-steps kk <= w. Qg h[n]: two MMAs (h[n]
// one bf16, chunk.cuh); Aqk Delta: three.
// Shared memory (bf16): Qg hi, lo [64][LK] | h [KP][72] | Aqk hi, lo [64][72]; Delta hi, lo
// [64][72] take Qg's place once every warp is done with Qg h[n] (Delta's fp32 values are loaded
// into registers before that product, so the load still overlaps it). K = V = 128: 70 KiB,
// 3 blocks an SM (88 KiB before, with Delta in a buffer of its own: 2 blocks, 8 warps).
// o leaves through shared memory: warp w rounds its 16 x 64 accumulators to bf16 into its own
// rows of Aqk hi (only warp w reads them), then stores them by 16-byte row segments, a 128-byte
// row of o ([T][H][V], the V-tile's columns contiguous) per 8 lanes; the MMA fragment layout
// stored 4 bytes a lane, 8 rows an instruction (8 of 32 bytes a sector used).
// One MMA a product (!LO; chunk.cuh, dr_mma3x): the hi tiles alone, 44 KiB at K = V = 128.
static size_t output_mma_smem(int K, bool lo) {
    const size_t parts = lo ? 2 : 1, KP = dr_pad16(K), LK = KP + DR_PAD, LH = DR_MBV + DR_PAD,
                 q = parts * DR_BT * LK, d = parts * DR_BT * LH;
    return ((q > d ? q : d) + KP * LH + parts * DR_BT * LH) * 2;
}

// LO: the split arithmetic, else one MMA a product (chunk.cuh, dr_mma3x); SPLIT: Delta as hi + lo
// pairs (ws.dsplit), else fp32; KV: 0, or DR_KV_FIXED; FULL: whole chunks only (dr_full_chunks;
// chunk.cuh)
template <bool LO, bool SPLIT, int KV, bool FULL>
__global__ void __launch_bounds__(DRO_THREADS, 3)
    dr_output_mma_kernel(DrWsMma ws, bf16 *o, float scale, int Tlen, int H, int K_arg, int V_arg, const int *offsets,
                         int N) {
    const int K = KV ? KV : K_arg, V = KV ? KV : V_arg;
    // blockIdx.x = slot * V-tiles + V-tile (a chunk's V-tiles side by side: Qg, Aqk through L2)
    const int vt = (V + DR_MBV - 1) / DR_MBV, x = blockIdx.x / vt, h = blockIdx.y, j0 = (blockIdx.x % vt) * DR_MBV;
    const int tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    static_assert(!FULL || KV, "FULL instances are built for K = V = DR_KV_FIXED only");
    if (FULL) n = DR_BT;
    const int KP = dr_pad16(K), LK = KP + DR_PAD, LH = DR_MBV + DR_PAD, nmt = KP / 16;
    const int bv = V - j0 < DR_MBV ? V - j0 : DR_MBV;
    const size_t sh = (size_t)x * H + h;
    DYNAMIC_SMEM(bf16, sm);
    // (!LO: Ql, Dl, Al name the next tile and are never touched)
    constexpr int PARTS = LO ? 2 : 1;
    const int qsz = PARTS * (C * LK > C * LH ? C * LK : C * LH);
    bf16 *Qh = sm, *Ql = Qh + C * LK, *Dh = sm, *Dl = Dh + C * LH, *Hh = sm + qsz, *Ah = Hh + KP * LH,
         *Al = Ah + C * LH;
    dr_load_tile(Qh, LK, ws.Qg + sh * C * K, K, C, KP, n, K, tid, DRO_THREADS);
    if constexpr (LO) dr_load_tile(Ql, LK, ws.Qgl + sh * C * K, K, C, KP, n, K, tid, DRO_THREADS);
    dr_load_tile(Hh, LH, ws.h + sh * K * V + j0, V, KP, DR_MBV, K, bv, tid, DRO_THREADS);
    dr_load_tile(Ah, LH, ws.Aqk + sh * C * C, C, C, C, n, C, tid, DRO_THREADS);
    if constexpr (LO) dr_load_tile(Al, LH, ws.Aqkl + sh * C * C, C, C, C, n, C, tid, DRO_THREADS);
    cp_async_commit();
    // Delta (ws.U once the walk has run) into registers now, into shared memory over Qg once
    // every warp is done with Qg h[n], so its load overlaps that product. SPLIT (ws.dsplit): the
    // workspace holds its hi + lo pairs (chunk.cuh, the Delta pair layout: groups of 8 columns, 8 hi then
    // 8 lo), read as they are; else fp32, split after the barrier (the same bits either way).
    constexpr int ND = DR_BT * DR_MBV / DRO_THREADS;  // Delta entries a thread
    float dv[SPLIT ? 1 : ND];
    __nv_bfloat162 dp[SPLIT ? ND : 1];  // x = hi, y = lo
#pragma unroll
    for (int u = 0; u < ND; u++) {
        const int e = tid + u * DRO_THREADS, r = e / DR_MBV, jj = e % DR_MBV;
        const bool in = r < n && jj < bv;
        if constexpr (SPLIT) {
            const int j = j0 + jj, g8 = j & ~7, w = V - g8 < 8 ? V - g8 : 8;
            const bf16 *src = (const bf16 *)(ws.U + sh * C * V) + (size_t)r * 2 * V + 2 * g8 + (j & 7);
            dp[u].x = in ? src[0] : __float2bfloat16(0.f);
            if constexpr (LO) dp[u].y = in ? src[w] : __float2bfloat16(0.f);
        } else {
            dv[u] = in ? ws.U[sh * C * V + (size_t)r * V + j0 + jj] : 0.f;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    float acc[8][4] = {};
    for (int kk = 0; kk < nmt; kk++) {
        uint32_t ah[4], al[4];
        dr_lda(ah, Qh, LK, warp * 16, kk * 16, lane);
        if constexpr (LO) dr_lda(al, Ql, LK, warp * 16, kk * 16, lane);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t b[4];
            dr_ldb_kn(b, Hh, LH, kk * 16, p * 16, lane);
            if constexpr (LO) {
                mma16816(acc[2 * p], al, b[0], b[1]);
                mma16816(acc[2 * p + 1], al, b[2], b[3]);
            }
            mma16816(acc[2 * p], ah, b[0], b[1]);
            mma16816(acc[2 * p + 1], ah, b[2], b[3]);
        }
    }
    __syncthreads();  // every warp is done with Qg: Delta hi, lo over it
#pragma unroll
    for (int u = 0; u < ND; u++) {
        const int e = tid + u * DRO_THREADS, r = e / DR_MBV, jj = e % DR_MBV;
        if constexpr (SPLIT && LO) Dh[r * LH + jj] = dp[u].x, Dl[r * LH + jj] = dp[u].y;
        else if constexpr (SPLIT) Dh[r * LH + jj] = dp[u].x;
        else if constexpr (LO) dr_split(DRS_DELTA, dv[u], Dh + r * LH + jj, Dl + r * LH + jj);
        else Dh[r * LH + jj] = __float2bfloat16(dv[u]);
    }
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[nt][e] *= scale;
    for (int kk = 0; kk <= warp; kk++) {
        uint32_t ah[4], al[4];
        dr_lda(ah, Ah, LH, warp * 16, kk * 16, lane);
        if constexpr (LO) dr_lda(al, Al, LH, warp * 16, kk * 16, lane);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t bh[4], bl[4];
            dr_ldb_kn(bh, Dh, LH, kk * 16, p * 16, lane);
            if constexpr (LO) dr_ldb_kn(bl, Dl, LH, kk * 16, p * 16, lane);
            dr_mma3x<LO>(acc[2 * p], ah, al, bh, bl);
            dr_mma3x<LO>(acc[2 * p + 1], ah, al, bh + 2, bl + 2);
        }
    }
    // o: this warp's rows of Aqk hi receive its bf16 tile (row stride 72 bf16 = 36 words: the 8
    // rows x 4 lanes of a fragment store hit 32 distinct banks), then 16-byte row segments
    __syncwarp();  // the warp's last ldmatrix of those rows is done
    bf16 *Os = Ah + (size_t)warp * 16 * LH;
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const int rr = gq + (e >= 2 ? 8 : 0), jj = nt * 8 + 2 * t4;
            *reinterpret_cast<uint32_t *>(Os + rr * LH + jj) = pack_bf16(acc[nt][e], acc[nt][e + 1]);
        }
    __syncwarp();
    bf16 *og = o + ((size_t)tok0 * H + h) * V + j0;  // row r of the tile at og + r H V
    const bool ovec = V % 8 == 0 && ((uintptr_t)og & 15) == 0;
#pragma unroll
    for (int u = 0; u < 4; u++) {  // 16 rows x 8 segments of 8 columns, 4 a lane
        const int idx = lane + 32 * u, rr = idx >> 3, c = (idx & 7) * 8, r = warp * 16 + rr;
        if (r >= n || c >= bv) continue;
        bf16 *d = og + (size_t)r * H * V + c;
        const bf16 *sp = Os + rr * LH + c;
        if (ovec && c + 8 <= bv) *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(sp);
        else
            for (int j = 0; j < 8 && c + j < bv; j++) d[j] = sp[j];
    }
}

// the output kernel over `blocks` (chunk slot, V-tile) x H blocks in the arithmetic LO, at the
// Delta layout ws->dsplit and the instance for (kv128, full)
template <bool LO>
static void dr_output_launch(const DrWsMma *ws, bf16 *o, float scale, size_t blocks, int T, int H, int K, int V,
                             const int *offsets, int N, bool kv128, bool full) {
    launch_kernel(DR_INSTANCE(dr_output_mma_kernel, LO, ws->dsplit, kv128, full), dim3((unsigned)blocks, H),
                  dim3(DRO_THREADS), output_mma_smem(K, LO), *ws, o, scale, T, H, K, V, offsets, N);
}

void dr_forward_mma(int gate, bf16 *o, float *hT, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                    const bf16 *beta, const float *h0, float scale, int B, int T, int H, int K, int V,
                    const int *offsets, int N, const DrWsMma *ws) {
    const size_t slots = dr_num_slots(B, T, N);
    if (N == 0) return;
    dr_audit_upload();
    const unsigned vt = (unsigned)((V + DR_MBV - 1) / DR_MBV);
    // the prep's 16-byte stores of Aqk and T (dr_ws_mma_bind's arrays lie at 256-byte offsets:
    // a 16-byte aligned workspace, as every caller carves it, is enough)
    if (!is_aligned16(ws->Aqk) || !is_aligned16(ws->Aqkl) || (ws->T && !is_aligned16(ws->T)))
        die("delta_chunk: the tensor-core workspace is not 16-byte aligned");
    // (the PROFILE parts: HYBRID_CUDA_PROFILE=1 times each kernel; the backward's recomputation
    // of the forward counts in the same parts)
    if (slots > 0) {
        PROFILE("delta_chunk/prep");
        dr_prep_launch(ws, q, k, v, g, beta, gate, scale, slots, T, H, K, V, offsets, N);  // chunk_prep_mma.cu
    }
    // one MMA a product's forward: o in the walk (its OUT instances), no output kernel
    const bool walk_out = !ws->lo && o && slots > 0;
    {
        PROFILE("delta_chunk/walk");
        const bool k128 = dr_pad16(K) <= 128;
        if (ws->lo) k128 ? dr_walk_launch<true, 1>(ws, hT, h0, T, H, K, V, offsets, N)
                         : dr_walk_launch<true, 2>(ws, hT, h0, T, H, K, V, offsets, N);
        else if (walk_out) k128 ? dr_walk_launch<false, 1, true>(ws, hT, h0, T, H, K, V, offsets, N, o, scale)
                                : dr_walk_launch<false, 2, true>(ws, hT, h0, T, H, K, V, offsets, N, o, scale);
        else k128 ? dr_walk_launch<false, 1>(ws, hT, h0, T, H, K, V, offsets, N)
                  : dr_walk_launch<false, 2>(ws, hT, h0, T, H, K, V, offsets, N);
    }
    if (slots > 0 && o && !walk_out) {
        PROFILE("delta_chunk/output");
        const bool kv128 = dr_kv_fixed(K, V), full = kv128 && dr_full_chunks(offsets, T);
        if (ws->lo) dr_output_launch<true>(ws, o, scale, slots * vt, T, H, K, V, offsets, N, kv128, full);
        else dr_output_launch<false>(ws, o, scale, slots * vt, T, H, K, V, offsets, N, kv128, full);
    }
}

#ifdef HYBRID_DR_PRECISION_AUDIT
// The precision audit's mask (chunk.cuh, dr_lo; split_operand.h): bit DRS_x zeroes operand x's lo
// parts in the tensor-core kernels launched after the call
unsigned dr_audit_mask_host;
extern "C" void cuda_delta_precision_audit_mask(unsigned mask) { dr_audit_mask_host = mask; }
#endif
