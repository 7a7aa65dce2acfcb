// Gated linear units (model/ops/norm_glu/glu.c gives the equations) on bf16 rows:
// inp (N, 2H) rows [gate g | up u], out (N, H); kind 0 SwiGLU, 1 SiTU. Math in fp32;
// one thread per output element, grid-stride loops. The backward recomputes from inp.
#include "kernels/common.cuh"

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

__global__ void glu_forward_kernel(bf16 *out, const bf16 *inp, int N, int H, int kind, float beta, float lbeta) {
    size_t n = (size_t)N * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / H, c = i % H;
        float g = __bfloat162float(inp[row * 2 * H + c]), u = __bfloat162float(inp[row * 2 * H + H + c]);
        float h;
        if (kind == 0) {
            h = g * sigmoidf_(g) * u;
        } else {
            float a = beta * tanhf(g / beta) * sigmoidf_(g);
            float cu = lbeta > 0.f ? lbeta * tanhf(u / lbeta) : u;
            h = a * cu;
        }
        out[i] = __float2bfloat16(h);
    }
}

__global__ void glu_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, int N, int H, int kind, float beta,
                                    float lbeta) {
    size_t n = (size_t)N * H;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / H, c = i % H;
        float g = __bfloat162float(inp[row * 2 * H + c]), u = __bfloat162float(inp[row * 2 * H + H + c]);
        float dh = __bfloat162float(dout[i]);
        float dg, du;
        if (kind == 0) {
            float s = sigmoidf_(g);
            dg = dh * u * s * (1.f + g * (1.f - s));
            du = dh * g * s;
        } else {
            float tau = tanhf(g / beta), s = sigmoidf_(g);
            float a = beta * tau * s;
            float da = (1.f - tau * tau) * s + beta * tau * s * (1.f - s);
            float cu, dc;
            if (lbeta > 0.f) {
                float kappa = tanhf(u / lbeta);
                cu = lbeta * kappa;
                dc = 1.f - kappa * kappa;
            } else {
                cu = u;
                dc = 1.f;
            }
            dg = dh * cu * da;
            du = dh * a * dc;
        }
        dinp[row * 2 * H + c] = __float2bfloat16(dg);
        dinp[row * 2 * H + H + c] = __float2bfloat16(du);
    }
}

// act.beta and act.linear_beta enter the kernels as float (this backend computes in fp32)
void cuda_glu_forward(real *out, const real *inp, int N, int H, GluAct act) {
    PROFILE("glu_fwd");
    const int kind = act.kind;
    if (kind != GLU_SWIGLU && kind != GLU_SITU) die("glu: unknown activation kind %d", kind);
    size_t n = (size_t)N * H;
    if (!n) return;
    launch_kernel(glu_forward_kernel, grid_for(n, 256), 256, 0, (bf16 *)out, (const bf16 *)inp, N, H, kind,
        (float)act.beta, (float)act.linear_beta);
}

void cuda_glu_backward(real *dinp, const real *dout, const real *inp, int N, int H, GluAct act) {
    PROFILE("glu_bwd");
    const int kind = act.kind;
    if (kind != GLU_SWIGLU && kind != GLU_SITU) die("glu: unknown activation kind %d", kind);
    size_t n = (size_t)N * H;
    if (!n) return;
    launch_kernel(glu_backward_kernel, grid_for(n, 256), 256, 0, (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, N,
        H, kind, (float)act.beta, (float)act.linear_beta);
}

