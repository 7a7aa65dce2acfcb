// GPU parity tests (ARCHITECTURE §5), run by `make test-gpu` where a GPU is visible.
// Every CUDA op against the CPU reference (the float build of model/ops) on fresh
// random inputs at realistic sizes (B=4, T=1024, C=768, NH=12, V=50257, Vp=50304).
// Inputs are rounded to bf16 first, so both backends see the same numbers and the
// error is the op's own. Error = ||got - ref|| / ||ref|| (RMS relative); tolerances:
// bf16 outputs 5e-3, bf16 gradients 8e-3, fp32 paths (statistics, losses, optimizer
// state) 1e-4. Outputs are poisoned (NaN) before every run and NaN never passes.
// Parameter-gradient outputs run twice from zero, so "+=" (not "=") is checked.
// Then: a GPT-2 124M training step on both backends from the same weights; two
// identical GPU runs; resume bit-exactness (in memory, and through `hybrid train`).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "kernels/cuda_backend.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/backend.h"
#include "model/backend.h"
#include "base/rng.h"
#include "base/util.h"
#include "model/ops/optim/optim.h"
#include "model/ops/optim/muon.h"
#include "optim/optimizer.h"
#include "tests/cli_util.h"
#include "tests/testing.h"

#define TOL_OUT 5e-3
#define TOL_GRAD 8e-3
#define TOL_F32 1e-4
#define TOL_MODEL 2e-2

static const Backend *G;
static Rng g_rng;

// ---- helpers ----

static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

// uniform in [-scale, scale) + shift, rounded to bf16
static float *host_rand(size_t n, float scale, float shift) {
    float *x = xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(shift + scale * (float)(2.0 * rng_uniform(&g_rng) - 1.0));
    return x;
}

static float *host_dup(const float *x, size_t n) {
    float *y = xmalloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

static void *dev_bf16(const float *h, size_t n) {
    void *p = G->alloc(n * 2);
    if (h) G->upload(p, h, n);
    return p;
}

static float *dev_f32(const float *h, size_t n) {
    float *p = G->alloc(n * 4);
    if (h) G->copy_from_host(p, h, n * 4);
    return p;
}

static void poison(void *p, size_t bytes) {
    void *h = xmalloc(bytes);
    memset(h, 0xff, bytes);  // NaN in bf16 and in fp32
    G->copy_from_host(p, h, bytes);
    free(h);
}

static float *get_bf16(const void *p, size_t n) {
    float *h = xmalloc(sizeof(float) * (n ? n : 1));
    G->download(h, p, n);
    return h;
}

static float *get_f32(const void *p, size_t n) {
    float *h = xmalloc(sizeof(float) * (n ? n : 1));
    G->copy_to_host(h, p, n * 4);
    return h;
}

// ||got - ref|| / ||ref||; +inf if got holds a non-finite value
static double rel_rms(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void expect(const char *what, double err, double tol) {
    printf("  %-52s %.3e  (tol %.0e)  %s\n", what, err, tol, err <= tol ? "ok" : "FAIL");
    fflush(stdout);
    CHECK(err <= tol, "%s: error %.3e above %.0e", what, err, tol);
}

static void cmp_bf16(const char *what, const void *dev, const float *ref, size_t n, double tol) {
    float *g = get_bf16(dev, n);
    expect(what, rel_rms(g, ref, n), tol);
    free(g);
}

static void cmp_f32(const char *what, const void *dev, const float *ref, size_t n, double tol) {
    float *g = get_f32(dev, n);
    expect(what, rel_rms(g, ref, n), tol);
    free(g);
}

static int *rand_tokens(size_t n, int V, int hot) {
    int *t = xmalloc(sizeof(int) * n);
    for (size_t i = 0; i < n; i++)
        t[i] = hot && rng_below(&g_rng, 2) ? (int)rng_below(&g_rng, 64) : (int)rng_below(&g_rng, (uint64_t)V);
    return t;
}

static int *dev_tokens(const int *h, size_t n) {
    int *p = G->alloc(n * sizeof(int));
    G->upload_tokens(p, h, n);
    return p;
}

// ---- ops ----

static void test_embed(int B, int T, int C, int V, int Vp) {
    printf("embed B=%d T=%d C=%d V=%d\n", B, T, C, V);
    size_t N = (size_t)B * T;
    float *wte = host_rand((size_t)Vp * C, 1, 0), *wpe = host_rand((size_t)T * C, 1, 0);
    int *tok = rand_tokens(N, V, 1);
    float *out = xmalloc(sizeof(float) * N * C);
    cpu_embed_forward(out, tok, wte, wpe, B, T, C);
    void *dwte_w = dev_bf16(wte, (size_t)Vp * C), *dwpe_w = dev_bf16(wpe, (size_t)T * C), *dout_d = dev_bf16(NULL, N * C);
    int *dtok = dev_tokens(tok, N);
    poison(dout_d, N * C * 2);
    G->core->embed_forward(dout_d, dtok, dwte_w, dwpe_w, B, T, C);
    cmp_bf16("embed_forward out", dout_d, out, N * C, TOL_OUT);

    float *dout = host_rand(N * C, 1, 0);
    float *gte = calloc((size_t)Vp * C, sizeof(float)), *gpe = calloc((size_t)T * C, sizeof(float));
    void *d_dout = dev_bf16(dout, N * C), *d_gte = dev_bf16(NULL, (size_t)Vp * C), *d_gpe = dev_bf16(NULL, (size_t)T * C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_embed_backward(gte, gpe, dout, tok, B, T, C);
        G->core->embed_backward(d_gte, d_gpe, d_dout, dtok, B, T, C);
    }
    cmp_bf16("embed_backward dwte (x2, accumulated)", d_gte, gte, (size_t)Vp * C, TOL_GRAD);
    cmp_bf16("embed_backward dwpe (x2, accumulated)", d_gpe, gpe, (size_t)T * C, TOL_GRAD);
    G->free(dwte_w);
    G->free(dwpe_w);
    G->free(dout_d);
    G->free(dtok);
    G->free(d_dout);
    G->free(d_gte);
    G->free(d_gpe);
    free(wte), free(wpe), free(tok), free(out), free(dout), free(gte), free(gpe);
}

static void test_norm(int N, int C, int rms) {
    printf("%s N=%d C=%d\n", rms ? "rmsnorm" : "layernorm", N, C);
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 2, 0.3f), *w = host_rand(C, 0.5f, 1), *b = host_rand(C, 0.5f, 0);
    float *out = xmalloc(sizeof(float) * n), *mean = xmalloc(sizeof(float) * N), *rstd = xmalloc(sizeof(float) * N);
    if (rms) cpu_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5);
    else cpu_layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    void *dx = dev_bf16(x, n), *dw = dev_bf16(w, C), *db = dev_bf16(b, C), *dout = dev_bf16(NULL, n);
    float *dmean = dev_f32(NULL, N), *drstd = dev_f32(NULL, N);
    poison(dout, n * 2);
    poison(dmean, N * 4);
    poison(drstd, N * 4);
    if (rms) G->norm_glu->rmsnorm_forward(dout, (real *)drstd, dx, dw, N, C, 1e-5f);
    else G->core->layernorm_forward(dout, (real *)dmean, (real *)drstd, dx, dw, db, N, C, 1e-5f);
    cmp_bf16("forward out", dout, out, n, TOL_OUT);
    if (!rms) cmp_f32("forward mean (fp32)", dmean, mean, N, TOL_F32);
    cmp_f32("forward rstd (fp32)", drstd, rstd, N, TOL_F32);

    float *dy = host_rand(n, 1, 0), *dinp = xmalloc(sizeof(float) * n);
    float *gw = calloc(C, sizeof(float)), *gb = calloc(C, sizeof(float));
    void *ddy = dev_bf16(dy, n), *ddinp = dev_bf16(NULL, n), *dgw = dev_bf16(NULL, C), *dgb = dev_bf16(NULL, C);
    for (int rep = 0; rep < 2; rep++) {
        if (rms) cpu_rmsnorm_backward(dinp, gw, dy, x, w, rstd, N, C);
        else cpu_layernorm_backward(dinp, gw, gb, dy, x, w, mean, rstd, N, C);
        poison(ddinp, n * 2);
        if (rms) G->norm_glu->rmsnorm_backward(ddinp, dgw, ddy, dx, dw, (real *)drstd, N, C);
        else G->core->layernorm_backward(ddinp, dgw, dgb, ddy, dx, dw, (real *)dmean, (real *)drstd, N, C);
    }
    cmp_bf16("backward dinp", ddinp, dinp, n, TOL_GRAD);
    cmp_bf16("backward dw (x2, accumulated)", dgw, gw, C, TOL_GRAD);
    if (!rms) cmp_bf16("backward db (x2, accumulated)", dgb, gb, C, TOL_GRAD);
    G->free(dx), G->free(dw), G->free(db), G->free(dout), G->free(dmean), G->free(drstd);
    G->free(ddy), G->free(ddinp), G->free(dgw), G->free(dgb);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dy), free(dinp), free(gw), free(gb);
}

