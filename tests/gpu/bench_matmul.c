// The linear layers' GEMMs alone on the GPU (kernels/core/matmul.cu through the backend's
// matmul_forward / matmul_backward), at the shapes a model's profile names
// (HYBRID_CUDA_PROFILE_SHAPES=1 prints them as matmul_fwd/NxC>OC): is a slow GEMM in a model
// slow by itself, or only inside the model's step?
//
//   bench_matmul [--reps R] [--ballast-gib G] N,C,OC[,bias] ...
//
// Each shape: R timed repetitions (after 3 warm-up) of the forward (out = inp w^T (+ bias)) and
// of the backward (dinp = dout w, dw += dout^T inp (, dbias)); the median ms and TFLOP/s
// (2 N C OC flops forward, twice that backward). --ballast-gib G first allocates and touches G GiB
// of device memory (a model's footprint) to see whether a large allocation slows the GEMMs.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/bench_util.h"

static void fill(const Backend *be, real *d, size_t n, unsigned seed) {
    float *h = xmalloc(sizeof(float) * n);
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = ((float)(s >> 8) / 16777216.f - 0.5f) * 0.1f;
    }
    be->upload(d, h, n);
    free(h);
}

static const char *usage = "usage: bench_matmul [--reps R] [--ballast-gib G] N,C,OC[,bias] ...\n";

int main(int argc, char **argv) {
    int reps = 20, ballast = 0;
    int first = 1;
    for (; first < argc && !strncmp(argv[first], "--", 2); first += 2) {
        const char *a = argv[first], *val = first + 1 < argc ? argv[first + 1] : NULL;
        if (!strcmp(a, "--reps")) reps = (int)bench_int_option("bench_matmul", usage, a, val, 1, 100000);
        else if (!strcmp(a, "--ballast-gib")) ballast = (int)bench_int_option("bench_matmul", usage, a, val, 0, 1024);
        else {
            fprintf(stderr, "bench_matmul: unknown option %s\n%s", a, usage);
            return 2;
        }
    }
    if (first >= argc) {
        fprintf(stderr, "%s", usage);
        return 2;
    }
    const Backend *be = backend_cuda();
    real *ball = NULL;
    if (ballast > 0) {
        size_t n = ((size_t)ballast << 30) / be->elem_size;
        ball = be->alloc(n * be->elem_size);
        be->zero(ball, n);
    }
    printf("%-22s %5s %10s %9s %10s %9s\n", "shape N,C,OC", "bias", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
    double *t = xmalloc(sizeof(double) * (size_t)reps);
    for (int a = first; a < argc; a++) {
        int N = 0, C = 0, OC = 0, bias = 0;
        if (sscanf(argv[a], "%d,%d,%d,%d", &N, &C, &OC, &bias) < 3 || N < 1 || C < 1 || OC < 1)
            die("bench_matmul: bad shape '%s' (want N,C,OC[,bias], positive)", argv[a]);
        real *inp = be->alloc((size_t)N * C * be->elem_size), *w = be->alloc((size_t)OC * C * be->elem_size);
        real *out = be->alloc((size_t)N * OC * be->elem_size), *dinp = be->alloc((size_t)N * C * be->elem_size);
        // dw, db: parameter gradients, grad_size bytes an element (model/backend.h)
        real *dw = be->alloc((size_t)OC * C * be->grad_size), *b = bias ? be->alloc((size_t)OC * be->elem_size) : NULL;
        real *db = bias ? be->alloc((size_t)OC * be->grad_size) : NULL;
        fill(be, inp, (size_t)N * C, 1);
        fill(be, w, (size_t)OC * C, 2);
        fill(be, out, (size_t)N * OC, 3);  // (the backward's dout)
        backend_grad_zero(be, dw, (size_t)OC * C);
        if (bias) fill(be, b, OC, 4), backend_grad_zero(be, db, OC);
        double fwd, bwd, mn;
        for (int pass = 0; pass < 2; pass++) {
            for (int r = -3; r < reps; r++) {
                bench_timer_start(be);
                if (pass == 0) be->core->matmul_forward(out, inp, w, b, N, C, OC);
                else be->core->matmul_backward(dinp, dw, db, out, inp, w, N, C, OC);
                const double ms = bench_timer_stop_ms(be);
                if (r >= 0) t[r] = ms;
            }
            bench_median_min(t, reps, pass == 0 ? &fwd : &bwd, &mn);
        }
        const double fl = 2.0 * N * C * OC;
        printf("%-22s %5s %10.3f %9.1f %10.3f %9.1f\n", argv[a], bias ? "yes" : "no", fwd, fl / fwd / 1e9, bwd,
               2 * fl / bwd / 1e9);
        be->free(inp), be->free(w), be->free(out), be->free(dinp), be->free(dw);
        if (bias) be->free(b), be->free(db);
    }
    if (ball) be->free(ball);
    free(t);
    return 0;
}
