// CPU reference ops (model/ops/): every backward against central finite differences in double
// (docs/architecture.md, "Precision of the truth": relative error <= 1e-6), plus the contract
// details: parameter gradients accumulate, input gradients are written, forward results do not
// depend on the thread count, attention and cross-entropy match naive references, and AdamW
// matches a hand computation.
//
// Each gradient check uses the scalar loss L = sum(dout * forward_output) with a
// random dout, so dL/d(output) = dout is what the backward receives.
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/backend.h"
#include "model/backend.h"
#include "base/rng.h"
#include "base/util.h"
#include "model/ops/optim/optim.h"
#include "tests/testing.h"

#ifndef REAL_DOUBLE
#error "test_ops_grad needs the double build (-DREAL_DOUBLE)"
#endif

#define FD_H 1e-5         // central-difference step
#define FD_TOL 1e-6       // docs/architecture.md, "Precision of the truth"
#define FD_FLOOR_REL 1e-4 // rel_err floor, relative to the tensor's largest gradient (see fd_check)
#define GARBAGE 12345.0   // pre-fill for written (=) gradients: must be overwritten

// ---------------------------------------------------------------- helpers

static Rng g_rng;

static real *vec(size_t n) { return xcalloc(n ? n : 1, sizeof(real)); }

static real *randn(size_t n, double scale) {
    real *x = vec(n);
    for (size_t i = 0; i < n; i++) x[i] = (real)(scale * rng_normal(&g_rng));
    return x;
}

static real *filled(size_t n, double value) {
    real *x = vec(n);
    for (size_t i = 0; i < n; i++) x[i] = (real)value;
    return x;
}

static real *copy(const real *x, size_t n) {
    real *y = vec(n);
    memcpy(y, x, n * sizeof(real));
    return y;
}

static double max_abs(const real *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

// worst rel_err between two arrays, with a floor relative to their scale
static double max_rel(const real *a, const real *b, size_t n, double floor_rel) {
    double fl = floor_rel * fmax(fmax(max_abs(a, n), max_abs(b, n)), 1e-300), worst = 0.0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, rel_err(a[i], b[i], fl));
    return worst;
}

// max relative FD error seen per op, reported at the end
enum { OP_EMBED, OP_LN, OP_MATMUL, OP_ATTN, OP_GELU, OP_ADD, OP_CE, OP_COUNT };
static const char *op_names[OP_COUNT] = {"embed", "layernorm", "matmul", "attention", "gelu", "add", "crossentropy"};
static double op_worst[OP_COUNT];
static long op_elems[OP_COUNT];

typedef void (*ForwardFn)(void *ctx);

// Compares grad (analytic) with the central difference (L(x+h) - L(x-h)) / 2h of
// L = sum(dout * out) for every element of x, where forward(ctx) recomputes out.
// The difference is taken as sum(dout * (out(x+h) - out(x-h))) / 2h: the same number
// without the cancellation of two large sums (outputs that x does not reach give exact
// zeros). What remains is the forward's own rounding, about 1e-16 * |out| / h, which
// puts the FD noise near 1e-11 of the gradient scale. rel_err therefore gets the floor
// FD_FLOOR_REL * max|grad|: near-zero elements are judged on an absolute scale of
// 1e-10 * max|grad|, still orders of magnitude below the error of any real bug.
static void fd_check(int op, const char *what, ForwardFn forward, void *ctx, const real *out, const real *dout,
                     size_t nout, real *x, const real *grad, size_t n) {
    double gscale = max_abs(grad, n), fl = fmax(FD_FLOOR_REL * gscale, 1e-300);
    double worst = 0.0;
    size_t worst_i = 0;
    double worst_a = 0, worst_n = 0;
    real *plus = vec(nout);
    for (size_t i = 0; i < n; i++) {
        real save = x[i];
        x[i] = save + FD_H;
        forward(ctx);
        memcpy(plus, out, nout * sizeof(real));
        x[i] = save - FD_H;
        forward(ctx);
        x[i] = save;
        double diff = 0.0;
        for (size_t k = 0; k < nout; k++) diff += (double)dout[k] * (plus[k] - out[k]);
        double num = diff / (2 * FD_H);
        double e = rel_err(grad[i], num, fl);
        if (e > worst || isnan(e)) worst = e, worst_i = i, worst_a = grad[i], worst_n = num;
    }
    free(plus);
    forward(ctx);  // leave the outputs (and saved tensors) of the unperturbed input
    CHECK(gscale > 0 || n == 0, "%s %s: the analytic gradient is all zero", op_names[op], what);
    CHECK(worst <= FD_TOL, "%s %s: rel err %.3g at element %zu (analytic %.12g, numeric %.12g, scale %.3g)",
          op_names[op], what, worst, worst_i, worst_a, worst_n, gscale);
    if (getenv("FD_VERBOSE"))
        printf("  %-13s %-28s n=%4zu worst %.2e at %zu (a=%.6g n=%.6g) scale %.3g\n", op_names[op], what, n, worst,
               worst_i, worst_a, worst_n, gscale);
    if (worst > op_worst[op]) op_worst[op] = worst;
    op_elems[op] += (long)n;
}

