// Grouped expert FFN over the expert-sorted rows (blocks-spec §2.3, §2.7 steps 4 and 7):
// a loop over experts, each running the dense GLU FFN (block_linear.c) on its contiguous
// row range [offsets[e], offsets[e+1]) with its own weights. The weight-gradient GEMMs have
// the variable reduction length c_e; an expert with c_e = 0 is skipped, so its weight
// gradient receives exactly zero.
#include "model/ops/moe/moe.h"

void cpu_moe_experts_forward(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                             const int *offsets, int E, int C, int M, GluAct act) {
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], n = offsets[e + 1] - offsets[e];
        if (n <= 0) continue;
        cpu_glu_ffn_forward(yp + (size_t)r0 * C, hp + (size_t)r0 * 2 * M, ap + (size_t)r0 * M, xp + (size_t)r0 * C,
                            w13 + (size_t)e * 2 * M * C, w2 + (size_t)e * C * M, n, C, M, act);
    }
}

void cpu_moe_experts_backward(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                              const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                              const int *offsets, int E, int C, int M, GluAct act) {
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], n = offsets[e + 1] - offsets[e];
        if (n <= 0) continue;
        cpu_glu_ffn_backward(dxp + (size_t)r0 * C, dw13 + (size_t)e * 2 * M * C, dw2 + (size_t)e * C * M,
                             dhp + (size_t)r0 * 2 * M, dap + (size_t)r0 * M, dyp + (size_t)r0 * C,
                             xp + (size_t)r0 * C, hp + (size_t)r0 * 2 * M, ap + (size_t)r0 * M,
                             w13 + (size_t)e * 2 * M * C, w2 + (size_t)e * C * M, n, C, M, act);
    }
}
