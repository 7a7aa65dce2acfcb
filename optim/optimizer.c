#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

int optimizer_uses_muon(const OptimConfig *c, const ParamInfo *p) {
    return c->optimizer == OPT_MUON && p->group == GROUP_MATRIX && p->ndim == 2;
}

MuonScaleRule optimizer_muon_rule(const OptimConfig *c) {
    return c->muon_scale == MUON_SCALE_KEY_KELLER ? MUON_SCALE_KELLER : MUON_SCALE_MOONLIGHT;
}

double group_peak_lr(const OptimConfig *c, ParamGroup g) {
    double v = 0;
    switch (g) {
    case GROUP_MATRIX: v = c->lr_matrix; break;
    case GROUP_EMBED: v = c->lr_embed; break;
    case GROUP_NORM: v = c->lr_norm; break;
    case GROUP_BIAS: v = c->lr_bias; break;
    case GROUP_ROUTER: v = c->lr_router; break;
    case GROUP_GATE: v = c->lr_gate; break;
    default: break;
    }
    return v > 0 ? v : c->lr;
}

double group_weight_decay(const OptimConfig *c, ParamGroup g) {
    double v = -1;
    switch (g) {
    case GROUP_MATRIX: v = c->wd_matrix; break;
    case GROUP_EMBED: v = c->wd_embed; break;
    case GROUP_NORM: v = c->wd_norm; break;
    case GROUP_BIAS: v = c->wd_bias; break;
    case GROUP_ROUTER: v = c->wd_router; break;
    case GROUP_GATE: v = c->wd_gate; break;
    default: break;
    }
    if (v >= 0) return v;
    return param_group_decays(g) ? c->weight_decay : 0.0;
}

// Newton-Schulz cost of a Muon tensor (FLOPs up to a constant): per block 3 products of
// its rows x cols with the smaller side.
static double muon_cost(const ParamInfo *p) {
    double r = (double)p->shape[0] / p->blocks, c = p->shape[1];
    return p->blocks * r * c * (r < c ? r : c);
}

// Whole-matrix ownership: each Muon tensor to the least loaded rank, largest first; ties
// go to the lower rank, so every rank computes the same assignment.
static void assign_muon_owners(Optimizer *o, const Model *model) {
    const ParamTable *t = &model->table;
    o->owner = xmalloc(sizeof(int) * (size_t)(t->count ? t->count : 1));
    double *load = xcalloc((size_t)o->world, sizeof(double));
    int *order = xmalloc(sizeof(int) * (size_t)(t->count ? t->count : 1)), n = 0;
    for (int i = 0; i < t->count; i++) {
        o->owner[i] = -1;
        if (optimizer_uses_muon(&o->cfg, &t->items[i])) order[n++] = i;
    }
    for (int a = 1; a < n; a++)  // insertion sort by cost, descending, stable
        for (int b = a; b > 0 && muon_cost(&t->items[order[b]]) > muon_cost(&t->items[order[b - 1]]); b--) {
            int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int r = 1; r < o->world; r++)
            if (load[r] < load[best]) best = r;
        o->owner[order[k]] = best;
        load[best] += muon_cost(&t->items[order[k]]);
    }
    free(load);
    free(order);
}

void optimizer_create_sharded(Optimizer *o, const Model *model, const OptimConfig *oc, int rank, int world, int zero) {
    memset(o, 0, sizeof *o);
    o->cfg = *oc;
    const Backend *be = model->be;
    o->n = model->table.total;
    o->rank = rank;
    o->world = world;
    o->zero = zero && world > 1;
    o->lo = 0;
    o->hi = o->n;
    if (o->zero) {
        size_t elems = model_buffer_elems(model);
        if (elems % (size_t)world) die("ZeRO-1: the parameter buffer (%zu) is not padded to %d ranks", elems, world);
        size_t shard = elems / (size_t)world;
        o->lo = (size_t)rank * shard;
        o->hi = o->lo + shard;
    }
    size_t window = o->hi - o->lo;
    o->m = be->alloc(window * sizeof(float));
    o->v = be->alloc(window * sizeof(float));
    assign_muon_owners(o, model);
    size_t work = 0;
    for (int i = 0; i < model->table.count; i++) {
        const ParamInfo *p = &model->table.items[i];
        if (!optimizer_uses_muon(&o->cfg, p) || (world > 1 && o->owner[i] != rank)) continue;
        size_t need = muon_workspace_size(p->shape[0] / p->blocks, p->shape[1]);
        if (need > work) work = need;
    }
    if (work) o->work = be->alloc(work * be->elem_size);
    if (be->keeps_master) o->master = be->alloc(window * sizeof(float));
}

