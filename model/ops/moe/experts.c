// Grouped expert GLU MLP over the expert-sorted rows (docs/hybrid.md, "Routed and shared
// experts" and "Dropless permutation and grouped expert FFN", steps 4 and 7):
// a loop over experts, each running the GLU MLP (norm_glu/glu_mlp.h, on the CPU tables) on
// its contiguous row range [offsets[e], offsets[e+1]) with its own weights. The
// weight-gradient GEMMs have the variable reduction length c_e; an expert with c_e = 0 is
// skipped, so its weight gradient receives exactly nothing.
#include "model/ops/moe/moe.h"
#include "model/ops/norm_glu/glu_mlp.h"

void cpu_moe_experts_forward(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                             const int *offsets, int E, int C, int M, GluAct act) {
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], n = offsets[e + 1] - offsets[e];
        if (n <= 0) continue;
        glu_mlp_forward(cpu_core_ops(), cpu_norm_glu_ops(), yp + (size_t)r0 * C, hp + (size_t)r0 * 2 * M,
                        ap + (size_t)r0 * M, xp + (size_t)r0 * C, w13 + (size_t)e * 2 * M * C, NULL,
                        w2 + (size_t)e * C * M, NULL, n, C, M, act);
    }
}

void cpu_moe_experts_backward(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                              const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                              const int *offsets, int E, int C, int M, GluAct act) {
    for (int e = 0; e < E; e++) {
        int r0 = offsets[e], n = offsets[e + 1] - offsets[e];
        if (n <= 0) continue;
        glu_mlp_backward(cpu_core_ops(), cpu_norm_glu_ops(), dxp + (size_t)r0 * C, dw13 + (size_t)e * 2 * M * C, NULL,
                         dw2 + (size_t)e * C * M, NULL, dhp + (size_t)r0 * 2 * M, dap + (size_t)r0 * M,
                         dyp + (size_t)r0 * C, xp + (size_t)r0 * C, hp + (size_t)r0 * 2 * M, ap + (size_t)r0 * M,
                         w13 + (size_t)e * 2 * M * C, w2 + (size_t)e * C * M, n, C, M, act);
    }
}
