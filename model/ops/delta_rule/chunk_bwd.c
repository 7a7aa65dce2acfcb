// Chunkwise backward of KDA / GDN / DeltaNet (docs/delta-rule.md, "Chunkwise backward").
// Per (sequence, head): recompute the chunk states h[n] (docs/delta-rule.md,
// "Recomputation in the backward"), then walk the chunks in reverse with dH = dL/dH_{n+1}
// (docs/delta-rule.md, "State-gradient indexing") and apply to each chunk the stages of
// docs/delta-rule.md, "Stage B1: output-side gradients", "Stage B2: reverse state-gradient
// recurrence", "Stage B3: inter-chunk and WY gradients", "Gradient of the triangular
// inverse", "Stage B4: intra-chunk decay gradients" and "Stage B6: reverse in-chunk cumsum
// of the gate gradient".
#include <string.h>

#include "model/ops/delta_rule/internal.h"
#include "base/util.h"

// gradient scratch for one chunk
typedef struct {
    double *dA;   // [C][C] gradient of the UNSCALED Aqk (c <= r)
    double *dT;   // [C][C] gradient of T, strictly lower part
    double *tmp;  // [C][C] P_sl(dT) T^T
    double *dL;   // [C][C] gradient of L (c < r)
    double *dD;   // [C][V] complete gradient of Delta
    double *Ub;   // [C][V] T^T dU
    double *dW;   // [C][K]
    double *Wb;   // [C][K] T^T dW
    double *dQ, *dK, *dG;  // [C][K] accumulating dq, dk, dGamma
    double *dB;   // [C]
    double *gend; // [K]  dGamma_end extras (land on the last row)
    double *rho;  // [K]
} DrGrad;

static size_t grad_doubles(int C, int K, int V) {
    const size_t c = (size_t)C, k = (size_t)K, v = (size_t)V;
    return 4 * c * c + 2 * c * v + 5 * c * k + c + 2 * k;
}

static void grad_bind(DrGrad *gr, double *mem, int C, int K, int V) {
    const size_t c = (size_t)C, k = (size_t)K, v = (size_t)V;
    gr->dA = mem;
    gr->dT = gr->dA + c * c;
    gr->tmp = gr->dT + c * c;
    gr->dL = gr->tmp + c * c;
    gr->dD = gr->dL + c * c;
    gr->Ub = gr->dD + c * v;
    gr->dW = gr->Ub + c * v;
    gr->Wb = gr->dW + c * k;
    gr->dQ = gr->Wb + c * k;
    gr->dK = gr->dQ + c * k;
    gr->dG = gr->dK + c * k;
    gr->dB = gr->dG + c * k;
    gr->gend = gr->dB + c;
    gr->rho = gr->gend + k;
}

