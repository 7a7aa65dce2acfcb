// GPU parity tests of the chunkwise delta rule and its decode step (KDA, GDN, DeltaNet;
// model/ops/delta_rule/delta_rule.h; kernels/delta_rule/chunk*.cu, step.cu) against the float
// CPU reference (whose internals are double), on fresh random inputs.
// Method and helpers: tests/gpu/harness.h (bf16-rounded inputs, NaN-poisoned outputs, RMS
// relative error). Inputs as the layer feeds them (tests/gpu/delta_rule_prob.h): q, k
// L2-normalised rows; beta in (0, 1); log-decays g in fla's range (KDA per channel ~ -0.14 a
// token, so the in-chunk cumulative decay reaches about -5..-20; GDN per head in [-1, -0.01]).
// Tolerances: bf16 outputs TOL_OUT 5e-3; dq, dk, dv TOL_GRAD 8e-3; dg, dbeta 2e-2 (fla's test
// tolerance for those); fp32 states hT, dh0 TOL_F32 1e-4: the kernels carry states in fp32 over
// at most a few chunks of 64 tokens, against a double reference rounded to float, so their
// error is a few fp32 roundings (~1e-6) per accumulated product; 1e-4 leaves margin without
// hiding a wrong term (a wrong term is O(1) relative).
// Under HYBRID_CUDA_EMU (the CPU emulator, tests/cuda_emu/) only small shapes run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "model/ops/delta_rule/delta_rule.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"
#include "tests/gpu/delta_rule_prob.h"

// the fp32-I/O forward (chunk.cuh)
extern void cuda_delta_chunk_forward_f32io(LinearKind kind, float *o, float *hT, const float *q, const float *k,
                                           const float *v, const float *g, const float *beta, const float *h0,
                                           float scale, int B, int T, int H, int K, int V, const int *offsets,
                                           int nseq, int chunk, void *workspace);
// the SIMT fp32 kernels on bf16 I/O (chunk.cuh): the table's members before the tensor-core
// kernels, kept as the reference and the fallback; every chunk case runs both paths
extern void cuda_delta_chunk_forward_simt(LinearKind kind, real *o, real *hT, const real *q, const real *k,
                                          const real *v, const real *g, const real *beta, const real *h0, real scale,
                                          int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
                                          void *workspace);
extern void cuda_delta_chunk_backward_simt(LinearKind kind, real *dq, real *dk, real *dv, real *dg, real *dbeta,
                                           real *dh0, const real *dout, const real *dhT, const real *q, const real *k,
                                           const real *v, const real *g, const real *beta, const real *h0, real scale,
                                           int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
                                           void *workspace);
extern size_t cuda_delta_chunk_workspace_simt(LinearKind kind, int backward, int B, int T, int H, int K, int V,
                                              int nseq, int chunk);
// the V tile width each walk launches with at this shape (kernels/delta_rule/walk.cuh's choice)
extern int cuda_delta_walk_tile(int K, int V, int pairs);
extern int cuda_delta_bwalk_tile(int K, int V, int pairs);

#define TOL_GB 2e-2  // dg, dbeta
#define CHUNK 64

static const DeltaRuleOps *D;
// the path under test: the table's members (tensor cores) or the SIMT entries
typedef struct {
    const char *name;
    __typeof__(((DeltaRuleOps *)0)->delta_chunk_forward) fwd;
    __typeof__(((DeltaRuleOps *)0)->delta_chunk_backward) bwd;
    __typeof__(((DeltaRuleOps *)0)->linear_workspace_size) ws;
} Path;
static Path PATHS[2];

static void *cpu_ws(const Prob *p, int backward) {
    size_t b = cpu_linear_workspace_size(p->kind, backward, p->B, p->T, p->H, p->K, p->V, p->N, CHUNK);
    return xmalloc(b ? b : 1);
}
static const Path *P;
static void *gpu_ws(const Prob *p, int backward) {
    size_t b = P->ws(p->kind, backward, p->B, p->T, p->H, p->K, p->V, p->N, CHUNK);
    return G->alloc(b ? b : 16);
}

// the number of elements whose bits differ between two host arrays
static size_t bits_differing(const float *x, const float *y, size_t n) {
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(x + i, y + i, sizeof(float)) != 0;
    return diff;
}
// two host copies of device tensors hold the same bits (the number of differing elements is
// 0); frees both
static void same_bits(const char *what, float *x, float *y, size_t n) {
    expect(what, (double)bits_differing(x, y, n), 0);
    free(x), free(y);
}
// two fp32 device tensors differ somewhere (a switch under test took effect)
static void differs_f32(const char *what, const float *a, const float *b, size_t n) {
    float *x = get_f32(a, n), *y = get_f32(b, n);
    CHECK(bits_differing(x, y, n) > 0, "%s: all %zu entries have the same bits", what, n);
    free(x), free(y);
}
// the backward's five bf16 gradients (device) against the CPU's, at the bf16 bars; `how` ends
// each check's name ("" or ", <the variant>")
static void cmp_grads(const char *how, const Prob *p, const void *dqd, const void *dkd, const void *dvd,
                      const void *dgd, const void *dbd, const float *dq, const float *dk, const float *dv,
                      const float *dg, const float *db) {
    char what[96];
    snprintf(what, sizeof what, "backward dq%s", how);
    cmp_bf16(what, dqd, dq, p->nq, TOL_GRAD);
    snprintf(what, sizeof what, "backward dk%s", how);
    cmp_bf16(what, dkd, dk, p->nq, TOL_GRAD);
    snprintf(what, sizeof what, "backward dv%s", how);
    cmp_bf16(what, dvd, dv, p->nv, TOL_GRAD);
    snprintf(what, sizeof what, "backward dg%s", how);
    if (dgd) cmp_bf16(what, dgd, dg, p->ng, TOL_GB);
    snprintf(what, sizeof what, "backward dbeta%s", how);
    cmp_bf16(what, dbd, db, p->nb, TOL_GB);
}
static void same_bits_bf16(const char *what, const void *a, const void *b, size_t n) {
    same_bits(what, get_bf16(a, n), get_bf16(b, n), n);
}
static void same_bits_f32(const char *what, const float *a, const float *b, size_t n) {
    same_bits(what, get_f32(a, n), get_f32(b, n), n);
}

