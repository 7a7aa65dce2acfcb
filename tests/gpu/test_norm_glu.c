// GPU parity tests of the norm_glu family (model/ops/norm_glu/norm_glu.h; kernels/norm_glu/):
// RMSNorm forward/backward, its fused forms with the residual add (add_rmsnorm_forward,
// rmsnorm_backward_add) and the gated linear units (SwiGLU, SiTU) against the float CPU
// reference on fresh random inputs at GPT-2 124M sizes (N = 4096 rows, C = 768, H = 1024).
// Method and helpers: tests/gpu/harness.h (bf16-rounded inputs, NaN-poisoned outputs,
// parameter gradients accumulated twice from zero, RMS relative error). Tolerances: bf16
// outputs TOL_OUT 5e-3, bf16 (input) gradients TOL_GRAD 8e-3, fp32 rstd TOL_F32 1e-4, and
// TOL_F32 for RMSNorm's dw too: a parameter gradient, fp32 (model/backend.h, grad_size),
// summed from the bf16 inputs without rounding (a bf16 rounding of it would fail that).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"

static void test_rmsnorm(int N, int C) {
    printf("rmsnorm N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 2, 0.3f), *w = host_rand(C, 0.5f, 1);
    float *out = xmalloc(sizeof(float) * n), *rstd = xmalloc(sizeof(float) * N);
    cpu_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5);
    void *dx = dev_bf16(x, n), *dw = dev_bf16(w, C), *dout = dev_bf16(NULL, n);
    float *drstd = dev_f32(NULL, N);
    poison_bf16(dout, n);
    poison_f32(drstd, N);
    G->norm_glu->rmsnorm_forward(dout, (real *)drstd, dx, dw, N, C, 1e-5f);
    cmp_bf16("forward out", dout, out, n, TOL_OUT);
    cmp_f32("forward rstd (fp32)", drstd, rstd, N, TOL_F32);

    float *dy = host_rand(n, 1, 0), *dinp = xmalloc(sizeof(float) * n), *gw = calloc(C, sizeof(float));
    void *ddy = dev_bf16(dy, n), *ddinp = dev_bf16(NULL, n);
    float *dgw = dev_f32(NULL, C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_rmsnorm_backward(dinp, gw, dy, x, w, rstd, N, C);
        poison_bf16(ddinp, n);
        G->norm_glu->rmsnorm_backward(ddinp, dgw, ddy, dx, dw, (real *)drstd, N, C);
    }
    cmp_bf16("backward dinp", ddinp, dinp, n, TOL_GRAD);
    cmp_f32("backward dw (x2, accumulated, fp32)", dgw, gw, C, TOL_F32);
    G->free(dx), G->free(dw), G->free(dout), G->free(drstd), G->free(ddy), G->free(ddinp), G->free(dgw);
    free(x), free(w), free(out), free(rstd), free(dy), free(dinp), free(gw);
}

