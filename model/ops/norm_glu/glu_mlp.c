// The GLU MLP from the core matmul and the norm_glu activation (glu_mlp.h).
#include "model/ops/norm_glu/glu_mlp.h"

void glu_mlp_forward(const CoreOps *core, const NormGluOps *ng, real *out, real *h, real *a, const real *x,
                     const real *w13, const real *b13, const real *w2, const real *b2, int N, int C, int M,
                     GluAct act) {
    core->matmul_forward(h, x, w13, b13, N, C, 2 * M);
    ng->glu_forward(a, h, N, M, act);
    core->matmul_forward(out, a, w2, b2, N, M, C);
}

void glu_mlp_backward(const CoreOps *core, const NormGluOps *ng, real *dx, real *dw13, real *db13, real *dw2,
                      real *db2, real *dh, real *da, const real *dout, const real *x, const real *h, const real *a,
                      const real *w13, const real *w2, int N, int C, int M, GluAct act) {
    core->matmul_backward(da, dw2, db2, dout, a, w2, N, M, C);
    ng->glu_backward(dh, da, h, N, M, act);
    core->matmul_backward(dx, dw13, db13, dh, x, w13, N, C, 2 * M);
}