// The walks' V tiles (kernels/delta_rule/walk.cuh): the launch picks one from the shape and
// the SM count, so every tile must give the same bits. The default run (test_chunk) ran each
// walk on the tile it picks; this runs the tensor-core forward and backward again with each
// walk's other tile forced (HYBRID_DR_WALK_BV 32 | 64, HYBRID_DR_BWALK_BV 32 | 128; a tile that
// the shape does not fit falls back to the picked one: the 128-column reverse walk at K > 128)
// and compares every output with the default run's. So every tile of both walks runs on every
// case (the forced picked tile, a rerun of the default, was dropped: it added no tile).
static void test_walk_tiles(const Prob *p, const DevIn *d, const void *od, const float *hTd, const void *dqd,
                            const void *dkd, const void *dvd, const void *dgd, const void *dbd, const float *dh0d,
                            int with_h0, int with_dhT) {
    const float *dh0p = with_h0 ? d->h0 : NULL, *ddhT = with_dhT ? d->dhT : NULL;
    const int pairs = p->N * p->H;
    const char *const tiles[2] = {cuda_delta_walk_tile(p->K, p->V, pairs) == 32 ? "64" : "32",
                                  cuda_delta_bwalk_tile(p->K, p->V, pairs) == 32 ? "128" : "32"};
    void *o2 = dev_bf16(NULL, p->nv), *wg = gpu_ws(p, 1), *rq = dev_bf16(NULL, p->nq), *rk = dev_bf16(NULL, p->nq),
         *rv = dev_bf16(NULL, p->nv), *rg = p->g ? dev_bf16(NULL, p->ng) : NULL, *rb = dev_bf16(NULL, p->nb);
    float *h2 = dev_f32(NULL, p->ns), *r0 = dev_f32(NULL, p->ns);
    poison_bf16(o2, p->nv), poison_f32(h2, p->ns), poison_f32(r0, p->ns);
    poison_bf16(rq, p->nq), poison_bf16(rk, p->nq), poison_bf16(rv, p->nv), poison_bf16(rb, p->nb);
    if (rg) poison_bf16(rg, p->ng);
    setenv("HYBRID_DR_WALK_BV", tiles[0], 1);
    setenv("HYBRID_DR_BWALK_BV", tiles[1], 1);
    P->fwd(p->kind, o2, (real *)h2, d->q, d->k, d->v, d->g, d->beta, (const real *)dh0p, p->scale, p->B, p->T,
           p->H, p->K, p->V, d->offsets, p->nseq, CHUNK, wg);
    P->bwd(p->kind, rq, rk, rv, rg, rb, (real *)r0, d->dout, (const real *)ddhT, d->q, d->k,
           d->v, d->g, d->beta, (const real *)dh0p, p->scale, p->B, p->T, p->H, p->K, p->V, d->offsets, p->nseq,
           CHUNK, wg);
    unsetenv("HYBRID_DR_WALK_BV");
    unsetenv("HYBRID_DR_BWALK_BV");
    char what[96];
#define SAME(kind, name, x, y, n)                                                    \
    snprintf(what, sizeof what, "%s, walk tiles %s / %s", name, tiles[0], tiles[1]); \
    same_bits_##kind(what, x, y, n)
    SAME(bf16, "forward o", od, o2, p->nv);
    SAME(f32, "forward hT", hTd, h2, p->ns);
    SAME(bf16, "backward dq", dqd, rq, p->nq);
    SAME(bf16, "backward dk", dkd, rk, p->nq);
    SAME(bf16, "backward dv", dvd, rv, p->nv);
    if (rg) {
        SAME(bf16, "backward dg", dgd, rg, p->ng);
    }
    SAME(bf16, "backward dbeta", dbd, rb, p->nb);
    SAME(f32, "backward dh0", dh0d, r0, p->ns);
#undef SAME
    G->free(o2), G->free(wg), G->free(rq), G->free(rk), G->free(rv), G->free(rb), G->free(h2), G->free(r0);
    if (rg) G->free(rg);
}

// Alternatives that must give the same bits, switched by environment variables read at each
// call (kernels/delta_rule/): 0, the single gradient kernel (HYBRID_DR_GRAD_REF=1); 1, the
// other Delta / dDelta workspace layout than the run's own (HYBRID_DR_DELTA_F32 flipped, so a
// run under HYBRID_DR_DELTA_F32=1 compares the fp32 layout with the pairs too). alt_on returns
// the variable's previous value for alt_off, which puts it back.
static const char *const ALT[2][2] = {{"HYBRID_DR_GRAD_REF", "split = single kernel"},
                                      {"HYBRID_DR_DELTA_F32", "Delta pairs = Delta fp32"}};