void optimizer_create(Optimizer *o, const Model *model, const OptimConfig *oc) {
    optimizer_create_sharded(o, model, oc, 0, 1, 0);
}

float *optimizer_master_of(const Optimizer *o, size_t offset, size_t count) {
    if (!o->master || offset >= o->hi || offset + count <= o->lo) return NULL;
    if (offset < o->lo || offset + count > o->hi)
        die("ZeRO-1: a tensor of %zu elements at %zu straddles this rank's window [%zu, %zu) of master weights", count,
            offset, o->lo, o->hi);
    return o->master + (offset - o->lo);
}

// The part [*a, *b) of tensor i this rank owns for checkpoints and updates: ZeRO-1 its
// window; a Muon tensor its owner; otherwise (every rank holds the same values) rank 0
// when gathering (gather = 1) and every rank when updating.
static int owned_range(const Optimizer *o, const Model *model, int i, int gather, size_t *a, size_t *b) {
    const ParamInfo *p = &model->table.items[i];
    *a = p->offset;
    *b = p->offset + p->numel;
    if (o->world == 1) return 1;
    if (o->owner[i] >= 0) return o->owner[i] == o->rank;
    if (o->zero) {
        if (*a < o->lo) *a = o->lo;
        if (*b > o->hi) *b = o->hi;
        return *a < *b;
    }
    return gather ? o->rank == 0 : 1;
}

// Zeros what this rank does not own of a whole-buffer host copy (checkpoint gathers sum
// the ranks' copies).
static void zero_unowned(const Optimizer *o, const Model *model, float *host) {
    for (int i = 0; i < model->table.count; i++) {
        const ParamInfo *p = &model->table.items[i];
        size_t a, b, end = p->offset + p->numel;
        if (!owned_range(o, model, i, 1, &a, &b)) a = b = end;
        memset(host + p->offset, 0, (a - p->offset) * sizeof(float));
        memset(host + b, 0, (end - b) * sizeof(float));
    }
}

// master = the current parameters (widened exactly to fp32), through the host.
static void master_from_params(Optimizer *o, const Model *model) {
    float *host = xmalloc(sizeof(float) * model_buffer_elems(model));
    memset(host, 0, sizeof(float) * model_buffer_elems(model));
    model_get_params(model, host);
    model->be->copy_from_host(o->master, host + o->lo, (o->hi - o->lo) * sizeof(float));
    free(host);
    o->master_ready = 1;
}

void optimizer_get_weights(const Optimizer *o, const Model *model, float *host) {
    model_get_params(model, host);
    size_t end = o->hi < o->n ? o->hi : o->n;
    if (o->master && o->master_ready && end > o->lo)  // the window's exact fp32 weights
        model->be->copy_to_host(host + o->lo, o->master, (end - o->lo) * sizeof(float));
    zero_unowned(o, model, host);  // (a world of one owns everything)
}

void optimizer_set_weights(Optimizer *o, Model *model, const float *host) {
    model_set_params(model, host);
    if (o->master) {
        size_t end = o->hi < o->n ? o->hi : o->n;
        if (end > o->lo) model->be->copy_from_host(o->master, host + o->lo, (end - o->lo) * sizeof(float));
        o->master_ready = 1;
    }
}

void optimizer_destroy(Optimizer *o, const Model *model) {
    model->be->free(o->m);
    model->be->free(o->v);
    if (o->work) model->be->free(o->work);
    if (o->master) model->be->free(o->master);
    free(o->owner);
    memset(o, 0, sizeof *o);
}

double grad_global_norm(const Model *model) { return sqrt(model->be->core->sum_squares(model->grads, model->table.total)); }

