// The CUDA plugin's one export (train/cuda_plugin.h): the table of the functions the host
// code calls, filled from this library's own definitions (kernels/backend_cuda.cu,
// kernels/device.cu, dist/comm_nccl.cu).
#include "kernels/common.cuh"

#include "kernels/cuda_backend.h"

extern "C" {
#include "train/cuda_plugin.h"

#ifdef HYBRID_CUDA_EMU
// The CUDA emulator's plugin has no NCCL: its "device" memory is host memory, so ./hybrid's own
// MPI collectives (dist/comm_mpi.c, found in the executable) stand in, with bf16 elements
static Comm *comm_emu_create(void) { return comm_mpi_create(2); }
#endif

const CudaPlugin *hybrid_cuda_plugin(void) {
    static const CudaPlugin t = {
        CUDA_PLUGIN_VERSION, backend_cuda,       cuda_device_count,  cuda_select_device, cuda_memory_stats,
        cuda_profile_enabled, cuda_profile_reset, cuda_profile_print,
#if defined(HAVE_NCCL)
        comm_nccl_create,
#elif defined(HYBRID_CUDA_EMU)
        comm_emu_create,
#else
        NULL,
#endif
    };
    return &t;
}
}
