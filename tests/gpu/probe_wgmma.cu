// What the GPU's wgmma makes of kernels/wgmma.cuh's shared-memory layouts and descriptors, in one
// run: one warpgroup computes D (64 x N) = 0.5 + A (64 x 64) B^T (B N x 64) by four k16 steps of
// wgmma_m64k16_bf16, N = 256 and 128, for each orientation of A and B (K-major, MN-major), with the
// descriptors as wgmma.cuh builds them and, for an MN-major operand, with LBO and SBO swapped;
// prints how many of the 64 N outputs differ from the exact product (the inputs are multiples of
// 1/128 and the sums exact in fp32). The CPU emulator reads the layouts as wgmma.cuh states them
// (tests/cuda_emu/test_cuda_emu.cu); this says whether the hardware agrees, and if not, which
// variant it reads instead. Not a test (test_moe's wgmma path holds the parity checks):
//   make out/build/gpu/probe_wgmma && out/build/gpu/probe_wgmma
#include <stdio.h>
#include <stdlib.h>

#include "tests/gpu/wgmma_tile.cuh"

#define PROBE_CHECK(call)                                                                    \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "probe_wgmma: %s: %s\n", #call, cudaGetErrorString(e_));         \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

template <int N, int TA, int TB>
__global__ void __launch_bounds__(128, 1) probe_kernel(float *out, const bf16 *a, const bf16 *b, int swap) {
    extern __shared__ __align__(16) unsigned char raw[];
    unsigned char *sa = wg_align1024(raw), *sb = sa + 64 * 128;
    wgt_fill(sa, a, 64, TA);
    wgt_fill(sb, b, N, TB);
    fence_proxy_async();
    __syncthreads();
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) d[i] = 0.5f;
    wgt_mma<N, TA, TB>(d, sa, sb, swap);
    wgmma_wait<0, N / 2>(d);
    wgt_write<N>(out, d);
}

int main(void) {
    int dev = 0;
    cudaDeviceProp prop;
    PROBE_CHECK(cudaGetDevice(&dev));
    PROBE_CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("probe_wgmma: %s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
    if (prop.major != 9 || prop.minor != 0) {
        printf("probe_wgmma: wgmma (sm_90a) needs compute capability 9.0\n");
        return 1;
    }
    static bf16 ha[64 * 64], hb[256 * 64];
    static float fa[64 * 64], fb[256 * 64], out[64 * 256];
    for (int i = 0; i < 64 * 64; i++) fa[i] = (float)((i * 37) % 19 - 9) / 8.f, ha[i] = __float2bfloat16(fa[i]);
    for (int i = 0; i < 256 * 64; i++) fb[i] = (float)((i * 53) % 23 - 11) / 16.f, hb[i] = __float2bfloat16(fb[i]);
    bf16 *da, *db;
    float *dout;
    PROBE_CHECK(cudaMalloc(&da, sizeof ha));
    PROBE_CHECK(cudaMalloc(&db, sizeof hb));
    PROBE_CHECK(cudaMalloc(&dout, sizeof out));
    PROBE_CHECK(cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice));
    const size_t smem = 1024 + 64 * 128 + 256 * 128;
    void (*kernels[8])(float *, const bf16 *, const bf16 *, int) = {
        probe_kernel<256, 0, 0>, probe_kernel<256, 0, 1>, probe_kernel<256, 1, 0>, probe_kernel<256, 1, 1>,
        probe_kernel<128, 0, 0>, probe_kernel<128, 0, 1>, probe_kernel<128, 1, 0>, probe_kernel<128, 1, 1>};
    int bad_default = 0;
    for (int m = 0; m < 8; m++)
        for (int swap = 0; swap < 2; swap++) {
            const int N = m < 4 ? 256 : 128, ta = (m >> 1) & 1, tb = m & 1;
            if (swap && !ta && !tb) continue;  // (no MN-major operand: nothing to swap)
            PROBE_CHECK(cudaFuncSetAttribute(kernels[m], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            PROBE_CHECK(cudaMemset(dout, 0xff, sizeof out));  // NaN: an output never written shows
            kernels[m]<<<1, 128, smem>>>(dout, da, db, swap);
            PROBE_CHECK(cudaGetLastError());
            PROBE_CHECK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int i = 0; i < 64; i++)
                for (int n = 0; n < N; n++) {
                    double want = 0.5;
                    for (int k = 0; k < 64; k++) want += (double)fa[i * 64 + k] * fb[n * 64 + k];
                    bad += !(out[i * N + n] == (float)want);
                }
            if (!swap) bad_default += bad;
            printf("N %d, A %-8s B %-8s descriptors %-26s %5d of %d wrong%s\n", N, ta ? "MN-major" : "K-major",
                   tb ? "MN-major" : "K-major", swap ? "(MN-major: LBO, SBO swapped)" : "(as kernels/wgmma.cuh)", bad,
                   64 * N, bad ? "" : "  ok");
        }
    printf("probe_wgmma: the layouts as kernels/wgmma.cuh builds them: %s\n",
           bad_default ? "the GPU reads them OTHERWISE" : "the GPU agrees");
    return bad_default ? 1 : 0;
}
