// Token mixer 'M': Multi-head Latent Attention (docs/hybrid.md, "MLA token mixer (M)"), NoPE
// as Kimi Linear uses it (the d_r slice is kept but not rotated) or RoPE (docs/hybrid.md,
// "RoPE on the decoupled slice"), optional q-LoRA, optional sigmoid output gate (K3 gated
// MLA). H = n_head, r = mla_kv_rank, dn/dr/dv the head widths, dqk = dn + dr, scale
// 1/sqrt(dqk). Forward, decompressed form (docs/hybrid.md, "MLA forward (decompressed
// form)"):
//   q  = x W_q^T                      or  q = RMSNorm(x W_qa^T) W_qb^T      (N, H*dqk)
//   kv = x W_kva^T = [c | kr];  chat = RMSNorm(c);  e = chat W_kvb^T = per head [k_nope | v]
//   (RoPE: rotate q's rope slices per head and kr at positions pos0 + t)
//   k  = per head [k_nope,h | kr];  o = causal softmax attention(q, k, v)   (N, H*dv)
//   u  = o * sigmoid(x W_g^T)  (gate)  or  u = o;    out = u W_o^T
// Backward in the order of docs/hybrid.md, "MLA backward, in order". The latent norms use
// eps 1e-6 (docs/hybrid.md, "MLA parameters").
// Cached form (generation): the rows [chat | kr] of the new tokens are appended to the
// layer's latent cache and attention runs in the absorbed form (docs/hybrid.md, "Absorbed
// (MQA-style) decode form") over the whole cache.
#include <math.h>
#include <stdio.h>

#include "base/util.h"
#include "model/model.h"

// q_a / kv_a RMSNorm (HF builds them without the config eps; docs/hybrid.md, "MLA parameters")
#define MLA_NORM_EPS 1e-6

// Indices of the layer's tensors (docs/hybrid.md, "MLA parameters"): q_w without q-LoRA,
// else q_a / q_a_norm / q_b; gate_w -1 without the gate.
typedef struct {
    int q_w, q_a_w, q_a_norm, q_b_w;
    int kv_a_w, kv_a_norm, kv_b_w;
    int gate_w, out_w;
} MlaParams;

// Training/prefill uses the decompressed form (docs/hybrid.md, "MLA forward (decompressed
// form)").
typedef struct {
    real *in;
    real *q;                  // (N, H*dqk) per head [q_nope | q_rope] (q_rope rotated with RoPE)
    real *aq, *aq_n, *rstd_q; // q-LoRA: (N, r_q) before / after its RMSNorm, (N)
    real *kv;                 // (N, r+dr) = [c | k_rope]
    real *c, *c_n, *rstd_c;   // (N, r) latent before / after its RMSNorm, (N)
    real *kr;                 // (N, dr) shared rope key (rotated with RoPE)
    real *e;                  // (N, H*(dn+dv)) = chat W_kvb^T, per head [k_nope | v]
    real *k;                  // (N, H*dqk) per head [k_nope | k_rope]
    real *o, *lse;            // (N, H*dv) attention output, (B, H, T)
    real *z, *u;              // gate logits, gated output (N, H*dv) (gate only)
    // backward scratch
    real *du, *d_o, *dz, *dq, *dk, *de, *dkr, *dc_n, *dc, *dkv, *daq_n, *daq, *dx;
} MlaActs;

typedef struct {
    real *rows;               // (max_len, r+dr): row t = [chat_t | kr_t]
} MlaCache;

typedef struct {
    int C, H, r, rq, dn, dr, dv, dqk, de;
} MlaDims;

static MlaDims dims(const ModelConfig *c) {
    MlaDims d = {c->d_model, c->n_head, c->mla_kv_rank, c->mla_q_rank, c->mla_qk_nope_dim, c->mla_rope_dim,
                 c->mla_v_dim, 0, 0};
    d.dqk = d.dn + d.dr;
    d.de = d.dn + d.dv;
    return d;
}

