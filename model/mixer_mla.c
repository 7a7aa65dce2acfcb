// Token mixer 'M': Multi-head Latent Attention (blocks-spec §1), NoPE as Kimi Linear uses it
// (the d_r slice is kept but not rotated) or RoPE (§1.6), optional q-LoRA, optional sigmoid
// output gate (K3 gated MLA). H = n_head, r = mla_kv_rank, dn/dr/dv the head widths,
// dqk = dn + dr, scale 1/sqrt(dqk). Forward, decompressed form (§1.3):
//   q  = x W_q^T                      or  q = RMSNorm(x W_qa^T) W_qb^T      (N, H*dqk)
//   kv = x W_kva^T = [c | kr];  chat = RMSNorm(c);  e = chat W_kvb^T = per head [k_nope | v]
//   (RoPE: rotate q's rope slices per head and kr at positions pos0 + t)
//   k  = per head [k_nope,h | kr];  o = causal softmax attention(q, k, v)   (N, H*dv)
//   u  = o * sigmoid(x W_g^T)  (gate)  or  u = o;    out = u W_o^T
// Backward in the order of §1.5. The latent norms use eps 1e-6 (§1.2).
// Cached mode (model_forward_cached, B = 1): the rows [chat | kr] of the new tokens are appended to
// the layer's cache and attention runs in the absorbed form (§1.7) over the whole cache.
#include <math.h>

#include "model.h"
#include "base/util.h"

#define MLA_NORM_EPS 1e-6  // q_a / kv_a RMSNorm (§1.2: HF builds them without the config eps)

typedef struct {
    int C, H, r, rq, dn, dr, dv, dqk, de;
} MlaDims;

static MlaDims dims(const Config *c) {
    MlaDims d = {c->d_model, c->n_head, c->mla_kv_rank, c->mla_q_rank, c->mla_qk_nope_dim, c->mla_rope_dim,
                 c->mla_v_dim, 0, 0};
    d.dqk = d.dn + d.dr;
    d.de = d.dn + d.dv;
    return d;
}

double mla_mixer_flops(const Config *c) {
    MlaDims d = dims(c);
    return 3.0 * c->seq_len * d.H * (d.dqk + d.dv);  // §6.6: causal average over T/2 keys, x3 fwd+bwd
}

void mla_params(const Config *c, ParamTable *t, int l, MlaParams *p) {
    MlaDims d = dims(c);
    const double s = c->init_std;
    if (d.rq) {
        p->q_a_w = params_matrix(t, s, d.rq, d.C, "blocks.%d.mla.q_a.weight", l);
        p->q_a_norm = params_vector(t, GROUP_NORM, INIT_ONE, d.rq, "blocks.%d.mla.q_a_norm.weight", l);
        p->q_b_w = params_matrix(t, s, d.H * d.dqk, d.rq, "blocks.%d.mla.q_b.weight", l);
    } else {
        p->q_w = params_matrix(t, s, d.H * d.dqk, d.C, "blocks.%d.mla.q.weight", l);
    }
    p->kv_a_w = params_matrix(t, s, d.r + d.dr, d.C, "blocks.%d.mla.kv_a.weight", l);
    p->kv_a_norm = params_vector(t, GROUP_NORM, INIT_ONE, d.r, "blocks.%d.mla.kv_a_norm.weight", l);
    p->kv_b_w = params_matrix(t, s, d.H * d.de, d.r, "blocks.%d.mla.kv_b.weight", l);
    if (c->mla_gate) p->gate_w = params_matrix(t, s, d.H * d.dv, d.C, "blocks.%d.mla.gate.weight", l);
    p->out_w = params_matrix(t, params_resid_std(c), d.C, d.H * d.dv, "blocks.%d.mla.out.weight", l);
}

