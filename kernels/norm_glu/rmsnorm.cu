// RMSNorm (model/ops/norm_glu/rmsnorm.c gives the equations) on the row-normalisation
// kernels of kernels/norm_rows.cuh (LayerNorm with mean 0 and no shift).
#include "kernels/norm_rows.cuh"

void cuda_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C, float eps) {
    PROFILE("rmsnorm_fwd");
    norm_forward<true>((bf16 *)out, NULL, (float *)rstd, (const bf16 *)inp, (const bf16 *)w, NULL, N, C, eps);
}

void cuda_rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w, const real *rstd,
                           int N, int C) {
    PROFILE("rmsnorm_bwd");
    norm_backward<true>((bf16 *)dinp, (bf16 *)dw, NULL, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)w,
                        NULL, (const float *)rstd, N, C);
}
