// The sublayer modules the graph (model.c) strings together. Each module adds its
// tensors to the parameter table, lays out the activations its backward needs, and
// runs forward and backward through the backend table:
//   X_params(c, t, layer, &params)        add tensors to the table
//   X_layout(m, cv, scratch, &acts)       carve saved activations (cv) and backward
//                                         scratch (scratch: shared by all layers)
//   X_forward(m, layer, out, in, B, T)    out = X(in)          (out written)
//   X_backward(m, layer, din, dout, B, T) din = dX/din^T dout  (din written; parameter
//                                         gradients accumulated)
// `in` is the normalised residual stream; the residual adds live in model.c.
#ifndef HYBRID_LAYERS_H
#define HYBRID_LAYERS_H

#include "base/carve.h"
#include "model/backend.h"
#include "config.h"
#include "params.h"
#include "base/util.h"

struct Model;

// The gated activation of the GLU MLPs (dense, shared and routed experts) as the config
// says. The SiTU constants are rounded to `real`: the precision the build computes in.
static inline GluAct model_glu_act(const Config *c) {
    GluAct a = {c->mlp == MLP_SITU ? GLU_SITU : GLU_SWIGLU, (real)c->situ_beta, (real)c->situ_linear_beta};
    return a;
}

// ---- A: causal softmax multi-head attention (GPT-2) ----
typedef struct {
    real *in;              // the normalised input (saved by the caller, pointer kept)
    real *qkv, *y, *lse;   // (N,3C) (N,C) (B,NH,T)
    real *dqkv, *dy;       // scratch
} AttnActs;
void attn_params(const Config *c, ParamTable *t, int layer, AttnParams *p);
void attn_layout(const struct Model *m, Carver *cv, Carver *scratch, AttnActs *a);
void attn_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void attn_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);

// ---- K (KDA), G (GDN), D (DeltaNet), L (linear attention): kda-spec §5 (model/mixer_linear*.c) ----
// Saved tensors (rows N = B*T; H heads, key dim K, value dim V, rank R). Which exist
// depends on the kind (NULL otherwise); q, k, v are the op inputs (for L: the raw
// projections, the feature map is inside the op).
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
void linear_params(const Config *c, ParamTable *t, int layer, LinearParams *p);
void linear_layout(const struct Model *m, int layer, Carver *cv, Carver *scratch, LinearActs *a);
void linear_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void linear_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);

// Sequence boundaries of the K/G/D/L mixers over the flattened B*T rows
// (model/linear_segments.c). Without reset_at_eot every batch row is one sequence
// (offsets NULL); with it, a new sequence also starts after every eot_token. The
// chunkwise workspaces are sized for `cap` sequences per call: a batch with more is
// run as consecutive groups of at most `cap` sequences (rebased offsets per group).
typedef struct {
    int active;                  // reset_at_eot and some K/G/D/L layer
    int cap;                     // sequences per chunkwise call
    int nseq, ngroups;           // of the last forward
    int *offsets;                // backend memory (N+1): the nseq+1 offsets (short convs)
    int *group_offsets;          // backend memory (2N+2): group g's rebased offsets at first[g] + g
    int *host;                   // host (N+1 + 2N+2 + N+2): offsets, group offsets, first
    int *host_group, *first;     // views into host
} LinearSegments;
void linear_segments_layout(struct Model *m, Carver *cv);
// From the host input ids of a forward (B rows of T)
void linear_segments_build(struct Model *m, const int *inputs, int B, int T);
void linear_segments_free(LinearSegments *s);

// ---- dense channel mixer: GELU MLP (up, GELU, down) or GLU MLP (w13, SwiGLU/SiTU, down) ----
typedef struct {
    real *in;
    real *h, *act;         // (N,H or 2H) pre-activation, (N,H) activation
    real *dh, *dact;       // scratch
} MlpActs;
void mlp_params(const Config *c, ParamTable *t, int layer, MlpParams *p);
void mlp_layout(const struct Model *m, Carver *cv, Carver *scratch, MlpActs *a);
void mlp_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void mlp_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);

