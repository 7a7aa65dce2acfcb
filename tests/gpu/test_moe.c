// GPU parity tests of the MoE family (model/ops/moe/moe.h; kernels/moe/): every member of
// MoeOps against its cpu_<member> (the float CPU reference) on fresh random inputs. Method
// and helpers: tests/gpu/harness.h (bf16-rounded inputs, NaN-poisoned outputs, RMS relative
// error; TOL_OUT for bf16 outputs, TOL_GRAD for bf16 gradients, TOL_F32 for the loss and the
// fp32 master bias). Integer outputs (sel, perm, pos, offsets, counts) must match exactly.
// Each backward takes the CUDA forward's saved tensors (bf16) as the inputs of both sides,
// so the error is the op's own. Parameter gradients (dw13, dw2) are fp32 (model/backend.h,
// `grad_size`), run twice from zero ("+=") and must hold fp32 values, not bf16-rounded ones;
// every backward (and the plan) runs a second time and must be bit-identical (determinism).
// Routing cases: top-k 1, 2 and 8, empty experts, all tokens to one expert (a large bias),
// tied scores (the lower index wins), sigmoid and softmax, SwiGLU and SiTU experts. Gather and
// combine (kernels/moe/dispatch.cu's vector and scalar kernels, the fused adds): test_dispatch_io;
// the plan alone at more chunks and experts than the dispatch cases: test_plan.
// The expert op runs in every GEMM mode (kernels/moe/experts.cu): our grouped kernels, cuBLAS's
// grouped batched GEMM (HYBRID_MOE_GEMM=cublas: the four row GEMMs, and the fp32 weight
// gradients one cublasGemmEx per expert; under the emulator cuBLAS is tests/cuda_emu's loop of
// column-major GEMMs, so the path's plumbing and argument mapping are checked there too) and
// the mix of the two (HYBRID_MOE_GEMM=mixed: the forward on ours, the backward's GEMMs on ours
// or cuBLAS by experts.cu's rule, the weight gradients forced onto cuBLAS in some cases, the
// offsets' copy asynchronous; under the emulator that copy reads as 0xff bytes until waited
// for), each against the CPU reference and bit-identical run to run
// (test_experts).
// The switches' errors and the cuBLAS path's offsets trap: tests/gpu/test_moe_switches.c (under
// the emulator only).
// The kernels are not handed to the backend yet (docs/cuda.md, "The CPU emulator"): the
// table comes from cuda_moe_ops() directly.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "model/ops/moe/moe.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"
#include "kernels/cuda_backend.h"  // cuda_moe_set_gemm and its counters

const MoeOps *cuda_moe_ops(void);  // kernels/moe/table.cu
void cuda_moe_set_wgrad_split(int s);  // kernels/moe/experts.cu: > 0 forces the wgrad split count
static const MoeOps *X;

static float *host_alloc(size_t n) { return xmalloc(sizeof(float) * (n ? n : 1)); }
// integer arrays: the number of differing entries must be 0
static void expect_ints(const char *what, const int *dev, const int *ref, size_t n) {
    int *got = get_bytes(dev, n * sizeof(int));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != ref[i];
    printf("  %-28s %zu of %zu differ\n", what, bad, n);
    CHECK(bad == 0, "%s: %zu of %zu entries differ", what, bad, n);
    free(got);
}
// the device tensor's bytes equal the host copy's (a rerun must be bit-identical)
static void expect_same(const char *what, const void *dev, const void *first, size_t bytes) {
    void *got = get_bytes(dev, bytes);
    int same = memcmp(got, first, bytes) == 0;
    printf("  %-28s %s\n", what, same ? "bit-identical" : "DIFFERS");
    CHECK(same, "%s: a rerun differs", what);
    free(got);
}
static float rel_err_scalar(double got, double ref) {
    return (float)(ref != 0 ? fabs(got - ref) / fabs(ref) : fabs(got - ref));
}

// random expert choices: sel (N, K) with K distinct experts per token out of `allowed`
// (the experts e with e % stride == 0: the others stay empty)
static int *rand_sel(int N, int K, int E, int stride) {
    int *sel = xmalloc(sizeof(int) * (size_t)N * K);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) {
            int e, dup;
            do {
                e = (int)rng_below(&g_rng, (uint64_t)((E + stride - 1) / stride)) * stride;
                dup = 0;
                for (int i = 0; i < j; i++) dup |= sel[t * K + i] == e;
            } while (dup);
            sel[t * K + j] = e;
        }
    return sel;
}

enum { BIAS_NONE = 0, BIAS_RAND = 1, BIAS_ONE = 2, TIES = 3 };

// router_forward, router_weights_backward, router_scores_backward
static void test_router(int N, int E, int K, RouterScoreFn fn, int renorm, double scale, int mode) {
    printf("router N=%d E=%d K=%d %s renorm=%d scale=%g mode=%d\n", N, E, K, fn == ROUTER_SOFTMAX ? "softmax" : "sigmoid",
           renorm, scale, mode);
    const size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *logits = host_rand(ne, 3.f, 0.f);
    if (mode == TIES)
        for (size_t i = 0; i < ne; i++) logits[i] = (i % E) < (size_t)E / 2 ? 0.5f : -0.25f;
    float *bias = NULL;
    if (mode == BIAS_RAND) bias = host_rand(E, 0.1f, 0.f);
    if (mode == BIAS_ONE) {
        bias = calloc(E, sizeof(float));
        bias[E - 1] = 8.f;  // every token routes to the last expert first
    }
    int *sel = xmalloc(sizeof(int) * nk);
    float *w = host_alloc(nk), *s = host_alloc(ne);
    cpu_router_forward(sel, w, s, logits, bias, N, E, K, fn, renorm, scale);
    void *dl = dev_bf16(logits, ne), *db = bias ? dev_bf16(bias, E) : NULL, *dw = dev_bf16(NULL, nk),
         *ds = dev_bf16(NULL, ne);
    int *dsel = dev_bytes(NULL, nk * sizeof(int));
    poison_bf16(dw, nk), poison_bf16(ds, ne), poison_bytes(dsel, nk * sizeof(int));
    X->router_forward(dsel, dw, ds, dl, db, N, E, K, fn, renorm, scale);
    expect_ints("sel", dsel, sel, nk);
    cmp_bf16("scores", ds, s, ne, TOL_OUT);
    cmp_bf16("weights", dw, w, nk, TOL_OUT);
    // backward on the CUDA forward's scores and selection
    float *sg = get_bf16(ds, ne);
    int *selg = get_bytes(dsel, nk * sizeof(int));
    float *dwt = host_rand(nk, 1.f, 0.f), *dsc = host_alloc(ne), *dsin = host_rand(ne, 1.f, 0.f),
          *dlg = host_alloc(ne);
    cpu_router_weights_backward(dsc, dwt, sg, selg, N, E, K, renorm, scale);
    cpu_router_scores_backward(dlg, dsin, sg, N, E, fn);
    void *ddw = dev_bf16(dwt, nk), *dds = dev_bf16(NULL, ne), *ddsin = dev_bf16(dsin, ne), *ddl = dev_bf16(NULL, ne);
    for (int rep = 0; rep < 2; rep++) {
        void *first_ds = rep ? get_bytes(dds, ne * 2) : NULL, *first_dl = rep ? get_bytes(ddl, ne * 2) : NULL;
        poison_bf16(dds, ne), poison_bf16(ddl, ne);
        X->router_weights_backward(dds, ddw, ds, dsel, N, E, K, renorm, scale);
        X->router_scores_backward(ddl, ddsin, ds, N, E, fn);
        if (!rep) {
            cmp_bf16("dscores", dds, dsc, ne, TOL_GRAD);
            cmp_bf16("dlogits", ddl, dlg, ne, TOL_GRAD);
        } else {
            expect_same("dscores rerun", dds, first_ds, ne * 2);
            expect_same("dlogits rerun", ddl, first_dl, ne * 2);
            free(first_ds), free(first_dl);
        }
    }
    void *bufs[] = {dl, db, dw, ds, dsel, ddw, dds, ddsin, ddl};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) G->free(bufs[i]);
    free(logits), free(bias), free(sel), free(w), free(s), free(sg), free(selg), free(dwt), free(dsc), free(dsin),
        free(dlg);
}

