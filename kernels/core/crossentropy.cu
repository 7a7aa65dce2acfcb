// Softmax cross-entropy over bf16 logit rows (model/ops/crossentropy.c gives the
// equations): one block per row. Pass 1: an online max / sum of exp over the V real
// columns (each thread its columns, then a fixed tree over the block: deterministic).
// Forward writes the fp32 loss; backward (in place allowed) makes a second pass
// writing (softmax - onehot) * dloss, zero padding columns, zero ignored rows. Each
// element is read and written by the same thread after the row's statistics are
// complete, so dlogits may alias logits.
//
// The forward also keeps each row's log-sum-exp in a buffer of the backend, tagged
// with the logits pointer and shape. The backward of the same logits then needs one
// read and one write per element instead of two reads and a write. Anything that
// writes that logits buffer through the backend (matmul_forward, upload, raw copies,
// the backward itself) drops the tag (ce_lse_invalidate), and an untagged backward
// recomputes the statistics, so the result never depends on the cache.
//
// Training knows dloss at forward time, so the graph runs crossentropy_forward_backward
// there: one kernel does both passes on each row (the statistics, then the dlogits
// writes while the row is still in L2), one read of the logits from memory instead of
// two. Its numbers are those of the two ops (the same row_lse and write_dlogits).
//
// Layout: logits and dlogits (N, Vp) bf16 row-major, a row per token; targets (N) int;
// losses and the kept lse (N) fp32.
#include <math.h>
#include <stdlib.h>

#include "kernels/common.cuh"

#define CE_THREADS 512

// combine (m, s) running max / sum of exp(x - m)
__device__ __forceinline__ void ms_add(float &m, float &s, float x) {
    if (x > m) {
        s = s * __expf(m - x) + 1.f;
        m = x;
    } else {
        s += __expf(x - m);
    }
}

__device__ __forceinline__ void ms_merge(float &m, float &s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;
    s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
    m = mm;
}

// log-sum-exp of z[0..V) over the block; every thread gets it
__device__ float row_lse(const bf16 *z, int V, int vec) {
    float m = -INFINITY, s = 0.f;
    int done = 0;
    if (vec) {
        // two 8-element vectors per step (both loads in flight), one rescale per step
        int nvec = V / 8;
        for (int i = threadIdx.x; i < nvec; i += 2 * blockDim.x) {
            const int i2 = i + blockDim.x;
            float f[16];
            load8(z + 8 * i, f);
            if (i2 < nvec) load8(z + 8 * i2, f + 8);
            else
#pragma unroll
                for (int k = 8; k < 16; k++) f[k] = -INFINITY;
            float lm = f[0];
#pragma unroll
            for (int k = 1; k < 16; k++) lm = fmaxf(lm, f[k]);
            if (lm > m) {
                s *= __expf(m - lm);  // m = -inf: s is 0 and stays 0
                m = lm;
            }
#pragma unroll
            for (int k = 0; k < 16; k++) s += __expf(f[k] - m);
        }
        done = nvec * 8;
    }
    for (int i = done + threadIdx.x; i < V; i += blockDim.x) ms_add(m, s, __bfloat162float(z[i]));
    // warp tree
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        ms_merge(m, s, m2, s2);
    }
    __shared__ float sm[32], ss[32];
    __shared__ float result;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) {
        sm[warp] = m;
        ss[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < nw ? sm[lane] : -INFINITY;
        s = lane < nw ? ss[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            ms_merge(m, s, m2, s2);
        }
        if (lane == 0) result = m + logf(s);
    }
    __syncthreads();
    return result;
}

__global__ void ce_forward_kernel(float *losses, float *lse_out, const bf16 *logits, const int *targets, int V, int Vp,
                                  int vec) {
    int row = blockIdx.x;
    const bf16 *z = logits + (size_t)row * Vp;
    int y = targets[row];
    if (y < 0) {  // the whole block agrees
        if (threadIdx.x == 0) losses[row] = 0.f;
        return;
    }
    float lse = row_lse(z, V, vec);
    if (threadIdx.x == 0) {
        losses[row] = lse - __bfloat162float(z[y]);
        lse_out[row] = lse;
    }
}

