// Tensor-core building blocks shared by the kernel families (kernels/core/attention.cu,
// kernels/delta_rule/): the warp-wide bf16 MMA, shared-memory matrix loads and asynchronous
// copies, each a one-line PTX wrapper on the GPU and, under the CPU emulator
// (tests/cuda_emu/), an exchange through the warp that computes the same thing from the
// fragment layouts below (docs/cuda.md, "The CPU emulator").
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with bf16 inputs and fp32 accumulators;
// g = lane / 4, t = lane % 4; each 32-bit register holds two bf16, the lower column first):
//   A (16x16, row-major): a0 (row g, cols 2t, 2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..)
//   B (16x8, k x n):      b0 (k 2t, 2t+1; n g),       b1 (k 2t+8, 2t+9; n g)
//   C (16x8, fp32):       c0, c1 (row g, cols 2t, 2t+1), c2, c3 (g+8, 2t, 2t+1)
// so the C fragments of two adjacent 8-column tiles are the A fragment of one 16-wide k-step.
// ldmatrix.x4: lanes 8m..8m+7 give the row addresses of 8x8 matrix m (16 bytes a row);
// lane l receives register m = matrix m's row l/4, columns 2(l%4), 2(l%4)+1 (.trans: the
// transposed matrix, i.e. rows 2(l%4), 2(l%4)+1 of column l/4).
#ifndef HYBRID_KERNELS_MMA_CUH
#define HYBRID_KERNELS_MMA_CUH

#include "kernels/common.cuh"

#ifdef HYBRID_CUDA_EMU
// (tests/cuda_emu/cuda_emu.cpp)
void emu_mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);
void emu_ldmatrix_x4(uint32_t r[4], const void *row_address, int trans);
#endif

// c (16x8 fp32) += a (16x16 bf16) b (16x8 bf16), one warp
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#ifdef HYBRID_CUDA_EMU
    emu_mma16816(c, a, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// four 8x8 bf16 matrices from shared memory, one warp (p: this lane's row address)
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const bf16 *p) {
#ifdef HYBRID_CUDA_EMU
    emu_ldmatrix_x4(r, p, 0);
#else
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// the same, each matrix transposed
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const bf16 *p) {
#ifdef HYBRID_CUDA_EMU
    emu_ldmatrix_x4(r, p, 1);
#else
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// 16 bytes global -> shared without a register round trip (valid == false: zero-fill,
// nothing read); completes at the matching cp_async_wait. (Emulated: lands at that wait, the
// destination NaN-filled until then: tests/cuda_emu/cuda_emu.cpp.)
__device__ __forceinline__ void cp_async16(bf16 *smem, const bf16 *gmem, bool valid) {
#ifdef HYBRID_CUDA_EMU
    emu_cp_async16(smem, gmem, valid);
#else
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef HYBRID_CUDA_EMU
    emu_cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// wait until at most N committed groups are still in flight
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef HYBRID_CUDA_EMU
    emu_cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// two floats as the bf16 pair of one fragment register (lo = the lower column)
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
#ifdef HYBRID_CUDA_EMU
    uint32_t u;
    memcpy(&u, &h, 4);  // (the host compiler's aliasing rules)
    return u;
#else
    return *reinterpret_cast<uint32_t *>(&h);
#endif
}

#endif
