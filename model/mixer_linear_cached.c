// The cached form of the K/G/D/L mixers (generation): the same layer as mixer_linear.c
// from an O(1) recurrent state instead of the chunkwise forms. The per-token pieces
// (projections, gates, L2 norms, the output norm and projection) run on all n new rows at
// once; the short convs step over their window of the last W-1 inputs (docs/delta-rule.md,
// "Short causal convolution with SiLU") and the core steps the recurrence (the index form
// of docs/delta-rule.md, "Kimi Delta Attention (KDA)"; for L, docs/delta-rule.md, "Linear
// attention with the ELU+1 feature map"), one token at a time. With reset_at_eot the
// state restarts after every end-of-text token, as the training forward's document
// boundaries do (doc_segments.h).
#include "model/doc_segments.h"
#include "model/mixer_linear.h"

#define P(idx) model_tensor(m, m->params, (idx))

static size_t conv_elems(int D, int W) { return (size_t)D * (W > 1 ? W - 1 : 1); }

// Every cache buffer here is a state: the conv windows and the recurrent state (and L's
// normaliser) are in statistics elements, fp32 on CUDA (the delta-rule ops' contract,
// model/ops/delta_rule/delta_rule.h), not the backend's element type. Allocated by state_alloc
// and zeroed by backend_stat_zero only, so no buffer is sized or cleared in the wrong element.
static real *state_alloc(const Backend *be, size_t n) { return be->alloc(n * be->stat_size); }

void linear_cache_init(Model *m, int l, int max_len) {
    (void)max_len;  // O(1) in the sequence length
    const LinShape s = lin_shape(&m->cfg, l);
    const Backend *be = m->be;
    LinearCache *c = m->acts.blocks[l].cache;
    if (s.conv) {
        c->conv_q = state_alloc(be, conv_elems(s.HK, s.W));
        c->conv_k = state_alloc(be, conv_elems(s.HK, s.W));
        c->conv_v = state_alloc(be, conv_elems(s.HV, s.W));
    }
    c->S = state_alloc(be, (size_t)s.H * s.K * s.V);
    if (s.kind == LINEAR_ATTN) c->z = state_alloc(be, (size_t)s.H * s.K);
}

// The conv windows (pass 0 below) and the recurrent state (pass 1) restart separately.
static void reset_part(Model *m, int l, int state) {
    const LinShape s = lin_shape(&m->cfg, l);
    const Backend *be = m->be;
    LinearCache *c = m->acts.blocks[l].cache;
    if (!state && s.conv) {
        backend_stat_zero(be, c->conv_q, conv_elems(s.HK, s.W));
        backend_stat_zero(be, c->conv_k, conv_elems(s.HK, s.W));
        backend_stat_zero(be, c->conv_v, conv_elems(s.HV, s.W));
    }
    if (state) {
        backend_stat_zero(be, c->S, (size_t)s.H * s.K * s.V);
        if (c->z) backend_stat_zero(be, c->z, (size_t)s.H * s.K);
    }
}

void linear_cache_reset(Model *m, int l) {
    reset_part(m, l, 0);
    reset_part(m, l, 1);
}

void linear_cache_free(Model *m, int l) {
    LinearCache *c = m->acts.blocks[l].cache;
    real *bufs[5] = {c->conv_q, c->conv_k, c->conv_v, c->S, c->z};
    for (int i = 0; i < 5; i++)
        if (bufs[i]) m->be->free(bufs[i]);
    *c = (LinearCache){0};
}

// Rows r0 .. r1-1 of the new tokens, one at a time: the convs, then (after the L2 norms of
// all rows) the core. Conv and core steps of a row only read that row and the state.
static void step_rows(Model *m, int l, const LinShape *s, int r0, int r1, int core) {
    const Backend *be = m->be;
    const LinearParams *p = m->mp.blocks[l].mixer;
    LinearActs *a = m->acts.blocks[l].mixer;
    LinearCache *c = m->acts.blocks[l].cache;
    const size_t G = (size_t)s->H * s->gate_dim;
#define ROW(ptr, width) backend_offset(be, (ptr), (size_t)r * (width))
    for (int r = r0; r < r1; r++) {
        if (!core) {
            be->delta_rule->short_conv_step(ROW(a->qc, s->HK), c->conv_q, ROW(a->qp, s->HK), P(p->q_conv), NULL, 1,
                                            s->HK, s->W, 1);
            be->delta_rule->short_conv_step(ROW(a->kc, s->HK), c->conv_k, ROW(a->kp, s->HK), P(p->k_conv), NULL, 1,
                                            s->HK, s->W, 1);
            be->delta_rule->short_conv_step(ROW(a->v, s->HV), c->conv_v, ROW(a->vp, s->HV), P(p->v_conv), NULL, 1,
                                            s->HV, s->W, 1);
        } else if (s->kind == LINEAR_ATTN) {
            be->delta_rule->linear_attn_step(ROW(a->o, s->HV), c->S, c->z, ROW(a->q, s->HK), ROW(a->k, s->HK),
                                             ROW(a->v, s->HV), s->scale, 1, 1, s->H, s->K, s->V);
        } else {
            be->delta_rule->delta_step(s->kind, ROW(a->o, s->HV), c->S, ROW(a->q, s->HK), ROW(a->k, s->HK),
                                       ROW(a->v, s->HV), G ? ROW(a->g, G) : NULL, ROW(a->beta, (size_t)s->H),
                                       s->scale, 1, s->H, s->K, s->V);
        }
    }
#undef ROW
}

void linear_forward_cached(Model *m, int l, real *out, const real *in, int n, int pos0) {
    (void)pos0;  // the state is all the position there is
    const LinShape s = lin_shape(&m->cfg, l);
    const DocSegments *sg = &m->acts.seg;
    LinearActs *a = m->acts.blocks[l].mixer;
    a->in = (real *)in;
    linear_mixer_inputs(m, l, in, n);
    // documents of the new rows (doc_segments_build ran on them): the state restarts at each
    // boundary, and after the last row if it is an end-of-text token
    const int nseg = sg->active ? sg->nseq : 1;
    for (int pass = 0; pass < 2; pass++) {  // 0: the convs (K G D); 1: the core
        if (pass == 0 && !s.conv) continue;
        if (pass == 1 && s.conv) linear_mixer_qk_norm(m, l, n);
        for (int j = 0; j < nseg; j++) {
            const int r0 = sg->active ? sg->host[j] : 0, r1 = sg->active ? sg->host[j + 1] : n;
            if (j > 0) reset_part(m, l, pass);
            step_rows(m, l, &s, r0, r1, pass);
        }
    }
    if (sg->active && sg->last_is_eot) linear_cache_reset(m, l);
    linear_mixer_output(m, l, out, in, n);
}
