// Decode step of mixer 'A' with a KV cache: the new token's qkv row joins the cache and
// attends to every cached row (attention_cached: row T-1 of attention_forward).
#include "decode.h"

void attn_cache_init(Model *m, int l, AttnCache *c, int max_len) {
    (void)l;
    c->qkv = m->be->alloc((size_t)max_len * 3 * m->cfg.d_model * m->be->elem_size);
}

void attn_cache_free(Model *m, AttnCache *c) {
    m->be->free(c->qkv);
    c->qkv = NULL;
}

void attn_decode_step(Model *m, int l, AttnCache *c, real *out, const real *in, int pos) {
    const Backend *be = m->be;
    const AttnParams *p = &m->mp.blocks[l].attn;
    AttnActs *a = &m->acts.blocks[l].attn;
    const int C = m->cfg.d_model;
    real *row = backend_offset(be, c->qkv, (size_t)pos * 3 * C);
    be->core->matmul_forward(row, in, model_tensor(m, m->params, p->qkv_w), model_tensor(m, m->params, p->qkv_b), 1, C,
                       3 * C);
    be->core->attention_cached(a->y, c->qkv, 1, pos + 1, C, m->cfg.n_head);
    be->core->matmul_forward(out, a->y, model_tensor(m, m->params, p->out_w), model_tensor(m, m->params, p->out_b), 1, C, C);
}
