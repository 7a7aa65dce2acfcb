// GPU parity tests of the core family (model/ops/core/core.h; kernels/core/): every
// CUDA op against the float CPU reference on fresh random inputs at realistic sizes
// (B=4, T=1024, C=768, NH=12, V=50257, Vp=50304), plus odd shapes for the generic paths.
// Method and helpers: tests/gpu/harness.h (bf16-rounded inputs, NaN-poisoned outputs,
// parameter gradients accumulated twice from zero, RMS relative error). Tolerances:
// bf16 outputs TOL_OUT 5e-3, bf16 (input) gradients TOL_GRAD 8e-3, fp32 statistics, losses
// and sums TOL_F32 1e-4. The parameter gradients are fp32 (model/backend.h, grad_size): those
// the op sums from bf16 inputs without rounding on the way are held to TOL_F32 (a bf16
// rounding of the gradient would fail it); those that sum an intermediate the kernel stores
// in bf16 (dsum: the stored residual gradient; dpre_bias: the stored dpre) to TOL_GRAD against
// the float reference, and to TOL_F32 against the same sums of the kernel's own stored values
// (dpre_bias where the column-sum kernel runs: the epilogue sums dpre before its rounding).
// Checked: embed, layernorm, the fused add + layernorm, matmul (and
// the plan cache over 300 shapes, and bit-identical repeated backwards), the
// input-gradient-accumulating matmul_backward_acc, the fused matmul + GELU (the up
// projection's bias gradient both ways: column-sum kernel and DGELU_BGRAD epilogue),
// attention forward/backward (bit-identical repeated backwards; our kernels, then cuDNN's
// where the build has it), attention_cached (decode) against the CPU and against the CUDA
// full forward's rows, GELU, add, scale, sum, sum_squares, cross-entropy, separate and
// fused (crossentropy_forward_backward).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "model/backend.h"
#include "tests/testing.h"
#include "tests/gpu/harness.h"

static void test_embed(int B, int T, int C, int V, int Vp) {
    printf("embed B=%d T=%d C=%d V=%d\n", B, T, C, V);
    size_t N = (size_t)B * T;
    float *wte = host_rand((size_t)Vp * C, 1, 0), *wpe = host_rand((size_t)T * C, 1, 0);
    int *tok = rand_tokens(N, V, 1);
    float *out = xmalloc(sizeof(float) * N * C);
    cpu_embed_forward(out, tok, wte, wpe, B, T, C);
    void *dwte_w = dev_bf16(wte, (size_t)Vp * C), *dwpe_w = dev_bf16(wpe, (size_t)T * C), *dout_d = dev_bf16(NULL, N * C);
    int *dtok = dev_tokens(tok, N);
    poison_bf16(dout_d, N * C);
    G->core->embed_forward(dout_d, dtok, dwte_w, dwpe_w, B, T, C);
    cmp_bf16("embed_forward out", dout_d, out, N * C, TOL_OUT);

    float *dout = host_rand(N * C, 1, 0);
    float *gte = calloc((size_t)Vp * C, sizeof(float)), *gpe = calloc((size_t)T * C, sizeof(float));
    void *d_dout = dev_bf16(dout, N * C);
    float *d_gte = dev_f32(NULL, (size_t)Vp * C), *d_gpe = dev_f32(NULL, (size_t)T * C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_embed_backward(gte, gpe, dout, tok, B, T, C);
        G->core->embed_backward(d_gte, d_gpe, d_dout, dtok, B, T, C);
    }
    cmp_f32("embed_backward dwte (x2, accumulated, fp32)", d_gte, gte, (size_t)Vp * C, TOL_F32);
    cmp_f32("embed_backward dwpe (x2, accumulated, fp32)", d_gpe, gpe, (size_t)T * C, TOL_F32);
    G->free(dwte_w);
    G->free(dwpe_w);
    G->free(dout_d);
    G->free(dtok);
    G->free(d_dout);
    G->free(d_gte);
    G->free(d_gpe);
    free(wte), free(wpe), free(tok), free(out), free(dout), free(gte), free(gpe);
}

