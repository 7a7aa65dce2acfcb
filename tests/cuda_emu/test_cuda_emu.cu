// The CPU emulator's own tests (tests/cuda_emu/cuda_emu.h): small kernels whose results are
// known by construction, run through launch_kernel as the emulated families run theirs.
// Barriers order shared-memory writes and reads across threads, and __syncthreads_or ORs a
// predicate over them; the warp shuffles and votes
// move the right lanes' values; block_sum and warp_sum of kernels/common.cuh reduce; every
// block of a 3-D grid runs once with its coordinates; dynamic shared memory arrives NaN-filled;
// the tensor-core MMA and ldmatrix of kernels/mma.cuh multiply from their fragment layouts; a
// cp.async lands at the wait that covers it (its destination NaN until then); the warpgroup
// MMA of kernels/wgmma.cuh multiplies through its descriptors (both B layouts) at its wait, and
// reads unaligned swizzled tiles wrong, as the GPU would;
// a copy into pinned host memory lands only at the wait that covers it (0xff bytes until then);
// a producer warp and two consumer warps pass a ring of stages through mbarriers (kernels/mbarrier.cuh);
// and the errors the emulator reports (a barrier in divergent code, a bad launch, a wgmma whose
// threads disagree or that is never waited for) stop the
// program with a message instead of hanging.
#include "kernels/common.cuh"
#include "kernels/mbarrier.cuh"
#include "kernels/mma.cuh"
#include "kernels/wgmma.cuh"
#include "tests/gpu/wgmma_tile.cuh"

extern "C" {
#include "tests/testing.h"
}

// out[i] = in[(i + 1) % n] through shared memory: wrong without the barrier, since odd rounds
// run the threads in reverse
__global__ void rotate_kernel(float *out, const float *in, int n) {
    DYNAMIC_SMEM(float, s);
    int i = threadIdx.x;
    s[i] = in[i] * 2.f;
    __syncthreads();
    out[i] = s[(i + 1) % n];
}

__global__ void shuffle_kernel(int *out) {
    int lane = threadIdx.x & 31, base = (threadIdx.x / 32) * 1000;
    int v = base + lane;
    out[threadIdx.x * 5 + 0] = __shfl_sync(0xffffffffu, v, 7);
    out[threadIdx.x * 5 + 1] = __shfl_xor_sync(0xffffffffu, v, 3);
    out[threadIdx.x * 5 + 2] = __shfl_down_sync(0xffffffffu, v, 4);
    out[threadIdx.x * 5 + 3] = __shfl_up_sync(0xffffffffu, v, 4, 16);
    out[threadIdx.x * 5 + 4] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
}

__global__ void sums_kernel(float *out, const float *in) {
    int t = threadIdx.x;
    float w = warp_sum(in[t]);
    float b = block_sum(in[t]);
    if (t % 32 == 0) out[t / 32] = w;
    if (t == 0) out[blockDim.x / 32] = b;
}

__global__ void coords_kernel(int *count, int *last, int nx, int ny) {
    int b = blockIdx.x + nx * (blockIdx.y + ny * blockIdx.z);
    if (threadIdx.x == 0 && threadIdx.y == 1) {
        count[b] += 1;
        last[b] = (int)(gridDim.x * 10000 + blockDim.y * 100 + blockDim.x);
    }
}

__global__ void smem_nan_kernel(float *out) {
    DYNAMIC_SMEM(float, s);
    out[threadIdx.x] = s[threadIdx.x];  // never written: NaN
}

__global__ void early_exit_kernel(float *out) {
    if (threadIdx.x >= 40) return;  // exited threads count as arrived at later barriers
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[39 - threadIdx.x];
}

// __syncthreads_or over three barriers in a row: true only where some thread's predicate is, the
// last one reached by thread 5 alone with a true predicate (the others have exited), and each
// generation's OR cleared for the next
__global__ void barrier_or_kernel(int *out) {
    const int t = threadIdx.x;
    out[t * 4 + 0] = __syncthreads_or(t == 77);
    out[t * 4 + 1] = __syncthreads_or(0);
    out[t * 4 + 2] = __syncthreads_or(t == 0);
    if (t != 5) return;
    out[t * 4 + 3] = __syncthreads_or(1);
}

