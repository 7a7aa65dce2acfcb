// Gradient checks (central finite differences, double) for the small block ops:
// RMSNorm, SwiGLU, SiTU, the sigmoid output gate and the GLU MLP helper (glu_mlp.h; with
// and without biases): docs/hybrid.md, "RMSNorm", "SwiGLU", "SiTU", "Sigmoid output gate"
// and "Routed and shared experts". Plus the SiTU properties of docs/hybrid.md,
// "Verification identities".
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fd_check.h"
#include "model/backend.h"
#include "model/ops/norm_glu/glu_mlp.h"
#include "testing.h"

#define H_FD 1e-5

static void report(const char *what, double err) {
    printf("  %-40s max rel err %.3e\n", what, err);
    CHECK(err <= FD_TOL, "%s: %.3e", what, err);
}

// ---- RMSNorm ----
typedef struct { int N, C; real *x, *w, *out, *rstd, *R; double eps; } NormCtx;
static double norm_loss(void *p) {
    NormCtx *c = p;
    cpu_rmsnorm_forward(c->out, c->rstd, c->x, c->w, c->N, c->C, c->eps);
    return dotv(c->out, c->R, (size_t)c->N * c->C);
}
static void test_rmsnorm(void) {
    Rng r;
    rng_seed(&r, 1);
    NormCtx c = {5, 7, NULL, NULL, NULL, NULL, NULL, 1e-5};
    size_t n = (size_t)c.N * c.C;
    c.x = rand_vec(&r, n, 1.0);
    c.w = rand_vec(&r, c.C, 1.0);
    c.R = rand_vec(&r, n, 1.0);
    c.out = zeros(n);
    c.rstd = zeros(c.N);
    real *dx = zeros(n), *dw = rand_vec(&r, c.C, 1.0), *dw0 = zeros(c.C);
    for (int i = 0; i < c.C; i++) dw0[i] = dw[i];
    norm_loss(&c);
    cpu_rmsnorm_backward(dx, dw, c.R, c.x, c.w, c.rstd, c.N, c.C);
    for (int i = 0; i < c.C; i++) dw[i] -= dw0[i];  // it accumulates: remove the initial value
    report("rmsnorm dx", fd_rel_err(norm_loss, &c, c.x, dx, n, H_FD));
    report("rmsnorm dw (accumulated)", fd_rel_err(norm_loss, &c, c.w, dw, c.C, H_FD));
    // forward identity: rows of w*x/rms have unit RMS when w = 1
    for (int i = 0; i < c.C; i++) c.w[i] = 1;
    norm_loss(&c);
    double worst = 0.0;
    for (int i = 0; i < c.N; i++) {
        double ss = 0.0;
        for (int k = 0; k < c.C; k++) ss += c.out[i * c.C + k] * c.out[i * c.C + k];
        worst = fmax(worst, fabs(sqrt(ss / c.C) - 1.0));
    }
    CHECK(worst < 1e-4, "rmsnorm output RMS off by %.3e", worst);
    free(c.x), free(c.w), free(c.R), free(c.out), free(c.rstd), free(dx), free(dw), free(dw0);
}

// ---- GLU activations ----
typedef struct { int N, H; GluAct act; real *x, *out, *R; } GluCtx;
static double glu_loss(void *p) {
    GluCtx *c = p;
    cpu_glu_forward(c->out, c->x, c->N, c->H, c->act);
    return dotv(c->out, c->R, (size_t)c->N * c->H);
}
static void test_glu(GluAct act, double gscale, double uscale, const char *name) {
    Rng r;
    rng_seed(&r, 2);
    GluCtx c = {6, 9, act, NULL, NULL, NULL};
    size_t n = (size_t)c.N * c.H;
    c.x = rand_vec(&r, 2 * n, 1.0);
    for (int i = 0; i < c.N; i++)
        for (int k = 0; k < c.H; k++) {
            c.x[i * 2 * c.H + k] *= gscale;
            c.x[i * 2 * c.H + c.H + k] *= uscale;
        }
    c.R = rand_vec(&r, n, 1.0);
    c.out = zeros(n);
    real *dx = zeros(2 * n);
    cpu_glu_backward(dx, c.R, c.x, c.N, c.H, act);
    char what[96];
    snprintf(what, sizeof what, "%s d[gate|up]", name);
    report(what, fd_rel_err(glu_loss, &c, c.x, dx, 2 * n, H_FD));
    free(c.x), free(c.R), free(c.out), free(dx);
}

