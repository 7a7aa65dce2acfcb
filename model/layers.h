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

#include "carve.h"
#include "config.h"
#include "params.h"

struct Model;

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

#endif
