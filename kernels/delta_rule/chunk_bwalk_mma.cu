// The reverse walk of the tensor-core chunkwise backward (KDA / GDN / DeltaNet; docs/delta-rule.md,
// "Stage B2: reverse state-gradient recurrence" and "CUDA kernels": walk tiles): one block per
// (sequence, head, V-tile), the chunks in reverse, carrying the state gradient dH' = dL/dh[n+1]
// in registers. It reads the forward's recomputed workspace (DrWsMma, chunk.cuh: Aqk, Ke, Qg, W
// as hi + lo pairs, ge) and dO, writes dH' (ws.dh, ws.dhl), the complete dDelta (ws.dD, the
// Delta pair layout of chunk.cuh or fp32 under HYBRID_DR_DELTA_F32=1) and dh0. Its shared
// memory, per block (bwalk_mma_parts, bf16): region B {Aqk, Ke}, region C {Qg, W}, each
// hi + lo with rows of 64 (Aqk) or K rounded up to 16, plus 8; C aliases B where both do not
// fit (K = 256); then dO (a buffer a chunk parity) and dH' hi + lo (then dDelta) of the V
// tile. The tile choice and the state-tile stores are walk.cuh's. Run by
// cuda_delta_chunk_backward (chunk_bwd_mma.cu) through dr_bwalk_launch.
#include "kernels/delta_rule/chunk.cuh"
#include "kernels/delta_rule/walk.cuh"

// ---- bwalk: one block per (sequence, head, V-tile of BV), the chunks in reverse ----------
// dH' = dL/dh[n+1] lives in registers as fp32 MMA accumulators: the NW warps split the tile's
// columns into BV / 32 groups of 32 (4 column tiles), WG = NW / (BV / 32) warps a group; warp w
// owns the columns 32 (w / WG).. and the m-tiles w % WG + WG u (u < MU). Per chunk (!LO: every
// hi + lo below is the hi part alone, one MMA a product; chunk.cuh, dr_mma3x):
//   a. dH' to shared memory (hi + lo) and to the workspace (ws.dh, ws.dhl);
//   b. dDelta = Aqk^T dO + Ke dH' (B1's local part and B2; warp: m-tile w % 4, the 16-column
//      groups w / 4 + (NW / 4) g; Aqk^T upper triangular: k-steps kk >= m-tile); after a
//      barrier (every warp has read dH') over dH' in shared memory and to ws.dD as its hi + lo
//      pairs (chunk.cuh, the Delta pair layout; fp32 under HYBRID_DR_DELTA_F32=1);
//   c. dh[n] = diag(e^Gamma_end) dH' + scale Qg^T dO - W^T dDelta.
// Tiles: region B {Aqk, Ke} (step b), region C {Qg, W} (step c), all hi + lo, dO (exact bf16,
// one buffer a chunk parity). Where both regions fit (K <= 128 or so), C loads during step b
// and the previous chunk's B during step c; else C aliases B and each loads after the step
// before it (K = 256).
// Each column's operations and their order are the same for any BV and NW (walk.cuh).
// Tiles built: BV = 32 on 8 warps (K = V = 128: 150 KiB, one block an SM) and BV = 128 on 16
// warps (K <= 128; 222 KiB, one block an SM, <= 128 registers): at B8 T4096 H16 the 128-wide
// tile makes 128 blocks, one wave on 132 SMs, where the 32-wide one made 512 (3.9 waves, each
// a whole reverse walk); W, Ke, Qg and Aqk are then loaded once per (chunk, head), not 4 times.
// One MMA a product (!LO; chunk.cuh, dr_mma3x): the same layout, its lo tiles left untouched (one
// block an SM either way).
struct BwalkSmem {
    size_t regB, regC, rest;
};
static BwalkSmem bwalk_mma_parts(int K, int BV) {
    const size_t KP = dr_pad16(K), LK = KP + DR_PAD, LB = BV + DR_PAD, HR = KP > DR_BT ? KP : DR_BT;
    BwalkSmem p;
    p.regB = (2 * DR_BT * 72 + 2 * DR_BT * LK) * 2;
    p.regC = 4 * DR_BT * LK * 2;
    p.rest = (2 * DR_BT * LB + 2 * HR * LB) * 2;  // dO x 2, dH' hi + lo (then dDelta hi + lo)
    return p;
}
static const size_t DR_SMEM_LIMIT = 227 * 1024;
static int bwalk_alias(int K, int BV) {
    const BwalkSmem p = bwalk_mma_parts(K, BV);
    return p.regB + p.regC + p.rest > DR_SMEM_LIMIT;
}
static size_t bwalk_mma_smem(int K, int BV) {
    const BwalkSmem p = bwalk_mma_parts(K, BV);
    return p.rest + (bwalk_alias(K, BV) ? (p.regB > p.regC ? p.regB : p.regC) : p.regB + p.regC);
}

