// GPU parity tests of the delta-rule family's layer ops and plain linear attention
// (model/ops/delta_rule/delta_rule.h; kernels/delta_rule/short_conv.cu, layer_ops.cu,
// gated_rmsnorm.cu, linear_attn*.cu): every member against its cpu_<member> (the float CPU
// reference) on fresh random inputs. Method and helpers: tests/gpu/harness.h (bf16-rounded
// inputs, NaN-poisoned outputs, parameter gradients accumulated twice from zero, RMS relative
// error). Tolerances: bf16 outputs TOL_OUT, gradients TOL_GRAD (the bf16 input gradients and
// the fp32 parameter gradients dw, dbias, dA_log, ddt_bias: model/backend.h, `grad_size`), fp32
// states and statistics TOL_F32. Under HYBRID_CUDA_EMU (the CPU emulator, tests/cuda_emu/) small shapes
// only; on a GPU also large ones.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "model/ops/delta_rule/delta_rule.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"

static const DeltaRuleOps *D;

static float *zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static float *host_alloc(size_t n) { return xmalloc(sizeof(float) * (n ? n : 1)); }
static void *bf16_at(void *p, size_t n) { return backend_offset(G, p, n); }  // element n of a device bf16 tensor

// host fp32 values rounded to bf16 in place (what a bf16 tensor holds)
static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

// ---- sequences ---------------------------------------------------------------------------
// varlen offsets over T rows from segment lengths (the last segment takes the rest)
typedef struct {
    int B, T, N;
    int *off;   // host offsets or NULL
    int *doff;  // device offsets or NULL
} Seqs;

static Seqs seqs_fixed(int B, int T) {
    Seqs s = {B, T, B, NULL, NULL};
    return s;
}

static Seqs seqs_varlen(const int *lens, int n, int T) {
    Seqs s = {1, T, n + 1, xmalloc(sizeof(int) * (n + 2)), NULL};
    s.off[0] = 0;
    for (int i = 0; i < n; i++) s.off[i + 1] = s.off[i] + lens[i];
    if (s.off[n] > T) die("seqs_varlen: lengths exceed T");
    s.off[n + 1] = T;
    s.doff = dev_tokens(s.off, (size_t)n + 2);
    return s;
}

static void seqs_free(Seqs *s) {
    if (s->doff) G->free(s->doff);
    free(s->off);
}

// ---- short conv ---------------------------------------------------------------------------
// two device tensors hold the same bits (checked: the number of differing elements is 0)
static void same_bits(const char *what, float *a, float *b, size_t n) {
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(a + i, b + i, sizeof(float)) != 0;
    expect(what, (double)diff, 0);
    free(a), free(b);
}
static void same_bits_bf16(const char *what, const void *a, const void *b, size_t n) {
    same_bits(what, get_bf16(a, n), get_bf16(b, n), n);
}
static void same_bits_f32(const char *what, const float *a, const float *b, size_t n) {
    same_bits(what, get_f32(a, n), get_f32(b, n), n);
}