// b = acc - base (the increment one backward added to a pre-filled gradient)
static real *delta(const real *acc, const real *base, size_t n) {
    real *d = vec(n);
    for (size_t i = 0; i < n; i++) d[i] = acc[i] - base[i];
    return d;
}

// after a second backward call: acc == base + 2 * d (accumulation, not overwrite)
static void check_accumulated(const char *what, const real *acc, const real *base, const real *d, size_t n) {
    real *want = vec(n);
    for (size_t i = 0; i < n; i++) want[i] = base[i] + 2 * d[i];
    double e = max_rel(acc, want, n, 1e-3);
    CHECK(e <= 1e-12, "%s: a second backward call did not add its gradient (rel err %.3g)", what, e);
    free(want);
}

static void check_same(const char *what, const real *a, const real *b, size_t n) {
    CHECK(memcmp(a, b, n * sizeof(real)) == 0, "%s differs", what);
}

// ---------------------------------------------------------------- embed

typedef struct {
    const int *tok;
    real *wte, *wpe, *out, *dout;
    int B, T, C;
} EmbedCtx;

static void embed_fwd(void *p) {
    EmbedCtx *c = p;
    cpu_embed_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C);
}

static void test_embed(int C, int with_wpe) {
    int B = 2, T = 5, V = 7;
    // token 3 appears four times (twice at the same position t=1), token 0 twice, 6 never
    int tok[10] = {3, 3, 0, 5, 1, 2, 3, 0, 4, 3};
    size_t nout = (size_t)B * T * C;
    EmbedCtx c = {tok, randn((size_t)V * C, 1), with_wpe ? randn((size_t)T * C, 1) : NULL, vec(nout),
                  randn(nout, 1), B, T, C};
    real *dwte0 = randn((size_t)V * C, 1), *dwte = copy(dwte0, (size_t)V * C);
    real *dwpe0 = randn((size_t)T * C, 1), *dwpe = copy(dwpe0, (size_t)T * C);
    embed_fwd(&c);
    cpu_embed_backward(dwte, with_wpe ? dwpe : NULL, c.dout, tok, B, T, C);
    real *gwte = delta(dwte, dwte0, (size_t)V * C), *gwpe = delta(dwpe, dwpe0, (size_t)T * C);
    fd_check(OP_EMBED, with_wpe ? "dwte" : "dwte (no wpe)", embed_fwd, &c, c.out, c.dout, nout, c.wte, gwte, (size_t)V * C);
    if (with_wpe) fd_check(OP_EMBED, "dwpe", embed_fwd, &c, c.out, c.dout, nout, c.wpe, gwpe, (size_t)T * C);
    int unused_zero = 1;
    for (int e = 0; e < C; e++) unused_zero &= gwte[6 * C + e] == 0;
    CHECK(unused_zero, "embed: the row of an unused token got a gradient");
    if (!with_wpe) check_same("embed: dwpe touched although NULL", dwpe, dwpe0, (size_t)T * C);
    cpu_embed_backward(dwte, with_wpe ? dwpe : NULL, c.dout, tok, B, T, C);
    check_accumulated("embed dwte", dwte, dwte0, gwte, (size_t)V * C);
    if (with_wpe) check_accumulated("embed dwpe", dwpe, dwpe0, gwpe, (size_t)T * C);
    free(c.wte), free(c.wpe), free(c.out), free(c.dout);
    free(dwte0), free(dwte), free(dwpe0), free(dwpe), free(gwte), free(gwpe);
}

// ---------------------------------------------------------------- layernorm

typedef struct {
    real *inp, *w, *b, *out, *mean, *rstd, *dout;
    int N, C;
} LnCtx;

static void ln_fwd(void *p) {
    LnCtx *c = p;
    cpu_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 1e-5);
}

