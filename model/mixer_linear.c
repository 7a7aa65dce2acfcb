// Token mixers K (KDA), G (GDN), D (DeltaNet), L (linear attention): forward and
// backward of the whole layer through the backend table (docs/delta-rule.md, "Layers"):
//   q, k, v = SiLU(ShortConv(x W^T))            (L: the raw projections)
//   q, k    = L2Norm(q), L2Norm(k)              (eps 1e-6 on the sum of squares)
//   g       = gate((x F_a^T) F_b^T)  KDA,  gate(x W_a^T)  GDN
//   beta    = sigmoid(x W_b^T)                  (K G D)
//   o       = chunkwise KDA / GDN / DeltaNet / ELU+1 linear attention
//   y_h     = RMSNorm(o_h) w act(z_h)           KDA: z = (x G_a^T) G_b^T + b, act = sigmoid;
//                                               GDN: z = x W_g^T, act = swish; D, L: plain RMSNorm
//   out     = concat_h(y_h) W_o^T
// The steps: docs/delta-rule.md, "Short causal convolution with SiLU", "Input transforms:
// L2 norm, decay gate and beta", "KDA layer", "GDN layer", "Chunkwise forward", "Chunkwise
// backward", "Chunked linear attention", "Gated RMSNorm of the output".
// Training runs the chunkwise forms; with reset_at_eot the sequences come from
// doc_segments.c (each batch row, cut after every end-of-text token).
#include "model/doc_segments.h"
#include "model/mixer_linear.h"

#define P(idx) model_tensor(m, m->params, (idx))
#define G(idx) model_grad(m, (idx))

// The core op over the sequences of the last forward: one call per group of at most
// `cap` sequences (pointers advanced to the group's first row), or one plain call.
static void core(Model *m, const LinShape *s, LinearActs *a, int B, int T, int backward) {
    const Backend *be = m->be;
    const DocSegments *sg = &m->acts.seg;
    const int chunk = m->cfg.chunk_size, ng = sg->active ? sg->ngroups : 1;
    const size_t G = (size_t)s->H * s->gate_dim;
    for (int gi = 0; gi < ng; gi++) {
        int Bc = B, Tc = T, nseq = 0;
        size_t r0 = 0;
        const int *off = NULL;
        if (sg->active) {
            const int s0 = sg->first[gi], s1 = sg->first[gi + 1];
            r0 = (size_t)sg->host[s0];
            Bc = 1;
            Tc = sg->host[s1] - sg->host[s0];
            nseq = s1 - s0;
            off = sg->group_offsets + s0 + gi;
        }
#define AT(p, w) ((p) ? backend_offset(be, (p), r0 * (w)) : NULL)
        const real *q = AT(a->q, s->HK), *k = AT(a->k, s->HK), *v = AT(a->v, s->HV), *g = AT(a->g, G);
        const real *beta = AT(a->beta, (size_t)s->H);
        if (!backward) {
            real *o = AT(a->o, s->HV);
            if (s->kind == LINEAR_ATTN)
                be->delta_rule->linear_attn_chunk_forward(o, NULL, NULL, q, k, v, NULL, NULL, s->scale, 1, Bc, Tc, s->H, s->K,
                                              s->V, off, nseq, chunk, a->workspace);
            else
                be->delta_rule->delta_chunk_forward(s->kind, o, NULL, q, k, v, g, beta, NULL, s->scale, Bc, Tc, s->H, s->K, s->V,
                                        off, nseq, chunk, a->workspace);
        } else {
            real *dq = AT(a->dq, s->HK), *dk = AT(a->dk, s->HK), *dv = AT(a->dv, s->HV), *dg = AT(a->dg, G);
            real *dbeta = AT(a->dbeta, (size_t)s->H);
            const real *dout = AT(a->dout_core, s->HV);
            if (s->kind == LINEAR_ATTN)
                be->delta_rule->linear_attn_chunk_backward(dq, dk, dv, NULL, NULL, dout, NULL, NULL, q, k, v, NULL, NULL,
                                               s->scale, 1, Bc, Tc, s->H, s->K, s->V, off, nseq, chunk,
                                               a->workspace);
            else
                be->delta_rule->delta_chunk_backward(s->kind, dq, dk, dv, dg, dbeta, NULL, dout, NULL, q, k, v, g, beta, NULL,
                                         s->scale, Bc, Tc, s->H, s->K, s->V, off, nseq, chunk, a->workspace);
        }
#undef AT
    }
}