static void test_short_conv(Seqs sq, int Dc, int W, int with_bias, int silu, int with_state_in, int with_state_out,
                            int with_dstate_out) {
    printf("short_conv B=%d T=%d D=%d W=%d%s bias=%d silu=%d state_in=%d state_out=%d dstate_out=%d\n", sq.B, sq.T, Dc,
           W, sq.off ? " varlen" : "", with_bias, silu, with_state_in, with_state_out, with_dstate_out);
    const size_t rows = (size_t)sq.B * sq.T, n = rows * Dc, ns = (size_t)sq.N * Dc * (W - 1);
    float *x = host_rand(n, 1, 0), *w = host_rand((size_t)Dc * W, 0.5f, 0), *b = with_bias ? host_rand(Dc, 0.5f, 0) : NULL;
    float *si = with_state_in ? host_rand(ns, 1, 0) : NULL, *dso = with_dstate_out ? host_rand(ns, 1, 0) : NULL;
    float *y = host_alloc(n), *so = with_state_out ? host_alloc(ns) : NULL;
    cpu_short_conv_forward(y, so, x, w, b, si, sq.B, sq.T, Dc, W, sq.off, sq.N, silu);
    void *dx_ = dev_bf16(x, n), *dw_ = dev_bf16(w, (size_t)Dc * W), *db_ = b ? dev_bf16(b, Dc) : NULL;
    float *dsi = si ? dev_f32(si, ns) : NULL, *dso_ = dso ? dev_f32(dso, ns) : NULL;
    void *dy_out = dev_bf16(NULL, n);
    float *dso_out = so ? dev_f32(NULL, ns) : NULL;
    poison_bf16(dy_out, n);
    if (dso_out) poison_f32(dso_out, ns);
    D->short_conv_forward(dy_out, (real *)dso_out, dx_, dw_, db_, (real *)dsi, sq.B, sq.T, Dc, W, sq.doff, sq.N, silu);
    cmp_bf16("forward y", dy_out, y, n, TOL_OUT);
    if (so && ns) cmp_f32("forward state_out (fp32)", dso_out, so, ns, TOL_F32);

    float *dy = host_rand(n, 1, 0), *gx = host_alloc(n), *gw = zeros((size_t)Dc * W), *gb = zeros(Dc);
    float *gsi = with_state_in ? host_alloc(ns) : NULL;
    void *ddy = dev_bf16(dy, n), *ddx = dev_bf16(NULL, n);
    float *dgw = dev_f32(gw, (size_t)Dc * W), *dgb = with_bias ? dev_f32(gb, Dc) : NULL;  // from zero (gw, gb)
    float *dgsi = gsi ? dev_f32(NULL, ns) : NULL;
    for (int rep = 0; rep < 2; rep++) {
        cpu_short_conv_backward(gx, gw, with_bias ? gb : NULL, gsi, dy, dso, x, w, b, si, sq.B, sq.T, Dc, W, sq.off,
                                sq.N, silu);
        poison_bf16(ddx, n);
        if (dgsi) poison_f32(dgsi, ns);
        D->short_conv_backward(ddx, (real *)dgw, (real *)dgb, (real *)dgsi, ddy, (real *)dso_, dx_, dw_, db_, (real *)dsi, sq.B, sq.T,
                               Dc, W, sq.doff, sq.N, silu);
    }
    cmp_bf16("backward dx", ddx, gx, n, TOL_GRAD);
    cmp_f32("backward dw (fp32, x2, accumulated)", dgw, gw, (size_t)Dc * W, TOL_F32);
    if (with_bias) cmp_f32("backward dbias (fp32, x2, accumulated)", dgb, gb, Dc, TOL_F32);
    if (gsi && ns) cmp_f32("backward dstate_in (fp32)", dgsi, gsi, ns, TOL_F32);

    // the fused kernels (W <= 4) against the general ones (HYBRID_CONV_REF=1): the same bits
    if (W <= 4) {
        void *ry = dev_bf16(NULL, n), *rdx = dev_bf16(NULL, n);
        float *rz = zeros((size_t)Dc * W), *rgw = dev_f32(rz, (size_t)Dc * W), *rgb = with_bias ? dev_f32(rz, Dc) : NULL;
        float *rso = so ? dev_f32(NULL, ns) : NULL, *rgsi = gsi ? dev_f32(NULL, ns) : NULL;
        free(rz);
        poison_bf16(ry, n);
        if (rso) poison_f32(rso, ns);
        setenv("HYBRID_CONV_REF", "1", 1);
        D->short_conv_forward(ry, (real *)rso, dx_, dw_, db_, (real *)dsi, sq.B, sq.T, Dc, W, sq.doff, sq.N, silu);
        for (int rep = 0; rep < 2; rep++) {
            poison_bf16(rdx, n);
            if (rgsi) poison_f32(rgsi, ns);
            D->short_conv_backward(rdx, (real *)rgw, (real *)rgb, (real *)rgsi, ddy, (real *)dso_, dx_, dw_, db_, (real *)dsi, sq.B,
                                   sq.T, Dc, W, sq.doff, sq.N, silu);
        }
        unsetenv("HYBRID_CONV_REF");
        same_bits_bf16("forward y, fused = general", dy_out, ry, n);
        if (so && ns) same_bits_f32("forward state_out, fused = general", dso_out, rso, ns);
        same_bits_bf16("backward dx, fused = general", ddx, rdx, n);
        same_bits_f32("backward dw, fused = general", dgw, rgw, (size_t)Dc * W);
        if (with_bias) same_bits_f32("backward dbias, fused = general", dgb, rgb, Dc);
        if (gsi && ns) same_bits_f32("backward dstate_in, fused = general", dgsi, rgsi, ns);
        void *rb[] = {ry, rdx, rgw, rgb, rso, rgsi};
        for (size_t i = 0; i < sizeof rb / sizeof *rb; i++)
            if (rb[i]) G->free(rb[i]);
    }
    void *bufs[] = {dx_, dw_, db_, dsi, dso_, dy_out, dso_out, ddy, ddx, dgw, dgb, dgsi};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) G->free(bufs[i]);
    free(x), free(w), free(b), free(si), free(dso), free(y), free(so), free(dy), free(gx), free(gw), free(gb), free(gsi);
}

