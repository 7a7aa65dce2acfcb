// A random KDA / GDN / DeltaNet / linear-attention problem and a uniform way to run the
// recurrent or chunkwise forward + backward of it (shared by test_kda_chunk.c and
// test_kda_grad.c).
#ifndef HYBRID_LINEAR_PROBLEM_H
#define HYBRID_LINEAR_PROBLEM_H

#include "tests/linear_test_util.h"

enum { V_DELTANET = 0, V_GDN = 1, V_KDA = 2, V_LA = 3, V_LA_UNNORM = 4 };
static const char *variant_name[] = {"DeltaNet", "GDN", "KDA", "LinearAttn", "LinearAttn(unnorm)"};

typedef struct {
    LinearDims d;
    int variant;
    real scale;
    size_t nqk, nv, ng, nb, nh, nz;  // element counts
    real *q, *k, *v, *g, *beta, *h0, *z0;
    real *dout, *dhT, *dzT;
    int use_h0, use_dhT;
} Prob;

typedef struct {
    real *o, *hT, *zT;
    real *dq, *dk, *dv, *dg, *dbeta, *dh0, *dz0;
} Result;

static inline int prob_is_la(const Prob *p) { return p->variant >= V_LA; }

static inline void prob_init(Prob *p, LinearDims d, int variant, uint64_t seed, int use_h0, int use_dhT) {
    memset(p, 0, sizeof *p);
    p->d = d;
    p->variant = variant;
    p->use_h0 = use_h0;
    p->use_dhT = use_dhT;
    const size_t rows = (size_t)d.B * d.T * d.H, N = (size_t)linear_num_seqs(&d);
    p->nqk = rows * d.K;
    p->nv = rows * d.V;
    p->ng = variant == V_KDA ? rows * d.K : rows;
    p->nb = rows;
    p->nh = N * d.H * d.K * d.V;
    p->nz = N * d.H * d.K;
    p->scale = (real)(1.0 / sqrt((double)d.K));
    Rng r;
    rng_seed(&r, seed);
    p->q = tnew(p->nqk);
    p->k = tnew(p->nqk);
    p->v = tnew(p->nv);
    p->g = tnew(p->ng);
    p->beta = tnew(p->nb);
    p->h0 = tnew(p->nh);
    p->z0 = tnew(p->nz);
    p->dout = tnew(p->nv);
    p->dhT = tnew(p->nh);
    p->dzT = tnew(p->nz);
    fill_normal(&r, p->q, p->nqk, 1.0);
    fill_normal(&r, p->k, p->nqk, 1.0);
    // the delta rule wants L2-normalised q, k (docs/delta-rule.md, "DeltaNet" and "Test
    // inputs")
    if (!prob_is_la(p)) {
        l2normalize_rows(p->q, rows, d.K);
        l2normalize_rows(p->k, rows, d.K);
    }
    fill_normal(&r, p->v, p->nv, 1.0);
    fill_gate(&r, p->g, p->ng);
    fill_sigmoid(&r, p->beta, p->nb);
    fill_normal(&r, p->h0, p->nh, 1.0);
    fill_uniform(&r, p->z0, p->nz, 0.5, 1.5);  // a positive running key sum
    fill_normal(&r, p->dout, p->nv, 1.0);
    fill_normal(&r, p->dhT, p->nh, 1.0);
    fill_normal(&r, p->dzT, p->nz, 1.0);
}

static inline void prob_free(Prob *p) {
    free(p->q), free(p->k), free(p->v), free(p->g), free(p->beta), free(p->h0), free(p->z0);
    free(p->dout), free(p->dhT), free(p->dzT);
}

static inline void result_alloc(Result *res, const Prob *p) {
    res->o = tnew(p->nv);
    res->hT = tnew(p->nh);
    res->zT = tnew(p->nz);
    res->dq = tnew(p->nqk);
    res->dk = tnew(p->nqk);
    res->dv = tnew(p->nv);
    res->dg = tnew(p->ng);
    res->dbeta = tnew(p->nb);
    res->dh0 = tnew(p->nh);
    res->dz0 = tnew(p->nz);
}
static inline void result_free(Result *res) {
    free(res->o), free(res->hT), free(res->zT), free(res->dq), free(res->dk), free(res->dv);
    free(res->dg), free(res->dbeta), free(res->dh0), free(res->dz0);
}

