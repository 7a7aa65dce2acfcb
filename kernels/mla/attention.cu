// attention_qkv_forward / attention_qkv_backward of the MLA family on CUDA
// (model/ops/mla/mla.h; docs/hybrid.md, "Causal attention with a stored logsumexp"): checks
// the layout as the CPU op does, then runs the tensor-core kernels (attention_mma.cu) where
// the head widths and strides allow, else the SIMT kernels (attention_simt.cu).
// Types: q, k, v, out, dout, dq, dk, dv bf16; lse (B, NH, T) fp32; the backward's D_i =
// dO_i . out_i (B, NH, T) fp32 in the backend's scratch.
// HYBRID_MLA_ATTN=simt forces the SIMT path (tests/gpu/test_mla.c runs both).
// HYBRID_ATTN=cudnn: cuDNN's flash attention first (kernels/core/attention_cudnn.cu), these
// kernels for the shapes it refuses.
#include <stdlib.h>
#include <string.h>

#include "kernels/mla/attention.cuh"

static void check_layout(const AttnLayout *L, int backward, const char *who) {
    if (L->B <= 0 || L->T <= 0 || L->NH <= 0 || L->dqk <= 0 || L->dv <= 0)
        die("%s: bad shape B=%d T=%d NH=%d dqk=%d dv=%d", who, L->B, L->T, L->NH, L->dqk, L->dv);
    if (backward && L->NH > 1 && (L->q_head == 0 || L->k_head == 0 || L->v_head == 0))
        die("%s: a head stride of 0 (shared head) is not supported; materialise the shared part", who);
    if ((long long)L->B * L->NH > 65535) die("%s: B*NH = %d is above the grid's 65535", who, L->B * L->NH);
}

static int force_simt(void) {
    static const char *const names[] = {"mma", "simt"};
    return env_choice("HYBRID_MLA_ATTN", names, 2);
}

// D[b, h, t] = dO . out of row b*T + t, head h (any dv): one warp per (row, head)
__global__ void mla_attn_d_kernel(float *D, const bf16 *dout, const bf16 *out, int B, int T, int NH, int dv) {
    const size_t idx = (size_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (idx >= (size_t)B * T * NH) return;  // whole warps
    const int lane = threadIdx.x & 31, h = (int)(idx % NH);
    const size_t row = idx / NH;
    const bf16 *x = dout + row * NH * dv + (size_t)h * dv, *y = out + row * NH * dv + (size_t)h * dv;
    float s = 0.f;
    for (int d = lane; d < dv; d += 32) s += __bfloat162float(x[d]) * __bfloat162float(y[d]);
    s = warp_sum(s);
    const int b = (int)(row / T), t = (int)(row % T);
    if (lane == 0) D[((size_t)b * NH + h) * T + t] = s;
}

extern "C" void cuda_attention_qkv_forward(real *out, real *lse, const real *q, const real *k, const real *v,
                                           const AttnLayout *L) {
    PROFILE("mla_attention_fwd");
    check_layout(L, 0, "cuda_attention_qkv_forward");
    if (cudnn_attention_selected() && cudnn_attention_forward(out, lse, q, k, v, L)) return;
    const AttnDev a = attn_dev(L);
    if (!force_simt() && mla_attn_mma_forward((bf16 *)out, (float *)lse, (const bf16 *)q, (const bf16 *)k,
                                              (const bf16 *)v, a))
        return;
    if (L->dqk > MLA_SIMT_MAXD || L->dv > MLA_SIMT_MAXD)
        die("cuda_attention_qkv_forward: head widths dqk=%d dv=%d above %d", L->dqk, L->dv, MLA_SIMT_MAXD);
    mla_attn_simt_forward((bf16 *)out, (float *)lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, a);
}

extern "C" void cuda_attention_qkv_backward(real *dq, real *dk, real *dv, const real *dout, const real *q,
                                            const real *k, const real *v, const real *out, const real *lse,
                                            const AttnLayout *L) {
    PROFILE("mla_attention_bwd");
    check_layout(L, 1, "cuda_attention_qkv_backward");
    if (cudnn_attention_selected() && cudnn_attention_backward(dq, dk, dv, dout, q, k, v, out, lse, L)) return;
    const AttnDev a = attn_dev(L);
    const size_t rows = (size_t)L->B * L->T * L->NH;
    float *D = (float *)scratch_get(rows * sizeof(float));
    launch_kernel(mla_attn_d_kernel, dim3((unsigned)((rows + 7) / 8)), dim3(256), 0, D, (const bf16 *)dout,
                  (const bf16 *)out, L->B, L->T, L->NH, L->dv);
    if (!force_simt() && mla_attn_mma_backward((bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                                               (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,
                                               (const float *)lse, D, a))
        return;
    if (L->dqk > MLA_SIMT_MAXD || L->dv > MLA_SIMT_MAXD)
        die("cuda_attention_qkv_backward: head widths dqk=%d dv=%d above %d", L->dqk, L->dv, MLA_SIMT_MAXD);
    mla_attn_simt_backward((bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k,
                           (const bf16 *)v, (const float *)lse, D, a);
}
