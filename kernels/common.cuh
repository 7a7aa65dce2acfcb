// Shared pieces of the CUDA backend (kernels/*.cu): error checks, the one stream,
// the cuBLASLt handle and workspace, the backend's scratch buffer, bf16 vector loads
// and deterministic reductions.
//
// Element types: parameters, gradients and activations are bf16 (`bf16`); statistics
// (norm mean/rstd, attention lse, per-row losses), optimizer state and master weights
// are fp32. Arithmetic is fp32 (double where a sum crosses the whole tensor).
// Every CUDA / cuBLAS call goes through CUDA_CHECK / CUBLAS_CHECK, which die with the
// file, the line and the library's error string; every launch is followed by
// LAUNCH_CHECK (HYBRID_CUDA_SYNC=1 also synchronizes there, to pin a failing kernel).
#ifndef HYBRID_KERNELS_COMMON_CUH
#define HYBRID_KERNELS_COMMON_CUH

#ifdef HYBRID_CUDA_EMU
// The CPU emulation of the CUDA subset the emulated families use (tests/cuda_emu/cuda_emu.h):
// the same kernels, compiled by the host C++ compiler, checked by `make test` with no GPU.
#include "tests/cuda_emu/cuda_emu.h"
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "base/util.h"
#include "model/backend.h"
}

// This backend exists only in the float build (`real` = float): scalars that cross into it
// are float, and its pointers hold bf16 tensors or fp32 statistics whatever `real` says.
static_assert(sizeof(real) == sizeof(float), "the CUDA backend is built with real = float only");

typedef __nv_bfloat16 bf16;

// The ops of the families this backend has (kernels/<family>/*.cu), each declared with
// exactly its member's type (model/ops/op_table.h), plus the optional fused ops it offers.
#define CUDA_DECLARE_CORE(member) OP_DECLARE(CoreOps, cuda_, member)
#define CUDA_DECLARE_NORM_GLU(member) OP_DECLARE(NormGluOps, cuda_, member)
#define CUDA_DECLARE_OPTIM(member) OP_DECLARE(OptimOps, cuda_, member)
#define CUDA_DECLARE_DELTA_RULE(member) OP_DECLARE(DeltaRuleOps, cuda_, member)
#define CUDA_DECLARE_ATTNRES(member) OP_DECLARE(AttnResOps, cuda_, member)
#define CUDA_DECLARE_MLA(member) OP_DECLARE(MlaOps, cuda_, member)
#define CUDA_DECLARE_MOE(member) OP_DECLARE(MoeOps, cuda_, member)
extern "C" {
CORE_OPS(CUDA_DECLARE_CORE)
NORM_GLU_OPS(CUDA_DECLARE_NORM_GLU)
OPTIM_OPS(CUDA_DECLARE_OPTIM)
DELTA_RULE_OPS(CUDA_DECLARE_DELTA_RULE)
ATTNRES_OPS(CUDA_DECLARE_ATTNRES)
MLA_OPS(CUDA_DECLARE_MLA)
MOE_OPS(CUDA_DECLARE_MOE)
OP_DECLARE(CoreOps, cuda_, matmul_gelu_forward)
OP_DECLARE(CoreOps, cuda_, matmul_backward_gelu)
OP_DECLARE(CoreOps, cuda_, add_layernorm_forward)
OP_DECLARE(CoreOps, cuda_, layernorm_backward_add)
OP_DECLARE(CoreOps, cuda_, matmul_backward_acc)
OP_DECLARE(NormGluOps, cuda_, add_rmsnorm_forward)
OP_DECLARE(NormGluOps, cuda_, rmsnorm_backward_add)
OP_DECLARE(OptimOps, cuda_, adamw_update_multi)
OP_DECLARE(DeltaRuleOps, cuda_, short_conv_l2norm_forward)
// the families' CUDA tables (kernels/<family>/table.cu)
const CoreOps *cuda_core_ops(void);
const NormGluOps *cuda_norm_glu_ops(void);
const OptimOps *cuda_optim_ops(void);
const DeltaRuleOps *cuda_delta_rule_ops(void);
const AttnResOps *cuda_attnres_ops(void);
const MlaOps *cuda_mla_ops(void);
const MoeOps *cuda_moe_ops(void);
}