// the optional fused ops: residual add + RMSNorm forward, RMSNorm backward into the
// residual gradient, against add + rmsnorm on the CPU. Outputs poisoned; dres and dw start
// from random values (+=), twice; then the same bits from the same state.
static void test_add_rmsnorm(int N, int C) {
    if (!G->norm_glu->add_rmsnorm_forward || !G->norm_glu->rmsnorm_backward_add) {
        printf("add+rmsnorm: fused ops not in the table (HYBRID_CUDA_NO_FUSE)\n");
        return;
    }
    printf("add+rmsnorm fused N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 2, 0.3f), *y = host_rand(n, 1, 0), *w = host_rand(C, 0.5f, 1);
    float *res = xmalloc(sizeof(float) * n), *out = xmalloc(sizeof(float) * n), *rstd = xmalloc(sizeof(float) * N);
    cpu_add_forward(res, x, y, n);
    for (size_t i = 0; i < n; i++) res[i] = bf16_round(res[i]);  // the stored (bf16) sum is what is normalized
    cpu_rmsnorm_forward(out, rstd, res, w, N, C, 1e-5f);
    void *dx = dev_bf16(x, n), *dy = dev_bf16(y, n), *dw = dev_bf16(w, C), *dres = dev_bf16(NULL, n);
    void *dout = dev_bf16(NULL, n);
    float *drstd = dev_f32(NULL, N);
    poison_bf16(dres, n);
    poison_bf16(dout, n);
    poison_f32(drstd, N);
    G->norm_glu->add_rmsnorm_forward(dres, dout, (real *)drstd, dx, dy, dw, N, C, 1e-5f);
    cmp_bf16("forward residual (a + b)", dres, res, n, TOL_OUT);
    cmp_bf16("forward out", dout, out, n, TOL_OUT);
    cmp_f32("forward rstd (fp32)", drstd, rstd, N, TOL_F32);

    float *gout = host_rand(n, 1, 0), *g0 = host_rand(n, 1, 0), *gw0 = host_rand(C, 1, 0);
    float *dinp = xmalloc(sizeof(float) * n), *acc = host_dup(g0, n), *gw = host_dup(gw0, C);
    void *dgout = dev_bf16(gout, n), *dacc = dev_bf16(g0, n);
    float *dgw = dev_f32(gw0, C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_rmsnorm_backward(dinp, gw, gout, res, w, rstd, N, C);
        cpu_add_inplace(acc, dinp, n);
        G->norm_glu->rmsnorm_backward_add(dacc, dgw, dgout, dres, dw, (real *)drstd, N, C);
    }
    expect("backward dres += dinp (x2)", err_bf16_added(dacc, g0, acc, n), TOL_GRAD);
    expect("backward dw (x2, accumulated, fp32)", err_f32_added(dgw, gw0, gw, C), TOL_F32);
    // deterministic (dw's fixed-order reduction included)
    void *sacc = dev_clone_bf16(dacc, n);
    float *sgw = dev_clone_f32(dgw, C);
    G->norm_glu->rmsnorm_backward_add(dacc, dgw, dgout, dres, dw, (real *)drstd, N, C);
    G->norm_glu->rmsnorm_backward_add(sacc, sgw, dgout, dres, dw, (real *)drstd, N, C);
    CHECK(same_bf16(dacc, sacc, n) && same_f32(dgw, sgw, C),
          "rmsnorm_backward_add: two identical calls gave different dres/dw bits");
    G->free(dx), G->free(dy), G->free(dw), G->free(dres), G->free(dout), G->free(drstd), G->free(dgout);
    G->free(dacc), G->free(dgw), G->free(sacc), G->free(sgw);
    free(x), free(y), free(w), free(res), free(out), free(rstd), free(gout), free(g0), free(gw0), free(dinp);
    free(acc), free(gw);
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
    poison_bf16(dout, no);
    poison_bf16(ddx, ni);
    G->norm_glu->glu_forward(dout, dxin, N, H, act);
    G->norm_glu->glu_backward(ddx, ddy, dxin, N, H, act);
    cmp_bf16("forward", dout, out, no, TOL_OUT);
    cmp_bf16("backward", ddx, dx, ni, TOL_GRAD);
    if (H % 8 == 0) {
        // the same op on buffers shifted by one element (2 bytes: not 16-byte aligned) takes
        // the scalar kernels; they share the per-element math, so the bits must be equal
        float *xs = xmalloc(sizeof(float) * (ni + 1)), *dys = xmalloc(sizeof(float) * (no + 1));
        xs[0] = dys[0] = 0.f;
        memcpy(xs + 1, x, sizeof(float) * ni);
        memcpy(dys + 1, dy, sizeof(float) * no);
        void *sx = dev_bf16(xs, ni + 1), *sdy = dev_bf16(dys, no + 1), *so = dev_bf16(NULL, no + 1),
             *sdx = dev_bf16(NULL, ni + 1);
        poison_bf16(so, no + 1);
        poison_bf16(sdx, ni + 1);
        G->norm_glu->glu_forward((real *)((char *)so + 2), (const real *)((char *)sx + 2), N, H, act);
        G->norm_glu->glu_backward((real *)((char *)sdx + 2), (const real *)((char *)sdy + 2),
                                  (const real *)((char *)sx + 2), N, H, act);
        float *vo = get_bf16(dout, no), *vdx = get_bf16(ddx, ni), *oo = get_bf16(so, no + 1), *odx = get_bf16(sdx, ni + 1);
        CHECK(!memcmp(vo, oo + 1, sizeof(float) * no) && !memcmp(vdx, odx + 1, sizeof(float) * ni),
              "glu kind %d N %d H %d: the vector kernels' bits differ from the scalar kernels'", kind, N, H);
        G->free(sx), G->free(sdy), G->free(so), G->free(sdx);
        free(xs), free(dys), free(vo), free(vdx), free(oo), free(odx);
    }
    G->free(dxin), G->free(ddy), G->free(dout), G->free(ddx);
    free(x), free(dy), free(out), free(dx);
}

int main(void) {
    gpu_test_init("test_norm_glu");
#ifdef HYBRID_CUDA_EMU
    // the CPU emulator (tests/cuda_emu/): small shapes (C 256: the vectorized kernels)
    test_rmsnorm(64, 256);
    test_rmsnorm(50, 200);  // generic path
    test_add_rmsnorm(64, 256);
    test_add_rmsnorm(50, 200);  // generic path (the separate add, then the norm)
    // the other widths of the vectorized kernels (one template instance each; check_launch_limits)
    for (int c = 512; c <= 1024; c += 256) {
        test_rmsnorm(24, c);
        test_add_rmsnorm(24, c);
    }
    test_glu(64, 128, 0);  // the vector kernels (H % 8 == 0), checked against the scalar ones too
    test_glu(64, 128, 1);
    test_glu(64, 100, 1);  // the scalar kernels
    test_glu(64, 100, 0);
#else
    const int N = 4 * 1024, C = 768;
    test_rmsnorm(N, C);
    test_add_rmsnorm(N, C);
    test_add_rmsnorm(1000, 200);  // generic path (the separate add, then the norm)
    test_glu(N, 1024, 0);
    test_glu(N, 1024, 1);
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
