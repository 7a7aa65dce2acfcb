// Chunkwise backward of KDA / GDN / DeltaNet on CUDA (docs/delta-rule.md, "Chunkwise
// backward"): recompute the chunk states h[n] and Delta with the forward's prep and walk
// (docs/delta-rule.md, "Recomputation in the backward"), walk each sequence's chunks in reverse
// for the state gradient (docs/delta-rule.md, "Stage B2: reverse state-gradient recurrence"),
// then one chunk-parallel kernel for the per-chunk stages B1, B3, the gradient of the
// triangular inverse, B4 and B6. Mirrors the CPU chunk backward stage by stage, in fp32.
// The decomposition, the chunk slots and the workspace layout: kernels/delta_rule/chunk.cuh.
#include "kernels/delta_rule/chunk.cuh"

// ---- bwalk: one block per (sequence, head, V-tile), the chunks in reverse ---------------
// dHs [K][DR_BV] holds dH' = dL/dh[n+1] on entering chunk n (saved to ws.dh), then
//   dDelta = Aqk^T dO + Ke dH'                               (B1 local part + B2; saved to ws.dD)
//   dh[n]  = diag(e^Gamma_end) dH' + scale Qg^T dO - W^T dDelta          (B2)
// Shared memory: dHs [K][DR_BV], dDs [64][DR_BV], e^Gamma_end [K].
static size_t bwalk_smem(int K) { return ((size_t)K * DR_BV + DR_BT * DR_BV + K) * sizeof(float); }

__global__ void __launch_bounds__(DR_THREADS)
    dr_bwalk_kernel(DrWs ws, float *dh0, const float *dhT, const bf16 *dout, float scale, int Tlen, int H, int K,
                    int V, const int *offsets) {
    const int s = blockIdx.x, h = blockIdx.y, j0 = blockIdx.z * DR_BV, tid = threadIdx.x, C = DR_BT;
    const int bv = V - j0 < DR_BV ? V - j0 : DR_BV;
    DYNAMIC_SMEM(float, sm);
    float *dHs = sm, *dDs = dHs + K * DR_BV, *ee = dDs + C * DR_BV;
    int bos, len;
    dr_seq_range(offsets, Tlen, s, &bos, &len);
    const int base = dr_seq_base(bos, s), nch = (len + C - 1) / C;
    const size_t task = (size_t)s * H + h;

    for (int e = tid; e < K * DR_BV; e += DR_THREADS) {
        const int i = e / DR_BV, jj = e % DR_BV;
        dHs[e] = (jj < bv && dhT) ? dhT[(task * K + i) * V + j0 + jj] : 0.f;
    }
    __syncthreads();
    for (int ci = nch - 1; ci >= 0; ci--) {
        const int n = dr_chunk_rows(len, ci), tok0 = bos + ci * C;
        const size_t sh = (size_t)(base + ci) * H + h;
        float *dhg = ws.dh + sh * K * V, *dD = ws.dD + sh * C * V;
        const float *W = ws.W + sh * C * K, *Ke = ws.Ke + sh * C * K, *Qg = ws.Qg + sh * C * K,
                    *G = ws.G + sh * C * K, *Aqk = ws.Aqk + sh * C * C;
#define DO(r, j) dr_ld(dout + ((size_t)(tok0 + (r)) * H + h) * V + (j))
        for (int e = tid; e < K * bv; e += DR_THREADS) {
            const int i = e / bv, jj = e % bv;
            dhg[(size_t)i * V + j0 + jj] = dHs[i * DR_BV + jj];
        }
        for (int e = tid; e < n * bv; e += DR_THREADS) {
            const int r = e / bv, jj = e % bv;
            float acc = 0.f;
            for (int c = r; c < n; c++) acc += Aqk[c * C + r] * DO(c, j0 + jj);
            for (int i = 0; i < K; i++) acc += Ke[r * K + i] * dHs[i * DR_BV + jj];
            dDs[r * DR_BV + jj] = acc;
            dD[r * V + j0 + jj] = acc;
        }
        for (int i = tid; i < K; i += DR_THREADS) ee[i] = expf(G[(n - 1) * K + i]);
        __syncthreads();
        for (int e = tid; e < K * bv; e += DR_THREADS) {
            const int i = e / bv, jj = e % bv;
            float acc = 0.f;
            for (int r = 0; r < n; r++) acc += Qg[r * K + i] * DO(r, j0 + jj);
            acc *= scale;
            for (int r = 0; r < n; r++) acc -= W[r * K + i] * dDs[r * DR_BV + jj];
            dHs[i * DR_BV + jj] = ee[i] * dHs[i * DR_BV + jj] + acc;
        }
        __syncthreads();
#undef DO
    }
    if (dh0)
        for (int e = tid; e < K * bv; e += DR_THREADS) {
            const int i = e / bv, jj = e % bv;
            dh0[(task * K + i) * V + j0 + jj] = dHs[i * DR_BV + jj];
        }
}

