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
