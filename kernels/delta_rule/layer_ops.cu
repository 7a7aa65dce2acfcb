// The element-wise and per-row input transforms of the delta-rule layers on CUDA: the L2 norm
// of q and k, the decay gate and beta (model/ops/delta_rule/delta_rule.h; docs/delta-rule.md,
// "Input transforms: L2 norm, decay gate and beta" and "Gradients of the input transforms"),
// mirroring model/ops/delta_rule/layer_ops.c. The gated output RMSNorm is in gated_rmsnorm.cu.
//
// Layout: rows of D contiguous bf16 values (rows = B*T*H); rstd (rows) fp32; the gate's x, g,
// dg, dx (N, H, K) bf16 (GDN: K = 1), A_log (H) and dt_bias (H*K) bf16, their gradients
// dA_log, ddt_bias fp32 (parameter gradients: model/backend.h, `grad_size`); beta_backward's db
// is the gradient of beta's logits, an activation: bf16.
// The L2 norm has vector kernels for D = 64, 128, 256 (row_vec.cuh) with the general kernels'
// bits (HYBRID_L2NORM_REF=1 selects the general ones); not yet measured on a GPU (branch kda-ops).
// The decay gate has vector kernels for K % 8 == 0 with the scalar kernels' bits
// (HYBRID_GATE_REF=1 selects those). The 3:1 hybrid at B64 T1024 on the H200, both in one call
// (session 18): decay_gate_fwd 3.32 -> 1.55 ms a step; decay_gate_bwd 3.25 -> 3.14, which the
// vector kernel alone did not fix: by count its per-element math (softplus and sigmoid, each
// with a branch on the sign, both sides run on mixed signs) costs more than its bytes. Since
// then act.cuh's activations take one exponential each without a branch, at the same bits
// (GPU fingerprints equal), and the backward's sigmoid and softplus of one u share it: the
// vector backward 5320 -> 2872 static instructions (145 -> 49 MUFU.EX2), the forward 6216 ->
// 3232; the same hybrid, old and new in one call (session 19, results/bench/act-s18/; both
// builds with c684ac0's delta-rule kernels):
// decay_gate_fwd 1.52 -> 1.06 ms a step, decay_gate_bwd 3.07 -> 2.36 (and the gated norm's,
// gated_rmsnorm.cu, 2.26 -> 1.85 and 4.38 -> 3.54).
#include "kernels/common.cuh"
#include "kernels/delta_rule/act.cuh"
#include "kernels/delta_rule/grad_reduce.cuh"
#include "kernels/delta_rule/row_vec.cuh"

#define ROW_WARPS 8  // rows per block of the per-row kernels: one warp per row
#define ELEM_THREADS 256

static inline unsigned row_blocks(size_t rows) { return (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS); }
static inline unsigned elem_blocks(size_t n) { return (unsigned)((n + ELEM_THREADS - 1) / ELEM_THREADS); }

// ---- L2 norm: y = x rstd, rstd = 1/sqrt(sum_d x_d^2 + eps) (eps on the sum) ----------------
__global__ void l2norm_fwd_kernel(bf16 *y, float *rstd, const bf16 *x, size_t rows, int D, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;  // the whole warp: one row per warp
    const bf16 *xr = x + row * D;
    float ss = 0.f;
    for (int i = lane; i < D; i += 32) {
        const float v = __bfloat162float(xr[i]);
        ss += v * v;
    }
    const float rs = rsqrtf(warp_sum(ss) + eps);
    for (int i = lane; i < D; i += 32) y[row * D + i] = __float2bfloat16(__bfloat162float(xr[i]) * rs);
    if (lane == 0) rstd[row] = rs;
}

// dx = rstd (dy - (dy.y) y), with the forward's (bf16) y
__global__ void l2norm_bwd_kernel(bf16 *dx, const bf16 *dy, const bf16 *y, const float *rstd, size_t rows, int D) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const bf16 *dyr = dy + row * D, *yr = y + row * D;
    float s = 0.f;
    for (int i = lane; i < D; i += 32) s += __bfloat162float(dyr[i]) * __bfloat162float(yr[i]);
    const float dyy = warp_sum(s), rs = rstd[row];
    for (int i = lane; i < D; i += 32)
        dx[row * D + i] = __float2bfloat16(rs * (__bfloat162float(dyr[i]) - dyy * __bfloat162float(yr[i])));
}