static const char *mla_config(ModelConfig *c, int used, ConfigOriginFn origin, const char **key) {
    static char msg[160];
    (void)origin;
    if (!used) return NULL;
    const char *why = NULL;
    if (c->mla_kv_rank < 1) *key = "mla_kv_rank", why = "mla_kv_rank must be positive (layers has MLA 'M')";
    else if (c->mla_qk_nope_dim < 1)
        *key = "mla_qk_nope_dim", why = "mla_qk_nope_dim must be positive (layers has MLA 'M')";
    else if (c->mla_v_dim < 1) *key = "mla_v_dim", why = "mla_v_dim must be positive (layers has MLA 'M')";
    else if (c->mla_rope && (c->mla_rope_dim < 2 || c->mla_rope_dim % 2)) {
        snprintf(msg, sizeof msg, "mla_rope = true needs an even mla_rope_dim >= 2 (got %d)", c->mla_rope_dim);
        *key = "mla_rope_dim", why = msg;
    } else if (c->mla_rope && c->mla_rope_theta <= 0) *key = "mla_rope_theta", why = "mla_rope_theta must be positive";
    return why;
}

// docs/hybrid.md, "Parameter counts and FLOPs per token": each query attends to T/2 keys
// on average with H heads of width dqk (scores) and dv (values); x3 for forward + backward
static double mla_flops(const ModelConfig *c, int T) {
    MlaDims d = dims(c);
    return 3.0 * T * d.H * (d.dqk + d.dv);
}

static void mla_params(const ModelConfig *c, ParamTable *t, int l, void *params) {
    MlaParams *p = params;
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

static void mla_layout(const Model *m, int l, Carver *cv, Carver *scratch) {
    const ModelConfig *c = &m->cfg;
    MlaActs *a = m->acts.blocks[l].mixer;
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
#define GRD(idx) model_grad(m, (idx))

// The query and the latent KV path (shared by the full and the cached forms), on the N = B*T
// rows at positions pos0 + t: q, kv = [c | kr], chat = RMSNorm(c), RoPE on the decoupled slices.
static void mla_inputs(Model *m, int l, const real *in, int B, int T, int pos0) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MlaParams *p = m->mp.blocks[l].mixer;
    MlaActs *a = m->acts.blocks[l].mixer;
    const MlaDims d = dims(c);
    const int N = B * T;
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
    // only the decoupled slices rotate (docs/hybrid.md, "RoPE on the decoupled slice")
    if (c->mla_rope) {
        real *q_rope = backend_offset(be, a->q, (size_t)d.dn);
        be->mla->rope_forward(q_rope, q_rope, B, T, d.H, d.dr, d.H * d.dqk, d.dqk, pos0, c->mla_rope_theta);
        be->mla->rope_forward(a->kr, a->kr, B, T, 1, d.dr, d.dr, 0, pos0, c->mla_rope_theta);
    }
}

// The optional output gate and the output projection: out = (o [* sigmoid(x W_g^T)]) W_o^T.
static void mla_output(Model *m, int l, real *out, const real *in, int N) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MlaParams *p = m->mp.blocks[l].mixer;
    MlaActs *a = m->acts.blocks[l].mixer;
    const MlaDims d = dims(c);
    real *u = a->o;
    if (c->mla_gate) {
        be->core->matmul_forward(a->z, in, PRM(p->gate_w), NULL, N, d.C, d.H * d.dv);
        be->mla->sigmoid_gate_forward(a->u, a->o, a->z, (size_t)N * d.H * d.dv);
        u = a->u;
    }
    be->core->matmul_forward(out, u, PRM(p->out_w), NULL, N, d.H * d.dv, d.C);
}

static void mla_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const Backend *be = m->be;
    const MlaParams *p = m->mp.blocks[l].mixer;
    MlaActs *a = m->acts.blocks[l].mixer;
    const MlaDims d = dims(&m->cfg);
    const int N = B * T;
    mla_inputs(m, l, in, B, T, 0);
    be->core->matmul_forward(a->e, a->c_n, PRM(p->kv_b_w), NULL, N, d.r, d.H * d.de);
    be->mla->mla_build_k_forward(a->k, a->e, a->kr, N, d.H, d.dn, d.dv, d.dr);
    AttnLayout L = layout_of(&d, B, T);
    be->mla->attention_qkv_forward(a->o, a->lse, a->q, a->k, backend_offset(be, a->e, (size_t)d.dn), &L);
    mla_output(m, l, out, in, N);
}

