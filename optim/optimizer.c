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

// A routed tensor split over the expert-parallel group (docs/hybrid.md, "Expert
// parallelism"): each rank holds and updates only its experts' part, from gradients
// reduced over the ranks that hold the same experts (dist/grad_sync.c).
static int expert_local(const ParamTable *t, int i) { return t->items[i].local_numel != t->items[i].numel; }

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
        // a sharded expert tensor: every rank updates its own experts (expert_local)
        if (optimizer_uses_muon(&o->cfg, &t->items[i]) && !expert_local(t, i)) order[n++] = i;
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
    o->n = model->table.local_total;
    if (zero && world > 1 && params_sharded(&model->table))
        die("zero = true with expert_parallel = %d is not supported: the expert weights are sharded over the "
            "expert-parallel group, and ZeRO-1's windows assume every rank holds the same tensors",
            model->table.ep_size);
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
        if (!optimizer_uses_muon(&o->cfg, p) || (world > 1 && o->owner[i] >= 0 && o->owner[i] != rank)) continue;
        size_t need = muon_workspace_size(p->shape[0] / p->blocks, p->shape[1]);  // per block: the same sharded
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

// The part [*a, *b) (local layout) of tensor i this rank owns for checkpoints and updates:
// ZeRO-1 its window; a Muon tensor its owner; a sharded expert tensor every rank holding it
// when updating and the first data-parallel replica (ranks 0 .. ep_size-1, the first EP
// group) when gathering; otherwise (every rank holds the same values) rank 0 when gathering
// (gather = 1) and every rank when updating.
static int owned_range(const Optimizer *o, const Model *model, int i, int gather, size_t *a, size_t *b) {
    const ParamInfo *p = &model->table.items[i];
    *a = p->local_offset;
    *b = p->local_offset + p->local_numel;
    if (o->world == 1) return 1;
    if (o->owner[i] >= 0) return o->owner[i] == o->rank;
    if (expert_local(&model->table, i)) return gather ? o->rank < model->table.ep_size : 1;
    if (o->zero) {
        if (*a < o->lo) *a = o->lo;
        if (*b > o->hi) *b = o->hi;
        return *a < *b;
    }
    return gather ? o->rank == 0 : 1;
}

// Zeros what this rank does not own of a host copy of the local buffer (checkpoint gathers
// sum the ranks' copies).
static void zero_unowned(const Optimizer *o, const Model *model, float *host) {
    for (int i = 0; i < model->table.count; i++) {
        const ParamInfo *p = &model->table.items[i];
        size_t a, b, end = p->local_offset + p->local_numel;
        if (!owned_range(o, model, i, 1, &a, &b)) a = b = end;
        memset(host + p->local_offset, 0, (a - p->local_offset) * sizeof(float));
        memset(host + b, 0, (end - b) * sizeof(float));
    }
}

// A host array of the local layout for the full-layout array `full` (itself unless the
// experts are sharded), and back (local_done: copies a sharded local array into full).
static float *local_view(const Model *model, float *full) {
    return params_sharded(&model->table) ? params_host_array(&model->table, 1) : full;
}
static void local_done(const Model *model, float *local, float *full) {
    if (local == full) return;
    params_local_to_full(&model->table, local, full);
    free(local);
}

// master = the current parameters (widened exactly to fp32), through the host.
static void master_from_params(Optimizer *o, const Model *model) {
    float *host = xcalloc(model_buffer_elems(model), sizeof(float));
    model->be->download(host, model->params, model->table.local_total);
    model->be->copy_from_host(o->master, host + o->lo, (o->hi - o->lo) * sizeof(float));
    free(host);
    o->master_ready = 1;
}

void optimizer_get_weights(const Optimizer *o, const Model *model, float *host) {
    float *local = local_view(model, host);
    model->be->download(local, model->params, model->table.local_total);
    size_t end = o->hi < o->n ? o->hi : o->n;
    if (o->master && o->master_ready && end > o->lo)  // the window's exact fp32 weights
        model->be->copy_to_host(local + o->lo, o->master, (end - o->lo) * sizeof(float));
    zero_unowned(o, model, local);  // (a world of one owns everything)
    local_done(model, local, host);
}

void optimizer_set_weights(Optimizer *o, Model *model, const float *host) {
    model_set_params(model, host);
    if (o->master) {
        size_t end = o->hi < o->n ? o->hi : o->n;
        const float *local = host;
        float *tmp = NULL;
        if (params_sharded(&model->table)) {
            local = tmp = params_host_array(&model->table, 1);
            params_full_to_local(&model->table, host, tmp);
        }
        if (end > o->lo) model->be->copy_from_host(o->master, local + o->lo, (end - o->lo) * sizeof(float));
        free(tmp);
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

double grad_global_norm(const Model *model) {
    return sqrt(model->be->core->sum_squares(model->grads, model->table.local_total));
}

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
        const real *grad = o->grad_shard ? backend_grad_offset(be, o->grad_shard, a - o->lo)
                                       : backend_grad_offset(be, model->grads, a);
        float *master = o->master ? o->master + (a - o->lo) : NULL;
        if (optimizer_uses_muon(c, p))
            be->optim->muon_update(param, grad, o->m + (a - o->lo), master, params_local_rows(p), p->shape[1],
                                   params_local_blocks(p),
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
                                   o->grad_shard ? o->grad_shard : backend_grad_offset(be, model->grads, o->lo), o->m, o->v,
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
    float *lm = local_view(model, m), *lv = local_view(model, v);
    memset(lm, 0, o->n * sizeof(float));
    memset(lv, 0, o->n * sizeof(float));
    size_t end = o->hi < o->n ? o->hi : o->n;
    if (end > o->lo) {  // the window's moments land at their place in the whole buffer
        model->be->copy_to_host(lm + o->lo, o->m, (end - o->lo) * sizeof(float));
        model->be->copy_to_host(lv + o->lo, o->v, (end - o->lo) * sizeof(float));
    }
    zero_unowned(o, model, lm);
    zero_unowned(o, model, lv);
    local_done(model, lm, m);
    local_done(model, lv, v);
}

void optimizer_set_state(Optimizer *o, const Model *model, const float *m, const float *v, int t) {
    size_t end = o->hi < o->n ? o->hi : o->n;
    const float *lm = m, *lv = v;
    float *tmp = NULL;
    if (params_sharded(&model->table)) {
        tmp = xcalloc(2 * model->table.local_total, sizeof(float));
        params_full_to_local(&model->table, m, tmp);
        params_full_to_local(&model->table, v, tmp + model->table.local_total);
        lm = tmp;
        lv = tmp + model->table.local_total;
    }
    if (end > o->lo) {
        model->be->copy_from_host(o->m, lm + o->lo, (end - o->lo) * sizeof(float));
        model->be->copy_from_host(o->v, lv + o->lo, (end - o->lo) * sizeof(float));
    }
    free(tmp);
    o->t = t;
}
