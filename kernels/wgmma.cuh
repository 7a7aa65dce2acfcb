// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) and what feeds it: the building blocks of the
// kernels that run their products on it (kernels/moe/grouped_gemm_wg.cuh). One PTX wrapper each on
// the GPU; under the CPU emulator (tests/cuda_emu/) a model of the same instruction
// (docs/cuda.md, "The CPU emulator").
//
// What the instruction does. A warpgroup (4 consecutive warps, 128 threads, the first warp's
// index a multiple of 4) computes D (64 x N, fp32, in registers) = A (64 x 16, bf16) B^T
// (B: N x 16, bf16) + (scale_d ? D : 0), both operands read from shared memory by the tensor
// cores themselves through a 64-bit matrix descriptor (below), asynchronously: the issuing
// threads go on, and neither the accumulator registers nor the operands' shared memory may be
// touched until a wgmma_wait covers the instruction's commit group. Order of use:
//   writes of the operand tiles (st.shared or cp.async, then its wait), fence_proxy_async()
//   by every writing thread (the tensor cores read shared memory through the async proxy, which
//   does not see generic writes without it), a barrier, wgmma_fence() (orders the registers),
//   the wgmma_m64k16_bf16 calls, wgmma_commit(), later wgmma_wait<N>() (at most N groups still in
//   flight).
//
// Accumulator layout (m64nNk16, fp32): warp w of the warpgroup owns rows 16 w .. 16 w + 15, and
// within them each 8-column block j is an mma.m16n8k16 C fragment (kernels/mma.cuh):
//   d[4j + 0], d[4j + 1]: row 16 w + g,     columns 8 j + 2 t, + 1     (g = lane / 4, t = lane % 4)
//   d[4j + 2], d[4j + 3]: row 16 w + g + 8, the same columns
//
// The shared-memory layout, 128-byte swizzle (the only mode used here; descriptor mode 1):
// a tile is stored in atoms of 8 rows of 128 bytes (1024 bytes, 1024-byte aligned in the shared
// window), and the 16-byte chunk c of row r of an atom sits at chunk c ^ r: the hardware applies
// that XOR to the address bits 4-6 from bits 7-9, so the atom must start on a 1024-byte boundary
// (wg_align1024). Two orientations of an operand:
//   K-major (the 16 k of one row contiguous; A or B with trans = 0): a row of the atom is
//     one m (or n) row's 64 k values. Element (r, k) of a [rows][64] tile: byte
//     r * 128 + ((k / 8) ^ (r % 8)) * 16 + (k % 8) * 2. Descriptor: SBO = 1024 (the next 8 rows),
//     LBO unused (1); the k16 step kk of a 64-wide tile starts 32 kk bytes further.
//   MN-major (A or B with trans = 1: the m or n of one k contiguous): a row of the atom is one
//     k's 64 n (m) values, an atom 64 n x 8 k. Element (n, k): atom (n / 64, k / 8) at
//     (n / 64) * LBO + (k / 8) * SBO, then (k % 8) * 128 + (((n % 64) / 8) ^ (k % 8)) * 16 +
//     (n % 8) * 2: LBO is the stride between atoms along n, SBO along k (the PTX ISA's canonical
//     MN-major layout with the 128-byte swizzle; tests/gpu/probe_wgmma.cu checks it on the GPU).
// Descriptor bits (PTX ISA, "Matrix Descriptor Format"): 0-13 start address >> 4, 16-29 LBO >> 4,
// 32-45 SBO >> 4, 49-51 base offset (0: atoms 1024-aligned), 62-63 swizzle (1 = 128 bytes).
#ifndef HYBRID_KERNELS_WGMMA_CUH
#define HYBRID_KERNELS_WGMMA_CUH

#include "kernels/common.cuh"

#ifdef HYBRID_CUDA_EMU
// (tests/cuda_emu/cuda_emu.cpp)
uint32_t emu_smem_address(const void *p);
void emu_wgmma_issue(float *d, int n, uint64_t desc_a, uint64_t desc_b, int scale_d, int trans_a, int trans_b);
void emu_wgmma_commit(void);
void emu_wgmma_wait(int n);
#endif

// 1 where the wgmma path can run: the GPU build for sm_90a (nvcc defines __CUDA_ARCH_FEAT_SM90_ALL
// there), or the emulator. Elsewhere the wrappers trap (the host never launches them there:
// cuda_wgmma_ok, kernels/moe/experts_wg.cu).
#if defined(HYBRID_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_HAS_WGMMA 1
#else
#define WG_HAS_WGMMA 0
#endif