// moe_aux_loss_forward / backward on sigmoid-router scores, sequences of L
static void test_aux(int N, int E, int K, int L) {
    printf("aux loss N=%d E=%d K=%d L=%d\n", N, E, K, L);
    const size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *logits = host_rand(ne, 3.f, 0.f), *w = host_alloc(nk), *s = host_alloc(ne);
    int *sel = xmalloc(sizeof(int) * nk);
    cpu_router_forward(sel, w, s, logits, NULL, N, E, K, ROUTER_SIGMOID, 1, 1.0);
    for (size_t i = 0; i < ne; i++) s[i] = bf16_round(s[i]);
    // alpha large enough that the gradient is O(1e-2): comparable to the start values below
    const double alpha = 10.0, dloss = 1.5;
    double ref = cpu_moe_aux_loss_forward(s, sel, N, E, K, L, alpha);
    void *ds = dev_bf16(s, ne);
    int *dsel = dev_bytes(sel, nk * sizeof(int));
    double got = X->moe_aux_loss_forward(ds, dsel, N, E, K, L, alpha);
    printf("  aux loss %.9g (reference %.9g)\n", got, ref);
    expect("aux loss", rel_err_scalar(got, ref), TOL_F32);
    // the gradient alone (from zero), then accumulated onto random values of its size
    float *z0 = calloc(ne, sizeof(float)), *zref = calloc(ne, sizeof(float));
    cpu_moe_aux_loss_backward(zref, s, sel, N, E, K, L, alpha, dloss);
    void *dd = dev_bf16(z0, ne);
    X->moe_aux_loss_backward(dd, ds, dsel, N, E, K, L, alpha, dloss);
    cmp_bf16("dscores (aux, from 0)", dd, zref, ne, TOL_GRAD);
    float *d0 = host_rand(ne, 1e-2f, 0.f), *dref = host_dup(d0, ne);
    cpu_moe_aux_loss_backward(dref, s, sel, N, E, K, L, alpha, dloss);
    G->upload(dd, d0, ne);
    X->moe_aux_loss_backward(dd, ds, dsel, N, E, K, L, alpha, dloss);
    cmp_bf16("dscores (+= aux)", dd, dref, ne, TOL_GRAD);
    free(z0), free(zref);
    void *first = get_bytes(dd, ne * 2);
    G->upload(dd, d0, ne);
    X->moe_aux_loss_backward(dd, ds, dsel, N, E, K, L, alpha, dloss);
    expect_same("dscores rerun", dd, first, ne * 2);
    G->free(ds), G->free(dsel), G->free(dd);
    free(first), free(logits), free(w), free(s), free(sel), free(d0), free(dref);
}

// moe_count and moe_bias_update (with and without the fp32 master)
static void test_balance(int N, int K, int E, int stride) {
    printf("count + bias update N=%d K=%d E=%d (experts %% %d)\n", N, K, E, stride);
    const size_t nk = (size_t)N * K;
    int *sel = rand_sel(N, K, E, stride);
    long *c0 = xmalloc(sizeof(long) * E), *cref = xmalloc(sizeof(long) * E);
    for (int e = 0; e < E; e++) c0[e] = cref[e] = (long)rng_below(&g_rng, 5);
    cpu_moe_count(cref, sel, N, K, E);
    int *dsel = dev_bytes(sel, nk * sizeof(int));
    long *dc = dev_bytes(c0, sizeof(long) * E);
    X->moe_count(dc, dsel, N, K, E);
    long *cg = get_bytes(dc, sizeof(long) * E);
    int bad = 0;
    for (int e = 0; e < E; e++) bad += cg[e] != cref[e];
    printf("  %-28s %d of %d differ\n", "counts (+=)", bad, E);
    CHECK(bad == 0, "counts: %d of %d differ", bad, E);
    float *b = host_rand(E, 0.05f, 0.f), *bref = host_dup(b, E), *m = host_rand(E, 0.05f, 0.f),
          *bm = host_alloc(E), *mref = host_dup(m, E);
    cpu_moe_bias_update(bref, NULL, cref, E, 1e-3);
    cpu_moe_bias_update(bm, mref, cref, E, 1e-3);
    void *db = dev_bf16(b, E), *dbm = dev_bf16(NULL, E);
    float *dm = dev_f32(m, E);
    poison_bf16(dbm, E);
    X->moe_bias_update(db, NULL, dc, E, 1e-3);
    X->moe_bias_update(dbm, dm, dc, E, 1e-3);
    cmp_bf16("bias (no master)", db, bref, E, TOL_OUT);
    cmp_bf16("bias = round(master)", dbm, mref, E, TOL_OUT);
    cmp_f32("master", dm, mref, E, TOL_F32);
    G->free(dsel), G->free(dc), G->free(db), G->free(dbm), G->free(dm);
    free(sel), free(c0), free(cref), free(cg), free(b), free(bref), free(m), free(bm), free(mref);
}

// The dispatch plan on dsel (device) against the CPU's perm, pos and offsets (host), exactly, the
// outputs NaN-poisoned first; then a rerun, bit-identical. Leaves the plan in dperm, dpos, doff.
static void check_plan(int *dperm, int *dpos, int *doff, const int *dsel, const int *perm, const int *pos,
                       const int *off, int N, int K, int E) {
    const size_t nk = (size_t)N * K;
    void *fp = NULL, *fq = NULL, *fo = NULL;
    for (int rep = 0; rep < 2; rep++) {
        poison_bytes(dperm, nk * sizeof(int)), poison_bytes(dpos, nk * sizeof(int)),
            poison_bytes(doff, (E + 1) * sizeof(int));
        X->moe_dispatch_plan(dperm, dpos, doff, dsel, N, K, E);
        if (!rep) {
            expect_ints("perm", dperm, perm, nk);
            expect_ints("pos", dpos, pos, nk);
            expect_ints("offsets", doff, off, E + 1);
            fp = get_bytes(dperm, nk * sizeof(int)), fq = get_bytes(dpos, nk * sizeof(int)),
            fo = get_bytes(doff, (E + 1) * sizeof(int));
        } else {
            expect_same("perm rerun", dperm, fp, nk * sizeof(int));
            expect_same("pos rerun", dpos, fq, nk * sizeof(int));
            expect_same("offsets rerun", doff, fo, (E + 1) * sizeof(int));
        }
    }
    free(fp), free(fq), free(fo);
}

// plan, gather, combine, experts on one routing
typedef struct {
    int N, K, E, C, M;
    int stride;   // only experts e % stride == 0 get tokens (the others are empty)
    int one;      // every token's first choice is expert 0
    GluAct act;
    int split;    // the weight gradients' split count (0: experts.cu's rule; 1: no split)
    int mixed_wgrad_cublas;  // mixed mode: 1 forces both weight gradients onto cuBLAS (0: the rule)
} DispatchCase;

enum { PATH_OWN, PATH_CUBLAS, PATH_MIXED, PATH_WGMMA, PATH_WGMMA_128, PATH_MIXED_WGMMA, NPATH };
static const char *const path_desc[NPATH] = {
    "our grouped kernels (mma.sync)", "cuBLAS's grouped batched GEMM", "the mixed mode's rule, ours on mma.sync",
    "our grouped kernels on wgmma, 128 x 256 tiles", "our grouped kernels on wgmma, 128 x 128 tiles (HYBRID_MOE_WG_BN=128)",
    "the mixed mode's rule, ours on wgmma (the default on compute capability 9.0)"};

// The mixed mode's rule for a weight gradient dW (E, P, Q), written out again from experts.cu
// (mixed_wgrad_on_cublas): cuBLAS unless its 128 x 128 tiles are fewer than 2 x 132 (one wave
// of our mma.sync kernels' block slots on an H100/H200), or with ours on wgmma fewer than
// 8 x 2 x 132. A change of the rule must change this copy too.
static int mixed_wgrad_rule(int E, int P, int Q, int wgmma) {
    return (long)E * ((P + 127) / 128) * ((Q + 127) / 128) >= (wgmma ? 8 : 1) * 2 * 132;
}

// An fp32 weight gradient (n elements, device) against its CPU reference ref (summed twice from
// zero) within tol (dW2 = dyp^T ap sums bf16 inputs in fp32: TOL_F32; dW13 sums dhp, a bf16
// gradient the kernel computes and rounds itself, against the CPU's float one: TOL_GRAD; then
// check_wgrad_own holds it to TOL_F32 against the same sums of the dhp the kernel stored), and
// evidence that it holds fp32 values: of its nonzero entries, fewer than 1 in 16 may be
// bf16-representable (the low 16 bits zero; a kernel that rounded the gradient to bf16 anywhere
// would make them all so, an fp32 sum about 1 in 65536)
static void check_wgrad(const char *what, const void *dev, const float *ref, size_t n, double tol) {
    cmp_f32(what, dev, ref, n, tol);
    float *h = get_f32(dev, n);
    size_t nz = 0, bf = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &h[i], 4);
        nz += h[i] != 0.f, bf += h[i] != 0.f && (u & 0xffffu) == 0;
    }
    printf("  %-28s %zu of %zu nonzero entries bf16-representable\n", what, bf, nz);
    CHECK(nz > 0 && bf * 16 < nz, "%s: %zu of %zu nonzero entries are bf16 values: rounded to bf16?", what, bf, nz);
    free(h);
}

// dW (E, P, Q; fp32, device) = reps x sum over expert e's rows of G[r, p] X[r, q] (host, in
// double) on a sample of about 4096 entries (every expert with rows, spread over its P x Q), to
// tol: the weight gradient against the same sums of the bf16 G it was given (dW13: the kernel's
// own stored dhp), so an fp32 bar holds where the float reference's G differs by a bf16 rounding
static void check_wgrad_own(const char *what, const void *dev, const float *G, const float *X, const int *off, int E,
                            int P, int Q, int reps, double tol) {
    float *h = get_f32(dev, (size_t)E * P * Q);
    const size_t pq = (size_t)P * Q;
    int with_rows = 0;
    for (int e = 0; e < E; e++) with_rows += off[e + 1] > off[e];
    const size_t per_e = with_rows ? 4096 / with_rows + 1 : 0, step = per_e ? pq / per_e + 1 : 1;
    size_t n = 0, cap = (size_t)E * (per_e + 1);
    float *got = xmalloc(sizeof(float) * (cap + 1)), *ref = xmalloc(sizeof(float) * (cap + 1));
    for (int e = 0; e < E; e++) {
        if (off[e + 1] == off[e]) continue;
        for (size_t i = (size_t)e % step; i < pq && n < cap; i += step) {  // (a shifted start each expert)
            const size_t p = i / Q, q = i % Q;
            double acc = 0;
            for (int r = off[e]; r < off[e + 1]; r++) acc += (double)G[(size_t)r * P + p] * X[(size_t)r * Q + q];
            got[n] = h[(size_t)e * pq + i], ref[n] = (float)(reps * acc), n++;
        }
    }
    expect(what, n ? rel_rms(got, ref, n) : 0, tol);
    CHECK(n > 0 || with_rows == 0, "%s: no entry sampled", what);
    free(h), free(got), free(ref);
}

