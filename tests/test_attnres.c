// Block AttnRes (docs/hybrid.md, "Block Attention Residuals"), double build:
//  - the op's backward (docs/hybrid.md, "AttnRes op backward") vs finite differences for
//    every source, w and gamma;
//  - the identities of docs/hybrid.md, "Verification identities": one source -> identity
//    (and no parameter gradient), w = 0 ->
//    uniform mean, identical sources -> that source for any w;
//  - attnres_plan against the source counts of docs/hybrid.md, "Block AttnRes layer
//    algorithm";
//  - a toy stack wired exactly as the K3 layer algorithm (same heading) with the backward
//    bookkeeping of docs/hybrid.md, "AttnRes backward through the stack", against finite
//    differences for the embedding, every sublayer
//    weight and every AttnRes parameter (layer 0's attention op: exactly zero gradient);
//  - bit-identical results with 1 vs 2 OpenMP threads.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fd_check.h"
#include "model/backend.h"
#include "testing.h"

#define H_FD 1e-5

static void report(const char *what, double err) {
    printf("  %-46s max rel err %.3e\n", what, err);
    CHECK(err <= FD_TOL, "%s: %.3e", what, err);
}

// =============================== one op ===============================
typedef struct {
    int N, C, n;
    double eps;
    real **src, *w, *g, *out, *p, *z, *rho, *R;
} OpCtx;

static double op_loss(void *v) {
    OpCtx *c = v;
    cpu_attnres_forward(c->out, c->p, c->z, c->rho, (const real *const *)c->src, c->n, c->w, c->g, c->N, c->C, c->eps);
    return dotv(c->out, c->R, (size_t)c->N * c->C);
}

static OpCtx op_make(Rng *r, int N, int C, int n, double wscale) {
    OpCtx c = {N, C, n, 1e-5, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    c.src = malloc(sizeof(real *) * n);
    for (int i = 0; i < n; i++) c.src[i] = rand_vec(r, (size_t)N * C, 0.5 + i);  // sources of different scales
    c.w = rand_vec(r, C, wscale);
    c.g = rand_vec(r, C, 0.3);
    for (int i = 0; i < C; i++) c.g[i] += 1;
    c.out = zeros((size_t)N * C);
    c.p = zeros((size_t)N * n), c.z = zeros((size_t)N * n), c.rho = zeros((size_t)N * n);
    c.R = rand_vec(r, (size_t)N * C, 1.0);
    return c;
}
static void op_free(OpCtx *c) {
    for (int i = 0; i < c->n; i++) free(c->src[i]);
    free(c->src), free(c->w), free(c->g), free(c->out), free(c->p), free(c->z), free(c->rho), free(c->R);
}

// analytic gradients; dsrc[i] start at `init` to check that they accumulate
static void op_grads(OpCtx *c, real **dsrc, real *dw, real *dg, double init) {
    op_loss(c);
    real *work = zeros((size_t)c->N * c->n);
    for (int i = 0; i < c->n; i++)
        for (size_t k = 0; k < (size_t)c->N * c->C; k++) dsrc[i][k] = (real)init;
    cpu_attnres_backward(dsrc, dw, dg, work, c->R, (const real *const *)c->src, c->n, c->w, c->g, c->p, c->z, c->rho,
                         c->N, c->C);
    for (int i = 0; i < c->n; i++)
        for (size_t k = 0; k < (size_t)c->N * c->C; k++) dsrc[i][k] -= (real)init;
    free(work);
}

static void test_op_grad(void) {
    Rng r;
    rng_seed(&r, 81);
    const int N = 5, C = 6, n = 4;
    OpCtx c = op_make(&r, N, C, n, 0.8);
    real *dsrc[4], *dw = zeros(C), *dg = zeros(C);
    for (int i = 0; i < n; i++) dsrc[i] = zeros((size_t)N * C);
    op_grads(&c, dsrc, dw, dg, 0.25);
    char what[64];
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "attnres dV_%d (accumulated)", i);
        report(what, fd_rel_err(op_loss, &c, c.src[i], dsrc[i], (size_t)N * C, H_FD));
    }
    report("attnres dw (pseudo-query)", fd_rel_err(op_loss, &c, c.w, dw, C, H_FD));
    report("attnres dgamma", fd_rel_err(op_loss, &c, c.g, dg, C, H_FD));
    // at zero init (w = 0): dgamma = 0 and dw = dq (docs/hybrid.md, "AttnRes op backward")
    for (int i = 0; i < C; i++) c.w[i] = 0, dw[i] = 0, dg[i] = 0;
    op_grads(&c, dsrc, dw, dg, 0.0);
    report("attnres dw at w = 0", fd_rel_err(op_loss, &c, c.w, dw, C, H_FD));
    CHECK(max_abs(dg, C) == 0.0 && max_abs(dw, C) > 0, "at w = 0: dgamma %g, dw %g", max_abs(dg, C), max_abs(dw, C));
    // a NULL gradient slot skips that source and leaves the others unchanged
    real *dsrc2[4] = {zeros((size_t)N * C), NULL, zeros((size_t)N * C), zeros((size_t)N * C)};
    real *dw2 = zeros(C), *dg2 = zeros(C), *work = zeros((size_t)N * n);
    op_loss(&c);  // the FD loop above left the saved p, z, rho of a perturbed input
    cpu_attnres_backward(dsrc2, dw2, dg2, work, c.R, (const real *const *)c.src, n, c.w, c.g, c.p, c.z, c.rho, N, C);
    CHECK(max_abs_diff(dsrc2[0], dsrc[0], (size_t)N * C) == 0 && max_abs_diff(dw2, dw, C) == 0, "NULL dsrc slot");
    for (int i = 0; i < n; i++) free(dsrc[i]);
    free(dsrc2[0]), free(dsrc2[2]), free(dsrc2[3]), free(dw2), free(dg2), free(work), free(dw), free(dg);
    op_free(&c);
}