// ---- the optional fused op short_conv_l2norm_forward ------------------------------------------
// against the CPU reference (the convolution, its output rounded to bf16 as the device keeps it,
// then the L2 norm) and against the two device ops it replaces: the same bits, y and rstd. Heads
// of 128 run the fused kernel (several channel slabs, a partial one; document resets take its
// general walk), heads of 64 its fallback through the two ops.
static void test_short_conv_l2norm(Seqs sq, int H, int K) {
    if (!D->short_conv_l2norm_forward) {
        printf("short_conv_l2norm_forward: fused op not in the table (HYBRID_CUDA_NO_FUSE)\n");
        return;
    }
    const int Dc = H * K, W = 4;
    printf("short_conv_l2norm B=%d T=%d%s H=%d K=%d\n", sq.B, sq.T, sq.off ? " varlen" : "", H, K);
    const size_t rows = (size_t)sq.B * sq.T, n = rows * Dc, nr = rows * H;
    float *x = host_rand(n, 1, 0), *w = host_rand((size_t)Dc * W, 0.5f, 0);
    float *yc = host_alloc(n), *y = host_alloc(n), *rs = host_alloc(nr);
    cpu_short_conv_forward(yc, NULL, x, w, NULL, NULL, sq.B, sq.T, Dc, W, sq.off, sq.N, 1);
    round_bf16(yc, n);
    cpu_l2norm_forward(y, rs, yc, nr, K, 1e-6f);
    void *dx_ = dev_bf16(x, n), *dw_ = dev_bf16(w, (size_t)Dc * W);
    void *fy = dev_bf16(NULL, n), *sy = dev_bf16(NULL, n), *sc = dev_bf16(NULL, n);
    float *fr = dev_f32(NULL, nr), *sr = dev_f32(NULL, nr);
    poison_bf16(fy, n);
    poison_f32(fr, nr);
    poison_bf16(sy, n);
    poison_f32(sr, nr);
    D->short_conv_l2norm_forward(fy, (real *)fr, dx_, dw_, sq.B, sq.T, Dc, W, sq.doff, sq.N, K, 1e-6f);
    cmp_bf16("forward y", fy, y, n, TOL_OUT);
    cmp_f32("forward rstd (fp32)", fr, rs, nr, TOL_F32);
    D->short_conv_forward(sc, NULL, dx_, dw_, NULL, NULL, sq.B, sq.T, Dc, W, sq.doff, sq.N, 1);
    D->l2norm_forward(sy, (real *)sr, sc, nr, K, 1e-6f);
    same_bits_bf16("forward y, fused = short_conv_forward then l2norm_forward", fy, sy, n);
    same_bits_f32("forward rstd, fused = the two ops", fr, sr, nr);
    void *bufs[] = {dx_, dw_, fy, sy, sc, fr, sr};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) G->free(bufs[i]);
    free(x), free(w), free(yc), free(y), free(rs);
}

// T decode steps against T calls of the CPU step
static void test_short_conv_step(int N, int Dc, int W, int with_bias, int silu, int T) {
    printf("short_conv_step N=%d D=%d W=%d bias=%d silu=%d steps=%d\n", N, Dc, W, with_bias, silu, T);
    const size_t nx = (size_t)N * Dc, ns = nx * (W - 1);
    float *w = host_rand((size_t)Dc * W, 0.5f, 0), *b = with_bias ? host_rand(Dc, 0.5f, 0) : NULL;
    float *st = host_rand(ns, 1, 0), *x = host_rand(nx * T, 1, 0), *y = host_alloc(nx * T);
    float *dst = dev_f32(st, ns);
    void *dw_ = dev_bf16(w, (size_t)Dc * W), *db_ = b ? dev_bf16(b, Dc) : NULL, *dx_ = dev_bf16(x, nx * T);
    void *dy_ = dev_bf16(NULL, nx * T);
    poison_bf16(dy_, nx * T);
    for (int t = 0; t < T; t++) {
        cpu_short_conv_step(y + nx * t, st, x + nx * t, w, b, N, Dc, W, silu);
        D->short_conv_step(bf16_at(dy_, nx * t), (real *)dst, bf16_at(dx_, nx * t), dw_, db_, N, Dc, W, silu);
    }
    cmp_bf16("step outputs", dy_, y, nx * T, TOL_OUT);
    if (ns) cmp_f32("step state (fp32)", dst, st, ns, TOL_F32);
    G->free(dst), G->free(dw_), G->free(dx_), G->free(dy_);
    if (db_) G->free(db_);
    free(w), free(b), free(st), free(x), free(y);
}

// ---- L2 norm ----------------------------------------------------------------------------------
static void test_l2norm(size_t rows, int Dd) {
    printf("l2norm rows=%zu D=%d\n", rows, Dd);
    const size_t n = rows * Dd;
    float *x = host_rand(n, 1, 0), *y = host_alloc(n), *rstd = host_alloc(rows);
    cpu_l2norm_forward(y, rstd, x, rows, Dd, 1e-6f);
    void *dx_ = dev_bf16(x, n), *dy_ = dev_bf16(NULL, n);
    float *drstd = dev_f32(NULL, rows);
    poison_bf16(dy_, n);
    poison_f32(drstd, rows);
    D->l2norm_forward(dy_, (real *)drstd, dx_, rows, Dd, 1e-6f);
    cmp_bf16("forward y", dy_, y, n, TOL_OUT);
    cmp_f32("forward rstd (fp32)", drstd, rstd, rows, TOL_F32);
    // the backward on the same saved y (bf16) and rstd on both sides
    round_bf16(y, n);
    float *dy = host_rand(n, 1, 0), *gx = host_alloc(n);
    cpu_l2norm_backward(gx, dy, y, rstd, rows, Dd);
    void *ysaved = dev_bf16(y, n), *ddy = dev_bf16(dy, n), *ddx = dev_bf16(NULL, n);
    float *rsaved = dev_f32(rstd, rows);
    poison_bf16(ddx, n);
    D->l2norm_backward(ddx, ddy, ysaved, (real *)rsaved, rows, Dd);
    cmp_bf16("backward dx", ddx, gx, n, TOL_GRAD);
    // the vector kernels (D = 64, 128, 256) against the general ones (HYBRID_L2NORM_REF=1): the same bits
    if (Dd == 64 || Dd == 128 || Dd == 256) {
        void *ry = dev_bf16(NULL, n), *rdx = dev_bf16(NULL, n);
        float *rr = dev_f32(NULL, rows);
        poison_bf16(ry, n);
        poison_f32(rr, rows);
        poison_bf16(rdx, n);
        setenv("HYBRID_L2NORM_REF", "1", 1);
        D->l2norm_forward(ry, (real *)rr, dx_, rows, Dd, 1e-6f);
        D->l2norm_backward(rdx, ddy, ysaved, (real *)rsaved, rows, Dd);
        unsetenv("HYBRID_L2NORM_REF");
        same_bits_bf16("forward y, vector = general", dy_, ry, n);
        same_bits_f32("forward rstd, vector = general", drstd, rr, rows);
        same_bits_bf16("backward dx, vector = general", ddx, rdx, n);
        G->free(ry), G->free(rdx), G->free(rr);
    }
    G->free(dx_), G->free(dy_), G->free(drstd), G->free(ysaved), G->free(ddy), G->free(ddx), G->free(rsaved);
    free(x), free(y), free(rstd), free(dy), free(gx);
}