// test_experts' buffers (device) and the fingerprints of its default path's outputs (host bytes)
typedef struct {
    const DispatchCase *q;
    void *dyp, *dhp, *dap, *dxp, *dw13, *dw2, *dgyp, *dgxpe, *dg13, *dg2, *dsh, *dsa;
    const int *doff;
    const void *f_y, *f_h, *f_a, *f_dx, *f_13, *f_2;
} ExpertsRun;

// A variant of the expert op (a switch the caller has set) against the default's bits: a forward,
// then two backwards from zeroed parameter gradients (outputs poisoned first), each output
// compared bit for bit under `tag`; *fwd_n and *bwd_n: how far count() advanced in the forward and
// in the two backwards (the caller's evidence that the variant ran)
static void experts_same_bits(const ExpertsRun *r, const char *tag, long (*count)(void), long *fwd_n, long *bwd_n) {
    const DispatchCase *q = r->q;
    const int E = q->E, C = q->C, M = q->M;
    const size_t nk = (size_t)q->N * q->K, n13 = (size_t)E * 2 * M * C, n2 = (size_t)E * C * M;
    char w[64];
    poison_bf16(r->dyp, nk * C), poison_bf16(r->dhp, nk * 2 * M), poison_bf16(r->dap, nk * M);
    const long c0 = count();
    X->moe_experts_forward(r->dyp, r->dhp, r->dap, r->dxp, r->dw13, r->dw2, r->doff, E, C, M, q->act);
    const long c1 = count();
    snprintf(w, sizeof w, "hp (%s)", tag), expect_same(w, r->dhp, r->f_h, nk * 2 * M * 2);
    snprintf(w, sizeof w, "ap (%s)", tag), expect_same(w, r->dap, r->f_a, nk * M * 2);
    snprintf(w, sizeof w, "yp (%s)", tag), expect_same(w, r->dyp, r->f_y, nk * C * 2);
    poison_bf16(r->dgxpe, nk * C), poison_bf16(r->dsh, nk * 2 * M), poison_bf16(r->dsa, nk * M);
    backend_grad_zero(G, r->dg13, n13), backend_grad_zero(G, r->dg2, n2);
    for (int rep = 0; rep < 2; rep++)
        X->moe_experts_backward(r->dgxpe, r->dg13, r->dg2, r->dsh, r->dsa, r->dgyp, r->dxp, r->dhp, r->dap, r->dw13,
                                r->dw2, r->doff, E, C, M, q->act);
    *fwd_n = c1 - c0, *bwd_n = count() - c1;
    snprintf(w, sizeof w, "dxp (%s)", tag), expect_same(w, r->dgxpe, r->f_dx, nk * C * 2);
    snprintf(w, sizeof w, "dw13 (%s)", tag), expect_same(w, r->dg13, r->f_13, n13 * 4);
    snprintf(w, sizeof w, "dw2 (%s)", tag), expect_same(w, r->dg2, r->f_2, n2 * 4);
}

// The grouped expert op in GEMM mode `path` (PATH_OWN: our grouped kernels; PATH_CUBLAS:
// cuBLAS's grouped batched GEMM, HYBRID_MOE_GEMM=cublas; PATH_MIXED: HYBRID_MOE_GEMM=mixed;
// cuda_moe_set_gemm, with ours on mma.sync; PATH_WGMMA, PATH_WGMMA_128: PATH_OWN with the GEMMs on
// the wgmma kernels, cuda_moe_set_wgmma, at either tile width, cuda_moe_set_wg_bn; they run every
// GEMM where the widths are multiples of 8: two a forward, four a backward; PATH_MIXED_WGMMA:
// PATH_MIXED with ours on wgmma: every GEMM ours)
// on the plan's sorted rows xp (host) / dxp (device) and offsets off (host) /
// doff (device). Forward against the CPU and rerun bit-identical; backward on the CUDA forward's
// hp, ap (and xp: exact copies) against the CPU, the parameter gradients accumulated twice from
// zero; the whole backward again, bit-identical; then once more on a copy of the offsets that no
// forward saw (the cuBLAS GEMMs copy them themselves there), bit-identical too; then a forward
// and the backward right after it, with no synchronization between, bit-identical (those two
// rounds in the cublas and mixed modes only: they concern the host copy of the offsets, and our
// kernels read the offsets on the device alone, keep nothing of a forward and run on one stream,
// so on ours they would repeat the first rerun; the own mode's counters stay checked in the
// first two rounds, and the largest cases spend half their time there). The modes also
// count their work, where the widths suit cuBLAS (multiples of 8; else every GEMM runs ours):
// cublas, both forward GEMMs, the backward's two dgrads and its two weight gradients (one
// cublasGemmEx per expert: fp32 C) on cuBLAS, one synchronous copy of the offsets per forward, none per backward of
// a forward's offsets; mixed, no cuBLAS call in the forward, one asynchronous copy per forward,
// the backward's two dgrads on cuBLAS (with ours on mma.sync; on wgmma they run ours), and one
// wait for the copy in the first backward that calls cuBLAS after a forward, none in the next (it
// reuses the copy). On our GEMMs, the GLU's vector kernels
// against its scalar ones, bit for bit. The forward's outputs stay in dyp (the combine checks
// read them).
// test_experts' warp-specialized variants: cuda_moe_set_wg_ws's level (0 none, 1 rows, 2 all, 3
// auto), cuda_moe_set_wg_tma's (0, 1 the weights, 2 and whole tiles' rows), the GLU fused, the
// staged store
static const struct {
    const char *tag;
    int level, tma, glu, staged;
} ws_variants[] = {
    {"warp-specialized none", 0, 0, 0, 0},    {"warp-specialized auto", 3, 0, 0, 0},
    {"warp-specialized rows", 1, 0, 0, 0},    {"warp-specialized all", 2, 0, 0, 0},
    {"warp-spec. all + TMA", 2, 1, 0, 0},     {"warp-spec. TMA, GLU fused", 2, 1, 1, 0},
    {"warp-spec. TMA w + rows", 2, 2, 0, 0},  {"warp-spec. rows, staged", 1, 0, 0, 1},
    {"warp-spec. TMA 2, staged", 2, 2, 0, 1},
};

