// RMSNorm (model/ops/norm_glu/rmsnorm.c gives the equations) and its fused forms with the
// residual add, on the row-normalisation kernels of kernels/norm_rows.cuh (LayerNorm with
// mean 0 and no shift). dw is a parameter gradient: fp32 (model/backend.h, grad_size).
#include "kernels/norm_rows.cuh"

void cuda_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C, float eps) {
    PROFILE("rmsnorm_fwd");
    norm_forward<true>((bf16 *)out, NULL, (float *)rstd, (const bf16 *)inp, (const bf16 *)w, NULL, N, C, eps);
}

void cuda_rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w, const real *rstd,
                           int N, int C) {
    PROFILE("rmsnorm_bwd");
    norm_backward<true>((bf16 *)dinp, (float *)dw, NULL, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w,
                        NULL, (const float *)rstd, N, C);
}

// Optional fused ops (model/ops/norm_glu/norm_glu.h). res = a + b (bf16), then RMSNorm of res.
void cuda_add_rmsnorm_forward(real *res, real *out, real *rstd, const real *a, const real *b, const real *w, int N,
                              int C, float eps) {
    PROFILE("add_rmsnorm_fwd");
    ce_lse_invalidate(res, (size_t)N * C * sizeof(bf16));
    norm_add_forward<true>((bf16 *)res, (bf16 *)out, NULL, (float *)rstd, (const bf16 *)a, (const bf16 *)b,
                           (const bf16 *)w, NULL, N, C, eps);
}

// rmsnorm_backward with the input gradient added into dres (dres += dinp, rounded once)
void cuda_rmsnorm_backward_add(real *dres, real *dw, const real *dout, const real *inp, const real *w,
                               const real *rstd, int N, int C) {
    PROFILE("rmsnorm_bwd_add");
    ce_lse_invalidate(dres, (size_t)N * C * sizeof(bf16));
    norm_backward<true, true>((bf16 *)dres, (float *)dw, NULL, (const bf16 *)dout, (const bf16 *)inp,
                              (const bf16 *)w, NULL, (const float *)rstd, N, C);
}