static void test_layernorm(int N, int C) {
    printf("layernorm N=%d C=%d\n", N, C);
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 2, 0.3f), *w = host_rand(C, 0.5f, 1), *b = host_rand(C, 0.5f, 0);
    float *out = xmalloc(sizeof(float) * n), *mean = xmalloc(sizeof(float) * N), *rstd = xmalloc(sizeof(float) * N);
    cpu_layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    void *dx = dev_bf16(x, n), *dw = dev_bf16(w, C), *db = dev_bf16(b, C), *dout = dev_bf16(NULL, n);
    float *dmean = dev_f32(NULL, N), *drstd = dev_f32(NULL, N);
    poison_bf16(dout, n);
    poison_f32(dmean, N);
    poison_f32(drstd, N);
    G->core->layernorm_forward(dout, (real *)dmean, (real *)drstd, dx, dw, db, N, C, 1e-5f);
    cmp_bf16("forward out", dout, out, n, TOL_OUT);
    cmp_f32("forward mean (fp32)", dmean, mean, N, TOL_F32);
    cmp_f32("forward rstd (fp32)", drstd, rstd, N, TOL_F32);

    float *dy = host_rand(n, 1, 0), *dinp = xmalloc(sizeof(float) * n);
    float *gw = calloc(C, sizeof(float)), *gb = calloc(C, sizeof(float));
    void *ddy = dev_bf16(dy, n), *ddinp = dev_bf16(NULL, n);
    float *dgw = dev_f32(NULL, C), *dgb = dev_f32(NULL, C);
    for (int rep = 0; rep < 2; rep++) {
        cpu_layernorm_backward(dinp, gw, gb, dy, x, w, mean, rstd, N, C);
        poison_bf16(ddinp, n);
        G->core->layernorm_backward(ddinp, dgw, dgb, ddy, dx, dw, (real *)dmean, (real *)drstd, N, C);
    }
    cmp_bf16("backward dinp", ddinp, dinp, n, TOL_GRAD);
    cmp_f32("backward dw (x2, accumulated, fp32)", dgw, gw, C, TOL_F32);
    cmp_f32("backward db (x2, accumulated, fp32)", dgb, gb, C, TOL_F32);
    G->free(dx), G->free(dw), G->free(db), G->free(dout), G->free(dmean), G->free(drstd);
    G->free(ddy), G->free(ddinp), G->free(dgw), G->free(dgb);
    free(x), free(w), free(b), free(out), free(mean), free(rstd), free(dy), free(dinp), free(gw), free(gb);
}

// acc[c] += the sum (in double, rows in order) of column c of x (N rows, C columns, host): the
// references of the column-sum bias gradients (a bias gradient of a whole call, added once)
static void add_column_sums(float *acc, const float *x, int N, int C) {
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int i = 0; i < N; i++) s += x[(size_t)i * C + c];
        acc[c] += (float)s;
    }
}

// the optional fused ops: residual add + LayerNorm forward, LayerNorm backward into the
// residual gradient, against add + layernorm on the CPU; with_sum: the backward also sums
// the updated residual gradient's columns into dsum (the next linear layer's dbias)
static void test_add_norm(int N, int C, int with_sum) {
    if (!G->core->add_layernorm_forward || !G->core->layernorm_backward_add) {
        printf("add+layernorm: fused ops not in the table (HYBRID_CUDA_NO_FUSE)\n");
        return;
    }
    printf("add+layernorm fused N=%d C=%d%s\n", N, C, with_sum ? " +dsum" : "");
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
    poison_bf16(dres, n);
    poison_bf16(dout, n);
    poison_f32(dmean, N);
    poison_f32(drstd, N);
    G->core->add_layernorm_forward(dres, dout, (real *)dmean, (real *)drstd, dx, dy, dw, db, N, C, 1e-5f);
    cmp_bf16("forward residual (a + b)", dres, res, n, TOL_OUT);
    cmp_bf16("forward out", dout, out, n, TOL_OUT);
    cmp_f32("forward mean (fp32)", dmean, mean, N, TOL_F32);
    cmp_f32("forward rstd (fp32)", drstd, rstd, N, TOL_F32);

    // backward: dres (random start) += dinp, twice; dw, db (and dsum) accumulated twice from zero
    float *gout = host_rand(n, 1, 0), *g0 = host_rand(n, 1, 0), *dinp = xmalloc(sizeof(float) * n);
    float *acc = host_dup(g0, n), *gw = calloc(C, sizeof(float)), *gb = calloc(C, sizeof(float));
    float *gs = calloc(C, sizeof(float)), *gs_own = calloc(C, sizeof(float));
    void *dgout = dev_bf16(gout, n), *dacc = dev_bf16(g0, n);
    float *dgw = dev_f32(NULL, C), *dgb = dev_f32(NULL, C), *dgs = with_sum ? dev_f32(NULL, C) : NULL;
    for (int rep = 0; rep < 2; rep++) {
        cpu_layernorm_backward(dinp, gw, gb, gout, res, w, mean, rstd, N, C);
        cpu_add_inplace(acc, dinp, n);
        for (int i = 0; i < N; i++)  // dsum += sum_rows of the updated dres
            for (int c = 0; c < C; c++) gs[c] += acc[(size_t)i * C + c];
        G->core->layernorm_backward_add(dacc, dgw, dgb, dgs, dgout, dres, dw, (real *)dmean, (real *)drstd, N, C);
        if (with_sum) {  // the same sums of the kernel's own stored (bf16) dres, in double
            float *own = get_bf16(dacc, n);
            add_column_sums(gs_own, own, N, C);
            free(own);
        }
    }
    expect("backward dres += dinp (x2)", err_bf16_added(dacc, g0, acc, n), TOL_GRAD);  // the part the op added
    cmp_f32("backward dw (x2, accumulated, fp32)", dgw, gw, C, TOL_F32);
    cmp_f32("backward db (x2, accumulated, fp32)", dgb, gb, C, TOL_F32);
    if (with_sum) {
        // fp32, but the sums of the stored (bf16) dres, which the reference does not round
        cmp_f32("backward dsum = column sums of dres (x2, accumulated, fp32)", dgs, gs, C, TOL_GRAD);
        // and of the dres it stored, summed in fp32: an fp32 bar (a bf16 rounding of the sum fails it)
        cmp_f32("backward dsum = column sums of its own dres (fp32)", dgs, gs_own, C, TOL_F32);
        // deterministic: the same call from the same state gives the same bits, and the
        // residual gradient is the one the call without dsum makes
        void *acc2 = dev_clone_bf16(dacc, n), *acc3 = dev_clone_bf16(dacc, n);
        float *gw2 = dev_clone_f32(dgw, C), *gb2 = dev_clone_f32(dgb, C), *gs2 = dev_clone_f32(dgs, C);
        G->core->layernorm_backward_add(dacc, dgw, dgb, dgs, dgout, dres, dw, (real *)dmean, (real *)drstd, N, C);
        G->core->layernorm_backward_add(acc2, gw2, gb2, gs2, dgout, dres, dw, (real *)dmean, (real *)drstd, N, C);
        CHECK(same_bf16(dacc, acc2, n) && same_f32(dgw, gw2, C) && same_f32(dgb, gb2, C) && same_f32(dgs, gs2, C),
              "layernorm_backward_add with dsum: two identical calls gave different bits");
        G->core->layernorm_backward_add(acc3, gw2, gb2, NULL, dgout, dres, dw, (real *)dmean, (real *)drstd, N, C);
        CHECK(same_bf16(dacc, acc3, n), "layernorm_backward_add: dres differs with and without dsum");
        G->free(acc2), G->free(gw2), G->free(gb2), G->free(gs2), G->free(acc3);
        G->free(dgs);
    }
    G->free(dx), G->free(dy), G->free(dw), G->free(db), G->free(dres), G->free(dout), G->free(dmean);
    G->free(drstd), G->free(dgout), G->free(dacc), G->free(dgw), G->free(dgb);
    free(x), free(y), free(w), free(b), free(res), free(out), free(mean), free(rstd), free(gout), free(g0);
    free(dinp), free(acc), free(gw), free(gb), free(gs), free(gs_own);
}

