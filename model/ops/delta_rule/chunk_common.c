// Chunk-local quantities of the chunkwise delta rule (docs/delta-rule.md, "Per-chunk
// quantities", "Exactness of the chunk form: the WY representation" and "Triangular inverse
// by forward substitution"), shared by the chunkwise forward (chunk_fwd.c) and backward
// (chunk_bwd.c).
#include "model/ops/delta_rule/internal.h"

size_t dr_chunk_doubles(int C, int K, int V) {
    const size_t c = (size_t)C, k = (size_t)K, v = (size_t)V;
    return 5 * c * k + k + 3 * c * c + 2 * c * v;
}

void dr_chunk_bind(DrChunk *cl, double *mem, int C, int K, int V) {
    const size_t c = (size_t)C, k = (size_t)K, v = (size_t)V;
    cl->C = C;
    cl->K = K;
    cl->V = V;
    cl->G = mem;
    cl->Qg = cl->G + c * k;
    cl->Kb = cl->Qg + c * k;
    cl->Ke = cl->Kb + c * k;
    cl->W = cl->Ke + c * k;
    cl->eend = cl->W + c * k;
    cl->Aqk = cl->eend + k;
    cl->L = cl->Aqk + c * c;
    cl->Tm = cl->L + c * c;
    cl->U = cl->Tm + c * c;
    cl->D = cl->U + c * v;
}

void dr_chunk_prepare(DrChunk *cl, const DeltaIn *in, size_t tok0, int h, int n) {
    const int C = cl->C, K = cl->K, V = cl->V;
    double *G = cl->G, *Aqk = cl->Aqk, *L = cl->L, *Tm = cl->Tm;

    // docs/delta-rule.md, "Per-chunk quantities": Gamma_r = sum_{j<=r} g_j inside the chunk
    // (inclusive, resets per chunk)
    for (int r = 0; r < n; r++)
        for (int i = 0; i < K; i++) G[r * K + i] = (r ? G[(r - 1) * K + i] : 0.0) + dr_gate(in, tok0 + r, h, i);

    // decay-weighted copies (same heading); every exponent is <= 0 since g <= 0
    const double *Gend = G + (size_t)(n - 1) * K;
    for (int i = 0; i < K; i++) cl->eend[i] = exp(Gend[i]);
    for (int r = 0; r < n; r++) {
        const real *q = dr_qk_row(in->q, in, tok0 + r, h), *k = dr_qk_row(in->k, in, tok0 + r, h);
        for (int i = 0; i < K; i++) {
            const double eg = exp(G[r * K + i]);
            cl->Qg[r * K + i] = (double)q[i] * eg;
            cl->Kb[r * K + i] = (double)k[i] * eg;
            cl->Ke[r * K + i] = (double)k[i] * exp(Gend[i] - G[r * K + i]);
        }
    }

    // docs/delta-rule.md, "Per-chunk quantities" and "Stable decay exponents": Aqk (c <= r,
    // scaled) and L (c < r, beta on the row), with the decay in
    // the relative form exp(Gamma_r - Gamma_c) evaluated only for c <= r (mask first).
    for (int r = 0; r < n; r++) {
        const real *qr = dr_qk_row(in->q, in, tok0 + r, h), *kr = dr_qk_row(in->k, in, tok0 + r, h);
        const double br = (double)in->beta[(tok0 + r) * (size_t)in->H + (size_t)h];
        for (int c = 0; c < n; c++) {
            if (c > r) {
                Aqk[r * C + c] = 0;
                L[r * C + c] = 0;
                continue;
            }
            const real *kc = dr_qk_row(in->k, in, tok0 + c, h);
            double aq = 0, ak = 0;
            for (int i = 0; i < K; i++) {
                const double e = exp(G[r * K + i] - G[c * K + i]);
                aq += (double)qr[i] * (double)kc[i] * e;
                ak += (double)kr[i] * (double)kc[i] * e;
            }
            Aqk[r * C + c] = in->scale * aq;
            L[r * C + c] = c < r ? br * ak : 0.0;
        }
    }

    // docs/delta-rule.md, "Triangular inverse by forward substitution": T = (I + L)^-1,
    // row r from the final rows m < r:
    //   T[r][r] = 1, T[r][c] = -sum_{m=c}^{r-1} L[r][m] T[m][c]  (c < r)
    for (int r = 0; r < n; r++) {
        for (int c = 0; c < n; c++) Tm[r * C + c] = (c == r) ? 1.0 : 0.0;
        for (int c = 0; c < r; c++) {
            double acc = 0;
            for (int m = c; m < r; m++) acc += L[r * C + m] * Tm[m * C + c];
            Tm[r * C + c] = -acc;
        }
    }

    // docs/delta-rule.md, "Exactness of the chunk form: the WY representation":
    // W = T diag(beta) Kb,  U = T diag(beta) V
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < K; i++) cl->W[r * K + i] = 0;
        for (int j = 0; j < V; j++) cl->U[r * V + j] = 0;
        for (int c = 0; c <= r; c++) {
            const double tb = Tm[r * C + c] * (double)in->beta[(tok0 + c) * (size_t)in->H + (size_t)h];
            const real *vc = dr_v_row(in->v, in, tok0 + c, h);
            for (int i = 0; i < K; i++) cl->W[r * K + i] += tb * cl->Kb[c * K + i];
            for (int j = 0; j < V; j++) cl->U[r * V + j] += tb * (double)vc[j];
        }
    }
}

void dr_chunk_delta(DrChunk *cl, int n, const double *H) {
    const int K = cl->K, V = cl->V;
    for (int r = 0; r < n; r++) {
        double *Dr = cl->D + (size_t)r * V;
        for (int j = 0; j < V; j++) Dr[j] = cl->U[r * V + j];
        for (int i = 0; i < K; i++) {
            const double w = cl->W[r * K + i];
            for (int j = 0; j < V; j++) Dr[j] -= w * H[i * V + j];
        }
    }
}

void dr_chunk_advance_state(const DrChunk *cl, int n, double *H) {
    const int K = cl->K, V = cl->V;
    for (int i = 0; i < K; i++) {
        double *Hi = H + (size_t)i * V;
        for (int j = 0; j < V; j++) Hi[j] *= cl->eend[i];
        for (int r = 0; r < n; r++) {
            const double ke = cl->Ke[r * K + i];
            for (int j = 0; j < V; j++) Hi[j] += ke * cl->D[r * V + j];
        }
    }
}