static void test_experts(DispatchCase q, int path, const float *xp, void *dxp, const int *off, const int *doff,
                         void *dyp) {
    const int N = q.N, K = q.K, E = q.E, C = q.C, M = q.M;
    const size_t nk = (size_t)N * K;
    const int wgmma = path == PATH_WGMMA || path == PATH_WGMMA_128 || path == PATH_MIXED_WGMMA;
    const long wg0 = cuda_moe_wgmma_launches();
    cuda_moe_set_wgmma(wgmma);
    cuda_moe_set_wg_bn(path == PATH_WGMMA_128 ? 128 : 256);
    const char *desc = path_desc[path];
    const int path_orig = path;
    if (wgmma) path = path == PATH_MIXED_WGMMA ? PATH_MIXED : PATH_OWN;  // (the rest is that mode's)
    cuda_moe_set_gemm(path);
    cuda_moe_set_mixed_wgrad(q.mixed_wgrad_cublas ? 1 : -1);
    const int suits = C % 8 == 0 && M % 8 == 0;  // (every buffer here is 16-byte aligned)
    // cuBLAS calls per forward and per backward (cublas: the dgrads' grouped calls and the weight
    // gradients' per-expert ones, counted one a gradient; mixed: the dgrads, on cuBLAS with ours
    // on mma.sync, on ours with ours on wgmma, and the weight gradients the rule sends there)
    const int w2c = q.mixed_wgrad_cublas || mixed_wgrad_rule(E, C, M, wgmma),
              w13c = q.mixed_wgrad_cublas || mixed_wgrad_rule(E, 2 * M, C, wgmma), dgc = !wgmma;
    const int fwd_calls = suits && path == PATH_CUBLAS ? 2 : 0,
              bwd_calls = !suits ? 0 : path == PATH_CUBLAS ? 4 : path == PATH_MIXED ? 2 * dgc + w2c + w13c : 0;
    printf("  experts on %s (%s)%s", desc, cuda_moe_gemm_name(),
           (path || wgmma) && !suits ? ": widths not multiples of 8, so our (mma.sync) kernels run" : "");
    if (path == PATH_MIXED && suits)
        printf(": dW2 on %s, dW13 on %s%s", w2c ? "cuBLAS" : "ours", w13c ? "cuBLAS" : "ours",
               q.mixed_wgrad_cublas ? " (forced)" : " (the rule)");
    printf("\n");
    // the library's own view of the split agrees with the rule's copy above
    const int paths_ok = cuda_moe_gemm_on_cublas(0, E, C, M) == (path == PATH_CUBLAS) &&
                         cuda_moe_gemm_on_cublas(1, E, C, M) == (path == PATH_CUBLAS) &&
                         cuda_moe_gemm_on_cublas(2, E, C, M) == (path == PATH_CUBLAS || (path == PATH_MIXED && dgc)) &&
                         cuda_moe_gemm_on_cublas(3, E, C, M) == (path == PATH_CUBLAS || (path == PATH_MIXED && w2c)) &&
                         cuda_moe_gemm_on_cublas(4, E, C, M) == (path == PATH_CUBLAS || (path == PATH_MIXED && dgc)) &&
                         cuda_moe_gemm_on_cublas(5, E, C, M) == (path == PATH_CUBLAS || (path == PATH_MIXED && w13c));
    CHECK(paths_ok, "cuda_moe_gemm_on_cublas disagrees with the mode's rule (path %d)", path);
    const long calls0 = cuda_moe_cublas_calls(), copies0 = cuda_moe_offsets_copies(), waits0 = cuda_moe_offsets_waits();
    const size_t n13 = (size_t)E * 2 * M * C, n2 = (size_t)E * C * M;
    float *w13 = host_rand(n13, 1.f / sqrtf((float)C), 0.f), *w2 = host_rand(n2, 1.f / sqrtf((float)M), 0.f);
    float *yp = host_alloc(nk * C), *hp = host_alloc(nk * 2 * M), *ap = host_alloc(nk * M);
    cpu_moe_experts_forward(yp, hp, ap, xp, w13, w2, off, E, C, M, q.act);
    void *dw13 = dev_bf16(w13, n13), *dw2 = dev_bf16(w2, n2), *dhp = dev_bf16(NULL, nk * 2 * M),
         *dap = dev_bf16(NULL, nk * M);
    void *f_y = NULL, *f_h = NULL, *f_a = NULL;
    for (int rep = 0; rep < 2; rep++) {  // rep 1: the same forward again, bit-identical
        poison_bf16(dyp, nk * C), poison_bf16(dhp, nk * 2 * M), poison_bf16(dap, nk * M);
        X->moe_experts_forward(dyp, dhp, dap, dxp, dw13, dw2, doff, E, C, M, q.act);
        if (!rep) {
            cmp_bf16("hp (experts)", dhp, hp, nk * 2 * M, TOL_OUT);
            cmp_bf16("ap (experts)", dap, ap, nk * M, TOL_OUT);
            cmp_bf16("yp (experts)", dyp, yp, nk * C, TOL_OUT);
            f_y = get_bytes(dyp, nk * C * 2), f_h = get_bytes(dhp, nk * 2 * M * 2), f_a = get_bytes(dap, nk * M * 2);
        } else {
            expect_same("hp rerun", dhp, f_h, nk * 2 * M * 2);
            expect_same("ap rerun", dap, f_a, nk * M * 2);
            expect_same("yp rerun", dyp, f_y, nk * C * 2);
        }
    }
    long calls = cuda_moe_cublas_calls() - calls0, copies = cuda_moe_offsets_copies() - copies0,
         waits = cuda_moe_offsets_waits() - waits0;
    printf("  %-28s %ld cuBLAS calls, %ld copies of the offsets to the host, %ld waits\n",
           "forward (twice)", calls, copies, waits);
    CHECK(calls == 2 * fwd_calls && copies == (path ? 2 : 0) && waits == 0,
          "two forwards: %ld cuBLAS calls (expected %d), %ld offsets copies (expected %d), %ld waits (expected 0)",
          calls, 2 * fwd_calls, copies, path ? 2 : 0, waits);
    const long wg_fwd = cuda_moe_wgmma_launches() - wg0, wg_want = wgmma && suits ? 4 : 0;
    printf("  %-28s %ld wgmma row GEMMs\n", "forward (twice)", wg_fwd);
    CHECK(wg_fwd == wg_want, "two forwards: %ld wgmma row GEMM launches (expected %ld)", wg_fwd, wg_want);
    // backward
    float *hpg = get_bf16(dhp, nk * 2 * M), *apg = get_bf16(dap, nk * M);
    float *gyp = host_rand(nk * C, 1.f, 0.f), *gxpe = host_alloc(nk * C), *g13 = calloc(n13, sizeof(float)),
          *g2 = calloc(n2, sizeof(float)), *sh = host_alloc(nk * 2 * M), *sa = host_alloc(nk * M);
    for (int rep = 0; rep < 2; rep++)
        cpu_moe_experts_backward(gxpe, g13, g2, sh, sa, gyp, xp, hpg, apg, w13, w2, off, E, C, M, q.act);
    void *dgyp = dev_bf16(gyp, nk * C), *dgxpe = dev_bf16(NULL, nk * C), *dg13 = dev_f32(NULL, n13),
         *dg2 = dev_f32(NULL, n2), *dsh = dev_bf16(NULL, nk * 2 * M), *dsa = dev_bf16(NULL, nk * M);
    int *doff2 = dev_bytes(off, (E + 1) * sizeof(int));  // the offsets again, at an address no forward saw
    void *f_dx = NULL, *f_13 = NULL, *f_2 = NULL;
    cuda_moe_set_wgrad_split(q.split);
    // rounds 1 to 3: the same again, bit-identical. Round 3 runs the forward again right before
    // the backwards, with no synchronization between them (the others read the forward's outputs
    // back first, which waits for everything): the mixed mode's backward must wait for the copy
    // its forward issued (under the emulator the copy reads as 0xff bytes until then). Rounds 2
    // and 3 concern the host copy of the offsets: not our kernels' (above).
    const long wg_bwd0 = cuda_moe_wgmma_launches();
    for (int round = 0; round < (path == PATH_OWN ? 2 : 4); round++) {
        const long c0 = cuda_moe_cublas_calls(), k0 = cuda_moe_offsets_copies(), w0 = cuda_moe_offsets_waits();
        poison_bf16(dgxpe, nk * C), poison_bf16(dsh, nk * 2 * M), poison_bf16(dsa, nk * M);
        backend_grad_zero(G, dg13, n13), backend_grad_zero(G, dg2, n2);  // (stream-ordered, no synchronization)
        if (round == 3) X->moe_experts_forward(dyp, dhp, dap, dxp, dw13, dw2, doff, E, C, M, q.act);
        for (int rep = 0; rep < 2; rep++)
            X->moe_experts_backward(dgxpe, dg13, dg2, dsh, dsa, dgyp, dxp, dhp, dap, dw13, dw2, round == 2 ? doff2 : doff,
                                    E, C, M, q.act);
        calls = cuda_moe_cublas_calls() - c0, copies = cuda_moe_offsets_copies() - k0,
        waits = cuda_moe_offsets_waits() - w0;
        // round 2 (offsets no forward saw): one synchronous copy where a GEMM needs it (cublas
        // always), the second backward reusing it; round 3: the forward's copy and calls; rounds 0
        // and 3: mixed waits once for the forward's copy
        const long want_calls = 2 * bwd_calls + (round == 3 ? fwd_calls : 0),
                   want_copies = (round == 2 && (path == PATH_CUBLAS || bwd_calls > 0)) || (round == 3 && path) ? 1 : 0,
                   want_waits = (round == 0 || round == 3) && path == PATH_MIXED && bwd_calls > 0 ? 1 : 0;
        static const char *const what[4] = {"backward (twice)", "backward (twice, again)", "backward (new offsets)",
                                            "forward + backward (twice)"};
        printf("  %-28s %ld cuBLAS calls, %ld copies of the offsets, %ld waits\n", what[round], calls, copies,
               waits);
        CHECK(calls == want_calls && copies == want_copies && waits == want_waits,
              "two backwards (round %d): %ld cuBLAS calls (expected %ld), %ld offsets copies (expected %ld), %ld "
              "waits (expected %ld)",
              round, calls, want_calls, copies, want_copies, waits, want_waits);
        if (!round) {
            cmp_bf16("dxp (experts)", dgxpe, gxpe, nk * C, TOL_GRAD);
            check_wgrad("dw13 (twice, +=)", dg13, g13, n13, TOL_GRAD);
            float *own_dhp = get_bf16(dsh, nk * 2 * M);  // (the second backward's: the same bits)
            check_wgrad_own("dw13 = sums of its own dhp", dg13, own_dhp, xp, off, E, 2 * M, C, 2, TOL_F32);
            free(own_dhp);
            check_wgrad("dw2 (twice, +=)", dg2, g2, n2, TOL_F32);
            f_dx = get_bytes(dgxpe, nk * C * 2), f_13 = get_bytes(dg13, n13 * 4), f_2 = get_bytes(dg2, n2 * 4);
            // an empty expert's gradients stay exactly zero
            float *h13 = get_f32(dg13, n13), *h2 = get_f32(dg2, n2);
            size_t nz = 0;
            for (int e = 0; e < E; e++)
                if (off[e + 1] == off[e]) {
                    for (size_t i = 0; i < (size_t)2 * M * C; i++) nz += h13[(size_t)e * 2 * M * C + i] != 0.f;
                    for (size_t i = 0; i < (size_t)C * M; i++) nz += h2[(size_t)e * C * M + i] != 0.f;
                }
            CHECK(nz == 0, "empty experts: %zu nonzero gradient entries", nz);
            free(h13), free(h2);
        } else {
            const char *tag = round == 1 ? "rerun" : round == 2 ? "rerun, new offsets" : "rerun after a forward";
            char w[64];
            snprintf(w, sizeof w, "dxp %s", tag), expect_same(w, dgxpe, f_dx, nk * C * 2);
            snprintf(w, sizeof w, "dw13 %s", tag), expect_same(w, dg13, f_13, n13 * 4);
            snprintf(w, sizeof w, "dw2 %s", tag), expect_same(w, dg2, f_2, n2 * 4);
        }
    }
    // (own: 2 rounds of two backwards, four GEMMs each; mixed: 4 rounds, the row GEMMs and the weight
    // gradients the rule keeps off cuBLAS, and round 3's forward)
    const long wg_bwd = cuda_moe_wgmma_launches() - wg_bwd0,
               wg_bwd_want = !wgmma || !suits ? 0 : path == PATH_OWN ? 4 * 4 : 8 * (2 + !w2c + !w13c) + 2;
    printf("  %-28s %ld wgmma GEMMs\n", "backward (4 times)", wg_bwd);
    CHECK(wg_bwd == wg_bwd_want, "four backwards: %ld wgmma GEMM launches (expected %ld)", wg_bwd, wg_bwd_want);
    // wgmma: the GLU fused into fwd13 and dgrad2 (HYBRID_MOE_WG_GLU_FUSED=1: cuda_moe_set_wg_glu(1))
    // against the separate passes of the rounds above (the default): the same bits, forward and
    // backward; and where it ran: the forward's GLU pass left no kernel of its own where M is a
    // multiple of half the tile width, the backward's where M % 8 == 0 (the vector GLU kernels'
    // launches count them). Own mode only (the fusion concerns our row GEMMs alone)
    const ExpertsRun run = {&q, dyp, dhp, dap, dxp, dw13, dw2, dgyp, dgxpe, dg13, dg2, dsh, dsa, doff,
                            f_y, f_h, f_a, f_dx, f_13, f_2};
    if (wgmma && path == PATH_OWN) {
        const int bn = path_orig == PATH_WGMMA_128 ? 128 : 256, fused = suits && M % (bn / 2) == 0;
        long fwd_glu, bwd_glu;
        cuda_moe_set_wg_glu(1);
        experts_same_bits(&run, "GLU fused", cuda_moe_glu_vec_launches, &fwd_glu, &bwd_glu);
        cuda_moe_set_wg_glu(-1);
        printf("  %-28s forward %s, backward %s\n", "GLU in the GEMMs (fused)", fused ? "yes" : "no",
               suits ? "yes" : "no");
        CHECK(fwd_glu == (fused ? 0 : M % 8 == 0) && bwd_glu == (suits ? 0 : 2 * (M % 8 == 0)),
              "GLU passes of their own: forward %ld, two backwards %ld (fused: forward %d, backward %d)", fwd_glu,
              bwd_glu, fused, suits);
    }
    // wgmma at width 256: the warp-specialized kernels (a producer warpgroup, two consumers,
    // mbarriers; cuda_moe_set_wg_ws) against the rounds above (the default, HYBRID_MOE_WG_WS=auto):
    // the same bits, forward and backward, at =0 (level 0: none of them, one role a thread), auto
    // forced (level 3: the four row GEMMs with the plain store, by TMA with whole tiles' rows,
    // stored staged, and the weight gradients, their whole k-steps by TMA), =rows (level 1: the row GEMMs), =all
    // (level 2: the weight gradients too, walking, any forced split), =all with HYBRID_MOE_WG_TMA=1
    // (the row GEMMs' weights copied by TMA: cuda_moe_set_wg_tma), and that with the GLU fused into
    // the row GEMMs' epilogues (from registers; cuda_moe_set_wg_glu(1)), and =all with
    // HYBRID_MOE_WG_TMA=2 (whole tiles' rows by TMA too: the cases of ~200 rows an expert have
    // one whole tile and one partial; the others partial tiles only; and the weight gradients'
    // whole k-steps, each unit's partial last one on cp.async); where the widths suit
    // wgmma, rows runs both row GEMMs of a forward and both dgrads of a backward warp-specialized
    // (all: and both weight gradients), through TMA where it is on, and the GLU passes of their
    // own are the fused-GLU check's above
    if (wgmma && path == PATH_OWN && path_orig == PATH_WGMMA)
        for (size_t v = 0; v < sizeof ws_variants / sizeof *ws_variants; v++) {
            const char *const tag = ws_variants[v].tag;
            const int level = ws_variants[v].level, tma = ws_variants[v].tma, glu = ws_variants[v].glu,
                      staged = ws_variants[v].staged;
            long fwd_ws, bwd_ws;
            const long t0 = cuda_moe_wg_tma_launches(), r0 = cuda_moe_wg_tma_rows_launches(),
                       w0 = cuda_moe_wg_tma_wgrad_launches(), g0 = cuda_moe_glu_vec_launches(),
                       s0 = cuda_moe_wg_ws_staged_launches();
            cuda_moe_set_wg_ws(level), cuda_moe_set_wg_tma(tma), cuda_moe_set_wg_glu(glu);
            cuda_moe_set_wg_ws_staged(staged);
            experts_same_bits(&run, tag, cuda_moe_wg_ws_launches, &fwd_ws, &bwd_ws);
            cuda_moe_set_wg_ws(-1), cuda_moe_set_wg_tma(-1), cuda_moe_set_wg_glu(-1), cuda_moe_set_wg_ws_staged(-1);
            const long tma_n = cuda_moe_wg_tma_launches() - t0, rows_n = cuda_moe_wg_tma_rows_launches() - r0,
                       wgrad_n = cuda_moe_wg_tma_wgrad_launches() - w0, glu_n = cuda_moe_glu_vec_launches() - g0,
                       staged_n = cuda_moe_wg_ws_staged_launches() - s0;
            // (the weight gradients' whole k-steps by TMA: `all` with TMA 2, and auto; both of two
            // backwards)
            const int auto_ = level == 3, want_w = suits && ((level == 2 && tma == 2) || auto_) ? 4 : 0;
            CHECK(wgrad_n == want_w, "%s: %ld weight gradients by TMA (expected %d)", tag, wgrad_n, want_w);
            // (the staged store: the row GEMMs' plain stores, both of a forward, both dgrads)
            const int want_s = (staged || auto_) && suits ? 2 + 4 : 0;
            CHECK(staged_n == want_s, "%s: %ld row GEMMs stored staged (expected %d)", tag, staged_n, want_s);
            const int fused = glu && suits && M % 128 == 0;
            const int want_f = suits && level != 0 ? 2 : 0, want_b = !suits || level == 0 ? 0 : auto_ ? 8 : 4 * level,
                      want_t = suits && (tma || auto_) ? 2 + 4 : 0, want_r = suits && (tma == 2 || auto_) ? 2 + 4 : 0,
                      want_g = (fused ? 0 : M % 8 == 0) + (glu && suits ? 0 : 2 * (M % 8 == 0));
            printf("  %-28s forward %ld, backward (twice) %ld, by TMA %ld (rows too %ld; weight gradients %ld), GLU "
                   "passes %ld\n",
                   tag, fwd_ws, bwd_ws, tma_n, rows_n, wgrad_n, glu_n);
            CHECK(fwd_ws == want_f && bwd_ws == want_b && tma_n == want_t && rows_n == want_r && glu_n == want_g,
                  "%s: launches forward %ld (expected %d), two backwards %ld (expected %d), row GEMMs by TMA %ld "
                  "(expected %d), with the rows %ld (expected %d), GLU passes %ld (expected %d)",
                  tag, fwd_ws, want_f, bwd_ws, want_b, tma_n, want_t, rows_n, want_r, glu_n, want_g);
        }
    // the GLU's scalar kernels (cuda_moe_set_glu_vec(0)) give the bits of the vector ones, which
    // run where M % 8 == 0 (every buffer here is 16-byte aligned): forward and backward again on
    // the scalar kernels, bit-identical to the first (our GEMMs only: the GLU is the same pass on
    // every path)
    if (path == PATH_OWN && !wgmma) {  // (on wgmma the GLU runs inside the GEMMs: above)
        const long v0 = cuda_moe_glu_vec_launches();
        X->moe_experts_forward(dyp, dhp, dap, dxp, dw13, dw2, doff, E, C, M, q.act);
        const long vec_runs = cuda_moe_glu_vec_launches() - v0;
        printf("  %-28s %ld of 1\n", "vector GLU launches", vec_runs);
        CHECK(vec_runs == (M % 8 == 0), "vector GLU launches: %ld (expected %d)", vec_runs, M % 8 == 0);
        cuda_moe_set_glu_vec(0);
        poison_bf16(dyp, nk * C), poison_bf16(dap, nk * M), poison_bf16(dgxpe, nk * C);
        X->moe_experts_forward(dyp, dhp, dap, dxp, dw13, dw2, doff, E, C, M, q.act);
        expect_same("ap (scalar GLU)", dap, f_a, nk * M * 2);
        expect_same("yp (scalar GLU)", dyp, f_y, nk * C * 2);
        X->moe_experts_backward(dgxpe, dg13, dg2, dsh, dsa, dgyp, dxp, dhp, dap, dw13, dw2, doff, E, C, M, q.act);
        expect_same("dxp (scalar GLU)", dgxpe, f_dx, nk * C * 2);
        cuda_moe_set_glu_vec(1);
    }
    cuda_moe_set_wgrad_split(0);
    cuda_moe_set_gemm(-1);
    cuda_moe_set_mixed_wgrad(-1);
    cuda_moe_set_wgmma(-1);
    cuda_moe_set_wg_bn(-1);
    void *bufs[] = {dw13, dw2, dhp, dap, dgyp, dgxpe, dg13, dg2, dsh, dsa, doff2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) G->free(bufs[i]);
    void *hb[] = {w13, w2, yp, hp, ap, f_y, f_h, f_a, hpg, apg, gyp, gxpe, g13, g2, sh, sa, f_dx, f_13, f_2};
    for (size_t i = 0; i < sizeof hb / sizeof *hb; i++) free(hb[i]);
}

