// Finite-difference helpers for the block-op gradient tests (double build).
// fd_rel_err perturbs every element of x by +-h, evaluates the scalar loss, and returns
//   max_i |fd_i - analytic_i| / max_i |fd_i|
// (if every fd_i is 0, the denominator is 1, so the result is max |analytic|).
#ifndef HYBRID_FD_CHECK_H
#define HYBRID_FD_CHECK_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/real.h"
#include "base/rng.h"

#ifndef REAL_DOUBLE
#error "gradient tests need the double build (-DREAL_DOUBLE)"
#endif

#define FD_TOL 1e-6

typedef double (*LossFn)(void *ctx);

static inline double fd_rel_err(LossFn f, void *ctx, real *x, const real *analytic, size_t n, double h) {
    double maxfd = 0.0, maxdiff = 0.0;
    for (size_t i = 0; i < n; i++) {
        real x0 = x[i];
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        double fd = (lp - lm) / (2 * h);
        if (fabs(fd) > maxfd) maxfd = fabs(fd);
        double d = fabs(fd - analytic[i]);
        if (!(d <= maxdiff)) maxdiff = d;  // NaN propagates
    }
    return maxdiff / (maxfd > 0 ? maxfd : 1.0);
}

static inline real *rand_vec(Rng *r, size_t n, double scale) {
    real *v = malloc(sizeof(real) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = (real)(scale * rng_normal(r));
    return v;
}

static inline real *zeros(size_t n) { return calloc(n ? n : 1, sizeof(real)); }

// sum_i a_i b_i: the test losses are L = <out, R> with a fixed random R, so dL/dout = R
static inline double dotv(const real *a, const real *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static inline double max_abs_diff(const real *a, const real *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static inline double max_abs(const real *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

#endif
