// KDA layer pre/post ops against central finite differences in double (docs/delta-rule.md,
// "Layer-op gradient checks"): short conv + SiLU with conv state and document boundaries, L2
// norm, the gate in both forms, beta, gated RMSNorm (docs/delta-rule.md, "Short causal
// convolution with SiLU", "Gradients of the input transforms", "KDA layer", "Gated RMSNorm of
// the output"); plus the conv decode step and state hand-over, and parameter-gradient
// accumulation.
#include "tests/linear_test_util.h"
#include "tests/testing.h"

#define TOL 1e-6
#define EPS 1e-6

static double worst_fd;

static void report(const char *op, const char *tensor, double e) {
    if (e > worst_fd) worst_fd = e;
    printf("  %-34s %-10s fd rel err %.1e\n", op, tensor, e);
    CHECK(e <= TOL, "%s: %s fd rel err %.3e", op, tensor, e);
}

// ---- short conv -----------------------------------------------------------------------
typedef struct {
    int B, T, D, W, nseq, silu;
    const int *offsets;
    real *x, *w, *bias, *state_in;  // bias / state_in may be NULL
    real *dy, *dso;                 // loss weights for y and state_out
} Conv;

static double conv_loss(void *ctx) {
    Conv *c = ctx;
    const int N = c->offsets ? c->nseq : c->B;
    const size_t ny = (size_t)c->B * c->T * c->D, ns = (size_t)N * c->D * (c->W - 1);
    real *y = tnew(ny), *so = tnew(ns);
    cpu_short_conv_forward(y, so, c->x, c->w, c->bias, c->state_in, c->B, c->T, c->D, c->W, c->offsets, c->nseq,
                           c->silu);
    double L = dot(c->dy, y, ny) + dot(c->dso, so, ns);
    free(y), free(so);
    return L;
}

static void conv_case(int B, int T, int D, int W, const int *offsets, int nseq, int silu, int use_bias, int use_state,
                      uint64_t seed, const char *label) {
    Rng r;
    rng_seed(&r, seed);
    const int N = offsets ? nseq : B;
    const size_t nx = (size_t)B * T * D, ns = (size_t)N * D * (W - 1);
    Conv c = {B, T, D, W, nseq, silu, offsets, tnew(nx), tnew((size_t)D * W), use_bias ? tnew(D) : NULL,
              use_state ? tnew(ns) : NULL, tnew(nx), tnew(ns)};
    fill_normal(&r, c.x, nx, 1.0);
    fill_normal(&r, c.w, (size_t)D * W, 0.7);
    if (c.bias) fill_normal(&r, c.bias, D, 0.5);
    if (c.state_in) fill_normal(&r, c.state_in, ns, 1.0);
    fill_normal(&r, c.dy, nx, 1.0);
    fill_normal(&r, c.dso, ns, 1.0);
    real *dx = tnew(nx), *dw = tnew((size_t)D * W), *db = tnew(D), *dsi = tnew(ns);
    cpu_short_conv_backward(dx, dw, c.bias ? db : NULL, c.state_in ? dsi : NULL, c.dy, c.dso, c.x, c.w, c.bias,
                            c.state_in, B, T, D, W, offsets, nseq, silu);
    char op[96];
    snprintf(op, sizeof op, "short conv %s%s", label, silu ? "" : " (no act)");
    report(op, "dx", fd_check(conv_loss, &c, c.x, nx, dx, EPS));
    report(op, "dw", fd_check(conv_loss, &c, c.w, (size_t)D * W, dw, EPS));
    if (c.bias) report(op, "dbias", fd_check(conv_loss, &c, c.bias, D, db, EPS));
    if (c.state_in) report(op, "dstate_in", fd_check(conv_loss, &c, c.state_in, ns, dsi, EPS));

    // parameter gradients accumulate: a second call adds the same amount again
    real *dw2 = tnew((size_t)D * W), *db2 = tnew(D);
    memcpy(dw2, dw, (size_t)D * W * sizeof(real));
    memcpy(db2, db, D * sizeof(real));
    cpu_short_conv_backward(dx, dw2, c.bias ? db2 : NULL, NULL, c.dy, c.dso, c.x, c.w, c.bias, c.state_in, B, T, D,
                            W, offsets, nseq, silu);
    double acc_err = 0;
    for (int i = 0; i < D * W; i++) acc_err = fmax(acc_err, fabs((double)dw2[i] - 2.0 * dw[i]));
    if (c.bias)
        for (int i = 0; i < D; i++) acc_err = fmax(acc_err, fabs((double)db2[i] - 2.0 * db[i]));
    CHECK(acc_err <= 1e-12, "%s: parameter gradients do not accumulate (%.2e)", op, acc_err);

    free(c.x), free(c.w), free(c.bias), free(c.state_in), free(c.dy), free(c.dso);
    free(dx), free(dw), free(db), free(dsi), free(dw2), free(db2);
}

