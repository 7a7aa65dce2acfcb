// Token + position embedding (model/ops/embed.c gives the equations).
// Forward: out[bt] = wte[tok[bt]] + wpe[t], 8 channels per thread.
// Backward, deterministic without float atomics:
//   dwpe[t] += sum_b dout[b, t]          one thread per (t, 8 channels), b in order
//   dwte[v] += sum_{bt: tok = v} dout[bt]  the (token, position) pairs are sorted by
//   token with CUB's stable radix sort (positions stay in increasing order within a
//   token); one block per distinct token then sums its rows in that order.
// dwte and dwpe are parameter gradients: fp32 (model/backend.h, grad_size), the fp32 sums
// added to them unrounded.
#ifndef HYBRID_CUDA_EMU  // (the emulator has its own DeviceRadixSort: tests/cuda_emu/cuda_emu.h)
#include <cub/cub.cuh>
#endif

#include "kernels/common.cuh"

__global__ void embed_forward_vec_kernel(bf16 *out, const int *tokens, const bf16 *wte, const bf16 *wpe, int N, int T,
                                         int C) {
    int cv = C / 8;
    size_t total = (size_t)N * cv;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / cv;
        int c = (int)(i % cv) * 8, t = (int)(bt % T);
        float a[8], p[8];
        load8(wte + (size_t)tokens[bt] * C + c, a);
        if (wpe) {
            load8(wpe + (size_t)t * C + c, p);
#pragma unroll
            for (int k = 0; k < 8; k++) a[k] += p[k];
        }
        store8(out + bt * C + c, a);
    }
}

__global__ void embed_forward_scalar_kernel(bf16 *out, const int *tokens, const bf16 *wte, const bf16 *wpe, int N,
                                            int T, int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t bt = i / C;
        int c = (int)(i % C), t = (int)(bt % T);
        float a = __bfloat162float(wte[(size_t)tokens[bt] * C + c]);
        if (wpe) a += __bfloat162float(wpe[(size_t)t * C + c]);
        out[i] = __float2bfloat16(a);
    }
}

void cuda_embed_forward(real *out, const int *tokens, const real *wte, const real *wpe, int B, int T, int C) {
    PROFILE("embed_fwd");
    int N = B * T;
    if (N <= 0) return;
    int vec = C % 8 == 0 && is_aligned16(out) && is_aligned16(wte) && (!wpe || is_aligned16(wpe));
    if (vec)
        launch_kernel(embed_forward_vec_kernel, grid_for((size_t)N * C / 8, 256), 256, 0, (bf16 *)out, tokens,
            (const bf16 *)wte, (const bf16 *)wpe, N, T, C);
    else
        launch_kernel(embed_forward_scalar_kernel, grid_for((size_t)N * C, 256), 256, 0, (bf16 *)out, tokens,
            (const bf16 *)wte, (const bf16 *)wpe, N, T, C);
}

// dwpe[t, c] += sum_b dout[b, t, c]
__global__ void embed_dwpe_kernel(float *dwpe, const bf16 *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int b = 0; b < B; b++) s += __bfloat162float(dout[(size_t)b * T * C + i]);
        dwpe[i] += s;
    }
}

__global__ void iota_kernel(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

// Block i handles the run of equal tokens starting at sorted index i (if one starts
// there): thread j owns channels j, j + blockDim.x, ... and adds the run's rows in order.
__global__ void embed_dwte_kernel(float *dwte, const bf16 *dout, const int *sorted_tok, const int *sorted_pos, int N,
                                  int C) {
    int i = blockIdx.x;
    int tok = sorted_tok[i];
    if (i > 0 && sorted_tok[i - 1] == tok) return;
    int end = i + 1;
    while (end < N && sorted_tok[end] == tok) end++;
    float *g = dwte + (size_t)tok * C;
    if (C % 8 == 0) {
        for (int c = threadIdx.x * 8; c < C; c += blockDim.x * 8) {
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int r = i; r < end; r++) {
                float f[8];
                load8(dout + (size_t)sorted_pos[r] * C + c, f);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[k] += f[k];
            }
#pragma unroll
            for (int k = 0; k < 8; k++) g[c + k] += acc[k];
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float acc = 0.f;
            for (int r = i; r < end; r++) acc += __bfloat162float(dout[(size_t)sorted_pos[r] * C + c]);
            g[c] += acc;
        }
    }
}

void cuda_embed_backward(real *dwte, real *dwpe, const real *dout, const int *tokens, int B, int T, int C) {
    PROFILE("embed_bwd");
    int N = B * T;
    if (N <= 0) return;
    if (dwpe) {
        launch_kernel(embed_dwpe_kernel, grid_for((size_t)T * C, 256), 256, 0, (float *)dwpe, (const bf16 *)dout, B, T,
            C);
    }
    // scratch: pos_in | tok_out | pos_out | CUB temp
    size_t temp_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, (const int *)NULL, (int *)NULL, (const int *)NULL,
                                               (int *)NULL, N, 0, 31, g_cuda.stream));
    size_t ints = ((size_t)3 * N + 63) / 64 * 64;
    char *s = (char *)scratch_get(ints * sizeof(int) + temp_bytes);
    int *pos_in = (int *)s, *tok_out = pos_in + N, *pos_out = tok_out + N;
    void *temp = s + ints * sizeof(int);
    launch_kernel(iota_kernel, (N + 255) / 256, 256, 0, pos_in, N);
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, tok_out, pos_in, pos_out, N, 0, 31,
                                               g_cuda.stream));
    LAUNCH_CHECK();
    int threads = C % 8 == 0 ? (C / 8 < 32 ? 32 : (C / 8 > 256 ? 256 : (C / 8 + 31) / 32 * 32)) : 256;
    launch_kernel(embed_dwte_kernel, N, threads, 0, (float *)dwte, (const bf16 *)dout, tok_out, pos_out, N, C);
}