static void test_layernorm(int N, int C, int with_b) {
    size_t n = (size_t)N * C;
    LnCtx c = {randn(n, 1.5), randn(C, 1), with_b ? randn(C, 1) : NULL, vec(n), vec(N), vec(N), randn(n, 1), N, C};
    for (size_t i = 0; i < n; i++) c.inp[i] += 0.3;  // a nonzero mean
    real *dinp = filled(n, GARBAGE), *dw0 = randn(C, 1), *db0 = randn(C, 1);
    real *dw = copy(dw0, C), *db = copy(db0, C);
    ln_fwd(&c);
    cpu_layernorm_backward(dinp, dw, with_b ? db : NULL, c.dout, c.inp, c.w, c.mean, c.rstd, N, C);
    real *gw = delta(dw, dw0, C), *gb = delta(db, db0, C), *dinp1 = copy(dinp, n);
    fd_check(OP_LN, "dinp", ln_fwd, &c, c.out, c.dout, n, c.inp, dinp, n);
    fd_check(OP_LN, "dw", ln_fwd, &c, c.out, c.dout, n, c.w, gw, C);
    if (with_b) fd_check(OP_LN, "db", ln_fwd, &c, c.out, c.dout, n, c.b, gb, C);
    else check_same("layernorm: db touched although NULL", db, db0, C);
    ln_fwd(&c);  // restore the saved mean / rstd exactly
    cpu_layernorm_backward(dinp, dw, with_b ? db : NULL, c.dout, c.inp, c.w, c.mean, c.rstd, N, C);
    check_same("layernorm: dinp (written, not accumulated) on the second call", dinp, dinp1, n);
    check_accumulated("layernorm dw", dw, dw0, gw, C);
    if (with_b) check_accumulated("layernorm db", db, db0, gb, C);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.dout);
    free(dinp), free(dinp1), free(dw0), free(db0), free(dw), free(db), free(gw), free(gb);
}

// ---------------------------------------------------------------- matmul

typedef struct {
    real *inp, *w, *bias, *out, *dout;
    int N, C, OC;
} MmCtx;

static void mm_fwd(void *p) {
    MmCtx *c = p;
    cpu_matmul_forward(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
}

static void test_matmul(int N, int C, int OC, int with_bias) {
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    MmCtx c = {randn(ni, 1), randn(nw, 1), with_bias ? randn(OC, 1) : NULL, vec(no), randn(no, 1), N, C, OC};
    real *dinp = filled(ni, GARBAGE), *dw0 = randn(nw, 1), *db0 = randn(OC, 1);
    real *dw = copy(dw0, nw), *db = copy(db0, OC);
    mm_fwd(&c);
    cpu_matmul_backward(dinp, dw, with_bias ? db : NULL, c.dout, c.inp, c.w, N, C, OC);
    real *gw = delta(dw, dw0, nw), *gb = delta(db, db0, OC), *dinp1 = copy(dinp, ni);
    fd_check(OP_MATMUL, "dinp", mm_fwd, &c, c.out, c.dout, no, c.inp, dinp, ni);
    fd_check(OP_MATMUL, "dw", mm_fwd, &c, c.out, c.dout, no, c.w, gw, nw);
    if (with_bias) fd_check(OP_MATMUL, "dbias", mm_fwd, &c, c.out, c.dout, no, c.bias, gb, OC);
    else check_same("matmul: dbias touched although NULL", db, db0, OC);
    cpu_matmul_backward(dinp, dw, with_bias ? db : NULL, c.dout, c.inp, c.w, N, C, OC);
    check_same("matmul: dinp (written, not accumulated) on the second call", dinp, dinp1, ni);
    check_accumulated("matmul dw", dw, dw0, gw, nw);
    if (with_bias) check_accumulated("matmul dbias", db, db0, gb, OC);
    free(c.inp), free(c.w), free(c.bias), free(c.out), free(c.dout);
    free(dinp), free(dinp1), free(dw0), free(db0), free(dw), free(db), free(gw), free(gb);
}

// ---------------------------------------------------------------- attention

typedef struct {
    real *qkv, *out, *lse, *dout;
    int B, T, C, NH;
} AttnCtx;

static void attn_fwd(void *p) {
    AttnCtx *c = p;
    cpu_attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH);
}

// Naive reference: materialises the full (T, T) score and probability matrices.
static void attention_naive(real *out, real *lse, const real *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    double *P = xcalloc((size_t)T * T, sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < T; j++) {
                    double s = -INFINITY;  // masked (j > i)
                    if (j <= i) {
                        s = 0.0;
                        for (int e = 0; e < hs; e++)
                            s += qkv[((size_t)b * T + i) * 3 * C + h * hs + e] *
                                 qkv[((size_t)b * T + j) * 3 * C + C + h * hs + e];
                        s /= sqrt((double)hs);
                    }
                    P[(size_t)i * T + j] = s;
                    m = fmax(m, s);
                }
                for (int j = 0; j < T; j++) sum += (P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - m));
                for (int j = 0; j < T; j++) P[(size_t)i * T + j] /= sum;
                lse[((size_t)b * NH + h) * T + i] = m + log(sum);
            }
            for (int i = 0; i < T; i++)
                for (int e = 0; e < hs; e++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++)
                        o += P[(size_t)i * T + j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + e];
                    out[((size_t)b * T + i) * C + h * hs + e] = o;
                }
        }
    free(P);
}

