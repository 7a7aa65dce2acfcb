// RMSNorm (docs/hybrid.md, "RMSNorm"), statistics in double:
//   rstd_i = (mean_c x_ic^2 + eps)^(-1/2),  y_ic = w_c x_ic rstd_i
// Backward with g = dy * w:
//   dx_i  = rstd_i g_i - (rstd_i^3 / C) (g_i . x_i) x_i
//   dw_c += sum_i dy_ic x_ic rstd_i
#include <math.h>

#include "model/ops/norm_glu/norm_glu.h"

void cpu_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C, real eps) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *x = inp + (size_t)i * C;
        real *y = out + (size_t)i * C;
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) y[c] = (real)(w[c] * (x[c] * r));
        rstd[i] = (real)r;
    }
}

void cpu_rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                          const real *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *x = inp + (size_t)i * C, *dy = dout + (size_t)i * C;
        real *dx = dinp + (size_t)i * C;
        double r = rstd[i], gx = 0.0;
        for (int c = 0; c < C; c++) gx += (double)dy[c] * w[c] * x[c];  // g . x
        double k = r * r * r * gx / C;
        for (int c = 0; c < C; c++) dx[c] = (real)(r * ((double)dy[c] * w[c]) - k * x[c]);
    }
    // dw: one thread per channel, tokens summed in order (deterministic)
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        double s = 0.0;
        for (int i = 0; i < N; i++) s += (double)dout[(size_t)i * C + c] * inp[(size_t)i * C + c] * rstd[i];
        dw[c] += (real)s;
    }
}
