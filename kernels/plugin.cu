// The CUDA plugin's one export (train/cuda_plugin.h): the table of the functions the host
// code calls, filled from this library's own definitions (kernels/backend_cuda.cu,
// kernels/device.cu, dist/comm_nccl.cu).
#include "kernels/common.cuh"

extern "C" {
#include "train/cuda_plugin.h"

int cuda_device_count(void);
void cuda_select_device(int local_rank, int local_world);
void cuda_memory_stats(size_t *live, size_t *peak, size_t *device_used, size_t *device_total);
int cuda_profile_enabled(void);
void cuda_profile_reset(void);
void cuda_profile_print(FILE *f, int steps);

const CudaPlugin *hybrid_cuda_plugin(void) {
    static const CudaPlugin t = {
        CUDA_PLUGIN_VERSION, backend_cuda,       cuda_device_count,  cuda_select_device, cuda_memory_stats,
        cuda_profile_enabled, cuda_profile_reset, cuda_profile_print,
#ifdef HAVE_NCCL
        comm_nccl_create,
#else
        NULL,
#endif
    };
    return &t;
}
}