static char *alt_on(int a) {
    const char *cur = getenv(ALT[a][0]);
    char *saved = cur ? xstrdup(cur) : NULL;
    setenv(ALT[a][0], a == 1 && cur && cur[0] == '1' ? "0" : "1", 1);
    return saved;
}
static void alt_off(int a, char *saved) {
    if (saved)
        setenv(ALT[a][0], saved, 1);
    else
        unsetenv(ALT[a][0]);
    free(saved);
}
// the cases that also compare the two Delta layouts: unaligned K / V (the layout's partial
// groups and plain copies), varlen, and K >= 128 (the full-width tile paths)
static int layout_case(const Prob *p) { return p->K % 16 || p->V % 16 || p->offsets || p->K >= 128; }

// The tensor-core forward in one MMA a product (the default arithmetic, HYBRID_DR_BF16 unset or
// 1; kernels/delta_rule/chunk.cuh's dr_mma3x: fla's arithmetic, no lo parts) against the CPU
// reference o, hT: o at the bf16 bar TOL_OUT, and hT at it too: in that arithmetic the state
// carries bf16-level errors (the precision audit measured ~2e-3 at T 4096 on the H200;
// docs/delta-rule.md, "One MMA a product"), which the split arithmetic's 1e-4 would not admit. Its hT must differ from the
// split run's (hTd) somewhere: else the switch did not take effect. The first run has the
// variable unset (so the default is what is checked to be one MMA), the second sets it to 1.
// the cases of each kind whose one-MMA forward gives other bits with the diagonal blocks in SIMT
static int diag_cases_differing[LINEAR_ATTN + 1];
static void test_bf16_forward(const Prob *p, const DevIn *d, float *h0d, const float *o, const float *hT,
                              const float *hTd, void *wg) {
    void *ob = dev_bf16(NULL, p->nv);
    float *hb = dev_f32(NULL, p->ns);
    poison_bf16(ob, p->nv), poison_f32(hb, p->ns);
    unsetenv("HYBRID_DR_BF16");  // the default
    P->fwd(p->kind, ob, (real *)hb, d->q, d->k, d->v, d->g, d->beta, (const real *)h0d, p->scale, p->B, p->T, p->H,
           p->K, p->V, d->offsets, p->nseq, CHUNK, wg);
    setenv("HYBRID_DR_BF16", "0", 1);
    cmp_bf16("forward o, one MMA a product (the default)", ob, o, p->nv, TOL_OUT);
    cmp_f32("forward hT, one MMA a product (the default)", hb, hT, p->ns, TOL_OUT);
    differs_f32("forward hT, one MMA a product (the default) against the split arithmetic's", hb, hTd, p->ns);
    // The prep's diagonal blocks: on tensor cores where their factors allow, else in SIMT
    // (chunk.cuh, DR_DIAG_BOUND); HYBRID_DR_DIAG_SIMT=1 puts every block in SIMT. Both within the
    // bars; with the gates in fla's range every diagonal block is on tensor cores, so the two
    // runs differ (else the tensor-core blocks never ran); the strong gates (strong_decay 1) send
    // most blocks to SIMT, and mixed ones (2) some blocks of a chunk each way.
    void *os = dev_bf16(NULL, p->nv);
    float *hs = dev_f32(NULL, p->ns);
    poison_bf16(os, p->nv), poison_f32(hs, p->ns);
    setenv("HYBRID_DR_BF16", "1", 1);
    setenv("HYBRID_DR_DIAG_SIMT", "1", 1);
    P->fwd(p->kind, os, (real *)hs, d->q, d->k, d->v, d->g, d->beta, (const real *)h0d, p->scale, p->B, p->T, p->H,
           p->K, p->V, d->offsets, p->nseq, CHUNK, wg);
    setenv("HYBRID_DR_DIAG_SIMT", "0", 1);
    setenv("HYBRID_DR_BF16", "0", 1);
    cmp_bf16("forward o, one MMA a product, diagonal blocks in SIMT", os, o, p->nv, TOL_OUT);
    cmp_f32("forward hT, one MMA a product, diagonal blocks in SIMT", hs, hT, p->ns, TOL_OUT);
    // (counted over the cases of a kind, checked at the end: in a single case both forms often
    // round to the same bf16 o, and T diag(beta), one bf16 in W and U, to the same hT)
    float *o1 = get_bf16(ob, p->nv), *o2 = get_bf16(os, p->nv), *h1 = get_f32(hb, p->ns), *h2 = get_f32(hs, p->ns);
    diag_cases_differing[p->kind] += bits_differing(o1, o2, p->nv) + bits_differing(h1, h2, p->ns) > 0;
    free(o1), free(o2), free(h1), free(h2);
    G->free(ob), G->free(hb), G->free(os), G->free(hs);
}

