// The grouped expert GEMMs on cuBLAS's grouped batched GEMM (kernels/moe/experts_cublas.h says
// what and when; docs/hybrid.md, "Dropless permutation and grouped expert FFN").
//
// One cublasGemmGroupedBatchedEx call per GEMM kind: one group per expert with rows (group size
// 1; an expert with no rows is not in the call, so it is neither written nor added to), sizes,
// leading dimensions, transpositions, alpha and beta in host arrays, the A, B, C pointers in
// device arrays (cuBLAS reads them on the device). Those pointer arrays are written by a small
// kernel (moe_cublas_ptrs_kernel) from the host copy of the offsets, passed by value as a kernel
// parameter: no host buffer has to outlive the call and nothing waits. The same kernel compares
// the offsets on the device with that copy and traps on a difference (the backward of a layer
// whose offsets were rewritten since its forward copied them: the sizes would be wrong).
//
// Determinism (cuBLAS's documented conditions for bit-wise reproducible results run to run on
// one GPU model): one stream (the backend's), our own workspace (cublasSetWorkspace: the Lt
// matmuls' 32 MiB, used in stream order by both, so cuBLAS's per-stream workspace pool is never
// involved), atomics not allowed, and no reduced-precision split-k reductions (fp32 throughout;
// a split-k partial sum in bf16 would also round twice). The bits differ from our kernels'
// (another summation order): the two paths are alternatives, each deterministic. The mixed mode
// runs some GEMMs on each (which ones depends on the shape only, experts.cu's gemm_on_cublas), so
// its bits are, GEMM by GEMM, those of the path that ran it.
//
// Under the CPU emulator (HYBRID_CUDA_EMU) cublasGemmGroupedBatchedEx is tests/cuda_emu's loop
// of column-major GEMMs, which checks the arguments as cuBLAS documents them: the emulated tests
// run this whole path (the host copy, the pointer kernel, the argument mapping) against the CPU
// reference; only cuBLAS's own kernels are the GPU's. Its pinned copies land only at the wait
// that covers them and read as 0xff bytes until then (docs/cuda.md, "The CPU emulator"), so a
// backward that read the mixed mode's copy without waiting would see offsets of -1 (check_copy
// dies, or the GEMMs find no rows and the test's parity fails).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_backend.h"
#include "kernels/moe/experts_cublas.h"

// ---- the switch (HYBRID_MOE_GEMM=own|cublas|mixed; tests: cuda_moe_set_gemm) ----
static int g_env_mode = -1, g_forced = -1;
static long g_calls, g_copies, g_waits;

static int gemm_mode(void) {
    if (g_forced >= 0) return g_forced;
    if (g_env_mode < 0) {
        // the default: mixed, the fastest layer on the H200 at both benchmark shapes
        // (docs/hybrid.md, "The mixed mode measured")
        static const char *const names[] = {"mixed", "own", "cublas"};
        static const int modes[] = {MOE_GEMM_MIXED, MOE_GEMM_OWN, MOE_GEMM_CUBLAS};
        g_env_mode = modes[env_choice("HYBRID_MOE_GEMM", names, 3)];
    }
    return g_env_mode;
}

extern "C" void cuda_moe_set_gemm(int mode) { g_forced = mode >= MOE_GEMM_OWN && mode <= MOE_GEMM_MIXED ? mode : -1; }
extern "C" const char *cuda_moe_gemm_name(void) {
    static const char *const names[] = {"own", "cublas", "mixed"};
    return names[gemm_mode()];
}
extern "C" long cuda_moe_cublas_calls(void) { return g_calls; }
extern "C" long cuda_moe_offsets_copies(void) { return g_copies; }
extern "C" long cuda_moe_offsets_waits(void) { return g_waits; }

int moe_gemm_mode(int E) { return E >= 1 && E <= MOE_CUBLAS_MAX_E ? gemm_mode() : MOE_GEMM_OWN; }