void mla_layout(const Model *m, Carver *cv, Carver *scratch, MlaActs *a) {
    const Config *c = &m->cfg;
    MlaDims d = dims(c);
    const size_t N = (size_t)m->max_B * m->max_T;
    a->q = carve(cv, N * d.H * d.dqk);
    if (d.rq) {
        a->aq = carve(cv, N * d.rq);
        a->aq_n = carve(cv, N * d.rq);
        a->rstd_q = carve_stat(cv, N);
    }
    a->kv = carve(cv, N * (d.r + d.dr));
    a->c = carve(cv, N * d.r);
    a->c_n = carve(cv, N * d.r);
    a->rstd_c = carve_stat(cv, N);
    a->kr = carve(cv, N * d.dr);
    a->e = carve(cv, N * d.H * d.de);
    a->k = carve(cv, N * d.H * d.dqk);
    a->o = carve(cv, N * d.H * d.dv);
    a->lse = carve_stat(cv, N * d.H);
    if (c->mla_gate) {
        a->z = carve(cv, N * d.H * d.dv);
        a->u = carve(cv, N * d.H * d.dv);
    }
    a->cache = carve(cv, (size_t)m->max_T * (d.r + d.dr));
    a->du = carve(scratch, N * d.H * d.dv);
    if (c->mla_gate) {
        a->d_o = carve(scratch, N * d.H * d.dv);
        a->dz = carve(scratch, N * d.H * d.dv);
    }
    a->dq = carve(scratch, N * d.H * d.dqk);
    a->dk = carve(scratch, N * d.H * d.dqk);
    a->de = carve(scratch, N * d.H * d.de);
    a->dkr = carve(scratch, N * d.dr);
    a->dc_n = carve(scratch, N * d.r);
    a->dc = carve(scratch, N * d.r);
    a->dkv = carve(scratch, N * (d.r + d.dr));
    if (d.rq) {
        a->daq_n = carve(scratch, N * d.rq);
        a->daq = carve(scratch, N * d.rq);
    }
    a->dx = carve(scratch, N * d.C);
}

static AttnLayout layout_of(const MlaDims *d, int B, int T) {
    AttnLayout L = {B, T, d->H, d->dqk, d->dv, d->H * d->dqk, d->dqk, d->H * d->dqk, d->dqk, d->H * d->de, d->de,
                    1.0 / sqrt((double)d->dqk)};
    return L;
}

#define PRM(idx) model_tensor(m, m->params, (idx))
#define GRD(idx) model_tensor(m, m->grads, (idx))

void mla_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const MlaParams *p = &m->mp.blocks[l].mla;
    MlaActs *a = &m->acts.blocks[l].mla;
    const MlaDims d = dims(c);
    const int N = B * T, pos0 = m->cached ? m->cache_pos : 0;
    a->in = (real *)in;
    // query path
    if (d.rq) {
        be->core->matmul_forward(a->aq, in, PRM(p->q_a_w), NULL, N, d.C, d.rq);
        be->norm_glu->rmsnorm_forward(a->aq_n, a->rstd_q, a->aq, PRM(p->q_a_norm), N, d.rq, (real)MLA_NORM_EPS);
        be->core->matmul_forward(a->q, a->aq_n, PRM(p->q_b_w), NULL, N, d.rq, d.H * d.dqk);
    } else {
        be->core->matmul_forward(a->q, in, PRM(p->q_w), NULL, N, d.C, d.H * d.dqk);
    }
    // KV latent path
    be->core->matmul_forward(a->kv, in, PRM(p->kv_a_w), NULL, N, d.C, d.r + d.dr);
    be->mla->mla_split_kv_forward(a->c, a->kr, a->kv, N, d.r, d.dr);
    be->norm_glu->rmsnorm_forward(a->c_n, a->rstd_c, a->c, PRM(p->kv_a_norm), N, d.r, (real)MLA_NORM_EPS);
    if (c->mla_rope) {  // §1.6: only the decoupled slices rotate
        real *q_rope = backend_offset(be, a->q, (size_t)d.dn);
        be->mla->rope_forward(q_rope, q_rope, B, T, d.H, d.dr, d.H * d.dqk, d.dqk, pos0, c->mla_rope_theta);
        be->mla->rope_forward(a->kr, a->kr, B, T, 1, d.dr, d.dr, 0, pos0, c->mla_rope_theta);
    }
    real *o = a->o;
    if (m->cached) {
        // §1.7: cache row t = [chat_t | kr_t] (the concatenation split_kv's backward writes)
        if (B != 1) die("mla: the cached forward takes one sequence at a time (B = %d)", B);
        be->mla->mla_split_kv_backward(backend_offset(be, a->cache, (size_t)pos0 * (d.r + d.dr)), a->c_n, a->kr, N, d.r,
                                  d.dr);
        be->mla->mla_absorbed_attention(o, a->q, a->cache, PRM(p->kv_b_w), N, pos0 + N, d.H, d.dn, d.dr, d.dv, d.r,
                                   1.0 / sqrt((double)d.dqk));
    } else {
        be->core->matmul_forward(a->e, a->c_n, PRM(p->kv_b_w), NULL, N, d.r, d.H * d.de);
        be->mla->mla_build_k_forward(a->k, a->e, a->kr, N, d.H, d.dn, d.dv, d.dr);
        AttnLayout L = layout_of(&d, B, T);
        be->mla->attention_qkv_forward(o, a->lse, a->q, a->k, backend_offset(be, a->e, (size_t)d.dn), &L);
    }
    real *u = o;
    if (c->mla_gate) {
        be->core->matmul_forward(a->z, in, PRM(p->gate_w), NULL, N, d.C, d.H * d.dv);
        be->mla->sigmoid_gate_forward(a->u, o, a->z, (size_t)N * d.H * d.dv);
        u = a->u;
    }
    be->core->matmul_forward(out, u, PRM(p->out_w), NULL, N, d.H * d.dv, d.C);
}

