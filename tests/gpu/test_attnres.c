// GPU parity tests of the Block AttnRes family (model/ops/attnres/attnres.h;
// kernels/attnres/): attnres_forward and attnres_backward against cpu_attnres_* (the float
// CPU reference) on fresh random inputs. Method and helpers: tests/gpu/harness.h
// (bf16-rounded inputs, NaN-poisoned outputs, RMS relative error; tolerances TOL_OUT for
// out, TOL_GRAD for the gradients (the bf16 source gradients and the fp32 parameter gradients
// dw, dgamma: model/backend.h, `grad_size`), TOL_F32 for the fp32 statistics probs, logits,
// rstd and the backward's work). The backward runs twice on both sides: the source gradients
// start from random values and the parameter gradients from zero, so both "+=" are checked.
// Source counts come from the layer algorithm's plans (attnres_plan: the first block, a
// boundary op, partials, the output op) plus edge counts (1 source, more than 32). Channel
// widths reach every kernel variant (attnres.cuh): 16-byte groups of 8 (C % 8 == 0, aligned),
// masked groups (C = 520), single channels (C % 8 != 0, or a source moved off 16-byte
// alignment). The kernels are not handed to the backend yet (docs/cuda.md, "The CPU
// emulator"): the table comes from cuda_attnres_ops() directly.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "model/ops/attnres/attnres.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"

const AttnResOps *cuda_attnres_ops(void);  // kernels/attnres/table.cu
static const AttnResOps *A;

static float *host_alloc(size_t n) { return xmalloc(sizeof(float) * (n ? n : 1)); }

enum {
    AR_NULL_DSRC = 1,  // the first source gets no gradient (a NULL dsrcs entry)
    AR_MISALIGN = 2,   // the sources sit one element past a 16-byte boundary (single-channel path)
    AR_ZERO_W = 4,     // w = 0 as at initialisation: uniform p, dgamma = 0
};

// One op: N tokens, C channels, n sources; w scaled by wscale / sqrt(C) (so z is O(wscale)).
static void test_op(int N, int C, int n, float wscale, int flags) {
    printf("attnres N=%d C=%d n=%d wscale=%g%s%s%s\n", N, C, n, wscale, flags & AR_NULL_DSRC ? " null-dsrc" : "",
           flags & AR_MISALIGN ? " misaligned" : "", flags & AR_ZERO_W ? " w=0" : "");
    const size_t nc = (size_t)N * C, ns = (size_t)N * n, lag = flags & AR_MISALIGN ? 1 : 0;
    const double eps = 1e-5;
    // sources of different magnitudes, as blocks and partials are
    float **V = xmalloc(sizeof(float *) * n);
    void **dV = xmalloc(sizeof(void *) * n);
    const real **dsrc_in = xmalloc(sizeof(real *) * n);
    for (int i = 0; i < n; i++) {
        V[i] = host_rand(nc, 0.5f + 0.75f * (i % 4), 0.1f * (i % 3));
        float *tmp = host_alloc(nc + lag);
        tmp[0] = 0.f;
        memcpy(tmp + lag, V[i], sizeof(float) * nc);
        dV[i] = dev_bf16(tmp, nc + lag);
        dsrc_in[i] = backend_offset(G, dV[i], lag);
        free(tmp);
    }
    float *w = flags & AR_ZERO_W ? calloc(C, sizeof(float)) : host_rand(C, wscale / sqrtf((float)C), 0.f);
    float *gamma = host_rand(C, 0.5f, 1.f);
    void *dw_ = dev_bf16(w, C), *dg_ = dev_bf16(gamma, C);

    // forward
    float *out = host_alloc(nc), *probs = host_alloc(ns), *logits = host_alloc(ns), *rstd = host_alloc(ns);
    cpu_attnres_forward(out, probs, logits, rstd, (const real *const *)V, n, w, gamma, N, C, eps);
    void *dout_ = dev_bf16(NULL, nc);
    float *dprobs = dev_f32(NULL, ns), *dlogits = dev_f32(NULL, ns), *drstd = dev_f32(NULL, ns);
    poison_bf16(dout_, nc);
    poison_f32(dprobs, ns), poison_f32(dlogits, ns), poison_f32(drstd, ns);
    A->attnres_forward(dout_, (real *)dprobs, (real *)dlogits, (real *)drstd, dsrc_in, n, dw_, dg_, N, C, eps);
    cmp_bf16("forward out", dout_, out, nc, TOL_OUT);
    cmp_f32("forward probs (fp32)", dprobs, probs, ns, TOL_F32);
    cmp_f32("forward logits (fp32)", dlogits, logits, ns, TOL_F32);
    cmp_f32("forward rstd (fp32)", drstd, rstd, ns, TOL_F32);

    // backward on the CPU's statistics (the op alone), twice
    float *dh = host_rand(nc, 1.f, 0.f), *work = host_alloc(ns), *gw = calloc(C, sizeof(float));
    float *gg = calloc(C, sizeof(float));
    float **gV = xmalloc(sizeof(float *) * n);
    void **dgV = xmalloc(sizeof(void *) * n);
    real **dsrcs = xmalloc(sizeof(real *) * n);
    for (int i = 0; i < n; i++) {
        const int skip = (flags & AR_NULL_DSRC) && i == 0;
        gV[i] = skip ? NULL : host_rand(nc, 0.3f, 0.f);
        float *tmp = host_alloc(nc + lag);
        tmp[0] = 0.f;
        if (gV[i]) memcpy(tmp + lag, gV[i], sizeof(float) * nc);
        dgV[i] = skip ? NULL : dev_bf16(tmp, nc + lag);
        dsrcs[i] = skip ? NULL : backend_offset(G, dgV[i], lag);
        free(tmp);
    }
    void *ddh = dev_bf16(dh, nc);
    float *dgw = dev_f32(gw, C), *dgg = dev_f32(gg, C);  // from zero (gw, gg)
    float *dwork = dev_f32(NULL, ns), *dp2 = dev_f32(probs, ns), *dz2 = dev_f32(logits, ns), *dr2 = dev_f32(rstd, ns);
    for (int rep = 0; rep < 2; rep++) {
        cpu_attnres_backward(gV, gw, gg, work, dh, (const real *const *)V, n, w, gamma, probs, logits, rstd, N, C);
        poison_f32(dwork, ns);
        A->attnres_backward(dsrcs, (real *)dgw, (real *)dgg, (real *)dwork, ddh, dsrc_in, n, dw_, dg_, (real *)dp2, (real *)dz2,
                            (real *)dr2, N, C);
    }
    for (int i = 0; i < n; i++) {
        if (!gV[i]) continue;
        char what[64];
        snprintf(what, sizeof what, "backward dV[%d] (x2, accumulated)", i);
        cmp_bf16(what, dsrcs[i], gV[i], nc, TOL_GRAD);
    }
    cmp_f32("backward dw (fp32, x2, accumulated)", dgw, gw, C, TOL_F32);
    cmp_f32("backward dgamma (fp32, x2, accumulated)", dgg, gg, C, TOL_F32);
    cmp_f32("backward work = dz rho (fp32)", dwork, work, ns, TOL_F32);

    for (int i = 0; i < n; i++) {
        G->free(dV[i]);
        if (dgV[i]) G->free(dgV[i]);
        free(V[i]), free(gV[i]);
    }
    void *bufs[] = {dw_, dg_, dout_, dprobs, dlogits, drstd, ddh, dgw, dgg, dwork, dp2, dz2, dr2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) G->free(bufs[i]);
    free(V), free(dV), free(dsrc_in), free(gV), free(dgV), free(dsrcs);
    free(w), free(gamma), free(out), free(probs), free(logits), free(rstd), free(dh), free(work), free(gw), free(gg);
}

