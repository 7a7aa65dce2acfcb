// Expert-parallel sharding of the parameter table (params.h; docs/hybrid.md, "Expert
// parallelism"): the routed-expert tensors keep their full shape in the table, and a rank's
// buffer holds only the rows of its own experts. Every other tensor is whole on every rank.
#include <string.h>

#include "params.h"
#include "base/util.h"

void params_shard(ParamTable *t, int ep_size, int ep_rank) {
    if (ep_size < 1 || ep_rank < 0 || ep_rank >= ep_size)
        die("params_shard: EP rank %d of an expert-parallel group of %d ranks", ep_rank, ep_size);
    t->ep_size = ep_size;
    t->ep_rank = ep_rank;
    t->local_total = 0;
    for (int i = 0; i < t->count; i++) {
        ParamInfo *p = &t->items[i];
        p->local_numel = p->numel;
        p->local_lo = 0;
        if (p->routed && ep_size > 1) {
            if (p->shape[0] % ep_size)
                die("params_shard: %s has %d rows, which %d expert-parallel ranks cannot split", p->name, p->shape[0],
                    ep_size);
            p->local_numel = p->numel / (size_t)ep_size;
            p->local_lo = (size_t)ep_rank * p->local_numel;
        }
        p->local_offset = t->local_total = params_align_up(t->local_total);
        t->local_total += p->local_numel;
    }
}

float *params_host_array(const ParamTable *t, int local) {
    return xcalloc(local ? t->local_total : t->total, sizeof(float));
}

int params_sharded(const ParamTable *t) { return t->local_total != t->total; }

int params_local_rows(const ParamInfo *p) { return (int)((size_t)p->shape[0] * p->local_numel / p->numel); }

int params_local_blocks(const ParamInfo *p) { return (int)((size_t)p->blocks * p->local_numel / p->numel); }

void params_full_to_local(const ParamTable *t, const float *full, float *local) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        memcpy(local + p->local_offset, full + p->offset + p->local_lo, p->local_numel * sizeof(float));
    }
}

void params_local_to_full(const ParamTable *t, const float *local, float *full) {
    memset(full, 0, t->total * sizeof(float));
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        memcpy(full + p->offset + p->local_lo, local + p->local_offset, p->local_numel * sizeof(float));
    }
}

size_t params_local_routed(const ParamTable *t) {
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->items[i].routed) n += t->items[i].local_numel;
    return n;
}
