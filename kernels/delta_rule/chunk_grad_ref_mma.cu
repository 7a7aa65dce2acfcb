// The single gradient kernel of the tensor-core chunkwise backward, kept as the reference for
// the grad1 / grad2 pair (chunk_grad1_mma.cu, chunk_grad2_mma.cu, the default): stages B1, B3, the gradient of the
// triangular inverse, B4 and B6 for one (chunk slot, head) in one block (docs/delta-rule.md,
// "Chunkwise backward", its stages B1 to B6, and "CUDA kernels": the split of the grad kernel).
// Run under HYBRID_DR_GRAD_REF=1 (read at each call, chunk_bwd_mma.cu);
// tests/gpu/test_delta_rule.c compares the pair's gradients with this kernel's bits on every
// case. It reads the recomputed workspace and the reverse walk's outputs (DrWsMma, chunk.cuh:
// T, Delta (ws.U), h and dH' as hi + lo, dDelta) and keeps dQ, dK, dG, dW in the workspace.
// Shared memory (grad_tiles_off, grad_mma_smem): fp32 dA, Tm (T), dT (dL after the
// triangular-inverse gradient), tmp, each [64][64], then bs [64], db [64], gend [K], G [64][K]
// (Gamma); then the tile region, B1 / B3's ten [64][40] and two [64][72] bf16 tiles (B4 uses
// five [64][72] since its lo tiles went, branch dr-fewer-mma): 168,960 bytes at K = 128 (191,488
// before), one block an SM.
// The B4 pieces shared with grad2 (dr_b4_frag_a, dr_b4_diag): chunk_grad.cuh.
#include "kernels/delta_rule/chunk_grad.cuh"

static size_t grad_tiles_off(int K) { return (4 * DR_BT * DR_BT + 2 * DR_BT + (size_t)K + (size_t)DR_BT * K + 7) & ~(size_t)7; }
// the tile region: B1 / B3's ten [64][40] and two [64][72] bf16 tiles, the largest use (B4: five
// [64][72]; the g tile: at most [64][256] bf16; the triangular-inverse gradient's T^T [64][65] fp32)
static size_t grad_mma_smem(int K) {
    return grad_tiles_off(K) * sizeof(float) + (10 * DR_BT * 40 + 2 * DR_BT * 72) * 2;
}

