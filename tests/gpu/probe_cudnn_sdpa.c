// What cuDNN's flash attention (HYBRID_ATTN=cudnn; kernels/core/attention_cudnn.cu) does on
// this machine, in one run: cuDNN's version; for each layout below, whether the forward and
// the backward graphs finalize an execution plan, with the engine chosen (its global index,
// workspace, numerical note) or cuDNN's reason; then, at the timed shapes, cuDNN against our
// kernels on the same inputs: RMS relative difference of out, lse, dq, dk, dv, whether two
// cuDNN backwards give the same bits, and the median time of forward and backward.
// Not a test (tests/gpu/test_core.c and test_mla.c hold the parity checks against the CPU):
//   make out/build/gpu/probe_cudnn_sdpa && out/build/gpu/probe_cudnn_sdpa
// CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr add cuDNN's own log of a refusal.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "model/backend.h"

static const Backend *G;

// packed GPT-2 qkv (B, T, 3C): q, k, v at columns 0, C, 2C of rows 3C wide
static AttnLayout packed(int B, int T, int NH, int hs) {
    const int C = NH * hs;
    AttnLayout L = {B, T, NH, hs, hs, 3 * C, hs, 3 * C, hs, 3 * C, hs, 1.0 / sqrt((double)hs)};
    return L;
}

// MLA-like heads: q, k (B*T, NH*dqk) and v (B*T, NH*dv) in separate buffers
static AttnLayout separate(int B, int T, int NH, int dqk, int dv) {
    AttnLayout L = {B, T, NH, dqk, dv, NH * dqk, dqk, NH * dqk, dqk, NH * dv, dv, 1.0 / sqrt((double)dqk)};
    return L;
}

static void probe(const char *name, const AttnLayout *L) {
    char msg[1024];
    printf("%-28s B=%-3d T=%-5d NH=%-3d dqk=%-3d dv=%-3d\n", name, L->B, L->T, L->NH, L->dqk, L->dv);
    for (int bwd = 0; bwd < 2; bwd++) {
        const int ok = cuda_attention_cudnn_probe(L, bwd, msg, sizeof msg);
        printf("    %s: %s: %s\n", bwd ? "backward" : "forward ", ok ? "FINALIZED" : "REFUSED", msg);
    }
    fflush(stdout);
}

static unsigned long long g_seed = 12345;
static float frand(void) {  // uniform in [-1, 1)
    g_seed = g_seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_seed >> 40) & 0xffffff) / 8388608.f - 1.f;
}

static void *dev_rand(size_t n, float scale) {
    float *h = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) h[i] = scale * frand();
    void *d = G->alloc(n * G->elem_size);
    G->upload(d, h, n);
    free(h);
    return d;
}

static float *host_of(const void *d, size_t n, int f32) {
    float *h = xmalloc(sizeof(float) * n);
    if (f32) G->copy_to_host(h, d, n * sizeof(float));
    else G->download(h, d, n);
    return h;
}

static double rel_diff(const void *a, const void *b, size_t n, int f32) {
    float *x = host_of(a, n, f32), *y = host_of(b, n, f32);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)x[i] - y[i];
        num += d * d;
        den += (double)y[i] * y[i];
    }
    int nan = 0;
    for (size_t i = 0; i < n; i++) nan |= isnan(x[i]) || isnan(y[i]);
    free(x), free(y);
    return nan ? NAN : sqrt(num / (den > 0 ? den : 1));
}

// buffers of one layout: q, k, v (or one packed qkv), out, lse, dout, and the gradients
typedef struct {
    AttnLayout L;
    int is_packed;
    void *in[3], *grad[3], *out, *dout, *lse;
    size_t nin[3], nout, nlse;
} Bufs;

