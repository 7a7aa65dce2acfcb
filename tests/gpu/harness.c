// The shared harness of the GPU parity tests (harness.h): the CUDA backend and the input
// RNG, bf16 host tensors, device buffers, NaN poisoning, the RMS-relative comparison.
// The functions that count checks are inline in harness.h (testing.h's counters are
// static to each program).
#define GPU_HARNESS_NO_CHECKS
#include "tests/gpu/harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/util.h"
#include "kernels/cuda_backend.h"

const Backend *G;
Rng g_rng;
static double g_t0;

void gpu_test_init(const char *name) {
    if (cuda_device_count() < 1) {
        printf("%s: no CUDA device visible; nothing to test\n", name);
        exit(1);
    }
    G = backend_cuda();
    rng_seed(&g_rng, 20261129);
    g_t0 = now_seconds();
}

double gpu_test_elapsed(void) { return now_seconds() - g_t0; }

void gpu_test_summary(void) {
    size_t live, peak, used, total;
    cuda_memory_stats(&live, &peak, &used, &total);
    printf("total %.1f s; backend peak allocation %.2f GiB\n", gpu_test_elapsed(), peak / 1073741824.0);
}

// ---- host tensors ----

float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

float *host_rand_f32(size_t n, float scale, float shift) {
    float *x = xmalloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = shift + scale * (float)(2.0 * rng_uniform(&g_rng) - 1.0);
    return x;
}

float *host_rand(size_t n, float scale, float shift) {
    float *x = host_rand_f32(n, scale, shift);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
    return x;
}

float *host_dup(const float *x, size_t n) {
    float *y = xmalloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

int *rand_tokens(size_t n, int V, int hot) {
    int *t = xmalloc(sizeof(int) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        t[i] = hot && rng_below(&g_rng, 2) ? (int)rng_below(&g_rng, 64) : (int)rng_below(&g_rng, (uint64_t)V);
    return t;
}

// ---- device buffers ----

void *dev_bf16(const float *h, size_t n) {
    void *p = G->alloc(n * G->elem_size);
    if (h) G->upload(p, h, n);
    return p;
}

float *dev_f32(const float *h, size_t n) {
    float *p = G->alloc(n * sizeof(float));
    if (h) G->copy_from_host(p, h, n * sizeof(float));
    return p;
}

int *dev_tokens(const int *h, size_t n) {
    int *p = G->alloc(n * sizeof(int));
    G->upload_tokens(p, h, n);
    return p;
}

void *dev_bytes(const void *h, size_t bytes) {
    void *p = G->alloc(bytes ? bytes : 1);
    if (h) G->copy_from_host(p, h, bytes);
    return p;
}

void *get_bytes(const void *p, size_t bytes) {
    void *h = xmalloc(bytes ? bytes : 1);
    G->copy_to_host(h, p, bytes);
    return h;
}

void poison_bytes(void *p, size_t bytes) {
    void *h = xmalloc(bytes ? bytes : 1);
    memset(h, 0xff, bytes);  // NaN in bf16 and in fp32
    G->copy_from_host(p, h, bytes);
    free(h);
}

static void *dev_clone_bytes(const void *p, size_t bytes) {
    void *h = get_bytes(p, bytes), *d = dev_bytes(h, bytes);
    free(h);
    return d;
}

static int same_bytes(const void *a, const void *b, size_t bytes) {
    void *x = get_bytes(a, bytes), *y = get_bytes(b, bytes);
    int same = !memcmp(x, y, bytes);
    free(x), free(y);
    return same;
}

void poison_bf16(void *p, size_t n) { poison_bytes(p, n * G->elem_size); }
void poison_f32(float *p, size_t n) { poison_bytes(p, n * sizeof(float)); }

float *get_bf16(const void *p, size_t n) {
    float *h = xmalloc(sizeof(float) * (n ? n : 1));
    G->download(h, p, n);
    return h;
}

float *get_f32(const float *p, size_t n) {
    float *h = xmalloc(sizeof(float) * (n ? n : 1));
    G->copy_to_host(h, p, n * sizeof(float));
    return h;
}

// ---- comparison ----

double rel_rms(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        double d = (double)got[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double err_bf16(const void *dev, const float *ref, size_t n) {
    float *g = get_bf16(dev, n);
    double e = rel_rms(g, ref, n);
    free(g);
    return e;
}

void *dev_clone_bf16(const void *p, size_t n) { return dev_clone_bytes(p, n * G->elem_size); }
int same_bf16(const void *a, const void *b, size_t n) { return same_bytes(a, b, n * G->elem_size); }
float *dev_clone_f32(const float *p, size_t n) { return dev_clone_bytes(p, n * sizeof(float)); }
int same_f32(const float *a, const float *b, size_t n) { return same_bytes(a, b, n * sizeof(float)); }

// (g: the device tensor, downloaded; freed here)
static double err_added(float *g, const float *base, const float *ref, size_t n) {
    float *r = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        g[i] -= base[i];
        r[i] = ref[i] - base[i];
    }
    double e = rel_rms(g, r, n);
    free(g), free(r);
    return e;
}

double err_bf16_added(const void *dev, const float *base, const float *ref, size_t n) {
    return err_added(get_bf16(dev, n), base, ref, n);
}
double err_f32_added(const float *dev, const float *base, const float *ref, size_t n) {
    return err_added(get_f32(dev, n), base, ref, n);
}

double err_f32(const float *dev, const float *ref, size_t n) {
    float *g = get_f32(dev, n);
    double e = rel_rms(g, ref, n);
    free(g);
    return e;
}

int report(const char *what, double err, double tol) {
    int ok = err <= tol;
    printf("  %-52s %.3e  (tol %.0e)  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok;
}
