// Internal helpers shared by the linear-attention ops (not part of the op API; see
// delta_rule.h for the public functions and conventions).
#ifndef HYBRID_LINEAR_INTERNAL_H
#define HYBRID_LINEAR_INTERNAL_H

#include <math.h>
#include <stddef.h>

#include "model/ops/delta_rule/delta_rule.h"

// Dies with a clear message if the dims or the sequence offsets are inconsistent.
void lin_check_dims(const LinearDims *d, const char *op);

// Row range of sequence s on the flattened (B*T) token axis.
static inline void lin_seq(const LinearDims *d, int s, size_t *bos, int *len) {
    if (d->offsets) {
        *bos = (size_t)d->offsets[s];
        *len = d->offsets[s + 1] - d->offsets[s];
    } else {
        *bos = (size_t)s * (size_t)d->T;
        *len = d->T;
    }
}

static inline double lin_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

// ---- the delta-rule family (KDA / GDN / DeltaNet share one implementation;
//      docs/delta-rule.md, "How the four rules relate") ----

enum { DR_GATE_NONE = 0, DR_GATE_HEAD = 1, DR_GATE_CHANNEL = 2 };

typedef struct {
    const real *q, *k, *v, *g, *beta;
    int gate;  // DR_GATE_NONE: g ignored (DeltaNet); HEAD: g (B,T,H) (GDN); CHANNEL: g (B,T,H,K) (KDA)
    int H, K, V;
    double scale;
} DeltaIn;

// The inputs of one call (the public entry points of the recurrent, chunkwise and step forms).
static inline DeltaIn delta_in(const real *q, const real *k, const real *v, const real *g, const real *beta, int gate,
                               int H, int K, int V, real scale) {
    DeltaIn in = {q, k, v, g, beta, gate, H, K, V, (double)scale};
    return in;
}

// log-decay of channel i of head h at flattened token tok
static inline double dr_gate(const DeltaIn *in, size_t tok, int h, int i) {
    switch (in->gate) {
    case DR_GATE_CHANNEL: return (double)in->g[(tok * (size_t)in->H + (size_t)h) * (size_t)in->K + (size_t)i];
    case DR_GATE_HEAD: return (double)in->g[tok * (size_t)in->H + (size_t)h];
    default: return 0.0;
    }
}
static inline const real *dr_qk_row(const real *x, const DeltaIn *in, size_t tok, int h) {
    return x + (tok * (size_t)in->H + (size_t)h) * (size_t)in->K;
}
static inline const real *dr_v_row(const real *x, const DeltaIn *in, size_t tok, int h) {
    return x + (tok * (size_t)in->H + (size_t)h) * (size_t)in->V;
}

// Writes the per-channel log-decay gradient dgc[0..K) of one token as the op's dg:
// per channel (KDA), summed over K (GDN; docs/delta-rule.md, "How the four rules relate"),
// or not at all (DeltaNet / dg NULL).
static inline void dr_store_dg(real *dg, const DeltaIn *in, size_t tok, int h, const double *dgc) {
    if (!dg || in->gate == DR_GATE_NONE) return;
    if (in->gate == DR_GATE_CHANNEL) {
        real *out = dg + (tok * (size_t)in->H + (size_t)h) * (size_t)in->K;
        for (int i = 0; i < in->K; i++) out[i] = (real)dgc[i];
    } else {
        double s = 0;
        for (int i = 0; i < in->K; i++) s += dgc[i];
        dg[tok * (size_t)in->H + (size_t)h] = (real)s;
    }
}

void dr_recurrent_forward(real *o, real *hT, const DeltaIn *in, const real *h0, const LinearDims *d,
                          void *workspace);
void dr_recurrent_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                           const real *dhT, const DeltaIn *in, const real *h0, const LinearDims *d,
                           void *workspace);
void dr_chunk_forward(real *o, real *hT, const DeltaIn *in, const real *h0, const LinearDims *d, int chunk,
                      void *workspace);
void dr_chunk_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                       const real *dhT, const DeltaIn *in, const real *h0, const LinearDims *d, int chunk,
                       void *workspace);
void dr_step(real *o, real *state, const DeltaIn *in, int N);

// ---- chunk-local quantities for one chunk of n <= C rows ---------------------------
// (docs/delta-rule.md, "Per-chunk quantities", "Exactness of the chunk form: the WY
// representation" and "Triangular inverse by forward substitution")
// All matrices are row-major with row stride C (C×C) or K / V; only the leading n rows
// (and n columns) are meaningful.
typedef struct {
    int C, K, V;
    double *G;     // [C][K] Gamma: inclusive in-chunk cumsum of g
    double *Qg;    // [C][K] q ⊙ exp(Gamma)
    double *Kb;    // [C][K] k ⊙ exp(Gamma)
    double *Ke;    // [C][K] k ⊙ exp(Gamma_end - Gamma)
    double *eend;  // [K]    exp(Gamma_end)
    double *Aqk;   // [C][C] scale · q_r·(k_c ⊙ exp(Gamma_r - Gamma_c)), c <= r
    double *L;     // [C][C] beta_r · k_r·(k_c ⊙ exp(Gamma_r - Gamma_c)), c < r
    double *Tm;    // [C][C] T = (I + L)^-1, unit lower triangular
    double *W;     // [C][K] T diag(beta) Kb
    double *U;     // [C][V] T diag(beta) V
    double *D;     // [C][V] Delta = U - W H_n (pseudo-values)
} DrChunk;

size_t dr_chunk_doubles(int C, int K, int V);
void dr_chunk_bind(DrChunk *cl, double *mem, int C, int K, int V);
// Fills G, Qg, Kb, Ke, eend, Aqk, L, Tm, W, U for the n rows starting at token tok0.
void dr_chunk_prepare(DrChunk *cl, const DeltaIn *in, size_t tok0, int h, int n);
// Delta = U - W H  (docs/delta-rule.md, "Exactness of the chunk form: the WY
// representation"), H (K×V)
void dr_chunk_delta(DrChunk *cl, int n, const double *H);
// H <- diag(exp Gamma_end) H + Ke^T Delta  (the inter-chunk recurrence, same heading)
void dr_chunk_advance_state(const DrChunk *cl, int n, double *H);

// Slot of chunk state h[n] of (sequence s, head h) in the backward's state area:
// sequence s owns H * ceil(len_s / C) consecutive K×V slots starting at
// H * (floor(bos_s / C) + s), which never overlaps the next sequence because
// sum_s ceil(len_s/C) <= floor(bos/C) + s. Total slots: H * (floor(B*T / C) + N).
static inline size_t dr_state_slot(size_t bos, int s, int h, int H, int nchunks, int C) {
    return (size_t)H * (bos / (size_t)C + (size_t)s) + (size_t)h * (size_t)nchunks;
}
static inline size_t dr_state_slots_total(const LinearDims *d, int C) {
    return (size_t)d->H * ((size_t)d->B * (size_t)d->T / (size_t)C + (size_t)linear_num_seqs(d));
}

#endif