// The backward in one MMA a product (the default, run with HYBRID_DR_BF16 unset: the recomputed
// forward, the reverse walk and grad1 in that arithmetic) against the CPU reference gradients at
// fla's bars, dh0 at the gradients' 8e-3 as fla's own tests hold it (docs/delta-rule.md, "One MMA a product"). The
// emulator's worst is DeltaNet's dh0 at K 13, V 16 (7.8e-3): with no decay and a 13-wide key
// space the 70 tokens contract dh0 while the rounding of each product does not shrink with it.
// The one-MMA kernels compute exactly the split kernels' arithmetic with every lo part zero (the
// emulated hash_delta_rule under HYBRID_DR_BF16=1 prints the same bits as
// hash_delta_rule_audit --mask all), so these numbers are that arithmetic's, not an index bug's.
// Its dh0 must differ from the split run's (dh0s) somewhere.
static void test_bf16_backward(const Prob *p, const DevIn *d, float *h0d, float *dhTd, const float *dq,
                               const float *dk, const float *dv, const float *dg, const float *db, const float *dh0,
                               const float *dh0s) {
    void *rq = dev_bf16(NULL, p->nq), *rk = dev_bf16(NULL, p->nq), *rv = dev_bf16(NULL, p->nv),
         *rg = p->g ? dev_bf16(NULL, p->ng) : NULL, *rb = dev_bf16(NULL, p->nb);
    float *rh = dev_f32(NULL, p->ns);
    poison_bf16(rq, p->nq), poison_bf16(rk, p->nq), poison_bf16(rv, p->nv), poison_bf16(rb, p->nb);
    if (rg) poison_bf16(rg, p->ng);
    poison_f32(rh, p->ns);
    void *wg = gpu_ws(p, 1);
    unsetenv("HYBRID_DR_BF16");  // the default
    P->bwd(p->kind, rq, rk, rv, rg, rb, (real *)rh, d->dout, (const real *)dhTd, d->q, d->k, d->v, d->g, d->beta,
           (const real *)h0d, p->scale, p->B, p->T, p->H, p->K, p->V, d->offsets, p->nseq, CHUNK, wg);
    setenv("HYBRID_DR_BF16", "0", 1);
    cmp_grads(", one MMA a product", p, rq, rk, rv, rg, rb, dq, dk, dv, dg, db);
    cmp_f32("backward dh0, one MMA a product", rh, dh0, p->ns, TOL_GRAD);
    differs_f32("backward dh0, one MMA a product against the split arithmetic's", rh, dh0s, p->ns);
    G->free(wg), G->free(rq), G->free(rk), G->free(rv), G->free(rb), G->free(rh);
    if (rg) G->free(rg);
}