static void test_matmul(int N, int C, int OC, int with_bias) {
    printf("matmul N=%d C=%d OC=%d%s\n", N, C, OC, with_bias ? " +bias" : "");
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    float *x = host_rand(ni, 1, 0), *w = host_rand(nw, 1.f / sqrtf((float)C), 0), *bias = host_rand(OC, 0.5f, 0);
    float *out = xmalloc(sizeof(float) * no);
    cpu_matmul_forward(out, x, w, with_bias ? bias : NULL, N, C, OC);
    void *dx = dev_bf16(x, ni), *dw = dev_bf16(w, nw), *dbias = dev_bf16(bias, OC), *dout = dev_bf16(NULL, no);
    poison_bf16(dout, no);
    G->core->matmul_forward(dout, dx, dw, with_bias ? dbias : NULL, N, C, OC);
    cmp_bf16("forward out", dout, out, no, TOL_OUT);

    float *dy = host_rand(no, 1, 0), *dinp = xmalloc(sizeof(float) * ni);
    float *gw = calloc(nw, sizeof(float)), *gb = calloc(OC, sizeof(float));
    void *ddy = dev_bf16(dy, no), *ddinp = dev_bf16(NULL, ni);
    float *dgw = dev_f32(NULL, nw), *dgb = dev_f32(NULL, OC);
    for (int rep = 0; rep < 2; rep++) {
        cpu_matmul_backward(dinp, gw, with_bias ? gb : NULL, dy, x, w, N, C, OC);
        poison_bf16(ddinp, ni);
        G->core->matmul_backward(ddinp, dgw, with_bias ? dgb : NULL, ddy, dx, dw, N, C, OC);
    }
    cmp_bf16("backward dinp", ddinp, dinp, ni, TOL_GRAD);
    cmp_f32("backward dw (x2, accumulated, fp32)", dgw, gw, nw, TOL_F32);
    if (with_bias) {
        cmp_f32("backward dbias (x2, accumulated, fp32)", dgb, gb, OC, TOL_F32);
        // deterministic: the same call from the same state gives the same bits
        float *sgb = dev_clone_f32(dgb, OC), *sgw = dev_clone_f32(dgw, nw);
        G->core->matmul_backward(ddinp, dgw, dgb, ddy, dx, dw, N, C, OC);
        G->core->matmul_backward(ddinp, sgw, sgb, ddy, dx, dw, N, C, OC);
        CHECK(same_f32(dgb, sgb, OC) && same_f32(dgw, sgw, nw),
              "matmul backward: two identical calls gave different dw/dbias bits");
        G->free(sgb), G->free(sgw);
    }
    G->free(dx), G->free(dw), G->free(dbias), G->free(dout), G->free(ddy), G->free(ddinp), G->free(dgw), G->free(dgb);
    free(x), free(w), free(bias), free(out), free(dy), free(dinp), free(gw), free(gb);
}