static void test_attention(int B, int T, int C, int NH) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    AttnCtx c = {randn(nq, 1), vec(no), vec(nl), randn(no, 1), B, T, C, NH};
    real *dqkv = filled(nq, GARBAGE);
    attn_fwd(&c);
    // forward vs the naive reference
    real *ref_out = vec(no), *ref_lse = vec(nl);
    attention_naive(ref_out, ref_lse, c.qkv, B, T, C, NH);
    double eo = max_rel(c.out, ref_out, no, 1e-3), el = max_rel(c.lse, ref_lse, nl, 1e-3);
    CHECK(eo <= 1e-12 && el <= 1e-12, "attention B=%d T=%d C=%d NH=%d vs naive: out %.3g, lse %.3g", B, T, C, NH,
          eo, el);
    cpu_attention_backward(dqkv, c.dout, c.qkv, c.out, c.lse, B, T, C, NH);
    real *dqkv1 = copy(dqkv, nq);
    char what[64];
    snprintf(what, sizeof what, "dqkv B=%d T=%d C=%d NH=%d", B, T, C, NH);
    fd_check(OP_ATTN, what, attn_fwd, &c, c.out, c.dout, no, c.qkv, dqkv, nq);
    attn_fwd(&c);
    cpu_attention_backward(dqkv, c.dout, c.qkv, c.out, c.lse, B, T, C, NH);
    check_same("attention: dqkv (written, not accumulated) on the second call", dqkv, dqkv1, nq);
    free(c.qkv), free(c.out), free(c.lse), free(c.dout), free(dqkv), free(dqkv1), free(ref_out), free(ref_lse);
}

// ---------------------------------------------------------------- gelu, add

typedef struct {
    real *inp, *out, *dout;
    size_t n;
} GeluCtx;

static void gelu_fwd(void *p) {
    GeluCtx *c = p;
    cpu_gelu_forward(c->out, c->inp, c->n);
}

static void test_gelu(void) {
    size_t n = 64;
    GeluCtx c = {randn(n, 2), vec(n), randn(n, 1), n};
    c.inp[0] = 0, c.inp[1] = -3, c.inp[2] = 3, c.inp[3] = -6, c.inp[4] = 6, c.inp[5] = 1e-3;
    real *dinp = filled(n, GARBAGE);
    cpu_gelu_backward(dinp, c.inp, c.dout, n);
    fd_check(OP_GELU, "dinp", gelu_fwd, &c, c.out, c.dout, n, c.inp, dinp, n);
    // known values: gelu(0) = 0, gelu'(0) = 1/2
    gelu_fwd(&c);
    CHECK(c.out[0] == 0 && fabs(dinp[0] - 0.5 * c.dout[0]) <= 1e-15, "gelu at 0");
    free(c.inp), free(c.out), free(c.dout), free(dinp);
}

typedef struct {
    real *a, *b, *out, *dout;
    size_t n;
} AddCtx;

static void add_fwd(void *p) {
    AddCtx *c = p;
    cpu_add_forward(c->out, c->a, c->b, c->n);
}

// The residual add has no backward op: its gradient passes dout through to both
// inputs (the graph accumulates it with add_inplace). Check that this is the gradient.
static void test_add(void) {
    size_t n = 37;
    AddCtx c = {randn(n, 1), randn(n, 1), vec(n), randn(n, 1), n};
    fd_check(OP_ADD, "da", add_fwd, &c, c.out, c.dout, n, c.a, c.dout, n);
    fd_check(OP_ADD, "db", add_fwd, &c, c.out, c.dout, n, c.b, c.dout, n);
    real *acc = copy(c.a, n);
    cpu_add_inplace(acc, c.b, n);
    add_fwd(&c);
    check_same("add_inplace vs add_forward", acc, c.out, n);
    free(c.a), free(c.b), free(c.out), free(c.dout), free(acc);
}

// ---------------------------------------------------------------- cross-entropy

typedef struct {
    real *logits, *losses, *dlosses;
    const int *targets;
    int N, V, Vp;
} CeCtx;

static void ce_fwd(void *p) {
    CeCtx *c = p;
    cpu_crossentropy_forward(c->losses, c->logits, c->targets, c->N, c->V, c->Vp);
}

