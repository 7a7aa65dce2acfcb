// GPU parity tests of the optim family (model/ops/optim/optim.h; kernels/optim/): AdamW
// with fp32 master weights (1M + 3 elements, three steps), multi-tensor AdamW (7 segments
// of one buffer, gaps left alone, bit-identical to one adamw_update per segment) and Muon
// (bf16 Newton-Schulz, fp32 momentum and master; stacked blocks and both aspect ratios)
// against the float CPU reference. Method and helpers: tests/gpu/harness.h. Tolerances:
// fp32 optimizer state and master weights TOL_F32 1e-4; the AdamW update (master minus
// initial) 1e-3; the Muon update 2e-2 (bf16 Newton-Schulz against the CPU's fp32 NS5);
// the bf16 parameters must equal bf16(master) exactly. The gradients are fp32 (model/backend.h,
// `grad_size`) and hold values bf16 cannot (host_rand_f32), so a kernel that rounded them to
// bf16 would miss the m and momentum checks (a relative error near 1e-3 against TOL_F32).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "model/ops/optim/muon.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"

static void test_adamw(size_t n) {
    printf("adamw n=%zu (fp32 master)\n", n);
    float *p0 = host_rand(n, 1, 0), *p = host_dup(p0, n), *m = calloc(n, 4), *v = calloc(n, 4);
    void *dp = dev_bf16(p0, n);
    float *dgr = dev_f32(NULL, n), *dm = dev_f32(NULL, n), *dv = dev_f32(NULL, n), *dmaster = dev_f32(p0, n);
    for (int t = 1; t <= 3; t++) {
        float *gr = host_rand_f32(n, 1, 0);
        G->copy_from_host(dgr, gr, n * sizeof(float));
        cpu_adamw_update(p, gr, m, v, NULL, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        G->optim->adamw_update(dp, (real *)dgr, dm, dv, dmaster, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
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
    void *dp = dev_bf16(p0, n), *dp2 = dev_bf16(p0, n);
    float *dgr = dev_f32(NULL, n), *dm = dev_f32(m, n), *dv = dev_f32(v, n), *dmaster = dev_f32(p0, n);
    float *dm2 = dev_f32(m, n), *dv2 = dev_f32(v, n), *dmaster2 = dev_f32(p0, n);
    for (int t = 1; t <= 3; t++) {
        float *gr = host_rand_f32(n, 1, 0);
        G->copy_from_host(dgr, gr, n * sizeof(float));
        for (int i = 0; i < NS; i++) {
            cpu_adamw_update(p + off[i], gr + off[i], m + off[i], v + off[i], NULL, len[i], lr[i], 0.9f, 0.95f, 1e-8f,
                             wd[i], 0.5f, t);
            G->optim->adamw_update(backend_offset(G, dp2, off[i]), (real *)(dgr + off[i]), dm2 + off[i],
                            dv2 + off[i], dmaster2 + off[i], len[i], lr[i], 0.9f, 0.95f, 1e-8f, wd[i], 0.5f, t);
        }
        G->optim->adamw_update_multi(dp, (real *)dgr, dm, dv, dmaster, NS, off, len, lr, wd, 0.9f, 0.95f, 1e-8f, 0.5f,
                                     t);
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

// rule: MUON_SCALE_MOONLIGHT (sum-form momentum) or MUON_SCALE_KELLER (EMA-form momentum)
static void test_muon(int rows, int cols, int nb, int rule) {
    printf("muon %dx%d, %d block(s), %s (bf16 Newton-Schulz, fp32 master)\n", rows, cols, nb,
           rule == MUON_SCALE_KELLER ? "keller" : "moonlight");
    size_t n = (size_t)rows * cols;
    float *w0 = host_rand(n, 0.02f, 0), *w = host_dup(w0, n), *M = calloc(n, 4);
    float *work = xmalloc(sizeof(float) * muon_workspace_size(rows / nb, cols));
    void *dw = dev_bf16(w0, n);
    float *dg = dev_f32(NULL, n), *dM = dev_f32(NULL, n), *dmaster = dev_f32(w0, n);
    void *dwork = G->alloc(muon_workspace_size(rows / nb, cols) * G->elem_size);
    for (int step = 0; step < 2; step++) {
        float *gr = host_rand_f32(n, 1, 0);
        G->copy_from_host(dg, gr, n * sizeof(float));
        cpu_muon_update(w, gr, M, NULL, rows, cols, nb, 0.95f, 1, 5, rule, 0.02f, 0.1f, 0.7f, work);
        G->optim->muon_update(dw, (real *)dg, dM, dmaster, rows, cols, nb, 0.95f, 1, 5, rule, 0.02f, 0.1f, 0.7f, dwork);
        free(gr);
    }
    cmp_f32("momentum (fp32)", dM, M, n, TOL_F32);
    float *gm = get_f32(dmaster, n);
    for (size_t i = 0; i < n; i++) {
        gm[i] -= w0[i];
        w[i] -= w0[i];
    }
    // bf16 Newton-Schulz against the CPU's fp32 NS5: 2e-2
    // (docs/cuda.md, "Tests: `make test-gpu` (tests/gpu/)")
    expect("update (master - initial) vs CPU NS5 in fp32", rel_rms(gm, w, n), 2e-2);
    G->free(dw), G->free(dg), G->free(dM), G->free(dmaster), G->free(dwork);
    free(w0), free(w), free(M), free(work), free(gm);
}

int main(void) {
    gpu_test_init("test_optim");
#ifdef HYBRID_CUDA_EMU
    // the CPU emulator (tests/cuda_emu/): small shapes
    const int C = 64;
    test_adamw(((size_t)1 << 14) + 3);
#else
    const int C = 768;
    test_adamw(((size_t)1 << 20) + 3);
#endif
    test_adamw_multi();
    test_muon(3 * C, C, 3, MUON_SCALE_MOONLIGHT);
    test_muon(4 * C, C, 1, MUON_SCALE_MOONLIGHT);
    test_muon(C, 4 * C, 1, MUON_SCALE_MOONLIGHT);
    test_muon(3 * C, C, 3, MUON_SCALE_KELLER);
    test_muon(C, 4 * C, 1, MUON_SCALE_KELLER);
    gpu_test_summary();
    TEST_MAIN_END();
}
