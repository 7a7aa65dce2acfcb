// LayerNorm (docs/hybrid.md, "LayerNorm"), per row of C channels:
//   mu = mean x,  var = mean (x - mu)^2,  rstd = (var + eps)^(-1/2),
//   xhat = (x - mu) * rstd,  y = w * xhat + b   (b may be NULL)
// Backward, with g = dy * w:
//   dx = rstd * (g - mean_c g - xhat * mean_c(g * xhat))      (written)
//   dw += sum_rows dy * xhat,  db += sum_rows dy               (accumulated)
// Row statistics are accumulated in double.
#include <math.h>

#include "model/ops/core/core.h"

#define LN_CBLOCK 32  // channels per parallel work item for dw / db

void cpu_layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *w, const real *b,
                           int N, int C, real eps) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *x = inp + (size_t)i * C;
        real *y = out + (size_t)i * C;
        double mu = 0.0;
        for (int c = 0; c < C; c++) mu += x[c];
        mu /= C;
        double var = 0.0;
        for (int c = 0; c < C; c++) {
            double d = x[c] - mu;
            var += d * d;
        }
        var /= C;
        double r = 1.0 / sqrt(var + (double)eps);
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - mu) * r;
            y[c] = (real)(xhat * w[c] + (b ? b[c] : 0.0));
        }
        mean[i] = (real)mu;
        rstd[i] = (real)r;
    }
}

void cpu_layernorm_backward(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w,
                            const real *mean, const real *rstd, int N, int C) {
    // input gradient: rows are independent
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        real *dx = dinp + (size_t)i * C;
        double mu = mean[i], r = rstd[i];
        double mean_g = 0.0, mean_gx = 0.0;
        for (int c = 0; c < C; c++) {
            double g = (double)dy[c] * w[c];
            mean_g += g;
            mean_gx += g * ((x[c] - mu) * r);
        }
        mean_g /= C;
        mean_gx /= C;
        for (int c = 0; c < C; c++) {
            double g = (double)dy[c] * w[c], xhat = (x[c] - mu) * r;
            dx[c] = (real)(r * (g - mean_g - xhat * mean_gx));
        }
    }
    // parameter gradients: each channel block owned by one thread, rows summed in order
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += LN_CBLOCK) {
        int nc = c0 + LN_CBLOCK < C ? LN_CBLOCK : C - c0;
        double sw[LN_CBLOCK] = {0}, sb[LN_CBLOCK] = {0};
        for (int i = 0; i < N; i++) {
            const real *x = inp + (size_t)i * C + c0, *dy = dout + (size_t)i * C + c0;
            double mu = mean[i], r = rstd[i];
            for (int c = 0; c < nc; c++) {
                sw[c] += dy[c] * ((x[c] - mu) * r);
                sb[c] += dy[c];
            }
        }
        for (int c = 0; c < nc; c++) {
            dw[c0 + c] += (real)sw[c];
            if (db) db[c0 + c] += (real)sb[c];
        }
    }
}
