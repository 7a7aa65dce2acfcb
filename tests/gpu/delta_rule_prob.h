// The random problems of the chunkwise delta rule's GPU programs (the parity test
// test_delta_rule.c and the precision audit audit_delta_rule_precision.c): one problem's host
// inputs in the distributions the layer feeds (q, k L2-normalised rows; beta in (0, 1); log-decays
// g in fla's range, or strong ones; bf16-representable floats) and their device copies. Needs
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
// a token (KDA, log-uniform) and [-0.01, -27] (GDN, uniform).
static int strong_decay = 0;

static inline float *rand_gate(LinearKind kind, size_t n) {
    if (kind == LINEAR_DELTANET) return NULL;
    float *g = xmalloc(sizeof(float) * (n ? n : 1));
    const float spread = strong_decay ? 7.2f : 3.f, gdn_max = strong_decay ? 27.f : 0.99f;
    for (size_t x = 0; x < n; x++)
        g[x] = bf16_round(kind == LINEAR_KDA ? -0.1f * expf(spread * urand() - 1.5f) : -0.01f - gdn_max * urand());
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
    p.g = rand_gate(kind, p.ng);
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

#endif