// The rows as the short convolution takes them: B sequences of T rows, or with reset_at_eot
// one row of B*T cut at the document boundaries (docs/delta-rule.md, "Short causal convolution
// with SiLU")
typedef struct {
    int B, T, nseq;
    const int *offsets;
} ConvRows;

static ConvRows conv_rows(const Model *m, int B, int T) {
    const DocSegments *sg = &m->acts.seg;
    if (sg->active) return (ConvRows){1, B * T, sg->nseq, sg->offsets};
    return (ConvRows){B, T, 0, NULL};
}

// short conv + SiLU
static void conv_forward(Model *m, real *y, const real *x, const real *w, int D, int W, int B, int T) {
    const ConvRows r = conv_rows(m, B, T);
    m->be->delta_rule->short_conv_forward(y, NULL, x, w, NULL, NULL, r.B, r.T, D, W, r.offsets, r.nseq, 1);
}

// the same and then the L2 norm over heads of K channels, in one op (the optional fused
// short_conv_l2norm_forward: the convolution's output never reaches memory)
static void conv_l2norm_forward(Model *m, real *y, real *rstd, const real *x, const real *w, int D, int W, int K,
                                int B, int T) {
    const ConvRows r = conv_rows(m, B, T);
    m->be->delta_rule->short_conv_l2norm_forward(y, rstd, x, w, r.B, r.T, D, W, r.offsets, r.nseq, K,
                                                 (real)LINEAR_L2NORM_EPS);
}

static void conv_backward(Model *m, real *dx, real *dw, const real *dy, const real *x, const real *w, int D, int W,
                          int B, int T) {
    const ConvRows r = conv_rows(m, B, T);
    m->be->delta_rule->short_conv_backward(dx, dw, NULL, NULL, dy, NULL, x, w, NULL, NULL, r.B, r.T, D, W, r.offsets,
                                           r.nseq, 1);
}

void linear_mixer_inputs(Model *m, int l, const real *in, int N) {
    const Backend *be = m->be;
    const LinShape s = lin_shape(&m->cfg, l);
    const LinearParams *p = m->mp.blocks[l].mixer;
    LinearActs *a = m->acts.blocks[l].mixer;
    const int C = m->cfg.d_model;
    be->core->matmul_forward(a->qp, in, P(p->q_w), NULL, N, C, s.HK);
    be->core->matmul_forward(a->kp, in, P(p->k_w), NULL, N, C, s.HK);
    be->core->matmul_forward(a->vp, in, P(p->v_w), NULL, N, C, s.HV);
    // g = gate(F_b F_a x) per channel (KDA), gate(W_a x) per head (GDN): docs/delta-rule.md,
    // "KDA layer" and "GDN layer"
    if (s.kind == LINEAR_KDA) {
        be->core->matmul_forward(a->fa, in, P(p->f_a), NULL, N, C, s.R);
        be->core->matmul_forward(a->graw, a->fa, P(p->f_b), NULL, N, s.R, s.HK);
    } else if (s.kind == LINEAR_GDN) {
        be->core->matmul_forward(a->graw, in, P(p->a_w), NULL, N, C, s.H);
    }
    if (s.gate_dim)
        be->delta_rule->decay_gate_forward(a->g, a->graw, P(p->A_log), P(p->dt_bias), (size_t)N, s.H, s.gate_dim, s.lower_bound);
    if (s.conv) {  // beta = sigmoid(W_b x)
        be->core->matmul_forward(a->braw, in, P(p->b_w), NULL, N, C, s.H);
        be->delta_rule->beta_forward(a->beta, a->braw, (size_t)N * s.H, 0);
    }
}

void linear_mixer_qk_norm(Model *m, int l, int N) {
    const LinShape s = lin_shape(&m->cfg, l);
    LinearActs *a = m->acts.blocks[l].mixer;
    m->be->delta_rule->l2norm_forward(a->q, a->q_rstd, a->qc, (size_t)N * s.H, s.K, (real)LINEAR_L2NORM_EPS);
    m->be->delta_rule->l2norm_forward(a->k, a->k_rstd, a->kc, (size_t)N * s.H, s.K, (real)LINEAR_L2NORM_EPS);
}