static void test_dispatch(DispatchCase q) {
    const int N = q.N, K = q.K, E = q.E, C = q.C, M = q.M;
    printf("dispatch + experts N=%d K=%d E=%d C=%d M=%d%s%s %s, wgrad split ", N, K, E, C, M,
           q.stride > 1 ? " empty-experts" : "", q.one ? " all-to-one" : "", q.act.kind == GLU_SITU ? "situ" : "swiglu");
    if (q.split) printf("%d (forced)\n", q.split);
    else printf("by the rule\n");
    const size_t nk = (size_t)N * K;
    int *sel = rand_sel(N, K, E, q.stride);
    if (q.one)
        for (int t = 0; t < N; t++) {
            for (int j = 0; j < K; j++)
                if (sel[t * K + j] == 0) sel[t * K + j] = sel[t * K];
            sel[t * K] = 0;
        }
    // plan
    int *perm = xmalloc(sizeof(int) * nk), *pos = xmalloc(sizeof(int) * nk), *off = xmalloc(sizeof(int) * (E + 1));
    cpu_moe_dispatch_plan(perm, pos, off, sel, N, K, E);
    int *dsel = dev_bytes(sel, nk * sizeof(int)), *dperm = dev_bytes(NULL, nk * sizeof(int)),
        *dpos = dev_bytes(NULL, nk * sizeof(int)), *doff = dev_bytes(NULL, (E + 1) * sizeof(int));
    check_plan(dperm, dpos, doff, dsel, perm, pos, off, N, K, E);
    // gather
    float *x = host_rand((size_t)N * C, 1.f, 0.f), *xp = host_alloc(nk * C);
    cpu_moe_gather_forward(xp, x, perm, N, K, C);
    void *dx = dev_bf16(x, (size_t)N * C), *dxp = dev_bf16(NULL, nk * C);
    poison_bf16(dxp, nk * C);
    X->moe_gather_forward(dxp, dx, dperm, N, K, C);
    cmp_bf16("xp (gather)", dxp, xp, nk * C, TOL_OUT);
    float *gxp = host_rand(nk * C, 1.f, 0.f), *gx = host_alloc((size_t)N * C);
    cpu_moe_gather_backward(gx, gxp, pos, N, K, C, 0);
    void *dgxp = dev_bf16(gxp, nk * C), *dgx = dev_bf16(NULL, (size_t)N * C);
    poison_bf16(dgx, (size_t)N * C);
    X->moe_gather_backward(dgx, dgxp, dpos, N, K, C, 0);
    cmp_bf16("dx (gather bwd)", dgx, gx, (size_t)N * C, TOL_GRAD);
    void *first = get_bytes(dgx, (size_t)N * C * 2);
    poison_bf16(dgx, (size_t)N * C);
    X->moe_gather_backward(dgx, dgxp, dpos, N, K, C, 0);
    expect_same("dx rerun", dgx, first, (size_t)N * C * 2);
    free(first);
    // experts, on each GEMM path (forward outputs left in dyp for the combine below); a forced
    // split count concerns only our kernels' weight gradients (mma.sync or wgmma), so those cases
    // run those paths alone (the cuBLAS and mixed paths run on the same shapes with the rule's
    // split)
    void *dyp = dev_bf16(NULL, nk * C);
    for (int path = 0; path < NPATH; path++) {
        const int wg = path == PATH_WGMMA || path == PATH_WGMMA_128 || path == PATH_MIXED_WGMMA;
        if (wg && !cuda_moe_wgmma_supported()) {  // (sm_90a kernels: said once a case, not counted as run)
            printf("  experts on %s: skipped, this GPU is not compute capability 9.0\n", path_desc[path]);
            continue;
        }
        if (!q.split || path == PATH_OWN || path == PATH_WGMMA || path == PATH_WGMMA_128)
            test_experts(q, path, xp, dxp, off, doff, dyp);
    }
    float *ypg = get_bf16(dyp, nk * C);
    // combine
    float *wt = host_rand(nk, 0.5f, 0.5f), *out = host_alloc((size_t)N * C);
    cpu_moe_combine_forward(out, ypg, wt, pos, NULL, N, K, C);
    void *dwt = dev_bf16(wt, nk), *dout = dev_bf16(NULL, (size_t)N * C);
    poison_bf16(dout, (size_t)N * C);
    X->moe_combine_forward(dout, dyp, dwt, dpos, NULL, N, K, C);
    cmp_bf16("out (combine)", dout, out, (size_t)N * C, TOL_OUT);
    float *gout = host_rand((size_t)N * C, 1.f, 0.f), *gyp2 = host_alloc(nk * C), *gw = host_alloc(nk);
    cpu_moe_combine_backward(gyp2, gw, gout, ypg, wt, pos, N, K, C);
    void *dgout = dev_bf16(gout, (size_t)N * C), *dgyp2 = dev_bf16(NULL, nk * C), *dgw = dev_bf16(NULL, nk);
    void *f_y = NULL, *f_w = NULL;
    for (int rep = 0; rep < 2; rep++) {
        poison_bf16(dgyp2, nk * C), poison_bf16(dgw, nk);
        X->moe_combine_backward(dgyp2, dgw, dgout, dyp, dwt, dpos, N, K, C);
        if (!rep) {
            cmp_bf16("dyp (combine bwd)", dgyp2, gyp2, nk * C, TOL_GRAD);
            cmp_bf16("dweights (combine bwd)", dgw, gw, nk, TOL_GRAD);
            f_y = get_bytes(dgyp2, nk * C * 2), f_w = get_bytes(dgw, nk * 2);
        } else {
            expect_same("dyp rerun", dgyp2, f_y, nk * C * 2);
            expect_same("dweights rerun", dgw, f_w, nk * 2);
        }
    }
    void *bufs[] = {dsel, dperm, dpos, doff, dx, dxp, dgxp, dgx, dyp, dwt, dout, dgout, dgyp2, dgw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) G->free(bufs[i]);
    void *hb[] = {sel, perm, pos, off, x, xp, gxp, gx, wt, out, ypg, gout, gyp2, gw, f_y, f_w};
    for (size_t i = 0; i < sizeof hb / sizeof *hb; i++) free(hb[i]);
}

