// The sublayer modules the graph (model.c) strings together, besides the token mixers
// (registered in model/mixer.h). Each module adds its tensors to the parameter table, lays
// out the activations its backward needs, and runs forward and backward through the
// backend table:
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
#include "model_config.h"
#include "params.h"
#include "base/util.h"

struct Model;

// The gated activation of the GLU MLPs (dense, shared and routed experts) as the config
// says. The SiTU constants are rounded to `real`: the precision the build computes in.
static inline GluAct model_glu_act(const ModelConfig *c) {
    GluAct a = {c->mlp == MLP_SITU ? GLU_SITU : GLU_SWIGLU, (real)c->situ_beta, (real)c->situ_linear_beta};
    return a;
}

// din += dout @ w, for an input gradient that already holds another contribution (the
// several projections that read one input); dw (and dbias, may be NULL) accumulated as
// matmul_backward. One op where the backend has matmul_backward_acc, else matmul_backward
// into tmp (N*C) then add_inplace.
static inline void matmul_backward_add(const Backend *be, real *din, real *dw, real *dbias, const real *dout,
                                       const real *inp, const real *w, int N, int C, int OC, real *tmp) {
    if (be->core->matmul_backward_acc) {
        be->core->matmul_backward_acc(din, dw, dbias, dout, inp, w, N, C, OC);
        return;
    }
    be->core->matmul_backward(tmp, dw, dbias, dout, inp, w, N, C, OC);
    be->core->add_inplace(din, tmp, (size_t)N * C);
}

// ---- dense channel mixer: GELU MLP (up, GELU, down) or GLU MLP (w13, SwiGLU/SiTU, down) ----
typedef struct {
    real *in;
    real *h, *act;         // (N,H or 2H) pre-activation, (N,H) activation
    real *dh, *dact;       // scratch
} MlpActs;
void mlp_params(const ModelConfig *c, ParamTable *t, int layer, MlpParams *p);
void mlp_layout(const struct Model *m, Carver *cv, Carver *scratch, MlpActs *a);
void mlp_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void mlp_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);
// The gradient of the down projection's bias (out = ... + b: its gradient is the column sums
// of dout), or NULL without biases (Model.dout_bias_summed)
real *mlp_out_bias_grad(struct Model *m, int layer);

// ---- MoE channel mixer (docs/hybrid.md, "MoE channel mixer"), model/moe.c ----
typedef struct {
    real *in;
    real *logits, *scores, *weights;  // (N, E), (N, E), (N, K)
    int *sel, *perm, *pos, *offsets;  // (N*K) x 3, (E+1)
    real *z;                          // latent input (N, l) (variant B)
    real *xp, *hp, *ap, *yp;          // sorted slot rows: (NK, De), (NK, 2m), (NK, m), (NK, De)
    real *r, *r_n, *rstd_r;           // combined routed output (N, De; NULL in variant A with shared
                                      // experts: the combine adds them into out); latent norm (N, l), (N)
    real *routed;                     // (N, C): W_up r_n (variant B) or r (A)
    real *hs, *as, *shared;           // shared MLP (N, 2Ms), (N, Ms), (N, C)
    long *counts;                     // (E) slots per expert over the current optimizer step
    double aux_loss;                  // this forward's balance loss (0 when off)
    // expert parallel (model/moe_dispatch_ep.h): the exchange's buffers and plan (NULL until
    // model_set_expert_parallel), and the EP group size the last forward ran with (1: local)
    struct MoeEp *ep;
    int ep_last;
    // backward scratch
    real *dyp, *dweights, *dxp, *dhp, *dap, *dr, *dr_n, *dxin, *dscores, *dlogits, *dhs, *das, *dx;  // dxin: dz (B)
} MoeActs;
void moe_params(const ModelConfig *c, ParamTable *t, int layer, MoeParams *p);
void moe_layout(const struct Model *m, Carver *cv, Carver *scratch, MoeActs *a);
void moe_forward(struct Model *m, int layer, real *out, const real *in, int B, int T);
void moe_backward(struct Model *m, int layer, real *din, const real *dout, int B, int T);

// ---- Block AttnRes op (docs/hybrid.md, "Block Attention Residuals"), model/attnres.c ----
// One op mixes its n sources (sealed blocks, then the partial sum) into out.
typedef struct {
    int n;                            // sources
    const real **srcs;                // the n source pointers of the last forward
    real *out, *probs, *logits, *rstd;  // (N, C), (N, n) x 3
} AttnResActs;
// fmt names the op with one %d for the layer (layer < 0: fmt has no %d)
void attnres_params(const ModelConfig *c, ParamTable *t, AttnResParams *p, const char *fmt, int layer);
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
void norm_params(const ModelConfig *c, ParamTable *t, NormParams *p, const char *fmt, int layer);
void norm_layout(const struct Model *m, Carver *cv, NormActs *a);
void norm_forward(struct Model *m, const NormParams *p, NormActs *a, const real *in, int N);
// din written
void norm_backward(struct Model *m, const NormParams *p, const NormActs *a, real *din, const real *dout,
                   const real *in, int N);
// res = x + y (N*C, written), then norm_forward of res: one op where the backend has the
// fused add_layernorm_forward (LayerNorm) or add_rmsnorm_forward (RMSNorm), else
// add_forward then norm_forward
void norm_forward_add(struct Model *m, const NormParams *p, NormActs *a, real *res, const real *x, const real *y,
                      int N);
// dres += d(norm input): one op where the backend has layernorm_backward_add
// (LayerNorm) or rmsnorm_backward_add (RMSNorm), else norm_backward into tmp (N*C) then
// add_inplace. dsum (may be NULL): the gradient of the bias of the layer that reads dres
// next; where the fused LayerNorm op runs, it also adds the column sums of the updated dres
// into dsum, and norm_backward_add returns 1 (0: dsum untouched; that layer sums its dout
// itself)
int norm_backward_add(struct Model *m, const NormParams *p, const NormActs *a, real *dres, const real *dout,
                      const real *in, int N, real *tmp, real *dsum);

#endif