// The same for D = 32 K, K = 2, 4, 8, with aligned tensors: a lane loads and stores its K contiguous
// elements as one vector and keeps them in registers; the row sums run over the strided set in
// its order (row_vec.cuh), the general kernels' summands and order, so the bits are theirs.
template <int K>
__global__ void l2norm_fwd_vec_kernel(bf16 *y, float *rstd, const bf16 *x, size_t rows, float eps) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31, D = 32 * K;
    if (row >= rows) return;
    float xv[K], yv[K];
    row_load<K>(xv, x + row * D + lane * K);
    const float rs = row_l2norm<K>(yv, xv, eps);
    row_store<K>(y + row * D + lane * K, yv);
    if (lane == 0) rstd[row] = rs;
}

template <int K>
__global__ void l2norm_bwd_vec_kernel(bf16 *dx, const bf16 *dy, const bf16 *y, const float *rstd, size_t rows) {
    const size_t row = (size_t)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31, D = 32 * K;
    if (row >= rows) return;
    float dv[K], yv[K], ds[K], ys[K], dxv[K];
    row_load<K>(dv, dy + row * D + lane * K);
    row_load<K>(yv, y + row * D + lane * K);
    row_to_strided<K>(ds, dv);
    row_to_strided<K>(ys, yv);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++) s += ds[k] * ys[k];
    const float dyy = warp_sum(s), rs = rstd[row];
#pragma unroll
    for (int k = 0; k < K; k++) dxv[k] = rs * (dv[k] - dyy * yv[k]);
    row_store<K>(dx + row * D + lane * K, dxv);
}

// the vector kernels apply, unless HYBRID_L2NORM_REF=1 (the general kernels for every D; read at
// each call, so a test can switch)
static bool l2norm_vec(int D, const void *a, const void *b, const void *c = NULL) {
    return !env_flag("HYBRID_L2NORM_REF") && row_vec_ok(D, a, b, c);
}

extern "C" void cuda_l2norm_forward(real *y, real *rstd, const real *x, size_t rows, int D, real eps) {
    PROFILE("l2norm_fwd");
    if (D < 1) die("cuda_l2norm_forward: bad D=%d", D);
    if (rows == 0) return;
    if (l2norm_vec(D, y, x)) {
        auto kern = D == 64    ? l2norm_fwd_vec_kernel<2>
                    : D == 128 ? l2norm_fwd_vec_kernel<4>
                               : l2norm_fwd_vec_kernel<8>;
        launch_kernel(kern, dim3(row_blocks(rows)), dim3(32 * ROW_WARPS), 0, (bf16 *)y, (float *)rstd,
                      (const bf16 *)x, rows, (float)eps);
        return;
    }
    launch_kernel(l2norm_fwd_kernel, dim3(row_blocks(rows)), dim3(32 * ROW_WARPS), 0, (bf16 *)y, (float *)rstd,
                  (const bf16 *)x, rows, D, (float)eps);
}

extern "C" void cuda_l2norm_backward(real *dx, const real *dy, const real *y, const real *rstd, size_t rows, int D) {
    PROFILE("l2norm_bwd");
    if (D < 1) die("cuda_l2norm_backward: bad D=%d", D);
    if (rows == 0) return;
    if (l2norm_vec(D, dx, dy, y)) {
        auto kern = D == 64    ? l2norm_bwd_vec_kernel<2>
                    : D == 128 ? l2norm_bwd_vec_kernel<4>
                               : l2norm_bwd_vec_kernel<8>;
        launch_kernel(kern, dim3(row_blocks(rows)), dim3(32 * ROW_WARPS), 0, (bf16 *)dx, (const bf16 *)dy,
                      (const bf16 *)y, (const float *)rstd, rows);
        return;
    }
    launch_kernel(l2norm_bwd_kernel, dim3(row_blocks(rows)), dim3(32 * ROW_WARPS), 0, (bf16 *)dx, (const bf16 *)dy,
                  (const bf16 *)y, (const float *)rstd, rows, D);
}

