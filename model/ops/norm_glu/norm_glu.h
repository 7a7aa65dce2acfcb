// The norms-and-GLU family: RMSNorm and the gated activations of the GLU MLPs (SwiGLU,
// SiTU). Used by every model with `norm = rmsnorm` or `mlp = swiglu | situ` (the dense
// MLP, shared and routed experts), whatever its token mixers. The whole GLU MLP (matmul,
// activation, matmul) is glu_mlp.h.
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

    // ---- optional fused ops (not in NORM_GLU_OPS): NULL means the graph runs the separate ops ----
    // (the RMSNorm forms of core.h's add_layernorm_forward / layernorm_backward_add)
    // res = a + b (written, n = N*C), then rmsnorm_forward(out, rstd, res, w) in one pass
    // (the norm sees res as stored)
    void (*add_rmsnorm_forward)(real *res, real *out, real *rstd, const real *a, const real *b, const real *w, int N,
                                int C, real eps);
    // rmsnorm_backward with the input gradient ACCUMULATED into dres (the residual stream's
    // gradient): dres += dinp; dw accumulated as rmsnorm_backward
    void (*rmsnorm_backward_add)(real *dres, real *dw, const real *dout, const real *inp, const real *w,
                                 const real *rstd, int N, int C);
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

#endif
