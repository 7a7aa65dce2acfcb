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
// tile of 2 or 3 rows repeats its first row and drops those results; a tile of one row
// runs one accumulator, vectorised the same way). The backward uses axpy-style
// inner loops over contiguous k; `omp simd` there only tells the compiler that the
// rows do not overlap (no reassociation is involved).
// Parallelism: the forward over (row tile, output channel) pairs, dinp over rows, dw/dbias
// over output channels (each dw row owned by one thread, summed over rows in order) —
// deterministic by construction.
#include "model/ops/core/core.h"

#define MM_TILE 4

// One output column o of a tile of rows: the dot products of up to MM_TILE input rows with
// w's row o. A full tile runs four accumulators over k in one `omp simd` loop; a one-row
// tile (decoding: one token at a time) runs the same loop with one accumulator, which gcc
// vectorises lane for lane the same way, so a row gets the same bits alone or in a tile
// (tests/test_ops_grad.c checks it). A partial tile of 2 or 3 rows repeats its first row.
static inline void dot_tile(real *s, const real *const *x, int nr, const real *wo, int C) {
    if (nr == 1) {
        real s0 = 0;
        const real *x0 = x[0];
#pragma omp simd reduction(+ : s0)
        for (int k = 0; k < C; k++) s0 += x0[k] * wo[k];
        s[0] = s0;
        return;
    }
    real s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    const real *x0 = x[0], *x1 = x[1], *x2 = x[2], *x3 = x[3];
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int k = 0; k < C; k++) {
        s0 += x0[k] * wo[k];
        s1 += x1[k] * wo[k];
        s2 += x2[k] * wo[k];
        s3 += x3[k] * wo[k];
    }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
}

void cpu_matmul_forward(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC) {
    // (tile, output column) pairs in parallel: few rows (decoding) still use every thread
#pragma omp parallel for collapse(2) schedule(static)
    for (int i0 = 0; i0 < N; i0 += MM_TILE) {
        for (int o = 0; o < OC; o++) {
            const int nr = i0 + MM_TILE <= N ? MM_TILE : N - i0;
            const real *x[MM_TILE];
            for (int r = 0; r < MM_TILE; r++) x[r] = inp + (size_t)(i0 + (r < nr ? r : 0)) * C;
            real s[MM_TILE];
            dot_tile(s, x, nr, w + (size_t)o * C, C);
            const real bo = bias ? bias[o] : 0;
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
