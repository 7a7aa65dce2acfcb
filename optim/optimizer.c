#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/util.h"
#include "optim/muon.h"

int optimizer_uses_muon(const Config *c, const ParamInfo *p) {
    return c->optimizer == OPT_MUON && p->group == GROUP_MATRIX && p->ndim == 2;
}

double group_peak_lr(const Config *c, ParamGroup g) {
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

double group_weight_decay(const Config *c, ParamGroup g) {
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

void optimizer_create(Optimizer *o, const Model *model) {
    memset(o, 0, sizeof *o);
    const Backend *be = model->be;
    o->n = model->table.total;
    o->m = be->alloc(o->n * sizeof(float));
    o->v = be->alloc(o->n * sizeof(float));
    size_t work = 0;
    for (int i = 0; i < model->table.count; i++) {
        const ParamInfo *p = &model->table.items[i];
        if (!optimizer_uses_muon(&model->cfg, p)) continue;
        size_t need = muon_workspace_size(p->shape[0] / p->blocks, p->shape[1]);
        if (need > work) work = need;
    }
    if (work) o->work = be->alloc(work * be->elem_size);
    if (be->keeps_master) o->master = be->alloc(o->n * sizeof(float));
}

// master = the current parameters (widened exactly to fp32), through the host.
static void master_from_params(Optimizer *o, const Model *model) {
    float *host = xmalloc(sizeof(float) * o->n);
    model_get_params(model, host);
    model->be->copy_from_host(o->master, host, o->n * sizeof(float));
    free(host);
    o->master_ready = 1;
}

void optimizer_get_weights(const Optimizer *o, const Model *model, float *host) {
    if (o->master && o->master_ready) model->be->copy_to_host(host, o->master, o->n * sizeof(float));
    else model_get_params(model, host);
}

void optimizer_set_weights(Optimizer *o, Model *model, const float *host) {
    model_set_params(model, host);
    if (o->master) {
        model->be->copy_from_host(o->master, host, o->n * sizeof(float));
        o->master_ready = 1;
    }
}

void optimizer_destroy(Optimizer *o, const Model *model) {
    model->be->free(o->m);
    model->be->free(o->v);
    if (o->work) model->be->free(o->work);
    if (o->master) model->be->free(o->master);
    memset(o, 0, sizeof *o);
}

double grad_global_norm(const Model *model) { return sqrt(model->be->sum_squares(model->grads, model->table.total)); }

void optimizer_step(Optimizer *o, Model *model, double lr, double grad_norm) {
    const Config *c = &model->cfg;
    const Backend *be = model->be;
    double scale = 1.0;
    if (c->grad_clip > 0 && grad_norm > c->grad_clip) scale = c->grad_clip / grad_norm;
    o->t++;
    if (o->master && !o->master_ready) master_from_params(o, model);
    const double schedule = lr / c->lr;  // where the schedule is, as a fraction of the peak
    // AdamW tensors go in one adamw_update_multi call where the backend has it
    const int multi = be->adamw_update_multi != NULL;
    int nseg = 0;
    size_t *seg_off = NULL, *seg_len = NULL;
    float *seg_lr = NULL, *seg_wd = NULL;
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
        float group_lr = (float)(group_peak_lr(c, p->group) * schedule);
        float wd = (float)group_weight_decay(c, p->group);
        real *param = backend_offset(be, model->params, p->offset);
        const real *grad = backend_offset(be, model->grads, p->offset);
        float *master = o->master ? o->master + p->offset : NULL;
        if (optimizer_uses_muon(c, p))
            be->muon_update(param, grad, o->m + p->offset, master, p->shape[0], p->shape[1], p->blocks,
                            (float)c->muon_momentum, c->muon_nesterov, c->muon_ns_steps,
                            c->muon_scale == MUON_SCALE_KEY_KELLER ? MUON_SCALE_KELLER : MUON_SCALE_MOONLIGHT, group_lr,
                            wd, (float)scale, o->work);
        else if (multi) {
            seg_off[nseg] = p->offset;
            seg_len[nseg] = p->numel;
            seg_lr[nseg] = group_lr;
            seg_wd[nseg] = wd;
            nseg++;
        } else
            be->adamw_update(param, grad, o->m + p->offset, o->v + p->offset, master, p->numel, group_lr,
                             (float)c->beta1, (float)c->beta2, (float)c->adam_eps, wd, (float)scale, o->t);
    }
    if (multi) {
        if (nseg)
            be->adamw_update_multi(model->params, model->grads, o->m, o->v, o->master, nseg, seg_off, seg_len, seg_lr,
                                   seg_wd, (float)c->beta1, (float)c->beta2, (float)c->adam_eps, (float)scale, o->t);
        free(seg_off);
        free(seg_len);
        free(seg_lr);
        free(seg_wd);
    }
}

// The moments are fp32 whatever the backend's element type: copy raw bytes.
void optimizer_get_state(const Optimizer *o, const Model *model, float *m, float *v) {
    model->be->copy_to_host(m, o->m, o->n * sizeof(float));
    model->be->copy_to_host(v, o->v, o->n * sizeof(float));
}

void optimizer_set_state(Optimizer *o, const Model *model, const float *m, const float *v, int t) {
    model->be->copy_from_host(o->m, m, o->n * sizeof(float));
    model->be->copy_from_host(o->v, v, o->n * sizeof(float));
    o->t = t;
}
