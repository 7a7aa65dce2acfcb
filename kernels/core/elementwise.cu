// Elementwise ops on bf16 tensors (residual add, gradient accumulation, scaling,
// tanh-GELU) and the deterministic sums of fp32 tensors (per-row losses; the squares of the
// parameter gradients, for the gradient norm). Math in fp32 (the sums in double); the CPU
// reference (model/ops/core/elementwise.c, gelu.c) gives the equations.
//
// Vector path: 8 bf16 (16 bytes) per thread when every pointer is 16-byte aligned;
// the tail (n % 8) and misaligned tensors take the scalar path. Grid-stride loops.
#include "kernels/common.cuh"

#define GELU_K 0.7978845608028654f  // sqrt(2/pi)
#define GELU_A 0.044715f

struct OpAdd {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct OpGeluBwd {  // a = x (the GELU input), b = dout
    __device__ float operator()(float x, float dout) const {
        float u = GELU_K * (x + GELU_A * x * x * x);
        float t = tanhf(u);
        float dydx = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * GELU_K * (1.f + 3.f * GELU_A * x * x);
        return dydx * dout;
    }
};
struct OpGelu {
    __device__ float operator()(float x) const {
        float t = tanhf(GELU_K * (x + GELU_A * x * x * x));
        return 0.5f * x * (1.f + t);
    }
};
struct OpScale {
    float s;
    __device__ float operator()(float x) const { return x * s; }
};

// out[i] = op(a[i], b[i])  (out may alias a or b)
template <typename Op>
__global__ void binary_vec_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t nvec, Op op) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
        float x[8], y[8];
        load8(a + 8 * i, x);
        load8(b + 8 * i, y);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = op(x[k], y[k]);
        store8(out + 8 * i, x);
    }
}

template <typename Op>
__global__ void binary_scalar_kernel(bf16 *out, const bf16 *a, const bf16 *b, size_t start, size_t n, Op op) {
    for (size_t i = start + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(op(__bfloat162float(a[i]), __bfloat162float(b[i])));
}

template <typename Op>
__global__ void unary_vec_kernel(bf16 *out, const bf16 *a, size_t nvec, Op op) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nvec; i += (size_t)gridDim.x * blockDim.x) {
        float x[8];
        load8(a + 8 * i, x);
#pragma unroll
        for (int k = 0; k < 8; k++) x[k] = op(x[k]);
        store8(out + 8 * i, x);
    }
}

template <typename Op>
__global__ void unary_scalar_kernel(bf16 *out, const bf16 *a, size_t start, size_t n, Op op) {
    for (size_t i = start + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(op(__bfloat162float(a[i])));
}

template <typename Op>
static void binary(bf16 *out, const bf16 *a, const bf16 *b, size_t n, Op op) {
    if (!n) return;
    size_t nvec = (is_aligned16(out) && is_aligned16(a) && is_aligned16(b)) ? n / 8 : 0;
    if (nvec) {
        launch_kernel(binary_vec_kernel<Op>, grid_for(nvec, 256), 256, 0, out, a, b, nvec, op);
    }
    if (nvec * 8 < n) {
        launch_kernel(binary_scalar_kernel<Op>, grid_for(n - nvec * 8, 256), 256, 0, out, a, b, nvec * 8, n, op);
    }
}

template <typename Op>
static void unary(bf16 *out, const bf16 *a, size_t n, Op op) {
    if (!n) return;
    size_t nvec = (is_aligned16(out) && is_aligned16(a)) ? n / 8 : 0;
    if (nvec) {
        launch_kernel(unary_vec_kernel<Op>, grid_for(nvec, 256), 256, 0, out, a, nvec, op);
    }
    if (nvec * 8 < n) {
        launch_kernel(unary_scalar_kernel<Op>, grid_for(n - nvec * 8, 256), 256, 0, out, a, nvec * 8, n, op);
    }
}

void cuda_add_forward(real *out, const real *a, const real *b, size_t n) {
    PROFILE("add");
    binary((bf16 *)out, (const bf16 *)a, (const bf16 *)b, n, OpAdd());
}

void cuda_add_inplace(real *acc, const real *x, size_t n) {
    PROFILE("add");
    binary((bf16 *)acc, (const bf16 *)acc, (const bf16 *)x, n, OpAdd());
}

void cuda_scale(real *x, float s, size_t n) {
    PROFILE("scale");
    OpScale op;
    op.s = s;
    unary((bf16 *)x, (const bf16 *)x, n, op);
}

void cuda_gelu_forward(real *out, const real *inp, size_t n) {
    PROFILE("gelu_fwd");
    unary((bf16 *)out, (const bf16 *)inp, n, OpGelu());
}

void cuda_gelu_backward(real *dinp, const real *inp, const real *dout, size_t n) {
    PROFILE("gelu_bwd");
    binary((bf16 *)dinp, (const bf16 *)inp, (const bf16 *)dout, n, OpGeluBwd());
}

// ---------------------------------------------------------------------------
// Deterministic sums: a fixed grid of SUM_BLOCKS blocks, each summing a fixed set of
// elements in a fixed order (double), then one block adding the partials in order.
// The result depends only on n and the data.

#define SUM_BLOCKS 512
#define SUM_THREADS 256

// (each element, or its square, added in double)
template <bool SQUARES>
__global__ void sum_f32_kernel(double *partial, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const double v = x[i];
        s += SQUARES ? v * v : v;
    }
    s = block_sum_d(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(double *out, const double *partial, int n) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    s = block_sum_d(s);
    if (threadIdx.x == 0) *out = s;
}

static double finish_sum(double *partial) {
    double *result = partial + SUM_BLOCKS;
    launch_kernel(sum_partials_kernel, 1, SUM_THREADS, 0, result, partial, SUM_BLOCKS);
    double host = 0;
    CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof(double), cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    return host;
}

// sum of a statistics buffer (fp32 on this backend: the per-row losses)
double cuda_sum(const real *x, size_t n) {
    PROFILE("sum");
    if (!n) return 0.0;
    double *partial = (double *)scratch_get((SUM_BLOCKS + 1) * sizeof(double));
    launch_kernel(sum_f32_kernel<false>, SUM_BLOCKS, SUM_THREADS, 0, partial, (const float *)x, n);
    return finish_sum(partial);
}

// sum of squares of the parameter gradients (fp32 on this backend: model/backend.h, grad_size;
// the graph calls it on nothing else)
double cuda_sum_squares(const real *x, size_t n) {
    PROFILE("sum_squares");
    if (!n) return 0.0;
    double *partial = (double *)scratch_get((SUM_BLOCKS + 1) * sizeof(double));
    launch_kernel(sum_f32_kernel<true>, SUM_BLOCKS, SUM_THREADS, 0, partial, (const float *)x, n);
    return finish_sum(partial);
}