// cp.async (kernels/mma.cuh) lands at the wait that covers its group, the destination NaN
// (0xff bytes) until then: out[0..7] read before any wait (NaN), out[8..15] after waiting for
// the older of two groups (the first copy's values; the second's still NaN), out[16..23] after
// waiting for all (both), out[24..31] a zero-fill (valid false) after its wait
__global__ void cp_async_kernel(bf16 *out, const bf16 *in) {
    __align__(16) __shared__ bf16 s[32];
    cp_async16(s, in, true);
    cp_async_commit();
    cp_async16(s + 8, in + 8, true);
    cp_async_commit();
    for (int i = 0; i < 8; i++) out[i] = s[i];
    cp_async_wait<1>();
    for (int i = 0; i < 4; i++) out[8 + i] = s[i], out[12 + i] = s[8 + i];
    cp_async_wait<0>();
    for (int i = 0; i < 8; i++) out[16 + i] = i < 4 ? s[i] : s[4 + i];
    cp_async16(s + 16, in, false);
    cp_async_commit();
    cp_async_wait<0>();
    for (int i = 0; i < 8; i++) out[24 + i] = s[16 + i];
}

__global__ void divergent_kernel(float *out) {
    if (threadIdx.x < 16) __syncthreads();  // two barriers, each reached by some threads only
    else out[threadIdx.x] = 1.f;
    if (threadIdx.x >= 16) __syncthreads();
}

// C (16x16) = A (16x16) B (16x16) on one warp, two 8-column tiles: A by ldmatrix (four 8x8
// quarters), B stored k-major ([k][n], by the transposing ldmatrix) or n-major ([n][k], by
// the plain one), and a third time with every fragment built by hand from the documented
// layout (kernels/mma.cuh) — the layout the GPU-verified attention kernels rely on.
__global__ void mma_kernel(float *out, const bf16 *a, const bf16 *b_kn, const bf16 *b_nk) {
    __shared__ bf16 sa[16][16], skn[16][16], snk[16][16];
    int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) sa[i / 16][i % 16] = a[i], skn[i / 16][i % 16] = b_kn[i], snk[i / 16][i % 16] = b_nk[i];
    __syncwarp();
    int m = lane / 8, r = lane % 8, g = lane / 4, t = lane % 4;
    uint32_t af[4], bt[4], bn[4];
    ldsm_x4(af, &sa[(m % 2) * 8 + r][(m / 2) * 8]);
    ldsm_x4_t(bt, &skn[(m % 2) * 8 + r][(m / 2) * 8]);  // [k][n]: quarters (k lo, n lo), (k hi, n lo), (k lo, n hi), (k hi, n hi)
    ldsm_x4(bn, &snk[(m / 2) * 8 + r][(m % 2) * 8]);    // [n][k]: quarters (n lo, k lo), (n lo, k hi), (n hi, k lo), (n hi, k hi)
    float c[3][2][4] = {};
    for (int nt = 0; nt < 2; nt++) {
        mma16816(c[0][nt], af, bt[2 * nt], bt[2 * nt + 1]);
        mma16816(c[1][nt], af, bn[2 * nt], bn[2 * nt + 1]);
        uint32_t ah[4] = {pack_bf16(sa[g][2 * t], sa[g][2 * t + 1]), pack_bf16(sa[g + 8][2 * t], sa[g + 8][2 * t + 1]),
                          pack_bf16(sa[g][2 * t + 8], sa[g][2 * t + 9]), pack_bf16(sa[g + 8][2 * t + 8], sa[g + 8][2 * t + 9])};
        int n = nt * 8 + g;
        mma16816(c[2][nt], ah, pack_bf16(skn[2 * t][n], skn[2 * t + 1][n]), pack_bf16(skn[2 * t + 8][n], skn[2 * t + 9][n]));
    }
    for (int v = 0; v < 3; v++)
        for (int nt = 0; nt < 2; nt++)
            for (int i = 0; i < 4; i++)
                out[v * 256 + (g + (i >= 2 ? 8 : 0)) * 16 + nt * 8 + 2 * t + (i & 1)] = c[v][nt][i];
}

