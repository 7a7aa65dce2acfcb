// The norms-and-GLU family: RMSNorm and the gated activations of the GLU MLPs (SwiGLU,
// SiTU). Used by every model with `norm = rmsnorm` or `mlp = swiglu | situ` (the dense
// MLP, shared and routed experts), whatever its token mixers.
//
// CPU reference: model/ops/norm_glu/*.c. CUDA: kernels/norm_glu/*.cu. Contracts as every
// family (model/backend.h). Math: docs/hybrid.md, "RMSNorm", "SwiGLU" and "SiTU".
#ifndef HYBRID_OPS_NORM_GLU_H
#define HYBRID_OPS_NORM_GLU_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/op_table.h"

// The gated activation of a GLU MLP. Layout: inp (N, 2H), each row = [gate g (H) | up u (H)]
// (the output of one GEMM with the concatenated weight [W1; W3], W1 = gate rows first);
// out (N, H). The backward's dinp (N, 2H) has the same [dg | du] layout.
//   SwiGLU: h = silu(g) * u, silu(g) = g sigmoid(g)
//   SiTU:   h = a(g) c(u), a(g) = beta tanh(g/beta) sigmoid(g),
//           c(u) = linear_beta tanh(u/linear_beta) if linear_beta > 0, else c(u) = u  (K3: 4, 25)
typedef enum { GLU_SWIGLU = 0, GLU_SITU = 1 } GluKind;
typedef struct {
    GluKind kind;
    double beta;         // SiTU only
    double linear_beta;  // SiTU only; <= 0 means no cap on the up half
} GluAct;

typedef struct NormGluOps {
    // RMSNorm: y = x * rstd * w, rstd = (mean_c x^2 + eps)^-1/2 saved (N); statistics in double
    void (*rmsnorm_forward)(real *out, real *rstd, const real *inp, const real *w, int N, int C, real eps);
    // g = dout * w; dinp = rstd g - (rstd^3 / C) (g . inp) inp (written); dw += dout * inp * rstd
    void (*rmsnorm_backward)(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                             const real *rstd, int N, int C);
    // out (N, H) = act(inp (N, 2H)); nothing saved (the backward recomputes from inp)
    void (*glu_forward)(real *out, const real *inp, int N, int H, GluAct act);
    // dinp (N, 2H) written
    void (*glu_backward)(real *dinp, const real *dout, const real *inp, int N, int H, GluAct act);
} NormGluOps;

#define NORM_GLU_OPS(X) X(rmsnorm_forward) X(rmsnorm_backward) X(glu_forward) X(glu_backward)

#define NORM_GLU_DECLARE_CPU(member) OP_DECLARE(NormGluOps, cpu_, member)
NORM_GLU_OPS(NORM_GLU_DECLARE_CPU)
const NormGluOps *cpu_norm_glu_ops(void);

// The two activations on their own (glu.c; cpu_glu_forward / _backward dispatch on act.kind).
void cpu_swiglu_forward(real *out, const real *inp, int N, int H);
void cpu_swiglu_backward(real *dinp, const real *dout, const real *inp, int N, int H);
void cpu_situ_forward(real *out, const real *inp, int N, int H, double beta, double linear_beta);
void cpu_situ_backward(real *dinp, const real *dout, const real *inp, int N, int H, double beta,
                       double linear_beta);

// ---- glu_ffn.c: a local linear layer (sums in double) and the dense GLU FFN built on it ----
// out (N, OC) = inp (N, C) @ w^T, w (OC, C). Backward: dinp = dout @ w (written; dinp may be
// NULL to skip), dw += dout^T @ inp (accumulated).
void cpu_block_linear_forward(real *out, const real *inp, const real *w, int N, int C, int OC);
void cpu_block_linear_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w, int N,
                               int C, int OC);
// Dense GLU MLP: h (N, 2M) = x W13^T, a (N, M) = glu(h), out (N, C) = a W2^T. Saves h and a.
// Backward: dx written (may be NULL), dw13/dw2 accumulated; dh (N, 2M) and da (N, M) scratch.
void cpu_glu_ffn_forward(real *out, real *h, real *a, const real *x, const real *w13, const real *w2, int N,
                         int C, int M, GluAct act);
void cpu_glu_ffn_backward(real *dx, real *dw13, real *dw2, real *dh, real *da, const real *dout, const real *x,
                          const real *h, const real *a, const real *w13, const real *w2, int N, int C, int M,
                          GluAct act);

#endif