// B1 through the triangular-inverse gradient, for one (chunk, head): tok0, n the chunk's rows,
// sh its workspace index, sm the grad_tiles_off layout (dA, Tm, dT, tmp, bs, db, gend, G, then
// the tiles). Leaves dA, dT = dL, db, gend in shared memory (dv, dQ, dK, dG, dW stored). Ends
// after a barrier.
__device__ __forceinline__ void dr_grad_front(const DrWsMma &ws, bf16 *dv, const bf16 *dout, const bf16 *q,
                                              const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta, int gate,
                                              float scale, int H, int h, int K, int V, int tok0, int n, size_t sh,
                                              float *sm) {
    const int tid = threadIdx.x, C = DR_BT, lane = tid & 31, warp = tid >> 5;
    const float *Tg = ws.T + sh * C * C, *D = ws.U + sh * C * V, *dD = ws.dD + sh * C * V;
    const bf16 *Hh = ws.h + sh * K * V, *Hl = ws.hl + sh * K * V, *dHh = ws.dh + sh * K * V, *dHl = ws.dhl + sh * K * V;
    float *dQ = ws.dQ + sh * C * K, *dK = ws.dK + sh * C * K, *dG = ws.dG + sh * C * K;
    bf16 *dW = ws.dW + sh * C * K;  // (bf16: chunk.cuh)
    float *dA = sm, *Tm = dA + C * C, *dT = Tm + C * C, *tmp = dT + C * C, *bs = tmp + C * C, *db = bs + C,
          *gend = db + C, *G = gend + K;
    bf16 *tiles = (bf16 *)(sm + ((4 * C * C + 2 * C + K + C * K + 7) & ~7));  // grad_tiles_off

    const float *Gend = G + (size_t)(n - 1) * K;
    // Gamma, recomputed: KDA's g rows first to the (still free) tiles by cp.async, [64][K8] bf16
    // (K8 = K rounded up to 8; 32 KiB at K = 256), so the serial sums read shared memory
    // instead of waiting on 64 dependent-latency global rows; the same sums in the same order.
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
            G[r * K + i] = acc;
        }
    }
    __syncthreads();  // G written; the g tile is spent

    for (int e = tid; e < C * C; e += DR_THREADS) Tm[e] = Tg[e];
    for (int r = tid; r < C; r += DR_THREADS) {
        bs[r] = r < n ? dr_ld(beta + (size_t)(tok0 + r) * H + h) : 0.f;
        db[r] = 0.f;
    }
    // B1 and B3 on tensor cores (docs/delta-rule.md, "Stage B1: output-side gradients", "Stage
    // B3: inter-chunk and WY gradients"): the contractions over V, by K tiles of 64 (outer) and V
    // tiles of 32 (inner), accumulated in registers (warp: rows 16 (w % 4).., columns 32 (w / 4)..):
    //   HD = dO h[n]^T -> dq = scale e^Gamma HD;   DK = Delta dH'^T -> dk = e^(Gamma_end - Gamma) DK;
    //   dGamma = q dq - k dk;  dW = -dDelta h[n]^T;
    //   and with the first K tile: dA = scale dO Delta^T (c <= r), dT's V part dDelta V^T.
    // The same h[n], dH' tiles give the first part of the dGamma_end extras, <h[n]_i, dH'_i>
    // (below). The K tile's q and k columns ([64][72] bf16 each, after the ten [64][40] tiles)
    // load with the first V tile, so the epilogue reads them from shared memory.
    {
        const int mt = warp & 3, c0 = (warp >> 2) * 32, gq = lane >> 2, t4 = lane & 3, LB = 40, LQ = 72;
        const int nkt = (dr_pad16(K) + 63) / 64;
        bf16 *dOt = tiles, *Dh = dOt + C * LB, *Dl = Dh + C * LB, *dDh = Dl + C * LB, *dDl = dDh + C * LB,
             *vt = dDl + C * LB, *hh = vt + C * LB, *hl = hh + C * LB, *gh = hl + C * LB, *gl = gh + C * LB,
             *qs = gl + C * LB, *ks = qs + C * LQ;
        for (int kt = 0; kt < nkt; kt++) {
            const int i0 = kt * 64;
            float aq[4][4] = {}, ak[4][4] = {}, aw[4][4] = {}, aa[4][4] = {}, at[4][4] = {};
            // gend's dot over V, as a warp per row i (the loop after B1 before): lane l of warp w
            // sums the columns j = l mod 32 in ascending j of rows i0 + w + 8 u, one per V tile
            float hd[8] = {};
            if (kt > 0) __syncthreads();  // the previous epilogue has read qs, ks
            dr_load_tile(qs, LQ, q + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
            dr_load_tile(ks, LQ, k + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
            for (int j0 = 0; j0 < V; j0 += 32) {
                dr_load_tile(dOt, LB, dout + ROWV(0) + j0, (size_t)H * V, C, 32, n, V - j0, tid, DR_THREADS);
                if (kt == 0) dr_load_tile(vt, LB, v + ROWV(0) + j0, (size_t)H * V, C, 32, n, V - j0, tid, DR_THREADS);
                dr_load_tile(hh, LB, Hh + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                dr_load_tile(hl, LB, Hl + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                dr_load_tile(gh, LB, dHh + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                dr_load_tile(gl, LB, dHl + (size_t)i0 * V + j0, V, C, 32, K - i0, V - j0, tid, DR_THREADS);
                if (ws.dsplit) {
                    dr_load_split_tile<32, DR_THREADS>(Dh, Dl, LB, (const bf16 *)D, V, j0, n, tid);
                    dr_load_split_tile<32, DR_THREADS>(dDh, dDl, LB, (const bf16 *)dD, V, j0, n, tid);
                }
                cp_async_commit();
                if (!ws.dsplit)
                    for (int e = tid; e < C * 32; e += DR_THREADS) {
                        const int r = e / 32, jj = e % 32;
                        const bool in = r < n && j0 + jj < V;
                        dr_split(DRS_DELTA, in ? D[r * V + j0 + jj] : 0.f, Dh + r * LB + jj, Dl + r * LB + jj);
                        dr_split(DRS_DDELTA, in ? dD[r * V + j0 + jj] : 0.f, dDh + r * LB + jj, dDl + r * LB + jj);
                    }
                cp_async_wait<0>();
                __syncthreads();
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    uint32_t ao[4], adh[4], adl[4], agh[4], agl[4];
                    dr_lda(ao, dOt, LB, mt * 16, kk * 16, lane);
                    dr_lda(adh, Dh, LB, mt * 16, kk * 16, lane);
                    dr_lda(adl, Dl, LB, mt * 16, kk * 16, lane);
                    dr_lda(agh, dDh, LB, mt * 16, kk * 16, lane);
                    dr_lda(agl, dDl, LB, mt * 16, kk * 16, lane);
#pragma unroll
                    for (int p = 0; p < 2; p++) {
                        const int n0 = c0 + p * 16;
                        uint32_t bh[4], bl[4];
                        dr_ldb_nk(bh, hh, LB, kk * 16, n0, lane);
                        dr_ldb_nk(bl, hl, LB, kk * 16, n0, lane);
                        for (int u = 0; u < 2; u++) {  // dO exact: two MMAs
                            mma16816(aq[2 * p + u], ao, bl[2 * u], bl[2 * u + 1]);
                            mma16816(aq[2 * p + u], ao, bh[2 * u], bh[2 * u + 1]);
                            dr_mma3(aw[2 * p + u], agh, agl, bh + 2 * u, bl + 2 * u);
                        }
                        dr_ldb_nk(bh, gh, LB, kk * 16, n0, lane);
                        dr_ldb_nk(bl, gl, LB, kk * 16, n0, lane);
                        for (int u = 0; u < 2; u++) dr_mma3(ak[2 * p + u], adh, adl, bh + 2 * u, bl + 2 * u);
                        if (kt == 0) {
                            dr_ldb_nk(bh, Dh, LB, kk * 16, n0, lane);
                            dr_ldb_nk(bl, Dl, LB, kk * 16, n0, lane);
                            uint32_t bv[4];
                            dr_ldb_nk(bv, vt, LB, kk * 16, n0, lane);
                            for (int u = 0; u < 2; u++) {
                                mma16816(aa[2 * p + u], ao, bl[2 * u], bl[2 * u + 1]);
                                mma16816(aa[2 * p + u], ao, bh[2 * u], bh[2 * u + 1]);
                                mma16816(at[2 * p + u], agl, bv[2 * u], bv[2 * u + 1]);
                                mma16816(at[2 * p + u], agh, bv[2 * u], bv[2 * u + 1]);
                            }
                        }
                    }
                }
                if (j0 + lane < V)
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        const int x = (warp + 8 * u) * LB + lane;
                        hd[u] += (__bfloat162float(hh[x]) + __bfloat162float(hl[x])) *
                                 (__bfloat162float(gh[x]) + __bfloat162float(gl[x]));
                    }
                __syncthreads();  // the tiles are reloaded
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                const int i = i0 + warp + 8 * u;
                const float acc = warp_sum(hd[u]);
                if (lane == 0 && i < K) gend[i] = acc * dr_exp(Gend[i]);
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), cc = c0 + nt * 8 + 2 * t4 + (e & 1), i = i0 + cc;
                    if (r < n && i < K) {
                        const float gr = G[r * K + i], dqv = scale * dr_exp(gr) * aq[nt][e],
                                    dkv = ak[nt][e] * dr_exp(Gend[i] - gr);
                        dQ[r * K + i] = dqv;
                        dK[r * K + i] = dkv;
                        dG[r * K + i] = dr_dg_term(__bfloat162float(qs[r * LQ + cc]), dqv, __bfloat162float(ks[r * LQ + cc]), dkv);
                        dW[r * K + i] = __float2bfloat16(-aw[nt][e]);  // (bf16: read rounded below)
                    }
                    if (kt == 0) {
                        dA[r * C + cc] = (cc <= r && r < n) ? scale * aa[nt][e] : 0.f;
                        dT[r * C + cc] = at[nt][e];
                    }
                }
        }
    }
    __syncthreads();

    // dGamma_end extras: e^Gamma_end <h[n]_i, dH'_i> (B1 above, from its tiles) + sum_r k_r[i]
    // dk_r[i] (the B3 dk), a thread per channel adding the chunk's rows.
    for (int i = tid; i < K; i += DR_THREADS) {
        float acc = gend[i];
        for (int r = 0; r < n; r++) acc += KK(r, i) * dK[r * K + i];
        gend[i] = acc;
    }
    __syncthreads();  // gend has read the B3 dk

    // dT's K part and Wbar = T^T dW on tensor cores by K tiles of 64, then Ubar = T^T dU by V
    // tiles of 64 (docs/delta-rule.md, "Gradient of the triangular inverse", "Stage B3: inter-chunk and WY gradients"); warp:
    // rows 16 (w % 4).., columns 32 (w / 4)..:
    //   dT = P_sl(dT_V + dW Kb^T) diag(beta), Kb = k e^Gamma;
    //   dk_r += beta_r Wbar_r e^Gamma_r, dGamma_r += beta_r Wbar_r Kb_r, dbeta_r += Wbar_r.Kb_r;
    //   dv_r = beta_r Ubar_r, dbeta_r += Ubar_r.v_r
    {
        const int mt = warp & 3, half = warp >> 2, c0 = half * 32, gq = lane >> 2, t4 = lane & 3, LT = 72;
        // Xs: k (B3) or v (Ubar) columns of the tile, exact bf16, for the epilogues. T^T, dW and
        // Kb are one bf16 each (docs/delta-rule.md, "Accuracy: the per-operand audit"): dW Kb^T
        // and T^T dW one MMA a k-step, T^T dDelta two (dDelta hi + lo: Xh, Xl).
        bf16 *Xh = tiles, *Xl = Xh + C * LT, *Bh = Xl + C * LT, *Xs = Bh + C * LT;
        float *dbp = tmp;  // [2][64] dbeta partials of the two column halves (tmp is free until below)
        // A = T^T (rows r, k = m): T^T[r][m] = T[m][r], nonzero for m >= r: k-steps kk >= mt
        uint32_t th[4][4] = {};  // (constant indices only: the loops unrolled, kk < mt skipped)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (kk < mt) continue;
                const int r = mt * 16 + gq + (u & 1) * 8, m = kk * 16 + 2 * t4 + (u >> 1) * 8;
                th[kk][u] = pack_bf16(Tm[m * C + r], Tm[(m + 1) * C + r]);
            }
        float part[2] = {0.f, 0.f};  // dbeta partials of rows gq, gq + 8 of the m-tile
        float dtk[4][4] = {};
        for (int i0 = 0; i0 < K; i0 += 64) {
            dr_load_tile(Xs, LT, k + ROWQK(0) + i0, (size_t)H * K, C, 64, n, K - i0, tid, DR_THREADS);
            cp_async_commit();
            for (int e = tid; e < C * 64; e += DR_THREADS) {
                const int r = e / 64, ii = e % 64, i = i0 + ii;
                const bool in = r < n && i < K;
                Xh[r * LT + ii] = in ? dW[r * K + i] : __float2bfloat16(0.f);
                Bh[r * LT + ii] = __float2bfloat16(in ? KK(r, i) * dr_exp(G[r * K + i]) : 0.f);
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
                if (kk >= mt)  // Wbar: A = T^T (k = m), B[k = m][n = i] = dW[m][i]
                    for (int p = 0; p < 2; p++) {
                        uint32_t bh[4];
                        dr_ldb_kn(bh, Xh, LT, kk * 16, c0 + p * 16, lane);
                        mma16816(wb[2 * p], th[kk], bh[0], bh[1]);
                        mma16816(wb[2 * p + 1], th[kk], bh[2], bh[3]);
                    }
            }
            // the thread's dK, dG entries into registers first: loads behind stores that may
            // alias them would each wait a full global round trip
            float ok[4][4], og[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), i = i0 + c0 + nt * 8 + 2 * t4 + (e & 1);
                    const bool in = r < n && i < K;
                    ok[nt][e] = in ? dK[r * K + i] : 0.f;
                    og[nt][e] = in ? dG[r * K + i] : 0.f;
                }
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), ii = c0 + nt * 8 + 2 * t4 + (e & 1), i = i0 + ii;
                    if (r < n && i < K) {
                        const float eg = dr_exp(G[r * K + i]), kb = __bfloat162float(Xs[r * LT + ii]) * eg,
                                    w = wb[nt][e];
                        part[e >> 1] += w * kb;
                        dK[r * K + i] = ok[nt][e] + bs[r] * w * eg;
                        dG[r * K + i] = og[nt][e] + bs[r] * w * kb;
                    }
                }
            __syncthreads();  // the tiles are refilled
        }
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) {
                const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), c = c0 + nt * 8 + 2 * t4 + (e & 1);
                dT[r * C + c] = (c < r && r < n) ? bs[c] * (dT[r * C + c] + dtk[nt][e]) : 0.f;
            }
        for (int j0 = 0; j0 < V; j0 += 64) {
            dr_load_tile(Xs, LT, v + ROWV(0) + j0, (size_t)H * V, C, 64, n, V - j0, tid, DR_THREADS);
            if (ws.dsplit) dr_load_split_tile<64, DR_THREADS>(Xh, Xl, LT, (const bf16 *)dD, V, j0, n, tid);
            cp_async_commit();
            if (!ws.dsplit)
                for (int e = tid; e < C * 64; e += DR_THREADS) {
                    const int r = e / 64, jj = e % 64;
                    dr_split(DRS_DDELTA, r < n && j0 + jj < V ? dD[r * V + j0 + jj] : 0.f, Xh + r * LT + jj, Xl + r * LT + jj);
                }
            cp_async_wait<0>();
            __syncthreads();
            float ub[4][4] = {};
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    if (kk < mt) continue;
                    uint32_t bh[4], bl[4];
                    dr_ldb_kn(bh, Xh, LT, kk * 16, c0 + p * 16, lane);
                    dr_ldb_kn(bl, Xl, LT, kk * 16, c0 + p * 16, lane);
                    dr_mma2(ub[2 * p], th[kk], bh, bl);
                    dr_mma2(ub[2 * p + 1], th[kk], bh + 2, bl + 2);
                }
            for (int nt = 0; nt < 4; nt++)
                for (int e = 0; e < 4; e++) {
                    const int r = mt * 16 + gq + (e >= 2 ? 8 : 0), jj = c0 + nt * 8 + 2 * t4 + (e & 1), j = j0 + jj;
                    if (r < n && j < V) {
                        dr_st(dv + ROWV(r) + j, bs[r] * ub[nt][e]);
                        part[e >> 1] += ub[nt][e] * __bfloat162float(Xs[r * LT + jj]);
                    }
                }
            __syncthreads();  // the tile is refilled
        }
        for (int u = 0; u < 2; u++) {
            part[u] += __shfl_xor_sync(0xffffffffu, part[u], 1);
            part[u] += __shfl_xor_sync(0xffffffffu, part[u], 2);
        }
        if (t4 == 0) {
            dbp[half * C + mt * 16 + gq] = part[0];
            dbp[half * C + mt * 16 + gq + 8] = part[1];
        }
        __syncthreads();
        if (tid < C) db[tid] += dbp[tid] + dbp[C + tid];
        __syncthreads();
    }
    dr_tri_inverse_grad(dT, Tm, tmp, n, (float *)tiles);  // dT becomes dL (chunk.cuh); the tiles are free
}