static void test_situ_properties(void) {
    // |h| < beta * lbeta, SiTU ~ SiLU * u for small |g|, |u|; a'(0) = 0.5; the minimum of a(g)
    const int n = 4001;
    real *x = zeros(2 * n), *h = zeros(n);
    for (int i = 0; i < n; i++) {
        x[i] = (real)(-40.0 + 80.0 * i / (n - 1));     // g in [-40, 40]
        x[n + i] = (real)(-200.0 + 400.0 * i / (n - 1));  // u in [-200, 200]
    }
    cpu_situ_forward(h, x, 1, n, 4.0, 25.0);
    double hmax = max_abs(h, n);
    CHECK(hmax < 100.0, "SiTU |h| = %g not below beta*lbeta = 100", hmax);
    // small inputs: SiTU ~ SiLU(g) u
    real xs[2 * 5] = {0.01, -0.02, 0.005, 0.015, -0.01, 0.02, 0.01, -0.03, 0.004, 0.02};
    real hs[5], hw[5];
    cpu_situ_forward(hs, xs, 1, 5, 4.0, 25.0);
    cpu_swiglu_forward(hw, xs, 1, 5);
    double rel = 0.0;
    for (int i = 0; i < 5; i++) rel = fmax(rel, fabs(hs[i] - hw[i]) / fabs(hw[i]));
    CHECK(rel < 1e-3, "SiTU vs SiLU*u for small inputs: rel diff %g", rel);
    // a(g) minimum near g = -1.219, value ~ -0.2698 (docs/hybrid.md, "SiTU"): scan with
    // u = 1, no cap
    real xm[2 * 2001], hm[2001];
    for (int i = 0; i < 2001; i++) xm[i] = (real)(-3.0 + 3.0 * i / 2000), xm[2001 + i] = 1;
    cpu_situ_forward(hm, xm, 1, 2001, 4.0, 0.0);
    int at = 0;
    for (int i = 1; i < 2001; i++)
        if (hm[i] < hm[at]) at = i;
    CHECK(fabs(xm[at] + 1.219) < 2e-3 && fabs(hm[at] + 0.2698) < 1e-4, "SiTU minimum %g at g = %g", hm[at], xm[at]);
    free(x), free(h);
}

// ---- sigmoid gate ----
typedef struct { size_t n; real *o, *z, *y, *R; } GateCtx;
static double gate_loss(void *p) {
    GateCtx *c = p;
    cpu_sigmoid_gate_forward(c->y, c->o, c->z, c->n);
    return dotv(c->y, c->R, c->n);
}
static void test_gate(void) {
    Rng r;
    rng_seed(&r, 3);
    GateCtx c = {23, NULL, NULL, NULL, NULL};
    c.o = rand_vec(&r, c.n, 1.0);
    c.z = rand_vec(&r, c.n, 3.0);
    c.R = rand_vec(&r, c.n, 1.0);
    c.y = zeros(c.n);
    real *d_o = zeros(c.n), *dz = zeros(c.n);
    cpu_sigmoid_gate_backward(d_o, dz, c.R, c.o, c.z, c.n);
    report("sigmoid gate do", fd_rel_err(gate_loss, &c, c.o, d_o, c.n, H_FD));
    report("sigmoid gate dz", fd_rel_err(gate_loss, &c, c.z, dz, c.n, H_FD));
    free(c.o), free(c.z), free(c.R), free(c.y), free(d_o), free(dz);
}