// decode steps and state hand-over reproduce one forward over the whole sequence
static void conv_decode(void) {
    const int B = 2, T = 10, D = 3, W = 4;
    Rng r;
    rng_seed(&r, 7);
    const size_t nx = (size_t)B * T * D, ns = (size_t)B * D * (W - 1);
    real *x = tnew(nx), *w = tnew((size_t)D * W), *bias = tnew(D), *s0 = tnew(ns);
    fill_normal(&r, x, nx, 1.0);
    fill_normal(&r, w, (size_t)D * W, 0.7);
    fill_normal(&r, bias, D, 0.5);
    fill_normal(&r, s0, ns, 1.0);
    real *y = tnew(nx), *sT = tnew(ns);
    cpu_short_conv_forward(y, sT, x, w, bias, s0, B, T, D, W, NULL, 0, 1);

    // token by token
    real *st = tnew(ns), *xt = tnew((size_t)B * D), *yt = tnew((size_t)B * D);
    memcpy(st, s0, ns * sizeof(real));
    double err = 0;
    for (int t = 0; t < T; t++) {
        for (int b = 0; b < B; b++) memcpy(xt + (size_t)b * D, x + ((size_t)b * T + t) * D, D * sizeof(real));
        cpu_short_conv_step(yt, st, xt, w, bias, B, D, W, 1);
        for (int b = 0; b < B; b++)
            for (int c = 0; c < D; c++) err = fmax(err, fabs((double)yt[b * D + c] - y[((size_t)b * T + t) * D + c]));
    }
    double es = tensor_err(st, sT, ns);
    CHECK(err <= 1e-14 && es == 0, "conv decode step: y err %.2e, state err %.2e", err, es);

    // prefill in two pieces (T = 2 + 8) with the state handed over (B = 1 per call)
    double e2 = 0;
    for (int b = 0; b < B; b++) {
        real *ya = tnew((size_t)T * D), *mid = tnew((size_t)D * (W - 1)), *end = tnew((size_t)D * (W - 1));
        const real *xb = x + (size_t)b * T * D, *s0b = s0 + (size_t)b * D * (W - 1);
        cpu_short_conv_forward(ya, mid, xb, w, bias, s0b, 1, 2, D, W, NULL, 0, 1);
        cpu_short_conv_forward(ya + 2 * D, end, xb + 2 * D, w, bias, mid, 1, T - 2, D, W, NULL, 0, 1);
        e2 = fmax(e2, tensor_err(ya, y + (size_t)b * T * D, (size_t)T * D));
        e2 = fmax(e2, tensor_err(end, sT + (size_t)b * D * (W - 1), (size_t)D * (W - 1)));
        free(ya), free(mid), free(end);
    }
    CHECK(e2 <= 1e-15, "conv state hand-over: err %.2e", e2);
    printf("  short conv decode step: y err %.1e, state err %.1e; two-piece prefill err %.1e\n", err, es, e2);
    free(x), free(w), free(bias), free(s0), free(y), free(sT), free(st), free(xt), free(yt);
}

