// Token mixers K (KDA), G (GDN), D (DeltaNet), L (linear attention): their config keys,
// their tensors in the parameter table (docs/kda.md, "Layer parameters": names and init as
// fla's layers), the activations their forward saves / their backward needs, and their
// FLOPs.
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "model/doc_segments.h"
#include "model/mixer_linear.h"

// Shared by the four letters: derived sizes always (so every config is written out the
// same), range checks always, and the head split only where a K/G/D/L layer exists.
const char *linear_config(ModelConfig *c, int used, ConfigOriginFn origin, const char **key) {
    static char msg[200];
    (void)origin;
    if (c->linear_heads == 0) c->linear_heads = c->n_head;
    if (c->linear_head_dim == 0) {
        if (used && c->d_model % c->linear_heads) {
            snprintf(msg, sizeof msg, "linear_heads = %d does not divide d_model = %d (or set linear_head_dim)",
                     c->linear_heads, c->d_model);
            *key = "linear_heads";
            return msg;
        }
        c->linear_head_dim = c->d_model / c->linear_heads;
    }
    if (c->linear_value_dim == 0) c->linear_value_dim = c->linear_head_dim;
    if (c->gate_rank == 0) c->gate_rank = c->linear_value_dim;
    if (used && c->linear_head_dim < 1) return *key = "linear_head_dim", "linear_head_dim must be positive";
    if (c->conv_size < 1 || c->conv_size > 64) return *key = "conv_size", "conv_size must lie in [1, 64]";
    // (each chunk keeps C x C matrices per head: past a few hundred the chunkwise form stops
    // paying, and a huge value would only ask for memory)
    if (c->chunk_size < 1 || c->chunk_size > 1024) return *key = "chunk_size", "chunk_size must lie in [1, 1024]";
    if (c->kda_gate_lower_bound > 0 || c->kda_gate_lower_bound < -5)
        return *key = "kda_gate_lower_bound", "kda_gate_lower_bound must lie in [-5, 0] (0 = softplus gate)";
    return NULL;
}

// The state read-out and update: ~4 H K V multiply-adds per token forward, x3 with the
// backward (independent of T: the mixing is linear in the sequence length).
double linear_flops(const ModelConfig *c, int T) {
    (void)T;
    return 12.0 * c->linear_heads * c->linear_head_dim * c->linear_value_dim;
}

static int gate_param(ParamTable *t, InitRule init, int n, double lo, double hi, const char *fmt, int l) {
    int i = params_vector(t, GROUP_GATE, init, n, fmt, l);
    t->items[i].init_lo = lo;
    t->items[i].init_hi = hi;
    return i;
}

// depthwise Conv1d weight (D, 1, W), PyTorch's layout; fla inits it N(0, init_std)
static int conv_param(ParamTable *t, const ModelConfig *c, int D, int W, const char *fmt, int l) {
    int shape[3] = {D, 1, W};
    return params_add(t, GROUP_GATE, INIT_NORMAL, c->init_std, 3, shape, fmt, l);
}

void linear_params(const ModelConfig *c, ParamTable *t, int l, void *params) {
    LinearParams *p = params;
    const LinShape s = lin_shape(c, l);
    const int C = c->d_model;
    const double std = c->init_std;
    p->q_w = params_matrix(t, std, s.HK, C, "blocks.%d.attn.q_proj.weight", l);
    p->k_w = params_matrix(t, std, s.HK, C, "blocks.%d.attn.k_proj.weight", l);
    p->v_w = params_matrix(t, std, s.HV, C, "blocks.%d.attn.v_proj.weight", l);
    if (s.conv) {  // bias-free depthwise convs, SiLU (docs/kda.md, "Layer parameters")
        p->q_conv = conv_param(t, c, s.HK, s.W, "blocks.%d.attn.q_conv1d.weight", l);
        p->k_conv = conv_param(t, c, s.HK, s.W, "blocks.%d.attn.k_conv1d.weight", l);
        p->v_conv = conv_param(t, c, s.HV, s.W, "blocks.%d.attn.v_conv1d.weight", l);
    }
    if (s.kind == LINEAR_KDA) {  // low-rank gate, A_log ~ log U(1,16), dt_bias per channel
        p->f_a = params_matrix(t, std, s.R, C, "blocks.%d.attn.f_proj.0.weight", l);
        p->f_b = params_matrix(t, std, s.HK, s.R, "blocks.%d.attn.f_proj.1.weight", l);
        // the lower-bound form starts from A = 1 (fla's safe_gate init: A_log = 0); with
        // A up to 16 its sigmoid would start saturated
        p->A_log = s.lower_bound < 0 ? gate_param(t, INIT_ZERO, s.H, 0, 0, "blocks.%d.attn.A_log", l)
                                     : gate_param(t, INIT_LOG_UNIFORM, s.H, 1.0, 16.0, "blocks.%d.attn.A_log", l);
        p->dt_bias = gate_param(t, INIT_DT_BIAS, s.HK, 1e-3, 1e-1, "blocks.%d.attn.dt_bias", l);
    } else if (s.kind == LINEAR_GDN) {  // scalar gate per head, A_log ~ log U(0,16)
        p->a_w = params_matrix(t, std, s.H, C, "blocks.%d.attn.a_proj.weight", l);
        p->A_log = gate_param(t, INIT_LOG_UNIFORM, s.H, 0.0, 16.0, "blocks.%d.attn.A_log", l);
        p->dt_bias = gate_param(t, INIT_DT_BIAS, s.H, 1e-3, 1e-1, "blocks.%d.attn.dt_bias", l);
    }
    if (s.conv) p->b_w = params_matrix(t, std, s.H, C, "blocks.%d.attn.b_proj.weight", l);
    if (s.kind == LINEAR_KDA) {  // low-rank output gate with a bias (fla's layer)
        p->g_a = params_matrix(t, std, s.R, C, "blocks.%d.attn.g_proj.0.weight", l);
        p->g_b = params_matrix(t, std, s.HV, s.R, "blocks.%d.attn.g_proj.1.weight", l);
        p->g_bias = params_vector(t, GROUP_BIAS, INIT_ZERO, s.HV, "blocks.%d.attn.g_proj.1.bias", l);
    } else if (s.kind == LINEAR_GDN) {  // full-rank swish output gate
        p->g_w = params_matrix(t, std, s.HV, C, "blocks.%d.attn.g_proj.weight", l);
    }
    p->o_norm = params_vector(t, GROUP_NORM, INIT_ONE, s.V, "blocks.%d.attn.o_norm.weight", l);
    p->o_w = params_matrix(t, params_resid_std(c), C, s.HV, "blocks.%d.attn.o_proj.weight", l);
}