// ---- the GLU MLP helper (glu_mlp.h) on the CPU tables ----
typedef struct { int N, C, M; GluAct act; real *x, *w13, *b13, *w2, *b2, *h, *a, *out, *R; } GluMlpCtx;
static double glu_mlp_loss(void *p) {
    GluMlpCtx *c = p;
    glu_mlp_forward(cpu_core_ops(), cpu_norm_glu_ops(), c->out, c->h, c->a, c->x, c->w13, c->b13, c->w2, c->b2, c->N,
                    c->C, c->M, c->act);
    return dotv(c->out, c->R, (size_t)c->N * c->C);
}
static void glu_mlp_grads(GluMlpCtx *c, real *dx, real *dw13, real *db13, real *dw2, real *db2, real *dh, real *da) {
    glu_mlp_backward(cpu_core_ops(), cpu_norm_glu_ops(), dx, dw13, db13, dw2, db2, dh, da, c->R, c->x, c->h, c->a,
                     c->w13, c->w2, c->N, c->C, c->M, c->act);
}
static void report_glu_mlp(const char *name, const char *what, double err) {
    char label[96];
    snprintf(label, sizeof label, "%s glu mlp %s", name, what);
    report(label, err);
}
// with_bias: b13 and b2 present (the dense MLP with bias = true); else NULL (the experts)
static void test_glu_mlp(GluAct act, int with_bias, const char *name) {
    Rng r;
    rng_seed(&r, 4);
    GluMlpCtx c = {5, 6, 4, act, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t nx = (size_t)c.N * c.C, n13 = (size_t)2 * c.M * c.C, n2 = (size_t)c.C * c.M;
    c.x = rand_vec(&r, nx, 1.0);
    c.w13 = rand_vec(&r, n13, 0.7);
    c.w2 = rand_vec(&r, n2, 0.7);
    c.R = rand_vec(&r, nx, 1.0);
    if (with_bias) c.b13 = rand_vec(&r, (size_t)2 * c.M, 0.5), c.b2 = rand_vec(&r, c.C, 0.5);
    c.h = zeros((size_t)c.N * 2 * c.M);
    c.a = zeros((size_t)c.N * c.M);
    c.out = zeros(nx);
    real *dx = zeros(nx), *dw13 = zeros(n13), *dw2 = zeros(n2);
    real *db13 = with_bias ? zeros((size_t)2 * c.M) : NULL, *db2 = with_bias ? zeros(c.C) : NULL;
    real *dh = zeros((size_t)c.N * 2 * c.M), *da = zeros((size_t)c.N * c.M);
    glu_mlp_loss(&c);
    glu_mlp_grads(&c, dx, dw13, db13, dw2, db2, dh, da);
    report_glu_mlp(name, "dx", fd_rel_err(glu_mlp_loss, &c, c.x, dx, nx, H_FD));
    report_glu_mlp(name, "dW13", fd_rel_err(glu_mlp_loss, &c, c.w13, dw13, n13, H_FD));
    report_glu_mlp(name, "dW2", fd_rel_err(glu_mlp_loss, &c, c.w2, dw2, n2, H_FD));
    if (with_bias) {
        report_glu_mlp(name, "db13", fd_rel_err(glu_mlp_loss, &c, c.b13, db13, (size_t)2 * c.M, H_FD));
        report_glu_mlp(name, "db2", fd_rel_err(glu_mlp_loss, &c, c.b2, db2, c.C, H_FD));
    }
    // backward accumulates into the weight gradients: a second call doubles them
    real *dw2b = zeros(n2), *db2b = zeros(c.C);
    for (size_t i = 0; i < n2; i++) dw2b[i] = 2 * dw2[i];
    for (int i = 0; with_bias && i < c.C; i++) db2b[i] = 2 * db2[i];
    glu_mlp_loss(&c);  // refresh the saved h, a (the FD loop left those of a perturbed input)
    glu_mlp_grads(&c, dx, dw13, db13, dw2, db2, dh, da);
    CHECK(max_abs_diff(dw2, dw2b, n2) <= 1e-12 * max_abs(dw2b, n2), "glu mlp dW2 does not accumulate");
    if (with_bias)
        CHECK(max_abs_diff(db2, db2b, c.C) <= 1e-12 * max_abs(db2b, c.C), "glu mlp db2 does not accumulate");
    free(c.x), free(c.w13), free(c.b13), free(c.w2), free(c.b2), free(c.R), free(c.h), free(c.a), free(c.out);
    free(dx), free(dw13), free(db13), free(dw2), free(db2), free(dh), free(da), free(dw2b), free(db2b);
}

// RMSNorm and the GLU MLP forward + backward are bit-identical with 1 and 2 threads
static void test_threads(void) {
    Rng r;
    rng_seed(&r, 5);
    const int N = 64, C = 24, M = 20;
    GluAct act = {GLU_SITU, 4.0, 25.0};
    real *x = rand_vec(&r, (size_t)N * C, 1), *w = rand_vec(&r, C, 1), *w13 = rand_vec(&r, (size_t)2 * M * C, 0.3);
    real *w2 = rand_vec(&r, (size_t)C * M, 0.3), *R = rand_vec(&r, (size_t)N * C, 1);
    real *res[2][6];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k + 1);
        real *y = zeros((size_t)N * C), *rs = zeros(N), *dx = zeros((size_t)N * C), *dw = zeros(C);
        real *h = zeros((size_t)N * 2 * M), *a = zeros((size_t)N * M), *o = zeros((size_t)N * C);
        real *dh = zeros((size_t)N * 2 * M), *da = zeros((size_t)N * M), *dw13 = zeros((size_t)2 * M * C);
        real *dw2 = zeros((size_t)C * M), *dxf = zeros((size_t)N * C);
        cpu_rmsnorm_forward(y, rs, x, w, N, C, 1e-5);
        cpu_rmsnorm_backward(dx, dw, R, x, w, rs, N, C);
        glu_mlp_forward(cpu_core_ops(), cpu_norm_glu_ops(), o, h, a, y, w13, NULL, w2, NULL, N, C, M, act);
        glu_mlp_backward(cpu_core_ops(), cpu_norm_glu_ops(), dxf, dw13, NULL, dw2, NULL, dh, da, R, y, h, a, w13, w2, N,
                         C, M, act);
        res[k][0] = dx, res[k][1] = dw, res[k][2] = o, res[k][3] = dxf, res[k][4] = dw13, res[k][5] = dw2;
        free(y), free(rs), free(h), free(a), free(dh), free(da);
    }
    omp_set_num_threads(1);
    size_t sz[6] = {(size_t)N * C, C, (size_t)N * C, (size_t)N * C, (size_t)2 * M * C, (size_t)C * M};
    int same = 1;
    for (int i = 0; i < 6; i++) same &= !memcmp(res[0][i], res[1][i], sz[i] * sizeof(real));
    CHECK(same, "rmsnorm / GLU MLP results differ between 1 and 2 threads");
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 6; i++) free(res[k][i]);
    free(x), free(w), free(w13), free(w2), free(R);
}

int main(void) {
    omp_set_num_threads(1);  // FD loops: many tiny ops (threads are checked in test_threads)
    test_threads();
    test_rmsnorm();
    GluAct swiglu = {GLU_SWIGLU, 0, 0}, situ = {GLU_SITU, 4.0, 25.0}, situ_nocap = {GLU_SITU, 1.0, 0.0};
    test_glu(swiglu, 3.0, 2.0, "swiglu");
    test_glu(situ, 3.0, 2.0, "situ(4,25)");
    test_glu(situ, 10.0, 40.0, "situ(4,25) wide g,u");
    test_glu(situ_nocap, 2.0, 2.0, "situ(1,none)");
    test_situ_properties();
    test_gate();
    test_glu_mlp(swiglu, 0, "swiglu");
    test_glu_mlp(situ, 0, "situ");
    test_glu_mlp(swiglu, 1, "swiglu+bias");
    test_glu_mlp(situ, 1, "situ+bias");
    TEST_MAIN_END();
}
