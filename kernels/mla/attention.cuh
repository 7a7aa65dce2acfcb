// Shared declarations of the MLA family's attention (attention.cu dispatches; the tensor-core
// kernels are in attention_mma.cu, the any-size SIMT kernels in attention_simt.cu).
// Layout (model/ops/mla/mla.h, AttnLayout): element (row r = b*T + t, head h, i) of q is
// q[r*q_row + h*q_head + i] (k, v likewise); out (B*T, NH*dv) contiguous, head-major;
// lse and D (B, NH, T) fp32.
#ifndef HYBRID_KERNELS_MLA_ATTENTION_CUH
#define HYBRID_KERNELS_MLA_ATTENTION_CUH

#include "kernels/common.cuh"

// AttnLayout as the kernels take it (by value): ints and float scalars
struct AttnDev {
    int B, T, NH, dqk, dv;
    int q_row, q_head, k_row, k_head, v_row, v_head;
    float scale;  // softmax scale
    float sl2;    // scale * log2(e): scores in the base-2 domain
};

static inline AttnDev attn_dev(const AttnLayout *L) {
    AttnDev a = {L->B,     L->T,      L->NH,     L->dqk,    L->dv,          L->q_row,
                 L->q_head, L->k_row, L->k_head, L->v_row, L->v_head, (float)L->scale,
                 (float)(L->scale * 1.4426950408889634)};
    return a;
}

// The tensor-core path (attention_mma.cu): returns 0 (nothing launched) where it does not apply
// (head widths above 192 / 128, widths or strides not multiples of 8, pointers not 16-byte
// aligned); the caller then runs the SIMT path.
int mla_attn_mma_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const AttnDev &a);
int mla_attn_mma_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                          const bf16 *v, const float *lse, const float *D, const AttnDev &a);

// The SIMT path (attention_simt.cu): any head widths up to MLA_SIMT_MAXD, any strides.
#define MLA_SIMT_MAXD 256
void mla_attn_simt_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const AttnDev &a);
void mla_attn_simt_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                            const bf16 *v, const float *lse, const float *D, const AttnDev &a);

#endif
