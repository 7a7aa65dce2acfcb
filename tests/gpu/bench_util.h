// What the kernel benchmarks of tests/gpu (bench_delta_rule.c, bench_moe.c, bench_matmul.c) share:
// their integer options, the timer of one repetition and the median of the repetitions.
#ifndef HYBRID_TESTS_GPU_BENCH_UTIL_H
#define HYBRID_TESTS_GPU_BENCH_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "model/backend.h"

// a whole decimal integer in [lo, max] (lo >= 0), or -1
static inline long bench_parse_int(const char *s, long lo, long max) {
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > max) return -1;
    return v;
}

// the value of the integer option `opt` given as `val`, in [lo, max]; anything else ends the
// program with the message and its usage (exit status 2)
static inline long bench_int_option(const char *prog, const char *usage, const char *opt, const char *val, long lo,
                                    long max) {
    const long v = bench_parse_int(val, lo, max);
    if (v < 0) {
        fprintf(stderr, "%s: %s wants an integer in [%ld, %ld], not '%s'\n%s", prog, opt, lo, max, val ? val : "",
                usage);
        exit(2);
    }
    return v;
}

// a bad command line: "prog: " and the message (fmt with one %s, what), then the usage; exit 2
static inline void bench_bad_arg(const char *prog, const char *usage, const char *fmt, const char *what) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n%s", usage);
    exit(2);
}

static inline double mib(size_t b) { return b / 1048576.0; }

// how many of x[0..n) are NaN or infinite (the benchmarks' outputs must be finite)
static inline size_t count_nonfinite(const float *x, size_t n) {
    size_t bad = 0;
#pragma omp parallel for reduction(+ : bad)
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

// CUDA events on the backend's stream (kernels/timer.cu); a wall clock under the emulator,
// which has no kernels/timer.cu (its times mean nothing)
#ifdef HYBRID_CUDA_EMU
static double bench_t0;
static inline void bench_timer_start(const Backend *be) {
    be->synchronize();
    bench_t0 = now_seconds();
}
static inline double bench_timer_stop_ms(const Backend *be) {
    be->synchronize();
    return (now_seconds() - bench_t0) * 1e3;
}
#else
static inline void bench_timer_start(const Backend *be) {
    (void)be;
    cuda_timer_start();
}
static inline double bench_timer_stop_ms(const Backend *be) {
    (void)be;
    return cuda_timer_stop_ms();
}
#endif

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// the median and the minimum of t[0..n) (n >= 1; sorts t)
static inline void bench_median_min(double *t, int n, double *med, double *mn) {
    qsort(t, (size_t)n, sizeof(double), bench_cmp_double);
    *med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    *mn = t[0];
}

#endif