// The dispatch plan alone (cheaper than test_dispatch): many chunks (N*K > 256 chunks of 256
// slots: the scan's lanes walk their chunks in more than one pass) and more experts than the
// scan's 32 warps (warps take two).
static void test_plan(int N, int K, int E, int stride) {
    printf("plan N=%d K=%d E=%d (experts %% %d)\n", N, K, E, stride);
    const size_t nk = (size_t)N * K;
    int *sel = rand_sel(N, K, E, stride);
    int *perm = xmalloc(sizeof(int) * nk), *pos = xmalloc(sizeof(int) * nk), *off = xmalloc(sizeof(int) * (E + 1));
    cpu_moe_dispatch_plan(perm, pos, off, sel, N, K, E);
    int *dsel = dev_bytes(sel, nk * sizeof(int)), *dperm = dev_bytes(NULL, nk * sizeof(int)),
        *dpos = dev_bytes(NULL, nk * sizeof(int)), *doff = dev_bytes(NULL, (E + 1) * sizeof(int));
    check_plan(dperm, dpos, doff, dsel, perm, pos, off, N, K, E);
    G->free(dsel), G->free(dperm), G->free(dpos), G->free(doff);
    free(sel), free(perm), free(pos), free(off);
}

// A device bf16 tensor of n elements `shift` elements past a fresh allocation (whose start is
// 16-byte aligned), uploaded from h if non-NULL; *base gets the allocation (to free).
static void *dev_shifted(const float *h, size_t n, int shift, void **base) {
    *base = dev_bf16(NULL, n + (size_t)shift);
    void *p = (char *)*base + 2 * (size_t)shift;
    if (h) G->upload(p, h, n);
    return p;
}

// x[i] *= 2^r, r uniform in [-10, 10]: still bf16 values, but sums of a few of them no longer fit
// fp32's 24 bits, so their rounding (and thus their order) shows in the bits
static void spread_exponents(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)rng_below(&g_rng, 21) - 10);
}