// Every distinct source count of an L-layer stack with blocks of S layers (attnres_plan):
// the first block's ops, a boundary op, ops reading a partial, the output op.
#define AR_MAX_SOURCES_TESTED 64
static void test_plans(int N, int C, int L, int S) {
    int seen[AR_MAX_SOURCES_TESTED] = {0};
    for (int site = ATTNRES_ATTN; site <= ATTNRES_OUT; site++)
        for (int l = 0; l < (site == ATTNRES_OUT ? 1 : L); l++) {
            AttnResPlan p = attnres_plan((AttnResSite)site, l, S, L);
            if (p.identity || seen[p.n_sources]) continue;
            seen[p.n_sources] = 1;
            printf("plan L=%d S=%d: site %d layer %d (%d blocks + %d partial%s)\n", L, S, site, l, p.n_blocks,
                   p.has_partial, p.seal ? ", seals" : "");
            test_op(N, C, p.n_sources, 2.f, 0);
        }
}

int main(void) {
    gpu_test_init("test_attnres");
    A = cuda_attnres_ops();
#ifdef HYBRID_CUDA_EMU
    test_plans(37, 128, 7, 3);                       // 16-byte groups, one per lane
    test_op(1000, 128, 3, 2.f, 0);                   // 32 dq chunks of 31-32 rows
    test_op(41, 520, 3, 2.f, AR_NULL_DSRC);          // 65 groups: the third group of lane 0 only
    test_op(19, 100, 2, 2.f, 0);                     // C % 8 != 0: single channels
    test_op(23, 128, 4, 2.f, AR_MISALIGN);           // aligned C, misaligned sources
    test_op(17, 64, 1, 2.f, 0);                      // one source: p = 1
    test_op(9, 64, 35, 3.f, AR_NULL_DSRC);           // more sources than lanes
    test_op(33, 256, 5, 12.f, 0);                    // peaked softmax
    test_op(29, 128, 3, 2.f, AR_ZERO_W);             // at initialisation
    test_op(9, 2048, 3, 2.f, 0);                     // the widest row (8 groups per lane)
    test_op(7, 1100, 2, 2.f, AR_MISALIGN);           // the widest single-channel row
    // the other row widths of the register kernels (one template instance each, so each is
    // launched here once: check_launch_limits): 2, 4, 6 groups of 8 a lane; 8, 16, 32 channels
    static const int widths[] = {512, 1024, 1536, 196, 500, 996};
    for (int i = 0; i < 6; i++) test_op(5, widths[i], 2, 2.f, 0);
#else
    // GPU: d_model 768, B*T = 16k rows; the KL configs' stack (16 layers, blocks of 2: up to 9 sources)
    test_plans(16 * 1024, 768, 16, 2);
    test_op(16 * 1024, 768, 9, 2.f, AR_NULL_DSRC);
    test_op(16 * 1024, 768, 5, 2.f, AR_MISALIGN);
    test_op(16 * 1024, 512, 9, 2.f, AR_ZERO_W);
    test_op(4 * 1024, 2048, 4, 12.f, 0);
    test_op(4096 + 3, 100, 3, 2.f, 0);
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