// ---- decay gate ---------------------------------------------------------------------------
static void test_gate(size_t N, int H, int K, float lb, int with_A, int with_dt) {
    printf("decay_gate N=%zu H=%d K=%d lower_bound=%g A_log=%d dt_bias=%d\n", N, H, K, lb, with_A, with_dt);
    const size_t n = N * H * K;
    float *x = host_rand(n, 3, 0), *A = with_A ? host_rand(H, 1, 0) : NULL, *dt = with_dt ? host_rand((size_t)H * K, 1, 0) : NULL;
    float *g = host_alloc(n);
    cpu_decay_gate_forward(g, x, A, dt, N, H, K, lb);
    void *dx_ = dev_bf16(x, n), *dA = A ? dev_bf16(A, H) : NULL, *ddt = dt ? dev_bf16(dt, (size_t)H * K) : NULL;
    void *dg_ = dev_bf16(NULL, n);
    poison_bf16(dg_, n);
    D->decay_gate_forward(dg_, dx_, dA, ddt, N, H, K, lb);
    cmp_bf16("forward g", dg_, g, n, TOL_OUT);

    float *dg = host_rand(n, 1, 0), *gx = host_alloc(n), *gA = zeros(H), *gdt = zeros((size_t)H * K);
    void *ddg = dev_bf16(dg, n), *dgx = dev_bf16(NULL, n);
    float *dgA = dev_f32(gA, H), *dgdt = dev_f32(gdt, (size_t)H * K);  // from zero (gA, gdt)
    for (int rep = 0; rep < 2; rep++) {
        cpu_decay_gate_backward(gx, gA, gdt, dg, x, A, dt, N, H, K, lb);
        poison_bf16(dgx, n);
        D->decay_gate_backward(dgx, (real *)dgA, (real *)dgdt, ddg, dx_, dA, ddt, N, H, K, lb);
    }
    cmp_bf16("backward dx", dgx, gx, n, TOL_GRAD);
    if (A) cmp_f32("backward dA_log (fp32, x2, accumulated)", dgA, gA, H, TOL_F32);
    else expect("backward dA_log untouched without A_log", err_f32(dgA, gA, H), 0);
    cmp_f32("backward ddt_bias (fp32, x2, accumulated)", dgdt, gdt, (size_t)H * K, TOL_F32);
    // the vector kernels (K % 8 == 0, 16-byte aligned tensors) against the scalar ones
    // (HYBRID_GATE_REF=1): the same bits
    if (K % 8 == 0) {
        void *rg = dev_bf16(NULL, n), *rgx = dev_bf16(NULL, n);
        float *rz = zeros((size_t)H * K), *rgA = dev_f32(rz, H), *rgdt = dev_f32(rz, (size_t)H * K);
        free(rz);
        poison_bf16(rg, n);
        setenv("HYBRID_GATE_REF", "1", 1);
        D->decay_gate_forward(rg, dx_, dA, ddt, N, H, K, lb);
        for (int rep = 0; rep < 2; rep++) {
            poison_bf16(rgx, n);
            D->decay_gate_backward(rgx, (real *)rgA, (real *)rgdt, ddg, dx_, dA, ddt, N, H, K, lb);
        }
        unsetenv("HYBRID_GATE_REF");
        same_bits_bf16("forward g, vector = scalar", dg_, rg, n);
        same_bits_bf16("backward dx, vector = scalar", dgx, rgx, n);
        if (A) same_bits_f32("backward dA_log, vector = scalar", dgA, rgA, H);
        same_bits_f32("backward ddt_bias, vector = scalar", dgdt, rgdt, (size_t)H * K);
        G->free(rg), G->free(rgx), G->free(rgA), G->free(rgdt);
    }
    void *bufs[] = {dx_, dA, ddt, dg_, ddg, dgx, dgA, dgdt};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) G->free(bufs[i]);
    free(x), free(A), free(dt), free(g), free(dg), free(gx), free(gA), free(gdt);
}