// ---- the host copies of the offsets, one per offsets pointer (one per MoE layer) ----
// Each entry's ints are a slot of one pinned host block (cudaHostAlloc, allocated at the first
// copy and kept for the process): a device-to-host cudaMemcpyAsync into pinned memory returns at
// once and the copy engine writes the slot in stream order, so the mixed mode's forward does not
// wait (into pageable memory the call would return only once the copy was done). The host reads a
// slot only after a wait that covers its last copy: the stream synchronization right after it
// (forward = 1), or the entry's event (pending: moe_cublas_offsets_async issued it, nobody has
// waited yet). A new copy into a slot whose copy is still pending is in stream order after it,
// so the slot ends up holding the newer offsets.
#define HOST_COPIES 128
typedef struct {
    const int *dev;  // the offsets' device pointer (NULL: a free entry)
    int E;
    unsigned long long last_use;
    int *off;          // its slot of g_pinned (MOE_CUBLAS_MAX_E + 1 ints)
    cudaEvent_t done;  // recorded after the slot's asynchronous copy
    int pending;       // 1: an asynchronous copy was issued into off and not yet waited for
} HostCopy;
static HostCopy g_copy[HOST_COPIES];
static int *g_pinned;
static unsigned long long g_clock;

static void host_copies_init(void) {
    if (g_pinned) return;
    CUDA_CHECK(cudaHostAlloc((void **)&g_pinned, sizeof(int) * (size_t)HOST_COPIES * (MOE_CUBLAS_MAX_E + 1),
                             cudaHostAllocDefault));
    for (int i = 0; i < HOST_COPIES; i++) {
        g_copy[i].off = g_pinned + (size_t)i * (MOE_CUBLAS_MAX_E + 1);
        CUDA_CHECK(cudaEventCreateWithFlags(&g_copy[i].done, cudaEventDisableTiming));
    }
}

// the entry of (offsets, E), or (found = 0) the one to reuse: the least recently used (a free
// one first), now holding (offsets, E)
static HostCopy *host_entry(const int *offsets, int E, int *found) {
    host_copies_init();
    HostCopy *p = NULL, *lru = &g_copy[0];
    for (int i = 0; i < HOST_COPIES && !p; i++) {
        if (g_copy[i].dev == offsets && g_copy[i].E == E) p = &g_copy[i];
        else if (g_copy[i].last_use < lru->last_use) lru = &g_copy[i];  // (free entries have 0)
    }
    *found = p != NULL;
    if (!p) p = lru, p->dev = offsets, p->E = E;
    p->last_use = ++g_clock;
    return p;
}

// offsets must not decrease from >= 0 (checked on the host copy once it is there)
static void check_copy(HostCopy *p) {
    for (int e = 0; e < p->E; e++)
        if (p->off[0] < 0 || p->off[e + 1] < p->off[e]) {
            p->dev = NULL, p->last_use = 0;
            die("moe experts (cuBLAS path): offsets[%d] = %d, offsets[%d] = %d: not non-decreasing from >= 0", e,
                p->off[e], e + 1, p->off[e + 1]);
        }
}