void mla_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const MlaParams *p = &m->mp.blocks[l].mla;
    MlaActs *a = &m->acts.blocks[l].mla;
    const MlaDims d = dims(c);
    const int N = B * T;
    const size_t nv = (size_t)N * d.H * d.dv;
    // 1. output projection
    const real *u = c->mla_gate ? a->u : a->o;
    be->core->matmul_backward(a->du, GRD(p->out_w), NULL, dout, u, PRM(p->out_w), N, d.H * d.dv, d.C);
    // 2. gate: do = du sigma(z), dz -> W_g and the first dx contribution
    const real *d_o = a->du;
    int dx_written = 0;
    if (c->mla_gate) {
        be->mla->sigmoid_gate_backward(a->d_o, a->dz, a->du, a->o, a->z, nv);
        be->core->matmul_backward(din, GRD(p->gate_w), NULL, a->dz, a->in, PRM(p->gate_w), N, d.C, d.H * d.dv);
        d_o = a->d_o;
        dx_written = 1;
    }
    // 3. attention: dq, dk, and dv straight into the v columns of de
    AttnLayout L = layout_of(&d, B, T);
    be->mla->attention_qkv_backward(a->dq, a->dk, backend_offset(be, a->de, (size_t)d.dn), d_o, a->q, a->k,
                               backend_offset(be, a->e, (size_t)d.dn), a->o, a->lse, &L);
    // 4. k = [k_nope | kr]: k_nope columns of de, dkr = sum over heads
    be->mla->mla_build_k_backward(a->de, a->dkr, a->dk, N, d.H, d.dn, d.dv, d.dr);
    if (c->mla_rope) {  // the transpose rotation, in place
        real *dq_rope = backend_offset(be, a->dq, (size_t)d.dn);
        be->mla->rope_backward(dq_rope, dq_rope, B, T, d.H, d.dr, d.H * d.dqk, d.dqk, 0, c->mla_rope_theta);
        be->mla->rope_backward(a->dkr, a->dkr, B, T, 1, d.dr, d.dr, 0, 0, c->mla_rope_theta);
    }
    // 5-7. e = chat W_kvb^T, chat = RMSNorm(c), kv = [c | kr] = x W_kva^T
    be->core->matmul_backward(a->dc_n, GRD(p->kv_b_w), NULL, a->de, a->c_n, PRM(p->kv_b_w), N, d.r, d.H * d.de);
    be->norm_glu->rmsnorm_backward(a->dc, GRD(p->kv_a_norm), a->dc_n, a->c, PRM(p->kv_a_norm), a->rstd_c, N, d.r);
    be->mla->mla_split_kv_backward(a->dkv, a->dc, a->dkr, N, d.r, d.dr);
    be->core->matmul_backward(dx_written ? a->dx : din, GRD(p->kv_a_w), NULL, a->dkv, a->in, PRM(p->kv_a_w), N, d.C,
                        d.r + d.dr);
    if (dx_written) be->core->add_inplace(din, a->dx, (size_t)N * d.C);
    // 8. query path
    if (d.rq) {
        be->core->matmul_backward(a->daq_n, GRD(p->q_b_w), NULL, a->dq, a->aq_n, PRM(p->q_b_w), N, d.rq, d.H * d.dqk);
        be->norm_glu->rmsnorm_backward(a->daq, GRD(p->q_a_norm), a->daq_n, a->aq, PRM(p->q_a_norm), a->rstd_q, N, d.rq);
        be->core->matmul_backward(a->dx, GRD(p->q_a_w), NULL, a->daq, a->in, PRM(p->q_a_w), N, d.C, d.rq);
    } else {
        be->core->matmul_backward(a->dx, GRD(p->q_w), NULL, a->dq, a->in, PRM(p->q_w), N, d.C, d.H * d.dqk);
    }
    be->core->add_inplace(din, a->dx, (size_t)N * d.C);
}
