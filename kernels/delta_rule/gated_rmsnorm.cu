// The per-head gated RMSNorm of the delta-rule layers' output on CUDA (model/ops/delta_rule/
// delta_rule.h, gated_rmsnorm_*; docs/delta-rule.md, "Gated RMSNorm of the output"),
// mirroring model/ops/delta_rule/layer_ops.c:
//   xh = x r, r = (mean_d x^2 + eps)^-1/2,  y = xh w act(z),
//   act(z) = sigmoid(z), or z sigmoid(z) (swish)
// Layout: x, z, y, dy, dx, dz (rows = B*T*H, D = V) bf16; weight w (D) bf16 shared by the
// heads (NULL = 1); rstd (rows) fp32. One warp per row; dw as per-row-chunk partials added in
// a fixed order (grad_reduce.cuh).
#include "kernels/common.cuh"
#include "kernels/delta_rule/act.cuh"
#include "kernels/delta_rule/grad_reduce.cuh"

#define GRN_WARPS 8         // rows per block: one warp per row
#define GRN_DW_THREADS 128  // channels per block of the dw partials

// act(z) and act'(z)
__device__ __forceinline__ void grn_act(float z, int swish, float *a, float *da) {
    const float sg = dr_sigmoid(z);
    if (swish) {
        *a = z * sg;
        *da = sg + z * sg * (1.f - sg);
    } else {
        *a = sg;
        *da = sg * (1.f - sg);
    }
}

__global__ void grn_fwd_kernel(bf16 *y, float *rstd, const bf16 *x, const bf16 *z, const bf16 *w, size_t rows, int D,
                               float eps, int swish) {
    const size_t row = (size_t)blockIdx.x * GRN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // the whole warp
    const bf16 *xr = x + row * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) {
        const float v = __bfloat162float(xr[i]);
        ss += v * v;
    }
    const float r = rsqrtf(warp_sum(ss) / D + eps);
    for (int i = lane; i < D; i += 32) {
        float a, da;
        grn_act(__bfloat162float(z[row * D + i]), swish, &a, &da);
        y[row * D + i] = __float2bfloat16(__bfloat162float(xr[i]) * r * (w ? __bfloat162float(w[i]) : 1.f) * a);
    }
    if (lane == 0) rstd[row] = r;
}

// dz = dy xh w act'(z);  u = dy act(z) w;  dx = r (u - xh mean(xh u))
__global__ void grn_bwd_kernel(bf16 *dx, bf16 *dz, const bf16 *dy, const bf16 *x, const bf16 *z, const bf16 *w,
                               const float *rstd, size_t rows, int D, int swish) {
    const size_t row = (size_t)blockIdx.x * GRN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float r = rstd[row];
    float m = 0.f;
    for (int i = lane; i < D; i += 32) {
        const size_t idx = row * D + i;
        float a, da;
        grn_act(__bfloat162float(z[idx]), swish, &a, &da);
        const float wi = w ? __bfloat162float(w[i]) : 1.f, xh = __bfloat162float(x[idx]) * r;
        const float d = __bfloat162float(dy[idx]);
        dz[idx] = __float2bfloat16(d * xh * wi * da);
        m += xh * d * a * wi;
    }
    m = warp_sum(m) / D;
    for (int i = lane; i < D; i += 32) {
        const size_t idx = row * D + i;
        float a, da;
        grn_act(__bfloat162float(z[idx]), swish, &a, &da);
        const float wi = w ? __bfloat162float(w[i]) : 1.f, xh = __bfloat162float(x[idx]) * r;
        dx[idx] = __float2bfloat16(r * (__bfloat162float(dy[idx]) * a * wi - xh * m));
    }
}

// partial[chunk][i] = sum over the chunk's rows (in order) of dy act(z) x rstd
__global__ void grn_dw_partial_kernel(float *partial, const bf16 *dy, const bf16 *x, const bf16 *z,
                                      const float *rstd, size_t rows, int rows_per_chunk, int D, int swish) {
    const int i = blockIdx.y * GRN_DW_THREADS + threadIdx.x;
    if (i >= D) return;
    const size_t r0 = (size_t)blockIdx.x * rows_per_chunk;
    const size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float acc = 0.f;
    for (size_t r = r0; r < r1; r++) {
        const size_t idx = r * D + i;
        float a, da;
        grn_act(__bfloat162float(z[idx]), swish, &a, &da);
        acc += __bfloat162float(dy[idx]) * a * __bfloat162float(x[idx]) * rstd[r];
    }
    partial[(size_t)blockIdx.x * D + i] = acc;
}

extern "C" void cuda_gated_rmsnorm_forward(real *y, real *rstd, const real *x, const real *z, const real *w,
                                           size_t rows, int D, real eps, int swish) {
    PROFILE("gated_rmsnorm_fwd");
    if (D < 1) die("cuda_gated_rmsnorm_forward: bad D=%d", D);
    if (rows == 0) return;
    launch_kernel(grn_fwd_kernel, dim3((unsigned)((rows + GRN_WARPS - 1) / GRN_WARPS)), dim3(32 * GRN_WARPS), 0,
                  (bf16 *)y, (float *)rstd, (const bf16 *)x, (const bf16 *)z, (const bf16 *)w, rows, D, (float)eps,
                  swish);
}

extern "C" void cuda_gated_rmsnorm_backward(real *dx, real *dz, real *dw, const real *dy, const real *x,
                                            const real *z, const real *w, const real *rstd, size_t rows, int D,
                                            int swish) {
    PROFILE("gated_rmsnorm_bwd");
    if (D < 1) die("cuda_gated_rmsnorm_backward: bad D=%d", D);
    if (rows == 0) return;
    launch_kernel(grn_bwd_kernel, dim3((unsigned)((rows + GRN_WARPS - 1) / GRN_WARPS)), dim3(32 * GRN_WARPS), 0,
                  (bf16 *)dx, (bf16 *)dz, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)z, (const bf16 *)w,
                  (const float *)rstd, rows, D, swish);
    if (!dw) return;
    int chunks;
    const int per = grad_row_chunks(rows, &chunks);
    float *partial = (float *)scratch_get((size_t)chunks * D * sizeof(float));
    launch_kernel(grn_dw_partial_kernel, dim3((unsigned)chunks, (unsigned)((D + GRN_DW_THREADS - 1) / GRN_DW_THREADS)),
                  dim3(GRN_DW_THREADS), 0, partial, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)z,
                  (const float *)rstd, rows, per, D, swish);
    grad_reduce_add((bf16 *)dw, partial, chunks, D, (size_t)D);
}
