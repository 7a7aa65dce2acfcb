#include "optimizer.h"

#include <math.h>
#include <string.h>

#include "model/util.h"

void optimizer_create(Optimizer *o, const Model *model) {
    memset(o, 0, sizeof *o);
    o->n = model->table.total;
    o->m = model->be->alloc(o->n * sizeof(float));
    o->v = model->be->alloc(o->n * sizeof(float));
}

void optimizer_destroy(Optimizer *o, const Model *model) {
    model->be->free(o->m);
    model->be->free(o->v);
    memset(o, 0, sizeof *o);
}

double grad_global_norm(const Model *model) { return sqrt(model->be->sum_squares(model->grads, model->table.total)); }

void optimizer_step(Optimizer *o, Model *model, double lr, double grad_norm) {
    const Config *c = &model->cfg;
    const Backend *be = model->be;
    double scale = 1.0;
    if (c->grad_clip > 0 && grad_norm > c->grad_clip) scale = c->grad_clip / grad_norm;
    o->t++;
    for (int i = 0; i < model->table.count; i++) {
        const ParamInfo *p = &model->table.items[i];
        float wd = param_group_decays(p->group) ? (float)c->weight_decay : 0.0f;
        be->adamw_update(backend_offset(be, model->params, p->offset), backend_offset(be, model->grads, p->offset),
                         o->m + p->offset, o->v + p->offset, p->numel, (float)lr, (float)c->beta1, (float)c->beta2,
                         (float)c->adam_eps, wd, (float)scale, o->t);
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
