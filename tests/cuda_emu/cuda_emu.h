// A CPU emulator for the CUDA subset the backend uses (every family of kernels/, Makefile
// EMU_FAMILIES, and kernels/backend_cuda.cu), so
// that `make test` checks their logic against the CPU reference on a machine with no GPU
// (docs/cuda.md, "The CPU emulator").
//
// How it works: a kernel file is compiled by the host C++ compiler with -DHYBRID_CUDA_EMU;
// kernels/common.cuh then includes this header instead of the CUDA headers. __global__ and
// __device__ vanish, so a kernel is a plain function. launch_kernel (kernels/common.cuh) calls
// emu_launch, which runs the grid's blocks one after another, in a shuffled order (a kernel that
// assumes an order between blocks fails here too), and each block's threads as fibers on one
// OS thread: a thread runs until it reaches __syncthreads, a warp operation or its end, then the
// next one runs. A barrier releases when every live thread of the block (or of the warp) has
// reached it; threads that have returned count as arrived, as on the GPU. threadIdx and friends
// are globals that the scheduler sets before resuming a fiber.
//
// What it checks besides the arithmetic: __syncthreads in divergent code (threads of one
// barrier generation arriving from different source lines), warp operations with lanes missing
// (a deadlock: the run stops naming the block), launch
// geometry (empty grids, more than 1024 threads, more shared memory than an H200 block has).
// Dynamic shared memory (DYNAMIC_SMEM) and scratch_get buffers are filled with NaN bytes
// before use, so a kernel that reads what it never wrote produces NaN, which the parity tests
// catch. Threads run in index order on even rounds and in reverse on odd rounds, so a missing
// __syncthreads between a write and another thread's read shows up as a wrong result in many
// cases (not all: the emulator is no race detector).
//
// The tensor-core instructions of kernels/mma.cuh (mma.sync m16n8k16, ldmatrix, cp.async) are
// emulated from their fragment layouts, kernels/wgmma.cuh's warpgroup MMA from its
// descriptors and accumulator layout, performed at the wait that covers it, and
// kernels/mbarrier.cuh's barriers with phases (cuda_emu.cpp); no other inline PTX is.
// cuBLASLt's GEMM (with the epilogues kernels/core/matmul.cu uses) is a plain loop (emu_lt_matmul)
// and CUB's radix sort a stable sort, so the whole backend (kernels/backend_cuda.cu and every
// family) runs here.
// What it does not model: timing, memory coalescing, atomics' reordering (atomicAdd is a plain add here, so a kernel whose result depends
// on the order of its atomics passes here and may not be deterministic on the GPU), cuBLAS's
// own summation order, inter-block communication within a launch, __restrict__ aliasing assumptions.
#ifndef HYBRID_CUDA_EMU_H
#define HYBRID_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/bf16.h"

#include <algorithm>
#include <cmath>
#include <functional>

// ---- the CUDA keywords: gone (a kernel is a plain function) ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__
// Function-local __shared__ variables become statics: one copy, seen by every fiber of the
// running block, as shared memory is. (`extern __shared__` is a compile error here: dynamic
// shared memory is taken through DYNAMIC_SMEM.)
#define __shared__ static
#define __constant__ static

// ---- built-in vector types and the thread coordinates ----
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static const int warpSize = 32;

// ---- bf16: round to nearest even, NaN kept (as __float2bfloat16_rn) ----
struct __nv_bfloat16 {
    uint16_t x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : x(bf16_from_float(f)) {}
    __nv_bfloat16(double d) : __nv_bfloat16((float)d) {}
    __nv_bfloat16(int i) : __nv_bfloat16((float)i) {}
    operator float() const { return bf16_to_float(x); }
};
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {(float)h.x, (float)h.y}; }
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float __low2float(__nv_bfloat162 h) { return (float)h.x; }
static inline float __high2float(__nv_bfloat162 h) { return (float)h.y; }

// ---- device math that host C++ lacks ----
using std::max;
using std::min;
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// (glibc declares __expf and __logf itself, as its own internals: the fast-math intrinsics are
// the plain functions by macro here)
#define __expf expf
#define __logf logf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
template <typename T> static inline T __ldg(const T *p) { return *p; }
// (cache hints: plain loads and stores here)
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline void __stcg(T *p, T v) { *p = v; }

// ---- barriers and warp operations (tests/cuda_emu/cuda_emu.cpp) ----
void emu_syncthreads(const char *file, int line);
#define __syncthreads() emu_syncthreads(__FILE__, __LINE__)
int emu_syncthreads_or(const char *file, int line, int predicate);
// cp.async (kernels/mma.cuh): the copy lands at the cp_async_wait covering its group; the
// destination holds 0xff bytes until then (tests/cuda_emu/cuda_emu.cpp)
void emu_cp_async16(void *dst, const void *src, bool valid);
void emu_cp_async_commit(void);
void emu_cp_async_wait(int n);
void emu_cp_async_finish(void);
#define __syncthreads_or(p) emu_syncthreads_or(__FILE__, __LINE__, (p))
void __syncwarp(unsigned mask = 0xffffffffu);
void __threadfence(void);
void __threadfence_block(void);
// one exchange through the warp: mode 0 = from lane arg, 1 = xor arg, 2 = down arg, 3 = up arg
uint64_t emu_shuffle(unsigned mask, uint64_t value, int mode, int arg, int width);
unsigned emu_ballot(unsigned mask, int predicate);

