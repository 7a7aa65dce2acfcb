// LayerNorm (model/ops/core/layernorm.c gives the equations) and its fused forms with the
// residual add, on the row-normalisation kernels of kernels/norm_rows.cuh. dw, db and dsum
// are parameter gradients: fp32 (model/backend.h, grad_size).
#include "kernels/norm_rows.cuh"

void cuda_layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *w, const real *b, int N,
                            int C, float eps) {
    PROFILE("layernorm_fwd");
    norm_forward<false>((bf16 *)out, (float *)mean, (float *)rstd, (const bf16 *)inp, (const bf16 *)w,
                        (const bf16 *)b, N, C, eps);
}

void cuda_layernorm_backward(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w,
                             const real *mean, const real *rstd, int N, int C) {
    PROFILE("layernorm_bwd");
    norm_backward<false>((bf16 *)dinp, (float *)dw, (float *)db, (const bf16 *)dout, (const bf16 *)inp,
                         (const bf16 *)w, (const float *)mean, (const float *)rstd, N, C);
}

// Optional fused ops (model/ops/core/core.h). res = a + b (bf16), then LayerNorm of res.
void cuda_add_layernorm_forward(real *res, real *out, real *mean, real *rstd, const real *a, const real *b,
                                const real *w, const real *bias, int N, int C, float eps) {
    PROFILE("add_layernorm_fwd");
    ce_lse_invalidate(res, (size_t)N * C * sizeof(bf16));
    norm_add_forward<false>((bf16 *)res, (bf16 *)out, (float *)mean, (float *)rstd, (const bf16 *)a, (const bf16 *)b,
                            (const bf16 *)w, (const bf16 *)bias, N, C, eps);
}

// layernorm_backward with the input gradient added into dres (dres += dinp); dsum (may be
// NULL) += the column sums of dres as stored after the add, in the same pass
void cuda_layernorm_backward_add(real *dres, real *dw, real *db, real *dsum, const real *dout, const real *inp,
                                 const real *w, const real *mean, const real *rstd, int N, int C) {
    PROFILE("layernorm_bwd_add");
    ce_lse_invalidate(dres, (size_t)N * C * sizeof(bf16));
    norm_backward<false, true>((bf16 *)dres, (float *)dw, (float *)db, (const bf16 *)dout, (const bf16 *)inp,
                               (const bf16 *)w, (const float *)mean, (const float *)rstd, N, C, (float *)dsum);
}