// forward o and hT, then backward dq dk dv dg dbeta dh0; with_h0 / with_dhT: NULL or given
static void test_chunk(const Prob *p, int with_h0, int with_dhT) {
    printf("%s chunk B=%d T=%d H=%d K=%d V=%d%s h0=%s dhT=%s [%s]\n", kind_name(p->kind), p->B, p->T, p->H, p->K,
           p->V, p->offsets ? " varlen" : "", with_h0 ? "given" : "NULL", with_dhT ? "given" : "NULL", P->name);
    DevIn d = upload(p);
    const float *h0 = with_h0 ? p->h0 : NULL, *dhT = with_dhT ? p->dhT : NULL;
    // The bit comparisons with the alternatives (the other Delta / dDelta layout, the single
    // gradient kernel, the walks' other tiles) run on the tensor-core path's main run of a case
    // (h0 and dhT given) only: the variants (h0 or dhT NULL) change the walks' starting states
    // alone (the walk's h0 load, the reverse walk's dhT load), which no alternative switches (the
    // gradient kernels never see h0 or dhT; either layout is written and read the same way from
    // any state), so there they would run the same paths on other data. The variants themselves
    // stay checked against the CPU on both paths.
    const int alternatives = P == &PATHS[0] && with_h0 && with_dhT;
    float *dh0p = with_h0 ? d.h0 : NULL, *ddhT = with_dhT ? d.dhT : NULL;

    // forward
    float *o = xmalloc(sizeof(float) * p->nv), *hT = xmalloc(sizeof(float) * p->ns);
    void *wc = cpu_ws(p, 0);
    cpu_delta_chunk_forward(p->kind, o, hT, p->q, p->k, p->v, p->g, p->beta, h0, p->scale, p->B, p->T, p->H, p->K,
                            p->V, p->offsets, p->nseq, CHUNK, wc);
    free(wc);
    void *od = dev_bf16(NULL, p->nv), *wg = gpu_ws(p, 0);
    float *hTd = dev_f32(NULL, p->ns);
    poison_bf16(od, p->nv);
    poison_f32(hTd, p->ns);
    P->fwd(p->kind, od, (real *)hTd, d.q, d.k, d.v, d.g, d.beta, (const real *)dh0p, p->scale, p->B,
                           p->T, p->H, p->K, p->V, d.offsets, p->nseq, CHUNK, wg);
    cmp_bf16("forward o", od, o, p->nv, TOL_OUT);
    cmp_f32("forward hT (fp32)", hTd, hT, p->ns, TOL_F32);
    // hT NULL must work too (o unchanged)
    poison_bf16(od, p->nv);
    P->fwd(p->kind, od, NULL, d.q, d.k, d.v, d.g, d.beta, (const real *)dh0p, p->scale, p->B, p->T,
                           p->H, p->K, p->V, d.offsets, p->nseq, CHUNK, wg);
    cmp_bf16("forward o (hT NULL)", od, o, p->nv, TOL_OUT);
    if (P == &PATHS[0]) test_bf16_forward(p, &d, dh0p, o, hT, hTd, wg);
    if (layout_case(p) && alternatives) {  // the other Delta layout: the output kernel reads it
        void *ro = dev_bf16(NULL, p->nv);
        float *rh = dev_f32(NULL, p->ns);
        poison_bf16(ro, p->nv), poison_f32(rh, p->ns);
        char *saved = alt_on(1);
        P->fwd(p->kind, ro, (real *)rh, d.q, d.k, d.v, d.g, d.beta, (const real *)dh0p, p->scale, p->B, p->T, p->H,
               p->K, p->V, d.offsets, p->nseq, CHUNK, wg);
        alt_off(1, saved);
        same_bits_bf16("forward o, Delta pairs = Delta fp32", od, ro, p->nv);
        same_bits_f32("forward hT, Delta pairs = Delta fp32", hTd, rh, p->ns);
        G->free(ro), G->free(rh);
    }
    G->free(wg);

    // backward
    float *dq = xmalloc(sizeof(float) * p->nq), *dk = xmalloc(sizeof(float) * p->nq),
          *dv = xmalloc(sizeof(float) * p->nv), *dg = p->g ? xmalloc(sizeof(float) * p->ng) : NULL,
          *db = xmalloc(sizeof(float) * p->nb), *dh0 = xmalloc(sizeof(float) * p->ns);
    wc = cpu_ws(p, 1);
    cpu_delta_chunk_backward(p->kind, dq, dk, dv, dg, db, dh0, p->dout, dhT, p->q, p->k, p->v, p->g, p->beta, h0,
                             p->scale, p->B, p->T, p->H, p->K, p->V, p->offsets, p->nseq, CHUNK, wc);
    free(wc);
    void *dqd = dev_bf16(NULL, p->nq), *dkd = dev_bf16(NULL, p->nq), *dvd = dev_bf16(NULL, p->nv),
         *dgd = p->g ? dev_bf16(NULL, p->ng) : NULL, *dbd = dev_bf16(NULL, p->nb);
    float *dh0d = dev_f32(NULL, p->ns);
    wg = gpu_ws(p, 1);
    poison_bf16(dqd, p->nq), poison_bf16(dkd, p->nq), poison_bf16(dvd, p->nv), poison_bf16(dbd, p->nb);
    if (dgd) poison_bf16(dgd, p->ng);
    poison_f32(dh0d, p->ns);
    P->bwd(p->kind, dqd, dkd, dvd, dgd, dbd, (real *)dh0d, d.dout, (const real *)ddhT, d.q, d.k, d.v,
                            d.g, d.beta, (const real *)dh0p, p->scale, p->B, p->T, p->H, p->K, p->V, d.offsets,
                            p->nseq, CHUNK, wg);
    cmp_grads("", p, dqd, dkd, dvd, dgd, dbd, dq, dk, dv, dg, db);
    cmp_f32("backward dh0 (fp32)", dh0d, dh0, p->ns, TOL_F32);
    if (P == &PATHS[0]) test_bf16_backward(p, &d, dh0p, ddhT, dq, dk, dv, dg, db, dh0, dh0d);
    // the split gradient kernels against the single one (HYBRID_DR_GRAD_REF=1) on every case (its
    // main run: `alternatives`), and on the unaligned, varlen and K = 128 / 256 cases the other
    // Delta / dDelta layout (hi + lo pairs against fp32, HYBRID_DR_DELTA_F32; each check is a
    // backward more of emulator time): the same bits
    for (int a = 0; a < (layout_case(p) ? 2 : 1) && alternatives; a++) {
        void *rq = dev_bf16(NULL, p->nq), *rk = dev_bf16(NULL, p->nq), *rv = dev_bf16(NULL, p->nv),
             *rg = p->g ? dev_bf16(NULL, p->ng) : NULL, *rb = dev_bf16(NULL, p->nb);
        poison_bf16(rq, p->nq), poison_bf16(rk, p->nq), poison_bf16(rv, p->nv), poison_bf16(rb, p->nb);
        if (rg) poison_bf16(rg, p->ng);
        char *saved = alt_on(a);
        P->bwd(p->kind, rq, rk, rv, rg, rb, NULL, d.dout, (const real *)ddhT, d.q, d.k, d.v, d.g, d.beta,
               (const real *)dh0p, p->scale, p->B, p->T, p->H, p->K, p->V, d.offsets, p->nseq, CHUNK, wg);
        alt_off(a, saved);
        char what[96];
        snprintf(what, sizeof what, "backward dq, %s", ALT[a][1]);
        same_bits_bf16(what, dqd, rq, p->nq);
        snprintf(what, sizeof what, "backward dk, %s", ALT[a][1]);
        same_bits_bf16(what, dkd, rk, p->nq);
        snprintf(what, sizeof what, "backward dv, %s", ALT[a][1]);
        same_bits_bf16(what, dvd, rv, p->nv);
        snprintf(what, sizeof what, "backward dg, %s", ALT[a][1]);
        if (rg) same_bits_bf16(what, dgd, rg, p->ng);
        snprintf(what, sizeof what, "backward dbeta, %s", ALT[a][1]);
        same_bits_bf16(what, dbd, rb, p->nb);
        G->free(rq), G->free(rk), G->free(rv), G->free(rb);
        if (rg) G->free(rg);
    }
    G->free(wg);
    if (alternatives) test_walk_tiles(p, &d, od, hTd, dqd, dkd, dvd, dgd, dbd, dh0d, with_h0, with_dhT);
    G->free(od), G->free(hTd), G->free(dqd), G->free(dkd), G->free(dvd), G->free(dbd), G->free(dh0d);
    if (dgd) G->free(dgd);
    free(o), free(hT), free(dq), free(dk), free(dv), free(dg), free(db), free(dh0);
    free_dev(&d);
}