// One warpgroup: D (64 x 256) = 0.5 + A (64 x 64) B^T (B 256 x 64), tests/gpu/wgmma_tile.cuh's
// product (the GPU probe's), B stored K-major (mode 0) or MN-major (mode 1), or both A and B
// MN-major (mode 4). Mode 2: as 0, and the accumulators read before the wait go to pre (0.5: the
// wgmma has not happened yet). Mode 3: as 0, with A's tile zeroed between the issue and the wait
// (the emulator performs the wgmma at the wait: D stays 0.5; on the GPU that is a race). Mode 5:
// as 0 with the tiles where the dynamic shared memory starts, not aligned to 1024 bytes (the
// emulator's window puts that start at 0x410, as the GPU may): the swizzle the hardware applies to
// the address bits then differs from the one the stores applied, so D is wrong.
__global__ void wgmma_kernel(float *out, float *pre, const bf16 *a, const bf16 *b, int mode) {
    DYNAMIC_SMEM(unsigned char, raw);
    unsigned char *sa = mode == 5 ? raw : wg_align1024(raw), *sb = sa + 64 * 128;
    const int tid = threadIdx.x;
    wgt_fill(sa, a, 64, mode == 4);
    wgt_fill(sb, b, 256, mode == 1 || mode == 4);
    fence_proxy_async();
    __syncthreads();
    float d[128];
    for (int i = 0; i < 128; i++) d[i] = 0.5f;
    if (mode == 4) wgt_mma<256, 1, 1>(d, sa, sb, 0);
    else if (mode == 1) wgt_mma<256, 0, 1>(d, sa, sb, 0);
    else wgt_mma<256, 0, 0>(d, sa, sb, 0);
    if (mode == 2)
        for (int i = 0; i < 128; i++) pre[tid * 128 + i] = d[i];
    if (mode == 3) {
        for (int i = tid; i < 64 * 64; i += 128) *reinterpret_cast<bf16 *>(sa + wg_kmajor_offset(i / 64, i % 64)) = 0.f;
        __syncthreads();
    }
    wgmma_wait<0>(d);
    wgt_write<256>(out, d);
}

// a wgmma whose descriptors differ between threads of the warpgroup (one instruction of 128
// threads cannot have two): the emulator stops
__global__ void wgmma_mismatch_kernel(float *out) {
    DYNAMIC_SMEM(unsigned char, raw);
    unsigned char *s = wg_align1024(raw);
    float d[128] = {};
    wgmma_fence();
    wgmma_m64k16_bf16<256, 0, 0>(d, wg_desc(s + (threadIdx.x == 77 ? 32 : 0), 16, 1024), wg_desc(s, 16, 1024), 0);
    wgmma_commit();
    wgmma_wait<0>(d);
    out[threadIdx.x] = d[0];
}

// a thread that ends with a wgmma in flight: the emulator stops
__global__ void wgmma_no_wait_kernel(float *out) {
    DYNAMIC_SMEM(unsigned char, raw);
    unsigned char *s = wg_align1024(raw);
    float d[128] = {};
    wgmma_fence();
    wgmma_m64k16_bf16<256, 0, 0>(d, wg_desc(s, 16, 1024), wg_desc(s, 16, 1024), 0);
    wgmma_commit();
    out[threadIdx.x] = 1.f;
}

static void run_wgmma_mismatch(void *) {
    static float out[128];
    launch_kernel(wgmma_mismatch_kernel, dim3(1), dim3(128), 1024 + 40 * 1024, out);
}
static void run_wgmma_no_wait(void *) {
    static float out[128];
    launch_kernel(wgmma_no_wait_kernel, dim3(1), dim3(128), 1024 + 40 * 1024, out);
}