// ---- beta ---------------------------------------------------------------------------------
static void test_beta(size_t n, int neg) {
    printf("beta n=%zu neg_eigval=%d\n", n, neg);
    float *b = host_rand(n, 6, 0), *beta = host_alloc(n);
    cpu_beta_forward(beta, b, n, neg);
    void *db_ = dev_bf16(b, n), *dbeta_ = dev_bf16(NULL, n);
    poison_bf16(dbeta_, n);
    D->beta_forward(dbeta_, db_, n, neg);
    cmp_bf16("forward beta", dbeta_, beta, n, TOL_OUT);
    round_bf16(beta, n);  // the saved (bf16) beta on both sides
    float *gbeta = host_rand(n, 1, 0), *gb = host_alloc(n);
    cpu_beta_backward(gb, gbeta, beta, n, neg);
    void *bsaved = dev_bf16(beta, n), *dgbeta = dev_bf16(gbeta, n), *dgb = dev_bf16(NULL, n);
    poison_bf16(dgb, n);
    D->beta_backward(dgb, dgbeta, bsaved, n, neg);
    cmp_bf16("backward db", dgb, gb, n, TOL_GRAD);
    G->free(db_), G->free(dbeta_), G->free(bsaved), G->free(dgbeta), G->free(dgb);
    free(b), free(beta), free(gbeta), free(gb);
}

// ---- gated RMSNorm --------------------------------------------------------------------------
static void test_gated_rmsnorm(size_t rows, int Dd, int swish, int with_w) {
    printf("gated_rmsnorm rows=%zu D=%d swish=%d weight=%d\n", rows, Dd, swish, with_w);
    const size_t n = rows * Dd;
    float *x = host_rand(n, 1, 0.2f), *z = host_rand(n, 3, 0), *w = with_w ? host_rand(Dd, 0.5f, 1) : NULL;
    float *y = host_alloc(n), *rstd = host_alloc(rows);
    cpu_gated_rmsnorm_forward(y, rstd, x, z, w, rows, Dd, 1e-5f, swish);
    void *dx_ = dev_bf16(x, n), *dz_ = dev_bf16(z, n), *dw_ = w ? dev_bf16(w, Dd) : NULL, *dy_ = dev_bf16(NULL, n);
    float *drstd = dev_f32(NULL, rows);
    poison_bf16(dy_, n);
    poison_f32(drstd, rows);
    D->gated_rmsnorm_forward(dy_, (real *)drstd, dx_, dz_, dw_, rows, Dd, 1e-5f, swish);
    cmp_bf16("forward y", dy_, y, n, TOL_OUT);
    cmp_f32("forward rstd (fp32)", drstd, rstd, rows, TOL_F32);

    float *dy = host_rand(n, 1, 0), *gx = host_alloc(n), *gz = host_alloc(n), *gw = zeros(Dd);
    void *ddy = dev_bf16(dy, n), *dgx = dev_bf16(NULL, n), *dgz = dev_bf16(NULL, n);
    float *dgw = dev_f32(gw, Dd), *rsaved = dev_f32(rstd, rows);  // dgw from zero (gw)
    for (int rep = 0; rep < 2; rep++) {
        cpu_gated_rmsnorm_backward(gx, gz, with_w ? gw : NULL, dy, x, z, w, rstd, rows, Dd, swish);
        poison_bf16(dgx, n);
        poison_bf16(dgz, n);
        D->gated_rmsnorm_backward(dgx, dgz, with_w ? (real *)dgw : NULL, ddy, dx_, dz_, dw_, (real *)rsaved, rows, Dd, swish);
    }
    cmp_bf16("backward dx", dgx, gx, n, TOL_GRAD);
    cmp_bf16("backward dz", dgz, gz, n, TOL_GRAD);
    if (with_w) cmp_f32("backward dw (fp32, x2, accumulated)", dgw, gw, Dd, TOL_F32);

    // the register kernels (D <= 256) against the general ones (HYBRID_GRN_REF=1): the same bits
    if (Dd <= 256) {
        void *ry = dev_bf16(NULL, n), *rgx = dev_bf16(NULL, n), *rgz = dev_bf16(NULL, n);
        float *rz = zeros(Dd), *rgw = dev_f32(rz, Dd), *rr = dev_f32(NULL, rows);
        free(rz);
        poison_bf16(ry, n);
        poison_f32(rr, rows);
        setenv("HYBRID_GRN_REF", "1", 1);
        D->gated_rmsnorm_forward(ry, (real *)rr, dx_, dz_, dw_, rows, Dd, 1e-5f, swish);
        for (int rep = 0; rep < 2; rep++) {
            poison_bf16(rgx, n);
            poison_bf16(rgz, n);
            D->gated_rmsnorm_backward(rgx, rgz, with_w ? (real *)rgw : NULL, ddy, dx_, dz_, dw_, (real *)rsaved, rows, Dd,
                                      swish);
        }
        unsetenv("HYBRID_GRN_REF");
        same_bits_bf16("forward y, register = general", dy_, ry, n);
        same_bits_f32("forward rstd, register = general", drstd, rr, rows);
        same_bits_bf16("backward dx, register = general", dgx, rgx, n);
        same_bits_bf16("backward dz, register = general", dgz, rgz, n);
        if (with_w) same_bits_f32("backward dw, register = general", dgw, rgw, Dd);
        G->free(ry), G->free(rgx), G->free(rgz), G->free(rgw), G->free(rr);
    }
    void *bufs[] = {dx_, dz_, dw_, dy_, drstd, ddy, dgx, dgz, dgw, rsaved};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) G->free(bufs[i]);
    free(x), free(z), free(w), free(y), free(rstd), free(dy), free(gx), free(gz), free(gw);
}