// token t of every sequence of a fixed-length problem gathered into (N=B, H, D) rows
static float *gather_tok(const float *x, const Prob *p, int t, int Dd) {
    float *y = xmalloc(sizeof(float) * (size_t)p->B * p->H * Dd);
    for (int b = 0; b < p->B; b++)
        memcpy(y + (size_t)b * p->H * Dd, x + ((size_t)b * p->T + t) * p->H * Dd, sizeof(float) * p->H * Dd);
    return y;
}

// delta_step against cpu_delta_step for one token, then T steps against the chunk forward
static void test_step(const Prob *p) {
    printf("%s step N=%d H=%d K=%d V=%d, %d steps vs the chunk forward\n", kind_name(p->kind), p->B, p->H, p->K,
           p->V, p->T);
    const int N = p->B, H = p->H, K = p->K, V = p->V, gd = p->kind == LINEAR_KDA ? K : 1;
    const size_t nk = (size_t)N * H * K, nvv = (size_t)N * H * V;
    // one step from a random state
    float *q = gather_tok(p->q, p, 0, K), *k = gather_tok(p->k, p, 0, K), *v = gather_tok(p->v, p, 0, V),
          *g = p->g ? gather_tok(p->g, p, 0, gd) : NULL, *b = gather_tok(p->beta, p, 0, 1);
    float *S = host_dup(p->h0, p->ns), *o = xmalloc(sizeof(float) * nvv);
    cpu_delta_step(p->kind, o, S, q, k, v, g, b, p->scale, N, H, K, V);
    void *qd = dev_bf16(q, nk), *kd = dev_bf16(k, nk), *vd = dev_bf16(v, nvv), *gd_ = g ? dev_bf16(g, nk / K * gd) : NULL,
         *bd = dev_bf16(b, (size_t)N * H), *od = dev_bf16(NULL, nvv);
    float *Sd = dev_f32(p->h0, p->ns);
    poison_bf16(od, nvv);
    D->delta_step(p->kind, od, (real *)Sd, qd, kd, vd, gd_, bd, p->scale, N, H, K, V);
    cmp_bf16("step o", od, o, nvv, TOL_OUT);
    cmp_f32("step state (fp32)", Sd, S, p->ns, TOL_F32);
    G->free(qd), G->free(kd), G->free(vd), G->free(bd), G->free(od);
    if (gd_) G->free(gd_);
    free(q), free(k), free(v), free(g), free(b), free(o);

    // T steps from h0 == the chunk forward (CPU reference) o and hT
    float *oc = xmalloc(sizeof(float) * p->nv), *hT = xmalloc(sizeof(float) * p->ns),
          *os = xmalloc(sizeof(float) * p->nv);
    void *wc = cpu_ws(p, 0);
    cpu_delta_chunk_forward(p->kind, oc, hT, p->q, p->k, p->v, p->g, p->beta, p->h0, p->scale, p->B, p->T, H, K, V,
                            NULL, 0, CHUNK, wc);
    free(wc);
    G->copy_from_host(Sd, p->h0, p->ns * sizeof(float));
    qd = dev_bf16(NULL, nk), kd = dev_bf16(NULL, nk), vd = dev_bf16(NULL, nvv), bd = dev_bf16(NULL, (size_t)N * H),
    od = dev_bf16(NULL, nvv), gd_ = p->g ? dev_bf16(NULL, nk / K * gd) : NULL;
    for (int t = 0; t < p->T; t++) {
        q = gather_tok(p->q, p, t, K), k = gather_tok(p->k, p, t, K), v = gather_tok(p->v, p, t, V),
        g = p->g ? gather_tok(p->g, p, t, gd) : NULL, b = gather_tok(p->beta, p, t, 1);
        G->upload(qd, q, nk), G->upload(kd, k, nk), G->upload(vd, v, nvv), G->upload(bd, b, (size_t)N * H);
        if (g) G->upload(gd_, g, nk / K * gd);
        poison_bf16(od, nvv);
        D->delta_step(p->kind, od, (real *)Sd, qd, kd, vd, gd_, bd, p->scale, N, H, K, V);
        float *ot = get_bf16(od, nvv);
        for (int n = 0; n < N; n++)
            memcpy(os + ((size_t)n * p->T + t) * H * V, ot + (size_t)n * H * V, sizeof(float) * H * V);
        free(ot), free(q), free(k), free(v), free(g), free(b);
    }
    expect("T steps o == chunk forward o", rel_rms(os, oc, p->nv), TOL_OUT);
    cmp_f32("T steps state == chunk forward hT (fp32)", Sd, hT, p->ns, TOL_F32);
    G->free(qd), G->free(kd), G->free(vd), G->free(bd), G->free(od), G->free(Sd);
    if (gd_) G->free(gd_);
    free(oc), free(hT), free(os), free(S);
}