void linear_mixer_output(Model *m, int l, real *out, const real *in, int N) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const LinShape s = lin_shape(c, l);
    const LinearParams *p = m->mp.blocks[l].mixer;
    LinearActs *a = m->acts.blocks[l].mixer;
    const size_t rows = (size_t)N * s.H;
    const real eps = (real)c->norm_eps;
    if (s.kind == LINEAR_KDA) {
        be->core->matmul_forward(a->ga, in, P(p->g_a), NULL, N, c->d_model, s.R);
        be->core->matmul_forward(a->z, a->ga, P(p->g_b), P(p->g_bias), N, s.R, s.HV);
        be->delta_rule->gated_rmsnorm_forward(a->y, a->o_rstd, a->o, a->z, P(p->o_norm), rows, s.V, eps, 0);
    } else if (s.kind == LINEAR_GDN) {
        be->core->matmul_forward(a->z, in, P(p->g_w), NULL, N, c->d_model, s.HV);
        be->delta_rule->gated_rmsnorm_forward(a->y, a->o_rstd, a->o, a->z, P(p->o_norm), rows, s.V, eps, 1);
    } else {
        be->norm_glu->rmsnorm_forward(a->y, a->o_rstd, a->o, P(p->o_norm), (int)rows, s.V, eps);
    }
    be->core->matmul_forward(out, a->y, P(p->o_w), NULL, N, s.HV, c->d_model);
}

static void linear_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const LinShape s = lin_shape(&m->cfg, l);
    const LinearParams *p = m->mp.blocks[l].mixer;
    LinearActs *a = m->acts.blocks[l].mixer;
    const int N = B * T;
    a->in = (real *)in;
    linear_mixer_inputs(m, l, in, N);
    if (s.conv && m->be->delta_rule->short_conv_l2norm_forward) {  // optional fused op
        conv_l2norm_forward(m, a->q, a->q_rstd, a->qp, P(p->q_conv), s.HK, s.W, s.K, B, T);
        conv_l2norm_forward(m, a->k, a->k_rstd, a->kp, P(p->k_conv), s.HK, s.W, s.K, B, T);
        conv_forward(m, a->v, a->vp, P(p->v_conv), s.HV, s.W, B, T);
    } else if (s.conv) {
        conv_forward(m, a->qc, a->qp, P(p->q_conv), s.HK, s.W, B, T);
        conv_forward(m, a->kc, a->kp, P(p->k_conv), s.HK, s.W, B, T);
        conv_forward(m, a->v, a->vp, P(p->v_conv), s.HV, s.W, B, T);
        linear_mixer_qk_norm(m, l, N);
    }
    core(m, &s, a, B, T, 0);
    linear_mixer_output(m, l, out, in, N);
}

// din (first contribution written, later ones added) from one input projection
static void proj_backward(Model *m, LinearActs *a, real *din, int *first, int w, const real *dout, int N, int OC) {
    const int C = m->cfg.d_model;
    if (*first) m->be->core->matmul_backward(din, G(w), NULL, dout, a->in, P(w), N, C, OC);
    else matmul_backward_add(m->be, din, G(w), NULL, dout, a->in, P(w), N, C, OC, a->dx);
    *first = 0;
}