// ---- linear attention -----------------------------------------------------------------------
enum { LA_S0 = 1, LA_DST = 2, LA_D0 = 4 };  // S0/z0 given, dST/dzT given, dS0/dz0 wanted

static void test_linear_attn(Seqs sq, int H, int K, int V, int normalize, int flags) {
    printf("linear_attn B=%d T=%d%s H=%d K=%d V=%d normalize=%d S0=%d dST=%d dS0=%d\n", sq.B, sq.T,
           sq.off ? " varlen" : "", H, K, V, normalize, !!(flags & LA_S0), !!(flags & LA_DST), !!(flags & LA_D0));
    const int C = 64, N = sq.N;
    const size_t rows = (size_t)sq.B * sq.T, nq = rows * H * K, nv = rows * H * V;
    const size_t nS = (size_t)N * H * K * V, nz = (size_t)N * H * K;
    const float scale = 1.0f / sqrtf((float)K);
    float *q = host_rand(nq, 1.5f, 0), *k = host_rand(nq, 1.5f, 0), *v = host_rand(nv, 1, 0);
    float *S0 = flags & LA_S0 ? host_rand(nS, 0.5f, 0) : NULL;
    float *z0 = flags & LA_S0 ? host_rand(nz, 0.5f, 1.5f) : NULL;  // a running sum of phi(k) > 0
    float *o = host_alloc(nv), *ST = host_alloc(nS), *zT = host_alloc(nz);
    void *ws = xmalloc(cpu_linear_workspace_size(LINEAR_ATTN, 1, sq.B, sq.T, H, K, V, N, C));
    cpu_linear_attn_chunk_forward(o, ST, zT, q, k, v, S0, z0, scale, normalize, sq.B, sq.T, H, K, V, sq.off, sq.N, C, ws);
    void *dq_ = dev_bf16(q, nq), *dk_ = dev_bf16(k, nq), *dv_ = dev_bf16(v, nv), *do_ = dev_bf16(NULL, nv);
    float *dS0 = S0 ? dev_f32(S0, nS) : NULL, *dz0 = z0 ? dev_f32(z0, nz) : NULL;
    float *dST = dev_f32(NULL, nS), *dzT = dev_f32(NULL, nz);
    // each pass gets exactly the workspace its size says (forward, then backward)
    const size_t wsf = D->linear_workspace_size(LINEAR_ATTN, 0, sq.B, sq.T, H, K, V, N, C);
    const size_t wsb = D->linear_workspace_size(LINEAR_ATTN, 1, sq.B, sq.T, H, K, V, N, C);
    void *dws = G->alloc(wsf ? wsf : 16);
    poison_bytes(dws, wsf);
    poison_bf16(do_, nv);
    poison_f32(dST, nS);
    poison_f32(dzT, nz);
    D->linear_attn_chunk_forward(do_, (real *)dST, (real *)dzT, dq_, dk_, dv_, (real *)dS0, (real *)dz0, scale,
                                 normalize, sq.B, sq.T, H, K, V, sq.doff, sq.N, C, dws);
    cmp_bf16("forward o", do_, o, nv, TOL_OUT);
    cmp_f32("forward S_T (fp32)", dST, ST, nS, TOL_F32);
    if (normalize) cmp_f32("forward z_T (fp32)", dzT, zT, nz, TOL_F32);

    float *dout = host_rand(nv, 1, 0);
    float *gST = flags & LA_DST ? host_rand(nS, 0.5f, 0) : NULL, *gzT = flags & LA_DST ? host_rand(nz, 0.5f, 0) : NULL;
    float *gq = host_alloc(nq), *gk = host_alloc(nq), *gv = host_alloc(nv), *gS0 = host_alloc(nS), *gz0 = host_alloc(nz);
    cpu_linear_attn_chunk_backward(gq, gk, gv, flags & LA_D0 ? gS0 : NULL, flags & LA_D0 ? gz0 : NULL, dout, gST, gzT,
                                   q, k, v, S0, z0, scale, normalize, sq.B, sq.T, H, K, V, sq.off, sq.N, C, ws);
    void *ddout = dev_bf16(dout, nv), *dgq = dev_bf16(NULL, nq), *dgk = dev_bf16(NULL, nq), *dgv = dev_bf16(NULL, nv);
    float *dgST = gST ? dev_f32(gST, nS) : NULL, *dgzT = gzT ? dev_f32(gzT, nz) : NULL;
    float *dgS0 = dev_f32(NULL, nS), *dgz0 = dev_f32(NULL, nz);
    poison_bf16(dgq, nq);
    poison_bf16(dgk, nq);
    poison_bf16(dgv, nv);
    poison_f32(dgS0, nS);
    poison_f32(dgz0, nz);
    G->free(dws);
    dws = G->alloc(wsb ? wsb : 16);
    poison_bytes(dws, wsb);
    D->linear_attn_chunk_backward(dgq, dgk, dgv, flags & LA_D0 ? (real *)dgS0 : NULL, flags & LA_D0 ? (real *)dgz0 : NULL,
                                  ddout, (real *)dgST, (real *)dgzT, dq_, dk_, dv_, (real *)dS0, (real *)dz0, scale,
                                  normalize, sq.B, sq.T, H, K, V, sq.doff, sq.N, C, dws);
    if (rows) {
        cmp_bf16("backward dq", dgq, gq, nq, TOL_GRAD);
        cmp_bf16("backward dk", dgk, gk, nq, TOL_GRAD);
        cmp_bf16("backward dv", dgv, gv, nv, TOL_GRAD);
    }
    if (flags & LA_D0) {
        cmp_f32("backward dS0 (fp32)", dgS0, gS0, nS, TOL_F32);
        if (normalize) cmp_f32("backward dz0 (fp32)", dgz0, gz0, nz, TOL_F32);
    }
    void *bufs[] = {dq_, dk_, dv_, do_, dS0, dz0, dST, dzT, dws, ddout, dgq, dgk, dgv, dgST, dgzT, dgS0, dgz0};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) G->free(bufs[i]);
    free(q), free(k), free(v), free(S0), free(z0), free(o), free(ST), free(zT), free(ws), free(dout), free(gST);
    free(gzT), free(gq), free(gk), free(gv), free(gS0), free(gz0);
}

