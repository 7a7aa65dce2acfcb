// Decode-time causal attention of one new row against a KV cache: exactly row T-1 of
// cpu_attention_forward (attention.c) for the same packed qkv (T, 3C): both call
// cpu_attention_row, so decoding reproduces the full forward.
#include "model/ops/cpu_mixer_ops.h"
#include "model/ops/ops_cpu.h"
#include "base/util.h"

void cpu_attention_step(real *out, const real *qkv, int T, int C, int NH) {
    if (NH <= 0 || C % NH) die("attention_step: C = %d is not a multiple of the head count %d", C, NH);
    if (T < 1) die("attention_step: empty cache");
    const int hs = C / NH;
    for (int h = 0; h < NH; h++) cpu_attention_row(out + (size_t)h * hs, qkv + (size_t)h * hs, T - 1, C, hs);
}