static void test_identities(void) {
    Rng r;
    rng_seed(&r, 82);
    const int N = 4, C = 5;
    size_t nc = (size_t)N * C;
    // one source: identity, and its parameters get no gradient
    OpCtx c = op_make(&r, N, C, 1, 1.0);
    op_loss(&c);
    CHECK(max_abs_diff(c.out, c.src[0], nc) == 0.0, "one source is not the identity");
    real *d0[1] = {zeros(nc)}, *dw = zeros(C), *dg = zeros(C);
    op_grads(&c, d0, dw, dg, 0.0);
    CHECK(max_abs(dw, C) == 0.0 && max_abs(dg, C) == 0.0 && max_abs_diff(d0[0], c.R, nc) == 0.0,
          "one source: parameter gradients %g %g, dV - dout %g", max_abs(dw, C), max_abs(dg, C),
          max_abs_diff(d0[0], c.R, nc));
    free(d0[0]);
    op_free(&c);
    // w = 0: the uniform mean of the sources
    c = op_make(&r, N, C, 3, 0.0);
    op_loss(&c);
    double worst = 0;
    for (size_t k = 0; k < nc; k++)
        worst = fmax(worst, fabs(c.out[k] - (c.src[0][k] + c.src[1][k] + c.src[2][k]) / 3));
    CHECK(worst < 1e-15, "w = 0 is not the mean of the sources (%g)", worst);
    op_free(&c);
    // identical sources: that source, for any w
    c = op_make(&r, N, C, 3, 2.0);
    memcpy(c.src[1], c.src[0], nc * sizeof(real));
    memcpy(c.src[2], c.src[0], nc * sizeof(real));
    op_loss(&c);
    CHECK(max_abs_diff(c.out, c.src[0], nc) < 1e-15, "identical sources: output differs by %g",
          max_abs_diff(c.out, c.src[0], nc));
    op_free(&c);
    free(dw), free(dg);
}