// The second pass over row z (Vp wide): dz = (exp(z - lse) - onehot(y)) * dloss on the V
// real columns, 0 on the padding columns and on an ignored row (y < 0). Each element is
// read and written by the same thread, so dz may alias z.
__device__ void write_dlogits(bf16 *dz, const bf16 *z, int y, float lse, float dloss, int V, int Vp, int vec) {
    int done = 0;
    if (vec) {
        int nvec = Vp / 8;
        for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
            float f[8];
            load8(z + 8 * i, f);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int v = 8 * i + k;
                f[k] = (y < 0 || v >= V) ? 0.f : (__expf(f[k] - lse) - (v == y ? 1.f : 0.f)) * dloss;
            }
            store8(dz + 8 * i, f);
        }
        done = nvec * 8;
    }
    for (int v = done + threadIdx.x; v < Vp; v += blockDim.x) {
        float f = __bfloat162float(z[v]);
        f = (y < 0 || v >= V) ? 0.f : (__expf(f - lse) - (v == y ? 1.f : 0.f)) * dloss;
        dz[v] = __float2bfloat16(f);
    }
}

// saved_lse: the forward's row statistics, or NULL to recompute them
__global__ void ce_backward_kernel(bf16 *dlogits, const bf16 *logits, const int *targets, const float *saved_lse,
                                   float dloss, int V, int Vp, int vec) {
    int row = blockIdx.x;
    const bf16 *z = logits + (size_t)row * Vp;
    int y = targets[row];
    float lse = y < 0 ? 0.f : (saved_lse ? saved_lse[row] : row_lse(z, V, vec));
    write_dlogits(dlogits + (size_t)row * Vp, z, y, lse, dloss, V, Vp, vec);
}

// The fused classifier (llm.c's idea): the forward's statistics pass, the loss, then the
// backward's write pass over the same row while it is still in L2, in one launch. One read
// of the logits from memory and one write instead of the separate ops' two reads and a
// write. A block walks the rows blockIdx.x, + gridDim.x, ...: the grid sets how many rows
// are between their two passes at once (see ce_rows_per_sm). The loss reads z[y] before
// row_lse's barriers, so no thread can have overwritten it yet when dlogits aliases logits.
__global__ void ce_forward_backward_kernel(float *losses, bf16 *dlogits, const bf16 *logits, const int *targets,
                                           float dloss, int N, int V, int Vp, int vec) {
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const bf16 *z = logits + (size_t)row * Vp;
        int y = targets[row];  // the whole block agrees
        float zy = y < 0 ? 0.f : __bfloat162float(z[y]);
        float lse = y < 0 ? 0.f : row_lse(z, V, vec);
        if (threadIdx.x == 0) losses[row] = y < 0 ? 0.f : lse - zy;
        write_dlogits(dlogits + (size_t)row * Vp, z, y, lse, dloss, V, Vp, vec);
    }
}

// the forward's per-row log-sum-exp, valid for (tag, N, V, Vp) until invalidated
static struct {
    float *lse;
    size_t cap;
    const void *tag;
    int N, V, Vp;
} g_ce;

void ce_lse_invalidate(const void *written, size_t bytes) {
    if (!g_ce.tag) return;
    const char *a = (const char *)written, *t = (const char *)g_ce.tag;
    size_t tag_bytes = (size_t)g_ce.N * g_ce.Vp * sizeof(bf16);
    if (a < t + tag_bytes && t < a + bytes) g_ce.tag = NULL;
}

static void check_shape(const char *who, int V, int Vp) {
    if (V <= 0 || V > Vp) die("%s: vocabulary size V = %d must be in 1..Vp (Vp = %d)", who, V, Vp);
}

void cuda_crossentropy_forward(real *losses, const real *logits, const int *targets, int N, int V, int Vp) {
    PROFILE("crossentropy_fwd");
    check_shape("crossentropy_forward", V, Vp);
    if (N <= 0) return;
    int vec = Vp % 8 == 0 && is_aligned16(logits);
    if ((size_t)N > g_ce.cap) {  // grows once, to the largest batch
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
        if (g_ce.lse) CUDA_CHECK(cudaFree(g_ce.lse));
        CUDA_CHECK(cudaMalloc(&g_ce.lse, (size_t)N * sizeof(float)));
        g_ce.cap = (size_t)N;
    }
    launch_kernel(ce_forward_kernel, N, CE_THREADS, 0, (float *)losses, g_ce.lse, (const bf16 *)logits, targets, V, Vp,
        vec);
    g_ce.tag = logits;
    g_ce.N = N;
    g_ce.V = V;
    g_ce.Vp = Vp;
}