// fp32-I/O forward against the CPU reference (double internals, rounded to float): the error of
// the kernels' fp32 arithmetic alone, next to fla's 1.4e-3 (issue 15, item 4)
static void test_f32io(const Prob *p) {
    printf("%s fp32-I/O forward B=%d T=%d H=%d K=%d V=%d%s\n", kind_name(p->kind), p->B, p->T, p->H, p->K, p->V,
           p->offsets ? " varlen" : "");
    float *o = xmalloc(sizeof(float) * p->nv), *hT = xmalloc(sizeof(float) * p->ns);
    void *wc = cpu_ws(p, 0);
    cpu_delta_chunk_forward(p->kind, o, hT, p->q, p->k, p->v, p->g, p->beta, p->h0, p->scale, p->B, p->T, p->H, p->K,
                            p->V, p->offsets, p->nseq, CHUNK, wc);
    free(wc);
    float *q = dev_f32(p->q, p->nq), *k = dev_f32(p->k, p->nq), *v = dev_f32(p->v, p->nv),
          *g = p->g ? dev_f32(p->g, p->ng) : NULL, *b = dev_f32(p->beta, p->nb), *h0 = dev_f32(p->h0, p->ns),
          *od = dev_f32(NULL, p->nv), *hTd = dev_f32(NULL, p->ns);
    int *off = p->offsets ? dev_tokens(p->offsets, (size_t)p->nseq + 1) : NULL;
    void *wg = G->alloc(cuda_delta_chunk_workspace_simt(p->kind, 0, p->B, p->T, p->H, p->K, p->V, p->N, CHUNK));  // SIMT kernels
    poison_f32(od, p->nv), poison_f32(hTd, p->ns);
    cuda_delta_chunk_forward_f32io(p->kind, od, hTd, q, k, v, g, b, h0, p->scale, p->B, p->T, p->H, p->K, p->V, off,
                                   p->nseq, CHUNK, wg);
    const double eo = err_f32(od, o, p->nv), eh = err_f32(hTd, hT, p->ns);
    printf("  fp32-I/O relative error: o %.2e, hT %.2e (fla's fp32 chunk kernels: 1.4e-3)\n", eo, eh);
    expect("fp32-I/O o", eo, TOL_F32);
    expect("fp32-I/O hT", eh, TOL_F32);
    G->free(q), G->free(k), G->free(v), G->free(b), G->free(h0), G->free(od), G->free(hTd), G->free(wg);
    if (g) G->free(g);
    if (off) G->free(off);
    free(o), free(hT);
}

static void run_fixed(LinearKind kind, int B, int T, int H, int K, int V, int variants) {
    Prob p = make_prob(kind, B, T, H, K, V, NULL, 0);
    for (int a = 0; a < 2; a++) {
        P = &PATHS[a];
        test_chunk(&p, 1, 1);
        if (variants) {
            test_chunk(&p, 0, 0);
            test_chunk(&p, 1, 0);
        }
    }
    free_prob(&p);
}

static void run_varlen(LinearKind kind, const int *offsets, int nseq, int H, int K, int V) {
    Prob p = make_prob(kind, 1, offsets[nseq], H, K, V, offsets, nseq);
    for (int a = 0; a < 2; a++) {
        P = &PATHS[a];
        test_chunk(&p, 1, 1);
        test_chunk(&p, 0, 0);
    }
    free_prob(&p);
}

#ifdef HYBRID_CUDA_EMU
// The kernels' switches refuse what they cannot read, naming it (the backend's env_flag for the
// 0 / 1 ones, kernels/delta_rule/walk.cuh for the walk's tile), and the single reference
// gradient kernel refuses the one-MMA arithmetic. Death tests fork, which a real GPU's context
// does not survive: the emulator's build only (the host code is the same in both builds).
static Prob *death_prob;
typedef struct {
    const char *name, *value;
} EnvSetting;
// the forward with one variable of the environment set (arg: an EnvSetting)
static void forward_with_env(void *arg) {
    const EnvSetting *set = arg;
    const Prob *p = death_prob;
    DevIn d = upload(p);
    P = &PATHS[0];
    void *od = dev_bf16(NULL, p->nv), *wg = gpu_ws(p, 0);
    setenv(set->name, set->value, 1);
    P->fwd(p->kind, od, NULL, d.q, d.k, d.v, d.g, d.beta, NULL, p->scale, p->B, p->T, p->H, p->K, p->V, d.offsets,
           p->nseq, CHUNK, wg);
}
static void ref_kernel_bf16(void *arg) {
    (void)arg;
    const Prob *p = death_prob;
    DevIn d = upload(p);
    P = &PATHS[0];
    void *dqd = dev_bf16(NULL, p->nq), *dkd = dev_bf16(NULL, p->nq), *dvd = dev_bf16(NULL, p->nv),
         *dgd = dev_bf16(NULL, p->ng), *dbd = dev_bf16(NULL, p->nb), *wg = gpu_ws(p, 1);
    unsetenv("HYBRID_DR_BF16");  // the default: one MMA a product
    setenv("HYBRID_DR_GRAD_REF", "1", 1);
    P->bwd(p->kind, dqd, dkd, dvd, dgd, dbd, NULL, d.dout, NULL, d.q, d.k, d.v, d.g, d.beta, NULL, p->scale, p->B,
           p->T, p->H, p->K, p->V, d.offsets, p->nseq, CHUNK, wg);
}
static void test_switch_errors(void) {
    Prob p = make_prob(LINEAR_KDA, 1, 70, 1, 16, 16, NULL, 0);
    death_prob = &p;
    // (HYBRID_DR_DIAG_SIMT is read in the split arithmetic too, which these runs are in)
    static const EnvSetting bad[] = {{"HYBRID_DR_BF16", "yes"}, {"HYBRID_DR_DIAG_SIMT", "on"},
                                     {"HYBRID_DR_DELTA_F32", "2"}, {"HYBRID_DR_WALK_BV", "48"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "%s=%s", bad[i].name, bad[i].value);
        CHECK(expect_death(forward_with_env, (void *)&bad[i], want, want, "expected"), "a bad %s is refused by name",
              bad[i].name);
    }
    CHECK(expect_death(ref_kernel_bf16, NULL, "HYBRID_DR_GRAD_REF in the default arithmetic", "HYBRID_DR_GRAD_REF=1",
                       "split arithmetic only"),
          "the single gradient kernel refuses the one-MMA arithmetic");
    free_prob(&p);
}
#endif