static void test_plan(void) {
    // source counts (docs/hybrid.md, "Block AttnRes layer algorithm"): attention 1 + l/S at
    // a boundary (l > 0), else 2 + floor(l/S); ffn 2 + floor(l/S)
    int ok = 1;
    for (int S = 1; S <= 4; S++)
        for (int L = 1; L <= 13; L++) {
            for (int l = 0; l < L; l++) {
                AttnResPlan a = attnres_plan(ATTNRES_ATTN, l, S, L), f = attnres_plan(ATTNRES_FFN, l, S, L);
                int want_a = l == 0 ? 1 : l % S == 0 ? 1 + l / S : 2 + l / S;
                ok &= a.n_sources == want_a && a.seal == (l % S == 0) && a.identity == (l == 0) && a.has_partial;
                ok &= f.n_sources == 2 + l / S && !f.seal && !f.identity && f.has_partial;
                // a seal at a boundary makes the partial block number n_blocks
                if (a.seal) ok &= f.n_blocks == a.n_blocks + 1;
            }
            AttnResPlan o = attnres_plan(ATTNRES_OUT, 0, S, L);
            ok &= o.n_blocks == attnres_num_blocks(L, S) && o.n_sources == o.n_blocks + 1;
        }
    // K3: 93 layers, S = 12 -> 8 blocks (embedding + 7 full) + the 9-layer final partial = 9 sources
    AttnResPlan k3 = attnres_plan(ATTNRES_OUT, 0, 12, 93);
    ok &= k3.n_blocks == 8 && k3.n_sources == 9;
    // proposed small family: 16 layers, S = 2 -> 8 blocks + partial = 9 sources
    AttnResPlan kl = attnres_plan(ATTNRES_OUT, 0, 2, 16);
    ok &= kl.n_sources == 9;
    CHECK(ok, "attnres_plan disagrees with the source counts of docs/hybrid.md");
}

// =============================== toy stack ===============================
// (docs/hybrid.md, "Block AttnRes layer algorithm" and "AttnRes backward through the stack")
// Sublayers are a = tanh(x A_l^T) (mixer) and f = tanh(x F_l^T) (FFN): enough to make every
// path matter. Loss = <AttnRes_out(blocks, P_final), R>.
#define NL 5
#define BS 2
typedef struct {
    int N, C;
    real *E, *A[NL], *F[NL], *R;
    real *wa[NL], *ga[NL], *wf[NL], *gf[NL], *wo, *go;  // AttnRes parameters
    // activations
    real *xa[NL], *xf[NL], *a[NL], *f[NL], *Pmid[NL], *Pout[NL], *h, *out;
    real *sa[NL][3], *sf[NL][3], *so[3];  // saved p, z, rho per op
    const real *blocks[NL + 1];
    int nblocks, plan_mismatch;
} Stack;

static void sub_forward(real *y, const real *x, const real *W, int N, int C) {
    cpu_matmul_forward(y, x, W, NULL, N, C, C);
    for (size_t i = 0; i < (size_t)N * C; i++) y[i] = (real)tanh(y[i]);
}
// dx written, dW accumulated, given y = tanh(x W^T)
static void sub_backward(real *dx, real *dW, const real *dy, const real *y, const real *x, const real *W, int N, int C) {
    real *dpre = zeros((size_t)N * C);
    for (size_t i = 0; i < (size_t)N * C; i++) dpre[i] = dy[i] * (1 - y[i] * y[i]);
    cpu_matmul_backward(dx, dW, NULL, dpre, x, W, N, C, C);
    free(dpre);
}

static void op_fwd(real *out, real **sv, const real *const *src, int n, const real *w, const real *g, int N, int C) {
    cpu_attnres_forward(out, sv[0], sv[1], sv[2], src, n, w, g, N, C, 1e-5);
}