// ---- decay gate ------------------------------------------------------------------------
//   lower_bound == 0: g = -A softplus(u),  lower_bound < 0: g = lb sigmoid(A u),
//   u = x + dt_bias[h*K+i], A = exp(A_log[h]) (1 without A_log)
__device__ __forceinline__ float gate_A(const bf16 *A_log, int h) { return A_log ? expf(__bfloat162float(A_log[h])) : 1.f; }
__device__ __forceinline__ float gate_u(const bf16 *x, const bf16 *dt_bias, size_t idx, int col) {
    return __bfloat162float(x[idx]) + (dt_bias ? __bfloat162float(dt_bias[col]) : 0.f);
}

// one element of g from u, and of dx (with its dA_log term) from dg and u: the scalar and the
// vector kernels share these, so they compute the same bits
__device__ __forceinline__ float gate_value(float u, float A, float lb) {
    return lb < 0.f ? lb * dr_sigmoid(A * u) : -A * dr_softplus(u);
}
__device__ __forceinline__ float gate_grad(float d, float u, float A, float lb, float *dAl) {
    if (lb < 0.f) {  // g = lb sigma(A u): dx = dg lb sigma (1 - sigma) A ; dA_log term dx u
        const float sg = dr_sigmoid(A * u), dxi = d * lb * sg * (1.f - sg) * A;
        *dAl += dxi * u;
        return dxi;
    }
    // g = -A softplus(u): dx = -dg A sigma(u) ; dA_log term dg g
    *dAl += d * (-A * dr_softplus(u));
    return d * (-A) * dr_sigmoid(u);
}

__global__ void gate_fwd_kernel(bf16 *g, const bf16 *x, const bf16 *A_log, const bf16 *dt_bias, size_t n, int H,
                                int K, float lb) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    const int col = (int)(idx % ((size_t)H * K)), h = col / K;
    g[idx] = __float2bfloat16(gate_value(gate_u(x, dt_bias, idx, col), gate_A(A_log, h), lb));
}

// One thread per column (h, i) over one chunk of rows, in order: writes dx and the chunk's
// partials partial[chunk][col] = sum dx (dt_bias), partial[chunk][H*K + col] = the dA_log terms
// (lb < 0: dx u; else dg g).
__global__ void gate_bwd_kernel(bf16 *dx, float *partial, const bf16 *dg, const bf16 *x, const bf16 *A_log,
                                const bf16 *dt_bias, size_t N, int rows_per_chunk, int H, int K, float lb) {
    const int cols = H * K, col = blockIdx.y * blockDim.x + threadIdx.x;
    if (col >= cols) return;
    const int h = col / K;
    const float A = gate_A(A_log, h);
    const size_t n0 = (size_t)blockIdx.x * rows_per_chunk;
    const size_t n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
    float db = 0.f, dAl = 0.f;
    for (size_t n = n0; n < n1; n++) {
        const size_t idx = n * cols + col;
        const float dxi = gate_grad(__bfloat162float(dg[idx]), gate_u(x, dt_bias, idx, col), A, lb, &dAl);
        dx[idx] = __float2bfloat16(dxi);
        db += dxi;
    }
    partial[(size_t)blockIdx.x * 2 * cols + col] = db;
    partial[(size_t)blockIdx.x * 2 * cols + cols + col] = dAl;
}

