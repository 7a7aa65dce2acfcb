// The K (KDA), G (GDN), D (DeltaNet) and L (linear attention) mixers share one layer
// (docs/kda.md; math: docs/delta-rule.md, "Layers") and these private types:
// mixer_linear_params.c (config, parameters, layout), mixer_linear.c (forward, backward,
// the four registry entries), mixer_linear_cached.c (the generation cache and the cached
// forward).
#ifndef HYBRID_MIXER_LINEAR_H
#define HYBRID_MIXER_LINEAR_H

#include <math.h>

#include "model/mixer.h"
#include "model/model.h"

// fla's eps on the sum of squares of q and k (docs/delta-rule.md, "Input transforms: L2
// norm, decay gate and beta")
#define LINEAR_L2NORM_EPS 1e-6

// Indices of the layer's tensors (H heads, key dim K, value dim V, rank R, conv window W);
// -1 where the kind has no such tensor.
typedef struct {
    int q_w, k_w, v_w;           // (H*K, C) (H*K, C) (H*V, C)
    int q_conv, k_conv, v_conv;  // (H*K, 1, W) (H*K, 1, W) (H*V, 1, W)   K G D
    int f_a, f_b;                // (R, C) (H*K, R)  KDA low-rank decay gate
    int a_w;                     // (H, C)           GDN decay gate
    int A_log, dt_bias;          // (H); (H*K) KDA, (H) GDN
    int b_w;                     // (H, C)           beta logits   K G D
    int g_a, g_b, g_bias;        // (R, C) (H*V, R) (H*V)  KDA output gate
    int g_w;                     // (H*V, C)         GDN output gate
    int o_norm;                  // (V) per-head output RMSNorm weight
    int o_w;                     // (C, H*V)
} LinearParams;

// Saved tensors (rows N = B*T). Which exist depends on the kind (NULL otherwise); q, k, v
// are the op inputs (for L: the raw projections, the feature map is inside the op).
typedef struct {
    real *in;
    real *qp, *kp, *vp;          // (N,HK) (N,HK) (N,HV) projections = short-conv inputs (K G D)
    real *q, *k, *v;             // (N,HK) (N,HK) (N,HV) core-op inputs: L2-normalised q, k; v after conv+SiLU
    real *q_rstd, *k_rstd;       // (N*H) L2-norm factors (statistics: carve_stat)
    real *fa, *graw, *g;         // KDA: (N,R) (N,HK) (N,HK); GDN: -, (N,H), (N,H)  gate input, log-decay
    real *beta;                  // (N,H)
    real *o;                     // (N,HV) core output
    real *ga, *z;                // (N,R) KDA; (N,HV) output gate pre-activation (K G)
    real *o_rstd;                // (N*H) output-norm factors (statistics)
    real *y;                     // (N,HV) normed output = o_proj input
    // scratch: forward temporaries and backward gradients; the chunkwise workspace
    real *qc, *kc, *braw;        // forward: conv outputs before the L2 norm, beta logits
    real *dy, *dout_core, *dz, *dga, *dq, *dk, *dv, *dqc, *dkc, *dqp, *dvp, *dg, *dgraw, *dfa, *dbeta, *db, *dx;
    void *workspace;
} LinearActs;

// The generation cache: conv states (D, W-1) of q, k, v (not for L), the state S (H, K, V)
// and, for L, the key sum z (H, K); S and z in statistics elements (fp32 on CUDA). All zero
// at the start of a sequence (docs/delta-rule.md, "Decode steps" and "Short causal
// convolution with SiLU").
typedef struct {
    real *conv_q, *conv_k, *conv_v;
    real *S, *z;
} LinearCache;

typedef struct {
    LinearKind kind;   // the registry entry's variant
    int H, K, V, R, W; // heads, key / value head dims, gate rank, conv window
    int HK, HV;        // H*K, H*V
    int conv;          // K G D: short convs + SiLU, L2-normalised q and k, beta
    int gate_dim;      // log-decay entries per head: K (KDA), 1 (GDN), 0 (D, L)
    real scale;        // K^-1/2 on q (docs/delta-rule.md, "Notation and tensor layout")
    real lower_bound;  // KDA gate form (0 = softplus; docs/delta-rule.md, "Input transforms:
                       // L2 norm, decay gate and beta")
} LinShape;

static inline LinShape lin_shape_of(const ModelConfig *c, LinearKind kind) {
    LinShape s;
    s.kind = kind;
    s.H = c->linear_heads;
    s.K = c->linear_head_dim;
    s.V = c->linear_value_dim;
    s.R = c->gate_rank;
    s.W = c->conv_size;
    s.HK = s.H * s.K;
    s.HV = s.H * s.V;
    s.conv = s.kind != LINEAR_ATTN;
    s.gate_dim = s.kind == LINEAR_KDA ? s.K : s.kind == LINEAR_GDN ? 1 : 0;
    s.scale = (real)(1.0 / sqrt((double)s.K));
    s.lower_bound = s.kind == LINEAR_KDA ? (real)c->kda_gate_lower_bound : 0;
    return s;
}

// The shape of layer l (its mixer's variant is its LinearKind).
static inline LinShape lin_shape(const ModelConfig *c, int layer) {
    return lin_shape_of(c, (LinearKind)mixer_of(c, layer)->variant);
}

// mixer_linear_params.c
const char *linear_config(ModelConfig *c, int used, ConfigOriginFn origin, const char **key);
void linear_params(const ModelConfig *c, ParamTable *t, int layer, void *params);
void linear_layout(const struct Model *m, int layer, Carver *cv, Carver *scratch);
double linear_flops(const ModelConfig *c, int T);

// mixer_linear_cached.c
void linear_cache_init(struct Model *m, int layer, int max_len);
void linear_cache_free(struct Model *m, int layer);
void linear_cache_reset(struct Model *m, int layer);
void linear_forward_cached(struct Model *m, int layer, real *out, const real *in, int n, int pos0);

// Pieces of the layer shared by the training forward (mixer_linear.c) and the cached
// forward (mixer_linear_cached.c), on N rows of the layer's activations:
// projections, decay gate and beta (writes qp kp vp [fa] graw g braw beta) ...
void linear_mixer_inputs(struct Model *m, int layer, const real *in, int N);
// ... q = L2Norm(qc), k = L2Norm(kc) ...
void linear_mixer_qk_norm(struct Model *m, int layer, int N);
// ... and out = W_o (norm(o) [gated]) (writes [ga] [z] o_rstd y, then out).
void linear_mixer_output(struct Model *m, int layer, real *out, const real *in, int N);

#endif
