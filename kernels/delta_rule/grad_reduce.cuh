// Deterministic parameter gradients of the delta-rule layer ops (conv weight and bias,
// dt_bias, A_log, the gated RMSNorm weight): a first kernel writes one fp32 partial sum per
// (row chunk, parameter) into scratch, each over its rows in order; the kernels here add the
// chunks in a fixed order (no atomics), so the result does not depend on scheduling
// (kernels/norm_rows.cuh does the same for LayerNorm and RMSNorm).
#ifndef HYBRID_KERNELS_DELTA_RULE_GRAD_REDUCE_CUH
#define HYBRID_KERNELS_DELTA_RULE_GRAD_REDUCE_CUH

#include "kernels/common.cuh"

#define GRAD_ROWS_PER_CHUNK 64  // rows of one partial sum (at least)
#define GRAD_MAX_CHUNKS 1024    // at most this many partials per parameter

// Splits `rows` rows into *chunks chunks of rows_per_chunk rows (the last may be short).
static inline int grad_row_chunks(size_t rows, int *chunks) {
    size_t c = (rows + GRAD_ROWS_PER_CHUNK - 1) / GRAD_ROWS_PER_CHUNK;
    if (c > GRAD_MAX_CHUNKS) c = GRAD_MAX_CHUNKS;
    if (c < 1) c = 1;
    size_t per = (rows + c - 1) / c;
    if (per < 1) per = 1;
    *chunks = (int)((rows + per - 1) / per);
    if (*chunks < 1) *chunks = 1;
    return (int)per;
}

// out[i] (+)= sum_{k < chunks} partial[k * stride + i], i < n: ACC adds into bf16, else
// writes fp32. One thread per parameter adds the chunks in order (coalesced over i; at most
// GRAD_MAX_CHUNKS loads each).
template <bool ACC>
__global__ void grad_reduce_kernel(void *out, const float *partial, int chunks, int n, size_t stride) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = 0.f;
    for (int k = 0; k < chunks; k++) s += partial[(size_t)k * stride + i];
    if (ACC) {
        bf16 *o = (bf16 *)out + i;
        *o = __float2bfloat16(__bfloat162float(*o) + s);
    } else {
        ((float *)out)[i] = s;
    }
}

// dst (bf16, n) += the chunks' partials
static inline void grad_reduce_add(bf16 *dst, const float *partial, int chunks, int n, size_t stride) {
    launch_kernel(grad_reduce_kernel<true>, dim3((n + 127) / 128), dim3(128), 0, (void *)dst, partial, chunks, n,
                  stride);
}

// dst (fp32, n) = the chunks' partials
static inline void grad_reduce_f32(float *dst, const float *partial, int chunks, int n, size_t stride) {
    launch_kernel(grad_reduce_kernel<false>, dim3((n + 127) / 128), dim3(128), 0, (void *)dst, partial, chunks, n,
                  stride);
}

#endif
