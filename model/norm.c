// Norm module: LayerNorm (GPT-2) or RMSNorm, as `norm` says, through the backend.
#include <stdio.h>

#include "model.h"

void norm_params(const ModelConfig *c, ParamTable *t, NormParams *p, const char *fmt, int layer) {
    char name[PARAM_NAME_MAX];
    snprintf(name, sizeof name, fmt, layer);
    char full[PARAM_NAME_MAX + 8];
    int shape[1] = {c->d_model};
    snprintf(full, sizeof full, "%s.weight", name);
    p->w = params_add(t, GROUP_NORM, INIT_ONE, 0.0, 1, shape, "%s", full);
    p->b = -1;
    if (c->norm == NORM_LAYERNORM && c->bias) {
        snprintf(full, sizeof full, "%s.bias", name);
        p->b = params_add(t, GROUP_NORM, INIT_ZERO, 0.0, 1, shape, "%s", full);
    }
}

void norm_layout(const Model *m, Carver *cv, NormActs *a) {
    const size_t N = (size_t)m->max_B * m->max_T;
    a->out = carve(cv, N * m->cfg.d_model);
    a->mean = m->cfg.norm == NORM_LAYERNORM ? carve_stat(cv, N) : NULL;
    a->rstd = carve_stat(cv, N);
}

void norm_forward(Model *m, const NormParams *p, NormActs *a, const real *in, int N) {
    const int C = m->cfg.d_model;
    const real eps = (real)m->cfg.norm_eps;
    real *w = model_tensor(m, m->params, p->w), *b = model_tensor(m, m->params, p->b);
    if (m->cfg.norm == NORM_LAYERNORM) m->be->core->layernorm_forward(a->out, a->mean, a->rstd, in, w, b, N, C, eps);
    else m->be->norm_glu->rmsnorm_forward(a->out, a->rstd, in, w, N, C, eps);
}

void norm_backward(Model *m, const NormParams *p, const NormActs *a, real *din, const real *dout, const real *in,
                   int N) {
    const int C = m->cfg.d_model;
    real *w = model_tensor(m, m->params, p->w);
    real *dw = model_grad(m, p->w), *db = model_grad(m, p->b);
    if (m->cfg.norm == NORM_LAYERNORM)
        m->be->core->layernorm_backward(din, dw, db, dout, in, w, a->mean, a->rstd, N, C);
    else m->be->norm_glu->rmsnorm_backward(din, dw, dout, in, w, a->rstd, N, C);
}

void norm_forward_add(Model *m, const NormParams *p, NormActs *a, real *res, const real *x, const real *y, int N) {
    const int C = m->cfg.d_model;
    const real eps = (real)m->cfg.norm_eps;
    real *w = model_tensor(m, m->params, p->w);
    if (m->cfg.norm == NORM_LAYERNORM && m->be->core->add_layernorm_forward) {
        real *b = model_tensor(m, m->params, p->b);
        m->be->core->add_layernorm_forward(res, a->out, a->mean, a->rstd, x, y, w, b, N, C, eps);
        return;
    }
    if (m->cfg.norm == NORM_RMSNORM && m->be->norm_glu->add_rmsnorm_forward) {
        m->be->norm_glu->add_rmsnorm_forward(res, a->out, a->rstd, x, y, w, N, C, eps);
        return;
    }
    m->be->core->add_forward(res, x, y, (size_t)N * C);
    norm_forward(m, p, a, res, N);
}

int norm_backward_add(Model *m, const NormParams *p, const NormActs *a, real *dres, const real *dout, const real *in,
                      int N, real *tmp, real *dsum) {
    const int C = m->cfg.d_model;
    real *w = model_tensor(m, m->params, p->w), *dw = model_grad(m, p->w);
    if (m->cfg.norm == NORM_LAYERNORM && m->be->core->layernorm_backward_add) {
        real *db = model_grad(m, p->b);
        m->be->core->layernorm_backward_add(dres, dw, db, dsum, dout, in, w, a->mean, a->rstd, N, C);
        return dsum != NULL;
    }
    if (m->cfg.norm == NORM_RMSNORM && m->be->norm_glu->rmsnorm_backward_add) {
        m->be->norm_glu->rmsnorm_backward_add(dres, dw, dout, in, w, a->rstd, N, C);
        return 0;  // no dsum here: the layer that reads dres sums its own dbias
    }
    norm_backward(m, p, a, tmp, dout, in, N);
    m->be->core->add_inplace(dres, tmp, (size_t)N * C);
    return 0;
}
