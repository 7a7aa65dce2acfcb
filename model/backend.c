// The check that a backend has the op families a model needs (backend.h).
#include "model/backend.h"

#include "base/util.h"

void backend_require(const Backend *be, unsigned needs, const char *who) {
    static const struct {
        unsigned bit;
        const char *name;
        size_t offset;  // of the family's pointer in Backend
    } families[] = {
        {FAMILY_CORE, "core (model/ops/core)", offsetof(Backend, core)},
        {FAMILY_NORM_GLU, "norms-and-GLU (RMSNorm, SwiGLU/SiTU; model/ops/norm_glu)", offsetof(Backend, norm_glu)},
        {FAMILY_DELTA_RULE, "delta-rule (KDA, GDN, DeltaNet, linear attention; model/ops/delta_rule)",
         offsetof(Backend, delta_rule)},
        {FAMILY_MLA, "MLA (model/ops/mla)", offsetof(Backend, mla)},
        {FAMILY_MOE, "MoE (model/ops/moe)", offsetof(Backend, moe)},
        {FAMILY_ATTNRES, "Block AttnRes (model/ops/attnres)", offsetof(Backend, attnres)},
        {FAMILY_OPTIM, "optimizer (model/ops/optim)", offsetof(Backend, optim)},
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        if (!(needs & families[i].bit)) continue;
        const void *table = *(const void *const *)((const char *)be + families[i].offset);
        if (!table)
            die("backend %s has no %s op family yet, which %s needs (--device cpu runs every config)", be->name,
                families[i].name, who);
    }
}

void backend_grad_download(const Backend *be, float *dst, const real *src, size_t n) {
    if (be->grad_size == be->elem_size)
        be->download(dst, src, n);
    else if (be->grad_size == sizeof(float))
        be->copy_to_host(dst, src, n * sizeof(float));
    else
        die("backend %s: %zu-byte gradients of %zu-byte elements have no download", be->name, be->grad_size,
            be->elem_size);
}