const int *moe_cublas_offsets(const int *offsets, int E, int forward) {
    int found;
    HostCopy *p = host_entry(offsets, E, &found);
    if (found && !forward) {  // the backward: its forward's copy
        if (p->pending) {     // (the mixed mode's forward issued it: wait for its event, once)
            CUDA_CHECK(cudaEventSynchronize(p->done));
            p->pending = 0;
            g_waits++;
            check_copy(p);
        }
        return p->off;
    }
    // The one synchronization of the cuBLAS path: cuBLAS takes the sizes on the host.
    CUDA_CHECK(cudaMemcpyAsync(p->off, offsets, sizeof(int) * (size_t)(E + 1), cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    p->pending = 0;
    g_copies++;
    check_copy(p);
    return p->off;
}

void moe_cublas_offsets_async(const int *offsets, int E) {
    int found;
    HostCopy *p = host_entry(offsets, E, &found);
    CUDA_CHECK(cudaMemcpyAsync(p->off, offsets, sizeof(int) * (size_t)(E + 1), cudaMemcpyDeviceToHost, g_cuda.stream));
    CUDA_CHECK(cudaEventRecord(p->done, g_cuda.stream));
    p->pending = 1;
    g_copies++;
}

void moe_cublas_forget(const void *p, size_t bytes) {
    const char *lo = (const char *)p;
    for (int i = 0; i < HOST_COPIES; i++) {
        const char *d = (const char *)g_copy[i].dev;
        // (a pending copy has landed: the backend synchronized the stream before freeing)
        if (d && d >= lo && d < lo + bytes) g_copy[i].dev = NULL, g_copy[i].last_use = 0, g_copy[i].pending = 0;
    }
}

// ---- the device pointer arrays ----
// What the pointer kernel gets by value (a kernel parameter, 3 KiB: under the 4 KiB limit).
typedef struct {
    int E, n;                       // experts; problems = experts with rows
    int off[MOE_CUBLAS_MAX_E + 1];  // the host copy of the offsets the call was sized from
    short slot[MOE_CUBLAS_MAX_E];   // expert e's problem index (its group), -1 if it has no rows
} MoeCallPlan;
static_assert(sizeof(MoeCallPlan) + 128 <= 4096, "the pointer kernel's parameters fit in 4 KiB");

// The pointer of expert e's operand: base + offsets[e] row + e expert (bytes): a row-indexed
// activation (row = its row's bytes, expert = 0) or an expert's weight (row = 0).
typedef struct {
    const char *base;
    long long row, expert;
} MoePtrs;

// Traps where offsets[e] on the device is not the host copy h.off[e] the cuBLAS calls were sized
// from (printing the difference; a call's threads e = 0..E check every offset).
__device__ void moe_cublas_check_offset(const int *offsets, const MoeCallPlan &h, int e) {
    if (offsets[e] == h.off[e]) return;
    printf("moe experts (cuBLAS path): offsets[%d] is %d on the device but %d in the host copy the GEMM was "
           "sized from (offsets rewritten between a forward and its backward?)\n",
           e, offsets[e], h.off[e]);
    __trap();
}

// ptrs[j], ptrs[n + j], ptrs[2n + j] = the A, B, C pointers of problem j = slot[e]; one thread an
// expert, thread E checks the last offset (moe_cublas_check_offset).
__global__ void moe_cublas_ptrs_kernel(void **ptrs, const int *offsets, MoeCallPlan h, MoePtrs a, MoePtrs b,
                                       MoePtrs c) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e > h.E) return;
    moe_cublas_check_offset(offsets, h, e);
    if (e == h.E || h.slot[e] < 0) return;
    const int j = h.slot[e];
    const long long r0 = h.off[e];
    ptrs[j] = (void *)(a.base + r0 * a.row + e * a.expert);
    ptrs[h.n + j] = (void *)(b.base + r0 * b.row + e * b.expert);
    ptrs[2 * h.n + j] = (void *)(c.base + r0 * c.row + e * c.expert);
}

// ---- one grouped call ----
static cublasHandle_t moe_handle(void) {
    static cublasHandle_t h;
    if (!h) {
        CUBLAS_CHECK(cublasCreate(&h));
        // (cublasSetStream puts the handle back on cuBLAS's own workspace pool: the stream first)
        CUBLAS_CHECK(cublasSetStream(h, g_cuda.stream));
        CUBLAS_CHECK(cublasSetWorkspace(h, g_cuda.lt_workspace, g_cuda.lt_workspace_size));
        CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));  // (alpha, beta: host arrays)
        CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
        CUBLAS_CHECK(cublasSetMathMode(
            h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    }
    return h;
}

