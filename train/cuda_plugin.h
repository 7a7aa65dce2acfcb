// The CUDA backend as a plugin (docs/cuda.md, "The CUDA plugin"). ./hybrid does not link the
// CUDA libraries: loading them costs every start ~0.35 s (libcublasLt's static initializers),
// CPU commands included. The kernels, the backend and NCCL's communicator are a shared library
// ($(BUILD)/libhybrid_cuda.so) that train/cuda_plugin.c loads the first time a CUDA function
// below is called, i.e. for --device cuda. The plugin exports this one table (kernels/
// plugin.cu), not the functions by name, so that the executable's forwarding functions of the
// same names never stand in for its own. The GPU test programs link the kernels directly.
#ifndef HYBRID_TRAIN_CUDA_PLUGIN_H
#define HYBRID_TRAIN_CUDA_PLUGIN_H

#include <stddef.h>
#include <stdio.h>

#include "dist/comm.h"
#include "model/backend.h"

#define CUDA_PLUGIN_VERSION 1  // raised whenever the table changes: a stale plugin is refused

typedef struct {
    int version;  // CUDA_PLUGIN_VERSION of the build that made the plugin
    const Backend *(*backend)(void);
    int (*device_count)(void);
    void (*select_device)(int local_rank, int local_world);
    void (*memory_stats)(size_t *live, size_t *peak, size_t *device_used, size_t *device_total);
    int (*profile_enabled)(void);
    void (*profile_reset)(void);
    void (*profile_print)(FILE *f, int steps);
    Comm *(*comm_nccl_create)(void);  // NULL in a build without NCCL
} CudaPlugin;

#endif
