// Token mixer 'A': causal multi-head softmax attention as in GPT-2:
// qkv = x Wqkv^T + b; y = softmax(q k^T / sqrt(hs)) v per head (causal); out = y Wo^T + b.
// Cached form: a KV cache of the packed qkv rows of every position so far; the new rows
// join it and attend to all rows up to themselves (attention_cached).
#include <stdio.h>

#include "model/model.h"

typedef struct {
    int qkv_w, qkv_b, out_w, out_b;
} AttnParams;

typedef struct {
    real *in;              // the normalised input (saved by the caller, pointer kept)
    real *qkv, *y, *lse;   // (N,3C) (N,C) (B,NH,T)
    real *dqkv, *dy;       // scratch
} AttnActs;

typedef struct {
    real *qkv;             // (max_len, 3C): the packed rows of positions 0, 1, ...
} AttnCache;

static const char *attn_config(ModelConfig *c, int used, ConfigOriginFn origin, const char **key) {
    static char msg[160];
    if (!used || c->d_model % c->n_head == 0) return NULL;
    snprintf(msg, sizeof msg, "n_head = %d does not divide d_model = %d (d_model set at %s)", c->n_head, c->d_model,
             origin("d_model"));
    *key = "n_head";
    return msg;
}

static void attn_params(const ModelConfig *c, ParamTable *t, int l, void *params) {
    AttnParams *p = params;
    const int C = c->d_model;
    p->qkv_w = params_matrix(t, c->init_std, 3 * C, C, "blocks.%d.attn.qkv.weight", l);
    t->items[p->qkv_w].blocks = 3;  // q, k and v are separate matrices (Muon)
    p->qkv_b = c->bias ? params_vector(t, GROUP_BIAS, INIT_ZERO, 3 * C, "blocks.%d.attn.qkv.bias", l) : -1;
    p->out_w = params_matrix(t, params_resid_std(c), C, C, "blocks.%d.attn.out.weight", l);
    p->out_b = c->bias ? params_vector(t, GROUP_BIAS, INIT_ZERO, C, "blocks.%d.attn.out.bias", l) : -1;
}

static void attn_layout(const Model *m, int l, Carver *cv, Carver *scratch) {
    AttnActs *a = m->acts.blocks[l].mixer;
    const size_t N = (size_t)m->max_B * m->max_T, C = m->cfg.d_model;
    a->qkv = carve(cv, N * 3 * C);
    a->y = carve(cv, N * C);
    a->lse = carve_stat(cv, N * m->cfg.n_head);
    a->dqkv = carve(scratch, N * 3 * C);
    a->dy = carve(scratch, N * C);
}

#define P(idx) model_tensor(m, m->params, (idx))
#define G(idx) model_grad(m, (idx))

static void attn_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const Backend *be = m->be;
    const AttnParams *p = m->mp.blocks[l].mixer;
    AttnActs *a = m->acts.blocks[l].mixer;
    const int N = B * T, C = m->cfg.d_model;
    be->core->matmul_forward(a->qkv, in, P(p->qkv_w), P(p->qkv_b), N, C, 3 * C);
    be->core->attention_forward(a->y, a->lse, a->qkv, B, T, C, m->cfg.n_head);
    be->core->matmul_forward(out, a->y, P(p->out_w), P(p->out_b), N, C, C);
    a->in = (real *)in;
}

static void attn_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const AttnParams *p = m->mp.blocks[l].mixer;
    AttnActs *a = m->acts.blocks[l].mixer;
    const int N = B * T, C = m->cfg.d_model;
    real *dout_b = m->dout_bias_summed ? NULL : G(p->out_b);  // NULL: summed already (Model.dout_bias_summed)
    be->core->matmul_backward(a->dy, G(p->out_w), dout_b, dout, a->y, P(p->out_w), N, C, C);
    be->core->attention_backward(a->dqkv, a->dy, a->qkv, a->y, a->lse, B, T, C, m->cfg.n_head);
    be->core->matmul_backward(din, G(p->qkv_w), G(p->qkv_b), a->dqkv, a->in, P(p->qkv_w), N, C, 3 * C);
}

static real *attn_out_bias_grad(Model *m, int l) {
    const AttnParams *p = m->mp.blocks[l].mixer;
    return G(p->out_b);
}

// causal: each query attends to half the keys on average; 12 C T / 2 per token, fwd + bwd
static double attn_flops(const ModelConfig *c, int T) { return 6.0 * c->d_model * T; }

static void attn_cache_init(Model *m, int l, int max_len) {
    AttnCache *k = m->acts.blocks[l].cache;
    k->qkv = m->be->alloc((size_t)max_len * 3 * m->cfg.d_model * m->be->elem_size);
}

static void attn_cache_free(Model *m, int l) {
    AttnCache *k = m->acts.blocks[l].cache;
    m->be->free(k->qkv);
    k->qkv = NULL;
}

// rows past the current position are never read: nothing to clear
static void attn_cache_reset(Model *m, int l) {
    (void)m;
    (void)l;
}

static void attn_forward_cached(Model *m, int l, real *out, const real *in, int n, int pos0) {
    const Backend *be = m->be;
    const AttnParams *p = m->mp.blocks[l].mixer;
    AttnActs *a = m->acts.blocks[l].mixer;
    AttnCache *k = m->acts.blocks[l].cache;
    const int C = m->cfg.d_model;
    be->core->matmul_forward(backend_offset(be, k->qkv, (size_t)pos0 * 3 * C), in, P(p->qkv_w), P(p->qkv_b), n, C,
                             3 * C);
    be->core->attention_cached(a->y, k->qkv, n, pos0 + n, C, m->cfg.n_head);
    be->core->matmul_forward(out, a->y, P(p->out_w), P(p->out_b), n, C, C);
}

const MixerOps mixer_softmax_attention = {
    .letter = 'A',
    .name = "softmax attention",
    .families = FAMILY_CORE,
    .params_size = sizeof(AttnParams),
    .acts_size = sizeof(AttnActs),
    .cache_size = sizeof(AttnCache),
    .config = attn_config,
    .params = attn_params,
    .layout = attn_layout,
    .forward = attn_forward,
    .backward = attn_backward,
    .out_bias_grad = attn_out_bias_grad,
    .flops = attn_flops,
    .cache_init = attn_cache_init,
    .cache_free = attn_cache_free,
    .cache_reset = attn_cache_reset,
    .forward_cached = attn_forward_cached,
};
