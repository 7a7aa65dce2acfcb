// RoPE on the decoupled slice, interleaved pairs (model/ops/mla/mla.h rope_forward /
// rope_backward; docs/hybrid.md, "RoPE on the decoupled slice"): pair i of the d-wide slice of
// head h in row r = b*T + t, x[r*row + h*head + 2i], x[... + 2i+1], rotated by
// phi = (pos0 + t) base^(-2i/d); the backward rotates by -phi (the transpose).
// One thread per (row, pair); it rotates that pair in every head (one angle, NH pairs).
// The angle and its sine/cosine in double, as the CPU op: at positions of tens of thousands
// an fp32 angle would be off by ~1e-3 rad; the op is tiny next to the attention.
// In place allowed: a thread reads its pair before writing it, and no other thread touches it.
#include <math.h>

#include "kernels/common.cuh"

__global__ void mla_rope_kernel(bf16 *out, const bf16 *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                                 double base, double sign) {
    const int half = d / 2;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * half) return;
    const int i = (int)(idx % half);
    const size_t r = idx / half;
    const int t = (int)(r % T);
    const double phi = (double)(pos0 + t) * pow(base, -2.0 * i / d);
    const double cs = cos(phi), sn = sign * sin(phi);
    for (int h = 0; h < NH; h++) {
        const size_t at = r * row + (size_t)h * head + 2 * i;
        const double x0 = __bfloat162float(inp[at]), x1 = __bfloat162float(inp[at + 1]);
        out[at] = __float2bfloat16((float)(x0 * cs - x1 * sn));
        out[at + 1] = __float2bfloat16((float)(x0 * sn + x1 * cs));
    }
}

static void rope_apply(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                       double base, double sign, const char *who) {
    if (d < 2 || d % 2) die("%s: the rotated width %d must be even", who, d);
    if (B <= 0 || T <= 0 || NH <= 0) return;
    const size_t n = (size_t)B * T * (d / 2);
    launch_kernel(mla_rope_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, (bf16 *)out, (const bf16 *)inp,
                  B, T, NH, d, row, head, pos0, base, sign);
}

extern "C" void cuda_rope_forward(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                                  double base) {
    PROFILE("mla_rope_fwd");
    rope_apply(out, inp, B, T, NH, d, row, head, pos0, base, 1.0, "cuda_rope_forward");
}

extern "C" void cuda_rope_backward(real *dinp, const real *dout, int B, int T, int NH, int d, int row, int head,
                                   int pos0, double base) {
    PROFILE("mla_rope_bwd");
    rope_apply(dinp, dout, B, T, NH, d, row, head, pos0, base, -1.0, "cuda_rope_backward");
}