// The host arrays of one call, one entry a group (= a problem). Static: cuBLAS reads them during
// the call (host arrays), not after it returns.
static struct {
    cublasOperation_t ta[MOE_CUBLAS_MAX_E], tb[MOE_CUBLAS_MAX_E];
    int m[MOE_CUBLAS_MAX_E], n[MOE_CUBLAS_MAX_E], k[MOE_CUBLAS_MAX_E];
    int lda[MOE_CUBLAS_MAX_E], ldb[MOE_CUBLAS_MAX_E], ldc[MOE_CUBLAS_MAX_E], size[MOE_CUBLAS_MAX_E];
    float alpha[MOE_CUBLAS_MAX_E], beta[MOE_CUBLAS_MAX_E];
} g_arg;

// Every problem: C (m x n, ld ldc) = op(A) (m x k) B (k x n), column-major, C written (beta 0).
// The experts' rows go in n; m and k are fixed. (The row GEMMs: the weight gradients, whose rows
// go in k, are fp32 and run one cublasGemmEx per expert, moe_cublas_wgrad below.)
static void grouped_call(const int *hoff, const int *offsets, int E, cublasOperation_t ta, int m, int k, int lda,
                         int ldb, int ldc, MoePtrs A, MoePtrs B, MoePtrs C) {
    static MoeCallPlan h;  // (static: 3 KiB, copied into the launch)
    h.E = E, h.n = 0;
    for (int e = 0; e < E; e++) {
        const int rows = hoff[e + 1] - hoff[e];
        h.slot[e] = (short)(rows > 0 ? h.n : -1);
        if (rows <= 0) continue;
        const int j = h.n++;
        g_arg.ta[j] = ta, g_arg.tb[j] = CUBLAS_OP_N;
        g_arg.m[j] = m, g_arg.n[j] = rows, g_arg.k[j] = k;
        g_arg.lda[j] = lda, g_arg.ldb[j] = ldb, g_arg.ldc[j] = ldc;
        g_arg.size[j] = 1;
        g_arg.alpha[j] = 1.f, g_arg.beta[j] = 0.f;
    }
    memcpy(h.off, hoff, sizeof(int) * (size_t)(E + 1));
    if (h.n == 0) return;  // no rows at all: nothing to write
    void **ptrs = (void **)scratch_get(sizeof(void *) * 3 * (size_t)h.n);
    launch_kernel(moe_cublas_ptrs_kernel, dim3((E + 1 + 127) / 128), dim3(128), 0, ptrs, offsets, h, A, B, C);
    CUBLAS_CHECK(cublasGemmGroupedBatchedEx(moe_handle(), g_arg.ta, g_arg.tb, g_arg.m, g_arg.n, g_arg.k, g_arg.alpha,
                                            (const void *const *)ptrs, CUDA_R_16BF, g_arg.lda,
                                            (const void *const *)(ptrs + h.n), CUDA_R_16BF, g_arg.ldb, g_arg.beta,
                                            ptrs + 2 * h.n, CUDA_R_16BF, g_arg.ldc, h.n, g_arg.size,
                                            CUBLAS_COMPUTE_32F));
    LAUNCH_CHECK();  // (HYBRID_CUDA_SYNC=1: a failing cuBLAS kernel shows here)
    g_calls++;
}

// ---- the weight gradients: one cublasGemmEx per expert ----
// The per-expert calls have no pointer arrays to write: only the offsets' check (one thread an
// offset), as moe_cublas_ptrs_kernel does it for the grouped calls.
__global__ void moe_cublas_check_kernel(const int *offsets, MoeCallPlan h) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e <= h.E) moe_cublas_check_offset(offsets, h, e);
}