// One chunk of n rows from token tok0, head h. cl holds the prepared locals with Delta
// computed from Hn = h[n]; dH holds dL/dH_{n+1} on entry and dL/dH_n on return.
static void chunk_backward(const DrChunk *cl, DrGrad *gr, const DeltaIn *in, size_t tok0, int h, int n,
                           const double *Hn, double *dH, const real *dout, real *dq, real *dk, real *dv,
                           real *dg, real *dbeta) {
    const int C = cl->C, K = cl->K, V = cl->V, HH = in->H;
    const double scale = in->scale;
    const double *G = cl->G, *Gend = cl->G + (size_t)(n - 1) * K, *Tm = cl->Tm, *D = cl->D;
#define DO(r) (dout + ((tok0 + (size_t)(r)) * HH + h) * (size_t)V)
#define QR(r) dr_qk_row(in->q, in, tok0 + (size_t)(r), h)
#define KR(r) dr_qk_row(in->k, in, tok0 + (size_t)(r), h)
#define VR(r) dr_v_row(in->v, in, tok0 + (size_t)(r), h)
#define BETA(r) ((double)in->beta[(tok0 + (size_t)(r)) * HH + h])

    // ---- B1 (docs/delta-rule.md, "Stage B1: output-side gradients"):
    //      dA = s (dO Delta^T) on c <= r;  dDelta_loc = Aqk^T dO ----
    for (int r = 0; r < n; r++)
        for (int c = 0; c <= r; c++) {
            double acc = 0;
            for (int j = 0; j < V; j++) acc += (double)DO(r)[j] * D[c * V + j];
            gr->dA[r * C + c] = scale * acc;
        }
    for (int c = 0; c < n; c++) {
        double *dDc = gr->dD + (size_t)c * V;
        for (int j = 0; j < V; j++) dDc[j] = 0;
        for (int r = c; r < n; r++) {
            const double a = cl->Aqk[r * C + c];
            for (int j = 0; j < V; j++) dDc[j] += a * (double)DO(r)[j];
        }
    }
    // ---- B2 (docs/delta-rule.md, "Stage B2: reverse state-gradient recurrence"):
    //      complete dDelta = dDelta_loc + K_e dH' ----
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++) {
            const double ke = cl->Ke[r * K + i];
            for (int j = 0; j < V; j++) gr->dD[r * V + j] += ke * dH[i * V + j];
        }

    // ---- B3 inter-chunk terms (docs/delta-rule.md, "Stage B3: inter-chunk and WY gradients") ----
    for (int i = 0; i < K; i++) {  // dGamma_end: exp(Gamma_end) <H_n, dH'> per row i
        double acc = 0;
        for (int j = 0; j < V; j++) acc += Hn[i * V + j] * dH[i * V + j];
        gr->gend[i] = cl->eend[i] * acc;
    }
    for (int r = 0; r < n; r++) {
        const real *q = QR(r), *k = KR(r), *dO = DO(r);
        for (int i = 0; i < K; i++) {
            double hd = 0, dke = 0;
            for (int j = 0; j < V; j++) {
                hd += Hn[i * V + j] * (double)dO[j];    // (H_n dO_r)[i]
                dke += D[r * V + j] * dH[i * V + j];    // (Delta dH'^T)[r][i] = dK_e
            }
            const double dqi = scale * exp(G[r * K + i]) * hd;
            dke *= exp(Gend[i] - G[r * K + i]);  // dk^e_r
            gr->dQ[r * K + i] = dqi;
            gr->dK[r * K + i] = dke;
            gr->dG[r * K + i] = (double)q[i] * dqi - (double)k[i] * dke;
            gr->gend[i] += (double)k[i] * dke;
        }
    }

    // ---- B3 WY terms (same heading): dU = dDelta, dW = -dDelta H_n^T ----
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++) {
            double acc = 0;
            for (int j = 0; j < V; j++) acc += gr->dD[r * V + j] * Hn[i * V + j];
            gr->dW[r * K + i] = -acc;
        }
    // dT = dU (diag(beta) V)^T + dW (diag(beta) Kb)^T, only its strictly-lower part
    // (docs/delta-rule.md, "Gradient of the triangular inverse")
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
            if (c >= r) {
                gr->dT[r * C + c] = 0;
                continue;
            }
            const real *vc = VR(c);
            double acc = 0;
            for (int j = 0; j < V; j++) acc += gr->dD[r * V + j] * (double)vc[j];
            for (int i = 0; i < K; i++) acc += gr->dW[r * K + i] * cl->Kb[c * K + i];
            gr->dT[r * C + c] = BETA(c) * acc;
        }
    // Ubar = T^T dU, Wbar = T^T dW (T[m][r] != 0 only for m >= r)
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < V; j++) gr->Ub[r * V + j] = 0;
        for (int i = 0; i < K; i++) gr->Wb[r * K + i] = 0;
        for (int m = r; m < n; m++) {
            const double t = Tm[m * C + r];
            for (int j = 0; j < V; j++) gr->Ub[r * V + j] += t * gr->dD[m * V + j];
            for (int i = 0; i < K; i++) gr->Wb[r * K + i] += t * gr->dW[m * K + i];
        }
    }
    // dv_r = beta_r Ubar_r ; dbeta_r = Ubar_r.v_r + Wbar_r.Kb_r ;
    // dk_r += beta_r Wbar_r ⊙ exp(Gamma_r) ; dGamma_r += beta_r Wbar_r ⊙ Kb_r
    for (int r = 0; r < n; r++) {
        const real *v = VR(r);
        const double b = BETA(r);
        real *dvr = dv + ((tok0 + (size_t)r) * HH + h) * (size_t)V;
        double db = 0;
        for (int j = 0; j < V; j++) {
            dvr[j] = (real)(b * gr->Ub[r * V + j]);
            db += gr->Ub[r * V + j] * (double)v[j];
        }
        for (int i = 0; i < K; i++) {
            const double wb = gr->Wb[r * K + i];
            db += wb * cl->Kb[r * K + i];
            gr->dK[r * K + i] += b * wb * exp(G[r * K + i]);
            gr->dG[r * K + i] += b * wb * cl->Kb[r * K + i];
        }
        gr->dB[r] = db;
    }

    // ---- gradient of the triangular inverse: dL = -P_sl( T^T P_sl(dT) T^T ) ----
    // tmp = P_sl(dT) T^T : tmp[m][c] = sum_{p < m, p <= c} dT[m][p] T[c][p]
    for (int m = 0; m < n; m++)
        for (int c = 0; c < n; c++) {
            double acc = 0;
            const int pmax = c < m - 1 ? c : m - 1;
            for (int p = 0; p <= pmax; p++) acc += gr->dT[m * C + p] * Tm[c * C + p];
            gr->tmp[m * C + c] = acc;
        }
    // dL[r][c] = -sum_{m >= r} T[m][r] tmp[m][c], c < r
    for (int r = 0; r < n; r++)
        for (int c = 0; c < n; c++) {
            if (c >= r) {
                gr->dL[r * C + c] = 0;
                continue;
            }
            double acc = 0;
            for (int m = r; m < n; m++) acc += Tm[m * C + r] * gr->tmp[m * C + c];
            gr->dL[r * C + c] = -acc;
        }

    // ---- B4 (docs/delta-rule.md, "Stage B4: intra-chunk decay gradients"): intra-chunk
    //      pairwise-decay terms of Aqk and L, E = exp(Gamma_r - Gamma_c) ----
    // For the pair (r, c <= r) with a = dA[r][c], l = dL[r][c] (0 on the diagonal):
    //   dq_r += a k_c⊙E ;  dk_c += (a q_r + l beta_r k_r)⊙E ;  rho_r += l k_c⊙E
    //   x = (a q_r + l beta_r k_r)⊙k_c⊙E :  dGamma_r += x, dGamma_c -= x   (c < r only: the
    //   diagonal's contributions cancel exactly, so they are skipped; same heading)
    // then dk_r += beta_r rho_r, dbeta_r += rho_r.k_r.
    for (int r = 0; r < n; r++) {
        const real *qr = QR(r), *kr = KR(r);
        const double br = BETA(r);
        for (int i = 0; i < K; i++) gr->rho[i] = 0;
        for (int c = 0; c <= r; c++) {
            const real *kc = KR(c);
            const double a = gr->dA[r * C + c], l = c < r ? gr->dL[r * C + c] : 0.0;
            for (int i = 0; i < K; i++) {
                const double e = exp(G[r * K + i] - G[c * K + i]);
                const double col = (a * (double)qr[i] + l * br * (double)kr[i]) * e;
                gr->dQ[r * K + i] += a * (double)kc[i] * e;
                gr->dK[c * K + i] += col;
                gr->rho[i] += l * (double)kc[i] * e;
                if (c < r) {
                    const double x = col * (double)kc[i];
                    gr->dG[r * K + i] += x;
                    gr->dG[c * K + i] -= x;
                }
            }
        }
        double db = 0;
        for (int i = 0; i < K; i++) {
            gr->dK[r * K + i] += br * gr->rho[i];
            db += gr->rho[i] * (double)kr[i];
        }
        gr->dB[r] += db;
    }

    // ---- B2 (docs/delta-rule.md, "Stage B2: reverse state-gradient recurrence"):
    //      dH_n = diag(e_end) dH' + s Q_g^T dO - W^T dDelta ----
    for (int i = 0; i < K; i++) {
        double *dHi = dH + (size_t)i * V;
        for (int j = 0; j < V; j++) dHi[j] *= cl->eend[i];
        for (int r = 0; r < n; r++) {
            const double qg = scale * cl->Qg[r * K + i], w = cl->W[r * K + i];
            const real *dO = DO(r);
            for (int j = 0; j < V; j++) dHi[j] += qg * (double)dO[j] - w * gr->dD[r * V + j];
        }
    }

    // ---- B6 (docs/delta-rule.md, "Stage B6: reverse in-chunk cumsum of the gate gradient"):
    //      dGamma_end extras on the last row, then dg = reverse in-chunk cumsum ----
    for (int i = 0; i < K; i++) gr->dG[(size_t)(n - 1) * K + i] += gr->gend[i];
    for (int i = 0; i < K; i++) {
        double acc = 0;
        for (int r = n - 1; r >= 0; r--) {
            acc += gr->dG[r * K + i];
            gr->dG[r * K + i] = acc;
        }
    }
    for (int r = 0; r < n; r++) {
        const size_t tok = tok0 + (size_t)r, row = tok * HH + h;
        for (int i = 0; i < K; i++) {
            dq[row * K + i] = (real)gr->dQ[r * K + i];
            dk[row * K + i] = (real)gr->dK[r * K + i];
        }
        dbeta[row] = (real)gr->dB[r];
        dr_store_dg(dg, in, tok, h, gr->dG + (size_t)r * K);
    }