static void test_crossentropy(void) {
    enum { N = 6, V = 7, Vp = 10 };
    int targets[N] = {2, -1, 0, 6, 3, 2};  // row 1 ignored; first and last real columns used
    // the backward takes one dloss for every row (the mean's 1/count); the FD check's
    // loss is sum_i dloss * loss_i, so its "dout" is dloss in every row
    const real dloss = 0.37;
    CeCtx c = {randn((size_t)N * Vp, 2), vec(N), filled(N, dloss), targets, N, V, Vp};
    real *dlogits = filled((size_t)N * Vp, GARBAGE);
    ce_fwd(&c);
    // loss vs a naive log-softmax (no max shift; logits are O(1) here)
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double s = 0.0, want = 0.0;
        for (int v = 0; v < V; v++) s += exp(c.logits[i * Vp + v]);
        if (targets[i] >= 0) want = -log(exp(c.logits[i * Vp + targets[i]]) / s);
        worst = fmax(worst, rel_err(c.losses[i], want, 1e-3));
    }
    CHECK(worst <= 1e-12, "crossentropy vs naive log-softmax: rel err %.3g", worst);
    CHECK(c.losses[1] == 0, "crossentropy: ignored row has loss %g", (double)c.losses[1]);
    cpu_crossentropy_backward(dlogits, c.logits, targets, dloss, N, V, Vp);
    // in place (dlogits == logits) gives the same gradient
    real *inplace = copy(c.logits, (size_t)N * Vp);
    cpu_crossentropy_backward(inplace, inplace, targets, dloss, N, V, Vp);
    check_same("crossentropy_backward in place vs out of place", inplace, dlogits, (size_t)N * Vp);
    free(inplace);
    fd_check(OP_CE, "dlogits", ce_fwd, &c, c.losses, c.dlosses, N, c.logits, dlogits, (size_t)N * Vp);
    int pad_zero = 1, ignored_zero = 1;
    for (int i = 0; i < N; i++)
        for (int v = V; v < Vp; v++) pad_zero &= dlogits[i * Vp + v] == 0;
    for (int v = 0; v < Vp; v++) ignored_zero &= dlogits[1 * Vp + v] == 0;
    CHECK(pad_zero, "crossentropy: padding-column dlogits must be exactly 0");
    CHECK(ignored_zero, "crossentropy: the ignored row's dlogits must be exactly 0");
    // huge values (and a NaN) in padding columns change neither the loss nor the gradient
    real *losses0 = copy(c.losses, N), *dlogits0 = copy(dlogits, (size_t)N * Vp);
    for (int i = 0; i < N; i++)
        for (int v = V; v < Vp; v++) c.logits[i * Vp + v] = (v == V) ? 1e30 : (v == V + 1 ? NAN : 700.0);
    ce_fwd(&c);
    cpu_crossentropy_backward(dlogits, c.logits, targets, dloss, N, V, Vp);
    check_same("crossentropy loss with huge padding logits", c.losses, losses0, N);
    check_same("crossentropy dlogits with huge padding logits", dlogits, dlogits0, (size_t)N * Vp);
    // a target >= V is a fatal error with a message (checked in a child process)
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);  // an op that fails to die may hang in OpenMP after fork: turn that into a failure
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        int bad[N] = {2, -1, 0, V, 3, 2};
        cpu_crossentropy_forward(c.losses, c.logits, bad, N, V, Vp);
        _exit(0);  // must not get here
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "crossentropy: target >= V must die (status %d)", status);
    free(c.logits), free(c.losses), free(c.dlosses), free(dlogits), free(losses0), free(dlogits0);
}

// A large logit in a real column must not overflow (max-shifted softmax).
static void test_crossentropy_stable(void) {
    real logits[4] = {1000, 0, -1000, 5};
    int y = 1;
    real loss, dl = 1, dz[4];
    cpu_crossentropy_forward(&loss, logits, &y, 1, 3, 4);
    cpu_crossentropy_backward(dz, logits, &y, dl, 1, 3, 4);
    CHECK(fabs(loss - 1000) <= 1e-9 && fabs(dz[0] - 1) <= 1e-12 && fabs(dz[1] + 1) <= 1e-12 && dz[3] == 0,
          "crossentropy with logit 1000: loss %.17g", (double)loss);
}

// ---------------------------------------------------------------- thread-count independence

