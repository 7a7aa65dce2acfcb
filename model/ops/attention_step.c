// Decode-time causal attention of one new row against a KV cache: exactly row T-1 of
// cpu_attention_forward (attention.c) for the same packed qkv (T, 3C), computed with
// the same operations in the same order, so decoding reproduces the full forward.
#include <math.h>

#include "model/ops/cpu_mixer_ops.h"
#include "model/util.h"

static inline real dot(const real *a, const real *b, int n) {
    real s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

void cpu_attention_step(real *out, const real *qkv, int T, int C, int NH) {
    if (NH <= 0 || C % NH) die("attention_step: C = %d is not a multiple of the head count %d", C, NH);
    if (T < 1) die("attention_step: empty cache");
    const int hs = C / NH, i = T - 1;
    const double scale = 1.0 / sqrt((double)hs);
    const size_t C3 = 3 * (size_t)C;
    for (int h = 0; h < NH; h++) {
        const real *base = qkv + (size_t)h * hs, *q = base + i * C3;
        double s[T], m = -INFINITY;
        for (int j = 0; j <= i; j++) {
            s[j] = scale * dot(q, base + j * C3 + C, hs);
            if (s[j] > m) m = s[j];
        }
        double acc[hs];
        for (int c = 0; c < hs; c++) acc[c] = 0.0;
        double sum = 0.0;
        for (int j = 0; j <= i; j++) {
            double e = exp(s[j] - m);
            const real *v = base + j * C3 + 2 * C;
            sum += e;
            for (int c = 0; c < hs; c++) acc[c] += e * v[c];
        }
        real *o = out + (size_t)h * hs;
        for (int c = 0; c < hs; c++) o[c] = (real)(acc[c] / sum);
    }
}