// ---- grad: one block per (chunk slot, head) ---------------------------------------------
// Inputs from the workspace: G, Tm, D, h (= h[n]), dh (= dH'), dD; fp32 accumulators dQ, dK,
// dG, dW of this chunk in the workspace (each element owned by one thread per phase).
// Shared memory: dA, Tm, dT (then dL), tmp [64][64]; beta, dbeta [64]; dGamma_end extras [K].
static size_t grad_smem(int K) { return (4 * DR_BT * DR_BT + 2 * DR_BT + (size_t)K) * sizeof(float); }

__global__ void __launch_bounds__(DR_THREADS)
    dr_grad_kernel(DrWs ws, bf16 *dq, bf16 *dk, bf16 *dv, bf16 *dg, bf16 *dbeta, const bf16 *dout, const bf16 *q,
                   const bf16 *k, const bf16 *v, const bf16 *beta, int gate, float scale, int Tlen, int H, int K,
                   int V, const int *offsets, int N) {
    const int x = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, C = DR_BT;
    const int lane = tid & 31, warp = tid >> 5, NW = DR_THREADS / 32;
    int s = 0, tok0 = 0, n = 0;
    if (!dr_locate_chunk(offsets, Tlen, N, x, &s, &tok0, &n)) return;
    const size_t sh = (size_t)x * H + h;
    const float *G = ws.G + sh * C * K, *Tg = ws.Tm + sh * C * C, *D = ws.D + sh * C * V, *Hn = ws.h + sh * K * V,
                *dHn = ws.dh + sh * K * V, *dD = ws.dD + sh * C * V;
    float *dQ = ws.dQ + sh * C * K, *dK = ws.dK + sh * C * K, *dG = ws.dG + sh * C * K, *dW = ws.dW + sh * C * K;
    DYNAMIC_SMEM(float, sm);
    float *dA = sm, *Tm = dA + C * C, *dT = Tm + C * C, *tmp = dT + C * C, *bs = tmp + C * C, *db = bs + C,
          *gend = db + C;
#define ROWQK(r) (((size_t)(tok0 + (r)) * H + h) * K)
#define ROWV(r) (((size_t)(tok0 + (r)) * H + h) * V)
#define Q(r, i) dr_ld(q + ROWQK(r) + (i))
#define KK(r, i) dr_ld(k + ROWQK(r) + (i))
#define VV(r, j) dr_ld(v + ROWV(r) + (j))
#define DO(r, j) dr_ld(dout + ROWV(r) + (j))
    const float *Gend = G + (size_t)(n - 1) * K;

    for (int e = tid; e < C * C; e += DR_THREADS) Tm[e] = Tg[e];
    for (int r = tid; r < C; r += DR_THREADS) {
        bs[r] = r < n ? dr_ld(beta + (size_t)(tok0 + r) * H + h) : 0.f;
        db[r] = 0.f;
    }
    // B1 (docs/delta-rule.md, "Stage B1: output-side gradients"): dA = scale dO Delta^T, c <= r
    for (int e = tid; e < C * C; e += DR_THREADS) {
        const int r = e / C, c = e % C;
        float acc = 0.f;
        if (c <= r && r < n)
            for (int j = 0; j < V; j++) acc += DO(r, j) * D[c * V + j];
        dA[e] = scale * acc;
    }
    // B3 inter-chunk terms (docs/delta-rule.md, "Stage B3: inter-chunk and WY gradients"), per
    // (r, i): dq = scale e^Gamma (h[n] dO_r)_i, dk = e^(Gamma_end-Gamma) (Delta dH'^T)_{r,i},
    // dGamma = q dq - k dk; dW = -dDelta h[n]^T
    for (int e = tid; e < n * K; e += DR_THREADS) {
        const int r = e / K, i = e % K;
        float hd = 0.f, dke = 0.f, dw = 0.f;
        for (int j = 0; j < V; j++) {
            const float hij = Hn[(size_t)i * V + j];
            hd += hij * DO(r, j);
            dke += D[r * V + j] * dHn[(size_t)i * V + j];
            dw += dD[r * V + j] * hij;
        }
        const float gr = G[r * K + i], dqv = scale * expf(gr) * hd, dkv = dke * expf(Gend[i] - gr);
        dQ[r * K + i] = dqv;
        dK[r * K + i] = dkv;
        dG[r * K + i] = dr_dg_term(Q(r, i), dqv, KK(r, i), dkv);
        dW[r * K + i] = -dw;
    }
    __syncthreads();

    // dGamma_end extras: e^Gamma_end <h[n]_i, dH'_i> + sum_r k_r[i] dk_r[i] (the B3 dk)
    for (int i = tid; i < K; i += DR_THREADS) {
        float acc = 0.f;
        for (int j = 0; j < V; j++) acc += Hn[(size_t)i * V + j] * dHn[(size_t)i * V + j];
        acc *= expf(Gend[i]);
        for (int r = 0; r < n; r++) acc += KK(r, i) * dK[r * K + i];
        gend[i] = acc;
    }
    // dT = P_sl(dU (diag(beta) V)^T + dW (diag(beta) Kb)^T), dU = dDelta (docs/delta-rule.md,
    // "Gradient of the triangular inverse")
    for (int e = tid; e < C * C; e += DR_THREADS) {
        const int r = e / C, c = e % C;
        float acc = 0.f;
        if (c < r && r < n) {
            for (int j = 0; j < V; j++) acc += dD[r * V + j] * VV(c, j);
            for (int i = 0; i < K; i++) acc += dW[r * K + i] * KK(c, i) * expf(G[c * K + i]);
            acc *= bs[c];
        }
        dT[e] = acc;
    }
    __syncthreads();

    // Ubar = T^T dU, Wbar = T^T dW (a warp per row r): dv_r = beta_r Ubar_r,
    // dbeta_r = Ubar_r.v_r + Wbar_r.Kb_r, dk_r += beta_r Wbar_r e^Gamma_r, dGamma_r += beta_r Wbar_r Kb_r
    for (int r = warp; r < n; r += NW) {
        float part = 0.f;
        for (int j = lane; j < V; j += 32) {
            float ub = 0.f;
            for (int m = r; m < n; m++) ub += Tm[m * C + r] * dD[m * V + j];
            dr_st(dv + ROWV(r) + j, bs[r] * ub);
            part += ub * VV(r, j);
        }
        for (int i = lane; i < K; i += 32) {
            float wb = 0.f;
            for (int m = r; m < n; m++) wb += Tm[m * C + r] * dW[m * K + i];
            const float eg = expf(G[r * K + i]), kb = KK(r, i) * eg;
            part += wb * kb;
            dK[r * K + i] += bs[r] * wb * eg;
            dG[r * K + i] += bs[r] * wb * kb;
        }
        part = warp_sum(part);
        if (lane == 0) db[r] += part;
    }
    dr_tri_inverse_grad(dT, Tm, tmp, n);  // dT becomes dL (chunk.cuh)
    const float *dL = dT;

    // B4 (docs/delta-rule.md, "Stage B4: intra-chunk decay gradients"), gathered per (t, i) so
    // each element has one owner: with E(r,c) = e^(Gamma_r - Gamma_c), c <= r,
    //   as the row r = t : dq += sum_{c<=t} dA k_c E ; rho = sum_{c<t} dL k_c E ;
    //                      dGamma += q_t sum_{c<t} dA k_c E + beta_t k_t rho ; dk += beta_t rho
    //   as the column c = t: col_r = (dA[r][t] q_r + dL[r][t] beta_r k_r) E(r,t) ;
    //                      dk += sum_{r>=t} col_r ; dGamma -= k_t sum_{r>t} col_r
    //   dbeta_t += rho . k_t
    for (int t = warp; t < n; t += NW) {
        float part = 0.f;
        const float bt = bs[t];
        for (int i = lane; i < K; i += 32) {
            const float gt = G[t * K + i], qt = Q(t, i), kt = KK(t, i);
            float dqoff = 0.f, rho = 0.f;
            for (int c = 0; c < t; c++) {
                const float kce = KK(c, i) * expf(gt - G[c * K + i]);
                dqoff += dA[t * C + c] * kce;
                rho += dL[t * C + c] * kce;
            }
            float dka = dA[t * C + t] * qt, dgm = 0.f;
            for (int r = t + 1; r < n; r++) {
                const float col = (dA[r * C + t] * Q(r, i) + dL[r * C + t] * bs[r] * KK(r, i)) * expf(G[r * K + i] - gt);
                dgm += col;
            }
            dka += dgm;
            dQ[t * K + i] += dqoff + dA[t * C + t] * kt;
            dK[t * K + i] += dka + bt * rho;
            dG[t * K + i] += qt * dqoff + bt * kt * rho - kt * dgm;
            part += rho * kt;
        }
        part = warp_sum(part);
        if (lane == 0) db[t] += part;
    }
    __syncthreads();

    // B6 and the stores (chunk.cuh)
    dr_grad_finish(dq, dk, dg, dbeta, dQ, dK, dG, db, gend, gate, n, tok0, H, h, K);
#undef ROWQK
#undef ROWV
#undef Q
#undef KK
#undef VV
#undef DO
}

