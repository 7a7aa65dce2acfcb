// Linear layer, weights in PyTorch (out, in) layout:
//   out[i,o] = sum_k inp[i,k] * w[o,k] + bias[o]          (bias may be NULL)
// Backward:
//   dinp[i,k]  = sum_o dout[i,o] * w[o,k]                 (written)
//   dw[o,k]   += sum_i dout[i,o] * inp[i,k]               (accumulated)
//   dbias[o]  += sum_i dout[i,o]                          (accumulated; may be NULL)
//
// Speed: the forward works on tiles of MM_TILE input rows so each weight row is read
// once per tile, and the dot product over k (contiguous in both operands) is an
// `omp simd` reduction: its summation order is fixed at compile time, so the result
// depends on neither the thread count nor the tile a row lands in (a partial last
// tile repeats its first row and drops those results). The backward uses axpy-style
// inner loops over contiguous k; `omp simd` there only tells the compiler that the
// rows do not overlap (no reassociation is involved).
// Parallelism: forward and dinp over rows, dw/dbias over output channels (each dw
// row owned by one thread, summed over rows in order) — deterministic by construction.
#include "model/ops/core/core.h"

#define MM_TILE 4

void cpu_matmul_forward(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC) {
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < N; i0 += MM_TILE) {
        int nr = i0 + MM_TILE <= N ? MM_TILE : N - i0;
        const real *x0 = inp + (size_t)i0 * C;
        const real *x1 = inp + (size_t)(i0 + (nr > 1 ? 1 : 0)) * C;
        const real *x2 = inp + (size_t)(i0 + (nr > 2 ? 2 : 0)) * C;
        const real *x3 = inp + (size_t)(i0 + (nr > 3 ? 3 : 0)) * C;
        for (int o = 0; o < OC; o++) {
            const real *wo = w + (size_t)o * C;
            real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int k = 0; k < C; k++) {
                s0 += x0[k] * wo[k];
                s1 += x1[k] * wo[k];
                s2 += x2[k] * wo[k];
                s3 += x3[k] * wo[k];
            }
            real bo = bias ? bias[o] : 0;
            real s[MM_TILE] = {s0, s1, s2, s3};
            for (int r = 0; r < nr; r++) out[(size_t)(i0 + r) * OC + o] = s[r] + bo;
        }
    }
}

void cpu_matmul_backward(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w,
                         int N, int C, int OC) {
    // dinp = dout @ w: rows in tiles so each w row is read once per tile
#pragma omp parallel for schedule(static)
    for (int i0 = 0; i0 < N; i0 += MM_TILE) {
        int nr = i0 + MM_TILE <= N ? MM_TILE : N - i0;
        for (int r = 0; r < nr; r++) {
            real *dx = dinp + (size_t)(i0 + r) * C;
            for (int k = 0; k < C; k++) dx[k] = 0;
        }
        for (int o = 0; o < OC; o++) {
            const real *wo = w + (size_t)o * C;
            for (int r = 0; r < nr; r++) {
                real d = dout[(size_t)(i0 + r) * OC + o];
                real *dx = dinp + (size_t)(i0 + r) * C;
#pragma omp simd
                for (int k = 0; k < C; k++) dx[k] += d * wo[k];
            }
        }
    }
    // dw += dout^T @ inp, dbias += column sums: output channels in tiles, rows in order
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += MM_TILE) {
        int no = o0 + MM_TILE <= OC ? MM_TILE : OC - o0;
        double sb[MM_TILE] = {0};
        for (int i = 0; i < N; i++) {
            const real *x = inp + (size_t)i * C;
            for (int r = 0; r < no; r++) {
                real d = dout[(size_t)i * OC + o0 + r];
                real *g = dw + (size_t)(o0 + r) * C;
#pragma omp simd
                for (int k = 0; k < C; k++) g[k] += d * x[k];
                sb[r] += d;
            }
        }
        if (dbias)
            for (int r = 0; r < no; r++) dbias[o0 + r] += (real)sb[r];
    }
}