static void expect_same_dev(const char *what, const void *a, const void *b, size_t n) {
    const int same = same_bf16(a, b, n);
    printf("  %-28s %s\n", what, same ? "bit-identical" : "DIFFERS");
    CHECK(same, "%s: the two differ", what);
}

// gather and combine, forward and backward, plain and with the fused adds (combine_forward's
// add, gather_backward's accumulate), on one routing, with every tensor `shift` elements past a
// 16-byte boundary, the summed rows' exponents spread (spread_exponents) and cancelling pairs
// among them (below: the j order shows in the bits). Each op runs twice, on
// the vector kernels (where C % 8 == 0 and nothing is shifted; kernels/moe/dispatch.cu) and on the
// scalar ones (cuda_moe_set_dispatch_vec(0)), into NaN-poisoned outputs: both against the CPU
// reference, the vector launches counted (every call, or none where the shape or a pointer rules
// them out), and the two forms' outputs bit for bit the same (dweights aside: a different sum
// tree; each form against the CPU and bit-identical on a rerun). The fused forms also equal, bit
// for bit, the separate combine + add_forward and gather + add_inplace they replace.
static void test_dispatch_io(int N, int K, int E, int C, int stride, int shift) {
    const int vec = C % 8 == 0 && !shift;  // the vector kernels' conditions
    printf("gather + combine N=%d K=%d E=%d C=%d%s%s: %s kernels\n", N, K, E, C, stride > 1 ? " empty-experts" : "",
           shift ? " shifted" : "", vec ? "vector" : "scalar");
    const size_t nk = (size_t)N * K, nc = (size_t)N * C, npc = nk * C;
    int *sel = rand_sel(N, K, E, stride);
    int *perm = xmalloc(sizeof(int) * nk), *pos = xmalloc(sizeof(int) * nk), *off = xmalloc(sizeof(int) * (E + 1));
    cpu_moe_dispatch_plan(perm, pos, off, sel, N, K, E);
    int *dperm = dev_bytes(perm, nk * sizeof(int)), *dpos = dev_bytes(pos, nk * sizeof(int));
    // inputs and CPU references
    float *x = host_rand(nc, 1.f, 0.f), *gxp = host_rand(npc, 1.f, 0.f), *yp = host_rand(npc, 1.f, 0.f),
          *wt = host_rand(nk, 0.5f, 0.5f), *sh = host_rand(nc, 1.f, 0.f), *gout = host_rand(nc, 1.f, 0.f),
          *d0 = host_rand(nc, 1.f, 0.f);
    spread_exponents(gxp, npc), spread_exponents(yp, npc);
    // cancelling pairs: for every other token, slot 1's row is minus slot 0's, both scaled by
    // 2^20, and (for the combine) the two weights are equal. Summed in j order the pair cancels
    // exactly and the rest survives; in another order the large terms absorb the rest.
    for (int t = 0; K >= 2 && t < N; t += 2) {
        const size_t p0 = (size_t)pos[(size_t)t * K] * C, p1 = (size_t)pos[(size_t)t * K + 1] * C;
        for (int c = 0; c < C; c++) {
            gxp[p0 + c] = ldexpf(gxp[p0 + c], 20), gxp[p1 + c] = -gxp[p0 + c];
            yp[p0 + c] = ldexpf(yp[p0 + c], 20), yp[p1 + c] = -yp[p0 + c];
        }
        wt[(size_t)t * K + 1] = wt[(size_t)t * K];
    }
    float *r_xp = host_alloc(npc), *r_gx = host_alloc(nc), *r_gxa = host_dup(d0, nc), *r_out = host_alloc(nc),
          *r_outa = host_alloc(nc), *r_gyp = host_alloc(npc), *r_gw = host_alloc(nk);
    cpu_moe_gather_forward(r_xp, x, perm, N, K, C);
    cpu_moe_gather_backward(r_gx, gxp, pos, N, K, C, 0);
    cpu_moe_gather_backward(r_gxa, gxp, pos, N, K, C, 1);
    cpu_moe_combine_forward(r_out, yp, wt, pos, NULL, N, K, C);
    cpu_moe_combine_forward(r_outa, yp, wt, pos, sh, N, K, C);
    cpu_moe_combine_backward(r_gyp, r_gw, gout, yp, wt, pos, N, K, C);
    // device inputs
    enum { I_X, I_GXP, I_YP, I_W, I_SH, I_GOUT, NIN };
    void *ib[NIN], *in[NIN];
    in[I_X] = dev_shifted(x, nc, shift, &ib[I_X]), in[I_GXP] = dev_shifted(gxp, npc, shift, &ib[I_GXP]);
    in[I_YP] = dev_shifted(yp, npc, shift, &ib[I_YP]), in[I_W] = dev_shifted(wt, nk, shift, &ib[I_W]);
    in[I_SH] = dev_shifted(sh, nc, shift, &ib[I_SH]), in[I_GOUT] = dev_shifted(gout, nc, shift, &ib[I_GOUT]);
    // outputs, per form (1 vector, 0 scalar)
    enum { O_XP, O_GX, O_GXA, O_OUT, O_OUTA, O_GYP, O_GW, NOUT };
    const size_t on[NOUT] = {npc, nc, nc, nc, nc, npc, nk};
    static const char *const oname[NOUT] = {"xp (gather)", "dx (gather bwd)", "dx += (gather bwd, accumulate)",
                                            "out (combine)", "out (combine + add)", "dyp (combine bwd)",
                                            "dweights (combine bwd)"};
    const float *oref[NOUT] = {r_xp, r_gx, r_gxa, r_out, r_outa, r_gyp, r_gw};
    void *ob[2][NOUT], *o[2][NOUT];
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < NOUT; i++) o[f][i] = dev_shifted(NULL, on[i], shift, &ob[f][i]);
    for (int f = 1; f >= 0; f--) {
        cuda_moe_set_dispatch_vec(f);
        printf("  %s kernels%s:\n", f ? "vector" : "scalar", f ? " (where they apply)" : " (forced)");
        for (int i = 0; i < NOUT; i++) poison_bf16(o[f][i], on[i]);
        G->upload(o[f][O_GXA], d0, nc);
        const long v0 = cuda_moe_dispatch_vec_launches();
        X->moe_gather_forward(o[f][O_XP], in[I_X], dperm, N, K, C);
        X->moe_gather_backward(o[f][O_GX], in[I_GXP], dpos, N, K, C, 0);
        X->moe_gather_backward(o[f][O_GXA], in[I_GXP], dpos, N, K, C, 1);
        X->moe_combine_forward(o[f][O_OUT], in[I_YP], in[I_W], dpos, NULL, N, K, C);
        X->moe_combine_forward(o[f][O_OUTA], in[I_YP], in[I_W], dpos, in[I_SH], N, K, C);
        X->moe_combine_backward(o[f][O_GYP], o[f][O_GW], in[I_GOUT], in[I_YP], in[I_W], dpos, N, K, C);
        const long launches = cuda_moe_dispatch_vec_launches() - v0, want = f && vec ? 6 : 0;
        printf("  %-28s %ld of 6\n", "vector launches", launches);
        CHECK(launches == want, "%ld vector launches of 6 calls (expected %ld)", launches, want);
        for (int i = 0; i < NOUT; i++) {
            const double tol = i == O_XP ? 0 : i <= O_GXA || i >= O_GYP ? TOL_GRAD : TOL_OUT;
            if (i == O_GXA) expect(oname[i], err_bf16_added(o[f][i], d0, r_gxa, nc), tol);
            else cmp_bf16(oname[i], o[f][i], oref[i], on[i], tol);
        }
    }
    cuda_moe_set_dispatch_vec(1);
    for (int i = 0; i < NOUT; i++) {
        if (i == O_GW) continue;
        char w[80];
        snprintf(w, sizeof w, "%s: vector = scalar", oname[i]);
        expect_same_dev(w, o[1][i], o[0][i], on[i]);
    }
    // the fused adds against the separate ops they replace
    void *sb, *sep = dev_shifted(NULL, nc, shift, &sb);
    poison_bf16(sep, nc);
    G->core->add_forward(sep, o[1][O_OUT], in[I_SH], nc);
    expect_same_dev("combine + add = add_forward", o[1][O_OUTA], sep, nc);
    G->upload(sep, d0, nc);
    G->core->add_inplace(sep, o[1][O_GX], nc);
    expect_same_dev("gather bwd += = add_inplace", o[1][O_GXA], sep, nc);
    // dweights: each form bit-identical on a rerun (into new buffers, shifted as the first)
    for (int f = 1; f >= 0; f--) {
        cuda_moe_set_dispatch_vec(f);
        void *b1, *b2, *gyp = dev_shifted(NULL, npc, shift, &b1), *gw = dev_shifted(NULL, nk, shift, &b2);
        poison_bf16(gyp, npc), poison_bf16(gw, nk);
        X->moe_combine_backward(gyp, gw, in[I_GOUT], in[I_YP], in[I_W], dpos, N, K, C);
        expect_same_dev(f ? "dweights rerun (vector form)" : "dweights rerun (scalar)", gw, o[f][O_GW], nk);
        G->free(b1), G->free(b2);
    }
    cuda_moe_set_dispatch_vec(1);
    G->free(sb), G->free(dperm), G->free(dpos);
    for (int i = 0; i < NIN; i++) G->free(ib[i]);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < NOUT; i++) G->free(ob[f][i]);
    float *hb[] = {x, gxp, yp, wt, sh, gout, d0, r_xp, r_gx, r_gxa, r_out, r_outa, r_gyp, r_gw};
    for (size_t i = 0; i < sizeof hb / sizeof *hb; i++) free(hb[i]);
    free(sel), free(perm), free(pos), free(off);
}

