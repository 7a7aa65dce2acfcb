// Token mixer 'A': causal multi-head softmax attention as in GPT-2:
// qkv = x Wqkv^T + b; y = softmax(q k^T / sqrt(hs)) v per head (causal); out = y Wo^T + b.
#include "model.h"

void attn_params(const Config *c, ParamTable *t, int l, AttnParams *p) {
    const int C = c->d_model;
    p->qkv_w = params_matrix(t, c->init_std, 3 * C, C, "blocks.%d.attn.qkv.weight", l);
    t->items[p->qkv_w].blocks = 3;  // q, k and v are separate matrices (Muon)
    p->qkv_b = c->bias ? params_vector(t, GROUP_BIAS, INIT_ZERO, 3 * C, "blocks.%d.attn.qkv.bias", l) : -1;
    p->out_w = params_matrix(t, params_resid_std(c), C, C, "blocks.%d.attn.out.weight", l);
    p->out_b = c->bias ? params_vector(t, GROUP_BIAS, INIT_ZERO, C, "blocks.%d.attn.out.bias", l) : -1;
}

void attn_layout(const Model *m, Carver *cv, Carver *scratch, AttnActs *a) {
    const size_t N = (size_t)m->max_B * m->max_T, C = m->cfg.d_model;
    a->qkv = carve(cv, N * 3 * C);
    a->y = carve(cv, N * C);
    a->lse = carve_stat(cv, N * m->cfg.n_head);
    a->dqkv = carve(scratch, N * 3 * C);
    a->dy = carve(scratch, N * C);
}

void attn_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const Backend *be = m->be;
    const AttnParams *p = &m->mp.blocks[l].attn;
    AttnActs *a = &m->acts.blocks[l].attn;
    const int N = B * T, C = m->cfg.d_model;
    be->core->matmul_forward(a->qkv, in, model_tensor(m, m->params, p->qkv_w), model_tensor(m, m->params, p->qkv_b), N, C,
                       3 * C);
    be->core->attention_forward(a->y, a->lse, a->qkv, B, T, C, m->cfg.n_head);
    be->core->matmul_forward(out, a->y, model_tensor(m, m->params, p->out_w), model_tensor(m, m->params, p->out_b), N, C, C);
    a->in = (real *)in;
}

void attn_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const AttnParams *p = &m->mp.blocks[l].attn;
    AttnActs *a = &m->acts.blocks[l].attn;
    const int N = B * T, C = m->cfg.d_model;
    be->core->matmul_backward(a->dy, model_tensor(m, m->grads, p->out_w), model_tensor(m, m->grads, p->out_b), dout, a->y,
                        model_tensor(m, m->params, p->out_w), N, C, C);
    be->core->attention_backward(a->dqkv, a->dy, a->qkv, a->y, a->lse, B, T, C, m->cfg.n_head);
    be->core->matmul_backward(din, model_tensor(m, m->grads, p->qkv_w), model_tensor(m, m->grads, p->qkv_b), a->dqkv, a->in,
                        model_tensor(m, m->params, p->qkv_w), N, C, 3 * C);
}