template <typename T> static inline T emu_shuffle_as(unsigned mask, T v, int mode, int arg, int width) {
    static_assert(sizeof(T) <= 8, "emulated shuffles move at most 8 bytes");
    uint64_t in = 0, out;
    memcpy(&in, &v, sizeof(T));
    out = emu_shuffle(mask, in, mode, arg, width);
    T r;
    memcpy(&r, &out, sizeof(T));
    return r;
}
template <typename T> static inline T __shfl_sync(unsigned m, T v, int lane, int w = 32) {
    return emu_shuffle_as(m, v, 0, lane, w);
}
template <typename T> static inline T __shfl_xor_sync(unsigned m, T v, int mask, int w = 32) {
    return emu_shuffle_as(m, v, 1, mask, w);
}
template <typename T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) {
    return emu_shuffle_as(m, v, 2, (int)d, w);
}
template <typename T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) {
    return emu_shuffle_as(m, v, 3, (int)d, w);
}
static inline unsigned __ballot_sync(unsigned m, int p) { return emu_ballot(m, p); }
static inline int __any_sync(unsigned m, int p) { return emu_ballot(m, p) != 0; }
static inline int __all_sync(unsigned m, int p) { return emu_ballot(m, !p) == 0; }

// Atomics: fibers switch only at barriers, so a read-modify-write is atomic as it stands.
template <typename T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}
template <typename T> static inline T atomicMax(T *p, T v) {
    T old = *p;
    if (v > old) *p = v;
    return old;
}

// ---- the runtime API subset ----
// a TMA map (kernels/tma.cuh): 128 bytes, as the driver's; here the emulator's own encoding (the
// struct named as cuda.h names it, so that kernel signatures read the same in both builds:
// tests/check_launch_limits.py matches them)
typedef struct alignas(64) CUtensorMap_st {
    unsigned long long opaque[16];
} CUtensorMap;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
typedef struct EmuStream *cudaStream_t;
typedef void *cublasLtHandle_t;
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = 0);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s = 0);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize(void);
// Pinned host memory (cudaHostAlloc; kernels/moe/experts_cublas.cu copies offsets into it
// asynchronously). A cudaMemcpyAsync into it from the device is the one asynchronous thing
// modelled: the source is read when the copy is issued (stream order: what the kernels before it
// wrote), but the host memory changes only at a synchronization that covers the copy
// (cudaStreamSynchronize, cudaDeviceSynchronize, or cudaEventSynchronize of an event recorded
// after it), the latest moment a GPU may deliver it. Until then the destination reads as 0xff
// bytes (set when the copy is issued; the allocation starts so too, as cudaMalloc's): host code
// that reads the copy without waiting reads garbage, even where an earlier copy left the same
// values there.
enum { cudaHostAllocDefault = 0 };
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }

// What kernels/backend_cuda.cu and kernels/device.cu ask of the runtime: one device shaped as
// an H200 (132 SMs, compute capability 9.0, so grid_for sizes grids as there), a stream and
// events that are tokens (everything runs when it is launched; only a copy into pinned host
// memory lands later, above), events timed by the host clock.
enum { cudaErrorNoDevice = 100, cudaErrorInsufficientDriver = 35 };
enum { cudaStreamNonBlocking = 1 };
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
};
typedef struct EmuEvent *cudaEvent_t;
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDevice(int *d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
enum { cudaEventDefault = 0, cudaEventDisableTiming = 2 };
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t stop);