// the optional fused ops: residual add + LayerNorm forward, LayerNorm backward into the
// residual gradient, against add + layernorm on the CPU
static void test_add_norm(int N, int C) {
    if (!G->core->add_layernorm_forward || !G->core->layernorm_backward_add) {
        printf("add+layernorm: fused ops not in the table (HYBRID_CUDA_NO_FUSE)\n");
        return;
    }
    printf("add+layernorm fused N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 2, 0.3f), *y = host_rand(n, 1, 0), *w = host_rand(C, 0.5f, 1), *b = host_rand(C, 0.5f, 0);
    float *res = xmalloc(sizeof(float) * n), *out = xmalloc(sizeof(float) * n);
    float *mean = xmalloc(sizeof(float) * N), *rstd = xmalloc(sizeof(float) * N);
    cpu_add_forward(res, x, y, n);
    for (size_t i = 0; i < n; i++) res[i] = bf16_round(res[i]);  // the stored (bf16) sum is what is normalized
    cpu_layernorm_forward(out, mean, rstd, res, w, b, N, C, 1e-5f);
    void *dx = dev_bf16(x, n), *dy = dev_bf16(y, n), *dw = dev_bf16(w, C), *db = dev_bf16(b, C);
    void *dres = dev_bf16(NULL, n), *dout = dev_bf16(NULL, n);
    float *dmean = dev_f32(NULL, N), *drstd = dev_f32(NULL, N);
    poison(dres, n * 2);
    poison(dout, n * 2);
    poison(dmean, N * 4);
    poison(drstd, N * 4);
    G->core->add_layernorm_forward(dres, dout, (real *)dmean, (real *)drstd, dx, dy, dw, db, N, C, 1e-5f);
    cmp_bf16("forward residual (a + b)", dres, res, n, TOL_OUT);
    cmp_bf16("forward out", dout, out, n, TOL_OUT);
    cmp_f32("forward mean (fp32)", dmean, mean, N, TOL_F32);
    cmp_f32("forward rstd (fp32)", drstd, rstd, N, TOL_F32);

    // backward: dres (random start) += dinp, twice; dw, db accumulated twice from zero
    float *gout = host_rand(n, 1, 0), *g0 = host_rand(n, 1, 0), *dinp = xmalloc(sizeof(float) * n);
    float *acc = host_dup(g0, n), *gw = calloc(C, sizeof(float)), *gb = calloc(C, sizeof(float));
    void *dgout = dev_bf16(gout, n), *dacc = dev_bf16(g0, n), *dgw = dev_bf16(NULL, C), *dgb = dev_bf16(NULL, C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_layernorm_backward(dinp, gw, gb, gout, res, w, mean, rstd, N, C);
        cpu_add_inplace(acc, dinp, n);
        G->core->layernorm_backward_add(dacc, dgw, dgb, dgout, dres, dw, (real *)dmean, (real *)drstd, N, C);
    }
    for (size_t i = 0; i < n; i++) acc[i] -= g0[i];  // compare the part the op added
    float *got = get_bf16(dacc, n);
    for (size_t i = 0; i < n; i++) got[i] -= g0[i];
    expect("backward dres += dinp (x2)", rel_rms(got, acc, n), TOL_GRAD);
    cmp_bf16("backward dw (x2, accumulated)", dgw, gw, C, TOL_GRAD);
    cmp_bf16("backward db (x2, accumulated)", dgb, gb, C, TOL_GRAD);
    G->free(dx), G->free(dy), G->free(dw), G->free(db), G->free(dres), G->free(dout), G->free(dmean);
    G->free(drstd), G->free(dgout), G->free(dacc), G->free(dgw), G->free(dgb);
    free(x), free(y), free(w), free(b), free(res), free(out), free(mean), free(rstd), free(gout), free(g0);
    free(dinp), free(acc), free(gw), free(gb), free(got);
}

static void test_matmul(int N, int C, int OC, int with_bias) {
    printf("matmul N=%d C=%d OC=%d%s\n", N, C, OC, with_bias ? " +bias" : "");
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = host_rand(ni, 1, 0), *w = host_rand(nw, 1.f / sqrtf((float)C), 0), *bias = host_rand(OC, 0.5f, 0);
    float *out = xmalloc(sizeof(float) * no);
    cpu_matmul_forward(out, x, w, with_bias ? bias : NULL, N, C, OC);
    void *dx = dev_bf16(x, ni), *dw = dev_bf16(w, nw), *dbias = dev_bf16(bias, OC), *dout = dev_bf16(NULL, no);
    poison(dout, no * 2);
    G->core->matmul_forward(dout, dx, dw, with_bias ? dbias : NULL, N, C, OC);
    cmp_bf16("forward out", dout, out, no, TOL_OUT);

    float *dy = host_rand(no, 1, 0), *dinp = xmalloc(sizeof(float) * ni);
    float *gw = calloc(nw, sizeof(float)), *gb = calloc(OC, sizeof(float));
    void *ddy = dev_bf16(dy, no), *ddinp = dev_bf16(NULL, ni), *dgw = dev_bf16(NULL, nw), *dgb = dev_bf16(NULL, OC);
    for (int rep = 0; rep < 2; rep++) {
        cpu_matmul_backward(dinp, gw, with_bias ? gb : NULL, dy, x, w, N, C, OC);
        poison(ddinp, ni * 2);
        G->core->matmul_backward(ddinp, dgw, with_bias ? dgb : NULL, ddy, dx, dw, N, C, OC);
    }
    cmp_bf16("backward dinp", ddinp, dinp, ni, TOL_GRAD);
    cmp_bf16("backward dw (x2, accumulated)", dgw, gw, nw, TOL_GRAD);
    if (with_bias) {
        cmp_bf16("backward dbias (x2, accumulated)", dgb, gb, OC, TOL_GRAD);
        // deterministic: the same call from the same state gives the same bits
        float *b1 = get_bf16(dgb, OC), *w1 = get_bf16(dgw, nw);
        void *sgb = dev_bf16(b1, OC), *sgw = dev_bf16(w1, nw);
        G->core->matmul_backward(ddinp, dgw, dgb, ddy, dx, dw, N, C, OC);
        G->core->matmul_backward(ddinp, sgw, sgb, ddy, dx, dw, N, C, OC);
        float *b2 = get_bf16(dgb, OC), *b3 = get_bf16(sgb, OC), *w2 = get_bf16(dgw, nw), *w3 = get_bf16(sgw, nw);
        CHECK(!memcmp(b2, b3, sizeof(float) * OC) && !memcmp(w2, w3, sizeof(float) * nw),
              "matmul backward: two identical calls gave different dw/dbias bits");
        G->free(sgb), G->free(sgw);
        free(b1), free(w1), free(b2), free(b3), free(w2), free(w3);
    }
    G->free(dx), G->free(dw), G->free(dbias), G->free(dout), G->free(ddy), G->free(ddinp), G->free(dgw), G->free(dgb);
    free(x), free(w), free(bias), free(out), free(dy), free(dinp), free(gw), free(gb);
}

// More GEMM shapes than the plan cache holds (sampling through full forwards makes one per
// sequence length): every result right, and a shape whose plan was evicted and rebuilt
// gives the same bits as before.
static void test_matmul_many_shapes(void) {
    const int C = 64, OC = 96, NMAX = 300;
    printf("matmul: %d shapes (plan cache eviction)\n", NMAX);
    float *x = host_rand((size_t)NMAX * C, 1, 0), *w = host_rand((size_t)OC * C, 0.125f, 0), *b = host_rand(OC, 0.5f, 0);
    float *out = xmalloc(sizeof(float) * (size_t)NMAX * OC);
    void *dx = dev_bf16(x, (size_t)NMAX * C), *dw = dev_bf16(w, (size_t)OC * C), *db = dev_bf16(b, OC);
    void *dout = dev_bf16(NULL, (size_t)NMAX * OC);
    unsigned short first[7 * 96], again[7 * 96];
    int bad = 0;
    for (int n = 7; n < 7 + NMAX - 6; n++) {
        G->core->matmul_forward(dout, dx, dw, db, n, C, OC);
        if (n == 7) G->copy_to_host(first, dout, sizeof first);
        if (n % 50 == 0) {
            cpu_matmul_forward(out, x, w, b, n, C, OC);
            cmp_bf16("forward out (many shapes)", dout, out, (size_t)n * OC, TOL_OUT);
        }
    }
    G->core->matmul_forward(dout, dx, dw, db, 7, C, OC);
    G->copy_to_host(again, dout, sizeof again);
    bad = memcmp(first, again, sizeof first) != 0;
    CHECK(!bad, "a rebuilt GEMM plan gave different bits");
    G->free(dx), G->free(dw), G->free(db), G->free(dout);
    free(x), free(w), free(b), free(out);
}

// the optional fused ops (GELU in the GEMM epilogues) against matmul + gelu on the CPU
static void test_matmul_gelu(int N, int C, int OC) {
    if (!G->core->matmul_gelu_forward || !G->core->matmul_backward_gelu) {
        printf("matmul+gelu: fused ops not in the table (HYBRID_CUDA_NO_FUSE)\n");
        return;
    }
    printf("matmul+gelu fused N=%d C=%d OC=%d\n", N, C, OC);
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = host_rand(ni, 1, 0), *w = host_rand(nw, 2.f / sqrtf((float)C), 0), *bias = host_rand(OC, 0.5f, 0);
    float *pre = xmalloc(sizeof(float) * no), *act = xmalloc(sizeof(float) * no);
    cpu_matmul_forward(pre, x, w, bias, N, C, OC);
    cpu_gelu_forward(act, pre, no);
    void *dx = dev_bf16(x, ni), *dw = dev_bf16(w, nw), *db = dev_bf16(bias, OC), *dpre = dev_bf16(NULL, no),
         *dact = dev_bf16(NULL, no);
    poison(dpre, no * 2);
    poison(dact, no * 2);
    G->core->matmul_gelu_forward(dact, dpre, dx, dw, db, N, C, OC);
    cmp_bf16("forward pre-activation", dpre, pre, no, TOL_OUT);
    cmp_bf16("forward gelu", dact, act, no, TOL_OUT);
    // the next layer: (N, OC) -> (N, C2) with weights w2; backward through it and the GELU
    const int C2 = C;
    size_t n2 = (size_t)N * C2, nw2 = (size_t)C2 * OC;
    float *w2 = host_rand(nw2, 1.f / sqrtf((float)OC), 0), *dy = host_rand(n2, 1, 0);
    float *pre_b = get_bf16(dpre, no), *act_b = get_bf16(dact, no);  // the GPU's own activations
    float *dact_ref = xmalloc(sizeof(float) * no), *dpre_ref = xmalloc(sizeof(float) * no);
    float *gw2 = calloc(nw2, sizeof(float)), *gb2 = calloc(C2, sizeof(float));
    for (int rep = 0; rep < 2; rep++) cpu_matmul_backward(dact_ref, gw2, gb2, dy, act_b, w2, N, OC, C2);
    cpu_gelu_backward(dpre_ref, pre_b, dact_ref, no);
    void *dw2 = dev_bf16(w2, nw2), *ddy = dev_bf16(dy, n2), *dgw2 = dev_bf16(NULL, nw2), *dgb2 = dev_bf16(NULL, C2),
         *ddpre = dev_bf16(NULL, no);
    for (int rep = 0; rep < 2; rep++) {
        poison(ddpre, no * 2);
        G->core->matmul_backward_gelu(ddpre, dgw2, dgb2, ddy, dact, dw2, dpre, N, OC, C2);
    }
    cmp_bf16("backward dpre (dGELU epilogue)", ddpre, dpre_ref, no, TOL_GRAD);
    cmp_bf16("backward dw (x2, accumulated)", dgw2, gw2, nw2, TOL_GRAD);
    cmp_bf16("backward dbias (x2, accumulated)", dgb2, gb2, C2, TOL_GRAD);
    G->free(dx), G->free(dw), G->free(db), G->free(dpre), G->free(dact), G->free(dw2), G->free(ddy), G->free(dgw2);
    G->free(dgb2), G->free(ddpre);
    free(x), free(w), free(bias), free(pre), free(act), free(w2), free(dy), free(pre_b), free(act_b), free(dact_ref);
    free(dpre_ref), free(gw2), free(gb2);
}

static void test_attention(int B, int T, int C, int NH) {
    printf("attention B=%d T=%d C=%d NH=%d (head size %d)\n", B, T, C, NH, C / NH);
    size_t N = (size_t)B * T, nq = N * 3 * C, no = N * C, nl = (size_t)B * NH * T;
    float *qkv = host_rand(nq, 1.5f, 0), *out = xmalloc(sizeof(float) * no), *lse = xmalloc(sizeof(float) * nl);
    cpu_attention_forward(out, lse, qkv, B, T, C, NH);
    void *dqkv_in = dev_bf16(qkv, nq), *dout = dev_bf16(NULL, no);
    float *dlse = dev_f32(NULL, nl);
    poison(dout, no * 2);
    poison(dlse, nl * 4);
    G->core->attention_forward(dout, (real *)dlse, dqkv_in, B, T, C, NH);
    cmp_bf16("forward out", dout, out, no, TOL_OUT);
    cmp_f32("forward lse (fp32)", dlse, lse, nl, TOL_F32);

    float *dy = host_rand(no, 1, 0), *dqkv = xmalloc(sizeof(float) * nq);
    cpu_attention_backward(dqkv, dy, qkv, out, lse, B, T, C, NH);
    void *ddy = dev_bf16(dy, no), *ddqkv = dev_bf16(NULL, nq);
    poison(ddqkv, nq * 2);
    G->core->attention_backward(ddqkv, ddy, dqkv_in, dout, (real *)dlse, B, T, C, NH);
    float *got = get_bf16(ddqkv, nq);
    // q, k and v parts separately
    const char *names[3] = {"backward dq", "backward dk", "backward dv"};
    float *gp = xmalloc(sizeof(float) * no), *rp = xmalloc(sizeof(float) * no);
    for (int part = 0; part < 3; part++) {
        for (size_t i = 0; i < N; i++) {
            memcpy(gp + i * C, got + i * 3 * C + (size_t)part * C, sizeof(float) * C);
            memcpy(rp + i * C, dqkv + i * 3 * C + (size_t)part * C, sizeof(float) * C);
        }
        expect(names[part], rel_rms(gp, rp, no), TOL_GRAD);
    }
    G->free(dqkv_in), G->free(dout), G->free(dlse), G->free(ddy), G->free(ddqkv);
    free(qkv), free(out), free(lse), free(dy), free(dqkv), free(got), free(gp), free(rp);
}

static void test_elementwise(size_t n) {
    printf("elementwise n=%zu\n", n);
    float *a = host_rand(n, 3, 0), *b = host_rand(n, 1, 0), *ref = xmalloc(sizeof(float) * n);
    void *da = dev_bf16(a, n), *db = dev_bf16(b, n), *dc = dev_bf16(NULL, n);
    cpu_gelu_forward(ref, a, n);
    poison(dc, n * 2);
    G->core->gelu_forward(dc, da, n);
    cmp_bf16("gelu_forward", dc, ref, n, TOL_OUT);
    cpu_gelu_backward(ref, a, b, n);
    poison(dc, n * 2);
    G->core->gelu_backward(dc, da, db, n);
    cmp_bf16("gelu_backward", dc, ref, n, TOL_GRAD);
    cpu_add_forward(ref, a, b, n);
    poison(dc, n * 2);
    G->core->add_forward(dc, da, db, n);
    cmp_bf16("add_forward", dc, ref, n, TOL_OUT);
    G->core->add_inplace(da, db, n);
    cmp_bf16("add_inplace", da, ref, n, TOL_OUT);
    cpu_scale(ref, 0.37f, n);
    G->core->scale(da, 0.37f, n);
    cmp_bf16("scale", da, ref, n, TOL_OUT);
    // misaligned, odd length: the scalar path
    size_t m = n - 5;
    void *da1 = backend_offset(G, db, 1), *dc1 = backend_offset(G, dc, 1);
    cpu_gelu_forward(ref, b + 1, m);
    poison(dc, n * 2);
    G->core->gelu_forward(dc1, da1, m);
    float *g = get_bf16(dc, n);
    expect("gelu_forward (misaligned, odd length)", rel_rms(g + 1, ref, m), TOL_OUT);
    CHECK(isnan(g[0]) && isnan(g[n - 4]), "gelu wrote outside its range");
    free(g);
    // sums: fp32 statistics and bf16 squares, against double on the host
    double s_ref = 0, ss_ref = 0;
    for (size_t i = 0; i < n; i++) {
        s_ref += b[i];
        ss_ref += (double)b[i] * b[i];
    }
    float *df = dev_f32(b, n);
    expect("sum (fp32 statistics)", fabs(G->core->sum((real *)df, n) - s_ref) / fmax(fabs(s_ref), 1e-30), TOL_F32);
    expect("sum_squares (bf16)", fabs(G->core->sum_squares(db, n) - ss_ref) / ss_ref, TOL_F32);
    double ss1 = ss_ref - (double)b[0] * b[0];
    expect("sum_squares (misaligned)", fabs(G->core->sum_squares(da1, n - 1) - ss1) / ss1, TOL_F32);
    G->free(da), G->free(db), G->free(dc), G->free(df);
    free(a), free(b), free(ref);
}

static void test_glu(int N, int H, int kind) {
    printf("glu kind=%d N=%d H=%d\n", kind, N, H);
    size_t ni = (size_t)N * 2 * H, no = (size_t)N * H;
    GluAct act = {kind ? GLU_SITU : GLU_SWIGLU, 2.0, kind ? 3.0 : 0.0};
    float *x = host_rand(ni, 3, 0), *dy = host_rand(no, 1, 0), *out = xmalloc(sizeof(float) * no),
          *dx = xmalloc(sizeof(float) * ni);
    cpu_glu_forward(out, x, N, H, act);
    cpu_glu_backward(dx, dy, x, N, H, act);
    void *dxin = dev_bf16(x, ni), *ddy = dev_bf16(dy, no), *dout = dev_bf16(NULL, no), *ddx = dev_bf16(NULL, ni);
    poison(dout, no * 2);
    poison(ddx, ni * 2);
    G->norm_glu->glu_forward(dout, dxin, N, H, act);
    G->norm_glu->glu_backward(ddx, ddy, dxin, N, H, act);
    cmp_bf16("forward", dout, out, no, TOL_OUT);
    cmp_bf16("backward", ddx, dx, ni, TOL_GRAD);
    G->free(dxin), G->free(ddy), G->free(dout), G->free(ddx);
    free(x), free(dy), free(out), free(dx);
}

static void test_crossentropy(int N, int V, int Vp) {
    printf("crossentropy N=%d V=%d Vp=%d\n", N, V, Vp);
    size_t n = (size_t)N * Vp;
    float *z = host_rand(n, 4, 0), *loss = xmalloc(sizeof(float) * N), *dz = xmalloc(sizeof(float) * n);
    int *tg = rand_tokens(N, V, 0), count = 0;
    for (int i = 0; i < N; i++) {
        if (i % 7 == 3) tg[i] = -1;
        count += tg[i] >= 0;
    }
    float dloss = 1.f / (float)count;
    cpu_crossentropy_forward(loss, z, tg, N, V, Vp);
    cpu_crossentropy_backward(dz, z, tg, dloss, N, V, Vp);
    void *dzd = dev_bf16(z, n);
    int *dtg = dev_tokens(tg, N);
    float *dl = dev_f32(NULL, N);
    poison(dl, N * 4);
    G->core->crossentropy_forward((real *)dl, dzd, dtg, N, V, Vp);
    cmp_f32("forward losses (fp32)", dl, loss, N, TOL_F32);
    G->core->crossentropy_backward(dzd, dzd, dtg, dloss, N, V, Vp);  // in place, as the graph runs it
    float *g = get_bf16(dzd, n);
    expect("backward dlogits (in place)", rel_rms(g, dz, n), TOL_GRAD);
    int stray = 0;
    for (int i = 0; i < N; i++)
        for (int v = 0; v < Vp; v++)
            if ((tg[i] < 0 || v >= V) && g[(size_t)i * Vp + v] != 0.f) stray++;
    CHECK(stray == 0, "%d padding / ignored-row gradients are not exactly 0", stray);
    G->upload(dzd, z, n);  // new contents: the forward's saved statistics no longer apply
    G->core->crossentropy_backward(dzd, dzd, dtg, dloss, N, V, Vp);
    free(g);
    g = get_bf16(dzd, n);
    expect("backward dlogits (statistics recomputed)", rel_rms(g, dz, n), TOL_GRAD);
    G->free(dzd), G->free(dtg), G->free(dl);
    free(z), free(loss), free(dz), free(tg), free(g);
}

static void test_adamw(size_t n) {
    printf("adamw n=%zu (fp32 master)\n", n);
    float *p0 = host_rand(n, 1, 0), *p = host_dup(p0, n), *m = calloc(n, 4), *v = calloc(n, 4);
    void *dp = dev_bf16(p0, n), *dgr = dev_bf16(NULL, n);
    float *dm = dev_f32(NULL, n), *dv = dev_f32(NULL, n), *dmaster = dev_f32(p0, n);
    for (int t = 1; t <= 3; t++) {
        float *gr = host_rand(n, 1, 0);
        G->upload(dgr, gr, n);
        cpu_adamw_update(p, gr, m, v, NULL, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        G->optim->adamw_update(dp, dgr, dm, dv, dmaster, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        free(gr);
    }
    cmp_f32("master weights (fp32)", dmaster, p, n, TOL_F32);
    cmp_f32("m (fp32)", dm, m, n, TOL_F32);
    cmp_f32("v (fp32)", dv, v, n, TOL_F32);
    float *gm = get_f32(dmaster, n), *gp = get_bf16(dp, n);
    for (size_t i = 0; i < n; i++) {
        gm[i] -= p0[i];
        p[i] -= p0[i];
    }
    expect("update (master - initial) vs CPU", rel_rms(gm, p, n), 1e-3);
    float *gm2 = get_f32(dmaster, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += gp[i] != bf16_round(gm2[i]);
    CHECK(bad == 0, "%zu params differ from bf16(master)", bad);
    G->free(dp), G->free(dgr), G->free(dm), G->free(dv), G->free(dmaster);
    free(p0), free(p), free(m), free(v), free(gm), free(gp), free(gm2);
}

// multi-tensor AdamW: segments of one buffer (sizes from 1 to several chunks, gaps left
// alone, per-segment lr and wd) against the CPU, and bit-equal to adamw_update per segment
static void test_adamw_multi(void) {
    if (!G->optim->adamw_update_multi) {
        printf("adamw multi: not in the table\n");
        return;
    }
    enum { NS = 7 };
    const size_t len[NS] = {768, 1, 3 * 768 * 768 + 5, 16384, 40000, 3, 200000};
    size_t off[NS], n = 0;
    float lr[NS], wd[NS];
    for (int i = 0; i < NS; i++) {
        n += 17;  // a gap no segment covers
        off[i] = n;
        n += len[i];
        lr[i] = 1e-3f * (float)(i + 1);
        wd[i] = i % 2 ? 0.f : 0.1f;
    }
    n += 9;
    printf("adamw multi: %d segments, %zu elements\n", NS, n);
    float *p0 = host_rand(n, 1, 0), *p = host_dup(p0, n), *m = calloc(n, 4), *v = calloc(n, 4);
    void *dp = dev_bf16(p0, n), *dp2 = dev_bf16(p0, n), *dgr = dev_bf16(NULL, n);
    float *dm = dev_f32(m, n), *dv = dev_f32(v, n), *dmaster = dev_f32(p0, n);
    float *dm2 = dev_f32(m, n), *dv2 = dev_f32(v, n), *dmaster2 = dev_f32(p0, n);
    for (int t = 1; t <= 3; t++) {
        float *gr = host_rand(n, 1, 0);
        G->upload(dgr, gr, n);
        for (int i = 0; i < NS; i++) {
            cpu_adamw_update(p + off[i], gr + off[i], m + off[i], v + off[i], NULL, len[i], lr[i], 0.9f, 0.95f, 1e-8f,
                             wd[i], 0.5f, t);
            G->optim->adamw_update(backend_offset(G, dp2, off[i]), backend_offset(G, dgr, off[i]), dm2 + off[i],
                            dv2 + off[i], dmaster2 + off[i], len[i], lr[i], 0.9f, 0.95f, 1e-8f, wd[i], 0.5f, t);
        }
        G->optim->adamw_update_multi(dp, dgr, dm, dv, dmaster, NS, off, len, lr, wd, 0.9f, 0.95f, 1e-8f, 0.5f, t);
        free(gr);
    }
    cmp_f32("master weights (fp32)", dmaster, p, n, TOL_F32);  // gaps: p0 on both sides
    cmp_f32("m (fp32)", dm, m, n, TOL_F32);
    cmp_f32("v (fp32)", dv, v, n, TOL_F32);
    float *a = get_f32(dmaster, n), *b = get_f32(dmaster2, n), *pa = get_bf16(dp, n), *pb = get_bf16(dp2, n);
    float *ma = get_f32(dm, n), *mb = get_f32(dm2, n), *va = get_f32(dv, n), *vb = get_f32(dv2, n);
    CHECK(!memcmp(a, b, n * 4) && !memcmp(pa, pb, n * 4) && !memcmp(ma, mb, n * 4) && !memcmp(va, vb, n * 4),
          "adamw_update_multi differs from adamw_update per segment");
    size_t gap_bad = 0;
    for (size_t i = 0; i < n; i++) {
        int in = 0;
        for (int s2 = 0; s2 < NS; s2++) in |= i >= off[s2] && i < off[s2] + len[s2];
        if (!in) gap_bad += a[i] != p0[i] || pa[i] != p0[i] || ma[i] != 0.f || va[i] != 0.f;
    }
    CHECK(gap_bad == 0, "adamw_update_multi wrote %zu elements outside the segments", gap_bad);
    printf("  multi == per-segment bit for bit; gaps untouched\n");
    G->free(dp), G->free(dp2), G->free(dgr), G->free(dm), G->free(dv), G->free(dmaster), G->free(dm2), G->free(dv2);
    G->free(dmaster2);
    free(p0), free(p), free(m), free(v), free(a), free(b), free(pa), free(pb), free(ma), free(mb), free(va), free(vb);
}

static void test_muon(int rows, int cols, int nb) {
    printf("muon %dx%d, %d block(s) (bf16 Newton-Schulz, fp32 master)\n", rows, cols, nb);
    size_t n = (size_t)rows * cols;
    float *w0 = host_rand(n, 0.02f, 0), *w = host_dup(w0, n), *M = calloc(n, 4);
    float *work = xmalloc(sizeof(float) * muon_workspace_size(rows / nb, cols));
    void *dw = dev_bf16(w0, n), *dg = dev_bf16(NULL, n);
    float *dM = dev_f32(NULL, n), *dmaster = dev_f32(w0, n);
    void *dwork = G->alloc(muon_workspace_size(rows / nb, cols) * 2);
    for (int step = 0; step < 2; step++) {
        float *gr = host_rand(n, 1, 0);
        G->upload(dg, gr, n);
        cpu_muon_update(w, gr, M, NULL, rows, cols, nb, 0.95f, 1, 5, MUON_SCALE_MOONLIGHT, 0.02f, 0.1f, 0.7f, work);
        G->optim->muon_update(dw, dg, dM, dmaster, rows, cols, nb, 0.95f, 1, 5, MUON_SCALE_MOONLIGHT, 0.02f, 0.1f, 0.7f,
                       dwork);
        free(gr);
    }
    cmp_f32("momentum (fp32)", dM, M, n, TOL_F32);
    float *gm = get_f32(dmaster, n);
    for (size_t i = 0; i < n; i++) {
        gm[i] -= w0[i];
        w[i] -= w0[i];
    }
    // bf16 Newton-Schulz: the gate/beta-gradient class tolerance of §5 (2e-2)
    expect("update (master - initial) vs CPU NS5 in fp32", rel_rms(gm, w, n), 2e-2);
    G->free(dw), G->free(dg), G->free(dM), G->free(dmaster), G->free(dwork);
    free(w0), free(w), free(M), free(work), free(gm);
}

// ---- whole model ----

static void gpt2_config(Config *c, int B, int T) {
    config_defaults(c);
    config_load_file(c, "configs/gpt2-124m.conf");
    c->batch_size = B;
    c->seq_len = T;
    config_finalize(c);
}

static void test_model_step(int B, int T) {
    printf("GPT-2 124M, one training step, CPU float vs CUDA bf16, B=%d T=%d\n", B, T);
    Config c;
    gpt2_config(&c, B, T);
    Model mc, mg;
    model_create(&mc, &c, backend_cpu(), B, T);
    model_create(&mg, &c, G, B, T);
    size_t np = mc.table.total, N = (size_t)B * T, Vp = c.padded_vocab_size;
    float *w = xmalloc(sizeof(float) * np);
    params_init(&mc.table, w, 1234);
    for (size_t i = 0; i < np; i++) w[i] = bf16_round(w[i]);
    model_set_params(&mc, w);
    model_set_params(&mg, w);
    int *in = rand_tokens(N, c.vocab_size, 0), *tg = rand_tokens(N, c.vocab_size, 0);
    tg[5] = -1;
    double lc = model_forward(&mc, in, tg, B, T), lg = model_forward(&mg, in, tg, B, T);
    printf("  loss cpu %.6f cuda %.6f\n", lc, lg);
    expect("loss", fabs(lg - lc) / lc, TOL_OUT);
    float *zc = xmalloc(sizeof(float) * N * Vp), *zg = xmalloc(sizeof(float) * N * Vp);
    backend_cpu()->download(zc, mc.acts.logits, N * Vp);
    G->download(zg, mg.acts.logits, N * Vp);
    // Whole model: 12 layers of bf16 activations compound the per-op rounding
    // (~1.7e-3 each); measured ~1.0e-2 on logits and ~1.1e-2 on the gradients, so the
    // whole-model check uses 2e-2 (3e-2 for the worst single tensor).
    expect("logits", rel_rms(zg, zc, N * Vp), TOL_MODEL);
    model_zero_grad(&mc);
    model_zero_grad(&mg);
    model_backward(&mc, 1.0f);
    model_backward(&mg, 1.0f);
    float *gc = xmalloc(sizeof(float) * np), *gg = xmalloc(sizeof(float) * np);
    model_get_grads(&mc, gc);
    model_get_grads(&mg, gg);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < mc.table.count; i++) {
        const ParamInfo *p = &mc.table.items[i];
        double e = rel_rms(gg + p->offset, gc + p->offset, p->numel);
        printf("    grad %-34s %.3e\n", p->name, e);
        if (e > worst) {
            worst = e;
            worst_name = p->name;
        }
    }
    printf("  worst tensor: %s\n", worst_name);
    expect("gradients, all tensors together", rel_rms(gg, gc, np), TOL_MODEL);
    expect("gradients, worst single tensor", worst, 1.5 * TOL_MODEL);
    model_destroy(&mc);
    model_destroy(&mg);
    free(w), free(in), free(tg), free(zc), free(zg), free(gc), free(gg);
}

// `steps` training steps on the GPU from init seed 1; losses out; params to host (if non-NULL).
// restart_at > 0: save weights + optimizer state after that many steps, rebuild model and
// optimizer from them (the resume path), continue.
static void gpu_run(Config *c, int steps, int restart_at, double *losses, float *params_out) {
    int B = c->batch_size, T = c->seq_len;
    size_t N = (size_t)B * T;
    Model m;
    model_create(&m, c, G, B, T);
    model_init_params(&m, 1);
    Optimizer o;
    optimizer_create(&o, &m);
    Rng data;
    rng_seed(&data, 99);
    int *in = xmalloc(sizeof(int) * N), *tg = xmalloc(sizeof(int) * N);
    for (int s = 0; s < steps; s++) {
        if (restart_at && s == restart_at) {
            size_t n = m.table.total;
            float *w = xmalloc(4 * n), *mm = xmalloc(4 * n), *vv = xmalloc(4 * n);
            optimizer_get_weights(&o, &m, w);
            optimizer_get_state(&o, &m, mm, vv);
            int t = o.t;
            optimizer_destroy(&o, &m);
            model_destroy(&m);
            model_create(&m, c, G, B, T);
            optimizer_create(&o, &m);
            optimizer_set_weights(&o, &m, w);
            optimizer_set_state(&o, &m, mm, vv, t);
            free(w), free(mm), free(vv);
        }
        for (size_t i = 0; i < N; i++) {
            in[i] = (int)rng_below(&data, (uint64_t)c->vocab_size);
            tg[i] = (int)(((uint64_t)in[i] * 7 + 3) % (uint64_t)c->vocab_size);  // learnable
        }
        model_zero_grad(&m);
        losses[s] = model_forward(&m, in, tg, B, T);
        model_backward(&m, 1.0f);
        optimizer_step(&o, &m, c->lr, grad_global_norm(&m));
    }
    if (params_out) model_get_params(&m, params_out);
    optimizer_destroy(&o, &m);
    model_destroy(&m);
    free(in), free(tg);
}

static void test_determinism_and_resume(int muon) {
    printf("GPT-2 124M on the GPU, %s: two identical runs, and a run restarted from saved state\n",
           muon ? "Muon" : "AdamW");
    Config c;
    gpt2_config(&c, 4, 1024);
    c.optimizer = muon ? OPT_MUON : OPT_ADAMW;
    c.lr = 1e-3;
    enum { S = 4 };
    double l1[S], l2[S], l3[S];
    size_t np;
    {
        ParamTable t;
        ModelParams mp;
        params_build(&c, &t, &mp);
        np = t.total;
        params_free(&t, &mp);
    }
    float *p1 = xmalloc(4 * np), *p2 = xmalloc(4 * np), *p3 = xmalloc(4 * np);
    gpu_run(&c, S, 0, l1, p1);
    gpu_run(&c, S, 0, l2, p2);
    gpu_run(&c, S, 2, l3, p3);
    for (int s = 0; s < S; s++) printf("  step %d loss %.9f %.9f %.9f\n", s + 1, l1[s], l2[s], l3[s]);
    CHECK(!memcmp(l1, l2, sizeof l1), "two identical GPU runs gave different losses");
    CHECK(!memcmp(p1, p2, 4 * np), "two identical GPU runs gave different parameters");
    CHECK(!memcmp(l1, l3, sizeof l1), "the restarted run's losses differ");
    CHECK(!memcmp(p1, p3, 4 * np), "the restarted run's parameters differ");
    printf("  identical runs: %s; restarted run bit-exact: %s\n",
           !memcmp(l1, l2, sizeof l1) && !memcmp(p1, p2, 4 * np) ? "yes" : "NO",
           !memcmp(l1, l3, sizeof l1) && !memcmp(p1, p3, 4 * np) ? "yes" : "NO");
    free(p1), free(p2), free(p3);
}

// ---- a small GPT-2 trained for a few steps on both backends from the same weights ----

static void test_small_training(int muon) {
    printf("small GPT-2 (2 layers, d 256, 4 heads), 10 %s steps: CPU float vs CUDA bf16 losses\n",
           muon ? "Muon" : "AdamW");
    Config c;
    config_defaults(&c);
    config_load_file(&c, "configs/gpt2-tiny.conf");
    config_set_override(&c, "layers", "A x2");
    c.d_model = 256;
    c.n_head = 4;
    c.vocab_size = 1000;
    c.padded_vocab_size = 0;
    c.mlp_hidden = 0;
    c.batch_size = 8;
    c.seq_len = 128;
    c.optimizer = muon ? OPT_MUON : OPT_ADAMW;
    c.lr = 2e-3;
    config_finalize(&c);
    const int B = c.batch_size, T = c.seq_len, S = 10;
    size_t N = (size_t)B * T;
    Model mc, mg;
    model_create(&mc, &c, backend_cpu(), B, T);
    model_create(&mg, &c, G, B, T);
    float *w = xmalloc(sizeof(float) * mc.table.total);
    params_init(&mc.table, w, 7);
    for (size_t i = 0; i < mc.table.total; i++) w[i] = bf16_round(w[i]);
    model_set_params(&mc, w);
    model_set_params(&mg, w);
    Optimizer oc, og;
    optimizer_create(&oc, &mc);
    optimizer_create(&og, &mg);
    Rng data;
    rng_seed(&data, 3);
    int *in = xmalloc(sizeof(int) * N), *tg = xmalloc(sizeof(int) * N);
    double worst = 0, first = 0, lastc = 0;
    for (int s = 0; s < S; s++) {
        for (size_t i = 0; i < N; i++) {
            in[i] = (int)rng_below(&data, (uint64_t)c.vocab_size);
            tg[i] = (int)(((uint64_t)in[i] * 7 + 3) % (uint64_t)c.vocab_size);
        }
        double l[2];
        Model *ms[2] = {&mc, &mg};
        Optimizer *os[2] = {&oc, &og};
        for (int k = 0; k < 2; k++) {
            model_zero_grad(ms[k]);
            l[k] = model_forward(ms[k], in, tg, B, T);
            model_backward(ms[k], 1.0f);
            optimizer_step(os[k], ms[k], c.lr, grad_global_norm(ms[k]));
        }
        double e = fabs(l[1] - l[0]) / l[0];
        if (e > worst) worst = e;
        if (s == 0) first = l[0];
        lastc = l[0];
        printf("  step %2d loss cpu %.6f cuda %.6f\n", s + 1, l[0], l[1]);
    }
    CHECK(lastc < first - 0.5, "the CPU reference loss did not fall: %f -> %f", first, lastc);
    expect("loss trajectory, worst relative difference", worst, TOL_OUT);
    optimizer_destroy(&oc, &mc);
    optimizer_destroy(&og, &mg);
    model_destroy(&mc);
    model_destroy(&mg);
    free(w), free(in), free(tg);
}

// ---- resume through the CLI (train.c's checkpoint save / --resume) ----

#define CLI_DIR "out/test-gpu/cli"

// cli_run, and the log on failure
static int sh(const char *cmd) {
    int rc = cli_run(CLI_DIR, cmd);
    if (rc) {
        char *log = read_file(CLI_DIR "/last.log", NULL);
        printf("  command failed (%d): %s\n%s\n", rc, cmd, log ? log : "");
        free(log);
    }
    return rc;
}

static void test_cli_resume(const char *optimizer) {
    printf("hybrid train --device cuda (%s): uninterrupted vs stopped + --resume auto\n", optimizer);
    remove_tree(CLI_DIR);
    mkdir_p(CLI_DIR "/data");
    Rng r;
    rng_seed(&r, 5);
    for (int s = 0; s < 2; s++) {
        size_t n = 200000;
        uint16_t *t = xmalloc(sizeof(uint16_t) * n);
        for (size_t i = 0; i < n; i++) t[i] = (uint16_t)rng_below(&r, 1000);
        char path[128];
        snprintf(path, sizeof path, s ? CLI_DIR "/data/val_000000.bin" : CLI_DIR "/data/train_000000.bin");
        shard_write(path, t, n);
        free(t);
    }
    char base[2048];
    snprintf(base, sizeof base,
             "./hybrid train configs/gpt2-tiny.conf --device cuda --layers 'A x2' --d_model 256 --n_head 4 "
             "--vocab_size 1000 --padded_vocab_size 0 --context_length 128 --seq_len 128 --batch_size 8 "
             "--total_batch_size 2048 --steps 8 --warmup_steps 2 --lr 3e-3 --optimizer %s --val_every 4 "
             "--val_batches 2 --log_every 2 --sample_tokens 8 --train_data '" CLI_DIR "/data/train_*.bin' "
             "--val_data '" CLI_DIR "/data/val_*.bin' ",
             optimizer);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s --out_dir " CLI_DIR "/a --checkpoint_every 4", base);
    CHECK(sh(cmd) == 0, "uninterrupted run failed");
    snprintf(cmd, sizeof cmd, "%s --out_dir " CLI_DIR "/b --checkpoint_every 4 --stop_at_step 4", base);
    CHECK(sh(cmd) == 0, "first half failed");
    snprintf(cmd, sizeof cmd, "%s --out_dir " CLI_DIR "/b --checkpoint_every 4 --resume auto", base);
    CHECK(sh(cmd) == 0, "resumed half failed");
    char *a = cli_stable_lines(CLI_DIR "/a/metrics.jsonl"), *b = cli_stable_lines(CLI_DIR "/b/metrics.jsonl");
    int same = !strcmp(a, b) && strlen(a) > 0;
    CHECK(same, "resumed losses differ:\n%s---\n%s", a, b);
    printf("  metrics identical after resume: %s\n", same ? "yes" : "NO");
    // the final checkpoints must hold the same fp32 master weights, byte for byte
    char *wa = NULL, *wb = NULL;
    size_t la = 0, lb = 0;
    wa = read_file(CLI_DIR "/a/checkpoints/step_00000008/model.safetensors", &la);
    wb = read_file(CLI_DIR "/b/checkpoints/step_00000008/model.safetensors", &lb);
    CHECK(wa && wb && la == lb && !memcmp(wa, wb, la), "final checkpoints differ");
    free(a), free(b), free(wa), free(wb);
}

int main(int argc, char **argv) {
    if (cuda_device_count() < 1) {
        printf("test_cuda: no CUDA device visible; nothing to test\n");
        return 1;
    }
    G = backend_cuda();
    rng_seed(&g_rng, 20261129);
    const int B = 4, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304, N = B * T;
    int quick = argc > 1 && !strcmp(argv[1], "--ops-only");
    double t0 = now_seconds();
    test_embed(B, T, C, V, Vp);
    test_norm(N, C, 0);
    test_norm(N, C, 1);
    test_norm(1000, 200, 0);  // generic path
    test_add_norm(N, C);
    test_add_norm(1000, 200);  // generic path (separate ops)
    test_matmul(N, C, 3 * C, 1);
    test_matmul(N, 4 * C, C, 1);
    test_matmul(1024, C, Vp, 0);
    test_matmul(300, 100, 36, 1);  // odd shapes
    test_matmul_many_shapes();
    test_matmul_gelu(N, C, 4 * C);
    test_attention(B, T, C, NH);
    test_attention(2, 200, 256, 4);  // T not a multiple of the tile
    test_attention(2, 100, 128, 4);  // head size 32: the generic kernels
    test_elementwise((size_t)N * 4 * C + 3);
    test_glu(N, 1024, 0);
    test_glu(N, 1024, 1);
    test_crossentropy(2048, V, Vp);
    test_adamw(((size_t)1 << 20) + 3);
    test_adamw_multi();
    test_muon(3 * C, C, 3);
    test_muon(4 * C, C, 1);
    test_muon(C, 4 * C, 1);
    printf("ops: %.1f s\n", now_seconds() - t0);
    if (!quick) {
        test_model_step(2, 256);
        test_small_training(0);
        test_small_training(1);
        test_determinism_and_resume(0);
        test_determinism_and_resume(1);
        test_cli_resume("adamw");
        test_cli_resume("muon");
    }
    size_t live, peak, used, total;
    cuda_memory_stats(&live, &peak, &used, &total);
    printf("total %.1f s; backend peak allocation %.2f GiB\n", now_seconds() - t0, peak / 1073741824.0);
    TEST_MAIN_END();
}