template <bool LO, int BV, int NW, int MU, int KV>  // LO: chunk.cuh's dr_mma3x; KV: 0, or DR_KV_FIXED (chunk.cuh)
__global__ void __launch_bounds__(NW * 32, 1)
    dr_bwalk_mma_kernel(DrWsMma ws, float *dh0, const float *dhT, const bf16 *dout, float scale, int Tlen, int H,
                        int K_arg, int V_arg, const int *offsets, int alias_arg) {
    const int K = KV ? KV : K_arg, V = KV ? KV : V_arg;
    // where the tile fits only without aliasing (launch: dr_bwalk_launch), a constant
    const int alias = MU == 1 || BV > 32 ? 0 : alias_arg;
    // NCG column groups of 32, WG warps a group; step b: GPW 16-column groups a warp
    constexpr int NTH = NW * 32, NCG = BV / 32, WG = NW / NCG, GPW = (BV / 16) / (NW / 4);
    static_assert(BV % 32 == 0 && NW % NCG == 0 && NW % 4 == 0 && (BV / 16) % (NW / 4) == 0, "bwalk tiling");
    // blockIdx.x = sequence * V-tiles + V-tile (a sequence's V-tiles side by side, sharing tiles through L2)
    const int vt = (V + BV - 1) / BV, s = blockIdx.x / vt, h = blockIdx.y, j0 = (blockIdx.x % vt) * BV;
    const int tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, t4 = lane & 3;
    const int KP = dr_pad16(K), LK = KP + DR_PAD, LB = BV + DR_PAD, LA = 72, nmt = KP / 16, HR = KP > C ? KP : C;
    const int bv = V - j0 < BV ? V - j0 : BV, wg = warp % WG, cb = (warp / WG) * 32;
    DYNAMIC_SMEM(bf16, sm);
    bf16 *Ah = sm, *Al = Ah + C * LA, *Kh = Al + C * LA, *Kl = Kh + C * LK;
    bf16 *Qh = alias ? sm : Kl + C * LK, *Ql = Qh + C * LK, *Wh = Ql + C * LK, *Wl = Wh + C * LK;
    bf16 *rest = alias ? (Kl + C * LK > Wl + C * LK ? Kl + C * LK : Wl + C * LK) : Wl + C * LK;
    bf16 *dOs = rest, *dHh = dOs + 2 * C * LB, *dHl = dHh + HR * LB, *dDh = dHh, *dDl = dHl;  // dDelta over dH'
    int bos, len;
    dr_seq_range(offsets, Tlen, s, &bos, &len);
    const int base = dr_seq_base(bos, s), nch = (len + C - 1) / C;
    const size_t task = (size_t)s * H + h;

    float dacc[MU][4][4];  // dH': m-tiles wg + WG u, column tiles cb / 8 + nt
#pragma unroll
    for (int u = 0; u < MU; u++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = (wg + WG * u) * 16 + gq + (e >= 2 ? 8 : 0), jj = cb + nt * 8 + 2 * t4 + (e & 1);
                dacc[u][nt][e] = (dhT && i < K && jj < bv) ? dhT[(task * K + i) * V + j0 + jj] : 0.f;
            }
    auto issue_b = [&](int ci) {
        const int n = dr_chunk_rows(len, ci), tok0 = bos + ci * C;
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Ah, LA, ws.Aqk + sh * C * C, C, C, C, n, C, tid, NTH);
        if constexpr (LO) dr_load_tile(Al, LA, ws.Aqkl + sh * C * C, C, C, C, n, C, tid, NTH);
        dr_load_tile(Kh, LK, ws.Ke + sh * C * K, K, C, KP, n, K, tid, NTH);
        if constexpr (LO) dr_load_tile(Kl, LK, ws.Kel + sh * C * K, K, C, KP, n, K, tid, NTH);
        dr_load_tile(dOs + (ci & 1) * C * LB, LB, dout + ((size_t)tok0 * H + h) * V + j0, (size_t)H * V, C, BV, n, bv,
                     tid, NTH);
        cp_async_commit();
    };
    auto issue_c = [&](int ci) {
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        dr_load_tile(Qh, LK, ws.Qg + sh * C * K, K, C, KP, n, K, tid, NTH);
        if constexpr (LO) dr_load_tile(Ql, LK, ws.Qgl + sh * C * K, K, C, KP, n, K, tid, NTH);
        dr_load_tile(Wh, LK, ws.W + sh * C * K, K, C, KP, n, K, tid, NTH);
        if constexpr (LO) dr_load_tile(Wl, LK, ws.Wl + sh * C * K, K, C, KP, n, K, tid, NTH);
        cp_async_commit();
    };
    if (nch > 0) issue_b(nch - 1);
    for (int ci = nch - 1; ci >= 0; ci--) {
        const int n = dr_chunk_rows(len, ci);
        const size_t sh = (size_t)(base + ci) * H + h;
        const bf16 *dO = dOs + (ci & 1) * C * LB;
        bf16 *dhg = ws.dh + sh * K * V, *dhgl = ws.dhl + sh * K * V;
        float *dDg = ws.dD + sh * C * V;
        // a. dH' to shared memory (hi + lo, a column pair a 4-byte store) and to the workspace
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (wg + WG * u < nmt)
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e2 = 0; e2 < 4; e2 += 2) {
                        const int i = (wg + WG * u) * 16 + gq + (e2 ? 8 : 0), jj = cb + nt * 8 + 2 * t4;
                        dr_walk_put2<LO>(DRS_DH, dacc[u][nt][e2], dacc[u][nt][e2 + 1], dHh, dHl, i * LB + jj);
                    }
        cp_async_wait<0>();  // this chunk's region B and dO
        __syncthreads();
        if (!alias) issue_c(ci);
        dr_walk_store_tile(dhg + j0, V, dHh, LB, K, bv, BV, tid, NTH);  // (read before step b's barrier)
        if constexpr (LO) dr_walk_store_tile(dhgl + j0, V, dHl, LB, K, bv, BV, tid, NTH);
        // b. dDelta = Aqk^T dO + Ke dH'
        {
            const int mt = warp & 3;
            float acc[GPW][2][4] = {};
            for (int kk = mt; kk < 4; kk++) {
                uint32_t ah[4], al[4];
                dr_lda_t(ah, Ah, LA, mt * 16, kk * 16, lane);
                if constexpr (LO) dr_lda_t(al, Al, LA, mt * 16, kk * 16, lane);
#pragma unroll
                for (int g = 0; g < GPW; g++) {
                    uint32_t b[4];
                    dr_ldb_kn(b, dO, LB, kk * 16, ((warp >> 2) + (NW / 4) * g) * 16, lane);
                    if constexpr (LO) {
                        mma16816(acc[g][0], al, b[0], b[1]);
                        mma16816(acc[g][1], al, b[2], b[3]);
                    }
                    mma16816(acc[g][0], ah, b[0], b[1]);
                    mma16816(acc[g][1], ah, b[2], b[3]);
                }
            }
            for (int kk = 0; kk < nmt; kk++) {
                uint32_t ah[4], al[4];
                dr_lda(ah, Kh, LK, mt * 16, kk * 16, lane);
                if constexpr (LO) dr_lda(al, Kl, LK, mt * 16, kk * 16, lane);
#pragma unroll
                for (int g = 0; g < GPW; g++) {
                    uint32_t bh[4], bl[4];
                    const int c0 = ((warp >> 2) + (NW / 4) * g) * 16;
                    dr_ldb_kn(bh, dHh, LB, kk * 16, c0, lane);
                    if constexpr (LO) dr_ldb_kn(bl, dHl, LB, kk * 16, c0, lane);
                    dr_mma3x<LO>(acc[g][0], ah, al, bh, bl);
                    dr_mma3x<LO>(acc[g][1], ah, al, bh + 2, bl + 2);
                }
            }
            __syncthreads();  // every warp has read dH': dDelta takes its buffer
#pragma unroll
            for (int g = 0; g < GPW; g++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int e2 = 0; e2 < 4; e2 += 2) {  // columns jj, jj + 1 of row r
                        const int r = mt * 16 + gq + (e2 ? 8 : 0), jj = ((warp >> 2) + (NW / 4) * g) * 16 + nt * 8 + 2 * t4;
                        const bool in0 = r < n && jj < bv, in1 = r < n && jj + 1 < bv;
                        const float d0 = in0 ? acc[g][nt][e2] : 0.f, d1 = in1 ? acc[g][nt][e2 + 1] : 0.f;
                        dr_walk_put2<LO>(DRS_DDELTA, d0, d1, dDh, dDl, r * LB + jj);
                        if (!ws.dsplit) {  // the fp32 layout (HYBRID_DR_DELTA_F32=1); pairs: below
                            if (in0) dDg[(size_t)r * V + j0 + jj] = d0;
                            if (in1) dDg[(size_t)r * V + j0 + jj + 1] = d1;
                        }
                    }
        }
        __syncthreads();  // region B read, dDelta written
        // dDelta's hi + lo pairs (chunk.cuh, the Delta pair layout) copied from the shared tiles
        // by 16-byte groups: from the fragments (2-byte stores) the 16-warp build spilled 232 bytes
        if (ws.dsplit) dr_walk_store_split_tile<LO>((bf16 *)dDg, V, j0, dDh, dDl, LB, n, bv, BV, tid, NTH);
        if (alias) issue_c(ci);
        else if (ci > 0) issue_b(ci - 1);
        if (!alias && ci > 0) cp_async_wait<1>();  // region C (the previous chunk's B may stay in flight)
        else cp_async_wait<0>();
        __syncthreads();
        // c. dh[n] = diag(e^Gamma_end) dH' + scale Qg^T dO - W^T dDelta
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (wg + WG * u < nmt) {
                const int m0 = (wg + WG * u) * 16, i0 = m0 + gq, i1 = i0 + 8;
                const float e0 = i0 < K ? ws.ge[sh * K + i0] : 0.f, e1 = i1 < K ? ws.ge[sh * K + i1] : 0.f;
                float tq[4][4] = {}, tw[4][4] = {};
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    uint32_t ah[4], al[4], wh[4], wl[4];
                    dr_lda_t(ah, Qh, LK, m0, kk * 16, lane);
                    if constexpr (LO) dr_lda_t(al, Ql, LK, m0, kk * 16, lane);
                    dr_lda_t(wh, Wh, LK, m0, kk * 16, lane);
                    if constexpr (LO) dr_lda_t(wl, Wl, LK, m0, kk * 16, lane);
#pragma unroll
                    for (int p = 0; p < 2; p++) {
                        uint32_t b[4], bh[4], bl[4];
                        dr_ldb_kn(b, dO, LB, kk * 16, cb + p * 16, lane);
                        if constexpr (LO) {
                            mma16816(tq[2 * p], al, b[0], b[1]);
                            mma16816(tq[2 * p + 1], al, b[2], b[3]);
                        }
                        mma16816(tq[2 * p], ah, b[0], b[1]);
                        mma16816(tq[2 * p + 1], ah, b[2], b[3]);
                        dr_ldb_kn(bh, dDh, LB, kk * 16, cb + p * 16, lane);
                        if constexpr (LO) dr_ldb_kn(bl, dDl, LB, kk * 16, cb + p * 16, lane);
                        dr_mma3x<LO>(tw[2 * p], wh, wl, bh, bl);
                        dr_mma3x<LO>(tw[2 * p + 1], wh, wl, bh + 2, bl + 2);
                    }
                }
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        dacc[u][nt][e] = (e >= 2 ? e1 : e0) * dacc[u][nt][e] + scale * tq[nt][e] - tw[nt][e];
            }
        __syncthreads();  // region C (or B), dH' and dDelta are rewritten
        if (alias && ci > 0) issue_b(ci - 1);
    }
    if (dh0)