static void test_threads(void) {
    enum { B = 3, T = 11, C = 24, NH = 3, N = 37, CM = 45, OC = 29, V = 50, Vp = 64 };
    int tok[B * T], tgt[N];
    for (int i = 0; i < B * T; i++) tok[i] = (int)rng_below(&g_rng, V);
    for (int i = 0; i < N; i++) tgt[i] = i % 7 == 3 ? -1 : (int)rng_below(&g_rng, V);
    size_t nbig = 100003;
    real *wte = randn((size_t)V * C, 1), *wpe = randn((size_t)T * C, 1), *x = randn((size_t)N * CM, 1);
    real *lw = randn(CM, 1), *lb = randn(CM, 1), *w = randn((size_t)OC * CM, 1), *bias = randn(OC, 1);
    real *qkv = randn((size_t)B * T * 3 * C, 1), *logits = randn((size_t)N * Vp, 2), *big = randn(nbig, 1);
    real *dout_e = randn((size_t)B * T * C, 1), *dout_x = randn((size_t)N * CM, 1), *dout_m = randn((size_t)N * OC, 1);
    real *dl = randn(N, 1);
    // outputs for thread counts 1, 2, 3 (index r)
    enum { NOUT = 17 };
    size_t sz[NOUT] = {(size_t)B * T * C, (size_t)N * CM, N, N, (size_t)N * OC, (size_t)B * T * C, (size_t)B * NH * T,
                       (size_t)N * CM, (size_t)N * CM, N, (size_t)V * C, (size_t)T * C, (size_t)N * CM, CM, CM,
                       (size_t)N * CM, (size_t)OC * CM + OC};
    const char *names[NOUT] = {"embed_forward", "layernorm_forward out", "layernorm mean", "layernorm rstd",
                               "matmul_forward", "attention_forward out", "attention lse", "gelu_forward",
                               "add_forward", "crossentropy_forward", "embed_backward dwte", "embed_backward dwpe",
                               "layernorm_backward dinp", "layernorm_backward dw", "layernorm_backward db",
                               "matmul_backward dinp", "matmul_backward dw+dbias"};
    real *res[3][NOUT];
    real *dqkv[3], *dlogits[3], *dgelu[3];
    double ss[3];
    int saved_threads = omp_get_max_threads();
    for (int r = 0; r < 3; r++) {
        omp_set_num_threads(r + 1);
        for (int k = 0; k < NOUT; k++) res[r][k] = vec(sz[k]);
        real **o = res[r];
        cpu_embed_forward(o[0], tok, wte, wpe, B, T, C);
        cpu_layernorm_forward(o[1], o[2], o[3], x, lw, lb, N, CM, 1e-5);
        cpu_matmul_forward(o[4], x, w, bias, N, CM, OC);
        cpu_attention_forward(o[5], o[6], qkv, B, T, C, NH);
        cpu_gelu_forward(o[7], x, (size_t)N * CM);
        cpu_add_forward(o[8], x, dout_x, (size_t)N * CM);
        cpu_crossentropy_forward(o[9], logits, tgt, N, V, Vp);
        cpu_embed_backward(o[10], o[11], dout_e, tok, B, T, C);
        cpu_layernorm_backward(o[12], o[13], o[14], dout_x, x, lw, o[2], o[3], N, CM);
        cpu_matmul_backward(o[15], o[16], o[16] + (size_t)OC * CM, dout_m, x, w, N, CM, OC);
        dqkv[r] = vec((size_t)B * T * 3 * C), dlogits[r] = vec((size_t)N * Vp), dgelu[r] = vec((size_t)N * CM);
        cpu_attention_backward(dqkv[r], dout_e, qkv, o[5], o[6], B, T, C, NH);
        cpu_crossentropy_backward(dlogits[r], logits, tgt, dl[0], N, V, Vp);
        cpu_gelu_backward(dgelu[r], x, dout_x, (size_t)N * CM);
        ss[r] = cpu_sum_squares(big, nbig);
    }
    omp_set_num_threads(saved_threads);
    for (int r = 1; r < 3; r++) {
        char what[96];
        for (int k = 0; k < NOUT; k++) {
            snprintf(what, sizeof what, "%s with %d threads vs 1", names[k], r + 1);
            check_same(what, res[r][k], res[0][k], sz[k]);
        }
        snprintf(what, sizeof what, "attention_backward with %d threads vs 1", r + 1);
        check_same(what, dqkv[r], dqkv[0], (size_t)B * T * 3 * C);
        snprintf(what, sizeof what, "crossentropy_backward with %d threads vs 1", r + 1);
        check_same(what, dlogits[r], dlogits[0], (size_t)N * Vp);
        snprintf(what, sizeof what, "gelu_backward with %d threads vs 1", r + 1);
        check_same(what, dgelu[r], dgelu[0], (size_t)N * CM);
        CHECK(ss[r] == ss[0], "sum_squares with %d threads vs 1: %.17g vs %.17g", r + 1, ss[r], ss[0]);
    }
    for (int r = 0; r < 3; r++) {
        for (int k = 0; k < NOUT; k++) free(res[r][k]);
        free(dqkv[r]), free(dlogits[r]), free(dgelu[r]);
    }
    free(wte), free(wpe), free(x), free(lw), free(lb), free(w), free(bias), free(qkv), free(logits), free(big);
    free(dout_e), free(dout_x), free(dout_m), free(dl);
}

