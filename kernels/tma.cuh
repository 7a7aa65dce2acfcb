// Hopper's tensor memory accelerator (TMA, sm_90): one thread copies a whole box of a tensor from
// global to shared memory in one instruction, laid out in the 128-byte swizzle that wgmma reads
// (kernels/wgmma.cuh), and the copy's bytes count against an mbarrier's phase
// (kernels/mbarrier.cuh): the issuing thread announces them first with mbar_arrive_expect_tx,
// and the phase completes when every arrival has come and every byte has landed. The user: the
// warp-specialized MoE row GEMMs' producer (kernels/moe/grouped_gemm_ws.cuh), for the expert
// weights. One wrapper each on the GPU; under the CPU emulator (tests/cuda_emu/) a model.
//
// The map (CUtensorMap, 128 bytes, made on the host by tma_map_bf16 and passed to the kernel as a
// __grid_constant__ parameter): a bf16 tensor of rank 2 or 3, dims[0] the contiguous dimension,
// the byte strides of the others, and the box a copy moves: box[0] = 64 elements (128 bytes, one
// swizzle row) by box[1] by box[2]. A copy at coordinates (c0, c1, c2) (the box's first element,
// in elements) writes the box's rows (one for each (i1, i2), in that order, 128 bytes each) to
// shared memory at dst + 128 (i2 box[1] + i1), the 16-byte chunk j of a row r at chunk j ^ (r % 8)
// (the 128-byte swizzle: dst must be 1024-byte aligned); elements outside the tensor read as zero.
// So a box {64, R} is a K-major wgmma tile of R rows, and a box {64 n, 64 k} one column of 64 n of
// an MN-major tile (8 atoms of 8 k, 1024 bytes apart: SBO 1024).
#ifndef HYBRID_KERNELS_TMA_CUH
#define HYBRID_KERNELS_TMA_CUH

#include "kernels/mbarrier.cuh"

#ifdef HYBRID_CUDA_EMU
// (tests/cuda_emu/cuda_emu.cpp; CUtensorMap is cuda_emu.h's)
void emu_tma_encode(CUtensorMap *m, const void *base, int rank, const uint64_t *dims, const uint64_t *strides,
                    const uint32_t *box);
void emu_tma_load(void *dst, const CUtensorMap *m, const int *coords, int rank, uint64_t *bar);
#else
#include <cuda.h>
#include <cudaTypedefs.h>
#endif

// The map of a bf16 tensor at base: rank 2 or 3, dims[i] elements along dimension i (dims[0]
// contiguous), strides[i - 1] the bytes between consecutive indices of dimension i >= 1 (multiples
// of 16), box[i] the box's extent (box[0] = 64: the 128-byte swizzle's row; each at most 256);
// 128-byte swizzle, out-of-range elements zero. A map the driver refuses stops the run naming it.
static inline void tma_map_bf16(CUtensorMap *m, const void *base, int rank, const uint64_t *dims,
                                const uint64_t *strides, const uint32_t *box) {
#ifdef HYBRID_CUDA_EMU
    emu_tma_encode(m, base, rank, dims, strides, box);
#else
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault,
                                                    &q));
        if (q != cudaDriverEntryPointSuccess || !encode)
            die("TMA: the driver has no cuTensorMapEncodeTiled (query result %d)", (int)q);
    }
    const cuuint32_t one[3] = {1, 1, 1};
    const CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, (cuuint32_t)rank, const_cast<void *>(base), dims,
                              strides, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        die("TMA: cuTensorMapEncodeTiled error %d for a rank-%d bf16 tensor at %p (dims %llu x %llu x %llu, box %u x "
            "%u x %u)",
            (int)r, rank, base, (unsigned long long)dims[0], (unsigned long long)dims[1],
            (unsigned long long)(rank > 2 ? dims[2] : 1), box[0], box[1], rank > 2 ? box[2] : 1);
#endif
}

// the box of rank-2 map m at (c0, c1) into dst (shared, 1024-byte aligned); its bytes complete
// against bar's current phase (announced by the caller's mbar_arrive_expect_tx)
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *bar) {
#ifdef HYBRID_CUDA_EMU
    const int c[2] = {c0, c1};
    emu_tma_load(dst, m, c, 2, bar);
#else
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
        "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(mbar_address(bar))
        : "memory");
#endif
}

// the box of rank-3 map m at (c0, c1, c2) into dst (shared, 1024-byte aligned); its bytes complete
// against bar's current phase (announced by the caller's mbar_arrive_expect_tx)
__device__ __forceinline__ void tma_load_3d(void *dst, const CUtensorMap *m, int c0, int c1, int c2, uint64_t *bar) {
#ifdef HYBRID_CUDA_EMU
    const int c[3] = {c0, c1, c2};
    emu_tma_load(dst, m, c, 3, bar);
#else
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
        "[%5];\n" ::"r"((uint32_t)__cvta_generic_to_shared(dst)),
        "l"(reinterpret_cast<uint64_t>(m)), "r"(c0), "r"(c1), "r"(c2), "r"(mbar_address(bar))
        : "memory");
#endif
}

#endif