// ---- errors ----
[[noreturn]] void cuda_fail(const char *what, const char *err, const char *file, int line);
void cuda_launch_check(const char *file, int line);
// A launch the GPU refused (e.g. more threads a block than the kernel's registers allow: the
// emulator cannot see register counts): dies naming the kernel's limits beside the launch's.
#ifndef HYBRID_CUDA_EMU
[[noreturn]] void cuda_launch_refused(const void *kernel, cudaError_t err, unsigned block, size_t smem);
#endif

#define CUDA_CHECK(call)                                                                  \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess) cuda_fail(#call, cudaGetErrorString(err_), __FILE__, __LINE__); \
    } while (0)
#define CUBLAS_CHECK(call)                                                                     \
    do {                                                                                       \
        cublasStatus_t st_ = (call);                                                           \
        if (st_ != CUBLAS_STATUS_SUCCESS) cuda_fail(#call, cublasGetStatusString(st_), __FILE__, __LINE__); \
    } while (0)
#define LAUNCH_CHECK() cuda_launch_check(__FILE__, __LINE__)

// ---- the backend's global state (one device, one stream) ----
typedef struct {
    int ready;
    int device;
    int sm_count;
    int cc;                       // compute capability, major * 10 + minor (90: H100/H200)
    int sync_debug;               // HYBRID_CUDA_SYNC=1: synchronize after every launch
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_size;
    void *scratch;                // grows on demand (scratch_get); ops use it within one call
    size_t scratch_size;
    size_t live_bytes, peak_bytes; // backend allocations (alloc/free)
} CudaState;

extern CudaState g_cuda;

void cuda_init(void);  // idempotent
int env_flag(const char *name);  // "1": 1; unset, empty or "0": 0; anything else stops the run by name
// the index of the environment's value among values[0..n) (unset or empty: 0, the default);
// anything else stops the run naming the variable and the values
int env_choice(const char *name, const char *const *values, int n);
// A device buffer of at least `bytes`, valid until the next scratch_get. Ops use it for
// partial sums and the like; the stream orders every use, so one op's scratch is free
// again for the next op. Growing synchronizes (rare: first calls only).
void *scratch_get(size_t bytes);
// Lets `kernel` take `bytes` (> 48 KiB) of dynamic shared memory. The attribute is set once per
// kernel and size (a small table remembers it), not on every launch.
void cuda_allow_dynamic_smem(const void *kernel, size_t bytes);

// ---- per-op timing (HYBRID_CUDA_PROFILE=1) ----
struct ProfScope {
    int slot;
    size_t first;
    explicit ProfScope(const char *name);
    ~ProfScope();
};
#define PROFILE(name) ProfScope prof_scope_(name)
// (a NULL name times nothing) the name of a GEMM op's per-shape part, or NULL unless
// HYBRID_CUDA_PROFILE_SHAPES=1 (kernels/backend_cuda.cu)
extern "C" const char *prof_shape_name(const char *op, int N, int C, int OC);
#define PROFILE_SHAPE(op, N, C, OC) ProfScope prof_shape_scope_(prof_shape_name(op, N, C, OC))

// ---- kernel launches ----
// A launch through launch_kernel is the same code on the GPU and in the CPU emulator
// (tests/cuda_emu/): on the GPU, kernel<<<grid, block, smem, the stream>>>(args) (asking for
// more than the default 48 KiB of dynamic shared memory where smem needs it) and
// LAUNCH_CHECK; under HYBRID_CUDA_EMU the blocks run one after another on the CPU, their
// threads as fibers. Every family launches only so (the emulator runs them all),
// and take dynamic shared memory only through DYNAMIC_SMEM.
template <typename... P, typename... A>
static inline void launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A... args) {
#ifdef HYBRID_CUDA_EMU
    emu_launch((const void *)kernel, grid, block, smem, [=]() { kernel(args...); });
#else
    if (smem > 48 * 1024) cuda_allow_dynamic_smem((const void *)kernel, smem);
    kernel<<<grid, block, smem, g_cuda.stream>>>(args...);
    const cudaError_t refused = cudaPeekAtLastError();
    if (refused != cudaSuccess) cuda_launch_refused((const void *)kernel, refused, block.x * block.y * block.z, smem);
#endif
    LAUNCH_CHECK();
}

