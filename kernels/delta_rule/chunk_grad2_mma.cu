// grad2 of the tensor-core chunkwise backward (KDA / GDN / DeltaNet), the second of the default
// pair of gradient kernels, per (chunk slot, head): stages B4 and B6 from grad1's dA, dL, db,
// gend (chunk_grad1_mma.cu, whose header describes the pair) and the workspace (DrWsMma,
// chunk.cuh); docs/delta-rule.md, "Chunkwise backward" and "CUDA kernels" (grad2's access
// patterns). The B4 pieces it shares with the single reference kernel: chunk_grad.cuh.
#include "kernels/delta_rule/chunk_grad.cuh"

// grad2: G [64][grad2_lg(K)] (swizzled: dr_gsw), hand [2][4][32] float4, bs, db, dbp [4][64],
// att [64], dbd [64][8], gend [K] fp32; 2 tiles [64][72] + 3 [64][40] bf16 (before the tiles,
// the tile region holds g: at most [64][264] bf16, K = 256, as large; after them, dr_b4_diag's
// copy of dA, dL's diagonal blocks: 8 KiB), then the chunk's k and q tiles, [64][KP + 8] bf16
// each for the whole kernel. K = V = 128: 111,872 bytes (77,056 before the k and q tiles of
// session 14), two blocks an SM (223,744 of the H200's 228 KiB).
// G's row stride: K rounded up to 64 (dr_gsw permutes within 64-column blocks) plus 8 floats,
// so the 8 rows of an MMA fragment's float2 reads (row stride = 8 banks) fill the 32 banks
// of a half warp once (at a stride of K = 128, all 8 rows were on the same 8 banks).
__host__ __device__ __forceinline__ int grad2_lg(int K) { return ((K + 63) & ~63) + 8; }
static size_t grad2_tiles_off(int K) {
    return ((size_t)DR_BT * grad2_lg(K) + 1024 + 15 * DR_BT + (size_t)K + 7) & ~(size_t)7;
}
// one chunk-row tile of a (B, T, H, K) input: [64][KP + 8] bf16, KP = K rounded up to 16 (g, k, q)
__host__ __device__ __forceinline__ size_t grad2_row_tile_bytes(int K) {
    return (size_t)DR_BT * (dr_pad16(K) + DR_PAD) * 2;
}
// the tile region: the larger of B4's tiles (dA, dL [64][72], Kr, Qr, Kb [64][40] bf16) and the
// staged g (33,792 bytes each at K = 256); after it the chunk's k and q tiles
__host__ __device__ __forceinline__ size_t grad2_tiles_bytes(int K) {
    const size_t b4 = (2 * DR_BT * 72 + 3 * DR_BT * 40) * 2, gs = grad2_row_tile_bytes(K);
    return b4 > gs ? b4 : gs;
}
static size_t grad2_mma_smem(int K) {
    return grad2_tiles_off(K) * sizeof(float) + grad2_tiles_bytes(K) + 2 * grad2_row_tile_bytes(K);
}