static void linear_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const LinShape s = lin_shape(&m->cfg, l);
    const LinearParams *p = m->mp.blocks[l].mixer;
    LinearActs *a = m->acts.blocks[l].mixer;
    const int N = B * T;
    const size_t rows = (size_t)N * s.H;
    int first = 1;
    // out = y W_o^T, then the output norm (and its gate)
    be->core->matmul_backward(a->dy, G(p->o_w), NULL, dout, a->y, P(p->o_w), N, s.HV, m->cfg.d_model);
    if (s.kind == LINEAR_KDA) {
        be->delta_rule->gated_rmsnorm_backward(a->dout_core, a->dz, G(p->o_norm), a->dy, a->o, a->z, P(p->o_norm), a->o_rstd, rows,
                                   s.V, 0);
        be->core->matmul_backward(a->dga, G(p->g_b), G(p->g_bias), a->dz, a->ga, P(p->g_b), N, s.R, s.HV);
        proj_backward(m, a, din, &first, p->g_a, a->dga, N, s.R);
    } else if (s.kind == LINEAR_GDN) {
        be->delta_rule->gated_rmsnorm_backward(a->dout_core, a->dz, G(p->o_norm), a->dy, a->o, a->z, P(p->o_norm), a->o_rstd, rows,
                                   s.V, 1);
        proj_backward(m, a, din, &first, p->g_w, a->dz, N, s.HV);
    } else {
        be->norm_glu->rmsnorm_backward(a->dout_core, G(p->o_norm), a->dy, a->o, P(p->o_norm), a->o_rstd, (int)rows, s.V);
    }
    // the core op: dq, dk, dv, dg, dbeta
    core(m, &s, a, B, T, 1);
    if (s.conv) {
        be->delta_rule->beta_backward(a->db, a->dbeta, a->beta, rows, 0);
        proj_backward(m, a, din, &first, p->b_w, a->db, N, s.H);
    }
    if (s.gate_dim) {
        be->delta_rule->decay_gate_backward(a->dgraw, G(p->A_log), G(p->dt_bias), a->dg, a->graw, P(p->A_log), P(p->dt_bias),
                                (size_t)N, s.H, s.gate_dim, s.lower_bound);
        if (s.kind == LINEAR_KDA) {
            be->core->matmul_backward(a->dfa, G(p->f_b), NULL, a->dgraw, a->fa, P(p->f_b), N, s.R, s.HK);
            proj_backward(m, a, din, &first, p->f_a, a->dfa, N, s.R);
        } else {
            proj_backward(m, a, din, &first, p->a_w, a->dgraw, N, s.H);
        }
    }
    if (s.conv) {  // L2 norm, then conv + SiLU, then the projection (q, k share dqp)
        be->delta_rule->l2norm_backward(a->dqc, a->dq, a->q, a->q_rstd, rows, s.K);
        conv_backward(m, a->dqp, G(p->q_conv), a->dqc, a->qp, P(p->q_conv), s.HK, s.W, B, T);
        proj_backward(m, a, din, &first, p->q_w, a->dqp, N, s.HK);
        be->delta_rule->l2norm_backward(a->dkc, a->dk, a->k, a->k_rstd, rows, s.K);
        conv_backward(m, a->dqp, G(p->k_conv), a->dkc, a->kp, P(p->k_conv), s.HK, s.W, B, T);
        proj_backward(m, a, din, &first, p->k_w, a->dqp, N, s.HK);
        conv_backward(m, a->dvp, G(p->v_conv), a->dv, a->vp, P(p->v_conv), s.HV, s.W, B, T);
        proj_backward(m, a, din, &first, p->v_w, a->dvp, N, s.HV);
    } else {
        proj_backward(m, a, din, &first, p->q_w, a->dq, N, s.HK);
        proj_backward(m, a, din, &first, p->k_w, a->dk, N, s.HK);
        proj_backward(m, a, din, &first, p->v_w, a->dv, N, s.HV);
    }
}

// The four registry entries share every function; the variant is the LinearKind.
#define LINEAR_MIXER(ident, ch, label, kind_, fams)                                                      \
    const MixerOps ident = {                                                                             \
        .letter = ch,                                                                                    \
        .name = label,                                                                                   \
        .variant = kind_,                                                                                \
        .families = fams,                                                                                \
        .resets_at_eot = 1,                                                                              \
        .params_size = sizeof(LinearParams),                                                             \
        .acts_size = sizeof(LinearActs),                                                                 \
        .cache_size = sizeof(LinearCache),                                                               \
        .config = linear_config,                                                                         \
        .params = linear_params,                                                                         \
        .layout = linear_layout,                                                                         \
        .forward = linear_forward,                                                                       \
        .backward = linear_backward,                                                                     \
        .flops = linear_flops,                                                                           \
        .cache_init = linear_cache_init,                                                                 \
        .cache_free = linear_cache_free,                                                                 \
        .cache_reset = linear_cache_reset,                                                               \
        .forward_cached = linear_forward_cached,                                                         \
    };

LINEAR_MIXER(mixer_kda, 'K', "KDA", LINEAR_KDA, FAMILY_CORE | FAMILY_DELTA_RULE)
LINEAR_MIXER(mixer_gdn, 'G', "Gated DeltaNet", LINEAR_GDN, FAMILY_CORE | FAMILY_DELTA_RULE)
LINEAR_MIXER(mixer_deltanet, 'D', "DeltaNet", LINEAR_DELTANET, FAMILY_CORE | FAMILY_DELTA_RULE | FAMILY_NORM_GLU)
// D and L norm the output with a plain RMSNorm (norms-and-GLU family)
LINEAR_MIXER(mixer_linear_attention, 'L', "linear attention", LINEAR_ATTN,
             FAMILY_CORE | FAMILY_DELTA_RULE | FAMILY_NORM_GLU)