// ---- L2 norm ----------------------------------------------------------------------------
typedef struct {
    size_t rows;
    int D;
    real *x, *dy;
} L2;
static double l2_loss(void *ctx) {
    L2 *c = ctx;
    real *y = tnew(c->rows * c->D), *rs = tnew(c->rows);
    cpu_l2norm_forward(y, rs, c->x, c->rows, c->D, (real)1e-6);
    double L = dot(c->dy, y, c->rows * c->D);
    free(y), free(rs);
    return L;
}
static void l2_case(void) {
    Rng r;
    rng_seed(&r, 11);
    L2 c = {12, 7, tnew(84), tnew(84)};
    fill_normal(&r, c.x, 84, 1.0);
    c.x[0] = (real)1e-3, c.x[1] = (real)-2e-3;  // include a nearly-zero row start
    fill_normal(&r, c.dy, 84, 1.0);
    real *y = tnew(84), *rs = tnew(12), *dx = tnew(84);
    cpu_l2norm_forward(y, rs, c.x, c.rows, c.D, (real)1e-6);
    cpu_l2norm_backward(dx, c.dy, y, rs, c.rows, c.D);
    report("l2norm", "dx", fd_check(l2_loss, &c, c.x, 84, dx, EPS));
    free(c.x), free(c.dy), free(y), free(rs), free(dx);
}

// ---- gate -------------------------------------------------------------------------------
typedef struct {
    size_t N;
    int H, K;
    real lb;
    real *x, *A_log, *dt_bias, *dg;
} Gate;
static double gate_loss(void *ctx) {
    Gate *c = ctx;
    size_t n = c->N * c->H * c->K;
    real *g = tnew(n);
    cpu_decay_gate_forward(g, c->x, c->A_log, c->dt_bias, c->N, c->H, c->K, c->lb);
    double L = dot(c->dg, g, n);
    free(g);
    return L;
}
static void gate_case(int K, real lb, int use_A, int use_bias, const char *label) {
    Rng r;
    rng_seed(&r, 13 + K);
    const size_t N = 9;
    const int H = 3;
    const size_t n = N * H * K;
    Gate c = {N, H, K, lb, tnew(n), use_A ? tnew(H) : NULL, use_bias ? tnew((size_t)H * K) : NULL, tnew(n)};
    fill_normal(&r, c.x, n, 1.5);
    if (c.A_log)
        for (int h = 0; h < H; h++) c.A_log[h] = (real)log(1.0 + 15.0 * rng_uniform(&r));
    if (c.dt_bias) fill_normal(&r, c.dt_bias, (size_t)H * K, 1.0);
    fill_normal(&r, c.dg, n, 1.0);
    real *dx = tnew(n), *dA = tnew(H), *dbias = tnew((size_t)H * K);
    cpu_decay_gate_backward(dx, c.A_log ? dA : NULL, c.dt_bias ? dbias : NULL, c.dg, c.x, c.A_log, c.dt_bias, N, H, K, lb);
    char op[96];
    snprintf(op, sizeof op, "gate %s", label);
    report(op, "dx", fd_check(gate_loss, &c, c.x, n, dx, EPS));
    if (c.A_log) report(op, "dA_log", fd_check(gate_loss, &c, c.A_log, H, dA, EPS));
    if (c.dt_bias) report(op, "ddt_bias", fd_check(gate_loss, &c, c.dt_bias, (size_t)H * K, dbias, EPS));
    // forward values are log-decays: <= 0, and >= lb for the lower-bound form
    real *g = tnew(n);
    cpu_decay_gate_forward(g, c.x, c.A_log, c.dt_bias, N, H, K, lb);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= g[i] <= 0 && (lb == 0 || g[i] >= lb);
    CHECK(ok, "%s: gate values out of range", op);
    free(c.x), free(c.A_log), free(c.dt_bias), free(c.dg), free(dx), free(dA), free(dbias), free(g);
}

