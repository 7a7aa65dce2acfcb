// CUDA device discovery. The CUDA backend's kernels join this folder, one file per
// op family, with the same contracts as the CPU reference (model/backend.h).
#ifdef HYBRID_CUDA_EMU
#include "tests/cuda_emu/cuda_emu.h"
#else
#include <cuda_runtime.h>
#endif
#include <stdio.h>

extern "C" int cuda_device_count(void) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) return 0;
    if (err != cudaSuccess) {
        fprintf(stderr, "hybrid: error: cudaGetDeviceCount failed: %s\n", cudaGetErrorString(err));
        return 0;
    }
    return n;
}

// One process per GPU: rank `local_rank` of this node takes GPU local_rank (before the
// backend is created). Dies if there are fewer visible GPUs than ranks on the node.
extern "C" void die(const char *fmt, ...);
extern "C" void cuda_select_device(int local_rank, int local_world) {
    int n = cuda_device_count();
    if (local_rank >= n)
        die("%d ranks on this node but only %d CUDA device(s) visible: start at most %d ranks per node", local_world, n, n);
    cudaError_t err = cudaSetDevice(local_rank);
    if (err != cudaSuccess) die("cudaSetDevice(%d) failed: %s", local_rank, cudaGetErrorString(err));
}