void cuda_crossentropy_backward(real *dlogits, const real *logits, const int *targets, float dloss, int N, int V,
                                int Vp) {
    PROFILE("crossentropy_bwd");
    check_shape("crossentropy_backward", V, Vp);
    if (N <= 0) return;
    int vec = Vp % 8 == 0 && is_aligned16(logits) && is_aligned16(dlogits);
    const float *saved = g_ce.tag == (const void *)logits && g_ce.N == N && g_ce.V == V && g_ce.Vp == Vp ? g_ce.lse
                                                                                                     : NULL;
    ce_lse_invalidate(dlogits, (size_t)N * Vp * sizeof(bf16));
    launch_kernel(ce_backward_kernel, N, CE_THREADS, 0, (bf16 *)dlogits, (const bf16 *)logits, targets, saved, dloss, V,
        Vp, vec);
}

// Blocks of the fused kernel per SM, i.e. rows between their two passes at once per SM. The
// second pass should find its row in L2: at Vp = 50304 a row is 100 KB, and the 4 blocks of
// 512 threads an SM could hold would keep ~53 MB of rows in flight on 132 SMs, more than the
// 50 MB L2; 2 keep ~26 MB (llm.c's fused classifier runs 2 blocks of 1024 threads per SM).
// HYBRID_CUDA_CE_ROWS_PER_SM=1..4 overrides it, for measuring; any value gives the same bits.
static int ce_rows_per_sm(void) {
    static int v;
    if (!v) {
        const char *e = getenv("HYBRID_CUDA_CE_ROWS_PER_SM");
        v = e && *e ? atoi(e) : 2;
        if (v < 1 || v > 4) die("HYBRID_CUDA_CE_ROWS_PER_SM = '%s': expected 1 to 4", e);
    }
    return v;
}

// Which of the two runs crossentropy_forward_backward: the separate forward and backward
// kernels (the default) or the fused kernel (HYBRID_CUDA_FUSED_CE=1; never with
// HYBRID_CUDA_NO_FUSE=1); the same bits either way. Measured on the H200 (2026-12-01, GPT-2
// 124M B64 T1024, docs/cuda.md "The fused classifier"): fused 5.72 ms, separate 1.92 + 3.31 =
// 5.23 ms a step, so the fused kernel is not the default. cuda_crossentropy_set_fused (1 fused,
// 0 separate, -1 the environment) lets the tests run both.
static int g_ce_fused_force = -1;
extern "C" void cuda_crossentropy_set_fused(int on) { g_ce_fused_force = on < 0 ? -1 : !!on; }

void cuda_crossentropy_forward_backward(real *losses, real *dlogits, const real *logits, const int *targets,
                                        float dloss, int N, int V, int Vp) {
    static int env = -1;
    if (env < 0) env = env_flag("HYBRID_CUDA_FUSED_CE") && !env_flag("HYBRID_CUDA_NO_FUSE");
    if (!(g_ce_fused_force >= 0 ? g_ce_fused_force : env)) {
        cuda_crossentropy_forward(losses, logits, targets, N, V, Vp);
        cuda_crossentropy_backward(dlogits, logits, targets, dloss, N, V, Vp);
        return;
    }
    PROFILE("crossentropy_fwd_bwd");
    check_shape("crossentropy_forward_backward", V, Vp);
    if (N <= 0) return;
    int vec = Vp % 8 == 0 && is_aligned16(logits) && is_aligned16(dlogits);
    ce_lse_invalidate(dlogits, (size_t)N * Vp * sizeof(bf16));
    int grid = ce_rows_per_sm() * g_cuda.sm_count;
    launch_kernel(ce_forward_backward_kernel, N < grid ? N : grid, CE_THREADS, 0, (float *)losses, (bf16 *)dlogits,
        (const bf16 *)logits, targets, dloss, N, V, Vp, vec);
}
