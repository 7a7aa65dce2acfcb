// Helpers for the linear-attention op tests (test_kda_*.c): random inputs, tensor
// comparison and central finite differences. Header-only; the tests build in double.
#ifndef HYBRID_LINEAR_TEST_UTIL_H
#define HYBRID_LINEAR_TEST_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/ops/delta_rule/delta_rule.h"
#include "base/rng.h"
#include "base/util.h"

static inline real *tnew(size_t n) { return (real *)xcalloc(n ? n : 1, sizeof(real)); }

static inline void fill_normal(Rng *r, real *x, size_t n, double sd) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(sd * rng_normal(r));
}
static inline void fill_uniform(Rng *r, real *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(lo + (hi - lo) * rng_uniform(r));
}
static inline void l2normalize_rows(real *x, size_t rows, int D) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < D; i++) s += (double)x[r * D + i] * x[r * D + i];
        s = 1.0 / sqrt(s);
        for (int i = 0; i < D; i++) x[r * D + i] = (real)(x[r * D + i] * s);
    }
}
// the test gate of docs/delta-rule.md, "Test inputs": g = -softplus(N(0,1)) * 0.5
static inline void fill_gate(Rng *r, real *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double z = rng_normal(r);
        g[i] = (real)(-0.5 * (z > 0 ? z + log1p(exp(-z)) : log1p(exp(z))));
    }
}
static inline void fill_sigmoid(Rng *r, real *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = (real)(1.0 / (1.0 + exp(-rng_normal(r))));
}

static inline double max_abs(const real *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}
static inline int all_finite(const real *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite((double)x[i])) return 0;
    return 1;
}
// Tensor-relative error max|a - ref| / max|ref| (absolute if ref == 0); NaN -> inf.
static inline double tensor_err(const real *a, const real *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (isnan(d)) return INFINITY;
        num = fmax(num, d);
        den = fmax(den, fabs((double)ref[i]));
    }
    return den > 0 ? num / den : num;
}
static inline double dot(const real *a, const real *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return s;
}

// Central finite differences of the scalar loss f(ctx) with respect to every element
// of x (perturbed in place and restored); returns max|fd - analytic| / max|fd|
// (absolute if every fd is 0).
typedef double (*loss_fn)(void *ctx);
static inline double fd_check(loss_fn f, void *ctx, real *x, size_t n, const real *analytic, double eps) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const real x0 = x[i];
        x[i] = (real)(x0 + eps);
        double lp = f(ctx);
        x[i] = (real)(x0 - eps);
        double lm = f(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2 * eps);
        double d = fabs(fd - (double)analytic[i]);
        if (isnan(d)) return INFINITY;
        num = fmax(num, d);
        den = fmax(den, fabs(fd));
    }
    return den > 0 ? num / den : num;
}

#endif
