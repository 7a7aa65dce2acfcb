// Elementwise helpers: residual add (forward and gradient accumulation), and the
// sum of squares / scaling used for global-norm gradient clipping.
#include "model/ops/core/core.h"

// out = a + b
void cpu_add_forward(real *out, const real *a, const real *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

// acc += x
void cpu_add_inplace(real *acc, const real *x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

// sum_i x_i (squares = 0) or sum_i x_i^2 (squares = 1), in double. The range is cut
// into SUM_CHUNKS pieces whose bounds depend only on n; each piece is summed in order
// by one thread, then the partial sums are combined serially, so the result does not
// depend on the thread count.
#define SUM_CHUNKS 64
static double chunked_sum(const real *x, size_t n, int squares) {
    double part[SUM_CHUNKS];
    size_t len = (n + SUM_CHUNKS - 1) / SUM_CHUNKS;
#pragma omp parallel for schedule(static)
    for (int p = 0; p < SUM_CHUNKS; p++) {
        size_t lo = (size_t)p * len, hi = lo + len < n ? lo + len : n;
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) s += squares ? (double)x[i] * x[i] : (double)x[i];
        part[p] = s;
    }
    double total = 0.0;
    for (int p = 0; p < SUM_CHUNKS; p++) total += part[p];
    return total;
}

double cpu_sum(const real *x, size_t n) { return chunked_sum(x, n, 0); }
double cpu_sum_squares(const real *x, size_t n) { return chunked_sum(x, n, 1); }

// x *= s
void cpu_scale(real *x, real s, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
