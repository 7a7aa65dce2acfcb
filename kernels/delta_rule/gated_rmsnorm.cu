// The per-head gated RMSNorm of the delta-rule layers' output on CUDA (model/ops/delta_rule/
// delta_rule.h, gated_rmsnorm_*; docs/delta-rule.md, "Gated RMSNorm of the output"),
// mirroring model/ops/delta_rule/layer_ops.c:
//   xh = x r, r = (mean_d x^2 + eps)^-1/2,  y = xh w act(z),
//   act(z) = sigmoid(z), or z sigmoid(z) (swish)
// Layout: x, z, y, dy, dx, dz (rows = B*T*H, D = V) bf16; weight w (D) bf16 shared by the
// heads (NULL = 1), its gradient dw (D) fp32 (a parameter gradient: model/backend.h,
// `grad_size`); rstd (rows) fp32. One warp per row; dw as per-row-chunk partials added in
// a fixed order (grad_reduce.cuh).
// Two paths with the same bits: register kernels for D <= 256 (a lane keeps its elements of the
// row in registers, act(z) computed once, and for D = 64, 128, 256 loads and stores them as
// 4-, 8-, 16-byte vectors; the backward writes the dw partials from the same launch, one block
// per row chunk) and the general kernels (any D; every D under
// HYBRID_GRN_REF=1), which re-read the row in a second pass and compute dw in a second kernel.
// Every sum that takes a product is an explicit __fmaf_rn with the same operands in both paths
// (the sums of squares, mean(xh u), dx, act'(z), the dw partials). Written as `a * b - c * d`,
// nvcc leaves a mul and a sub for ptxas to contract, and ptxas is free to fuse either product:
// on the H200 the two paths once differed in one bf16 of dx on fresh inputs (session 21), while
// the CPU emulator, which contracts nothing, agreed. With the fmas explicit no add or sub with
// both operands from contractible products is left in either path's PTX (docs/delta-rule.md,
// "CUDA kernels"; the bit check has passed on the H200 since, session 22).
#include "kernels/common.cuh"
#include "kernels/delta_rule/act.cuh"
#include "kernels/delta_rule/grad_reduce.cuh"
#include "kernels/delta_rule/row_vec.cuh"

#define GRN_WARPS 8         // rows per block: one warp per row
#define GRN_DW_THREADS 128  // channels per block of the dw partials

// act(z) and act'(z)
__device__ __forceinline__ void grn_act(float z, int swish, float *a, float *da) {
    const float sg = dr_sigmoid(z);
    if (swish) {
        *a = z * sg;
        *da = __fmaf_rn(z * sg, 1.f - sg, sg);
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
        ss = __fmaf_rn(v, v, ss);
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
        m = __fmaf_rn(xh * d * a, wi, m);
    }
    m = warp_sum(m) / D;
    for (int i = lane; i < D; i += 32) {
        const size_t idx = row * D + i;
        float a, da;
        grn_act(__bfloat162float(z[idx]), swish, &a, &da);
        const float wi = w ? __bfloat162float(w[i]) : 1.f, xh = __bfloat162float(x[idx]) * r;
        dx[idx] = __float2bfloat16(r * __fmaf_rn(-xh, m, __bfloat162float(dy[idx]) * a * wi));
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
        acc = __fmaf_rn(__bfloat162float(dy[idx]) * a * __bfloat162float(x[idx]), rstd[r], acc);
    }
    partial[(size_t)blockIdx.x * D + i] = acc;
}

// ---- Register kernels (D <= GRN_REG_MAX_D) -----------------------------------------------------
// Each lane keeps its K = ceil(D / 32) elements of the row in registers between the two passes and
// computes act(z) once per element. Which elements a lane holds:
// - strided (VEC false, any D <= 256): elements lane, lane + 32, ..., lane + 32 (K - 1) (those < D),
//   the general kernels' set and order, loaded one bf16 at a time;
// - contiguous (VEC true, D = 32 K with K = 2, 4, 8 and the tensors 2K-byte aligned): elements
//   K lane ... K lane + K - 1, loaded and stored K bf16 at a time. Only the row sums depend on
//   the set: before them row_to_strided (row_vec.cuh) moves the summands (computed by the same
//   expressions) to the lanes and order of the strided set through K shuffles.
// Either way each lane's partial sums, the warp_sum and every other fp32 expression are those of
// the general kernels above, so are the bits.
#define GRN_REG_MAX_D 256

