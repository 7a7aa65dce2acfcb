// Decode step of the K/G/D/L mixers from their O(1) recurrent state: the same layer as
// mixer_linear.c on one row, with the short convs run as steps over their window of the
// last W-1 inputs (§5.1) and the core as one step of the recurrence (§1.4 index form;
// §1.1 for L) instead of the chunkwise forms.
#include "decode.h"
#include "mixer_linear.h"

#define P(idx) model_tensor(m, m->params, (idx))

static size_t conv_elems(int D, int W) { return (size_t)D * (W > 1 ? W - 1 : 1); }

// The recurrent state is in statistics elements (fp32 on CUDA; delta_step's contract).
static size_t state_bytes(const Backend *be, size_t n) { return n * be->stat_size; }
// zero-fills `bytes` (all-zero bits are 0 in every element type); bytes is a multiple of elem_size
static void zero_bytes(const Backend *be, real *p, size_t bytes) { be->zero(p, bytes / be->elem_size); }

void linear_cache_init(Model *m, int l, LinearCache *c) {
    const LinShape s = lin_shape(&m->cfg, m->cfg.layers[l]);
    const Backend *be = m->be;
    const size_t e = be->elem_size;
    *c = (LinearCache){0};
    if (s.conv) {
        c->conv_q = be->alloc(conv_elems(s.HK, s.W) * e);
        c->conv_k = be->alloc(conv_elems(s.HK, s.W) * e);
        c->conv_v = be->alloc(conv_elems(s.HV, s.W) * e);
    }
    c->S = be->alloc(state_bytes(be, (size_t)s.H * s.K * s.V));
    if (s.kind == LINEAR_ATTN) c->z = be->alloc(state_bytes(be, (size_t)s.H * s.K));
}

void linear_cache_reset(Model *m, int l, LinearCache *c) {
    const LinShape s = lin_shape(&m->cfg, m->cfg.layers[l]);
    const Backend *be = m->be;
    if (s.conv) {
        be->zero(c->conv_q, conv_elems(s.HK, s.W));
        be->zero(c->conv_k, conv_elems(s.HK, s.W));
        be->zero(c->conv_v, conv_elems(s.HV, s.W));
    }
    zero_bytes(be, c->S, state_bytes(be, (size_t)s.H * s.K * s.V));
    if (c->z) zero_bytes(be, c->z, state_bytes(be, (size_t)s.H * s.K));
}

void linear_cache_free(Model *m, LinearCache *c) {
    real *bufs[5] = {c->conv_q, c->conv_k, c->conv_v, c->S, c->z};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) m->be->free(bufs[i]);
    *c = (LinearCache){0};
}

void linear_decode_step(Model *m, int l, LinearCache *c, real *out, const real *in) {
    const Backend *be = m->be;
    const LinShape s = lin_shape(&m->cfg, m->cfg.layers[l]);
    const LinearParams *p = &m->mp.blocks[l].lin;
    LinearActs *a = &m->acts.blocks[l].lin;
    a->in = (real *)in;
    linear_mixer_inputs(m, l, a, in, 1);
    if (s.conv) {
        be->delta_rule->short_conv_step(a->qc, c->conv_q, a->qp, P(p->q_conv), NULL, 1, s.HK, s.W, 1);
        be->delta_rule->short_conv_step(a->kc, c->conv_k, a->kp, P(p->k_conv), NULL, 1, s.HK, s.W, 1);
        be->delta_rule->short_conv_step(a->v, c->conv_v, a->vp, P(p->v_conv), NULL, 1, s.HV, s.W, 1);
        linear_mixer_qk_norm(m, l, a, 1);
        be->delta_rule->delta_step(s.kind, a->o, c->S, a->q, a->k, a->v, a->g, a->beta, s.scale, 1, s.H, s.K, s.V);
    } else {
        be->delta_rule->linear_attn_step(a->o, c->S, c->z, a->q, a->k, a->v, s.scale, 1, 1, s.H, s.K, s.V);
    }
    linear_mixer_output(m, l, a, out, in, 1);
}
