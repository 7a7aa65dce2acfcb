// CUDA device discovery. The CUDA backend's kernels join this folder, one file per
// op family, with the same contracts as the CPU reference (model/backend.h).
#include <cuda_runtime.h>
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
