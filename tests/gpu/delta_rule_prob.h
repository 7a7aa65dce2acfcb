// The random problems of the chunkwise delta rule's GPU programs (the parity test
// test_delta_rule.c, the precision audit audit_delta_rule_precision.c, hash_delta_rule.c): one
// problem's host inputs in the distributions the layer feeds (q, k L2-normalised rows; beta in
// (0, 1); log-decays g in fla's range, or strong ones; bf16-representable floats), their device
// copies, and one forward and backward of the table into fresh poisoned outputs (dr_run). Needs
// tests/gpu/harness.h (its RNG and device buffers) included first.
#ifndef HYBRID_TESTS_GPU_DELTA_RULE_PROB_H
#define HYBRID_TESTS_GPU_DELTA_RULE_PROB_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/ops/delta_rule/delta_rule.h"
#include "tests/gpu/harness.h"

static inline const char *kind_name(LinearKind k) { return k == LINEAR_KDA ? "KDA" : k == LINEAR_GDN ? "GDN" : "DeltaNet"; }

// One problem's host inputs (bf16-representable floats).
typedef struct {
    LinearKind kind;
    int B, T, H, K, V, N, nseq;
    int *offsets;  // host copy (NULL: fixed length)
    size_t nq, nv, ng, nb, ns;
    float *q, *k, *v, *g, *beta, *h0, *dout, *dhT;
    float scale;
} Prob;

static inline float urand(void) { return (float)rng_uniform(&g_rng); }

// rows of length D scaled to unit L2 norm, then bf16-rounded (as the layer's l2norm output)
static inline float *rand_l2rows(size_t rows, int Dd) {
    float *x = host_rand(rows * Dd, 1, 0);
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < Dd; i++) s += (double)x[r * Dd + i] * x[r * Dd + i];
        const float inv = (float)(1 / sqrt(s + 1e-6));
        for (int i = 0; i < Dd; i++) x[r * Dd + i] = bf16_round(x[r * Dd + i] * inv);
    }
    return x;
}

// strong_decay: KDA's softplus gate (and GDN's) is unbounded below, and a model in training
// reaches tens of nats a token on some channels (the KL-XS real run went to NaN at step 56 when
// the tensor-core kernels factored the in-chunk decay); these gates spread over [-0.02, -27]
// a token (KDA, log-uniform) and [-0.01, -27] (GDN, uniform). strong_decay 2: those gates on the
// tokens of every third block of 16 (t / 16 % 3 == 1, t counted over the batch), fla's range on
// the others, so that a chunk has diagonal blocks of either kind (the one-MMA prep computes a
// 16 x 16 diagonal block on tensor cores only where its gates are moderate: chunk.cuh,
// DR_DIAG_BOUND).
static int strong_decay = 0;

// the gates of n entries, per_token of them a token (H K for KDA, H for GDN)
static inline float *rand_gate(LinearKind kind, size_t n, size_t per_token) {
    if (kind == LINEAR_DELTANET) return NULL;
    float *g = xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t x = 0; x < n; x++) {
        const int strong = strong_decay == 1 || (strong_decay == 2 && x / per_token / 16 % 3 == 1);
        const float spread = strong ? 7.2f : 3.f, gdn_max = strong ? 27.f : 0.99f;
        g[x] = bf16_round(kind == LINEAR_KDA ? -0.1f * expf(spread * urand() - 1.5f) : -0.01f - gdn_max * urand());
    }
    return g;
}

static inline Prob make_prob(LinearKind kind, int B, int T, int H, int K, int V, const int *offsets, int nseq) {
    Prob p = {0};
    p.kind = kind, p.B = B, p.T = T, p.H = H, p.K = K, p.V = V, p.nseq = nseq;
    p.N = offsets ? nseq : B;
    if (offsets) {
        p.offsets = xmalloc(sizeof(int) * (nseq + 1));
        memcpy(p.offsets, offsets, sizeof(int) * (nseq + 1));
    }
    const size_t rows = (size_t)B * T * H;
    p.nq = rows * K, p.nv = rows * V, p.nb = rows, p.ns = (size_t)p.N * H * K * V;
    p.ng = kind == LINEAR_KDA ? p.nq : rows;
    p.q = rand_l2rows(rows, K);
    p.k = rand_l2rows(rows, K);
    p.v = host_rand(p.nv, 1, 0);
    p.g = rand_gate(kind, p.ng, kind == LINEAR_KDA ? (size_t)H * K : (size_t)H);
    p.beta = host_rand(p.nb, 0.45f, 0.5f);
    p.h0 = host_rand(p.ns, 1, 0);
    p.dout = host_rand(p.nv, 1, 0);
    p.dhT = host_rand(p.ns, 1, 0);
    p.scale = 1 / sqrtf((float)K);
    return p;
}

