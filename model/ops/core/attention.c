// Causal multi-head softmax attention on packed qkv (B, T, 3C) = [q | k | v].
// Head h uses channels h*hs .. h*hs+hs-1 of q, k and v (hs = C/NH). For each query i:
//   s_ij = (q_i . k_j) / sqrt(hs)          for j <= i (causal)
//   lse_i = log sum_j exp(s_ij),  P_ij = exp(s_ij - lse_i),  O_i = sum_j P_ij v_j
// The forward saves lse (B, NH, T). The backward recomputes P from it and uses
// (flash-attention style, dO = dout):
//   D_i   = dO_i . O_i               (= sum_j P_ij dP_ij)
//   dP_ij = dO_i . v_j
//   dS_ij = P_ij (dP_ij - D_i)
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij dO_i
// No (T, T) buffer: the forward keeps one score row on the stack (two passes over j:
// scores and their max, then exp / sum / weighted values); the backward recomputes
// each score. Dot products are in `real` (an `omp simd` reduction: vectorised, with a
// summation order fixed at compile time); softmax max, sums and lse are in double.
#include <math.h>

#include "model/ops/core/core.h"
#include "base/util.h"

static inline real dot(const real *a, const real *b, int n) {
    real s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

// One output row of causal attention for one head: o = softmax_j<=i(scale q_i . k_j) v_j
// with scale 1/sqrt(hs). base points at q of token 0 of this head inside packed (T, 3C) qkv.
// Returns the row's log-sum-exp. Shared by the forward and the decode step
// (attention_cached.c), so decoding reproduces the forward exactly.
double cpu_attention_row(real *o, const real *base, int i, int C, int hs) {
    const double scale = 1.0 / sqrt((double)hs);
    const size_t C3 = 3 * (size_t)C;
    const real *q = base + i * C3;
    // pass 1: the scores of row i and their maximum
    double s[i + 1], m = -INFINITY;
    for (int j = 0; j <= i; j++) {
        s[j] = scale * dot(q, base + j * C3 + C, hs);
        if (s[j] > m) m = s[j];
    }
    // pass 2: softmax denominator and the weighted sum of values
    double acc[hs];
    for (int c = 0; c < hs; c++) acc[c] = 0.0;
    double sum = 0.0;
    for (int j = 0; j <= i; j++) {
        double e = exp(s[j] - m);
        const real *v = base + j * C3 + 2 * C;
        sum += e;
        for (int c = 0; c < hs; c++) acc[c] += e * v[c];
    }
    for (int c = 0; c < hs; c++) o[c] = (real)(acc[c] / sum);
    return m + log(sum);
}

void cpu_attention_forward(real *out, real *lse, const real *qkv, int B, int T, int C, int NH) {
    if (NH <= 0 || C % NH) die("attention: C = %d is not a multiple of the head count %d", C, NH);
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                const real *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;  // q of token 0, head h
                real *o = out + ((size_t)b * T + i) * C + (size_t)h * hs;
                lse[((size_t)b * NH + h) * T + i] = (real)cpu_attention_row(o, base, i, C, hs);
            }
        }
    }
}

void cpu_attention_backward(real *dqkv, const real *dout, const real *qkv, const real *out, const real *lse,
                            int B, int T, int C, int NH) {
    if (NH <= 0 || C % NH) die("attention: C = %d is not a multiple of the head count %d", C, NH);
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    size_t C3 = 3 * (size_t)C;
    // Each (b, h) is one work item: it owns the q, k and v gradient slices of its head
    // and visits queries i and keys j <= i in a fixed order (deterministic).
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const real *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
            real *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
            for (int t = 0; t < T; t++)
                for (int c = 0; c < 3 * C; c += C)
                    for (int e = 0; e < hs; e++) dbase[t * C3 + c + e] = 0;
            for (int i = 0; i < T; i++) {
                const real *q = base + i * C3;
                const real *dO = dout + ((size_t)b * T + i) * C + (size_t)h * hs;
                const real *O = out + ((size_t)b * T + i) * C + (size_t)h * hs;
                double l = lse[((size_t)b * NH + h) * T + i];
                double D = dot(dO, O, hs);
                double dq[hs];
                for (int c = 0; c < hs; c++) dq[c] = 0.0;
                for (int j = 0; j <= i; j++) {
                    const real *k = base + j * C3 + C, *v = base + j * C3 + 2 * C;
                    real *dk = dbase + j * C3 + C, *dv = dbase + j * C3 + 2 * C;
                    double p = exp(scale * dot(q, k, hs) - l);
                    double dp = dot(dO, v, hs);
                    double ds = p * (dp - D);
#pragma omp simd
                    for (int c = 0; c < hs; c++) {
                        dq[c] += scale * ds * k[c];
                        dk[c] += (real)(scale * ds * q[c]);
                        dv[c] += (real)(p * dO[c]);
                    }
                }
                real *dqo = dbase + i * C3;
                for (int c = 0; c < hs; c++) dqo[c] = (real)dq[c];
            }
        }
    }
}