// element index of a lane's slot k
template <int K, bool VEC> __device__ __forceinline__ int grn_elem(int lane, int k) {
    return VEC ? lane * K + k : lane + 32 * k;
}

template <int K, bool VEC>
__global__ void grn_fwd_reg_kernel(bf16 *y, float *rstd, const bf16 *x, const bf16 *z, const bf16 *w, size_t rows,
                                   int D, float eps, int swish) {
    const size_t row = (size_t)blockIdx.x * GRN_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // the whole warp
    const bf16 *xr = x + row * D, *zr = z + row * D;
    float xv[K], zv[K];
    if (VEC) {
        row_load<K>(xv, xr + lane * K);
        row_load<K>(zv, zr + lane * K);
    } else {
#pragma unroll
        for (int k = 0; k < K; k++) {
            const int i = lane + 32 * k;
            xv[k] = i < D ? __bfloat162float(xr[i]) : 0.f;
            zv[k] = i < D ? __bfloat162float(zr[i]) : 0.f;
        }
    }
    float xs[K];  // the strided set
    row_strided<K, VEC>(xs, xv);
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (lane + 32 * k < D) ss = __fmaf_rn(xs[k], xs[k], ss);
    const float r = rsqrtf(warp_sum(ss) / D + eps);
    float yv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = grn_elem<K, VEC>(lane, k);
        if (i >= D) break;
        float a, da;
        grn_act(zv[k], swish, &a, &da);
        yv[k] = xv[k] * r * (w ? __bfloat162float(w[i]) : 1.f) * a;
        if (!VEC) y[row * D + i] = __float2bfloat16(yv[k]);
    }
    if (VEC) row_store<K>(y + row * D + lane * K, yv);
    if (lane == 0) rstd[row] = r;
}

