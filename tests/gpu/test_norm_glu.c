// GPU parity tests of the norm_glu family (model/ops/norm_glu/norm_glu.h; kernels/norm_glu/):
// RMSNorm forward/backward and the gated linear units (SwiGLU, SiTU) against the float CPU
// reference on fresh random inputs at GPT-2 124M sizes (N = 4096 rows, C = 768, H = 1024).
// Method and helpers: tests/gpu/harness.h (bf16-rounded inputs, NaN-poisoned outputs,
// parameter gradients accumulated twice from zero, RMS relative error). Tolerances: bf16
// outputs TOL_OUT 5e-3, bf16 gradients TOL_GRAD 8e-3, fp32 rstd TOL_F32 1e-4.
#include <stdio.h>
#include <stdlib.h>

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
    void *ddy = dev_bf16(dy, n), *ddinp = dev_bf16(NULL, n), *dgw = dev_bf16(NULL, C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_rmsnorm_backward(dinp, gw, dy, x, w, rstd, N, C);
        poison_bf16(ddinp, n);
        G->norm_glu->rmsnorm_backward(ddinp, dgw, ddy, dx, dw, (real *)drstd, N, C);
    }
    cmp_bf16("backward dinp", ddinp, dinp, n, TOL_GRAD);
    cmp_bf16("backward dw (x2, accumulated)", dgw, gw, C, TOL_GRAD);
    G->free(dx), G->free(dw), G->free(dout), G->free(drstd), G->free(ddy), G->free(ddinp), G->free(dgw);
    free(x), free(w), free(out), free(rstd), free(dy), free(dinp), free(gw);
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
    G->free(dxin), G->free(ddy), G->free(dout), G->free(ddx);
    free(x), free(dy), free(out), free(dx);
}

int main(void) {
    gpu_test_init("test_norm_glu");
#ifdef HYBRID_CUDA_EMU
    // the CPU emulator (tests/cuda_emu/): small shapes (C 256: the vectorized kernels)
    test_rmsnorm(64, 256);
    test_rmsnorm(50, 200);  // generic path
    test_glu(64, 128, 0);
    test_glu(64, 100, 1);
#else
    const int N = 4 * 1024, C = 768;
    test_rmsnorm(N, C);
    test_glu(N, 1024, 0);
    test_glu(N, 1024, 1);
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