static double stack_loss(void *v) {
    Stack *s = v;
    const int N = s->N, C = s->C;
    const size_t nc = (size_t)N * C;
    s->nblocks = 0;
    const real *P = s->E;  // the running partial starts as the embedding
    const real *src[NL + 2];
    for (int l = 0; l < NL; l++) {
        AttnResPlan pa = attnres_plan(ATTNRES_ATTN, l, BS, NL);
        if (pa.identity) {
            memcpy(s->xa[l], s->E, nc * sizeof(real));
        } else {
            for (int j = 0; j < pa.n_blocks; j++) src[j] = s->blocks[j];
            src[pa.n_blocks] = P;
            op_fwd(s->xa[l], s->sa[l], src, pa.n_sources, s->wa[l], s->ga[l], N, C);
        }
        if (pa.seal) s->blocks[s->nblocks++] = P, P = NULL;  // push P, P := empty
        sub_forward(s->a[l], s->xa[l], s->A[l], N, C);
        for (size_t i = 0; i < nc; i++) s->Pmid[l][i] = (P ? P[i] : 0) + s->a[l][i];
        AttnResPlan pf = attnres_plan(ATTNRES_FFN, l, BS, NL);
        for (int j = 0; j < pf.n_blocks; j++) src[j] = s->blocks[j];
        src[pf.n_blocks] = s->Pmid[l];
        op_fwd(s->xf[l], s->sf[l], src, pf.n_sources, s->wf[l], s->gf[l], N, C);
        sub_forward(s->f[l], s->xf[l], s->F[l], N, C);
        for (size_t i = 0; i < nc; i++) s->Pout[l][i] = s->Pmid[l][i] + s->f[l][i];
        P = s->Pout[l];
    }
    AttnResPlan po = attnres_plan(ATTNRES_OUT, 0, BS, NL);
    if (po.n_blocks != s->nblocks) s->plan_mismatch = 1;
    for (int j = 0; j < po.n_blocks; j++) src[j] = s->blocks[j];
    src[po.n_blocks] = P;
    op_fwd(s->h, s->so, src, po.n_sources, s->wo, s->go, N, C);
    return dotv(s->h, s->R, nc);
}

typedef struct { real *E, *A[NL], *F[NL], *wa[NL], *ga[NL], *wf[NL], *gf[NL], *wo, *go; } StackGrads;

static void op_bwd(real **dsrc, real *dw, real *dg, const real *dout, const real *const *src, int n, const real *w,
                   const real *g, real **sv, int N, int C) {
    real *work = zeros((size_t)N * n);
    cpu_attnres_backward(dsrc, dw, dg, work, dout, src, n, w, g, sv[0], sv[1], sv[2], N, C);
    free(work);
}

// The walk of docs/hybrid.md, "AttnRes backward through the stack": dB[j] per sealed
// block, dP for the current partial.
static void stack_backward(Stack *s, StackGrads *G) {
    const int N = s->N, C = s->C;
    const size_t nc = (size_t)N * C;
    stack_loss(s);
    real *dB[NL + 1];
    for (int j = 0; j <= NL; j++) dB[j] = zeros(nc);
    real *dP = zeros(nc), *dPmid = zeros(nc), *dPin = zeros(nc), *dx = zeros(nc);
    const real *src[NL + 2];
    real *dsrc[NL + 2];
    // output op: seeds dB_j and dP (the last partial)
    AttnResPlan po = attnres_plan(ATTNRES_OUT, 0, BS, NL);
    for (int j = 0; j < po.n_blocks; j++) src[j] = s->blocks[j], dsrc[j] = dB[j];
    src[po.n_blocks] = s->Pout[NL - 1], dsrc[po.n_blocks] = dP;
    op_bwd(dsrc, G->wo, G->go, s->R, src, po.n_sources, s->wo, s->go, s->so, N, C);
    for (int l = NL - 1; l >= 0; l--) {
        // dP holds dP_out of layer l. FFN: f = FFN(x_f), P_out = P_mid + f
        sub_backward(dx, G->F[l], dP, s->f[l], s->xf[l], s->F[l], N, C);
        memcpy(dPmid, dP, nc * sizeof(real));  // P_out = P_mid + f
        AttnResPlan pf = attnres_plan(ATTNRES_FFN, l, BS, NL);
        for (int j = 0; j < pf.n_blocks; j++) src[j] = s->blocks[j], dsrc[j] = dB[j];
        src[pf.n_blocks] = s->Pmid[l], dsrc[pf.n_blocks] = dPmid;
        op_bwd(dsrc, G->wf[l], G->gf[l], dx, src, pf.n_sources, s->wf[l], s->gf[l], s->sf[l], N, C);
        // mixer: P_mid = (P_in or empty) + a
        sub_backward(dx, G->A[l], dPmid, s->a[l], s->xa[l], s->A[l], N, C);
        AttnResPlan pa = attnres_plan(ATTNRES_ATTN, l, BS, NL);
        if (pa.identity) {  // x_a = E; E is also block b_0
            for (size_t i = 0; i < nc; i++) G->E[i] += dx[i] + dB[0][i];
        } else if (pa.seal) {  // the partial read here IS block b_m; P was reset, so dP_in = dB_m
            int m = pa.n_blocks;
            for (int j = 0; j <= m; j++) src[j] = s->blocks[j], dsrc[j] = dB[j];
            op_bwd(dsrc, G->wa[l], G->ga[l], dx, src, pa.n_sources, s->wa[l], s->ga[l], s->sa[l], N, C);
            memcpy(dP, dB[m], nc * sizeof(real));
            memset(dB[m], 0, nc * sizeof(real));  // pop
        } else {
            memcpy(dPin, dPmid, nc * sizeof(real));  // P_mid = P_in + a
            for (int j = 0; j < pa.n_blocks; j++) src[j] = s->blocks[j], dsrc[j] = dB[j];
            src[pa.n_blocks] = l > 0 ? s->Pout[l - 1] : s->E, dsrc[pa.n_blocks] = dPin;
            op_bwd(dsrc, G->wa[l], G->ga[l], dx, src, pa.n_sources, s->wa[l], s->ga[l], s->sa[l], N, C);
            memcpy(dP, dPin, nc * sizeof(real));
        }
    }
    for (int j = 0; j <= NL; j++) free(dB[j]);
    free(dP), free(dPmid), free(dPin), free(dx);
}