// ---- beta -------------------------------------------------------------------------------
typedef struct {
    size_t n;
    int neg;
    real *b, *dbeta;
} Beta;
static double beta_loss(void *ctx) {
    Beta *c = ctx;
    real *beta = tnew(c->n);
    cpu_beta_forward(beta, c->b, c->n, c->neg);
    double L = dot(c->dbeta, beta, c->n);
    free(beta);
    return L;
}
static void beta_case(int neg) {
    Rng r;
    rng_seed(&r, 17);
    Beta c = {20, neg, tnew(20), tnew(20)};
    fill_normal(&r, c.b, 20, 2.0);
    fill_normal(&r, c.dbeta, 20, 1.0);
    real *beta = tnew(20), *db = tnew(20);
    cpu_beta_forward(beta, c.b, 20, neg);
    cpu_beta_backward(db, c.dbeta, beta, 20, neg);
    report(neg ? "beta (2 sigmoid, neg eigval)" : "beta (sigmoid)", "db", fd_check(beta_loss, &c, c.b, 20, db, EPS));
    free(c.b), free(c.dbeta), free(beta), free(db);
}

// ---- gated RMSNorm ------------------------------------------------------------------------
typedef struct {
    size_t rows;
    int D, swish;
    real *x, *z, *w, *dy;
} GNorm;
static double gnorm_loss(void *ctx) {
    GNorm *c = ctx;
    real *y = tnew(c->rows * c->D), *rs = tnew(c->rows);
    cpu_gated_rmsnorm_forward(y, rs, c->x, c->z, c->w, c->rows, c->D, (real)1e-5, c->swish);
    double L = dot(c->dy, y, c->rows * c->D);
    free(y), free(rs);
    return L;
}
static void gnorm_case(int swish, int use_w) {
    Rng r;
    rng_seed(&r, 19 + swish);
    const size_t rows = 8;  // e.g. B*T*H = 2*2*2
    const int D = 6;
    const size_t n = rows * D;
    GNorm c = {rows, D, swish, tnew(n), tnew(n), use_w ? tnew(D) : NULL, tnew(n)};
    fill_normal(&r, c.x, n, 1.0);
    fill_normal(&r, c.z, n, 1.5);
    if (c.w) fill_normal(&r, c.w, D, 1.0);
    fill_normal(&r, c.dy, n, 1.0);
    real *y = tnew(n), *rs = tnew(rows), *dx = tnew(n), *dz = tnew(n), *dw = tnew(D);
    cpu_gated_rmsnorm_forward(y, rs, c.x, c.z, c.w, rows, D, (real)1e-5, swish);
    cpu_gated_rmsnorm_backward(dx, dz, c.w ? dw : NULL, c.dy, c.x, c.z, c.w, rs, rows, D, swish);
    char op[96];
    snprintf(op, sizeof op, "gated rmsnorm (%s%s)", swish ? "swish" : "sigmoid", use_w ? "" : ", no weight");
    report(op, "dx", fd_check(gnorm_loss, &c, c.x, n, dx, EPS));
    report(op, "dz", fd_check(gnorm_loss, &c, c.z, n, dz, EPS));
    if (c.w) report(op, "dw", fd_check(gnorm_loss, &c, c.w, D, dw, EPS));
    free(c.x), free(c.z), free(c.w), free(c.dy), free(y), free(rs), free(dx), free(dz), free(dw);
}

int main(void) {
    static const int offs[] = {0, 2, 2, 9};  // a 2-token document (< W-1), an empty one, a 7-token one
    conv_case(2, 9, 3, 4, NULL, 0, 1, 1, 1, 1, "B=2 T=9 D=3 W=4");
    conv_case(2, 9, 3, 4, NULL, 0, 0, 1, 1, 2, "B=2 T=9 D=3 W=4");
    conv_case(1, 9, 3, 4, offs, 3, 1, 1, 1, 3, "varlen [0,2,2,9]");
    conv_case(1, 9, 3, 4, offs, 3, 1, 0, 0, 4, "varlen, no bias, zero state");
    conv_decode();
    l2_case();
    gate_case(4, 0, 1, 1, "softplus K=4");
    gate_case(1, 0, 1, 1, "softplus K=1 (GDN)");
    gate_case(4, 0, 0, 0, "softplus, no A_log/dt_bias");
    gate_case(4, (real)-5, 1, 1, "lower bound -5");
    beta_case(0);
    beta_case(1);
    gnorm_case(0, 1);
    gnorm_case(1, 1);
    gnorm_case(0, 0);
    printf("worst fd error over all layer ops: %.2e\n", worst_fd);
    TEST_MAIN_END();
}