static void test_linear_attn_step(int N, int H, int K, int V, int normalize, int T) {
    printf("linear_attn_step N=%d H=%d K=%d V=%d normalize=%d steps=%d\n", N, H, K, V, normalize, T);
    const size_t nq = (size_t)N * H * K, nv = (size_t)N * H * V, nS = nq * V;
    const float scale = 1.0f / sqrtf((float)K);
    float *S = host_rand(nS, 0.5f, 0), *z = host_rand(nq, 0.5f, 1.5f);
    float *q = host_rand(nq * T, 1.5f, 0), *k = host_rand(nq * T, 1.5f, 0), *v = host_rand(nv * T, 1, 0);
    float *o = host_alloc(nv * T);
    float *dS = dev_f32(S, nS), *dz = dev_f32(z, nq);
    void *dq_ = dev_bf16(q, nq * T), *dk_ = dev_bf16(k, nq * T), *dv_ = dev_bf16(v, nv * T), *do_ = dev_bf16(NULL, nv * T);
    poison_bf16(do_, nv * T);
    for (int t = 0; t < T; t++) {
        cpu_linear_attn_step(o + nv * t, S, z, q + nq * t, k + nq * t, v + nv * t, scale, normalize, N, H, K, V);
        D->linear_attn_step(bf16_at(do_, nv * t), (real *)dS, (real *)dz, bf16_at(dq_, nq * t), bf16_at(dk_, nq * t),
                            bf16_at(dv_, nv * t), scale, normalize, N, H, K, V);
    }
    cmp_bf16("step outputs", do_, o, nv * T, TOL_OUT);
    cmp_f32("step S (fp32)", dS, S, nS, TOL_F32);
    if (normalize) cmp_f32("step z (fp32)", dz, z, nq, TOL_F32);
    G->free(dS), G->free(dz), G->free(dq_), G->free(dk_), G->free(dv_), G->free(do_);
    free(S), free(z), free(q), free(k), free(v), free(o);
}