static void test_stack(void) {
    Rng r;
    rng_seed(&r, 91);
    Stack s;
    memset(&s, 0, sizeof s);
    s.N = 3, s.C = 4;
    const int N = s.N, C = s.C;
    const size_t nc = (size_t)N * C, cc = (size_t)C * C;
    StackGrads G;
    memset(&G, 0, sizeof G);
    s.E = rand_vec(&r, nc, 1.0), G.E = zeros(nc);
    s.R = rand_vec(&r, nc, 1.0);
    s.wo = rand_vec(&r, C, 0.7), s.go = rand_vec(&r, C, 0.3), G.wo = zeros(C), G.go = zeros(C);
    for (int i = 0; i < C; i++) s.go[i] += 1;
    for (int l = 0; l < NL; l++) {
        s.A[l] = rand_vec(&r, cc, 0.6), s.F[l] = rand_vec(&r, cc, 0.6);
        s.wa[l] = rand_vec(&r, C, 0.7), s.ga[l] = rand_vec(&r, C, 0.3);
        s.wf[l] = rand_vec(&r, C, 0.7), s.gf[l] = rand_vec(&r, C, 0.3);
        for (int i = 0; i < C; i++) s.ga[l][i] += 1, s.gf[l][i] += 1;
        G.A[l] = zeros(cc), G.F[l] = zeros(cc), G.wa[l] = zeros(C), G.ga[l] = zeros(C), G.wf[l] = zeros(C),
        G.gf[l] = zeros(C);
        s.xa[l] = zeros(nc), s.xf[l] = zeros(nc), s.a[l] = zeros(nc), s.f[l] = zeros(nc);
        s.Pmid[l] = zeros(nc), s.Pout[l] = zeros(nc);
        for (int k = 0; k < 3; k++) s.sa[l][k] = zeros((size_t)N * (NL + 2)), s.sf[l][k] = zeros((size_t)N * (NL + 2));
    }
    for (int k = 0; k < 3; k++) s.so[k] = zeros((size_t)N * (NL + 2));
    s.h = zeros(nc);
    stack_backward(&s, &G);
    CHECK(!s.plan_mismatch && s.nblocks == attnres_num_blocks(NL, BS), "blocks sealed by the stack: %d", s.nblocks);
    CHECK(max_abs(G.wa[0], C) == 0.0 && max_abs(G.ga[0], C) == 0.0, "layer 0's attention AttnRes got a gradient");
    char what[80];
    report("stack dE (embedding = b_0)", fd_rel_err(stack_loss, &s, s.E, G.E, nc, H_FD));
    report("stack d(out AttnRes w)", fd_rel_err(stack_loss, &s, s.wo, G.wo, C, H_FD));
    report("stack d(out AttnRes gamma)", fd_rel_err(stack_loss, &s, s.go, G.go, C, H_FD));
    for (int l = 0; l < NL; l++) {
        snprintf(what, sizeof what, "stack layer %d dA (mixer)", l);
        report(what, fd_rel_err(stack_loss, &s, s.A[l], G.A[l], cc, H_FD));
        snprintf(what, sizeof what, "stack layer %d dF (ffn)", l);
        report(what, fd_rel_err(stack_loss, &s, s.F[l], G.F[l], cc, H_FD));
        if (l > 0) {
            snprintf(what, sizeof what, "stack layer %d d(attn AttnRes w, gamma)", l);
            double e = fmax(fd_rel_err(stack_loss, &s, s.wa[l], G.wa[l], C, H_FD),
                            fd_rel_err(stack_loss, &s, s.ga[l], G.ga[l], C, H_FD));
            report(what, e);
        }
        snprintf(what, sizeof what, "stack layer %d d(ffn AttnRes w, gamma)", l);
        double e = fmax(fd_rel_err(stack_loss, &s, s.wf[l], G.wf[l], C, H_FD),
                        fd_rel_err(stack_loss, &s, s.gf[l], G.gf[l], C, H_FD));
        report(what, e);
    }
    free(s.E), free(G.E), free(s.R), free(s.wo), free(s.go), free(G.wo), free(G.go), free(s.h);
    for (int l = 0; l < NL; l++) {
        real *ps[] = {s.A[l], s.F[l], s.wa[l], s.ga[l], s.wf[l], s.gf[l], G.A[l], G.F[l], G.wa[l], G.ga[l], G.wf[l],
                      G.gf[l], s.xa[l], s.xf[l], s.a[l], s.f[l], s.Pmid[l], s.Pout[l]};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free(ps[i]);
        for (int k = 0; k < 3; k++) free(s.sa[l][k]), free(s.sf[l][k]);
    }
    for (int k = 0; k < 3; k++) free(s.so[k]);
}