static void mla_cache_init(Model *m, int l, int max_len) {
    MlaCache *k = m->acts.blocks[l].cache;
    const MlaDims d = dims(&m->cfg);
    k->rows = m->be->alloc((size_t)max_len * (d.r + d.dr) * m->be->elem_size);
}

static void mla_cache_free(Model *m, int l) {
    MlaCache *k = m->acts.blocks[l].cache;
    m->be->free(k->rows);
    k->rows = NULL;
}

// rows past the current position are never read: nothing to clear
static void mla_cache_reset(Model *m, int l) {
    (void)m;
    (void)l;
}

// docs/hybrid.md, "Absorbed (MQA-style) decode form": the new rows [chat_t | kr_t] join the
// latent cache (the concatenation split_kv's backward writes), then attention in the
// absorbed form over every cached row.
static void mla_forward_cached(Model *m, int l, real *out, const real *in, int n, int pos0) {
    const Backend *be = m->be;
    const MlaParams *p = m->mp.blocks[l].mixer;
    MlaActs *a = m->acts.blocks[l].mixer;
    MlaCache *k = m->acts.blocks[l].cache;
    const MlaDims d = dims(&m->cfg);
    mla_inputs(m, l, in, 1, n, pos0);
    be->mla->mla_split_kv_backward(backend_offset(be, k->rows, (size_t)pos0 * (d.r + d.dr)), a->c_n, a->kr, n, d.r,
                                   d.dr);
    be->mla->mla_absorbed_attention(a->o, a->q, k->rows, PRM(p->kv_b_w), n, pos0 + n, d.H, d.dn, d.dr, d.dv, d.r,
                                    1.0 / sqrt((double)d.dqk));
    mla_output(m, l, out, in, n);
}

static void mla_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MlaParams *p = m->mp.blocks[l].mixer;
    MlaActs *a = m->acts.blocks[l].mixer;
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
    if (dx_written)
        matmul_backward_add(be, din, GRD(p->kv_a_w), NULL, a->dkv, a->in, PRM(p->kv_a_w), N, d.C, d.r + d.dr, a->dx);
    else be->core->matmul_backward(din, GRD(p->kv_a_w), NULL, a->dkv, a->in, PRM(p->kv_a_w), N, d.C, d.r + d.dr);
    // 8. query path
    if (d.rq) {
        be->core->matmul_backward(a->daq_n, GRD(p->q_b_w), NULL, a->dq, a->aq_n, PRM(p->q_b_w), N, d.rq, d.H * d.dqk);
        be->norm_glu->rmsnorm_backward(a->daq, GRD(p->q_a_norm), a->daq_n, a->aq, PRM(p->q_a_norm), a->rstd_q, N, d.rq);
        matmul_backward_add(be, din, GRD(p->q_a_w), NULL, a->daq, a->in, PRM(p->q_a_w), N, d.C, d.rq, a->dx);
    } else {
        matmul_backward_add(be, din, GRD(p->q_w), NULL, a->dq, a->in, PRM(p->q_w), N, d.C, d.H * d.dqk, a->dx);
    }
}

const MixerOps mixer_mla = {
    .letter = 'M',
    .name = "MLA",
    .families = FAMILY_CORE | FAMILY_MLA | FAMILY_NORM_GLU,
    .params_size = sizeof(MlaParams),
    .acts_size = sizeof(MlaActs),
    .cache_size = sizeof(MlaCache),
    .config = mla_config,
    .params = mla_params,
    .layout = mla_layout,
    .forward = mla_forward,
    .backward = mla_backward,
    .flops = mla_flops,
    .cache_init = mla_cache_init,
    .cache_free = mla_cache_free,
    .cache_reset = mla_cache_reset,
    .forward_cached = mla_forward_cached,
};