#undef DO
#undef QR
#undef KR
#undef VR
#undef BETA
}

// per task: dH (K×V), chunk locals, gradient scratch
static size_t bwd_local(int C, int K, int V) {
    return (size_t)K * V + dr_chunk_doubles(C, K, V) + grad_doubles(C, K, V);
}

size_t delta_chunk_bwd_workspace_size(const LinearDims *d, int chunk) {
    if (chunk < 1) die("delta-rule chunk backward: chunk size must be >= 1 (got %d)", chunk);
    const size_t tasks = (size_t)linear_num_seqs(d) * d->H;
    return (tasks * bwd_local(chunk, d->K, d->V) + dr_state_slots_total(d, chunk) * d->K * d->V) *
           sizeof(double);
}

void dr_chunk_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                       const real *dhT, const DeltaIn *in, const real *h0, const LinearDims *d, int C,
                       void *workspace) {
    lin_check_dims(d, "chunk backward");
    if (C < 1) die("chunk backward: chunk size must be >= 1 (got %d)", C);
    const int N = linear_num_seqs(d), H = d->H, K = d->K, V = d->V;
    const size_t KV = (size_t)K * V, local = bwd_local(C, K, V);
    double *slots = (double *)workspace + (size_t)N * H * local;
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < N * H; task++) {
        const int s = task / H, h = task % H;
        size_t bos;
        int len;
        lin_seq(d, s, &bos, &len);
        const int nchunks = (len + C - 1) / C;
        double *dH = (double *)workspace + (size_t)task * local;
        DrChunk cl;
        DrGrad gr;
        dr_chunk_bind(&cl, dH + KV, C, K, V);
        grad_bind(&gr, dH + KV + dr_chunk_doubles(C, K, V), C, K, V);
        double *hs = slots + dr_state_slot(bos, s, h, H, nchunks, C) * KV;  // h[n] at hs + n*KV

        // recompute h[n], the state entering chunk n, with the forward's Delta and state
        // update (docs/delta-rule.md, "Recomputation in the backward")
        if (nchunks > 0) {
            if (h0)
                for (size_t x = 0; x < KV; x++) hs[x] = (double)h0[(size_t)task * KV + x];
            else
                memset(hs, 0, KV * sizeof(double));
        }
        for (int n = 0; n + 1 < nchunks; n++) {
            const int cs = n * C, rows = len - cs < C ? len - cs : C;
            dr_chunk_prepare(&cl, in, bos + (size_t)cs, h, rows);
            dr_chunk_delta(&cl, rows, hs + (size_t)n * KV);
            memcpy(hs + (size_t)(n + 1) * KV, hs + (size_t)n * KV, KV * sizeof(double));
            dr_chunk_advance_state(&cl, rows, hs + (size_t)(n + 1) * KV);
        }

        // reverse sweep; dH = dL/dH_{n+1}, starting from the final state's gradient
        if (dhT)
            for (size_t x = 0; x < KV; x++) dH[x] = (double)dhT[(size_t)task * KV + x];
        else
            memset(dH, 0, KV * sizeof(double));
        for (int n = nchunks - 1; n >= 0; n--) {
            const int cs = n * C, rows = len - cs < C ? len - cs : C;
            const size_t tok0 = bos + (size_t)cs;
            dr_chunk_prepare(&cl, in, tok0, h, rows);
            dr_chunk_delta(&cl, rows, hs + (size_t)n * KV);
            chunk_backward(&cl, &gr, in, tok0, h, rows, hs + (size_t)n * KV, dH, dout, dq, dk, dv, dg, dbeta);
        }
        if (dh0)
            for (size_t x = 0; x < KV; x++) dh0[(size_t)task * KV + x] = (real)dH[x];
    }
}