void optimizer_step(Optimizer *o, Model *model, double lr, double grad_norm) {
    const OptimConfig *c = &o->cfg;
    const Backend *be = model->be;
    double scale = 1.0;
    if (c->grad_clip > 0 && grad_norm > c->grad_clip) scale = c->grad_clip / grad_norm;
    o->t++;
    if (o->master && !o->master_ready) master_from_params(o, model);
    const double schedule = lr / c->lr;  // where the schedule is, as a fraction of the peak
    // AdamW tensors go in one adamw_update_multi call where the backend has it
    const int multi = be->optim->adamw_update_multi != NULL;
    int nseg = 0;
    size_t *seg_off = NULL, *seg_len = NULL;
    real *seg_lr = NULL, *seg_wd = NULL;
    if (multi) {
        size_t k = (size_t)(model->table.count > 0 ? model->table.count : 1);
        seg_off = xmalloc(k * sizeof *seg_off);
        seg_len = xmalloc(k * sizeof *seg_len);
        seg_lr = xmalloc(k * sizeof *seg_lr);
        seg_wd = xmalloc(k * sizeof *seg_wd);
    }
    for (int i = 0; i < model->table.count; i++) {
        const ParamInfo *p = &model->table.items[i];
        if (p->group == GROUP_STATE) continue;  // not trained (the MoE bias: model_moe_step)
        size_t a, b;  // the elements this rank updates
        if (!owned_range(o, model, i, 0, &a, &b)) continue;
        // hyperparameters in the build's precision (optim.h): exact doubles in the double build
        real group_lr = (real)(group_peak_lr(c, p->group) * schedule);
        real wd = (real)group_weight_decay(c, p->group);
        real *param = backend_offset(be, model->params, a);
        const real *grad = o->grad_shard ? backend_offset(be, o->grad_shard, a - o->lo) : backend_offset(be, model->grads, a);
        float *master = o->master ? o->master + (a - o->lo) : NULL;
        if (optimizer_uses_muon(c, p))
            be->optim->muon_update(param, grad, o->m + (a - o->lo), master, p->shape[0], p->shape[1], p->blocks,
                            (real)c->muon_momentum, c->muon_nesterov, c->muon_ns_steps,
                            optimizer_muon_rule(c), group_lr, wd, (real)scale, o->work);
        else if (multi) {  // offsets into the window: every array below is based at lo
            seg_off[nseg] = a - o->lo;
            seg_len[nseg] = b - a;
            seg_lr[nseg] = group_lr;
            seg_wd[nseg] = wd;
            nseg++;
        } else
            be->optim->adamw_update(param, grad, o->m + (a - o->lo), o->v + (a - o->lo), master, b - a, group_lr,
                             (real)c->beta1, (real)c->beta2, (real)c->adam_eps, wd, (real)scale, o->t);
    }
    if (multi) {
        if (nseg)
            be->optim->adamw_update_multi(backend_offset(be, model->params, o->lo),
                                   o->grad_shard ? o->grad_shard : backend_offset(be, model->grads, o->lo), o->m, o->v,
                                   o->master, nseg, seg_off, seg_len, seg_lr, seg_wd, (real)c->beta1, (real)c->beta2,
                                   (real)c->adam_eps, (real)scale, o->t);
        free(seg_off);
        free(seg_len);
        free(seg_lr);
        free(seg_wd);
    }
}

// The moments are fp32 whatever the backend's element type: copy raw bytes.
void optimizer_get_state(const Optimizer *o, const Model *model, float *m, float *v) {
    memset(m, 0, o->n * sizeof(float));
    memset(v, 0, o->n * sizeof(float));
    size_t end = o->hi < o->n ? o->hi : o->n;
    if (end > o->lo) {  // the window's moments land at their place in the whole buffer
        model->be->copy_to_host(m + o->lo, o->m, (end - o->lo) * sizeof(float));
        model->be->copy_to_host(v + o->lo, o->v, (end - o->lo) * sizeof(float));
    }
    zero_unowned(o, model, m);
    zero_unowned(o, model, v);
}

void optimizer_set_state(Optimizer *o, const Model *model, const float *m, const float *v, int t) {
    size_t end = o->hi < o->n ? o->hi : o->n;
    if (end > o->lo) {
        model->be->copy_from_host(o->m, m + o->lo, (end - o->lo) * sizeof(float));
        model->be->copy_from_host(o->v, v + o->lo, (end - o->lo) * sizeof(float));
    }
    o->t = t;
}