// ---- M: MLA, Multi-head Latent Attention (blocks-spec §1), model/mixer_mla.c ----
// Training/prefill uses the decompressed form (§1.3); in cached mode (model_forward_cached) the
// latent cache [chat | k_rope] is extended and attention runs in the absorbed form (§1.7).
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
    real *cache;              // cached mode: (max_T, r+dr) rows [chat_t | kr_t]
    // backward scratch
    real *du, *d_o, *dz, *dq, *dk, *de, *dkr, *dc_n, *dc, *dkv, *daq_n, *daq, *dx;
} MlaActs;
void mla_params(const Config *c, ParamTable *t, int layer, MlaParams *p);
void mla_layout(const struct Model *m, Carver *cv, Carver *scratch, MlaActs *a);
void mla_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void mla_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);
double mla_mixer_flops(const Config *c);  // 3*T*H*(dqk + dv), §6.6

// ---- MoE channel mixer (blocks-spec §2), model/moe.c ----
typedef struct {
    real *in;
    real *logits, *scores, *weights;  // (N, E), (N, E), (N, K)
    int *sel, *perm, *pos, *offsets;  // (N*K) x 3, (E+1)
    real *z;                          // latent input (N, l) (variant B)
    real *xp, *hp, *ap, *yp;          // sorted slot rows: (NK, De), (NK, 2m), (NK, m), (NK, De)
    real *r, *r_n, *rstd_r;           // combined routed output (N, De); latent norm (N, l), (N)
    real *routed;                     // (N, C): W_up r_n (variant B) or r (A)
    real *hs, *as, *shared;           // shared MLP (N, 2Ms), (N, Ms), (N, C)
    long *counts;                     // (E) slots per expert over the current optimizer step
    double aux_loss;                  // this forward's balance loss (0 when off)
    // expert parallel (model/moe_dispatch_ep.h): the exchange's buffers and plan (NULL until
    // model_set_expert_parallel), and the EP group size the last forward ran with (1: local)
    struct MoeEp *ep;
    int ep_last;
    // backward scratch
    real *dyp, *dweights, *dxp, *dhp, *dap, *dr, *dr_n, *dxin, *dscores, *dlogits, *dhs, *das, *dx;
} MoeActs;
void moe_params(const Config *c, ParamTable *t, int layer, MoeParams *p);
void moe_layout(const struct Model *m, Carver *cv, Carver *scratch, MoeActs *a);
void moe_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void moe_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);

// ---- Block AttnRes op (blocks-spec §4), model/attnres.c ----
// One op mixes its n sources (sealed blocks, then the partial sum) into out.
typedef struct {
    int n;                            // sources
    const real **srcs;                // the n source pointers of the last forward
    real *out, *probs, *logits, *rstd;  // (N, C), (N, n) x 3
} AttnResActs;
// fmt names the op with one %d for the layer (layer < 0: fmt has no %d)
void attnres_params(const Config *c, ParamTable *t, AttnResParams *p, const char *fmt, int layer);
// carves the op's tensors for n sources (and its host pointer list once cv has a base)
void attnres_layout(const struct Model *m, Carver *cv, AttnResActs *a, int n);
void attnres_free(AttnResActs *a);
// out = AttnRes(srcs[0..n)) (n = the layout's n)
void attnres_forward(struct Model *m, const AttnResParams *p, AttnResActs *a, const real *const *srcs, int N);
// dsrcs[i] += the gradient of each source (NULL skips one); parameter gradients accumulated
void attnres_backward(struct Model *m, const AttnResParams *p, const AttnResActs *a, real *const *dsrcs,
                      const real *dout, int N);

// ---- norms: layernorm or rmsnorm, as the config says ----
typedef struct {
    real *out, *mean, *rstd;  // (N,C) (N) (N); mean unused by rmsnorm
} NormActs;
// fmt names the norm with one %d for the layer (layer < 0: fmt has no %d)
void norm_params(const Config *c, ParamTable *t, NormParams *p, const char *fmt, int layer);
void norm_layout(const struct Model *m, Carver *cv, NormActs *a);
void norm_forward(struct Model *m, const NormParams *p, NormActs *a, const real *in, int N);
// din written
void norm_backward(struct Model *m, const NormParams *p, const NormActs *a, real *din, const real *dout,
                   const real *in, int N);
// res = x + y (N*C, written), then norm_forward of res: one op where the backend has the
// fused add_layernorm_forward (LayerNorm), else add_forward then norm_forward
void norm_forward_add(struct Model *m, const NormParams *p, NormActs *a, real *res, const real *x, const real *y,
                      int N);
// dres += d(norm input): one op where the backend has layernorm_backward_add
// (LayerNorm), else norm_backward into tmp (N*C) then add_inplace
void norm_backward_add(struct Model *m, const NormParams *p, const NormActs *a, real *dres, const real *dout,
                       const real *in, int N, real *tmp);

#endif