#pragma unroll
        for (int u = 0; u < MU; u++)
            if (wg + WG * u < nmt)
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = (wg + WG * u) * 16 + gq + (e >= 2 ? 8 : 0), jj = cb + nt * 8 + 2 * t4 + (e & 1);
                        if (i < K && jj < bv) dh0[(task * K + i) * V + j0 + jj] = dacc[u][nt][e];
                    }
}

// The reverse walk's tiles at head size K: 32 columns on 8 warps (any K), 128 on 16 warps
// (K <= 128; else not built: 0 blocks an SM).
static void dr_bwalk_tiles(int K, DrWalkTile tiles[2]) {
    tiles[0] = DrWalkTile{32, bwalk_mma_smem(K, 32), 1};
    tiles[1] = DrWalkTile{128, bwalk_mma_smem(K, 128), dr_pad16(K) <= 128 ? 1 : 0};
}

// The V tile width the reverse walk launches with for `pairs` (sequence, head) pairs at K, V:
// walk.cuh's choice, HYBRID_DR_BWALK_BV included (tests/gpu/test_delta_rule.c forces the other
// tile).
extern "C" int cuda_delta_bwalk_tile(int K, int V, int pairs) {
    DrWalkTile tiles[2];
    dr_bwalk_tiles(K, tiles);
    return tiles[dr_walk_pick(tiles, 2, (size_t)pairs, V, "HYBRID_DR_BWALK_BV")].bv;
}

