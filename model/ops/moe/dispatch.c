// Dropless MoE dispatch (docs/hybrid.md, "Dropless permutation and grouped expert FFN").
// Slot n = t*K + j is token t's j-th routed copy.
//  plan:    counting sort of the slots by expert, stable (slots of one expert keep their
//           increasing order): histogram -> exclusive prefix sum -> placement in slot order
//  gather:  xp[p] = x[perm[p] / K]
//           backward: dx[t] = sum_j dxp[pos[t*K+j]]            (fixed j order, no atomics)
//                     (accumulate: dx[t] += that sum, rounded to real first)
//  combine: out[t] = sum_j w[t*K+j] yp[pos[t*K+j]]  (add: that sum, rounded to real, + add[t])
//           backward: dyp[pos[n]] = w[n] dout[t]  (a bijection: no collisions),
//                     dw[n] = dout[t] . yp[pos[n]]
#include "model/ops/moe/moe.h"
#include "base/util.h"

void cpu_moe_dispatch_plan(int *perm, int *pos, int *offsets, const int *sel, int N, int K, int E) {
    const int NK = N * K;
    for (int e = 0; e <= E; e++) offsets[e] = 0;
    for (int n = 0; n < NK; n++) {
        if (sel[n] < 0 || sel[n] >= E) die("moe dispatch: expert index %d out of range [0, %d)", sel[n], E);
        offsets[sel[n] + 1]++;
    }
    for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    int cursor[E];
    for (int e = 0; e < E; e++) cursor[e] = offsets[e];
    for (int n = 0; n < NK; n++) {
        int p = cursor[sel[n]]++;
        perm[p] = n;
        pos[n] = p;
    }
}

void cpu_moe_gather_forward(real *xp, const real *x, const int *perm, int N, int K, int C) {
#pragma omp parallel for schedule(static)
    for (int p = 0; p < N * K; p++) {
        const real *src = x + (size_t)(perm[p] / K) * C;
        real *dst = xp + (size_t)p * C;
        for (int c = 0; c < C; c++) dst[c] = src[c];
    }
}

void cpu_moe_gather_backward(real *dx, const real *dxp, const int *pos, int N, int K, int C, int accumulate) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        double acc[C];
        for (int c = 0; c < C; c++) acc[c] = 0.0;
        for (int j = 0; j < K; j++) {
            const real *src = dxp + (size_t)pos[(size_t)t * K + j] * C;
            for (int c = 0; c < C; c++) acc[c] += src[c];
        }
        real *d = dx + (size_t)t * C;
        if (accumulate)
            for (int c = 0; c < C; c++) d[c] += (real)acc[c];
        else
            for (int c = 0; c < C; c++) d[c] = (real)acc[c];
    }
}

void cpu_moe_combine_forward(real *out, const real *yp, const real *weights, const int *pos, const real *add, int N,
                             int K, int C) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        double acc[C];
        for (int c = 0; c < C; c++) acc[c] = 0.0;
        for (int j = 0; j < K; j++) {
            size_t n = (size_t)t * K + j;
            double w = weights[n];
            const real *y = yp + (size_t)pos[n] * C;
            for (int c = 0; c < C; c++) acc[c] += w * y[c];
        }
        real *o = out + (size_t)t * C;
        if (add)
            for (int c = 0; c < C; c++) o[c] = (real)acc[c] + add[(size_t)t * C + c];
        else
            for (int c = 0; c < C; c++) o[c] = (real)acc[c];
    }
}

void cpu_moe_combine_backward(real *dyp, real *dweights, const real *dout, const real *yp, const real *weights,
                              const int *pos, int N, int K, int C) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const real *dr = dout + (size_t)t * C;
        for (int j = 0; j < K; j++) {
            size_t n = (size_t)t * K + j;
            const real *y = yp + (size_t)pos[n] * C;
            real *dy = dyp + (size_t)pos[n] * C;
            double w = weights[n], dw = 0.0;
            for (int c = 0; c < C; c++) {
                dw += (double)dr[c] * y[c];
                dy[c] = (real)(w * dr[c]);
            }
            dweights[n] = (real)dw;
        }
    }
}