// ---- cuBLASLt: the handle is a token; the GEMM is emu_lt_matmul below ----
typedef int cublasStatus_t;
enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_NOT_SUPPORTED = 15 };
static inline const char *cublasGetStatusString(cublasStatus_t) { return "emulated cuBLAS error"; }
static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = (cublasLtHandle_t)1;
    return CUBLAS_STATUS_SUCCESS;
}
// cublasLtMatmul's arithmetic for the epilogues kernels/core/matmul.cu uses, column-major as
// cuBLAS: per batch b (A, B, C, D advanced by strideA, strideB, strideC),
//   X (m, n) = alpha op(A) op(B) + beta C  (C not read when beta is 0; C may be D)  + bias[i]
// with op(A) (m, k) = transa ? A^T : A (stored with leading dimension lda), op(B) (k, n) likewise,
// fp32 accumulation over bf16 inputs in k order, one bf16 rounding at the end; then
//   EMU_EPI_NONE   D = X                       (bias: bf16, m values, or NULL)
//   EMU_EPI_GELU_AUX  aux = X, D = gelu(X)     (tanh GELU of the fp32 X; aux has D's ldc)
//   EMU_EPI_DGELU  D = X * gelu'(aux)          (no bias)
//   EMU_EPI_BGRADB_F32  D = X and bias (fp32) RECEIVES (written) sum_k op(B)[p, j], n values
//   EMU_EPI_DGELU_BGRAD_F32  D = X * gelu'(aux) as EMU_EPI_DGELU, and bias (fp32) RECEIVES
//                  (written) sum_j of those fp32 values before D's rounding, m values, j in order
// (the bias gradients are fp32 parameter gradients: kernels/core/matmul.cu has no bf16 form)
// C and D are bf16, or fp32 when cd_f32 (then X is stored unrounded: EMU_EPI_NONE with no bias,
// or EMU_EPI_BGRADB_F32).
enum {
    EMU_EPI_NONE,
    EMU_EPI_GELU_AUX,
    EMU_EPI_DGELU,
    EMU_EPI_BGRADB_F32,
    EMU_EPI_DGELU_BGRAD_F32
};
void emu_lt_matmul(int transa, int transb, int m, int n, int k, float alpha, const __nv_bfloat16 *A, int lda,
                   long long strideA, const __nv_bfloat16 *B, int ldb, long long strideB, float beta, const void *C,
                   void *D, int cd_f32, int ldc, long long strideC, int batch, int epi, void *bias,
                   __nv_bfloat16 *aux);

// ---- cuBLAS (the v2 API): what kernels/moe/experts_cublas.cu uses ----
// The handle and its settings are tokens (the emulator has one summation order: emu_lt_matmul's).
// cublasGemmGroupedBatchedEx checks its arguments as cuBLAS documents them (NULL arrays, negative
// sizes, leading dimensions below the stored rows, unsupported types, misaligned pointers:
// CUBLAS_STATUS_INVALID_VALUE / _NOT_SUPPORTED), then runs each problem of each group through
// emu_lt_matmul: C[idx] = alpha_i op(A[idx]) op(B[idx]) + beta_i C[idx], column-major, fp32
// accumulation in k order, one bf16 rounding. Only bf16 A, B, C with CUBLAS_COMPUTE_32F (fp32
// alpha and beta, host arrays) are emulated. cublasGemmEx likewise (the same checks, one problem):
// bf16 A and B, a bf16 or fp32 C (fp32: the accumulation is never rounded), CUBLAS_COMPUTE_32F.
typedef struct EmuCublas *cublasHandle_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16 } cublasMath_t;
typedef enum { CUBLAS_ATOMICS_NOT_ALLOWED = 0, CUBLAS_ATOMICS_ALLOWED = 1 } cublasAtomicsMode_t;
typedef enum { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 } cublasPointerMode_t;
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *workspace, size_t bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode);
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t mode);
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void *alpha_array,
                                          const void *const Aarray[], cudaDataType_t Atype, const int lda_array[],
                                          const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
                                          const void *beta_array, void *const Carray[], cudaDataType_t Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t computeType);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);

// __trap(): the emulated run stops with an error (on the GPU the kernel aborts and the next
// CUDA call fails)
[[noreturn]] void emu_trap(void);
#define __trap() emu_trap()

// ---- CUB: the one algorithm kernels/core/embed.cu uses ----
// DeviceRadixSort::SortPairs: a stable sort of (key, value) pairs by key bits [begin_bit,
// end_bit) (keys compared as unsigned after cub's sign-bit flip of signed types, so the order is
// the signed order); with temp NULL it only sizes the temporary storage.
namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *values_in,
                                 V *values_out, int n, int begin_bit = 0, int end_bit = (int)sizeof(K) * 8,
                                 cudaStream_t = 0) {
        if (!temp) {
            temp_bytes = (size_t)(n > 0 ? n : 1) * sizeof(int);
            return cudaSuccess;
        }
        static_assert(sizeof(K) <= 8, "keys of at most 8 bytes");
        auto bits = [&](K key) {
            uint64_t u = 0;
            memcpy(&u, &key, sizeof(K));
            if (K(-1) < K(0)) u ^= (uint64_t)1 << (sizeof(K) * 8 - 1);  // signed: the sign bit flipped
            uint64_t hi = end_bit >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << end_bit) - 1);
            return (u & hi) >> begin_bit;
        };
        int *idx = (int *)temp;
        for (int i = 0; i < n; i++) idx[i] = i;
        std::stable_sort(idx, idx + n, [&](int a, int b) { return bits(keys_in[a]) < bits(keys_in[b]); });
        for (int i = 0; i < n; i++) {  // (outputs apart from the inputs, as cub's are)
            keys_out[i] = keys_in[idx[i]];
            values_out[i] = values_in[idx[i]];
        }
        return cudaSuccess;
    }
};
}  // namespace cub

// ---- launches (called by launch_kernel in kernels/common.cuh) ----
// Runs body once per thread of every block of the grid; smem bytes of dynamic shared memory
// per block (NaN-filled before each block). kernel: the kernel's address, for the launch log
// (HYBRID_EMU_LAUNCH_LOG, below).
void emu_launch(const void *kernel, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
void *emu_dynamic_smem(void);

#endif