static const GluAct SWIGLU = {GLU_SWIGLU, 0.0, 0.0}, SITU = {GLU_SITU, 4.0, 25.0};

int main(void) {
    gpu_test_init("test_moe");
    X = cuda_moe_ops();
#ifdef HYBRID_CUDA_EMU
    test_router(61, 16, 2, ROUTER_SIGMOID, 1, 1.0, BIAS_RAND);
    test_router(40, 16, 1, ROUTER_SIGMOID, 1, 2.5, BIAS_NONE);   // top-1: no renormalisation
    test_router(33, 16, 8, ROUTER_SOFTMAX, 0, 1.0, BIAS_NONE);
    test_router(20, 8, 8, ROUTER_SIGMOID, 1, 1.0, BIAS_ONE);     // K = E; all first to one expert
    test_router(17, 12, 3, ROUTER_SOFTMAX, 1, 1.0, TIES);
    test_router(50, 64, 8, ROUTER_SIGMOID, 1, 2.5, BIAS_RAND);   // the large shape's E and top-k
    test_router(23, 40, 6, ROUTER_SOFTMAX, 1, 1.0, BIAS_NONE);   // E past one warp's 32, not a multiple
    test_router(19, 70, 5, ROUTER_SIGMOID, 0, 1.0, TIES);        // ties across lanes: the lower index first
    test_router(9, 600, 40, ROUTER_SOFTMAX, 1, 1.0, BIAS_ONE);   // E past 512, top-k past 32
    test_aux(48, 16, 2, 16);
    test_aux(32, 8, 8, 32);
    test_balance(300, 2, 16, 3);
    test_balance(64, 8, 8, 1);
    test_balance(9000, 2, 40, 3);  // several count blocks (global adds from each)
    test_plan(33000, 2, 6, 1);     // 258 chunks: the scan's lanes take two passes
    test_plan(500, 3, 40, 3);      // 40 experts (13 empty) on the scan's 32 warps
    // gather / combine: vector kernels (C % 8 == 0) and the scalar ones
    test_dispatch_io(37, 2, 6, 264, 2, 0);  // 33 vectors a row (lanes 0 take two), 37 rows: a partial block
    test_dispatch_io(17, 2, 4, 1032, 1, 0);  // 129 vectors a row: lanes 0 take a second pass of ROW_UNROLL
    test_dispatch_io(45, 1, 4, 8, 1, 0);    // K = 1, one vector a row
    test_dispatch_io(13, 8, 8, 40, 1, 0);   // K = 8 = E
    test_dispatch_io(3, 2, 4, 16, 2, 0);    // fewer rows than a block; empty experts
    test_dispatch_io(29, 2, 5, 12, 1, 0);   // C % 8 != 0: scalar
    test_dispatch_io(29, 3, 5, 4, 1, 0);    // C < 8: scalar
    test_dispatch_io(33, 2, 4, 64, 1, 1);   // tensors 2 bytes off 16: scalar
    test_dispatch((DispatchCase){48, 2, 4, 72, 40, 1, 0, SWIGLU, 0, 0});
    // (..., 1}: the mixed mode's weight gradients forced onto cuBLAS, as on a large shape)
    test_dispatch((DispatchCase){40, 2, 6, 64, 48, 2, 0, SITU, 0, 1});   // empty experts 1, 3, 5
    test_dispatch((DispatchCase){70, 1, 4, 40, 24, 1, 1, SWIGLU, 0, 1});  // top-1, all to expert 0
    test_dispatch((DispatchCase){16, 8, 8, 32, 32, 1, 1, SITU, 0, 0});    // top-8 = E
    test_dispatch((DispatchCase){300, 2, 3, 16, 8, 1, 0, SWIGLU, 0, 0});  // several plan chunks
    // M a multiple of 64 and 128: the wgmma paths' GLU fused into fwd13 at both tile widths (at
    // 128 x 128, two hidden tiles a row tile with M = 128; M = 192: at 128 x 128 only; M = 256: at
    // 128 x 256 two hidden tiles, the up rows 128 past the gate rows' end: the warp-specialized
    // producer's two TMA boxes apart)
    test_dispatch((DispatchCase){40, 2, 3, 16, 128, 1, 0, SITU, 0, 0});
    test_dispatch((DispatchCase){24, 2, 2, 16, 192, 1, 0, SWIGLU, 0, 0});
    test_dispatch((DispatchCase){24, 2, 2, 16, 256, 1, 0, SITU, 0, 0});
    // reductions of 1024 (session 29's auto picked dgrad2 at C 1024 and dgrad13 at 2M 1024; kept
    // as long-reduction cases of every variant)
    test_dispatch((DispatchCase){24, 2, 2, 1024, 64, 1, 0, SWIGLU, 0, 0});
    test_dispatch((DispatchCase){24, 2, 2, 64, 512, 1, 0, SITU, 0, 0});
    // the grouped GEMM tile (128 x 128 x 64, 3 stages, 4 warps of 64 x 64): ~200 rows per expert
    // (2 row tiles, the second partial; the row GEMMs' 5 emulated blocks walk 2 x 3 tiles per
    // expert), experts 1, 3, 5 empty; K dims 264, 136, 272 = 8 odd multiples, 5, 3 and 5 k-steps
    // (the 3-stage ring wraps) with a partial last one; n_out 272, 264, 136 (a partial column
    // tile). The weight gradients: split 1 forced (each block adds its ~200 rows = 4 k-steps
    // into dW: the ring wraps), the rule's split (8 under the emulator: the tiles are few; 64-row
    // splits, so splits 4..7 of a ~200-row expert are empty), and 3 forced (splits of 128, ~72
    // and none)
    test_dispatch((DispatchCase){300, 2, 6, 264, 136, 2, 0, SWIGLU, 1, 0});
    test_dispatch((DispatchCase){300, 2, 6, 264, 136, 2, 0, SWIGLU, 0, 1});
    test_dispatch((DispatchCase){300, 2, 6, 264, 136, 2, 0, SITU, 3, 0});
    // C, M not multiples of 8: the element-by-element path of the same tile (and of the split
    // reduction), with and without splits
    test_dispatch((DispatchCase){150, 2, 3, 44, 21, 1, 0, SITU, 0, 0});
    test_dispatch((DispatchCase){150, 2, 3, 44, 21, 1, 0, SWIGLU, 1, 0});
#else
    // GPU: the KL-S configs (d_model 768, 16 experts, top-2, expert hidden 256; variant B: 384 / 512)
    test_router(16 * 1024, 16, 2, ROUTER_SIGMOID, 1, 1.0, BIAS_RAND);
    test_router(4096, 64, 8, ROUTER_SOFTMAX, 1, 2.5, BIAS_RAND);
    test_router(4096, 16, 1, ROUTER_SIGMOID, 1, 1.0, BIAS_ONE);
    test_aux(16 * 1024, 16, 2, 1024);
    test_balance(64 * 1024, 2, 16, 1);
    test_plan(64 * 1024, 2, 16, 1);
    test_plan(8192, 8, 64, 3);
    test_dispatch_io(64 * 1024, 2, 16, 768, 1, 0);  // the KL-S shape
    test_dispatch_io(4096, 8, 64, 768, 3, 0);
    test_dispatch_io(4097, 2, 16, 384, 1, 0);
    test_dispatch_io(4096, 2, 16, 200, 1, 0);  // 25 vectors a row
    test_dispatch_io(4096, 2, 16, 44, 1, 0);   // scalar
    test_dispatch_io(4096, 2, 16, 768, 1, 1);  // shifted: scalar
    // (the wgrad splits by the rule: 4 (dW2) and 2 (dW13) at the first; then split 1 forced.
    // The mixed mode's rule, with ours on wgmma, sends none of these weight gradients to cuBLAS
    // (fewer than 8 x 264 tiles; on mma.sync those of 264 or more), so the case whose first
    // choices all go to expert 0 forces them there, as on a large shape)
    test_dispatch((DispatchCase){8192, 2, 16, 768, 256, 1, 0, SWIGLU, 0, 0});
    test_dispatch((DispatchCase){8192, 2, 16, 768, 256, 1, 0, SWIGLU, 1, 0});
    test_dispatch((DispatchCase){4096, 2, 16, 384, 512, 1, 0, SITU, 0, 0});
    test_dispatch((DispatchCase){2048, 8, 64, 768, 256, 3, 0, SWIGLU, 0, 0});
    test_dispatch((DispatchCase){4096, 2, 16, 768, 256, 1, 1, SWIGLU, 0, 1});
    test_dispatch((DispatchCase){4096, 1, 16, 768, 256, 1, 0, SITU, 0, 0});  // top-1
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
