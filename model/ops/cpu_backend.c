// The CPU reference backend: host memory plus every family's CPU sub-table
// (model/ops/<family>/table.c).
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"

static void *cpu_alloc(size_t bytes) { return xcalloc(bytes, 1); }  // zero-filled
static void cpu_free(void *p) { free(p); }
static void cpu_zero(real *p, size_t n) { memset(p, 0, n * sizeof(real)); }

static void cpu_upload(real *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (real)src[i];
}

static void cpu_download(float *dst, const real *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void cpu_upload_tokens(int *dst, const int *src, size_t n) { memcpy(dst, src, n * sizeof(int)); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(void) {}

const Backend *backend_cpu(void) {
    static Backend b;
    if (b.name) return &b;
    b = (Backend){
        .elem_size = sizeof(real),
        .stat_size = sizeof(real),
        .grad_size = sizeof(real),
        .keeps_master = 0,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .zero = cpu_zero,
        .upload = cpu_upload,
        .download = cpu_download,
        .upload_tokens = cpu_upload_tokens,
        .copy_to_host = cpu_copy,
        .copy_from_host = cpu_copy,
        .synchronize = cpu_synchronize,
        .core = cpu_core_ops(),
        .norm_glu = cpu_norm_glu_ops(),
        .delta_rule = cpu_delta_rule_ops(),
        .mla = cpu_mla_ops(),
        .moe = cpu_moe_ops(),
        .attnres = cpu_attnres_ops(),
        .optim = cpu_optim_ops(),
        .name = "cpu-" REAL_NAME,
    };
    return &b;
}
