// Gated linear units (model/ops/norm_glu/glu.c gives the equations) on bf16 rows:
// inp (N, 2H) rows [gate g | up u], out (N, H); kind 0 SwiGLU, 1 SiTU. The kernels are
// kernels/norm_glu/glu.cuh's (the MoE experts' GLU pass runs them too), with the row count N
// from the host: 8 columns a thread where H % 8 == 0 and the buffers are 16-byte aligned, else
// one element a thread (the same per-element math: the same bits).
#include "kernels/norm_glu/glu.cuh"

// act.beta and act.linear_beta enter the kernels as float (this backend computes in fp32)
void cuda_glu_forward(real *out, const real *inp, int N, int H, GluAct act) {
    PROFILE("glu_fwd");
    const int kind = act.kind;
    if (kind != GLU_SWIGLU && kind != GLU_SITU) die("glu: unknown activation kind %d", kind);
    size_t n = (size_t)N * H;
    if (!n) return;
    if (glu_vec_ok(out, inp, NULL, H))
        launch_kernel(glu_forward_vec_kernel<int>, grid_for(n / 8, 256), 256, 0, (bf16 *)out, (const bf16 *)inp, N, H,
                      kind, (float)act.beta, (float)act.linear_beta);
    else
        launch_kernel(glu_forward_kernel<int>, grid_for(n, 256), 256, 0, (bf16 *)out, (const bf16 *)inp, N, H, kind,
                      (float)act.beta, (float)act.linear_beta);
}

void cuda_glu_backward(real *dinp, const real *dout, const real *inp, int N, int H, GluAct act) {
    PROFILE("glu_bwd");
    const int kind = act.kind;
    if (kind != GLU_SWIGLU && kind != GLU_SITU) die("glu: unknown activation kind %d", kind);
    size_t n = (size_t)N * H;
    if (!n) return;
    if (glu_vec_ok(dinp, inp, dout, H))
        launch_kernel(glu_backward_vec_kernel<int>, grid_for(n / 8, 256), 256, 0, (bf16 *)dinp, (const bf16 *)dout,
                      (const bf16 *)inp, N, H, kind, (float)act.beta, (float)act.linear_beta);
    else
        launch_kernel(glu_backward_kernel<int>, grid_for(n, 256), 256, 0, (bf16 *)dinp, (const bf16 *)dout,
                      (const bf16 *)inp, N, H, kind, (float)act.beta, (float)act.linear_beta);
}