static inline void free_prob(Prob *p) {
    free(p->offsets), free(p->q), free(p->k), free(p->v), free(p->g), free(p->beta), free(p->h0), free(p->dout),
        free(p->dhT);
}

// The device copies of a problem's inputs.
typedef struct {
    void *q, *k, *v, *g, *beta, *dout;
    float *h0, *dhT;
    int *offsets;
} DevIn;

static inline DevIn upload(const Prob *p) {
    DevIn d;
    d.q = dev_bf16(p->q, p->nq), d.k = dev_bf16(p->k, p->nq), d.v = dev_bf16(p->v, p->nv);
    d.g = p->g ? dev_bf16(p->g, p->ng) : NULL;
    d.beta = dev_bf16(p->beta, p->nb), d.dout = dev_bf16(p->dout, p->nv);
    d.h0 = dev_f32(p->h0, p->ns), d.dhT = dev_f32(p->dhT, p->ns);
    d.offsets = p->offsets ? dev_tokens(p->offsets, (size_t)p->nseq + 1) : NULL;
    return d;
}

static inline void free_dev(DevIn *d) {
    G->free(d->q), G->free(d->k), G->free(d->v), G->free(d->beta), G->free(d->dout), G->free(d->h0), G->free(d->dhT);
    if (d->g) G->free(d->g);
    if (d->offsets) G->free(d->offsets);
}

// The outputs of one forward and backward, in this order; the states hT, dh0 are fp32, the
// rest bf16.
enum { DR_O, DR_HT, DR_DQ, DR_DK, DR_DV, DR_DG, DR_DB, DR_DH0, DR_NOUT };
static inline const char *dr_out_name(int e) {
    static const char *const N[DR_NOUT] = {"o", "hT", "dq", "dk", "dv", "dg", "dbeta", "dh0"};
    return N[e];
}
static inline int dr_out_is_state(int e) { return e == DR_HT || e == DR_DH0; }
static inline size_t dr_out_len(const Prob *p, int e) {
    switch (e) {
    case DR_O: case DR_DV: return p->nv;
    case DR_DQ: case DR_DK: return p->nq;
    case DR_DG: return p->ng;
    case DR_DB: return p->nb;
    default: return p->ns;
    }
}

// The delta-rule table's forward (when fwd) and backward of p on its device inputs d, chunk 64,
// into outputs allocated here and poisoned first: out[e] on the device, NULL where not made (o
// and hT without fwd, dg without a gate, dh0 without with_state). with_state: h0 and dhT given.
// Free with dr_out_free.
static inline void dr_run(const DeltaRuleOps *D, const Prob *p, const DevIn *d, int fwd, int with_state,
                          void *out[DR_NOUT]) {
    for (int e = 0; e < DR_NOUT; e++) {
        out[e] = NULL;
        if ((!fwd && (e == DR_O || e == DR_HT)) || (e == DR_DG && !p->g) || (e == DR_DH0 && !with_state)) continue;
        const size_t n = dr_out_len(p, e);
        if (dr_out_is_state(e)) {
            out[e] = dev_f32(NULL, n);
            poison_f32((float *)out[e], n);
        } else {
            out[e] = dev_bf16(NULL, n);
            poison_bf16(out[e], n);
        }
    }
    const real *h0 = with_state ? (const real *)d->h0 : NULL, *dhT = with_state ? (const real *)d->dhT : NULL;
    void *ws = G->alloc(D->linear_workspace_size(p->kind, 1, p->B, p->T, p->H, p->K, p->V, p->N, 64));
    if (fwd)
        D->delta_chunk_forward(p->kind, out[DR_O], (real *)out[DR_HT], d->q, d->k, d->v, d->g, d->beta, h0, p->scale,
                               p->B, p->T, p->H, p->K, p->V, d->offsets, p->nseq, 64, ws);
    D->delta_chunk_backward(p->kind, out[DR_DQ], out[DR_DK], out[DR_DV], out[DR_DG], out[DR_DB], (real *)out[DR_DH0],
                            d->dout, dhT, d->q, d->k, d->v, d->g, d->beta, h0, p->scale, p->B, p->T, p->H, p->K, p->V,
                            d->offsets, p->nseq, 64, ws);
    G->free(ws);
}
static inline void dr_out_free(void *out[DR_NOUT]) {
    for (int e = 0; e < DR_NOUT; e++)
        if (out[e]) G->free(out[e]);
}

#endif
