// Local linear-layer helper for the block ops (a stand-in for model/ops/matmul.c, to be
// deduplicated), weights in PyTorch (out, in) layout, sums in double:
//   out[i,o]   = sum_k inp[i,k] w[o,k]
//   dinp[i,k]  = sum_o dout[i,o] w[o,k]        (written)
//   dw[o,k]   += sum_i dout[i,o] inp[i,k]      (accumulated, rows i in order)
// and the dense GLU MLP built from it (blocks-spec §2.3):
//   h = x W13^T (N, 2M) = [gate | up];  a = glu(h) (N, M);  out = a W2^T (N, C)
// Parallel over rows (forward, dinp) and over output channels (dw): deterministic.
#include "model/ops/norm_glu/norm_glu.h"

void cpu_block_linear_forward(real *out, const real *inp, const real *w, int N, int C, int OC) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *x = inp + (size_t)i * C;
        for (int o = 0; o < OC; o++) {
            const real *wo = w + (size_t)o * C;
            double s = 0.0;
            for (int k = 0; k < C; k++) s += (double)x[k] * wo[k];
            out[(size_t)i * OC + o] = (real)s;
        }
    }
}

void cpu_block_linear_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w, int N,
                               int C, int OC) {
    if (dinp) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++) {
            double acc[C];
            for (int k = 0; k < C; k++) acc[k] = 0.0;
            for (int o = 0; o < OC; o++) {
                double d = dout[(size_t)i * OC + o];
                const real *wo = w + (size_t)o * C;
                for (int k = 0; k < C; k++) acc[k] += d * wo[k];
            }
            for (int k = 0; k < C; k++) dinp[(size_t)i * C + k] = (real)acc[k];
        }
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; o++) {
        double acc[C];
        for (int k = 0; k < C; k++) acc[k] = 0.0;
        for (int i = 0; i < N; i++) {
            double d = dout[(size_t)i * OC + o];
            const real *x = inp + (size_t)i * C;
            for (int k = 0; k < C; k++) acc[k] += d * x[k];
        }
        real *g = dw + (size_t)o * C;
        for (int k = 0; k < C; k++) g[k] += (real)acc[k];
    }
}

void cpu_glu_ffn_forward(real *out, real *h, real *a, const real *x, const real *w13, const real *w2, int N,
                         int C, int M, GluAct act) {
    cpu_block_linear_forward(h, x, w13, N, C, 2 * M);
    cpu_glu_forward(a, h, N, M, act);
    cpu_block_linear_forward(out, a, w2, N, M, C);
}

void cpu_glu_ffn_backward(real *dx, real *dw13, real *dw2, real *dh, real *da, const real *dout, const real *x,
                          const real *h, const real *a, const real *w13, const real *w2, int N, int C, int M,
                          GluAct act) {
    cpu_block_linear_backward(da, dw2, dout, a, w2, N, M, C);
    cpu_glu_backward(dh, da, h, N, M, act);
    cpu_block_linear_backward(dx, dw13, dh, x, w13, N, C, 2 * M);
}