// A ring of MBAR_STAGES stages through mbarriers (kernels/mbarrier.cuh), as a warp-specialized
// kernel runs one: warp 2 produces, each of its 32 threads copying 4 floats of step i's 128 into
// stage i % MBAR_STAGES by cp.async (one arrival each on the stage's "full" barrier once its copy
// lands); warps 0 and 1 consume, thread c adding floats 2c and 2c + 1 of the stage to its sum,
// then arriving on the stage's "empty" barrier, which the producer waits for before it refills
// the stage. MBAR_STEPS > MBAR_STAGES, so every stage's barriers go through several phases.
// unsynced = 1 leaves out every wait (the arrivals stay): the consumers, which the emulator runs
// first, then read the ring before any copy (NaN-filled dynamic shared memory), so the sums are
// wrong: the waits are what orders the two sides.
#define MBAR_STAGES 2
#define MBAR_STEPS 7
__global__ void mbar_ring_kernel(float *out, const float *in, int unsynced) {
    DYNAMIC_SMEM(unsigned char, raw);
    uint64_t *full = reinterpret_cast<uint64_t *>(raw), *empty = full + MBAR_STAGES;
    float *ring = reinterpret_cast<float *>(raw + 64);
    const int t = threadIdx.x;
    if (t == 0)
        for (int s = 0; s < MBAR_STAGES; s++) mbar_init(&full[s], 32), mbar_init(&empty[s], 64);
    __syncthreads();
    if (t >= 64) {
        const int p = t - 64;
        for (int i = 0; i < MBAR_STEPS; i++) {
            const int s = i % MBAR_STAGES;
            if (!unsynced) mbar_wait(&empty[s], ((i / MBAR_STAGES) & 1) ^ 1);
            cp_async16(reinterpret_cast<bf16 *>(ring + s * 128 + 4 * p), reinterpret_cast<const bf16 *>(in + i * 128 + 4 * p),
                       true);  // (16 bytes: four floats)
            cp_async_mbar_arrive(&full[s]);
        }
    } else {
        float sum = 0.f;
        for (int i = 0; i < MBAR_STEPS; i++) {
            const int s = i % MBAR_STAGES;
            if (!unsynced) mbar_wait(&full[s], (i / MBAR_STAGES) & 1);
            sum += ring[s * 128 + 2 * t] + ring[s * 128 + 2 * t + 1];
            mbar_arrive(&empty[s]);
        }
        out[t] = sum;
    }
}
// every thread waits for a phase that needs two arrivals, and only one comes
__global__ void mbar_deadlock_kernel(float *out) {
    DYNAMIC_SMEM(uint64_t, bar);
    if (threadIdx.x == 0) mbar_init(bar, 2);
    __syncthreads();
    if (threadIdx.x == 0) mbar_arrive(bar);
    mbar_wait(bar, 0);
    out[threadIdx.x] = 1.f;
}
static void run_mbar_deadlock(void *) {
    static float out[32];
    launch_kernel(mbar_deadlock_kernel, dim3(1), dim3(32), 64, out);
}

static void run_divergent(void *) {
    float out[64];
    launch_kernel(divergent_kernel, dim3(1), dim3(64), 0, out);
}
static void run_huge_smem(void *) {
    float out[64];
    launch_kernel(smem_nan_kernel, dim3(1), dim3(64), (size_t)300 * 1024, out);
}
static void run_empty_grid(void *) {
    float out[64];
    launch_kernel(smem_nan_kernel, dim3(0), dim3(64), 256, out);
}