static Bufs make_bufs(const AttnLayout *L, int is_packed) {
    Bufs b;
    memset(&b, 0, sizeof b);
    b.L = *L, b.is_packed = is_packed;
    const size_t N = (size_t)L->B * L->T;
    b.nout = N * L->NH * L->dv, b.nlse = N * L->NH;
    if (is_packed) {
        b.nin[0] = N * L->q_row;
        b.in[0] = dev_rand(b.nin[0], 1.5f);
        b.grad[0] = G->alloc(b.nin[0] * G->elem_size);
    } else {
        b.nin[0] = N * L->q_row, b.nin[1] = N * L->k_row, b.nin[2] = N * L->v_row;
        for (int i = 0; i < 3; i++) b.in[i] = dev_rand(b.nin[i], 1.5f), b.grad[i] = G->alloc(b.nin[i] * G->elem_size);
    }
    b.out = G->alloc(b.nout * G->elem_size);
    b.dout = dev_rand(b.nout, 1.f);
    b.lse = G->alloc(b.nlse * sizeof(float));
    return b;
}

static void free_bufs(Bufs *b) {
    for (int i = 0; i < 3; i++)
        if (b->in[i]) G->free(b->in[i]), G->free(b->grad[i]);
    G->free(b->out), G->free(b->dout), G->free(b->lse);
}

static const real *q_of(const Bufs *b) { return b->in[0]; }
static const real *k_of(const Bufs *b) {
    return b->is_packed ? backend_offset(G, b->in[0], (size_t)b->L.NH * b->L.dqk) : b->in[1];
}
static const real *v_of(const Bufs *b) {
    return b->is_packed ? backend_offset(G, b->in[0], (size_t)2 * b->L.NH * b->L.dqk) : b->in[2];
}

static void forward(Bufs *b) {
    const AttnLayout *L = &b->L;
    if (b->is_packed) G->core->attention_forward(b->out, b->lse, b->in[0], L->B, L->T, L->NH * L->dqk, L->NH);
    else G->mla->attention_qkv_forward(b->out, b->lse, q_of(b), k_of(b), v_of(b), L);
}