// the SIMT fp32 backward on bf16 I/O (test entry; the fallback)
extern "C" void cuda_delta_chunk_backward_simt(LinearKind kind, real *dq, real *dk, real *dv, real *dg, real *dbeta,
                                               real *dh0, const real *dout, const real *dhT, const real *q,
                                               const real *k, const real *v, const real *g, const real *beta,
                                               const real *h0, real scale, int B, int T, int H, int K, int V,
                                               const int *offsets, int nseq, int chunk, void *workspace) {
    PROFILE("delta_chunk_bwd_simt");
    dr_check_args("delta_chunk_backward", kind, B, T, H, K, V, offsets, nseq, chunk);
    const int N = offsets ? nseq : B, gate = dr_gate_of(kind);
    if (N == 0) return;
    const size_t slots = dr_num_slots(B, T, N);
    DrWs ws;
    dr_ws_bind(&ws, workspace, 1, slots * H, K, V);
    dr_forward_states(gate, NULL, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)g,
                      (const bf16 *)beta, (const float *)h0, scale, B, T, H, K, V, offsets, N, &ws);
    launch_kernel(dr_bwalk_kernel, dim3(N, H, (V + DR_BV - 1) / DR_BV), dim3(DR_THREADS), bwalk_smem(K), ws,
                  (float *)dh0, (const float *)dhT, (const bf16 *)dout, scale, T, H, K, V, offsets);
    if (slots > 0)
        launch_kernel(dr_grad_kernel, dim3((unsigned)slots, H), dim3(DR_THREADS), grad_smem(K), ws, (bf16 *)dq,
                      (bf16 *)dk, (bf16 *)dv, (bf16 *)dg, (bf16 *)dbeta, (const bf16 *)dout, (const bf16 *)q,
                      (const bf16 *)k, (const bf16 *)v, (const bf16 *)beta, gate, scale, T, H, K, V, offsets, N);
}