// the optional fused op matmul_backward_acc: dinp += dout @ w (dinp starting from random
// values), dw and dbias (fp32) accumulated onto random values too, twice, against
// matmul_backward + add_inplace on the CPU; then the same bits from the same state
static void test_matmul_acc(int N, int C, int OC, int with_bias) {
    if (!G->core->matmul_backward_acc) {
        printf("matmul_backward_acc: fused op not in the table (HYBRID_CUDA_NO_FUSE)\n");
        return;
    }
    printf("matmul_backward_acc N=%d C=%d OC=%d%s\n", N, C, OC, with_bias ? " +bias" : "");
    size_t ni = (size_t)N * C, no = (size_t)N * OC, nw = (size_t)OC * C;
    // w scaled by the backward's fan-in (OC) and the starting dinp by half, so that what the
    // op adds is as large as what was there whatever OC (else the bf16 rounding of the
    // accumulator, not the op, would dominate the error of the part added)
    float *x = host_rand(ni, 1, 0), *w = host_rand(nw, 1.f / sqrtf((float)OC), 0), *dy = host_rand(no, 1, 0);
    float *g0 = host_rand(ni, 0.5f, 0), *gw0 = host_rand(nw, 1, 0), *gb0 = host_rand(OC, 1, 0);
    float *acc = host_dup(g0, ni), *gw = host_dup(gw0, nw), *gb = host_dup(gb0, OC), *dinp = xmalloc(sizeof(float) * ni);
    void *dx = dev_bf16(x, ni), *dw = dev_bf16(w, nw), *ddy = dev_bf16(dy, no);
    void *dacc = dev_bf16(g0, ni);
    float *dgw = dev_f32(gw0, nw), *dgb = dev_f32(gb0, OC);
    for (int rep = 0; rep < 2; rep++) {
        cpu_matmul_backward(dinp, gw, with_bias ? gb : NULL, dy, x, w, N, C, OC);
        cpu_add_inplace(acc, dinp, ni);
        G->core->matmul_backward_acc(dacc, dgw, with_bias ? dgb : NULL, ddy, dx, dw, N, C, OC);
    }
    expect("backward dinp += dout w (x2)", err_bf16_added(dacc, g0, acc, ni), TOL_GRAD);
    expect("backward dw (x2, accumulated, fp32)", err_f32_added(dgw, gw0, gw, nw), TOL_F32);
    if (with_bias) expect("backward dbias (x2, accumulated, fp32)", err_f32_added(dgb, gb0, gb, OC), TOL_F32);
    // deterministic: the same call from the same state gives the same bits
    void *sacc = dev_clone_bf16(dacc, ni);
    float *sgw = dev_clone_f32(dgw, nw);
    G->core->matmul_backward_acc(dacc, dgw, NULL, ddy, dx, dw, N, C, OC);
    G->core->matmul_backward_acc(sacc, sgw, NULL, ddy, dx, dw, N, C, OC);
    CHECK(same_bf16(dacc, sacc, ni) && same_f32(dgw, sgw, nw),
          "matmul_backward_acc: two identical calls gave different dinp/dw bits");
    G->free(dx), G->free(dw), G->free(ddy), G->free(dacc), G->free(dgw), G->free(dgb), G->free(sacc), G->free(sgw);
    free(x), free(w), free(dy), free(g0), free(gw0), free(gb0), free(acc), free(gw), free(gb), free(dinp);
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

// the optional fused ops (GELU in the GEMM epilogues) against matmul + gelu on the CPU. The
// backward also sums dpre's columns into the up projection's bias gradient (dpre_bias), both
// ways: the column-sum kernel and cuBLASLt's DGELU_BGRAD epilogue (cuda_matmul_set_dgelu_bgrad;
// HYBRID_CUDA_DGELU_BGRAD in a run); parameter gradients twice from zero each way, then two
// identical calls from the same state must give the same bits.
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
    poison_bf16(dpre, no);
    poison_bf16(dact, no);
    G->core->matmul_gelu_forward(dact, dpre, dx, dw, db, N, C, OC);
    cmp_bf16("forward pre-activation", dpre, pre, no, TOL_OUT);
    cmp_bf16("forward gelu", dact, act, no, TOL_OUT);
    // the next layer: (N, OC) -> (N, C2) with weights w2; backward through it and the GELU
    const int C2 = C;
    size_t n2 = (size_t)N * C2, nw2 = (size_t)C2 * OC;
    float *w2 = host_rand(nw2, 1.f / sqrtf((float)OC), 0), *dy = host_rand(n2, 1, 0);
    float *pre_b = get_bf16(dpre, no), *act_b = get_bf16(dact, no);  // the GPU's own activations
    float *dact_ref = xmalloc(sizeof(float) * no), *dpre_ref = xmalloc(sizeof(float) * no);
    float *gw2 = calloc(nw2, sizeof(float)), *gb2 = calloc(C2, sizeof(float)), *gbp = calloc(OC, sizeof(float));
    for (int rep = 0; rep < 2; rep++) cpu_matmul_backward(dact_ref, gw2, gb2, dy, act_b, w2, N, OC, C2);
    cpu_gelu_backward(dpre_ref, pre_b, dact_ref, no);
    // the up projection's bias gradient, twice: cpu_matmul_backward's column sums (double
    // over the rows in order, added to the gradient once)
    for (int rep = 0; rep < 2; rep++) add_column_sums(gbp, dpre_ref, N, OC);
    void *dw2 = dev_bf16(w2, nw2), *ddy = dev_bf16(dy, n2), *ddpre = dev_bf16(NULL, no);
    for (int bgrad = 0; bgrad < 2; bgrad++) {
        cuda_matmul_set_dgelu_bgrad(bgrad);
        float *dgw2 = dev_f32(NULL, nw2), *dgb2 = dev_f32(NULL, C2), *dgbp = dev_f32(NULL, OC);
        for (int rep = 0; rep < 2; rep++) {
            poison_bf16(ddpre, no);
            G->core->matmul_backward_gelu(ddpre, dgw2, dgb2, dgbp, ddy, dact, dw2, dpre, N, OC, C2);
        }
        const int path = cuda_matmul_dgelu_bgrad_path();
        const char *how = path == 1 ? "DGELU_BGRAD epilogue, fp32 sums" : "column-sum kernel";
        printf("  dpre_bias by the %s%s\n", how, bgrad && !path ? " (cuBLASLt has no DGELU_BGRAD plan here)" : "");
        // switched off: the kernel; on: the epilogue where cuBLASLt has a plan for it (the
        // emulator always, with fp32 sums)
        CHECK(bgrad || path == 0, "matmul_backward_gelu: the epilogue ran while switched off");
        CHECK(path == 0 || path == 1, "matmul_backward_gelu: no dpre_bias path recorded");
#ifdef HYBRID_CUDA_EMU
        CHECK(!bgrad || path == 1, "emulator: DGELU_BGRAD switched on did not take the epilogue's fp32 sums");
#endif
        cmp_bf16("backward dpre (dGELU epilogue)", ddpre, dpre_ref, no, TOL_GRAD);
        cmp_f32("backward dw (x2, accumulated, fp32)", dgw2, gw2, nw2, TOL_F32);
        cmp_f32("backward dbias (x2, accumulated, fp32)", dgb2, gb2, C2, TOL_F32);
        // fp32; the reference sums dpre unrounded: the kernel sums the stored bf16 dpre, the
        // epilogue dpre's fp32 values before their rounding (closer)
        cmp_f32(bgrad ? "backward dpre_bias (x2, DGELU_BGRAD, fp32)"
                      : "backward dpre_bias (x2, column sums, fp32)",
                dgbp, gbp, OC, TOL_GRAD);
        if (path == 0) {  // the kernel's sums of the dpre it stored (the same both reps), to an fp32 bar
            float *own = get_bf16(ddpre, no), *gbp_own = calloc(OC, sizeof(float));
            for (int rep = 0; rep < 2; rep++) add_column_sums(gbp_own, own, N, OC);
            cmp_f32("backward dpre_bias = sums of its own dpre (fp32)", dgbp, gbp_own, OC, TOL_F32);
            free(own), free(gbp_own);
        }
        // deterministic: the same call from the same state gives the same bits
        float *sgbp = dev_clone_f32(dgbp, OC), *sgw2 = dev_clone_f32(dgw2, nw2), *sgb2 = dev_clone_f32(dgb2, C2);
        void *sdpre = dev_bf16(NULL, no);
        G->core->matmul_backward_gelu(ddpre, dgw2, dgb2, dgbp, ddy, dact, dw2, dpre, N, OC, C2);
        G->core->matmul_backward_gelu(sdpre, sgw2, sgb2, sgbp, ddy, dact, dw2, dpre, N, OC, C2);
        CHECK(same_f32(dgbp, sgbp, OC) && same_f32(dgw2, sgw2, nw2) && same_f32(dgb2, sgb2, C2) &&
                  same_bf16(ddpre, sdpre, no),
              "matmul_backward_gelu: two identical calls gave different bits");
        G->free(dgw2), G->free(dgb2), G->free(dgbp), G->free(sgbp), G->free(sgw2), G->free(sgb2), G->free(sdpre);
    }
    cuda_matmul_set_dgelu_bgrad(-1);
    G->free(dx), G->free(dw), G->free(db), G->free(dpre), G->free(dact), G->free(dw2), G->free(ddy), G->free(ddpre);
    free(x), free(w), free(bias), free(pre), free(act), free(w2), free(dy), free(pre_b), free(act_b), free(dact_ref);
    free(dpre_ref), free(gw2), free(gb2), free(gbp);
}