// One block of GRN_WARPS warps per chunk of rows_per_chunk rows, one warp per row, GRN_WARPS rows
// at a time. DW: the dw partial of the chunk as grn_dw_partial_kernel adds it (acc over the
// chunk's rows in order of the same fp32 expression), from the per-element products d a x in
// shared memory; thread i < D holds channel i's sum.
template <int K, bool DW, bool VEC>
__global__ void grn_bwd_reg_kernel(bf16 *dx, bf16 *dz, float *partial, const bf16 *dy, const bf16 *x, const bf16 *z,
                                   const bf16 *w, const float *rstd, size_t rows, int rows_per_chunk, int D,
                                   int swish) {
    __shared__ float pt[DW ? GRN_WARPS : 1][DW ? GRN_REG_MAX_D : 1];
    __shared__ float rs[GRN_WARPS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const size_t r0 = (size_t)blockIdx.x * rows_per_chunk;
    const size_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float wv[K], ws[K];  // w of the lane's elements, and of the strided set (the sum's)
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = grn_elem<K, VEC>(lane, k), is = lane + 32 * k;
        wv[k] = w && i < D ? __bfloat162float(w[i]) : 1.f;
        ws[k] = w && is < D ? __bfloat162float(w[is]) : 1.f;
    }
    float acc = 0.f;
    // VEC: the warp's next row (x, dy, z and rstd) is loaded before this one is computed, so its
    // loads are in flight across this row's arithmetic and the block's two barriers. At ~75
    // registers 3 blocks of 8 warps fit an SM, and one row a warp in flight left the loads'
    // latency exposed (~1.85 TB/s). Measured in the 3:1 hybrid (session 22): 3.22 -> 2.66 ms a
    // step for its 12 calls; capping the kernel at 64 registers for a 4th block (a 32-byte
    // spill) measured 3.73, and two rows a warp in the forward 1.49 -> 1.63 (neither kept).
    typename RowRaw<K>::T nx, nd, nz;
    float nrs = 0.f;
    auto fetch = [&](size_t row) {
        if (!VEC || row >= r1) return;
        const size_t o = row * D + lane * K;
        nx = *(const typename RowRaw<K>::T *)(x + o);
        nd = *(const typename RowRaw<K>::T *)(dy + o);
        nz = *(const typename RowRaw<K>::T *)(z + o);
        nrs = rstd[row];
    };
    fetch(r0 + warp);
    for (size_t base = r0; base < r1; base += GRN_WARPS) {
        const size_t row = base + warp;
        if (row < r1) {
            const float r = VEC ? nrs : rstd[row];
            float a[K], da[K], xv[K], d[K], zv[K];
            if (VEC) {
                row_unpack<K>(xv, nx);
                row_unpack<K>(d, nd);
                row_unpack<K>(zv, nz);
                fetch(row + GRN_WARPS);
            } else {
#pragma unroll
                for (int k = 0; k < K; k++) {
                    const int i = lane + 32 * k;
                    const size_t idx = row * D + i;
                    xv[k] = i < D ? __bfloat162float(x[idx]) : 0.f;
                    d[k] = i < D ? __bfloat162float(dy[idx]) : 0.f;
                    zv[k] = i < D ? __bfloat162float(z[idx]) : 0.f;
                }
            }
#pragma unroll
            for (int k = 0; k < K; k++) grn_act(zv[k], swish, &a[k], &da[k]);
            float dzv[K], p[K] = {};
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int i = grn_elem<K, VEC>(lane, k);
                if (i >= D) break;
                const float wi = wv[k], xh = xv[k] * r;
                dzv[k] = d[k] * xh * wi * da[k];
                if (!VEC) dz[row * D + i] = __float2bfloat16(dzv[k]);
                p[k] = xh * d[k] * a[k];
                if (DW) pt[warp][i] = d[k] * a[k] * xv[k];
            }
            if (VEC) row_store<K>(dz + row * D + lane * K, dzv);
            float ps[K];  // p of the strided set
            row_strided<K, VEC>(ps, p);
            float m = 0.f;
#pragma unroll
            for (int k = 0; k < K; k++)
                if (lane + 32 * k < D) m = __fmaf_rn(ps[k], ws[k], m);
            m = warp_sum(m) / D;
            float dxv[K];
#pragma unroll
            for (int k = 0; k < K; k++) {
                const int i = grn_elem<K, VEC>(lane, k);
                if (i >= D) break;
                const float wi = wv[k], xh = xv[k] * r;
                dxv[k] = r * __fmaf_rn(-xh, m, d[k] * a[k] * wi);
                if (!VEC) dx[row * D + i] = __float2bfloat16(dxv[k]);
            }
            if (VEC) row_store<K>(dx + row * D + lane * K, dxv);
            if (DW && lane == 0) rs[warp] = r;
        }
        if (DW) {
            __syncthreads();
            const size_t nr = r1 - base < GRN_WARPS ? r1 - base : GRN_WARPS;
            if ((int)threadIdx.x < D)
                for (size_t j = 0; j < nr; j++) acc = __fmaf_rn(pt[j][threadIdx.x], rs[j], acc);
            __syncthreads();
        }
    }
    if (DW && (int)threadIdx.x < D) partial[(size_t)blockIdx.x * D + threadIdx.x] = acc;
}

// HYBRID_GRN_REF=1: the general kernels for every D (read at each call, so a test can switch)
static int grn_use_ref(void) { return env_flag("HYBRID_GRN_REF"); }

