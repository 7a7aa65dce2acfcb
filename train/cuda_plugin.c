// The executable's side of the CUDA plugin (train/cuda_plugin.h): the host code's CUDA
// functions, each forwarding to the plugin, which is loaded at the first call. The plugin is
// HYBRID_CUDA_PLUGIN if set, else the library this build made ($(BUILD)/libhybrid_cuda.so, its
// absolute path compiled in as HYBRID_CUDA_PLUGIN_PATH). Linked into ./hybrid only (the GPU test
// programs link the kernels themselves); compiles to nothing without CUDA.
#ifdef HAVE_CUDA
#include <dlfcn.h>
#include <stdlib.h>

#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "train/cuda_plugin.h"

#ifndef HYBRID_CUDA_PLUGIN_PATH
#error "HYBRID_CUDA_PLUGIN_PATH: the Makefile passes the plugin's path"
#endif

static const CudaPlugin *plugin(void) {
    static const CudaPlugin *p;
    if (p) return p;
    const char *path = getenv("HYBRID_CUDA_PLUGIN");
    if (!path || !*path) path = HYBRID_CUDA_PLUGIN_PATH;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        die("--device cuda: cannot load the CUDA backend %s: %s (run `make` to build it, or set HYBRID_CUDA_PLUGIN "
            "to its path)",
            path, dlerror());
    const CudaPlugin *(*entry)(void);
    *(void **)&entry = dlsym(h, "hybrid_cuda_plugin");
    if (!entry) die("--device cuda: %s is not a hybrid.c CUDA plugin (no hybrid_cuda_plugin: %s)", path, dlerror());
    p = entry();
    if (p->version != CUDA_PLUGIN_VERSION)
        die("--device cuda: %s is a CUDA plugin of another build (table version %d, this program's %d): run `make`",
            path, p->version, CUDA_PLUGIN_VERSION);
    return p;
}

const Backend *backend_cuda(void) { return plugin()->backend(); }
int cuda_device_count(void) { return plugin()->device_count(); }
void cuda_select_device(int local_rank, int local_world) { plugin()->select_device(local_rank, local_world); }
void cuda_memory_stats(size_t *live, size_t *peak, size_t *device_used, size_t *device_total) {
    plugin()->memory_stats(live, peak, device_used, device_total);
}
int cuda_profile_enabled(void) { return plugin()->profile_enabled(); }
void cuda_profile_reset(void) { plugin()->profile_reset(); }
void cuda_profile_print(FILE *f, int steps) { plugin()->profile_print(f, steps); }
#ifdef HAVE_NCCL
Comm *comm_nccl_create(void) {
    if (!plugin()->comm_nccl_create) die("--device cuda: the CUDA plugin was built without NCCL: run `make`");
    return plugin()->comm_nccl_create();
}
#endif
#else
typedef int cuda_plugin_unused;  // (ISO C: a translation unit is not empty)
#endif
