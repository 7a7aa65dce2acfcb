// One Block AttnRes op (docs/hybrid.md, "AttnRes op forward" and "AttnRes op backward") as
// a module: its pseudo-query w (zero-initialised, so every sublayer input starts as the
// mean of its sources) and key-norm weight gamma (one-initialised), both 1-D, AdamW without
// weight decay (GROUP_NORM; kept off Muon and out of low precision, docs/hybrid.md,
// "AttnRes cost and precision"). The stack bookkeeping (which sources, block seals, the
// gradient walk of docs/hybrid.md, "AttnRes backward through the stack") lives in the
// graph (model.c).
#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "base/util.h"

void attnres_params(const ModelConfig *c, ParamTable *t, AttnResParams *p, const char *fmt, int layer) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    int shape[1] = {c->d_model};
    p->query = params_add(t, GROUP_NORM, INIT_ZERO, 0.0, 1, shape, "%s.query", name);
    p->norm = params_add(t, GROUP_NORM, INIT_ONE, 0.0, 1, shape, "%s.norm.weight", name);
}

void attnres_layout(const Model *m, Carver *cv, AttnResActs *a, int n) {
    const size_t N = (size_t)m->max_B * m->max_T;
    a->n = n;
    a->out = carve(cv, N * m->cfg.d_model);
    a->probs = carve_stat(cv, N * n);  // fp32 statistics (docs/hybrid.md, "AttnRes op forward")
    a->logits = carve_stat(cv, N * n);
    a->rstd = carve_stat(cv, N * n);
    if (cv->base && !a->srcs) a->srcs = xcalloc((size_t)n, sizeof(*a->srcs));
}

void attnres_free(AttnResActs *a) {
    free((void *)a->srcs);
    a->srcs = NULL;
}

void attnres_forward(Model *m, const AttnResParams *p, AttnResActs *a, const real *const *srcs, int N) {
    for (int i = 0; i < a->n; i++) a->srcs[i] = srcs[i];
    m->be->attnres->attnres_forward(a->out, a->probs, a->logits, a->rstd, a->srcs, a->n, model_tensor(m, m->params, p->query),
                           model_tensor(m, m->params, p->norm), N, m->cfg.d_model, m->cfg.norm_eps);
}

void attnres_backward(Model *m, const AttnResParams *p, const AttnResActs *a, real *const *dsrcs, const real *dout,
                      int N) {
    m->be->attnres->attnres_backward(dsrcs, model_grad(m, p->query), model_grad(m, p->norm),
                            m->acts.ar_work, dout, a->srcs, a->n, model_tensor(m, m->params, p->query),
                            model_tensor(m, m->params, p->norm), a->probs, a->logits, a->rstd, N, m->cfg.d_model);
}