template <int K>
static void grn_fwd_launch(bool vec, bf16 *y, float *rstd, const bf16 *x, const bf16 *z, const bf16 *w, size_t rows,
                           int D, float eps, int swish) {
    constexpr bool V = K == 2 || K == 4 || K == 8;
    const dim3 grid((unsigned)((rows + GRN_WARPS - 1) / GRN_WARPS)), block(32 * GRN_WARPS);
    if (V && vec)
        launch_kernel(grn_fwd_reg_kernel<K, V>, grid, block, 0, y, rstd, x, z, w, rows, D, eps, swish);
    else
        launch_kernel(grn_fwd_reg_kernel<K, false>, grid, block, 0, y, rstd, x, z, w, rows, D, eps, swish);
}

template <int K, bool DW>
static void grn_bwd_launch(bool vec, int chunks, bf16 *dx, bf16 *dz, float *partial, const bf16 *dy, const bf16 *x,
                           const bf16 *z, const bf16 *w, const float *rstd, size_t rows, int per, int D, int swish) {
    constexpr bool V = K == 2 || K == 4 || K == 8;
    const dim3 grid((unsigned)chunks), block(32 * GRN_WARPS);
    if (V && vec)
        launch_kernel(grn_bwd_reg_kernel<K, DW, V>, grid, block, 0, dx, dz, partial, dy, x, z, w, rstd, rows, per, D,
                      swish);
    else
        launch_kernel(grn_bwd_reg_kernel<K, DW, false>, grid, block, 0, dx, dz, partial, dy, x, z, w, rstd, rows, per,
                      D, swish);
}

#define GRN_REG_CASES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8)

extern "C" void cuda_gated_rmsnorm_forward(real *y, real *rstd, const real *x, const real *z, const real *w,
                                           size_t rows, int D, real eps, int swish) {
    PROFILE("gated_rmsnorm_fwd");
    if (D < 1) die("cuda_gated_rmsnorm_forward: bad D=%d", D);
    if (rows == 0) return;
    if (D <= GRN_REG_MAX_D && !grn_use_ref()) {
        const bool vec = row_vec_ok(D, y, x, z, w);
        switch ((D + 31) / 32) {
#define GRN_FWD_CASE(K)                                                                                           \
    case K:                                                                                                       \
        grn_fwd_launch<K>(vec, (bf16 *)y, (float *)rstd, (const bf16 *)x, (const bf16 *)z, (const bf16 *)w, rows, D, \
                          (float)eps, swish);                                                                     \
        return;
            GRN_REG_CASES(GRN_FWD_CASE)
#undef GRN_FWD_CASE
        }
    }
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
    if (D <= GRN_REG_MAX_D && !grn_use_ref()) {
        // with dw: one block per dw chunk (the chunks of grn_dw_partial_kernel); else GRN_WARPS rows
        int chunks = (int)((rows + GRN_WARPS - 1) / GRN_WARPS), per = GRN_WARPS;
        float *partial = NULL;
        if (dw) {
            per = grad_row_chunks(rows, &chunks);
            partial = (float *)scratch_get((size_t)chunks * D * sizeof(float));
        }
        const bool vec = row_vec_ok(D, dx, dz, dy, x, z, w);
        switch ((D + 31) / 32) {
#define GRN_BWD_CASE(K)                                                                                             \
    case K:                                                                                                         \
        if (dw)                                                                                                     \
            grn_bwd_launch<K, true>(vec, chunks, (bf16 *)dx, (bf16 *)dz, partial, (const bf16 *)dy, (const bf16 *)x, \
                                    (const bf16 *)z, (const bf16 *)w, (const float *)rstd, rows, per, D, swish);     \
        else                                                                                                        \
            grn_bwd_launch<K, false>(vec, chunks, (bf16 *)dx, (bf16 *)dz, partial, (const bf16 *)dy, (const bf16 *)x, \
                                     (const bf16 *)z, (const bf16 *)w, (const float *)rstd, rows, per, D, swish);    \
        break;
            GRN_REG_CASES(GRN_BWD_CASE)
#undef GRN_BWD_CASE
        }
        if (dw) grad_reduce_add((float *)dw, partial, chunks, D, (size_t)D);
        return;
    }
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
    grad_reduce_add((float *)dw, partial, chunks, D, (size_t)D);
}
