// KDA layer pre/post ops that are not matmuls: L2 norm of q and k per head, the gate
// (softplus and lower-bound forms), beta = sigmoid, and the per-head gated RMSNorm of the
// output (docs/delta-rule.md, "Input transforms: L2 norm, decay gate and beta", "Gradients
// of the input transforms", "KDA layer" and "Gated RMSNorm of the output").
#include "model/ops/delta_rule/internal.h"

static inline double softplus(double z) { return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }

// ---- L2 norm (docs/delta-rule.md, "Input transforms: L2 norm, decay gate and beta";
//      backward: docs/delta-rule.md, "Gradients of the input transforms") -----------------
void cpu_l2norm_forward(real *y, real *rstd, const real *x, size_t rows, int D, real eps) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const real *xr = x + r * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)xr[i] * (double)xr[i];
        const double rs = 1.0 / sqrt(ss + (double)eps);  // eps on the sum of squares
        for (int i = 0; i < D; i++) y[r * D + i] = (real)((double)xr[i] * rs);
        rstd[r] = (real)rs;
    }
}

void cpu_l2norm_backward(real *dx, const real *dy, const real *y, const real *rstd, size_t rows, int D) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const real *dyr = dy + r * D, *yr = y + r * D;
        double dyy = 0;
        for (int i = 0; i < D; i++) dyy += (double)dyr[i] * (double)yr[i];
        // dx = rstd (dy - (dy.y) y)
        for (int i = 0; i < D; i++) dx[r * D + i] = (real)((double)rstd[r] * ((double)dyr[i] - dyy * (double)yr[i]));
    }
}

// ---- gate (docs/delta-rule.md, "Input transforms: L2 norm, decay gate and beta",
//      "Gradients of the input transforms" and "KDA layer") --------------------------------
void cpu_decay_gate_forward(real *g, const real *x, const real *A_log, const real *dt_bias, size_t N, int H, int K,
                      real lower_bound) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const double A = A_log ? exp((double)A_log[h]) : 1.0;
            for (int i = 0; i < K; i++) {
                const size_t idx = (n * H + h) * (size_t)K + i;
                const double u = (double)x[idx] + (dt_bias ? (double)dt_bias[(size_t)h * K + i] : 0.0);
                g[idx] = lower_bound < 0 ? (real)((double)lower_bound * lin_sigmoid(A * u))  // lb * sigma(A (x + b))
                                         : (real)(-A * softplus(u));                         // -A softplus(x + b)
            }
        }
}

void cpu_decay_gate_backward(real *dx, real *dA_log, real *ddt_bias, const real *dg, const real *x, const real *A_log,
                       const real *dt_bias, size_t N, int H, int K, real lower_bound) {
    // Parallel over heads: a head owns its dA_log and dt_bias entries and sums over the
    // tokens in order (deterministic).
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        const double A = A_log ? exp((double)A_log[h]) : 1.0, lb = (double)lower_bound;
        double dAl = 0;
        for (int i = 0; i < K; i++) {
            double db = 0;
            for (size_t n = 0; n < N; n++) {
                const size_t idx = (n * H + h) * (size_t)K + i;
                const double u = (double)x[idx] + (dt_bias ? (double)dt_bias[(size_t)h * K + i] : 0.0);
                double dxi;
                if (lower_bound < 0) {
                    // z = A u, g = lb sigma(z): dx = dg lb sigma(z)(1-sigma(z)) A ; dA_log += dx u
                    const double sg = lin_sigmoid(A * u);
                    dxi = (double)dg[idx] * lb * sg * (1.0 - sg) * A;
                    dAl += dxi * u;
                } else {
                    // g = -A softplus(u): dx = dg (-A) sigma(u) ; dA_log += dg g
                    dxi = (double)dg[idx] * (-A) * lin_sigmoid(u);
                    dAl += (double)dg[idx] * (-A * softplus(u));
                }
                dx[idx] = (real)dxi;
                db += dxi;
            }
            if (ddt_bias) ddt_bias[(size_t)h * K + i] += (real)db;
        }
        if (dA_log && A_log) dA_log[h] += (real)dAl;
    }
}

// ---- beta = c sigmoid(b) (docs/delta-rule.md, "Input transforms: L2 norm, decay gate and
//      beta" and "Gradients of the input transforms") -------------------------------------
void cpu_beta_forward(real *beta, const real *b, size_t n, int neg_eigval) {
    const double c = neg_eigval ? 2.0 : 1.0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) beta[i] = (real)(c * lin_sigmoid((double)b[i]));
}

void cpu_beta_backward(real *db, const real *dbeta, const real *beta, size_t n, int neg_eigval) {
    const double c = neg_eigval ? 2.0 : 1.0;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const double sg = (double)beta[i] / c;
        db[i] = (real)((double)dbeta[i] * c * sg * (1.0 - sg));
    }
}

// ---- gated RMSNorm (docs/delta-rule.md, "Gated RMSNorm of the output") ---------------------
// act(z) and act'(z): sigmoid, or swish z sigma(z)
static inline void gate_act(double z, int swish, double *a, double *da) {
    const double sg = lin_sigmoid(z);
    if (swish) {
        *a = z * sg;
        *da = sg + z * sg * (1.0 - sg);
    } else {
        *a = sg;
        *da = sg * (1.0 - sg);
    }
}

void cpu_gated_rmsnorm_forward(real *y, real *rstd, const real *x, const real *z, const real *w, size_t rows,
                               int D, real eps, int swish) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const real *xr = x + r * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)xr[i] * (double)xr[i];
        const double rs = 1.0 / sqrt(ss / D + (double)eps);
        rstd[r] = (real)rs;
        for (int i = 0; i < D; i++) {
            double a, da;
            gate_act((double)z[r * D + i], swish, &a, &da);
            y[r * D + i] = (real)((double)xr[i] * rs * (w ? (double)w[i] : 1.0) * a);
        }
    }
}

void cpu_gated_rmsnorm_backward(real *dx, real *dz, real *dw, const real *dy, const real *x, const real *z,
                                const real *w, const real *rstd, size_t rows, int D, int swish) {
    // rows: dz = dy ⊙ (xh w) ⊙ act'(z) ; u = dy ⊙ act(z) ⊙ w ; dx = r (u - xh mean(xh ⊙ u))
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const double rs = (double)rstd[r];
        double m = 0;
        for (int i = 0; i < D; i++) {
            const size_t idx = r * D + i;
            double a, da;
            gate_act((double)z[idx], swish, &a, &da);
            const double wi = w ? (double)w[i] : 1.0, xh = (double)x[idx] * rs;
            dz[idx] = (real)((double)dy[idx] * xh * wi * da);
            m += xh * (double)dy[idx] * a * wi;
        }
        m /= D;
        for (int i = 0; i < D; i++) {
            const size_t idx = r * D + i;
            double a, da;
            gate_act((double)z[idx], swish, &a, &da);
            const double wi = w ? (double)w[i] : 1.0, xh = (double)x[idx] * rs;
            dx[idx] = (real)(rs * ((double)dy[idx] * a * wi - xh * m));
        }
    }
    // dw = sum_rows dy ⊙ act(z) ⊙ xh, one channel per thread, rows in order
    if (!dw) return;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < D; i++) {
        double acc = 0;
        for (size_t r = 0; r < rows; r++) {
            const size_t idx = r * D + i;
            double a, da;
            gate_act((double)z[idx], swish, &a, &da);
            acc += (double)dy[idx] * a * (double)x[idx] * (double)rstd[r];
        }
        dw[i] += (real)acc;
    }
}