void kda_chunk_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                        const real *dhT, const real *q, const real *k, const real *v, const real *g,
                        const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                        void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_CHANNEL, d->H, d->K, d->V, scale);
    dr_chunk_backward(dq, dk, dv, dg, dbeta, dh0, dout, dhT, &in, h0, d, chunk, workspace);
}
void gdn_chunk_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                        const real *dhT, const real *q, const real *k, const real *v, const real *g,
                        const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                        void *workspace) {
    DeltaIn in = delta_in(q, k, v, g, beta, DR_GATE_HEAD, d->H, d->K, d->V, scale);
    dr_chunk_backward(dq, dk, dv, dg, dbeta, dh0, dout, dhT, &in, h0, d, chunk, workspace);
}
void deltanet_chunk_backward(real *dq, real *dk, real *dv, real *dbeta, real *dh0, const real *dout,
                             const real *dhT, const real *q, const real *k, const real *v, const real *beta,
                             const real *h0, real scale, const LinearDims *d, int chunk, void *workspace) {
    DeltaIn in = delta_in(q, k, v, NULL, beta, DR_GATE_NONE, d->H, d->K, d->V, scale);
    dr_chunk_backward(dq, dk, dv, NULL, dbeta, dh0, dout, dhT, &in, h0, d, chunk, workspace);
}