int main(void) {
    gpu_test_init("test_delta_rule");
    // the split arithmetic (HYBRID_DR_BF16=0) for every check but the one-MMA ones, whatever the
    // environment says (its states are held to 1e-4; the one-MMA calls unset the variable, the
    // default, or set it to 1, for themselves)
    setenv("HYBRID_DR_BF16", "0", 1);
    setenv("HYBRID_DR_DIAG_SIMT", "0", 1);  // (the one-MMA checks set it where they compare)
    D = G->delta_rule;
    CHECK(D->delta_chunk_forward && D->delta_chunk_backward && D->delta_step && D->linear_workspace_size,
          "the CUDA delta-rule table lacks the chunkwise delta rule");
    PATHS[0] = (Path){"tensor cores", D->delta_chunk_forward, D->delta_chunk_backward, D->linear_workspace_size};
    PATHS[1] = (Path){"SIMT", cuda_delta_chunk_forward_simt, cuda_delta_chunk_backward_simt,
                      cuda_delta_chunk_workspace_simt};
    const LinearKind kinds[3] = {LINEAR_KDA, LINEAR_GDN, LINEAR_DELTANET};
    // varlen: empty segments at the start, in the middle and at the end; a sequence longer than a chunk
    static const int off_small[] = {0, 0, 5, 70, 70, 71, 150, 150};
    const int nseq_small = 7;
    for (int a = 0; a < 3; a++) {
        const LinearKind kd = kinds[a];
        run_fixed(kd, 2, 1, 2, 32, 32, 0);
        run_fixed(kd, 2, 63, 2, 32, 32, 0);
        run_fixed(kd, 2, 64, 2, 32, 32, 0);
        run_fixed(kd, 2, 65, 2, 32, 32, 1);
        run_fixed(kd, 2, 130, 2, 32, 32, 1);
        run_fixed(kd, 2, 130, 2, 16, 32, 0);  // H*K != V
        run_fixed(kd, 2, 70, 2, 20, 13, 0);   // K, V not multiples of 8: padding, the unvectorised paths
        run_fixed(kd, 2, 70, 2, 13, 16, 0);   // K odd: grad2's single-element epilogue accesses
        run_varlen(kd, off_small, nseq_small, 2, 16, 32);
        strong_decay = 1;
        run_fixed(kd, 2, 130, 2, 32, 32, 1);
        strong_decay = 0;
        Prob ps = make_prob(kd, 2, 70, 2, 16, 32, NULL, 0);
        test_step(&ps);
        free_prob(&ps);
        Prob pf = make_prob(kd, 2, 130, 2, 32, 32, NULL, 0);
        test_f32io(&pf);
        free_prob(&pf);
        // the real models' head sizes at a short length, so that the emulator (make test) also
        // runs the full-width tile paths (16-byte vector groups, K / 32 channel groups) that
        // K <= 32 never reaches: K = V = 128, and K = 256 with strong gates
        if (kd != LINEAR_DELTANET) {
            run_fixed(kd, 1, 130, 1, 128, 128, 0);
            run_fixed(kd, 1, 128, 1, 128, 128, 0);  // whole chunks only: the FULL instances (chunk.cuh)
            // the K = V = 128 kernel instances (the launches' choice at that size) on packed
            // sequences: an empty one, a partial chunk, a sequence across a chunk boundary
            run_varlen(kd, off_small, 4, 1, 128, 128);
            strong_decay = 1;
            run_fixed(kd, 1, 70, 1, 256, 64, 0);
            strong_decay = 2;  // strong gates in some 16-token blocks: both kinds of diagonal block in a chunk
            run_fixed(kd, 1, 130, 1, 128, 128, 0);
            strong_decay = 0;
        }
#ifndef HYBRID_CUDA_EMU
        // GPU sizes: fla's head dims, a sequence of 1000, and many documents of mixed lengths
        run_fixed(kd, 2, 1000, 4, 128, 128, 0);
        run_fixed(kd, 2, 1024, 4, 128, 128, 0);  // whole chunks only: the FULL instances
        strong_decay = 1;
        run_fixed(kd, 2, 1000, 4, 128, 128, 0);
        run_fixed(kd, 1, 300, 2, 256, 64, 0);  // K = 256: 8 channel groups in dr_b4_diag
        strong_decay = 2;
        run_fixed(kd, 2, 1000, 4, 128, 128, 0);
        strong_decay = 0;
        run_fixed(kd, 1, 300, 2, 256, 64, 0);
        static const int off_big[] = {0, 1, 200, 200, 777, 1030, 1100, 1700, 2048};
        run_varlen(kd, off_big, 8, 4, 128, 128);
        Prob pb = make_prob(kd, 2, 1000, 4, 128, 128, NULL, 0);
        test_f32io(&pb);
        free_prob(&pb);
#endif
    }
    for (int a = 0; a < 3; a++)
        CHECK(diag_cases_differing[kinds[a]] > 0,
              "%s: the one-MMA forward gives the same bits with every diagonal block in SIMT in all its cases "
              "(the tensor-core diagonal blocks never ran)",
              kind_name(kinds[a]));
#ifdef HYBRID_CUDA_EMU
    test_switch_errors();
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