// ---------------------------------------------------------------- small ops, backend table

static void test_elementwise(void) {
    size_t n = 2047;  // every one of sum_squares' 64 chunks is non-empty
    real *x = randn(n, 1);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += x[i] * x[i];
    CHECK(rel_err(cpu_sum_squares(x, n), want, 1e-300) <= 1e-13, "sum_squares");
    real one = 3;
    CHECK(cpu_sum_squares(&one, 1) == 9 && cpu_sum_squares(x, 0) == 0, "sum_squares tiny n");
    real *y = copy(x, n);
    cpu_scale(y, -0.5, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= y[i] == -0.5 * x[i];
    CHECK(ok, "scale");
    free(x), free(y);
}

static void test_backend_table(void) {
    const Backend *be = backend_cpu();
    CHECK(be->elem_size == sizeof(real), "elem_size");
    // every family is there, and each required member is its cpu_<member> (op_table.h)
    CHECK(be->core && be->norm_glu && be->delta_rule && be->mla && be->moe && be->attnres && be->optim,
          "the CPU backend has every family");
    int entries = 0, wrong = 0;
#define CHECK_ENTRY(fam, member) entries++, wrong += be->fam->member != cpu_##member;
#define CORE_E(m) CHECK_ENTRY(core, m)
#define NORM_GLU_E(m) CHECK_ENTRY(norm_glu, m)
#define DELTA_RULE_E(m) CHECK_ENTRY(delta_rule, m)
#define MLA_E(m) CHECK_ENTRY(mla, m)
#define MOE_E(m) CHECK_ENTRY(moe, m)
#define ATTNRES_E(m) CHECK_ENTRY(attnres, m)
#define OPTIM_E(m) CHECK_ENTRY(optim, m)
    CORE_OPS(CORE_E) NORM_GLU_OPS(NORM_GLU_E) DELTA_RULE_OPS(DELTA_RULE_E) MLA_OPS(MLA_E) MOE_OPS(MOE_E)
    ATTNRES_OPS(ATTNRES_E) OPTIM_OPS(OPTIM_E)
    CHECK(wrong == 0, "%d of %d family entries are not cpu_<member>", wrong, entries);
    CHECK(be->name && be->alloc && be->free && be->zero && be->upload && be->download && be->upload_tokens &&
              be->copy_to_host && be->copy_from_host && be->synchronize,
          "a memory member is NULL");
    real *p = be->alloc(5 * sizeof(real));
    CHECK(p[0] == 0 && p[4] == 0, "alloc zero-fills");
    float src[5] = {1.5f, -2, 0.25f, 3, 4}, back[5];
    be->upload(p, src, 5);
    be->download(back, p, 5);
    CHECK(memcmp(src, back, sizeof src) == 0 && p[0] == 1.5, "upload / download round trip");
    be->zero(p, 5);
    CHECK(p[0] == 0 && p[4] == 0, "zero");
    CHECK(backend_offset(be, p, 3) == p + 3, "backend_offset");
    int t_in[3] = {7, 8, 9}, t_out[3];
    be->upload_tokens(t_out, t_in, 3);
    be->synchronize();
    CHECK(t_out[2] == 9, "upload_tokens");
    be->free(p);
}

// ---------------------------------------------------------------- AdamW by hand

static void test_adamw(void) {
    // lr 0.25, beta1 0.5, beta2 0.75, eps 1e-8, weight decay 0.5, grad_scale 0.5 (binary fractions:
    // every m, v below is exact in float)
    const float lr = 0.25f, b1 = 0.5f, b2 = 0.75f, eps = 1e-8f, wd = 0.5f, gs = 0.5f;
    const double e = eps;
    real p[3] = {1.0, -2.0, 0.5};
    float m[3] = {0}, v[3] = {0};
    // step 1: raw grads {2, -4, 0} -> g = {1, -2, 0}
    //   m = 0.5*0 + 0.5*g = {0.5, -1, 0};  v = 0.75*0 + 0.25*g^2 = {0.25, 1, 0}
    //   m_hat = m / (1 - 0.5) = {1, -2, 0};  v_hat = v / (1 - 0.75) = {1, 4, 0}
    //   p -= 0.25 * (m_hat / (sqrt(v_hat) + eps) + 0.5 * p)
    real g1[3] = {2.0, -4.0, 0.0};
    cpu_adamw_update(p, g1, m, v, NULL, 3, lr, b1, b2, eps, wd, gs, 1);
    double p1[3] = {1.0 - 0.25 * (1.0 / (1.0 + e) + 0.5 * 1.0),     // = 0.625 (up to eps)
                    -2.0 - 0.25 * (-2.0 / (2.0 + e) + 0.5 * -2.0),  // = -1.5
                    0.5 - 0.25 * (0.0 / (0.0 + e) + 0.5 * 0.5)};    // = 0.4375
    CHECK(m[0] == 0.5f && m[1] == -1.0f && m[2] == 0.0f, "adamw step 1 m = {%g, %g, %g}", m[0], m[1], m[2]);
    CHECK(v[0] == 0.25f && v[1] == 1.0f && v[2] == 0.0f, "adamw step 1 v = {%g, %g, %g}", v[0], v[1], v[2]);
    for (int i = 0; i < 3; i++)
        CHECK(rel_err(p[i], p1[i], 1e-300) <= 1e-14, "adamw step 1 param %d: %.17g vs %.17g", i, p[i], p1[i]);
    // step 2: raw grads {-2, 2, 4} -> g = {-1, 1, 2}
    //   m = 0.5*{0.5, -1, 0} + 0.5*{-1, 1, 2} = {-0.25, 0, 1}
    //   v = 0.75*{0.25, 1, 0} + 0.25*{1, 1, 4} = {0.4375, 1, 1}
    //   m_hat = m / (1 - 0.25) = {-1/3, 0, 4/3};  v_hat = v / (1 - 0.5625) = {1, 16/7, 16/7}
    //   p -= 0.25 * (m_hat / (sqrt(v_hat) + eps) + 0.5 * p)
    //   -> p ~ {0.6302083, -1.3125, 0.1623332}
    real g2[3] = {-2.0, 2.0, 4.0};
    cpu_adamw_update(p, g2, m, v, NULL, 3, lr, b1, b2, eps, wd, gs, 2);
    double p2[3] = {p1[0] - 0.25 * ((-1.0 / 3.0) / (1.0 + e) + 0.5 * p1[0]),
                    p1[1] - 0.25 * (0.0 / (sqrt(16.0 / 7.0) + e) + 0.5 * p1[1]),
                    p1[2] - 0.25 * ((4.0 / 3.0) / (sqrt(16.0 / 7.0) + e) + 0.5 * p1[2])};
    CHECK(m[0] == -0.25f && m[1] == 0.0f && m[2] == 1.0f, "adamw step 2 m = {%g, %g, %g}", m[0], m[1], m[2]);
    CHECK(v[0] == 0.4375f && v[1] == 1.0f && v[2] == 1.0f, "adamw step 2 v = {%g, %g, %g}", v[0], v[1], v[2]);
    for (int i = 0; i < 3; i++)
        CHECK(rel_err(p[i], p2[i], 1e-300) <= 1e-14, "adamw step 2 param %d: %.17g vs %.17g", i, p[i], p2[i]);
    CHECK(fabs(p[0] - 0.63020833) < 1e-7 && fabs(p[1] + 1.3125) < 1e-7 && fabs(p[2] - 0.16233322) < 1e-7,
          "adamw step 2 params {%.9g, %.9g, %.9g}", p[0], p[1], p[2]);
}

// ---------------------------------------------------------------- main

int main(void) {
    rng_seed(&g_rng, 1234);
    double t0 = now_seconds();

    test_embed(6, 1);
    test_embed(6, 0);
    test_embed(21, 1);  // more channels than one block of the backward
    test_layernorm(4, 7, 1);
    test_layernorm(3, 40, 1);  // crosses a channel block of the dw/db loop
    test_layernorm(2, 5, 0);
    test_matmul(5, 7, 6, 1);
    test_matmul(3, 4, 9, 0);
    test_matmul(9, 3, 5, 1);   // two full row tiles and a partial one
    test_matmul(1, 1, 1, 1);
    test_matmul(6, 19, 5, 1);  // a vector remainder in the dot product
    const int attn_cfg[][4] = {{1, 1, 4, 1}, {2, 1, 8, 2}, {1, 2, 4, 2}, {2, 5, 12, 3},
                               {1, 7, 16, 2}, {1, 13, 8, 1}, {2, 6, 6, 3}, {1, 9, 32, 4}, {1, 5, 40, 2}};
    for (size_t i = 0; i < sizeof attn_cfg / sizeof attn_cfg[0]; i++)
        test_attention(attn_cfg[i][0], attn_cfg[i][1], attn_cfg[i][2], attn_cfg[i][3]);
    test_gelu();
    test_add();
    test_crossentropy();
    test_crossentropy_stable();
    test_elementwise();
    test_threads();
    test_backend_table();
    test_adamw();

    for (int op = 0; op < OP_COUNT; op++)
        printf("%-13s %6ld gradient elements, max FD rel err %.2e\n", op_names[op], op_elems[op], op_worst[op]);
    printf("%.2f s\n", now_seconds() - t0);
    TEST_MAIN_END();
}
