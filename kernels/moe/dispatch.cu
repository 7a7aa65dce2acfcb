// Dropless dispatch on the device (model/ops/moe/dispatch.c gives the equations; docs/hybrid.md,
// "Dropless permutation and grouped expert FFN").
// Plan: a stable counting sort of the N*K slots by expert in three launches, no atomics:
//   1. chunk histograms: block b counts, per expert, the slots of chunk b (PLAN_CHUNK slots)
//      -> hist (nchunk, E) int (scratch);
//   2. one block: offsets (E+1) = exclusive prefix of the totals; hist[b][e] becomes the
//      first sorted row of chunk b's expert-e slots (the chunks in order: stability);
//   3. block b places its slots, one thread per expert walking the chunk in slot order.
// So perm lists each expert's slots in increasing slot order, exactly the reference's.
// sel entries outside [0, E) are not checked here (see balance.cu's moe_count).
// gather / combine: one block per destination row, threads over channels; every sum over
// j runs in j order in fp32 (the reference in double), outputs bf16.
#include "kernels/common.cuh"

#define PLAN_CHUNK 256

__global__ void plan_hist_kernel(int *hist, const int *sel, int NK, int E) {
    __shared__ int s[PLAN_CHUNK];
    const int b = blockIdx.x, n0 = b * PLAN_CHUNK, len = min(PLAN_CHUNK, NK - n0);
    for (int i = threadIdx.x; i < PLAN_CHUNK; i += blockDim.x) s[i] = i < len ? sel[n0 + i] : -1;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int c = 0;
        for (int i = 0; i < len; i++) c += s[i] == e;
        hist[(size_t)b * E + e] = c;
    }
}

__global__ void plan_scan_kernel(int *hist, int *offsets, int nchunk, int E) {
    // per expert: the chunk bases relative to the expert's first row, and its total
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int run = 0;
        for (int b = 0; b < nchunk; b++) {
            int c = hist[(size_t)b * E + e];
            hist[(size_t)b * E + e] = run;
            run += c;
        }
        offsets[e + 1] = run;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        offsets[0] = 0;
        for (int e = 0; e < E; e++) offsets[e + 1] += offsets[e];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        for (int b = 0; b < nchunk; b++) hist[(size_t)b * E + e] += offsets[e];
}

__global__ void plan_place_kernel(int *perm, int *pos, const int *hist, const int *sel, int NK, int E) {
    __shared__ int s[PLAN_CHUNK];
    const int b = blockIdx.x, n0 = b * PLAN_CHUNK, len = min(PLAN_CHUNK, NK - n0);
    for (int i = threadIdx.x; i < PLAN_CHUNK; i += blockDim.x) s[i] = i < len ? sel[n0 + i] : -1;
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int p = hist[(size_t)b * E + e];
        for (int i = 0; i < len; i++)
            if (s[i] == e) {
                perm[p] = n0 + i;
                pos[n0 + i] = p;
                p++;
            }
    }
}

void cuda_moe_dispatch_plan(int *perm, int *pos, int *offsets, const int *sel, int N, int K, int E) {
    PROFILE("moe_plan");
    const int NK = N * K, nchunk = (NK + PLAN_CHUNK - 1) / PLAN_CHUNK;
    if (E <= 0) die("moe dispatch: %d experts", E);
    if (NK == 0) {
        CUDA_CHECK(cudaMemsetAsync(offsets, 0, sizeof(int) * (E + 1), g_cuda.stream));
        return;
    }
    int *hist = (int *)scratch_get(sizeof(int) * (size_t)nchunk * E);
    launch_kernel(plan_hist_kernel, dim3(nchunk), dim3(128), 0, hist, sel, NK, E);
    launch_kernel(plan_scan_kernel, dim3(1), dim3(256), 0, hist, offsets, nchunk, E);
    launch_kernel(plan_place_kernel, dim3(nchunk), dim3(128), 0, perm, pos, (const int *)hist, sel, NK, E);
}