static void test_attention(int B, int T, int C, int NH) {
    printf("attention B=%d T=%d C=%d NH=%d (head size %d)\n", B, T, C, NH, C / NH);
    size_t N = (size_t)B * T, nq = N * 3 * C, no = N * C, nl = (size_t)B * NH * T;
    float *qkv = host_rand(nq, 1.5f, 0), *out = xmalloc(sizeof(float) * no), *lse = xmalloc(sizeof(float) * nl);
    cpu_attention_forward(out, lse, qkv, B, T, C, NH);
    void *dqkv_in = dev_bf16(qkv, nq), *dout = dev_bf16(NULL, no);
    float *dlse = dev_f32(NULL, nl);
    poison_bf16(dout, no);
    poison_f32(dlse, nl);
    G->core->attention_forward(dout, (real *)dlse, dqkv_in, B, T, C, NH);
    cmp_bf16("forward out", dout, out, no, TOL_OUT);
    cmp_f32("forward lse (fp32)", dlse, lse, nl, TOL_F32);

    float *dy = host_rand(no, 1, 0), *dqkv = xmalloc(sizeof(float) * nq);
    cpu_attention_backward(dqkv, dy, qkv, out, lse, B, T, C, NH);
    void *ddy = dev_bf16(dy, no), *ddqkv = dev_bf16(NULL, nq);
    poison_bf16(ddqkv, nq);
    G->core->attention_backward(ddqkv, ddy, dqkv_in, dout, (real *)dlse, B, T, C, NH);
    float *got = get_bf16(ddqkv, nq);
    // deterministic: a second call from the same inputs writes the same bits
    poison_bf16(ddqkv, nq);
    G->core->attention_backward(ddqkv, ddy, dqkv_in, dout, (real *)dlse, B, T, C, NH);
    float *again = get_bf16(ddqkv, nq);
    CHECK(!memcmp(got, again, sizeof(float) * nq), "attention backward: two identical calls gave different bits");
    free(again);
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

// test_attention with our kernels, then (a build with cuDNN) with cuDNN's flash attention
// (HYBRID_ATTN=cudnn; kernels/core/attention_cudnn.cu), which must have run for head size 64
// (the GPT-2 shapes; other shapes may fall back to our kernels, said on stderr)
static void test_attention_impls(int B, int T, int C, int NH) {
    cuda_attention_set_cudnn(0);
    test_attention(B, T, C, NH);
    if (!cuda_attention_cudnn_built()) {
        static int said;
        if (!said++) printf("attention (cuDNN): skipped: this build has no cuDNN (the CPU emulator, or no cudnn.h)\n");
        return;
    }
    printf("  with cuDNN (HYBRID_ATTN=cudnn):\n");
    cuda_attention_set_cudnn(1);
    long runs = cuda_attention_cudnn_runs();
    test_attention(B, T, C, NH);
    runs = cuda_attention_cudnn_runs() - runs;
    printf("  cuDNN ran %ld of the 3 attention calls\n", runs);
    if (C / NH == 64) CHECK(runs == 3, "cuDNN attention did not run for head size 64 (B=%d T=%d C=%d NH=%d)", B, T, C, NH);
    cuda_attention_set_cudnn(-1);
}

// Decode-time attention: the last Tq rows of a KV cache of Tc packed qkv rows (one
// sequence) against the CPU, and against the same rows of the CUDA full forward over the
// same qkv (B = 1, T = Tc). The output buffer has one row more than the op writes: that
// row must stay NaN.
static void test_attention_cached(int Tq, int Tc, int C, int NH) {
    printf("attention_cached Tq=%d Tc=%d C=%d NH=%d (head size %d)\n", Tq, Tc, C, NH, C / NH);
    size_t nq = (size_t)Tc * 3 * C, no = (size_t)Tq * C, nf = (size_t)Tc * C, nl = (size_t)NH * Tc;
    float *qkv = host_rand(nq, 1.5f, 0), *out = xmalloc(sizeof(float) * no);
    cpu_attention_cached(out, qkv, Tq, Tc, C, NH);
    void *dqkv = dev_bf16(qkv, nq), *dout = dev_bf16(NULL, no + C);
    poison_bf16(dout, no + C);
    G->core->attention_cached(dout, dqkv, Tq, Tc, C, NH);
    float *got = get_bf16(dout, no + C);
    expect("out vs CPU", rel_rms(got, out, no), TOL_OUT);
    int outside = 0;
    for (int c = 0; c < C; c++) outside += !isnan(got[no + c]);
    CHECK(outside == 0, "attention_cached wrote %d elements past its %d output rows", outside, Tq);

    void *dfull = dev_bf16(NULL, nf);
    float *dlse = dev_f32(NULL, nl);
    poison_bf16(dfull, nf);
    poison_f32(dlse, nl);
    G->core->attention_forward(dfull, (real *)dlse, dqkv, 1, Tc, C, NH);
    float *full = get_bf16(dfull, nf);
    expect("out vs attention_forward's last Tq rows (CUDA)", rel_rms(got, full + (size_t)(Tc - Tq) * C, no), TOL_OUT);
    G->free(dqkv), G->free(dout), G->free(dfull), G->free(dlse);
    free(qkv), free(out), free(got), free(full);
}

static void test_elementwise(size_t n) {
    printf("elementwise n=%zu\n", n);
    float *a = host_rand(n, 3, 0), *b = host_rand(n, 1, 0), *ref = xmalloc(sizeof(float) * n);
    void *da = dev_bf16(a, n), *db = dev_bf16(b, n), *dc = dev_bf16(NULL, n);
    cpu_gelu_forward(ref, a, n);
    poison_bf16(dc, n);
    G->core->gelu_forward(dc, da, n);
    cmp_bf16("gelu_forward", dc, ref, n, TOL_OUT);
    cpu_gelu_backward(ref, a, b, n);
    poison_bf16(dc, n);
    G->core->gelu_backward(dc, da, db, n);
    cmp_bf16("gelu_backward", dc, ref, n, TOL_GRAD);
    cpu_add_forward(ref, a, b, n);
    poison_bf16(dc, n);
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
    poison_bf16(dc, n);
    G->core->gelu_forward(dc1, da1, m);
    float *g = get_bf16(dc, n);
    expect("gelu_forward (misaligned, odd length)", rel_rms(g + 1, ref, m), TOL_OUT);
    CHECK(isnan(g[0]) && isnan(g[n - 4]), "gelu wrote outside its range");
    free(g);
    // sums: fp32 statistics and the squares of fp32 parameter gradients, against double on the host
    double s_ref = 0, ss_ref = 0;
    for (size_t i = 0; i < n; i++) {
        s_ref += b[i];
        ss_ref += (double)b[i] * b[i];
    }
    float *df = dev_f32(b, n);
    expect("sum (fp32 statistics)", fabs(G->core->sum((real *)df, n) - s_ref) / fmax(fabs(s_ref), 1e-30), TOL_F32);
    expect("sum_squares (fp32 gradients)", fabs(G->core->sum_squares((real *)df, n) - ss_ref) / ss_ref, TOL_F32);
    double ss1 = ss_ref - (double)b[0] * b[0];
    expect("sum_squares (misaligned)", fabs(G->core->sum_squares((real *)(df + 1), n - 1) - ss1) / ss1, TOL_F32);
    G->free(da), G->free(db), G->free(dc), G->free(df);
    free(a), free(b), free(ref);
}

// Zeros required by the contract that are not: padding columns, ignored rows.
static int ce_stray(const float *g, const int *tg, int N, int V, int Vp) {
    int stray = 0;
    for (int i = 0; i < N; i++)
        for (int v = 0; v < Vp; v++)
            if ((tg[i] < 0 || v >= V) && g[(size_t)i * Vp + v] != 0.f) stray++;
    return stray;
}

// The separate ops (forward, then the backward in place with the forward's statistics
// and with recomputed ones), then crossentropy_forward_backward (the training graph's
// op, on the fused kernel of kernels/core/crossentropy.cu) in place and into a poisoned buffer: against
// the CPU, and against the separate CUDA ops' bits (the same formulas). Ignored rows,
// targets on the first and the last real column, padding columns when V < Vp.
static void test_crossentropy(int N, int V, int Vp) {
    printf("crossentropy N=%d V=%d Vp=%d\n", N, V, Vp);
    size_t n = (size_t)N * Vp;
    float *z = host_rand(n, 4, 0), *loss = xmalloc(sizeof(float) * N), *dz = xmalloc(sizeof(float) * n);
    int *tg = rand_tokens(N, V, 0), count = 0;
    tg[0] = V - 1;
    if (N > 1) tg[1] = 0;
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
    poison_f32(dl, N);
    G->core->crossentropy_forward((real *)dl, dzd, dtg, N, V, Vp);
    cmp_f32("forward losses (fp32)", dl, loss, N, TOL_F32);
    G->core->crossentropy_backward(dzd, dzd, dtg, dloss, N, V, Vp);  // in place, as model_backward runs it
    float *g = get_bf16(dzd, n), *l = get_f32(dl, N);
    expect("backward dlogits (in place)", rel_rms(g, dz, n), TOL_GRAD);
    int stray = ce_stray(g, tg, N, V, Vp);
    CHECK(stray == 0, "%d padding / ignored-row gradients are not exactly 0", stray);
    G->upload(dzd, z, n);  // new contents: the forward's saved statistics no longer apply
    G->core->crossentropy_backward(dzd, dzd, dtg, dloss, N, V, Vp);
    cmp_bf16("backward dlogits (statistics recomputed)", dzd, dz, n, TOL_GRAD);

    // both at once, in place, as model_forward_train runs it, on the fused kernel (not the
    // default: kernels/core/crossentropy.cu)
    cuda_crossentropy_set_fused(1);
    G->upload(dzd, z, n);
    poison_f32(dl, N);
    G->core->crossentropy_forward_backward((real *)dl, dzd, dzd, dtg, dloss, N, V, Vp);
    cmp_f32("forward_backward losses (fp32)", dl, loss, N, TOL_F32);
    float *gf = get_bf16(dzd, n), *lf = get_f32(dl, N);
    expect("forward_backward dlogits (in place)", rel_rms(gf, dz, n), TOL_GRAD);
    stray = ce_stray(gf, tg, N, V, Vp);
    CHECK(stray == 0, "forward_backward: %d padding / ignored-row gradients are not exactly 0", stray);
    CHECK(!memcmp(lf, l, sizeof(float) * N), "forward_backward: losses differ from the separate ops' bits");
    CHECK(!memcmp(gf, g, sizeof(float) * n), "forward_backward: dlogits differ from the separate ops' bits");
    // out of place: every dlogits element written (the buffer is poisoned), the logits kept
    void *dgo = dev_bf16(NULL, n);
    G->upload(dzd, z, n);
    poison_bf16(dgo, n);
    poison_f32(dl, N);
    G->core->crossentropy_forward_backward((real *)dl, dgo, dzd, dtg, dloss, N, V, Vp);
    float *go = get_bf16(dgo, n), *zk = get_bf16(dzd, n), *lo = get_f32(dl, N);
    CHECK(!memcmp(go, g, sizeof(float) * n) && !memcmp(lo, l, sizeof(float) * N),
          "forward_backward out of place: not the separate ops' bits");
    CHECK(!memcmp(zk, z, sizeof(float) * n), "forward_backward out of place: the logits were changed");
    cuda_crossentropy_set_fused(-1);
    G->free(dzd), G->free(dtg), G->free(dl), G->free(dgo);
    free(z), free(loss), free(dz), free(tg), free(g), free(l), free(gf), free(lf), free(go), free(zk), free(lo);
}

int main(void) {
    gpu_test_init("test_core");
#ifdef HYBRID_CUDA_EMU
    // the CPU emulator (tests/cuda_emu/): small shapes, every kernel path of the GPU run
    // (C 256 for the vectorized LayerNorm, head size 64 for the tensor-core attention)
    const int B = 2, T = 128, C = 128, NH = 2, V = 500, Vp = 512, N = B * T;
    test_embed(B, T, C, V, Vp);
    test_embed(2, 16, 100, V, Vp);  // C % 8 != 0: the scalar kernel
    test_layernorm(64, 256);
    test_layernorm(50, 200);  // generic path
    test_add_norm(64, 256, 0);
    test_add_norm(300, 256, 1);  // three row chunks, the last one partial
    test_add_norm(200, 768, 1);  // GPT-2's width (three 256-column groups a lane)
    test_add_norm(50, 200, 1);   // generic path (separate kernels)
    // the other widths of the vectorized kernels (one to four 256-column groups a lane: each its
    // own template instance, so each is launched here once; check_launch_limits)
    for (int c = 512; c <= 1024; c += 256) {
        test_layernorm(24, c);
        test_add_norm(24, c, 0);
        test_add_norm(24, c, 1);
    }
    test_matmul(N, C, 3 * C, 1);
    test_matmul(N, 4 * C, C, 1);
    test_matmul(64, C, Vp, 0);
    test_matmul(30, 100, 36, 1);   // odd shapes
    test_matmul(2100, 64, 72, 1);  // dbias: three row chunks, a partial column block
    test_matmul_many_shapes();
    test_matmul_acc(N, C, 3 * C, 1);
    test_matmul_acc(N, C, 2, 0);      // a narrow projection (KDA's beta: OC = heads)
    test_matmul_acc(30, 100, 36, 1);  // odd shapes
    test_matmul(37, 100, 101, 0);  // the classifier's dW, odd shapes: unaligned rows
    test_matmul_gelu(N, C, 4 * C);
    test_attention_impls(B, T, C, NH);
    test_attention_impls(1, 100, 128, 2);  // T not a multiple of the tile
    test_attention_impls(1, 50, 64, 2);    // head size 32: the strided attention's SIMT kernels
    test_attention_impls(1, 100, 256, 2);  // head size 128: the strided attention's tensor-core kernels
    const int heads[3][2] = {{128, 2}, {256, 2}, {120, 3}};             // C, NH
    const int rows[5][2] = {{1, 1}, {1, 7}, {1, 100}, {16, 16}, {5, 40}};  // Tq, Tc
    for (int h = 0; h < 3; h++)
        for (int r = 0; r < 5; r++) test_attention_cached(rows[r][0], rows[r][1], heads[h][0], heads[h][1]);
    test_elementwise((size_t)N * 4 * C + 3);
    test_crossentropy(300, V, Vp);   // more rows than the fused kernel's blocks (2 per SM)
    test_crossentropy(37, 93, 101);  // no 8-wide vectors (Vp % 8 != 0)
    test_crossentropy(1, 9, 9);      // one row, no padding
#else
    const int B = 4, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304, N = B * T;
    test_embed(B, T, C, V, Vp);
    test_layernorm(N, C);
    test_layernorm(1000, 200);  // generic path
    test_add_norm(N, C, 0);
    test_add_norm(N, C, 1);
    test_add_norm(1000, 200, 1);  // generic path (separate kernels)
    test_matmul(N, C, 3 * C, 1);
    test_matmul(N, 4 * C, C, 1);
    test_matmul(1024, C, Vp, 0);
    test_matmul(300, 100, 36, 1);   // odd shapes
    test_matmul(2100, 64, 72, 1);  // dbias: three row chunks, a partial column block
    test_matmul_many_shapes();
    test_matmul_acc(N, C, 3 * C, 1);
    test_matmul_acc(N, C, 12, 0);      // a narrow projection (KDA's beta: OC = heads)
    test_matmul_acc(300, 100, 36, 1);  // odd shapes
    test_matmul(2560, C, Vp, 0);  // the classifier's chunk at GPT-2's size (dW into fp32 at vocab width)
    test_matmul(300, 100, 101, 0);  // the same, odd shapes: unaligned rows
    test_matmul_gelu(N, C, 4 * C);
    test_attention_impls(B, T, C, NH);
    test_attention_impls(2, 200, 256, 4);  // T not a multiple of the tile
    test_attention_impls(3, 77, 768, 12);  // GPT-2 heads, T below two tiles and odd
    test_attention_impls(2, 100, 128, 4);  // head size 32: the strided attention's SIMT kernels
    test_attention_impls(4, 1000, 768, 6); // head size 128 (the hybrids): its tensor-core kernels
    test_attention_impls(2, 130, 600, 3);  // head size 200: SIMT, T past two tiles
    // decode: one new row (cache of 1, 7, 1024 rows), a full prefill, a chunk of 5; head
    // sizes 64 (GPT-2), 128 and 40 (not a multiple of the warp)
    const int heads[3][2] = {{768, 12}, {256, 2}, {120, 3}};                 // C, NH
    const int rows[5][2] = {{1, 1}, {1, 7}, {1, 1024}, {64, 64}, {5, 300}};  // Tq, Tc
    for (int h = 0; h < 3; h++)
        for (int r = 0; r < 5; r++) test_attention_cached(rows[r][0], rows[r][1], heads[h][0], heads[h][1]);
    test_elementwise((size_t)N * 4 * C + 3);
    test_crossentropy(2048, V, Vp);
    test_crossentropy(300, 1003, 1013);  // no 8-wide vectors (Vp % 8 != 0)
    test_crossentropy(1, 9, 9);          // one row, no padding
#endif
    gpu_test_summary();
    TEST_MAIN_END();
}