// dW_e (P, Q) += G_e^T X_e for every expert with rows (G_e: rows [hoff[e], hoff[e + 1]) of G (., P),
// X_e: of X (., Q); dW fp32, E P Q floats). cuBLAS's grouped GEMM writes no fp32 C (the header), so
// one cublasGemmEx per expert: bf16 A and B, fp32 C, CUBLAS_COMPUTE_32F is a combination
// cublasGemmEx documents. Column-major, as moe_cublas_rows reads our row-major matrices:
//   dW_e' (Q, P) += X_e' (Q, r) op(G_e') : X_e' ld Q, op N; G_e' (P, r), ld P, op T; ldc Q;
//   m = Q, n = P, k = r, beta 1 (the accumulator: the gradient is summed over micro-batches).
// An expert with no rows is not called (its gradient gets nothing). The calls queue on the
// backend's stream one after the other; each is deterministic (the handle's settings above).
int moe_cublas_wgrad(float *dW, const bf16 *G, const bf16 *X, const int *hoff, const int *offsets, int E, int P,
                     int Q) {
    if (P <= 0 || Q <= 0 || !moe_cublas_suits(dW, G, X, P, Q)) return 0;
    static MoeCallPlan h;  // (only E and off are read)
    h.E = E, h.n = 0;
    memcpy(h.off, hoff, sizeof(int) * (size_t)(E + 1));
    launch_kernel(moe_cublas_check_kernel, dim3((E + 1 + 127) / 128), dim3(128), 0, offsets, h);
    const float one = 1.f;
    for (int e = 0; e < E; e++) {
        const int r = hoff[e + 1] - hoff[e];
        if (r <= 0) continue;
        CUBLAS_CHECK(cublasGemmEx(moe_handle(), CUBLAS_OP_N, CUBLAS_OP_T, Q, P, r, &one, X + (size_t)hoff[e] * Q,
                                  CUDA_R_16BF, Q, G + (size_t)hoff[e] * P, CUDA_R_16BF, P, &one,
                                  dW + (size_t)e * P * Q, CUDA_R_32F, Q, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    LAUNCH_CHECK();
    g_calls++;
    return 1;
}

// every pointer 16-byte aligned (cuBLAS's rule for bf16 operands whose k is a multiple of 8)
int moe_cublas_suits(const void *a, const void *b, const void *c, int d0, int d1) {
    return is_aligned16(a) && is_aligned16(b) && is_aligned16(c) && d0 % 8 == 0 && d1 % 8 == 0;
}

// cuBLAS is column-major: our row-major (R, K) matrix x is, read column-major, x' (K, R) with
// leading dimension K (as kernels/core/matmul.cu). Expert e, rows [r0, r0 + r):
//   Y_e (r, n_out) = X_e (r, kd) W_e^T   is   Y_e' (n_out, r) = op(W_e') (n_out, kd) X_e' (kd, r)
//   W_e stored (n_out, kd) (w_t = 0: fwd13, fwd2): W_e' is (kd, n_out), ld kd, op T   [TN]
//   W_e stored (kd, n_out) (w_t = 1: dgrad2, dgrad13): W_e' is (n_out, kd), ld n_out, op N   [NN]
//   X_e' (kd, r): ld kd, op N;  Y_e' (n_out, r): ld n_out;  m = n_out, n = r, k = kd, beta 0.
int moe_cublas_rows(bf16 *Y, const bf16 *X, const bf16 *W, const int *hoff, const int *offsets, int E, int n_out,
                    int kd, int w_t) {
    if (n_out <= 0 || kd <= 0 || !moe_cublas_suits(Y, X, W, n_out, kd)) return 0;  // (ours: the empty shapes too)
    const long long b = sizeof(bf16);
    grouped_call(hoff, offsets, E, w_t ? CUBLAS_OP_N : CUBLAS_OP_T, n_out, kd, w_t ? n_out : kd, kd, n_out,
                 MoePtrs{(const char *)W, 0, (long long)n_out * kd * b}, MoePtrs{(const char *)X, kd * b, 0},
                 MoePtrs{(const char *)Y, n_out * b, 0});
    return 1;
}
