// The MLA family (mixer 'M', Multi-head Latent Attention; docs/hybrid.md, "MLA token mixer
// (M)"): causal softmax attention with separate strided q, k, v and d_qk != d_v, RoPE, the MLA
// pieces that are not matmuls (kv split, per-head k assembly, the absorbed decode form) and
// the sigmoid output gate of gated MLA. The projections are core matmuls and the latent norm
// is the norms-and-GLU family's RMSNorm.
//
// CPU reference: model/ops/mla/*.c. CUDA: kernels/mla/ (ported and checked on the CPU emulator
// by tests/gpu/test_mla.c; not yet handed out: kernels/backend_cuda.cu leaves b.mla NULL, so 'M'
// layers are still refused on --device cuda, until that test has passed on a GPU). Contracts as
// every family (model/backend.h).
//
// Shapes: r = kv_lora_rank, dn = qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim,
// dqk = dn + dr. Decompressed forward (docs/hybrid.md, "MLA forward (decompressed form)"),
// in graph order (model/mixer_mla.c):
//   kv (N, r+dr) = x W_kva^T                  [core matmul]
//   c (N, r), kr (N, dr) = split(kv)          [mla_split_kv_forward]
//   (RoPE ablation: kr rotated with NH = 1; q's rope slices rotated per head)
//   chat = RMSNorm(c) (eps 1e-6)              [rmsnorm_forward]
//   e (N, NH*(dn+dv)) = chat W_kvb^T          [core matmul], per head [k_nope | v]
//   k (N, NH*dqk) = per head [k_nope,h | kr]  [mla_build_k_forward]
//   attention with q (N, NH*dqk) (q_row NH*dqk, q_head dqk), k (same strides), and v = e + dn
//   (v_row NH*(dn+dv), v_head dn+dv), scale 1/sqrt(dqk).
// The backward mirrors it: attention_qkv_backward writes dq, dk and dv straight into the v
// columns of de; mla_build_k_backward writes the k_nope columns of de and dkr (the sum over
// heads; docs/hybrid.md, "MLA backward, in order", step 4); mla_split_kv_backward assembles
// dkv = [dc | dkr].
#ifndef HYBRID_OPS_MLA_H
#define HYBRID_OPS_MLA_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/op_table.h"

// Shape and strides of a causal softmax attention with separate, strided q, k, v and
// d_qk != d_v (docs/hybrid.md, "MLA forward (decompressed form)", step 3, and "Causal
// attention with a stored logsumexp"). B sequences of T tokens (token row r = b*T + t), NH
// heads. Element (row r, head h, i):
//   q[r*q_row + h*q_head + i], i < dqk;  k[r*k_row + h*k_head + i], i < dqk;
//   v[r*v_row + h*v_head + i], i < dv.
// So q/k/v may be slices of one packed projection (pass the slice's first element and the
// packed row width as *_row). A head stride of 0 shares one head among all heads (MQA).
// out (B*T, NH*dv) is contiguous and head-major (head h in columns h*dv .. h*dv+dv-1);
// lse (B, NH, T) = log-sum-exp of each scaled score row (saved for the backward).
typedef struct {
    int B, T, NH;
    int dqk, dv;
    int q_row, q_head;
    int k_row, k_head;
    int v_row, v_head;
    double scale;  // softmax scale, normally 1/sqrt(dqk) (MLA: 1/sqrt(d_nope + d_rope))
} AttnLayout;