// The block's dynamic shared memory (the launch's smem bytes, 16-byte aligned) as T *name.
#ifdef HYBRID_CUDA_EMU
#define DYNAMIC_SMEM(T, name) T *name = reinterpret_cast<T *>(emu_dynamic_smem())
#else
#define DYNAMIC_SMEM(T, name)                                       \
    extern __shared__ __align__(16) unsigned char dynamic_smem_[]; \
    T *name = reinterpret_cast<T *>(dynamic_smem_)
#endif

// ---- launch geometry ----
static inline unsigned grid_for(size_t work, int block, int max_blocks_per_sm = 16) {
    size_t g = (work + (size_t)block - 1) / (size_t)block;
    size_t cap = (size_t)g_cuda.sm_count * (size_t)max_blocks_per_sm;
    if (g > cap) g = cap;
    if (g < 1) g = 1;
    return (unsigned)g;
}

static inline int is_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ---- bf16 vectors: 8 elements = 16 bytes ----
// A bf16 pair as loaded (the lower element in the low 16 bits) -> two fp32. A bf16 is the top
// half of its fp32, so each element is one instruction, a shift or a mask: the same values as
// __bfloat1622float2, which compiles the high element to two (moved down, then shifted back up).
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
// bf16 x 8 in a uint4 (as loaded) -> fp32
__device__ __forceinline__ void unpack8(uint4 v, float f[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 t = bf16x2_to_float2(w[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

__device__ __forceinline__ void load8(const bf16 *p, float f[8]) { unpack8(*reinterpret_cast<const uint4 *>(p), f); }

__device__ __forceinline__ void store8(bf16 *p, const float f[8]) {
    uint4 v;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4 *>(p) = v;
}

// ---- warp and block reductions (fixed trees: deterministic) ----
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < nw ? part[lane] : 0.f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ double block_sum_d(double v) {
    __shared__ double part_d[32];
    __shared__ double total_d;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) part_d[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < nw ? part_d[lane] : 0.0;
        s = warp_sum_d(s);
        if (lane == 0) total_d = s;
    }
    __syncthreads();
    return total_d;
}

// A write to [p, p + bytes) through the backend: drops the cross-entropy statistics
// kept for those logits (crossentropy.cu).
void ce_lse_invalidate(const void *p, size_t bytes);

// ---- cuDNN attention (core/attention_cudnn.cu; docs/cuda.md, "cuDNN attention") ----
// HYBRID_ATTN=cudnn (or cuda_attention_set_cudnn) and a build with cuDNN: the attention ops
// try these first. Each runs the op of mla.h's contract on layout L and returns 1, or
// returns 0 (cuDNN refused the shape; said once per shape) and the caller runs its kernel.
int cudnn_attention_selected(void);
int cudnn_attention_forward(real *out, real *lse, const real *q, const real *k, const real *v, const AttnLayout *L);
int cudnn_attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *q, const real *k,
                             const real *v, const real *out, const real *lse, const AttnLayout *L);

// ---- cuBLASLt GEMM (matmul.cu), column-major in cuBLAS's terms ----
// D (m, n) = alpha * op(A) op(B) + beta * C  (+ bias[m] broadcast over columns)
// A is (m, k) after op, stored with leading dimension lda; likewise B (k, n), C and D
// (m, n) share ldc. C may equal D (in place). batch > 1: strided batches.
void gemm_bf16(int transa, int transb, int m, int n, int k, const bf16 *A, int lda, long long strideA,
               const bf16 *B, int ldb, long long strideB, const bf16 *C, bf16 *D, int ldc, long long strideC,
               float alpha, float beta, const bf16 *bias, int batch);

#endif
