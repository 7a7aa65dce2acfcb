// The GPT-2 core family: token/position embedding, LayerNorm, the linear layer (matmul),
// causal softmax attention on packed qkv, GELU, residual adds, softmax cross-entropy and
// the reductions the trainer needs. Every backend has this family (model/backend.h).
//
// CPU reference: model/ops/core/*.c (plain loops over `real`). CUDA: kernels/core/*.cu.
// Contracts (as every family, model/backend.h): forwards write their outputs and what
// their backward needs; backwards WRITE input gradients and ACCUMULATE (+=) parameter
// gradients. Shapes: N = rows (B*T tokens), C = channels; weights use PyTorch's (out, in)
// layout. Per-row statistics (mean, rstd, lse, losses) are statistics elements
// (Backend.stat_size: `real` on the CPU, fp32 on CUDA).
// The math of each op is in docs/hybrid.md, "Small ops" and in the comment at the top of
// its CPU file.
#ifndef HYBRID_OPS_CORE_H
#define HYBRID_OPS_CORE_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/op_table.h"

typedef struct CoreOps {
    // out[b,t,:] = wte[tok[b,t],:] + (wpe ? wpe[t,:] : 0)
    void (*embed_forward)(real *out, const int *tokens, const real *wte, const real *wpe, int B, int T, int C);
    // dwte[tok[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:] (dwpe may be NULL)
    void (*embed_backward)(real *dwte, real *dwpe, const real *dout, const int *tokens, int B, int T, int C);

    // y = (x - mean) * rstd * w + b  (b may be NULL); saves mean and rstd (N each)
    void (*layernorm_forward)(real *out, real *mean, real *rstd, const real *inp, const real *w, const real *b,
                              int N, int C, real eps);
    void (*layernorm_backward)(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w,
                               const real *mean, const real *rstd, int N, int C);

    // out (N, OC) = inp (N, C) @ w^T (w is (OC, C)) + bias (OC, may be NULL)
    void (*matmul_forward)(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC);
    // dinp = dout @ w (written); dw += dout^T @ inp; dbias += sum_rows dout (dbias may be NULL)
    void (*matmul_backward)(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w,
                            int N, int C, int OC);

    // Causal multi-head softmax attention on packed qkv (B, T, 3C) laid out [q | k | v],
    // head h using channels h*hs .. (h+1)*hs-1 of each, scale 1/sqrt(hs).
    // out (B, T, C); lse (B, NH, T) = log-sum-exp of each score row, saved for the backward,
    // which recomputes the probabilities from it (flash-attention style).
    void (*attention_forward)(real *out, real *lse, const real *qkv, int B, int T, int C, int NH);
    // dqkv written (B, T, 3C)
    void (*attention_backward)(real *dqkv, const real *dout, const real *qkv, const real *out, const real *lse,
                               int B, int T, int C, int NH);
    // Cached (decode) form, one sequence: qkv (Tc, 3C) holds the packed rows of positions
    // 0 .. Tc-1 (a KV cache); out (Tq, C) = rows Tc-Tq .. Tc-1 of attention_forward over the
    // same qkv (each of the last Tq rows attends causally to the rows up to itself).
    void (*attention_cached)(real *out, const real *qkv, int Tq, int Tc, int C, int NH);

    // tanh-approximation GELU, elementwise; dinp written
    void (*gelu_forward)(real *out, const real *inp, size_t n);
    void (*gelu_backward)(real *dinp, const real *inp, const real *dout, size_t n);

    // out = a + b
    void (*add_forward)(real *out, const real *a, const real *b, size_t n);
    // acc += x  (gradient accumulation along the residual stream)
    void (*add_inplace)(real *acc, const real *x, size_t n);

    // Softmax cross-entropy over rows of logits (N, Vp); only the first V columns are
    // real tokens, the padding columns never win and never count. targets[i] < 0 means
    // "ignore this row" (loss 0, gradient 0).
    void (*crossentropy_forward)(real *losses, const real *logits, const int *targets, int N, int V, int Vp);
    // dlogits (N, Vp) written: (softmax - onehot) * dloss for rows with targets[i] >= 0,
    // 0 for ignored rows; padding columns 0. dlogits may alias logits (in place).
    void (*crossentropy_backward)(real *dlogits, const real *logits, const int *targets, real dloss, int N, int V,
                                  int Vp);
    // Both at once, for training, where dloss is known at forward time: losses as
    // crossentropy_forward, then dlogits as crossentropy_backward of the same logits (the
    // same formulas, so the same results). dlogits may alias logits (in place); then the
    // logits are gone afterwards. A backend may fuse the two into one pass over each row
    // (CUDA: kernels/core/crossentropy.cu); the CPU runs the two ops.
    void (*crossentropy_forward_backward)(real *losses, real *dlogits, const real *logits, const int *targets,
                                          real dloss, int N, int V, int Vp);

    // Accumulated in double: the sum of a statistics buffer (stat_size elements: the
    // per-row losses), and the sum of squares of elements (elem_size: the gradients, for
    // the global norm).
    double (*sum)(const real *x, size_t n);
    double (*sum_squares)(const real *x, size_t n);
    // x *= s
    void (*scale)(real *x, real s, size_t n);

    // ---- optional fused ops (not in CORE_OPS): NULL means the graph runs the separate ops ----
    // act = gelu(pre), pre = inp @ w^T + bias (bias may be NULL): matmul_forward then
    // gelu_forward, in one go (both act and pre written)
    void (*matmul_gelu_forward)(real *act, real *pre, const real *inp, const real *w, const real *bias, int N, int C,
                                int OC);
    // matmul_backward of a layer whose input is act = gelu(pre), with gelu_backward folded
    // in: dpre = (dout @ w) * gelu'(pre) (written), dw += dout^T @ act, dbias += sum_rows dout;
    // and, when dpre_bias is given (C values), dpre_bias += sum_rows dpre: the bias gradient
    // of the layer that made pre, so that its matmul_backward gets no dbias (the GELU MLP)
    void (*matmul_backward_gelu)(real *dpre, real *dw, real *dbias, real *dpre_bias, const real *dout,
                                 const real *act, const real *w, const real *pre, int N, int C, int OC);
    // res = a + b (written, n = N*C), then layernorm_forward(out, mean, rstd, res, w, bias)
    // in one pass (the norm sees res as stored)
    void (*add_layernorm_forward)(real *res, real *out, real *mean, real *rstd, const real *a, const real *b,
                                  const real *w, const real *bias, int N, int C, real eps);
    // layernorm_backward with the input gradient ACCUMULATED into dres (the residual
    // stream's gradient): dres += dinp; dw, db accumulated as layernorm_backward; and,
    // when dsum is given, dsum (C) += sum_rows dres as updated: the bias gradient of the
    // linear layer that reads dres as its dout next, summed where dres is made (the graph
    // then passes that layer no dbias; model.h, Model.dout_bias_summed)
    void (*layernorm_backward_add)(real *dres, real *dw, real *db, real *dsum, const real *dout, const real *inp,
                                   const real *w, const real *mean, const real *rstd, int N, int C);
    // matmul_backward with the input gradient ACCUMULATED: dinp += dout @ w (an input
    // gradient that already holds another branch's contribution, e.g. the several
    // projections that read one normed input); dw += dout^T @ inp, dbias += sum_rows dout
    // (dbias may be NULL) as matmul_backward
    void (*matmul_backward_acc)(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w,
                                int N, int C, int OC);
} CoreOps;

// The required members (op_table.h).
#define CORE_OPS(X)                                                                                  \
    X(embed_forward) X(embed_backward) X(layernorm_forward) X(layernorm_backward) X(matmul_forward)  \
    X(matmul_backward) X(attention_forward) X(attention_backward) X(attention_cached) X(gelu_forward) \
    X(gelu_backward) X(add_forward) X(add_inplace) X(crossentropy_forward) X(crossentropy_backward)   \
    X(crossentropy_forward_backward) X(sum) X(sum_squares) X(scale)

// The CPU reference: cpu_<member> for every member of CORE_OPS, and its table.
#define CORE_DECLARE_CPU(member) OP_DECLARE(CoreOps, cpu_, member)
CORE_OPS(CORE_DECLARE_CPU)
const CoreOps *cpu_core_ops(void);

// One causal attention row for one head (attention.c), shared by the full and the cached
// forms: o = softmax_j<=i(q_i . k_j / sqrt(hs)) v_j over the packed rows at base
// (row stride 3C, head offset already applied); returns the row's log-sum-exp.
double cpu_attention_row(real *o, const real *base, int i, int C, int hs);

#endif
