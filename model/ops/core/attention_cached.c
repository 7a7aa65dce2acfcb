// Cached (decode-time) causal attention: the last Tq rows of a KV cache of Tc packed qkv
// rows (Tc, 3C) attend to the rows up to themselves. Row i of the result is exactly row
// Tc-Tq+i of cpu_attention_forward over the same qkv: both call cpu_attention_row, so
// decoding reproduces the full forward.
#include "base/util.h"
#include "model/ops/core/core.h"

void cpu_attention_cached(real *out, const real *qkv, int Tq, int Tc, int C, int NH) {
    if (NH <= 0 || C % NH) die("attention_cached: C = %d is not a multiple of the head count %d", C, NH);
    if (Tq < 1 || Tq > Tc) die("attention_cached: %d query rows for a cache of %d rows", Tq, Tc);
    const int hs = C / NH;
#pragma omp parallel for collapse(2) schedule(static)
    for (int r = 0; r < Tq; r++)
        for (int h = 0; h < NH; h++)
            cpu_attention_row(out + (size_t)r * C + (size_t)h * hs, qkv + (size_t)h * hs, Tc - Tq + r, C, hs);
}