// grad2: B4 on tensor cores (docs/delta-rule.md, "Stage B4: intra-chunk decay gradients") and
// B6, from grad1's dA, dL, db, gend. The products and the sums of the single kernel's B4 (the
// reference, chunk_grad_ref_mma.cu), with its K tiles of 64 taken as two halves of 32 columns: half hf of tile
// i0 holds the columns i0 + 16 w + 8 hf + (0..7), w = 0..3, so warp w (w % 4 of each task)
// takes the 8 columns the single kernel's warp w took as its n-tile u = hf, and every thread
// adds its dbeta partials in the same order (i0, then hf = u, then the element).
// Memory: the kernel was latency-bound on chains of dependent global round trips (a load
// after a store to a possibly aliasing address waits for it), so each pass loads all its
// operands first, then computes and stores: g, and the chunk's k and q, staged by cp.async
// (g for the Gamma cumsum; k and q for the fills, the epilogues and the diagonal blocks: at
// the 128-register cap ptxas kept only two of a fill's 8-16 global loads in flight, ~30% of
// grad2's time until session 14); the row terms' dQ, dK, dG before the fill of their (Bk, i0, hf), so they arrive
// during the fill and the MMAs (no other pass touches those elements in between); the column
// terms' dK, dG (just written by the row terms) as one batch; in the diagonal blocks
// (dr_b4_diag), dA and dL's blocks copied once into the spent tiles, and each dQ, dK, dG
// element loaded a row ahead of its one store. Every element keeps its operations and their
// order, so the bits are the reference's. 128 registers (2 blocks an SM).
// Access patterns (after Nsight Compute on the H200: 19 of 32 bytes used per global-load
// sector, 21.6 per store sector, 2.7-way shared-load bank conflicts): the epilogues take each
// row's column pair (ei, ei + 1) of dQ, dK, dG as one 8-byte access and of q, k as one 4-byte
// shared read (dr_ld_pair; 4 lanes = 32 contiguous bytes of fp32: whole sectors); the row-term warp
// hands dK, dG to the column-term warp of the same lane through shared memory (hand: one
// float4 each, conflict-free) instead of storing them for that warp to load back; G's layout
// (grad2_lg, dr_gsw) makes the fragments' float2 reads (8 rows on one set of 8 banks at a row
// stride of 128: 8-way) and the fill's row reads (2-way) conflict-free; B6's stores go by 8
// columns a thread (dr_grad_finish_v: 16-byte loads and stores). ptxas: 128 registers, spill
// 8 / 8 bytes (stores / loads), 111,872 bytes of shared memory at K = V = 128.
template <int KC, bool FULL>  // KC: 0, or DR_KV_FIXED (grad2 reads no V); FULL: whole chunks only (dr_full_chunks; chunk.cuh)
__global__ void __launch_bounds__(DR_THREADS, 2)  // 2 blocks an SM: at most 128 registers
    dr_grad2_mma_kernel(DrWsMma ws, bf16 *dq, bf16 *dk, bf16 *dg, bf16 *dbeta, const bf16 *q, const bf16 *k,
                        const bf16 *g, const bf16 *beta, int gate, int Tlen, int H, int K_arg, const int *offsets,
                        int N) {
    const int K = KC ? KC : K_arg;
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, C = DR_BT;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    static_assert(!FULL || KC, "FULL instances are built for K = DR_KV_FIXED only");
    if (FULL) n = DR_BT;
    const size_t sh = (size_t)x * H + h;
    DYNAMIC_SMEM(float, sm);
    const int lane = tid & 31, warp = tid >> 5;
    float *dQ = ws.dQ + sh * C * K, *dK = ws.dK + sh * C * K, *dG = ws.dG + sh * C * K;
    const float *dAg = ws.dA + sh * C * C, *dLg = ws.dL + sh * C * C;
    // the epilogues' column pairs of dQ, dK, dG as single accesses (dr_ld_pair): K even (the
    // workspace arrays are 256-byte aligned; q and k are read from their staged tiles)
    const bool pairs = (K & 1) == 0;
    const int LGs = grad2_lg(K);  // G: [64][LGs], column dr_gsw(i)
    float *G = sm, *hand = G + C * LGs, *bs = hand + 1024, *db = bs + C, *dbp = db + C, *att = dbp + 4 * C,
          *gend = att + C, *dbd = gend + K;
    bf16 *tiles = (bf16 *)(sm + ((C * LGs + 1024 + 15 * C + K + 7) & ~7));  // grad2_tiles_off
    // g staged in the tile region (free until the dA / dL tiles): [64][KP + 8] bf16 of the
    // chunk's rows (per-channel gate; rows >= n zero) or its [64] per-head gates
    const int LG = dr_pad16(K) + DR_PAD;
    bf16 *gs = tiles;
    if (gate == DRG_CHANNEL)
        dr_load_tile(gs, LG, g + ((size_t)tok0 * H + h) * K, (size_t)H * K, C, dr_pad16(K), n, K, tid, DR_THREADS);
    else if (gate == DRG_HEAD && tid < C)
        gs[tid] = tid < n ? g[(size_t)(tok0 + tid) * H + h] : __float2bfloat16(0.f);
    // the chunk's k and q ([64][LG] bf16 each, rows >= n and columns >= K zero) for B4's fills,
    // its epilogues and the diagonal blocks: each element read from global memory once, not once
    // a row block, and the fills' loads no longer global round trips (Nsight Compute, session 14:
    // the fill's k and q loads were ~30% of grad2's warp samples, two in flight a thread at the
    // 128-register cap)
    bf16 *ks = tiles + grad2_tiles_bytes(K) / sizeof(bf16), *qs = ks + C * LG;
    dr_load_tile(ks, LG, k + ROWQK(0), (size_t)H * K, C, dr_pad16(K), n, K, tid, DR_THREADS);
    dr_load_tile(qs, LG, q + ROWQK(0), (size_t)H * K, C, dr_pad16(K), n, K, tid, DR_THREADS);
    cp_async_commit();
    // the strictly lower dA, dL ([64][64] fp32, row-major) into registers while g arrives
    constexpr int NE = DR_BT * DR_BT / DR_THREADS;
    float av[NE], lv[NE];
#pragma unroll
    for (int u = 0; u < NE; u++) {
        const int e = tid + u * DR_THREADS, r = e / C, c = e % C;
        const float a = dAg[e], l = dLg[e];  // unconditional loads (grad1 wrote every entry)
        av[u] = c < r ? a : 0.f;
        lv[u] = c < r ? l : 0.f;
    }
    for (int r = tid; r < C; r += DR_THREADS) {
        bs[r] = r < n ? dr_ld(beta + (size_t)(tok0 + r) * H + h) : 0.f;
        db[r] = ws.db[sh * C + r];
        att[r] = dAg[r * C + r];
    }
    for (int i = tid; i < K; i += DR_THREADS) gend[i] = ws.gend[sh * K + i];
    cp_async_wait<0>();
    __syncthreads();
    for (int i = tid; i < K; i += DR_THREADS) {  // Gamma, recomputed (as dr_grad_front: the same sums)
        float acc = 0.f;
        for (int r = 0; r < C; r++) {
            if (r < n)
                acc += gate == DRG_CHANNEL ? __bfloat162float(gs[r * LG + i])
                       : gate == DRG_HEAD  ? __bfloat162float(gs[r])
                                           : 0.f;
            G[r * LGs + dr_gsw(i)] = acc;
        }
    }
    __syncthreads();  // G complete, gs spent
    // Warp w: 8 columns 8 (w % 4).. of the K half-tile; w < 4 the row terms, w >= 4 the column terms.
    {
        const int w4 = warp & 3, task = warp >> 2, gq = lane >> 2, t4 = lane & 3, LT = 72, LN = 40;
        const int nb = 16 * (w4 >> 1), odd = w4 & 1;  // the x4 B load at columns nb.., this warp's half
        // every B4 operand one bf16 (docs/delta-rule.md, "Accuracy: the per-operand audit"): one MMA a k-step
        bf16 *Ah_ = tiles, *Lh = Ah_ + C * LT, *Krh = Lh + C * LT, *Qrh = Krh + C * LN, *Kbh = Qrh + C * LN;
#pragma unroll
        for (int u = 0; u < NE; u++) {
            const int e = tid + u * DR_THREADS, r = e / C, c = e % C;
            Ah_[r * LT + c] = __float2bfloat16(av[u]);
            Lh[r * LT + c] = __float2bfloat16(lv[u]);
        }
        float part[2] = {0.f, 0.f};  // dbeta partials of rows gq, gq + 8 of the row block
        for (int Bk = 0; Bk < 4; Bk++) {
            const int t0 = 16 * Bk;
            for (int i0 = 0; i0 < K; i0 += 64)
                for (int hf = 0; hf < 2; hf++) {
                    // the fill: the half-tile's adjacent columns ii, ii + 1, ii = 2 (lane & 15) (channels
                    // fi, fi + 1: ii is even, so both lie in one 8-column group), of rows warp + 8 (2 j +
                    // (lane >> 4)), j = 0..3; each row's pair one 4-byte k and q read, one float2 of G
                    // (dr_gsw keeps bit 0), one bf16x2 store (a column a lane took twice the
                    // instructions and spilled 8 bytes at the 128-register cap); k and q of the rows
                    // that need them loaded first
                    const int ii = 2 * (lane & 15), rh = lane >> 4;
                    const int fi = i0 + 16 * (ii >> 3) + 8 * hf + (ii & 7);
                    const bool fin0 = fi < K, fin1 = fi + 1 < K;
                    float fk[8], fq[8];  // [2 j + c]: row warp + 8 (2 j + rh), channel fi + c
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int r = warp + 8 * (2 * j + rh);
                        const bool in = r < n && fin0 && (r < t0 || r >= t0 + 16), iq = in && r >= t0 + 16;
                        // (fi + 1 = K, K odd, reads the tile's zero padding)
                        dr_ld_pair(ks + r * LG + fi, true, in, in, fk[2 * j], fk[2 * j + 1]);
                        dr_ld_pair(qs + r * LG + fi, true, iq, iq, fq[2 * j], fq[2 * j + 1]);
                    }
                    // this thread's epilogue elements: rows t0 + gq (+ 8), columns ei (+ 1), e =
                    // 2 (row half) + column; ei is even, so with K even both columns are in or
                    // neither, and each row's pair is one 8-byte (fp32) or 4-byte (bf16) access:
                    // the 4 lanes of a row cover 32 contiguous bytes of dQ, dK, dG (a full sector)
                    const int ei = i0 + 16 * w4 + 8 * hf + 2 * t4;
                    // the epilogue's operands: dQ, dK, dG from global memory, in flight during the
                    // fill and the MMAs (this (i0, hf, Bk) is the only one that touches these
                    // elements), k and q from the staged tiles
                    float ek[4], eq[4] = {}, edq[4] = {}, edk[4] = {}, edg[4] = {};
#pragma unroll
                    for (int hr = 0; hr < 2; hr++) {
                        const int t = t0 + gq + 8 * hr, e = 2 * hr;
                        const bool in0 = t < n && ei < K, in1 = t < n && ei + 1 < K;
                        // k, q from the staged tiles: ei even, LG even, so one 4-byte read (ei + 1
                        // past K reads the tile's zero padding, as the element loads gave 0)
                        dr_ld_pair(ks + t * LG + ei, true, in0, in1, ek[e], ek[e + 1]);
                        if (task == 0) {
                            dr_ld_pair(qs + t * LG + ei, true, in0, in1, eq[e], eq[e + 1]);
                            dr_ld_pair(dQ + t * K + ei, pairs, in0, in1, edq[e], edq[e + 1]);
                            dr_ld_pair(dK + t * K + ei, pairs, in0, in1, edk[e], edk[e + 1]);
                            dr_ld_pair(dG + t * K + ei, pairs, in0, in1, edg[e], edg[e + 1]);
                        }
                    }
                    // Kr rows < t0 (task 0's k-steps), Qr / Kb rows >= t0 + 16 (task 1's); the
                    // other rows are never read
                    const int fc = dr_gsw(fi);  // fi's column in G (fi + 1's is the next)
                    float2 g0 = make_float2(0.f, 0.f), g15 = g0;
                    if (fin0) g0 = *(const float2 *)(G + t0 * LGs + fc), g15 = *(const float2 *)(G + (t0 + 15) * LGs + fc);
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const int r = warp + 8 * (2 * j + rh);
                        const bool in = r < n && fin0;
                        const float2 gr = in ? *(const float2 *)(G + r * LGs + fc) : make_float2(0.f, 0.f);
                        // (the exponentials unconditional, then the selects: chunk.cuh's dr_exp_note)
                        if (r < t0) {
                            const float e0 = dr_eval(dr_exp(g0.x - gr.x)), e1 = dr_eval(dr_exp(g0.y - gr.y));
                            const float a0 = in ? fk[2 * j] * e0 : 0.f, a1 = in && fin1 ? fk[2 * j + 1] * e1 : 0.f;
                            *(__nv_bfloat162 *)(Krh + r * LN + ii) = __floats2bfloat162_rn(a0, a1);
                        } else if (r >= t0 + 16) {
                            const float e0 = dr_eval(dr_exp(gr.x - g15.x)), e1 = dr_eval(dr_exp(gr.y - g15.y));
                            const float b0 = in ? fq[2 * j] * e0 : 0.f, c0 = in ? bs[r] * fk[2 * j] * e0 : 0.f,
                                        b1 = in && fin1 ? fq[2 * j + 1] * e1 : 0.f,
                                        c1 = in && fin1 ? bs[r] * fk[2 * j + 1] * e1 : 0.f;
                            *(__nv_bfloat162 *)(Qrh + r * LN + ii) = __floats2bfloat162_rn(b0, b1);
                            *(__nv_bfloat162 *)(Kbh + r * LN + ii) = __floats2bfloat162_rn(c0, c1);
                        }
                    }
                    __syncthreads();
                    float x0[4] = {}, x1[4] = {};
                    if (task == 0) {
                        for (int kk = 0; kk < Bk; kk++) {
                            uint32_t ah[4], lh[4], bh[4];
                            dr_b4_frag_a<false>(ah, lh, Ah_, Lh, LT, t0, kk, lane);
                            dr_ldb_kn(bh, Krh, LN, kk * 16, nb, lane);
                            const uint32_t h0 = odd ? bh[2] : bh[0], h1 = odd ? bh[3] : bh[1];
                            mma16816(x0, ah, h0, h1);
                            mma16816(x1, lh, h0, h1);
                        }
                    } else {
                        for (int kk = Bk + 1; kk < 4; kk++) {
                            uint32_t ah[4], lh[4], bq[4], bk[4];
                            dr_b4_frag_a<true>(ah, lh, Ah_, Lh, LT, t0, kk, lane);
                            dr_ldb_kn(bq, Qrh, LN, kk * 16, nb, lane);
                            dr_ldb_kn(bk, Kbh, LN, kk * 16, nb, lane);
                            mma16816(x0, ah, odd ? bq[2] : bq[0], odd ? bq[3] : bq[1]);
                            mma16816(x0, lh, odd ? bk[2] : bk[0], odd ? bk[3] : bk[1]);
                        }
                    }
                    // G's columns of ei, ei + 1 (adjacent: ei is even, dr_gsw keeps bit 0)
                    const int ec = dr_gsw(ei);
                    if (task == 0) {
                        // dQ complete here; dK, dG with the row terms go to the column-term warp
                        // of the same lane (warp + 4) through hand, not through global memory
                        float nq[4] = {}, nk[4] = {}, ng[4] = {};
#pragma unroll
                        for (int hr = 0; hr < 2; hr++) {
                            const int t = t0 + gq + 8 * hr;
                            if (t >= n || ei >= K) continue;
                            const float2 gt = *(const float2 *)(G + t * LGs + ec),
                                         gr = *(const float2 *)(G + t0 * LGs + ec);
#pragma unroll
                            for (int c = 0; c < 2; c++) {
                                const int e = 2 * hr + c;
                                if (ei + c >= K) break;
                                const float ex = dr_exp((c ? gt.y : gt.x) - (c ? gr.y : gr.x)), dqoff = ex * x0[e],
                                            rho = ex * x1[e], qt = eq[e], kt = ek[e], at = att[t], bt = bs[t];
                                nq[e] = edq[e] + (dqoff + at * kt);
                                nk[e] = edk[e] + (at * qt + bt * rho);
                                ng[e] = edg[e] + (qt * dqoff + bt * kt * rho);
                                part[hr] += rho * kt;
                            }
                            dr_st_pair(dQ + t * K + ei, pairs, true, ei + 1 < K, nq[2 * hr], nq[2 * hr + 1]);
                        }
                        float4 *h4 = (float4 *)hand + w4 * 64 + lane;
                        h4[0] = make_float4(nk[0], nk[1], nk[2], nk[3]);
                        h4[32] = make_float4(ng[0], ng[1], ng[2], ng[3]);
                    }
                    // the row terms are in (each element gets both terms); with this barrier the
                    // MMAs are done, so the next fill may overwrite the tiles without another
                    __syncthreads();
                    if (task == 1) {
                        const float4 *h4 = (const float4 *)hand + w4 * 64 + lane;
                        const float4 hk = h4[0], hg = h4[32];
                        const float cdk[4] = {hk.x, hk.y, hk.z, hk.w}, cdg[4] = {hg.x, hg.y, hg.z, hg.w};
#pragma unroll
                        for (int hr = 0; hr < 2; hr++) {
                            const int t = t0 + gq + 8 * hr;
                            if (t >= n || ei >= K) continue;
                            const float2 gt = *(const float2 *)(G + t * LGs + ec),
                                         ge = *(const float2 *)(G + (t0 + 15) * LGs + ec);
                            float nk[2] = {}, ng[2] = {};
#pragma unroll
                            for (int c = 0; c < 2; c++) {
                                const int e = 2 * hr + c;
                                if (ei + c >= K) break;
                                const float dgm = dr_exp((c ? ge.y : ge.x) - (c ? gt.y : gt.x)) * x0[e];
                                nk[c] = cdk[e] + dgm;
                                ng[c] = cdg[e] - ek[e] * dgm;
                            }
                            dr_st_pair(dK + t * K + ei, pairs, true, ei + 1 < K, nk[0], nk[1]);
                            dr_st_pair(dG + t * K + ei, pairs, true, ei + 1 < K, ng[0], ng[1]);
                        }
                    }
                }
            // this block's dbeta rows (the row-term warps), then the partials restart
            for (int u = 0; u < 2; u++) {
                part[u] += __shfl_xor_sync(0xffffffffu, part[u], 1);
                part[u] += __shfl_xor_sync(0xffffffffu, part[u], 2);
            }
            if (task == 0 && t4 == 0) {
                dbp[w4 * C + t0 + gq] = part[0];
                dbp[w4 * C + t0 + gq + 8] = part[1];
            }
            part[0] = part[1] = 0.f;
        }
        __syncthreads();
        if (tid < C) db[tid] += dbp[tid] + dbp[C + tid] + dbp[2 * C + tid] + dbp[3 * C + tid];
    }
    __syncthreads();
    // the tiles are spent: dr_b4_diag's scratch
    dr_b4_diag<true>(dAg, dLg, G, bs, qs, ks, (size_t)LG, dQ, dK, dG, db, dbd, (float *)tiles, n, K, LGs);

    // B6 and the stores (chunk.cuh)
    dr_grad_finish_v(dq, dk, dg, dbeta, dQ, dK, dG, db, gend, gate, n, tok0, H, h, K);
}

// grad2 over the slots x H (chunk slot, head) blocks, after grad1 (chunk_grad1_mma.cu)
void dr_grad2_launch(const DrWsMma *ws, size_t slots, bf16 *dq, bf16 *dk, bf16 *dg, bf16 *dbeta, const bf16 *q,
                     const bf16 *k, const bf16 *g, const bf16 *beta, int gate, int T, int H, int K, const int *offsets,
                     int N) {
    dr_audit_upload();
    PROFILE("delta_chunk/grad2");
    const bool k128 = K == DR_KV_FIXED, full = k128 && dr_full_chunks(offsets, T);
    launch_kernel(full   ? dr_grad2_mma_kernel<DR_KV_FIXED, true>
                  : k128 ? dr_grad2_mma_kernel<DR_KV_FIXED, false>
                         : dr_grad2_mma_kernel<0, false>,
                  dim3((unsigned)slots, H),
                  dim3(DR_THREADS), grad2_mma_smem(K), *ws, dq, dk, dg, dbeta, q, k, g, beta, gate, T, H, K, offsets, N);
}
