// Shared-memory barriers with phases (PTX mbarrier; expect_tx and try_wait.parity need sm_90, which
// every GPU build of this project targets), the building block of a kernel whose
// warps do different work: producer warps that fill a ring of stages with asynchronous copies and
// consumer warps that compute on them, each side waiting only for the stage it needs instead of a
// __syncthreads of the whole block at every step (docs/hybrid.md, "The expert GEMMs on wgmma":
// the MoE row GEMMs wait on latency). One PTX wrapper each on the GPU; under the CPU emulator
// (tests/cuda_emu/) a model of the same object.
//
// The object: 8 bytes of shared memory holding an expected arrival count, the arrivals still
// pending in the current phase, a transaction count (bytes an asynchronous copy still owes), and
// the phase's parity. A phase completes when its pending arrivals reach zero with no bytes owed;
// the barrier then starts the next phase (pending = expected again) and the parity flips.
//   mbar_init(bar, n)            one thread, before any use (then a __syncthreads): n arrivals a phase;
//   mbar_arrive(bar)             one arrival of the calling thread;
//   mbar_arrive_expect_tx(bar, b) one arrival, and b more bytes owed in this phase;
//   cp_async_mbar_arrive(bar)    one arrival once every cp.async this thread issued before it has
//                                landed (cp.async.mbarrier.arrive.noinc: the arrival is one of
//                                the n, so a stage filled by P threads' copies is a barrier of n = P);
//   mbar_wait(bar, parity)       returns once the phase of that parity has completed: the current
//                                phase's parity differs from `parity`. A fresh barrier is in phase 0,
//                                so mbar_wait(bar, 1) returns at once (a producer's first wait on a
//                                stage that nobody has used yet) and mbar_wait(bar, 0) waits for the
//                                first completion. A thread that walks a ring of S stages waits with
//                                parity (step / S) & 1 on its stage's "full" barrier and ((step / S) & 1) ^ 1
//                                on its "empty" one.
#ifndef HYBRID_KERNELS_MBARRIER_CUH
#define HYBRID_KERNELS_MBARRIER_CUH

#include "kernels/common.cuh"

#ifdef HYBRID_CUDA_EMU
// (tests/cuda_emu/cuda_emu.cpp)
void emu_mbar_init(uint64_t *bar, unsigned count);
void emu_mbar_arrive(uint64_t *bar, unsigned tx_bytes);
void emu_mbar_wait(uint64_t *bar, unsigned parity);
void emu_cp_async_mbar_arrive(uint64_t *bar);
#else
// bar's address in the shared window (what the mbarrier instructions take)
__device__ __forceinline__ uint32_t mbar_address(const uint64_t *bar) {
    return (uint32_t)__cvta_generic_to_shared(bar);
}
#endif

__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
#ifdef HYBRID_CUDA_EMU
    emu_mbar_init(bar, count);
#else
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar_address(bar)), "r"(count) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
#ifdef HYBRID_CUDA_EMU
    emu_mbar_arrive(bar, 0);
#else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mbar_address(bar)) : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, unsigned bytes) {
#ifdef HYBRID_CUDA_EMU
    emu_mbar_arrive(bar, bytes);
#else
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mbar_address(bar)), "r"(bytes)
                 : "memory");
#endif
}

__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *bar) {
#ifdef HYBRID_CUDA_EMU
    emu_cp_async_mbar_arrive(bar);
#else
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mbar_address(bar)) : "memory");
#endif
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
#ifdef HYBRID_CUDA_EMU
    emu_mbar_wait(bar, parity);
#else
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "MBAR_WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra MBAR_WAIT_%=;\n"
        "}\n" ::"r"(mbar_address(bar)),
        "r"(parity)
        : "memory");
#endif
}

#endif