int main(void) {
    gpu_test_init("test_delta_rule_layer");
    D = G->delta_rule;

    // short conv: W 1 to 4 (the fused kernels, also checked bit for bit against the general
    // ones) and 6 (the general kernels), bias or not, SiLU or not, varlen with empty segments and
    // segments shorter than W-1, incoming / outgoing states and their gradients
    const int lens[] = {0, 2, 1, 0, 37, 5, 0, 70};  // then the rest of T
    Seqs fixed = seqs_fixed(2, 37), var = seqs_varlen(lens, 8, 130);
    test_short_conv(fixed, 48, 4, 1, 1, 0, 1, 0);
    test_short_conv(fixed, 48, 4, 0, 0, 1, 1, 1);
    test_short_conv(fixed, 33, 1, 1, 1, 1, 1, 1);
    test_short_conv(var, 40, 4, 1, 1, 1, 1, 1);
    test_short_conv(var, 40, 4, 0, 1, 0, 0, 0);
    test_short_conv(var, 24, 1, 0, 0, 1, 1, 1);
    test_short_conv(var, 41, 3, 1, 1, 1, 1, 1);  // odd D: one channel per thread
    test_short_conv(var, 41, 2, 0, 1, 1, 1, 1);  // (and at W 2 and 4: each W its own kernels)
    test_short_conv(fixed, 41, 4, 1, 1, 1, 1, 1);
    test_short_conv(fixed, 40, 2, 0, 1, 1, 1, 1);
    test_short_conv(var, 42, 4, 1, 1, 1, 1, 1);  // D % 4 == 2: two channels a thread (4 when D % 4 == 0)
    test_short_conv(var, 40, 6, 1, 1, 1, 1, 1);  // W above the fused kernels': the general path
    test_short_conv(fixed, 24, 6, 0, 0, 1, 1, 1);
    // the fast kernels' tiles (short_conv.cu): several channel slabs with a partial last one,
    // with (D % 8 == 0) and without 16-byte tile copies; 71,680 rows: 1,024 chunks of 70 rows,
    // two staged passes per chunk, sequence ends inside chunks (the halo cut there)
    test_short_conv(fixed, 264, 4, 1, 1, 1, 1, 1);
    test_short_conv(var, 300, 4, 0, 1, 1, 1, 1);
    test_short_conv(seqs_fixed(7, 10240), 16, 4, 1, 1, 1, 1, 1);
    test_short_conv(seqs_fixed(7, 10240), 6, 3, 0, 1, 0, 0, 0);
    test_short_conv_l2norm(fixed, 3, 128);
    test_short_conv_l2norm(var, 2, 128);
    test_short_conv_l2norm(fixed, 4, 64);
    test_short_conv_step(3, 40, 4, 1, 1, 6);
    test_short_conv_step(2, 24, 1, 0, 0, 3);

    test_l2norm(300, 16);
    test_l2norm(200, 32);
    test_l2norm(150, 128);
    test_l2norm(100, 64);
    test_l2norm(60, 256);
    test_l2norm(50, 96);  // the general kernels only

    test_gate(150, 3, 16, 0.f, 1, 1);     // KDA softplus form
    test_gate(150, 3, 16, -5.f, 1, 1);    // lower-bound form
    test_gate(100, 2, 8, 0.f, 0, 0);      // NULL A_log and dt_bias
    test_gate(100, 2, 8, -5.f, 0, 1);
    test_gate(300, 4, 1, 0.f, 1, 1);      // GDN's scalar gate (K = 1)
    test_gate(130, 6, 128, 0.f, 1, 1);    // the KDA layers' shape (vector kernels, 6 x 128 columns)
    test_gate(70, 2, 24, -5.f, 1, 0);     // 6 column groups: a block of fewer than 32 used lanes

    test_beta(1000, 0);
    test_beta(1000, 1);

    test_gated_rmsnorm(200, 64, 1, 1);
    test_gated_rmsnorm(200, 64, 0, 1);
    test_gated_rmsnorm(100, 40, 1, 0);
    test_gated_rmsnorm(150, 128, 1, 1);  // the layers' D
    test_gated_rmsnorm(70, 96, 0, 1);    // K = 3 values a lane
    test_gated_rmsnorm(60, 256, 0, 1);   // K = 8, 16-byte vectors
    test_gated_rmsnorm(30, 300, 1, 1);   // D > 256: the general kernels only
    // every lane width K = ceil(D / 32) of the register kernels, with 16-byte vectors (D % 8 == 0)
    // and scalar accesses (D % 8 == 4), with and without the weight (one template instance each,
    // so each is launched here once: check_launch_limits)
    for (int kk = 1; kk <= 8; kk++)
        for (int with_w = 0; with_w < 2; with_w++) {
            test_gated_rmsnorm(20, 32 * kk, kk & 1, with_w);
            test_gated_rmsnorm(20, 32 * kk - 4, kk & 1, with_w);
        }

    // linear attention: T = 1, 63, 64, 65, 130, varlen; states given and NULL
    for (int normalize = 0; normalize < 2; normalize++) {
        test_linear_attn(seqs_fixed(1, 1), 2, 16, 16, normalize, LA_S0 | LA_DST | LA_D0);
        test_linear_attn(seqs_fixed(2, 63), 2, 32, 16, normalize, LA_D0);
        test_linear_attn(seqs_fixed(1, 64), 2, 16, 32, normalize, LA_S0 | LA_D0);
        test_linear_attn(seqs_fixed(2, 65), 1, 32, 32, normalize, LA_DST | LA_D0);
        test_linear_attn(seqs_fixed(1, 130), 2, 16, 16, normalize, LA_S0 | LA_DST);
        test_linear_attn(var, 2, 16, 32, normalize, LA_S0 | LA_DST | LA_D0);
        test_linear_attn(var, 1, 32, 16, normalize, 0);
        test_linear_attn_step(2, 2, 16, 32, normalize, 5);
    }
    test_linear_attn(seqs_fixed(1, 70), 1, 80, 72, 1, LA_S0 | LA_DST | LA_D0);  // two channel tiles, partial

#ifndef HYBRID_CUDA_EMU
    // GPU only: large shapes
    test_short_conv(seqs_fixed(8, 1024), 2048, 4, 0, 1, 0, 1, 0);
    test_short_conv_l2norm(seqs_fixed(8, 1024), 6, 128);
    test_l2norm((size_t)64 * 1024 * 16, 128);
    test_gate((size_t)8 * 1024, 16, 128, 0.f, 1, 1);
    test_gate((size_t)8 * 1024, 16, 1, 0.f, 1, 1);
    test_beta((size_t)8 * 1024 * 16, 1);
    test_gated_rmsnorm((size_t)8 * 1024 * 16, 128, 1, 1);
    test_linear_attn(seqs_fixed(2, 1024), 4, 128, 128, 1, LA_S0 | LA_DST | LA_D0);
    test_linear_attn(seqs_fixed(1, 512), 2, 256, 256, 0, LA_S0 | LA_DST | LA_D0);
    test_linear_attn_step(4, 8, 128, 128, 1, 16);
#endif
    seqs_free(&var);
    gpu_test_summary();
    TEST_MAIN_END();
}