// The vector kernels (K % 8 == 0 and 16-byte aligned tensors: the KDA layers' gate, K = 128):
// a thread takes 8 adjacent columns (one head: K % 8 == 0), down a run of rows, with 16-byte
// loads and stores, A and dt_bias read once, and no index division per element (the scalar
// kernels divide a 64-bit index by H K for every element). Each element's value is the same
// expression of the same operands (gate_u's sum with + 0.f where dt_bias is NULL, then the
// same activation), and the backward's per-column sums run over the same rows in the same
// order into the same partials: the same bits as the scalar kernels (HYBRID_GATE_REF=1, read at
// each call, selects those; tests/gpu/test_delta_rule_layer.c compares the two bit for bit).
#define GATE_VEC_ROWS 32  // rows a forward thread walks
// the vector kernels apply: K % 8 == 0, the three (N, H, K) tensors and dt_bias (if any) 16-byte aligned
static int gate_vec_ok(int K, const void *a, const void *b, const void *c, const void *dt_bias) {
    return !env_flag("HYBRID_GATE_REF") && K % 8 == 0 && is_aligned16(a) && is_aligned16(b) && is_aligned16(c) &&
           (!dt_bias || is_aligned16(dt_bias));
}
// the 8 dt_bias values of columns c.. (0 without dt_bias)
__device__ __forceinline__ void gate_dt8(const bf16 *dt_bias, int c, float dt[8]) {
    if (dt_bias) load8(dt_bias + c, dt);
    else
#pragma unroll
        for (int k = 0; k < 8; k++) dt[k] = 0.f;
}
__global__ void gate_fwd_vec_kernel(bf16 *g, const bf16 *x, const bf16 *A_log, const bf16 *dt_bias, size_t N, int H,
                                    int K, float lb) {
    const int cols = H * K, c = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= cols) return;
    const float A = gate_A(A_log, c / K);
    float dt[8];
    gate_dt8(dt_bias, c, dt);
    const size_t n0 = (size_t)blockIdx.y * GATE_VEC_ROWS, n1 = n0 + GATE_VEC_ROWS < N ? n0 + GATE_VEC_ROWS : N;
#pragma unroll 4
    for (size_t n = n0; n < n1; n++) {
        float v[8];
        load8(x + n * cols + c, v);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = gate_value(v[k] + dt[k], A, lb);
        store8(g + n * cols + c, v);
    }
}
// gate_bwd_kernel for 8 adjacent columns a thread (the same per-column sums, rows in order)
__global__ void gate_bwd_vec_kernel(bf16 *dx, float *partial, const bf16 *dg, const bf16 *x, const bf16 *A_log,
                                    const bf16 *dt_bias, size_t N, int rows_per_chunk, int H, int K, float lb) {
    const int cols = H * K, c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
    if (c >= cols) return;
    const float A = gate_A(A_log, c / K);
    float dt[8], db[8], dAl[8];
    gate_dt8(dt_bias, c, dt);
#pragma unroll
    for (int k = 0; k < 8; k++) db[k] = dAl[k] = 0.f;
    const size_t n0 = (size_t)blockIdx.x * rows_per_chunk;
    const size_t n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
#pragma unroll 2
    for (size_t n = n0; n < n1; n++) {
        float xv[8], d[8];
        load8(x + n * cols + c, xv);
        load8(dg + n * cols + c, d);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            xv[k] = gate_grad(d[k], xv[k] + dt[k], A, lb, &dAl[k]);
            db[k] += xv[k];
        }
        store8(dx + n * cols + c, xv);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        partial[(size_t)blockIdx.x * 2 * cols + c + k] = db[k];
        partial[(size_t)blockIdx.x * 2 * cols + cols + c + k] = dAl[k];
    }
}
// threads a block of the column kernels for `cols` columns (or column groups): whole warps, at most 128
static unsigned gate_threads(int cols) { return cols < 128 ? (unsigned)((cols + 31) / 32 * 32) : 128u; }

// dA_log[h] += sum_i per_col[h*K+i] (i in order)
__global__ void gate_dA_kernel(float *dA_log, const float *per_col, int H, int K) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= H) return;
    float s = 0.f;
    for (int i = 0; i < K; i++) s += per_col[(size_t)h * K + i];
    dA_log[h] += s;
}

extern "C" void cuda_decay_gate_forward(real *g, const real *x, const real *A_log, const real *dt_bias, size_t N,
                                        int H, int K, real lower_bound) {
    PROFILE("decay_gate_fwd");
    if (H < 1 || K < 1 || lower_bound > 0) die("cuda_decay_gate_forward: bad H=%d K=%d lower_bound=%g", H, K, lower_bound);
    const size_t n = N * H * K;
    if (n == 0) return;
    if (gate_vec_ok(K, g, x, x, dt_bias)) {
        const int groups = H * K / 8;
        const unsigned t = gate_threads(groups);
        launch_kernel(gate_fwd_vec_kernel, dim3((groups + t - 1) / t, (unsigned)((N + GATE_VEC_ROWS - 1) / GATE_VEC_ROWS)),
                      dim3(t), 0, (bf16 *)g, (const bf16 *)x, (const bf16 *)A_log, (const bf16 *)dt_bias, N, H, K,
                      (float)lower_bound);
        return;
    }
    launch_kernel(gate_fwd_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, (bf16 *)g, (const bf16 *)x,
                  (const bf16 *)A_log, (const bf16 *)dt_bias, n, H, K, (float)lower_bound);
}