void linear_layout(const Model *m, int l, Carver *cv, Carver *scratch) {
    const ModelConfig *c = &m->cfg;
    LinearActs *a = m->acts.blocks[l].mixer;
    const LinShape s = lin_shape(c, l);
    const size_t N = (size_t)m->max_B * m->max_T, C = c->d_model;
    const size_t HK = s.HK, HV = s.HV, H = s.H, R = s.R, G = (size_t)s.H * s.gate_dim;
    memset(a, 0, sizeof *a);
    // saved for the backward
    a->qp = carve(cv, N * HK);
    a->kp = carve(cv, N * HK);
    a->vp = carve(cv, N * HV);
    if (s.conv) {
        a->q = carve(cv, N * HK);
        a->k = carve(cv, N * HK);
        a->v = carve(cv, N * HV);
        a->q_rstd = carve_stat(cv, N * H);
        a->k_rstd = carve_stat(cv, N * H);
        a->beta = carve(cv, N * H);
    } else {  // L: the op applies its feature map to the raw projections
        a->q = a->qp;
        a->k = a->kp;
        a->v = a->vp;
    }
    if (s.kind == LINEAR_KDA) a->fa = carve(cv, N * R);
    if (G) {
        a->graw = carve(cv, N * G);
        a->g = carve(cv, N * G);
    }
    a->o = carve(cv, N * HV);
    if (s.kind == LINEAR_KDA) a->ga = carve(cv, N * R);
    if (s.kind == LINEAR_KDA || s.kind == LINEAR_GDN) a->z = carve(cv, N * HV);
    a->o_rstd = carve_stat(cv, N * H);
    a->y = carve(cv, N * HV);
    // scratch: forward temporaries and backward gradients
    if (s.conv) {
        a->qc = carve(scratch, N * HK);
        a->kc = carve(scratch, N * HK);
        a->braw = carve(scratch, N * H);
        a->dqc = carve(scratch, N * HK);
        a->dkc = carve(scratch, N * HK);
        a->dqp = carve(scratch, N * HK);
        a->dvp = carve(scratch, N * HV);
        a->dbeta = carve(scratch, N * H);
        a->db = carve(scratch, N * H);
    }
    a->dy = carve(scratch, N * HV);
    a->dout_core = carve(scratch, N * HV);
    if (s.kind == LINEAR_KDA || s.kind == LINEAR_GDN) a->dz = carve(scratch, N * HV);
    if (s.kind == LINEAR_KDA) {
        a->dga = carve(scratch, N * R);
        a->dfa = carve(scratch, N * R);
    }
    a->dq = carve(scratch, N * HK);
    a->dk = carve(scratch, N * HK);
    a->dv = carve(scratch, N * HV);
    if (G) {
        a->dg = carve(scratch, N * G);
        a->dgraw = carve(scratch, N * G);
    }
    a->dx = carve(scratch, N * C);
    // the chunkwise workspace, for up to doc_segment_cap sequences per call (doc_segments.h)
    const Backend *be = m->be;
    const int cap = doc_segment_cap(m->max_B, m->max_T, c->chunk_size), rows = (int)N;
    size_t fwd = be->delta_rule->linear_workspace_size(s.kind, 0, 1, rows, s.H, s.K, s.V, cap, c->chunk_size);
    size_t bwd = be->delta_rule->linear_workspace_size(s.kind, 1, 1, rows, s.H, s.K, s.V, cap, c->chunk_size);
    a->workspace = carve_bytes(scratch, fwd > bwd ? fwd : bwd);
}