// 1 vs 2 threads, bit-identical, at a size where both loops split across threads
static void test_threads(void) {
    Rng r;
    rng_seed(&r, 101);
    const int N = 64, C = 48, n = 5;
    OpCtx c[2];
    real *d[2][5], *dw[2], *dg[2];
    for (int k = 0; k < 2; k++) {
        Rng rr = r;  // same inputs for both runs
        c[k] = op_make(&rr, N, C, n, 0.5);
        for (int i = 0; i < n; i++) d[k][i] = zeros((size_t)N * C);
        dw[k] = zeros(C), dg[k] = zeros(C);
        omp_set_num_threads(k + 1);
        op_grads(&c[k], d[k], dw[k], dg[k], 0.0);
    }
    omp_set_num_threads(1);
    int same = !memcmp(c[0].out, c[1].out, sizeof(real) * N * C) && !memcmp(dw[0], dw[1], sizeof(real) * C) &&
               !memcmp(dg[0], dg[1], sizeof(real) * C);
    for (int i = 0; i < n; i++) same &= !memcmp(d[0][i], d[1][i], sizeof(real) * N * C);
    CHECK(same, "AttnRes results differ between 1 and 2 threads");
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < n; i++) free(d[k][i]);
        free(dw[k]), free(dg[k]);
        op_free(&c[k]);
    }
}

int main(void) {
    omp_set_num_threads(1);  // FD loops: many tiny ops (threads are checked in test_threads)
    test_op_grad();
    test_identities();
    test_plan();
    test_stack();
    test_threads();
    TEST_MAIN_END();
}
