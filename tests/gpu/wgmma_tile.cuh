// One warpgroup's test product on kernels/wgmma.cuh, shared by the CPU emulator's test
// (tests/cuda_emu/test_cuda_emu.cu) and the GPU probe (tests/gpu/probe_wgmma.cu), so that both
// check the same layouts: A (64 x 64) and B (N x 64), row-major bf16 in global memory, stored into
// 128-byte-swizzled tiles, K-major or MN-major (atoms of 64 x 8, LBO 8 KiB between mn-atoms, SBO
// 1 KiB between k-atoms), multiplied by four k16 steps, and D (64 x N) written out row-major from
// the accumulator layout. Called by all 128 threads of one warpgroup.
#ifndef HYBRID_TESTS_GPU_WGMMA_TILE_CUH
#define HYBRID_TESTS_GPU_WGMMA_TILE_CUH

#include "kernels/wgmma.cuh"

// rows x 64 of x into the tile at s (mn_major: the MN-major layout)
__device__ inline void wgt_fill(unsigned char *s, const bf16 *x, int rows, int mn_major) {
    for (int i = threadIdx.x; i < rows * 64; i += 128) {
        const int mn = i / 64, k = i % 64;
        *reinterpret_cast<bf16 *>(s + (mn_major ? wg_mnmajor_offset(mn, k, 8 * 1024) : wg_kmajor_offset(mn, k))) = x[i];
    }
}

// the descriptor of k16 step kk of a tile at s: K-major as the kernels build it; MN-major with
// (LBO, SBO) = (8 KiB between mn-atoms, 1 KiB between k-atoms), or swapped (swap: the probe's
// alternative reading)
__device__ inline uint64_t wgt_desc(const unsigned char *s, int kk, int mn_major, int swap) {
    if (!mn_major) return wg_desc(s + kk * 32, 16, 1024);
    return swap ? wg_desc(s + kk * 2048, 1024, 8 * 1024) : wg_desc(s + kk * 2048, 8 * 1024, 1024);
}

// d += A B^T over the 64 k of the tiles sa, sb: wgmma_fence, four k16 steps, one commit (the
// caller waits)
template <int N, int TA, int TB>
__device__ inline void wgt_mma(float d[N / 2], const unsigned char *sa, const unsigned char *sb, int swap) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64k16_bf16<N, TA, TB>(d, wgt_desc(sa, kk, TA, swap), wgt_desc(sb, kk, TB, swap), 1);
    wgmma_commit();
}

// D (64 x N, row-major) from this thread's accumulators (kernels/wgmma.cuh's layout)
template <int N>
__device__ inline void wgt_write(float *out, const float d[N / 2]) {
    const int tid = threadIdx.x, w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
#pragma unroll
    for (int j = 0; j < N / 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) out[(16 * w + g + 8 * (i >> 1)) * N + 8 * j + 2 * t + (i & 1)] = d[4 * j + i];
}

#endif