int main(void) {
    cuda_init();
    {
        float in[96], out[96];
        for (int i = 0; i < 96; i++) in[i] = (float)i;
        launch_kernel(rotate_kernel, dim3(1), dim3(96), 96 * sizeof(float), out, (const float *)in, 96);
        int bad = 0;
        for (int i = 0; i < 96; i++) bad += out[i] != 2.f * ((i + 1) % 96);
        CHECK(bad == 0, "rotate through shared memory: %d wrong", bad);
    }
    {
        int out[64 * 5];
        launch_kernel(shuffle_kernel, dim3(1), dim3(64), 0, out);
        int bad = 0;
        for (int t = 0; t < 64; t++) {
            int lane = t & 31, base = (t / 32) * 1000, half = lane & ~15;
            int want[5] = {base + 7, base + (lane ^ 3), base + (lane + 4 < 32 ? lane + 4 : lane),
                           base + (lane - 4 >= half ? lane - 4 : lane), (int)0x49249249u};
            for (int k = 0; k < 5; k++) bad += out[t * 5 + k] != want[k];
        }
        CHECK(bad == 0, "shuffles and ballot: %d wrong", bad);
    }
    {
        int out[96 * 4];
        for (int i = 0; i < 96 * 4; i++) out[i] = -1;
        launch_kernel(barrier_or_kernel, dim3(2), dim3(96), 0, out);
        int bad = 0;
        for (int t = 0; t < 96; t++)
            bad += out[t * 4] != 1 || out[t * 4 + 1] != 0 || out[t * 4 + 2] != 1 || out[t * 4 + 3] != (t == 5 ? 1 : -1);
        CHECK(bad == 0, "__syncthreads_or: %d wrong", bad);
    }
    {
        bf16 in[16], out[32];
        for (int i = 0; i < 16; i++) in[i] = __float2bfloat16((float)(i + 1));
        launch_kernel(cp_async_kernel, dim3(1), dim3(1), 0, out, (const bf16 *)in);
        int bad = 0;
        for (int i = 0; i < 32; i++) {
            const float x = __bfloat162float(out[i]);
            const float want = i < 8 ? NAN : i < 12 ? (float)(i - 8 + 1) : i < 16 ? NAN : i < 24 ? (float)((i < 20 ? i - 16 : i - 12) + 1) : 0.f;
            bad += isnan(want) ? !isnan(x) : x != want;
        }
        CHECK(bad == 0, "cp.async lands at its wait, NaN before: %d wrong", bad);
    }
    {
        float in[128], out[5];
        double w[4] = {0, 0, 0, 0};
        for (int i = 0; i < 128; i++) in[i] = (float)(i % 7) - 2.5f, w[i / 32] += in[i];
        launch_kernel(sums_kernel, dim3(1), dim3(128), 0, out, (const float *)in);
        CHECK(out[0] == w[0] && out[1] == w[1] && out[2] == w[2] && out[3] == w[3], "warp_sum");
        CHECK(out[4] == w[0] + w[1] + w[2] + w[3], "block_sum %g", out[4]);
    }
    {
        int count[3 * 4 * 5] = {0}, last[3 * 4 * 5] = {0};
        launch_kernel(coords_kernel, dim3(3, 4, 5), dim3(8, 2), 0, count, last, 3, 4);
        int bad = 0;
        for (int b = 0; b < 60; b++) bad += count[b] != 1 || last[b] != 30208;
        CHECK(bad == 0, "every block of a 3x4x5 grid once, with its coordinates: %d wrong", bad);
    }
    {
        float out[64];
        launch_kernel(smem_nan_kernel, dim3(2), dim3(64), 64 * sizeof(float), out);
        int nan = 0;
        for (int i = 0; i < 64; i++) nan += isnan(out[i]);
        CHECK(nan == 64, "unwritten dynamic shared memory reads NaN (%d of 64)", nan);
    }
    {
        float out[64];
        for (int i = 0; i < 64; i++) out[i] = -1.f;
        launch_kernel(early_exit_kernel, dim3(1), dim3(64), 0, out);
        int bad = 0;
        for (int i = 0; i < 40; i++) bad += out[i] != (float)(39 - i);
        for (int i = 40; i < 64; i++) bad += out[i] != -1.f;
        CHECK(bad == 0, "threads that returned count as arrived: %d wrong", bad);
    }
    {
        bf16 a[256], bkn[256], bnk[256];
        float fa[256], fb[256], out[3 * 256];
        for (int i = 0; i < 256; i++) {
            fa[i] = (float)((i * 37) % 19 - 9) / 8.f;
            fb[i] = (float)((i * 53) % 23 - 11) / 16.f;  // fb[k*16+n]
        }
        for (int k = 0; k < 16; k++)
            for (int n = 0; n < 16; n++) bkn[k * 16 + n] = bnk[n * 16 + k] = __float2bfloat16(fb[k * 16 + n]);
        for (int i = 0; i < 256; i++) a[i] = __float2bfloat16(fa[i]);
        launch_kernel(mma_kernel, dim3(1), dim3(32), 0, out, (const bf16 *)a, (const bf16 *)bkn, (const bf16 *)bnk);
        int bad[3] = {0, 0, 0};
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double want = 0;
                for (int k = 0; k < 16; k++) want += (double)fa[i * 16 + k] * fb[k * 16 + j];
                for (int v = 0; v < 3; v++) bad[v] += fabs(out[v * 256 + i * 16 + j] - want) > 1e-5;
            }
        CHECK(bad[0] == 0, "mma with A and B (k-major) by ldmatrix: %d of 256 wrong", bad[0]);
        CHECK(bad[1] == 0, "mma with B (n-major) by ldmatrix: %d of 256 wrong", bad[1]);
        CHECK(bad[2] == 0, "mma with hand-built fragments: %d of 256 wrong", bad[2]);
    }
    {
        static bf16 a[64 * 64], b[256 * 64];
        static float fa[64 * 64], fb[256 * 64], out[64 * 256], pre[128 * 128];
        for (int i = 0; i < 64 * 64; i++) fa[i] = (float)((i * 37) % 19 - 9) / 8.f, a[i] = __float2bfloat16(fa[i]);
        for (int i = 0; i < 256 * 64; i++) fb[i] = (float)((i * 53) % 23 - 11) / 16.f, b[i] = __float2bfloat16(fb[i]);
        const size_t smem = 1024 + 64 * 128 + 256 * 128;
        for (int mode = 0; mode < 6; mode++) {
            for (int i = 0; i < 64 * 256; i++) out[i] = -1.f;
            for (int i = 0; i < 128 * 128; i++) pre[i] = -1.f;
            launch_kernel(wgmma_kernel, dim3(1), dim3(128), smem, out, pre, (const bf16 *)a, (const bf16 *)b, mode);
            int bad = 0;
            for (int m = 0; m < 64; m++)
                for (int n = 0; n < 256; n++) {
                    double want = 0.5;  // (exact: multiples of 1/128, 64 terms)
                    if (mode != 3)
                        for (int k = 0; k < 64; k++) want += (double)fa[m * 64 + k] * fb[n * 64 + k];
                    bad += out[m * 256 + n] != (float)want;
                }
            int early = 0;
            if (mode == 2)
                for (int i = 0; i < 128 * 128; i++) early += pre[i] != 0.5f;
            static const char *const what[6] = {"B K-major", "B MN-major", "B K-major, accumulators read before the wait",
                                                "B K-major, A overwritten before the wait", "A and B MN-major",
                                                "tiles not 1024-byte aligned (must be wrong)"};
            if (mode == 5)
                CHECK(bad > 64 * 256 / 2, "wgmma m64n256k16, %s: only %d of %d wrong", what[mode], bad, 64 * 256);
            else
                CHECK(bad == 0 && early == 0, "wgmma m64n256k16, %s: %d of %d wrong, %d read early not the old value",
                      what[mode], bad, 64 * 256, early);
        }
    }
    {
        // a copy from the device into pinned host memory lands at the synchronization that
        // covers it, not before: what host code that forgets to wait would read
        int *dev = NULL, *host = NULL;
        cudaEvent_t e1, e2;
        CUDA_CHECK(cudaMalloc(&dev, 8 * sizeof(int)));
        CUDA_CHECK(cudaHostAlloc((void **)&host, 8 * sizeof(int), cudaHostAllocDefault));
        CUDA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&e2, cudaEventDisableTiming));
        for (int i = 0; i < 8; i++) dev[i] = i, host[i] = 7;  // (emulated device memory is host memory)
        CUDA_CHECK(cudaMemcpyAsync(host, dev, 4 * sizeof(int), cudaMemcpyDeviceToHost, g_cuda.stream));
        CUDA_CHECK(cudaEventRecord(e1, g_cuda.stream));
        for (int i = 0; i < 8; i++) dev[i] = 100 + i;  // after the first copy was issued
        CUDA_CHECK(cudaMemcpyAsync(host + 4, dev + 4, 4 * sizeof(int), cudaMemcpyDeviceToHost, g_cuda.stream));
        CUDA_CHECK(cudaEventRecord(e2, g_cuda.stream));
        int early = 0;
        for (int i = 0; i < 8; i++) early += host[i] == -1;
        CUDA_CHECK(cudaEventSynchronize(e1));
        int first = 0, second = 0;
        for (int i = 0; i < 4; i++) first += host[i] == i;
        for (int i = 4; i < 8; i++) second += host[i] == -1;
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
        for (int i = 4; i < 8; i++) second += host[i] == 100 + i;
        CHECK(early == 8, "pinned copies before any wait: %d of 8 entries read as 0xff bytes", early);
        CHECK(first == 4, "the copy before event 1, after waiting for it: %d of 4 (the source as issued)", first);
        CHECK(second == 8, "the copy after event 1: %d of 8 (not landed at event 1, landed at the stream sync)",
              second);
        CUDA_CHECK(cudaFreeHost(host));
        CUDA_CHECK(cudaFree(dev));
    }
    {
        static float in[MBAR_STEPS * 128], out[64];
        for (int i = 0; i < MBAR_STEPS * 128; i++) in[i] = (float)(i % 97) - 40.f;
        for (int skip = 0; skip < 2; skip++) {
            for (int c = 0; c < 64; c++) out[c] = -1e30f;
            launch_kernel(mbar_ring_kernel, dim3(1), dim3(96), 64 + MBAR_STAGES * 128 * sizeof(float), out, in, skip);
            int bad = 0;
            for (int c = 0; c < 64; c++) {
                float want = 0.f;
                for (int i = 0; i < MBAR_STEPS; i++) want += in[i * 128 + 2 * c] + in[i * 128 + 2 * c + 1];
                bad += out[c] != want;
            }
            if (!skip) CHECK(bad == 0, "a ring of stages through mbarriers: %d of 64 sums wrong", bad);
            else CHECK(bad > 0, "the ring without its waits: only %d of 64 sums wrong", bad);
        }
    }
    CHECK(expect_death_within(20, run_mbar_deadlock, NULL, "an mbarrier phase that cannot complete", "mbarrier phase"),
          "an mbarrier phase whose arrivals never come is reported");
    CHECK(expect_death_within(20, run_divergent, NULL, "divergent __syncthreads", "different __syncthreads"),
          "a barrier in divergent code is reported");
    CHECK(expect_death_within(20, run_huge_smem, NULL, "300 KiB of shared memory", "dynamic shared memory"),
          "too much shared memory is reported");
    CHECK(expect_death_within(20, run_empty_grid, NULL, "an empty grid", "empty grid"),
          "an empty grid is reported");
    CHECK(expect_death_within(20, run_wgmma_mismatch, NULL, "a wgmma with per-thread descriptors", "other descriptors"),
          "a wgmma whose threads disagree on the descriptors is reported");
    CHECK(expect_death_within(20, run_wgmma_no_wait, NULL, "a wgmma never waited for", "wgmma still in flight"),
          "a thread that ends with a wgmma in flight is reported");
    TEST_MAIN_END();
}
