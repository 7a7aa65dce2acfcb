// Deterministic parameter gradients of the delta-rule layer ops (conv weight and bias,
// dt_bias, A_log, the gated RMSNorm weight): a first kernel writes one fp32 partial sum per
// (row chunk, parameter) into scratch, each over its rows in order; the kernels here add the
// chunks in a fixed order (no atomics), so the result does not depend on scheduling
// (kernels/norm_rows.cuh does the same for LayerNorm and RMSNorm). The parameter gradients
// themselves are fp32 (model/backend.h, `grad_size`; docs/cuda.md, "Precision"): the sum is
// added to them unrounded.
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

// out[i] (+)= sum_{k < chunks} partial[k * stride + i], i < n (fp32): ACC adds, else
// writes; for each i the chunks are added in order k = 0, 1, ... from 0.f (the fixed order
// every caller's bits rest on). A block takes GRAD_RED_COLS consecutive i: its GRAD_RED_WARPS
// warps stage GRAD_RED_TILE chunks at a time into shared memory (each thread GRAD_RED_TILE /
// GRAD_RED_WARPS independent loads in flight, two buffers), and its first warp adds them in
// order, one lane per i. (The first version, one thread per i walking its 1,024 chunks with a
// few loads in flight and 24 blocks for the 3,072 conv weights, was latency-bound:
// docs/delta-rule.md, "CUDA kernels".)
#define GRAD_RED_COLS 32   // outputs per block: one lane of the adding warp each
#define GRAD_RED_WARPS 8   // warps loading
#define GRAD_RED_TILE 128  // chunks per staged tile (two tiles: 32 KiB)
template <bool ACC>
__global__ void grad_reduce_kernel(float *out, const float *partial, int chunks, int n, size_t stride) {
    __shared__ float tile[2][GRAD_RED_TILE][GRAD_RED_COLS];
    const int lane = threadIdx.x % GRAD_RED_COLS, wp = threadIdx.x / GRAD_RED_COLS;
    const int i = blockIdx.x * GRAD_RED_COLS + lane;
    constexpr int PER = GRAD_RED_TILE / GRAD_RED_WARPS;  // loads per thread and tile
    float s = 0.f;
    for (int k0 = 0, t = 0; k0 < chunks; k0 += GRAD_RED_TILE, t++) {
        // buffer t&1 was last read by warp 0 in pass t-2, before it reached pass t-1's barrier
        float(*buf)[GRAD_RED_COLS] = tile[t & 1];
        float v[PER];
#pragma unroll
        for (int m = 0; m < PER; m++) {
            const int k = k0 + wp + m * GRAD_RED_WARPS;
            v[m] = k < chunks && i < n ? partial[(size_t)k * stride + i] : 0.f;
        }
#pragma unroll
        for (int m = 0; m < PER; m++) buf[wp + m * GRAD_RED_WARPS][lane] = v[m];
        __syncthreads();
        if (wp == 0) {
            const int nk = chunks - k0 < GRAD_RED_TILE ? chunks - k0 : GRAD_RED_TILE;
            for (int kk = 0; kk < nk; kk++) s += buf[kk][lane];
        }
    }
    if (wp != 0 || i >= n) return;
    out[i] = ACC ? out[i] + s : s;
}

// dst (a parameter gradient: fp32, n) += the chunks' partials
static inline void grad_reduce_add(float *dst, const float *partial, int chunks, int n, size_t stride) {
    launch_kernel(grad_reduce_kernel<true>, dim3((n + GRAD_RED_COLS - 1) / GRAD_RED_COLS),
                  dim3(GRAD_RED_COLS * GRAD_RED_WARPS), 0, dst, partial, chunks, n, stride);
}

// dst (fp32 scratch, n) = the chunks' partials
static inline void grad_reduce_f32(float *dst, const float *partial, int chunks, int n, size_t stride) {
    launch_kernel(grad_reduce_kernel<false>, dim3((n + GRAD_RED_COLS - 1) / GRAD_RED_COLS),
                  dim3(GRAD_RED_COLS * GRAD_RED_WARPS), 0, dst, partial, chunks, n, stride);
}

#endif