// p's address in the shared window (what descriptors and the swizzle see)
__device__ __forceinline__ uint32_t wg_smem_address(const void *p) {
#ifdef HYBRID_CUDA_EMU
    return emu_smem_address(p);
#else
    return (uint32_t)__cvta_generic_to_shared(p);
#endif
}

// the first 1024-byte boundary of the shared window at or after p (the caller reserves 1024
// bytes more than it uses: the dynamic shared memory's start is only 16-byte aligned)
__device__ __forceinline__ unsigned char *wg_align1024(unsigned char *p) {
    const uint32_t a = wg_smem_address(p);
    return p + ((1024u - (a & 1023u)) & 1023u);
}

// the descriptor of an operand whose (current k16 step's) first element is at p, 128-byte swizzle
__device__ __forceinline__ uint64_t wg_desc(const void *p, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = wg_smem_address(p);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32 | (uint64_t)1 << 62;
}

// byte offset of element (r, k) in a K-major tile of rows of 64 k (128 bytes), 1024-aligned
__device__ __forceinline__ uint32_t wg_kmajor_offset(int r, int k) {
    return (uint32_t)r * 128u + ((uint32_t)((k >> 3) ^ (r & 7)) << 4) + (uint32_t)(k & 7) * 2u;
}

// byte offset of element (n, k) in an MN-major tile of atoms of 64 n x 8 k, 1024-aligned: the
// atoms along k adjacent (SBO = 1024), along n lbo bytes apart
__device__ __forceinline__ uint32_t wg_mnmajor_offset(int n, int k, uint32_t lbo) {
    return (uint32_t)(n >> 6) * lbo + (uint32_t)(k >> 3) * 1024u + (uint32_t)(k & 7) * 128u +
           ((uint32_t)(((n & 63) >> 3) ^ (k & 7)) << 4) + (uint32_t)(n & 7) * 2u;
}

// the generic-proxy shared-memory writes of this thread (st.shared, landed cp.async) become
// visible to the async proxy (the tensor cores' operand reads)
__device__ __forceinline__ void fence_proxy_async() {
#if !defined(HYBRID_CUDA_EMU)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(HYBRID_CUDA_EMU)
#elif WG_HAS_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if defined(HYBRID_CUDA_EMU)
    emu_wgmma_commit();
#elif WG_HAS_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
    __trap();
#endif
}

// until at most N of this warpgroup's committed groups are in flight. d: the NACC accumulators
// the groups write, passed so that the compiler keeps them in place across the wait (the asm
// names them as read and written)
template <int N, int NACC = 128>
__device__ __forceinline__ void wgmma_wait(float d[NACC]) {
#if defined(HYBRID_CUDA_EMU)
    (void)d;
    emu_wgmma_wait(N);
#elif WG_HAS_WGMMA
#pragma unroll
    for (int i = 0; i < NACC; i++) asm volatile("" : "+f"(d[i])::"memory");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#pragma unroll
    for (int i = 0; i < NACC; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
    __trap();
#endif
}

#define WG_F4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define WG_F16(i) WG_F4(i), WG_F4((i) + 4), WG_F4((i) + 8), WG_F4((i) + 12)
#define WG_F64(i) WG_F16(i), WG_F16((i) + 16), WG_F16((i) + 32), WG_F16((i) + 48)

// d (64 x N, this thread's N / 2 values in the layout above) = A (64 x 16, desc_a; TRANS_A = 0
// K-major, 1 MN-major) B^T (B N x 16, desc_b; TRANS_B likewise) + d (scale_d = 1) or + 0
// (scale_d = 0), N = 128 or 256. Asynchronous: see the top of the file.
template <int N, int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64k16_bf16(float d[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 128 || N == 256, "the shapes built here: m64n128k16, m64n256k16");
#if defined(HYBRID_CUDA_EMU)
    emu_wgmma_issue(d, N, desc_a, desc_b, scale_d, TRANS_A, TRANS_B);
#elif WG_HAS_WGMMA
    if constexpr (N == 256)
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
            "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
            : WG_F64(0), WG_F64(64)
            : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
    else
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
            "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
            : WG_F64(0)
            : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
#else
    (void)d, (void)desc_a, (void)desc_b, (void)scale_d;
    __trap();
#endif
}

#undef WG_F4
#undef WG_F16
#undef WG_F64

#endif