typedef struct MlaOps {
    // S_ij = scale q_i . k_j (j <= i, causal), lse_i = log sum_j e^{S_ij},
    // out_i = sum_j e^{S_ij - lse_i} v_j; strides in L; out (B*T, NH*dv); lse (B, NH, T) saved.
    void (*attention_qkv_forward)(real *out, real *lse, const real *q, const real *k, const real *v,
                                  const AttnLayout *L);
    // Flash-style backward (docs/hybrid.md, "Causal attention with a stored logsumexp"),
    // probabilities recomputed from lse; D_i = dout_i . out_i.
    // dq, dk, dv are WRITTEN with the strides of q, k, v (only the addressed elements: the
    // other columns of a packed gradient buffer are left alone). A head stride of 0 for k
    // or v is not allowed here (the shared-key gradient would need a sum over heads: use a
    // materialised k, mla_build_k_*).
    void (*attention_qkv_backward)(real *dq, real *dk, real *dv, const real *dout, const real *q, const real *k,
                                   const real *v, const real *out, const real *lse, const AttnLayout *L);
    // RoPE, interleaved pairs (DSV3 layout; docs/hybrid.md, "RoPE on the decoupled slice"):
    // rotates x[r*row + h*head + 2i], x[r*row + h*head + 2i+1] (i < d/2, d even, heads h < NH)
    // of row r = b*T + t by the angle (pos0 + t) * base^(-2i/d):
    // y0 = x0 cos - x1 sin, y1 = x0 sin + x1 cos.
    // out == inp (in place) allowed. NH = 1 for the shared MLA rope key. Nothing saved.
    void (*rope_forward)(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                         double base);
    // dinp = R(-angle) dout (the transpose rotation, written); dinp == dout allowed
    void (*rope_backward)(real *dinp, const real *dout, int B, int T, int NH, int d, int row, int head, int pos0,
                          double base);
    // kv (N, r+dr) = [c | kr] -> c (N, r), kr (N, dr)
    void (*mla_split_kv_forward)(real *c, real *kr, const real *kv, int N, int r, int dr);
    // dkv (N, r+dr) = [dc | dkr]  (written; a concatenation)
    void (*mla_split_kv_backward)(real *dkv, const real *dc, const real *dkr, int N, int r, int dr);
    // k[n, h, :] = [e[n, h, 0:dn] | kr[n, :]] with e (N, NH, dn+dv), k (N, NH, dn+dr)
    // (kr shared by all heads)
    void (*mla_build_k_forward)(real *k, const real *e, const real *kr, int N, int NH, int dn, int dv, int dr);
    // de[n, h, 0:dn] = dk[n, h, 0:dn] (written; de[n, h, dn:] is NOT touched: the attention
    // backward writes it); dkr[n, :] = sum_h dk[n, h, dn:] (written)
    void (*mla_build_k_backward)(real *de, real *dkr, const real *dk, int N, int NH, int dn, int dv, int dr);
    // Absorbed (MQA-style) attention for decoding from the latent cache (docs/hybrid.md,
    // "Absorbed (MQA-style) decode form"), one sequence. Forward only.
    //   cache (Tc, r+dr): row t = [chat_t | kr_t] (kr already rotated for the RoPE variant).
    //   q (Nq, NH*dqk): per head [q_nope | q_rope]; query row i is the token at position
    //   Tc - Nq + i and attends cache rows 0 .. Tc - Nq + i.
    //   w_kvb (NH*(dn+dv), r) = kv_b_proj; rows h*(dn+dv) + [0, dn) are W_UK,h, the next dv
    //   rows W_UV,h. qt_h = [W_UK,h^T q_nope,h | q_rope,h] (r+dr); score(i, t) = scale qt_h . cache_t;
    //   ctx_h = sum_t p(i, t) chat_t (r); out[i, h*dv:(h+1)*dv] = W_UV,h ctx_h.
    // out (Nq, NH*dv), the layout of attention_qkv_forward's output; equals the decompressed
    // form up to rounding.
    void (*mla_absorbed_attention)(real *out, const real *q, const real *cache, const real *w_kvb, int Nq, int Tc,
                                   int NH, int dn, int dr, int dv, int r, double scale);
    // Sigmoid output gate (docs/hybrid.md, "Sigmoid output gate"; in gated MLA,
    // docs/hybrid.md, "MLA forward (decompressed form)", step 5): y = o * sigmoid(z),
    // elementwise over n values
    void (*sigmoid_gate_forward)(real *y, const real *o, const real *z, size_t n);
    // do = dy sigmoid(z); dz = dy o sigmoid(z) (1 - sigmoid(z))   (both written)
    void (*sigmoid_gate_backward)(real *d_o, real *dz, const real *dy, const real *o, const real *z, size_t n);
} MlaOps;

#define MLA_OPS(X)                                                                                 \
    X(attention_qkv_forward) X(attention_qkv_backward) X(rope_forward) X(rope_backward)              \
    X(mla_split_kv_forward) X(mla_split_kv_backward) X(mla_build_k_forward) X(mla_build_k_backward) \
    X(mla_absorbed_attention) X(sigmoid_gate_forward) X(sigmoid_gate_backward)

#define MLA_DECLARE_CPU(member) OP_DECLARE(MlaOps, cpu_, member)
MLA_OPS(MLA_DECLARE_CPU)
const MlaOps *cpu_mla_ops(void);

#endif