static void backward(Bufs *b) {
    const AttnLayout *L = &b->L;
    if (b->is_packed)
        G->core->attention_backward(b->grad[0], b->dout, b->in[0], b->out, b->lse, L->B, L->T, L->NH * L->dqk, L->NH);
    else
        G->mla->attention_qkv_backward(b->grad[0], b->grad[1], b->grad[2], b->dout, q_of(b), k_of(b), v_of(b), b->out,
                                       b->lse, L);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_ms(void (*fn)(Bufs *), Bufs *b, int reps) {
    double t[64];
    if (reps > 64) reps = 64;
    fn(b);  // warm-up (plans built)
    for (int r = 0; r < reps; r++) {
        cuda_timer_start();
        fn(b);
        t[r] = cuda_timer_stop_ms();
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    return t[reps / 2];
}

// our kernels vs cuDNN on the same inputs, and their times
static void compare(const char *name, const AttnLayout *L, int is_packed) {
    printf("%s B=%d T=%d NH=%d dqk=%d dv=%d:\n", name, L->B, L->T, L->NH, L->dqk, L->dv);
    Bufs own = make_bufs(L, is_packed), cud = make_bufs(L, is_packed);
    const int ng = is_packed ? 1 : 3;
    for (int i = 0; i < ng; i++) {
        float *h = host_of(own.in[i], own.nin[i], 0);
        G->upload(cud.in[i], h, own.nin[i]);
        free(h);
    }
    float *h = host_of(own.dout, own.nout, 0);
    G->upload(cud.dout, h, own.nout);
    free(h);

    cuda_attention_set_cudnn(0);
    const double own_f = median_ms(forward, &own, 20), own_b = median_ms(backward, &own, 20);
    cuda_attention_set_cudnn(1);
    const long runs0 = cuda_attention_cudnn_runs();
    const double cud_f = median_ms(forward, &cud, 20), cud_b = median_ms(backward, &cud, 20);
    const long runs = cuda_attention_cudnn_runs() - runs0;
    G->synchronize();
    // (21 forwards and 21 backwards: a warm-up and 20 timed each)
    printf("    cuDNN ran %ld of 42 calls%s\n", runs, runs == 42 ? "" : " (the rest fell back to our kernels)");
    printf("    vs ours: out %.2e  lse %.2e", rel_diff(cud.out, own.out, own.nout, 0),
           rel_diff(cud.lse, own.lse, own.nlse, 1));
    // the backwards from the same forward results (ours), so only the backward differs
    cuda_attention_set_cudnn(0);
    forward(&own);
    backward(&own);
    cuda_attention_set_cudnn(1);
    forward(&cud);
    backward(&cud);
    const char *gname[3] = {"dq", "dk", "dv"};
    if (is_packed) printf("  dqkv %.2e", rel_diff(cud.grad[0], own.grad[0], own.nin[0], 0));
    else
        for (int i = 0; i < 3; i++) printf("  %s %.2e", gname[i], rel_diff(cud.grad[i], own.grad[i], own.nin[i], 0));
    printf("  (bf16 rounding: ~1e-3 to 3e-3 expected)\n");
    // deterministic: the backward again, the same bits
    float *first[3], *again[3];
    int same = 1;
    for (int i = 0; i < ng; i++) first[i] = host_of(cud.grad[i], cud.nin[i], 0);
    backward(&cud);
    for (int i = 0; i < ng; i++) {
        again[i] = host_of(cud.grad[i], cud.nin[i], 0);
        same &= !memcmp(first[i], again[i], sizeof(float) * cud.nin[i]);
        free(first[i]), free(again[i]);
    }
    printf("    cuDNN backward twice: %s\n", same ? "bit-identical" : "DIFFERENT BITS (nondeterministic)");
    printf("    median ms  forward: ours %.3f  cuDNN %.3f   backward: ours %.3f  cuDNN %.3f\n", own_f, cud_f, own_b,
           cud_b);
    cuda_attention_set_cudnn(-1);
    free_bufs(&own), free_bufs(&cud);
    fflush(stdout);
}

int main(void) {
    if (cuda_device_count() < 1) die("probe_cudnn_sdpa: no CUDA device");
    G = backend_cuda();
    if (!cuda_attention_cudnn_built()) {
        printf("this build has no cuDNN (cudnn.h not found at build time): nothing to probe\n");
        return 1;
    }
    const size_t v = cuda_cudnn_version();
    printf("cuDNN %zu.%zu.%zu (runtime library; cudnnGetVersion %zu)\n", v / 10000, v / 100 % 100, v % 100, v);
    printf("HYBRID_ATTN_CUDNN_BWD=%s\n\n", getenv("HYBRID_ATTN_CUDNN_BWD") ? getenv("HYBRID_ATTN_CUDNN_BWD") : "(det)");

    struct {
        const char *name;
        AttnLayout L;
    } cases[] = {
        {"gpt2 bench (packed)", packed(64, 1024, 12, 64)},
        {"gpt2 test_core (packed)", packed(4, 1024, 12, 64)},
        {"T=200 (packed)", packed(2, 200, 4, 64)},
        {"T=77 (packed)", packed(3, 77, 12, 64)},
        {"T=1 (packed)", packed(1, 1, 2, 64)},
        {"hs 128 hybrid A (packed)", packed(4, 1000, 6, 128)},
        {"hs 32 (packed)", packed(2, 100, 4, 32)},
        {"MLA 192/128 (separate)", separate(4, 1024, 6, 192, 128)},
        {"MLA 192/128 T=65", separate(2, 65, 3, 192, 128)},
        {"MLA 64/64 (separate)", separate(4, 1024, 8, 64, 64)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) probe(cases[i].name, &cases[i].L);
    printf("\n");
    const AttnLayout bench = packed(64, 1024, 12, 64), mla = separate(4, 1024, 6, 192, 128);
    compare("gpt2 bench (packed)", &bench, 1);
    compare("MLA 192/128", &mla, 0);
    return 0;
}