// forward only; chunk == 0 selects the recurrent form
static inline void prob_forward(const Prob *p, int chunk, real *o, real *hT, real *zT) {
    const LinearDims *d = &p->d;
    const real *h0 = p->use_h0 ? p->h0 : NULL, *z0 = p->use_h0 ? p->z0 : NULL;
    size_t ws_bytes = chunk ? (prob_is_la(p) ? linear_attn_chunk_fwd_workspace_size(d, chunk)
                                             : delta_chunk_fwd_workspace_size(d, chunk))
                            : (prob_is_la(p) ? linear_attn_recurrent_fwd_workspace_size(d)
                                             : delta_recurrent_fwd_workspace_size(d));
    void *ws = xmalloc(ws_bytes);
    const real s = p->scale;
    switch (p->variant) {
    case V_KDA:
        if (chunk) kda_chunk_forward(o, hT, p->q, p->k, p->v, p->g, p->beta, h0, s, d, chunk, ws);
        else kda_recurrent_forward(o, hT, p->q, p->k, p->v, p->g, p->beta, h0, s, d, ws);
        break;
    case V_GDN:
        if (chunk) gdn_chunk_forward(o, hT, p->q, p->k, p->v, p->g, p->beta, h0, s, d, chunk, ws);
        else gdn_recurrent_forward(o, hT, p->q, p->k, p->v, p->g, p->beta, h0, s, d, ws);
        break;
    case V_DELTANET:
        if (chunk) deltanet_chunk_forward(o, hT, p->q, p->k, p->v, p->beta, h0, s, d, chunk, ws);
        else deltanet_recurrent_forward(o, hT, p->q, p->k, p->v, p->beta, h0, s, d, ws);
        break;
    default: {
        const int norm = p->variant == V_LA;
        if (chunk) linear_attn_chunk_forward(o, hT, zT, p->q, p->k, p->v, h0, z0, s, norm, d, chunk, ws);
        else linear_attn_recurrent_forward(o, hT, zT, p->q, p->k, p->v, h0, z0, s, norm, d, ws);
    }
    }
    free(ws);
}

static inline void prob_backward(const Prob *p, int chunk, Result *res) {
    const LinearDims *d = &p->d;
    const real *h0 = p->use_h0 ? p->h0 : NULL, *z0 = p->use_h0 ? p->z0 : NULL;
    const real *dhT = p->use_dhT ? p->dhT : NULL, *dzT = p->use_dhT ? p->dzT : NULL;
    size_t ws_bytes = chunk ? (prob_is_la(p) ? linear_attn_chunk_bwd_workspace_size(d, chunk)
                                             : delta_chunk_bwd_workspace_size(d, chunk))
                            : (prob_is_la(p) ? linear_attn_recurrent_bwd_workspace_size(d)
                                             : delta_recurrent_bwd_workspace_size(d));
    void *ws = xmalloc(ws_bytes);
    const real s = p->scale;
    switch (p->variant) {
    case V_KDA:
        if (chunk)
            kda_chunk_backward(res->dq, res->dk, res->dv, res->dg, res->dbeta, res->dh0, p->dout, dhT, p->q, p->k,
                               p->v, p->g, p->beta, h0, s, d, chunk, ws);
        else
            kda_recurrent_backward(res->dq, res->dk, res->dv, res->dg, res->dbeta, res->dh0, p->dout, dhT, p->q,
                                   p->k, p->v, p->g, p->beta, h0, s, d, ws);
        break;
    case V_GDN:
        if (chunk)
            gdn_chunk_backward(res->dq, res->dk, res->dv, res->dg, res->dbeta, res->dh0, p->dout, dhT, p->q, p->k,
                               p->v, p->g, p->beta, h0, s, d, chunk, ws);
        else
            gdn_recurrent_backward(res->dq, res->dk, res->dv, res->dg, res->dbeta, res->dh0, p->dout, dhT, p->q,
                                   p->k, p->v, p->g, p->beta, h0, s, d, ws);
        break;
    case V_DELTANET:
        if (chunk)
            deltanet_chunk_backward(res->dq, res->dk, res->dv, res->dbeta, res->dh0, p->dout, dhT, p->q, p->k, p->v,
                                    p->beta, h0, s, d, chunk, ws);
        else
            deltanet_recurrent_backward(res->dq, res->dk, res->dv, res->dbeta, res->dh0, p->dout, dhT, p->q, p->k,
                                        p->v, p->beta, h0, s, d, ws);
        break;
    default: {
        const int norm = p->variant == V_LA;
        if (chunk)
            linear_attn_chunk_backward(res->dq, res->dk, res->dv, res->dh0, res->dz0, p->dout, dhT, dzT, p->q, p->k,
                                       p->v, h0, z0, s, norm, d, chunk, ws);
        else
            linear_attn_recurrent_backward(res->dq, res->dk, res->dv, res->dh0, res->dz0, p->dout, dhT, dzT, p->q,
                                           p->k, p->v, h0, z0, s, norm, d, ws);
    }
    }
    free(ws);
}

static inline void prob_run(const Prob *p, int chunk, Result *res) {
    prob_forward(p, chunk, res->o, res->hT, res->zT);
    prob_backward(p, chunk, res);
}

// L = sum dout∘o + sum dhT∘hT (+ sum dzT∘zT for normalised linear attention)
static inline double prob_loss(const Prob *p, int chunk) {
    real *o = tnew(p->nv), *hT = tnew(p->nh), *zT = tnew(p->nz);
    prob_forward(p, chunk, o, hT, zT);
    double L = dot(p->dout, o, p->nv);
    if (p->use_dhT) {
        L += dot(p->dhT, hT, p->nh);
        if (p->variant == V_LA) L += dot(p->dzT, zT, p->nz);
    }
    free(o), free(hT), free(zT);
    return L;
}

#endif