// xp[p] = x[perm[p] / K]
__global__ void gather_forward_kernel(bf16 *xp, const bf16 *x, const int *perm, int K, int C) {
    const size_t p = blockIdx.x;
    const bf16 *src = x + (size_t)(perm[p] / K) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) xp[p * C + c] = src[c];
}

// dx[t] = sum_j dxp[pos[t K + j]]
__global__ void gather_backward_kernel(bf16 *dx, const bf16 *dxp, const int *pos, int K, int C) {
    const size_t t = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < K; j++) acc += __bfloat162float(dxp[(size_t)pos[t * K + j] * C + c]);
        dx[t * C + c] = __float2bfloat16(acc);
    }
}

// out[t] = sum_j w[t K + j] yp[pos[t K + j]]
__global__ void combine_forward_kernel(bf16 *out, const bf16 *yp, const bf16 *w, const int *pos, int K, int C) {
    const size_t t = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < K; j++)
            acc += __bfloat162float(w[t * K + j]) * __bfloat162float(yp[(size_t)pos[t * K + j] * C + c]);
        out[t * C + c] = __float2bfloat16(acc);
    }
}

// dyp[pos[n]] = w[n] dout[t]; dw[n] = dout[t] . yp[pos[n]] (block_sum: a fixed tree)
__global__ void combine_backward_kernel(bf16 *dyp, bf16 *dw, const bf16 *dout, const bf16 *yp, const bf16 *w,
                                        const int *pos, int K, int C) {
    const size_t t = blockIdx.x;
    const bf16 *dr = dout + t * C;
    for (int j = 0; j < K; j++) {
        const size_t n = t * K + j, p = (size_t)pos[n];
        const float wn = __bfloat162float(w[n]);
        float dot = 0.f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float d = __bfloat162float(dr[c]);
            dot += d * __bfloat162float(yp[p * C + c]);
            dyp[p * C + c] = __float2bfloat16(wn * d);
        }
        dot = block_sum(dot);
        if (threadIdx.x == 0) dw[n] = __float2bfloat16(dot);
    }
}

static inline int row_threads(int C) { return C >= 256 ? 256 : C > 64 ? 128 : 64; }

void cuda_moe_gather_forward(real *xp, const real *x, const int *perm, int N, int K, int C) {
    PROFILE("moe_gather_fwd");
    if ((long)N * K == 0 || C == 0) return;
    launch_kernel(gather_forward_kernel, dim3(N * K), dim3(row_threads(C)), 0, (bf16 *)xp, (const bf16 *)x, perm, K,
                  C);
}

void cuda_moe_gather_backward(real *dx, const real *dxp, const int *pos, int N, int K, int C) {
    PROFILE("moe_gather_bwd");
    if (N == 0 || C == 0) return;
    launch_kernel(gather_backward_kernel, dim3(N), dim3(row_threads(C)), 0, (bf16 *)dx, (const bf16 *)dxp, pos, K,
                  C);
}

void cuda_moe_combine_forward(real *out, const real *yp, const real *weights, const int *pos, int N, int K, int C) {
    PROFILE("moe_combine_fwd");
    if (N == 0 || C == 0) return;
    launch_kernel(combine_forward_kernel, dim3(N), dim3(row_threads(C)), 0, (bf16 *)out, (const bf16 *)yp,
                  (const bf16 *)weights, pos, K, C);
}

void cuda_moe_combine_backward(real *dyp, real *dweights, const real *dout, const real *yp, const real *weights,
                               const int *pos, int N, int K, int C) {
    PROFILE("moe_combine_bwd");
    if (N == 0) return;
    launch_kernel(combine_backward_kernel, dim3(N), dim3(row_threads(C)), 0, (bf16 *)dyp, (bf16 *)dweights,
                  (const bf16 *)dout, (const bf16 *)yp, (const bf16 *)weights, pos, K, C);
}
