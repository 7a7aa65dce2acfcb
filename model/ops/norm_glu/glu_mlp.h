// The GLU MLP (docs/hybrid.md, "Routed and shared experts" and "SwiGLU"), composed from two
// families' ops: the core matmul
// and the norm_glu gated activation. Every GLU MLP of the model runs it: the dense channel
// mixer (model/mlp.c, any backend: pass be->core, be->norm_glu), the MoE shared experts
// (model/moe.c) and each routed expert of the CPU reference on its rows
// (model/ops/moe/experts.c: cpu_core_ops(), cpu_norm_glu_ops()). It adds no numerics of
// its own: the results are those of the three ops, run in this order.
//
// Shapes (N rows, C channels, M hidden width), weights in PyTorch's (out, in) layout:
//   x (N, C); w13 (2M, C) = [W1; W3] (gate rows first), b13 (2M) or NULL;
//   w2 (C, M), b2 (C) or NULL
//   h = x w13^T + b13   (N, 2M), each row [gate | up]      saved
//   a = glu(h)          (N, M)   (SwiGLU or SiTU, act)     saved
//   out = a w2^T + b2   (N, C)
// Backward (contracts of backend.h): dx (N, C) written; dw13, dw2, and db13, db2 (NULL
// when the forward had no biases) accumulated; dh (N, 2M) and da (N, M) are scratch.
#ifndef HYBRID_OPS_GLU_MLP_H
#define HYBRID_OPS_GLU_MLP_H

#include "model/ops/core/core.h"
#include "model/ops/norm_glu/norm_glu.h"

void glu_mlp_forward(const CoreOps *core, const NormGluOps *ng, real *out, real *h, real *a, const real *x,
                     const real *w13, const real *b13, const real *w2, const real *b2, int N, int C, int M,
                     GluAct act);
void glu_mlp_backward(const CoreOps *core, const NormGluOps *ng, real *dx, real *dw13, real *db13, real *dw2,
                      real *db2, real *dh, real *da, const real *dout, const real *x, const real *h, const real *a,
                      const real *w13, const real *w2, int N, int C, int M, GluAct act);

#endif