// the single kernel (the reference, HYBRID_DR_GRAD_REF=1): dr_grad_front, then B4 and B6
__global__ void __launch_bounds__(DR_THREADS)
    dr_grad_mma_kernel(DrWsMma ws, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dg, bf16 *dbeta, const bf16 *dout, const bf16 *q,
                   const bf16 *k, const bf16 *v, const bf16 *g, const bf16 *beta, int gate, float scale, int Tlen, int H, int K,
                   int V, const int *offsets, int N) {
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, C = DR_BT;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    const size_t sh = (size_t)x * H + h;
    DYNAMIC_SMEM(float, sm);
    const int lane = tid & 31, warp = tid >> 5;
    dr_grad_front(ws, dv, dout, q, k, v, g, beta, gate, scale, H, h, K, V, tok0, n, sh, sm);
    float *dQ = ws.dQ + sh * C * K, *dK = ws.dK + sh * C * K, *dG = ws.dG + sh * C * K;
    float *dA = sm, *dT = dA + 2 * C * C, *tmp = dT + C * C, *bs = tmp + C * C, *db = bs + C, *gend = db + C,
          *G = gend + K;
    bf16 *tiles = (bf16 *)(sm + ((4 * C * C + 2 * C + K + C * K + 7) & ~7));  // grad_tiles_off
    const float *dL = dT;

    // B4 on tensor cores (docs/delta-rule.md, "Stage B4: intra-chunk decay gradients"), by blocks
    // B of 16 rows / columns and K tiles of 64, with dAs, dLs the strictly lower parts of dA, dL
    // outside the diagonal blocks:
    //   rows t of block B, ref = Gamma_{16B}: Kr_c = k_c e^(ref - Gamma_c) (c < 16B),
    //     dqoff = e^(Gamma_t - ref) (dAs Kr)_t,  rho = e^(Gamma_t - ref) (dLs Kr)_t;
    //   columns t of block B, ref' = Gamma_{16B+15}: Qr_r = q_r e^(Gamma_r - ref'),
    //     Kbr_r = beta_r k_r e^(Gamma_r - ref') (r >= 16B + 16),  dgm = e^(ref' - Gamma_t) (dAs^T Qr + dLs^T Kbr)_t;
    // every exponent <= 0; the pairs inside a diagonal block, where a factor would grow by up
    // to 15 tokens of decay and overflow with a strong gate, come after, exactly (dr_b4_diag).
    //   dq += dqoff + dA_tt k_t;  dk += dA_tt q_t + dgm + beta_t rho;
    //   dGamma += q_t dqoff + beta_t k_t rho - k_t dgm;  dbeta_t += rho . k_t
    // Warp w: 16 columns 16 (w % 4).. of the K tile; w < 4 the row terms, w >= 4 the column terms.
    {
        const int pc = (warp & 3) * 16, task = warp >> 2, gq = lane >> 2, t4 = lane & 3, LT = 72;
        // every B4 operand one bf16 (docs/delta-rule.md, "Accuracy: the per-operand audit"): one MMA a k-step
        bf16 *Ah_ = tiles, *Lh = Ah_ + C * LT, *Krh = Lh + C * LT, *Qrh = Krh + C * LT, *Kbh = Qrh + C * LT;
        float *dbp = tmp;  // [4][64] dbeta partials of the row-term warps (tmp is free now)
        for (int e = tid; e < C * C; e += DR_THREADS) {
            const int r = e / C, c = e % C;
            Ah_[r * LT + c] = __float2bfloat16(c < r ? dA[e] : 0.f);
            Lh[r * LT + c] = __float2bfloat16(c < r ? dL[e] : 0.f);
        }
        float part[2] = {0.f, 0.f};
        for (int Bk = 0; Bk < 4; Bk++) {
            const int t0 = 16 * Bk;
            for (int i0 = 0; i0 < K; i0 += 64) {
                for (int e = tid; e < C * 64; e += DR_THREADS) {
                    const int r = e / 64, ii = e % 64, i = i0 + ii;
                    const bool in = r < n && i < K;
                    const float kr = in ? KK(r, i) : 0.f;
                    float a = 0.f, b = 0.f, c = 0.f;
                    if (in && r < t0) a = kr * dr_exp(G[t0 * K + i] - G[r * K + i]);
                    if (in && r >= t0 + 16) {
                        const float ex = dr_exp(G[r * K + i] - G[(t0 + 15) * K + i]);
                        b = Q(r, i) * ex;
                        c = bs[r] * kr * ex;
                    }
                    Krh[r * LT + ii] = __float2bfloat16(a);
                    Qrh[r * LT + ii] = __float2bfloat16(b);
                    Kbh[r * LT + ii] = __float2bfloat16(c);
                }
                __syncthreads();
                float x0[2][4] = {}, x1[2][4] = {};
                if (task == 0) {
                    for (int kk = 0; kk < Bk; kk++) {
                        uint32_t ah[4], lh[4], bh[4];
                        dr_b4_frag_a<false>(ah, lh, Ah_, Lh, LT, t0, kk, lane);
                        dr_ldb_kn(bh, Krh, LT, kk * 16, pc, lane);
                        for (int u = 0; u < 2; u++) {
                            mma16816(x0[u], ah, bh[2 * u], bh[2 * u + 1]);
                            mma16816(x1[u], lh, bh[2 * u], bh[2 * u + 1]);
                        }
                    }
                } else {
                    for (int kk = Bk + 1; kk < 4; kk++) {
                        uint32_t ah[4], lh[4], bh[4];
                        dr_b4_frag_a<true>(ah, lh, Ah_, Lh, LT, t0, kk, lane);
                        dr_ldb_kn(bh, Qrh, LT, kk * 16, pc, lane);
                        for (int u = 0; u < 2; u++) mma16816(x0[u], ah, bh[2 * u], bh[2 * u + 1]);
                        dr_ldb_kn(bh, Kbh, LT, kk * 16, pc, lane);
                        for (int u = 0; u < 2; u++) mma16816(x0[u], lh, bh[2 * u], bh[2 * u + 1]);
                    }
                }
                if (task == 0)
                    for (int u = 0; u < 2; u++)
                        for (int e = 0; e < 4; e++) {
                            const int t = t0 + gq + (e >= 2 ? 8 : 0), i = i0 + pc + u * 8 + 2 * t4 + (e & 1);
                            if (t < n && i < K) {
                                const float ex = dr_exp(G[t * K + i] - G[t0 * K + i]), dqoff = ex * x0[u][e],
                                            rho = ex * x1[u][e], qt = Q(t, i), kt = KK(t, i), att = dA[t * C + t],
                                            bt = bs[t];
                                dQ[t * K + i] += dqoff + att * kt;
                                dK[t * K + i] += att * qt + bt * rho;
                                dG[t * K + i] += qt * dqoff + bt * kt * rho;
                                part[e >> 1] += rho * kt;
                            }
                        }
                __syncthreads();  // the row terms are in (each element gets both terms)
                if (task == 1)
                    for (int u = 0; u < 2; u++)
                        for (int e = 0; e < 4; e++) {
                            const int t = t0 + gq + (e >= 2 ? 8 : 0), i = i0 + pc + u * 8 + 2 * t4 + (e & 1);
                            if (t < n && i < K) {
                                const float dgm = dr_exp(G[(t0 + 15) * K + i] - G[t * K + i]) * x0[u][e];
                                dK[t * K + i] += dgm;
                                dG[t * K + i] -= KK(t, i) * dgm;
                            }
                        }
                __syncthreads();  // the tiles are refilled
            }
            // this block's dbeta rows (the row-term warps), then the partials restart
            for (int u = 0; u < 2; u++) {
                part[u] += __shfl_xor_sync(0xffffffffu, part[u], 1);
                part[u] += __shfl_xor_sync(0xffffffffu, part[u], 2);
            }
            if (task == 0 && t4 == 0) {
                dbp[(warp & 3) * C + t0 + gq] = part[0];
                dbp[(warp & 3) * C + t0 + gq + 8] = part[1];
            }
            part[0] = part[1] = 0.f;
        }
        __syncthreads();
        if (tid < C) db[tid] += dbp[tid] + dbp[C + tid] + dbp[2 * C + tid] + dbp[3 * C + tid];
    }
    __syncthreads();
    // tmp's [4][64] dbp are spent, and the tiles (dr_b4_diag's dA, dL blocks there)
    dr_b4_diag(dA, dL, G, bs, q + ROWQK(0), k + ROWQK(0), (size_t)H * K, dQ, dK, dG, db, tmp + 4 * C, (float *)tiles, n,
               K);

    // B6 and the stores (chunk.cuh)
    dr_grad_finish(dq, dk, dg, dbeta, dQ, dK, dG, db, gend, gate, n, tok0, H, h, K);
}

// Launches the single kernel over the slots x H (chunk slot, head) blocks.
void dr_grad_ref_launch(const DrWsMma *ws, size_t slots, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dg, bf16 *dbeta,
                        const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *g,
                        const bf16 *beta, int gate, float scale, int T, int H, int K, int V, const int *offsets,
                        int N) {
    dr_audit_upload();
    launch_kernel(dr_grad_mma_kernel, dim3((unsigned)slots, H), dim3(DR_THREADS), grad_mma_smem(K), *ws, dq, dk, dv,
                  dg, dbeta, dout, q, k, v, g, beta, gate, scale, T, H, K, V, offsets, N);
}