extern "C" void cuda_decay_gate_backward(real *dx, real *dA_log, real *ddt_bias, const real *dg, const real *x,
                                         const real *A_log, const real *dt_bias, size_t N, int H, int K,
                                         real lower_bound) {
    PROFILE("decay_gate_bwd");
    if (H < 1 || K < 1 || lower_bound > 0) die("cuda_decay_gate_backward: bad H=%d K=%d lower_bound=%g", H, K, lower_bound);
    if (N == 0) return;
    const int cols = H * K;
    int chunks;
    const int per = grad_row_chunks(N, &chunks);
    float *partial = (float *)scratch_get(((size_t)chunks * 2 * cols + cols) * sizeof(float));
    float *per_col = partial + (size_t)chunks * 2 * cols;
    if (gate_vec_ok(K, dx, dg, x, dt_bias)) {
        const int groups = cols / 8;
        const unsigned t = gate_threads(groups);
        launch_kernel(gate_bwd_vec_kernel, dim3((unsigned)chunks, (groups + t - 1) / t), dim3(t), 0, (bf16 *)dx,
                      partial, (const bf16 *)dg, (const bf16 *)x, (const bf16 *)A_log, (const bf16 *)dt_bias, N, per,
                      H, K, (float)lower_bound);
    } else {
        const unsigned t = gate_threads(cols);
        launch_kernel(gate_bwd_kernel, dim3((unsigned)chunks, (cols + t - 1) / t), dim3(t), 0, (bf16 *)dx, partial,
                      (const bf16 *)dg, (const bf16 *)x, (const bf16 *)A_log, (const bf16 *)dt_bias, N, per, H, K,
                      (float)lower_bound);
    }
    if (ddt_bias) grad_reduce_add((float *)ddt_bias, partial, chunks, cols, (size_t)2 * cols);
    if (dA_log && A_log) {
        grad_reduce_f32(per_col, partial + cols, chunks, cols, (size_t)2 * cols);
        launch_kernel(gate_dA_kernel, dim3((unsigned)((H + 127) / 128)), dim3(128), 0, (float *)dA_log,
                      (const float *)per_col, H, K);
    }
}

// ---- beta = c sigmoid(b), c = 2 with negative eigenvalues allowed, else 1 ---------------
__global__ void beta_fwd_kernel(bf16 *beta, const bf16 *b, size_t n, float c) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) beta[i] = __float2bfloat16(c * dr_sigmoid(__bfloat162float(b[i])));
}

// db = dbeta c sigma (1 - sigma), sigma = beta / c (the forward's bf16 beta, as the CPU)
__global__ void beta_bwd_kernel(bf16 *db, const bf16 *dbeta, const bf16 *beta, size_t n, float c) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float sg = __bfloat162float(beta[i]) / c;
    db[i] = __float2bfloat16(__bfloat162float(dbeta[i]) * c * sg * (1.f - sg));
}

extern "C" void cuda_beta_forward(real *beta, const real *b, size_t n, int neg_eigval) {
    PROFILE("beta_fwd");
    if (n == 0) return;
    launch_kernel(beta_fwd_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, (bf16 *)beta, (const bf16 *)b, n,
                  neg_eigval ? 2.f : 1.f);
}

extern "C" void cuda_beta_backward(real *db, const real *dbeta, const real *beta, size_t n, int neg_eigval) {
    PROFILE("beta_bwd");
    if (n == 0) return;
    launch_kernel(beta_bwd_kernel, dim3(elem_blocks(n)), dim3(ELEM_THREADS), 0, (bf16 *)db, (const bf16 *)dbeta,
                  (const bf16 *)beta, n, neg_eigval ? 2.f : 1.f);
}
