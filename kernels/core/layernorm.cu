// LayerNorm (model/ops/core/layernorm.c gives the equations) and its fused forms with the
// residual add, on the row-normalisation kernels of kernels/norm_rows.cuh.
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
    norm_backward<false>((bf16 *)dinp, (bf16 *)dw, (bf16 *)db, (const bf16 *)dout, (const bf16 *)inp,
                         (const bf16 *)w, (const float *)mean, (const float *)rstd, N, C);
}

// Optional fused ops (model/ops/core/core.h). res = a + b (bf16), then LayerNorm of res.
void cuda_add_layernorm_forward(real *res, real *out, real *mean, real *rstd, const real *a, const real *b,
                                const real *w, const real *bias, int N, int C, float eps) {
    PROFILE("add_layernorm_fwd");
    ce_lse_invalidate(res, (size_t)N * C * sizeof(bf16));
    if (N <= 0) return;
    const int vec = C % 256 == 0 && C <= 1024 && is_aligned16(out) && is_aligned16(a) && is_aligned16(b) &&
                    is_aligned16(res) && is_aligned16(w) && (!bias || is_aligned16(bias));
    if (!vec) {  // the separate ops
        cuda_add_forward(res, a, b, (size_t)N * C);
        norm_forward<false>((bf16 *)out, (float *)mean, (float *)rstd, (const bf16 *)res, (const bf16 *)w,
                            (const bf16 *)bias, N, C, eps);
        return;
    }
    const int threads = 256, rows_per_block = threads / 32;
    unsigned grid = (unsigned)((N + rows_per_block - 1) / rows_per_block);
    bf16 *o = (bf16 *)out, *r = (bf16 *)res;
    const bf16 *x = (const bf16 *)a, *y = (const bf16 *)b, *wv = (const bf16 *)w, *bv = (const bf16 *)bias;
    float *mu = (float *)mean, *rs = (float *)rstd;
    switch (C / 256) {
    case 1: launch_kernel(norm_fwd_vec_kernel<1, false, true>, grid, threads, 0, o, mu, rs, x, wv, bv, N, C, eps, y, r); break;
    case 2: launch_kernel(norm_fwd_vec_kernel<2, false, true>, grid, threads, 0, o, mu, rs, x, wv, bv, N, C, eps, y, r); break;
    case 3: launch_kernel(norm_fwd_vec_kernel<3, false, true>, grid, threads, 0, o, mu, rs, x, wv, bv, N, C, eps, y, r); break;
    default: launch_kernel(norm_fwd_vec_kernel<4, false, true>, grid, threads, 0, o, mu, rs, x, wv, bv, N, C, eps, y, r); break;
    }
}

// layernorm_backward with the input gradient added into dres (dres += dinp); dsum (may be
// NULL) += the column sums of dres as stored after the add, in the same pass
void cuda_layernorm_backward_add(real *dres, real *dw, real *db, real *dsum, const real *dout, const real *inp,
                                 const real *w, const real *mean, const real *rstd, int N, int C) {
    PROFILE("layernorm_bwd_add");
    ce_lse_invalidate(dres, (size_t)N * C * sizeof(bf16));
    norm_backward<false, true>((bf16 *)dres, (bf16 *)dw, (bf16 *)db, (const bf16 *)dout, (const bf16 *)inp,
                               (const bf16 *)w, (const float *)mean, (const float *)rstd, N, C, (bf16 *)dsum);
}