// Launches the reverse walk for N sequences at the tile of walk.cuh's choice: 32 columns
// on 8 warps (any K), or 128 on 16 warps (K <= 128).
template <bool LO>
static void dr_bwalk_launch_lo(const DrWsMma *ws, float *dh0, const float *dhT, const bf16 *dout, float scale, int T,
                               int H, int K, int V, const int *offsets, int N) {
    const int k_le128 = dr_pad16(K) <= 128;
    DrWalkTile tiles[2];
    dr_bwalk_tiles(K, tiles);
    const int a = dr_walk_pick(tiles, 2, (size_t)N * H, V, "HYBRID_DR_BWALK_BV"), bv = tiles[a].bv;
    const dim3 grid(N * ((V + bv - 1) / bv), H);
    const bool kv128 = dr_kv_fixed(K, V);
    if (bv == 128)
        launch_kernel(kv128 ? dr_bwalk_mma_kernel<LO, 128, 16, 2, DR_KV_FIXED> : dr_bwalk_mma_kernel<LO, 128, 16, 2, 0>,
                      grid, dim3(16 * 32), tiles[a].smem, *ws, dh0, dhT, dout, scale, T, H, K, V, offsets,
                      bwalk_alias(K, 128));
    else if (k_le128)
        launch_kernel(kv128 ? dr_bwalk_mma_kernel<LO, 32, 8, 1, DR_KV_FIXED> : dr_bwalk_mma_kernel<LO, 32, 8, 1, 0>,
                      grid, dim3(8 * 32), tiles[a].smem, *ws, dh0, dhT, dout, scale, T, H, K, V, offsets,
                      bwalk_alias(K, 32));
    else
        launch_kernel(dr_bwalk_mma_kernel<LO, 32, 8, 2, 0>, grid, dim3(8 * 32), tiles[a].smem, *ws, dh0, dhT, dout,
                      scale, T, H, K, V, offsets, bwalk_alias(K, 32));
}
// (in the workspace's arithmetic, ws->lo)
void dr_bwalk_launch(const DrWsMma *ws, float *dh0, const float *dhT, const bf16 *dout, float scale, int T,
                            int H, int K, int V, const int *offsets, int N) {
    dr_audit_upload();
    if (ws->lo) dr_bwalk_launch_lo<true>(ws, dh0, dhT, dout, scale, T, H, K, V, offsets, N);
    else dr_bwalk_launch_lo<false>(ws, dh0, dhT, dout, scale, T, H, K, V, offsets, N);
}
