// The backend table (ARCHITECTURE §2). The model graph (model/graph.c) is written
// once and calls every op through this table; the CPU reference (model/ops/) and
// CUDA (kernels/) each fill one.
//
// Contracts shared by all ops:
//  - `X_forward` writes its outputs and whatever its backward needs (named in the
//    signature); it allocates nothing.
//  - `X_backward` ACCUMULATES (+=) into parameter gradients and WRITES (=) input
//    gradients, unless the comment says otherwise.
//  - Pointers are backend memory. The graph never indexes them; it offsets them only
//    through backend_offset() so that a backend may store another element type
//    (the CUDA backend keeps bf16 activations). On the CPU every element is a `real`.
//  - Per-row statistics (norm mean/rstd, attention lse, per-row losses) are
//    `stat_size` bytes each: a `real` on the CPU, fp32 on CUDA (bf16 would lose the
//    precision the backward needs). The graph carves them with carve_stat().
//  - Shapes: N = rows (B*T tokens), C = channels. Weights use PyTorch's (out, in) layout.
#ifndef HYBRID_BACKEND_H
#define HYBRID_BACKEND_H

#include <stddef.h>

#include "attn_layout.h"
#include "base/real.h"

// Which member of the linear-attention family an entry runs (kda-spec §1): the delta
// rule without a decay (DeltaNet), with a per-head scalar decay g (B,T,H) (GDN), or with
// a per-channel decay g (B,T,H,K) (KDA); or plain ELU+1 linear attention.
typedef enum { LINEAR_DELTANET, LINEAR_GDN, LINEAR_KDA, LINEAR_ATTN } LinearKind;

typedef struct Backend {
    const char *name;
    size_t elem_size;  // bytes per activation / parameter element
    size_t stat_size;  // bytes per statistics element (mean, rstd, lse, losses)
    int keeps_master;  // 1: parameters are a rounded copy; the optimizer keeps fp32 master weights

    // ---- memory ----
    void *(*alloc)(size_t bytes);                      // zero-filled
    void (*free)(void *p);
    void (*zero)(real *p, size_t n);
    void (*upload)(real *dst, const float *src, size_t n);    // host fp32 -> backend
    void (*download)(float *dst, const real *src, size_t n);  // backend -> host fp32
    void (*upload_tokens)(int *dst, const int *src, size_t n);
    void (*copy_to_host)(void *dst, const void *src, size_t bytes);    // raw bytes, backend -> host
    void (*copy_from_host)(void *dst, const void *src, size_t bytes);  // raw bytes, host -> backend
    void (*synchronize)(void);

    // ---- ops (forward + backward) ----
    // out[b,t,:] = wte[tok[b,t],:] + (wpe ? wpe[t,:] : 0)
    void (*embed_forward)(real *out, const int *tokens, const real *wte, const real *wpe, int B, int T, int C);
    void (*embed_backward)(real *dwte, real *dwpe, const real *dout, const int *tokens, int B, int T, int C);

    // y = (x - mean) * rstd * w + b  (b may be NULL); saves mean and rstd (N each)
    void (*layernorm_forward)(real *out, real *mean, real *rstd, const real *inp, const real *w, const real *b,
                              int N, int C, real eps);
    void (*layernorm_backward)(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w,
                               const real *mean, const real *rstd, int N, int C);

    // RMSNorm (blocks-spec §5.1): y = x * rstd * w, rstd = (mean x^2 + eps)^-1/2 saved (N)
    void (*rmsnorm_forward)(real *out, real *rstd, const real *inp, const real *w, int N, int C, real eps);
    void (*rmsnorm_backward)(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                             const real *rstd, int N, int C);

    // out (N, OC) = inp (N, C) @ w^T (w is (OC, C)) + bias (OC, may be NULL)
    void (*matmul_forward)(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC);
    // dinp = dout @ w (written); dw += dout^T @ inp; dbias += sum_rows dout (dbias may be NULL)
    void (*matmul_backward)(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w,
                            int N, int C, int OC);

    // Causal multi-head softmax attention on packed qkv (B, T, 3C) laid out [q | k | v],
    // head h using channels h*hs .. (h+1)*hs-1 of each, scale 1/sqrt(hs).
    // out (B, T, C); lse (B, NH, T) = log-sum-exp of each score row, saved for the backward,
    // which recomputes the probabilities from it (flash-attention style).
    void (*attention_forward)(real *out, real *lse, const real *qkv, int B, int T, int C, int NH);
    // dqkv written (B, T, 3C)
    void (*attention_backward)(real *dqkv, const real *dout, const real *qkv, const real *out, const real *lse,
                               int B, int T, int C, int NH);

    // tanh-approximation GELU, elementwise
    void (*gelu_forward)(real *out, const real *inp, size_t n);
    void (*gelu_backward)(real *dinp, const real *inp, const real *dout, size_t n);  // dinp written

    // Gated linear units on inp (N, 2H) = [gate | up] -> out (N, H) (blocks-spec §3, §5.4):
    // kind 0 SwiGLU silu(g) * u; kind 1 SiTU beta tanh(g/beta) sigmoid(g) * c(u) with
    // c(u) = linear_beta tanh(u/linear_beta) (linear_beta <= 0: c(u) = u). dinp written.
    void (*glu_forward)(real *out, const real *inp, int N, int H, int kind, real beta, real linear_beta);
    void (*glu_backward)(real *dinp, const real *dout, const real *inp, int N, int H, int kind, real beta,
                         real linear_beta);

    // out = a + b
    void (*add_forward)(real *out, const real *a, const real *b, size_t n);
    // acc += x  (gradient accumulation along the residual stream)
    void (*add_inplace)(real *acc, const real *x, size_t n);

    // Softmax cross-entropy over rows of logits (N, Vp); only the first V columns are
    // real tokens, the padding columns never win and never count. targets[i] < 0 means
    // "ignore this row" (loss 0, gradient 0).
    void (*crossentropy_forward)(real *losses, const real *logits, const int *targets, int N, int V, int Vp);
    // dlogits (N, Vp) written: (softmax - onehot) * dloss for rows with targets[i] >= 0,
    // 0 for ignored rows; padding columns 0. dlogits may alias logits (in place).
    void (*crossentropy_backward)(real *dlogits, const real *logits, const int *targets, real dloss, int N, int V,
                                  int Vp);

    // ---- hybrid blocks (blocks-spec §1, §2, §4; CPU: model/ops/block_ops.h has the math) ----
    // Causal softmax attention with separate strided q, k, v and d_qk != d_v (§1.3-§1.4),
    // strides in L (attn_layout.h); out (B*T, NH*dv); lse (B, NH, T) saved.
    void (*attention_qkv_forward)(real *out, real *lse, const real *q, const real *k, const real *v,
                                  const AttnLayout *L);
    // dq, dk, dv written with the strides of q, k, v (only the addressed elements)
    void (*attention_qkv_backward)(real *dq, real *dk, real *dv, const real *dout, const real *q, const real *k,
                                   const real *v, const real *out, const real *lse, const AttnLayout *L);
    // RoPE, interleaved pairs (§1.6): rotates the d-wide slice at x + r*row + h*head of row
    // r = b*T + t (heads h < NH) by (pos0 + t) * base^(-2i/d). In place allowed.
    void (*rope_forward)(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                         double base);
    void (*rope_backward)(real *dinp, const real *dout, int B, int T, int NH, int d, int row, int head, int pos0,
                          double base);  // dinp written (the inverse rotation)
    // MLA (§1.3): kv (N, r+dr) = [c | kr] -> c, kr; backward: dkv = [dc | dkr] (written; a concatenation)
    void (*mla_split_kv_forward)(real *c, real *kr, const real *kv, int N, int r, int dr);
    void (*mla_split_kv_backward)(real *dkv, const real *dc, const real *dkr, int N, int r, int dr);
    // k (N, NH, dn+dr) = per head [e_h[0:dn] | kr] (kr shared by all heads) from e (N, NH, dn+dv);
    // backward writes the k_nope columns of de (not the v columns) and dkr = sum over heads
    void (*mla_build_k_forward)(real *k, const real *e, const real *kr, int N, int NH, int dn, int dv, int dr);
    void (*mla_build_k_backward)(real *de, real *dkr, const real *dk, int N, int NH, int dn, int dv, int dr);
    // Absorbed (MQA-style) attention for decoding from the latent cache (§1.7): cache (Tc, r+dr)
    // rows [chat_t | kr_t]; q (Nq, NH*(dn+dr)) for positions Tc-Nq .. Tc-1; w_kvb = kv_b_proj;
    // out (Nq, NH*dv) equals the decompressed attention output. Forward only.
    void (*mla_absorbed_attention)(real *out, const real *q, const real *cache, const real *w_kvb, int Nq, int Tc,
                                   int NH, int dn, int dr, int dv, int r, double scale);
    // Sigmoid output gate (§5.7): y = o * sigmoid(z); backward writes do and dz
    void (*sigmoid_gate_forward)(real *y, const real *o, const real *z, size_t n);
    void (*sigmoid_gate_backward)(real *d_o, real *dz, const real *dy, const real *o, const real *z, size_t n);

    // MoE router (§2.2): scores = sigmoid(logits) (score_fn 0) or softmax (1), (N, E) saved;
    // sel (N, K) = top-K of scores + bias (bias: selection only, may be NULL), ties to the lower
    // index; weights (N, K) = scores[sel], renormalised over the K (renorm) and times scale.
    void (*router_forward)(int *sel, real *weights, real *scores, const real *logits, const real *bias, int N,
                           int E, int K, int score_fn, int renorm, double scale);
    // dweights (N, K) -> dscores (N, E) written, selection fixed (§2.5 step 5)
    void (*router_weights_backward)(real *dscores, const real *dweights, const real *scores, const int *sel, int N,
                                    int E, int K, int renorm, double scale);
    // dscores -> dlogits (N, E) written (§2.5 step 6)
    void (*router_scores_backward)(real *dlogits, const real *dscores, const real *scores, int N, int E,
                                   int score_fn);
    // DSV3 complementary sequence-wise balance loss (§2.6 C, sigmoid router), sequences of L
    // rows: returns the loss (mean over sequences); backward ACCUMULATES dloss * dL/dscores.
    double (*moe_aux_loss_forward)(const real *scores, const int *sel, int N, int E, int K, int L, double alpha);
    void (*moe_aux_loss_backward)(real *dscores, const real *scores, const int *sel, int N, int E, int K, int L,
                                  double alpha, double dloss);
    // Dropless dispatch (§2.7): stable sort of the N*K slots by expert -> perm, pos (N*K) and
    // offsets (E+1) (expert e owns sorted rows offsets[e] .. offsets[e+1]-1)
    void (*moe_dispatch_plan)(int *perm, int *pos, int *offsets, const int *sel, int N, int K, int E);
    // xp[p] = x[perm[p] / K]; backward: dx[t] = sum_j dxp[pos[t*K+j]] (written)
    void (*moe_gather_forward)(real *xp, const real *x, const int *perm, int N, int K, int C);
    void (*moe_gather_backward)(real *dx, const real *dxp, const int *pos, int N, int K, int C);
    // out[t] = sum_j weights[t*K+j] yp[pos[t*K+j]]; backward writes dyp and dweights
    void (*moe_combine_forward)(real *out, const real *yp, const real *weights, const int *pos, int N, int K, int C);
    void (*moe_combine_backward)(real *dyp, real *dweights, const real *dout, const real *yp, const real *weights,
                                 const int *pos, int N, int K, int C);
    // Grouped GLU expert FFN over the sorted rows (§2.3, §2.7): expert e maps rows
    // offsets[e].. of xp (width C) with w13 + e*2M*C ([W1_e; W3_e], (2M, C)) and w2 + e*C*M
    // ((C, M)); kind/beta/linear_beta as glu_forward. Saves hp (rows, 2M), ap (rows, M).
    void (*moe_experts_forward)(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                                const int *offsets, int E, int C, int M, int kind, real beta, real linear_beta);
    // dxp written; dw13, dw2 accumulated (an expert with no rows gets nothing); dhp (rows, 2M)
    // and dap (rows, M) are scratch
    void (*moe_experts_backward)(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                                 const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                                 const int *offsets, int E, int C, int M, int kind, real beta, real linear_beta);
    // counts[e] += slots routed to expert e (counts: E longs, backend memory)
    void (*moe_count)(long *counts, const int *sel, int N, int K, int E);
    // Aux-loss-free balancing (§2.6 A): bias[e] += rate * sign(mean(counts) - counts[e]),
    // centred so that sum(bias) is unchanged. Outside autograd. master: NULL, or on a backend
    // that keeps_master the fp32 master copy of bias (E floats): the update applies to it,
    // then bias = round(master), as adamw_update does.
    void (*moe_bias_update)(real *bias, float *master, const long *counts, int E, double rate);

    // Block AttnRes op (§4.4-4.5): out = sum_i softmax_i(rstd_i (V_i . (w*gamma))) V_i over the
    // n sources srcs[i] (N, C) (a host array of backend pointers); saves probs, logits, rstd (N, n).
    void (*attnres_forward)(real *out, real *probs, real *logits, real *rstd, const real *const *srcs, int n,
                            const real *w, const real *gamma, int N, int C, double eps);
    // dsrcs[i] (N, C) ACCUMULATED (NULL skips a source); dw, dgamma accumulated; work: N*n
    // statistics elements (probs, logits, rstd and work are stat_size wide)
    void (*attnres_backward)(real *const *dsrcs, real *dw, real *dgamma, real *work, const real *dout,
                             const real *const *srcs, int n, const real *w, const real *gamma, const real *probs,
                             const real *logits, const real *rstd, int N, int C);

    // Decode: causal attention of the LAST row only. qkv (T, 3C) holds the rows of one
    // sequence (a KV cache); out (C) = attention_forward's row T-1 for the same qkv.
    void (*attention_step)(real *out, const real *qkv, int T, int C, int NH);

    // ---- linear-attention mixers K/G/D/L (kda-spec §1-§5; the CPU math and every
    //      layout are documented in model/ops/linear_ops.h) ----
    // Tokens are the flattened B*T rows. offsets == NULL: B sequences of T tokens; else
    // B == 1 and offsets (backend memory, nseq+1 ints) cut the T axis into nseq sequences
    // (cu_seqlens). States reset at every sequence start (h0 == NULL: zero state).
    // Workspace bytes of the chunkwise forward (backward 0) or backward (1) for up to nseq
    // sequences over B*T tokens (kind: LinearKind).
    size_t (*linear_workspace_size)(int kind, int backward, int B, int T, int H, int K, int V, int nseq, int chunk);
    // Chunkwise delta rule (§3, §4), kind LINEAR_DELTANET/GDN/KDA (g ignored for DeltaNet):
    // q, k (B,T,H,K) L2-normalised; v, o (B,T,H,V); beta (B,T,H); h0, hT (N,H,K,V) or NULL.
    void (*delta_chunk_forward)(int kind, real *o, real *hT, const real *q, const real *k, const real *v,
                                const real *g, const real *beta, const real *h0, real scale, int B, int T, int H,
                                int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
    // dq, dk, dv, dg, dbeta written (dg NULL for DeltaNet); dh0 (may be NULL) written.
    void (*delta_chunk_backward)(int kind, real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0,
                                 const real *dout, const real *dhT, const real *q, const real *k, const real *v,
                                 const real *g, const real *beta, const real *h0, real scale, int B, int T, int H,
                                 int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
    // One decode token for N sequences: q, k, g (N,H,K) [GDN g (N,H)], v, o (N,H,V),
    // beta (N,H); state (N,H,K,V) updated in place (§1.4 recurrence). The state is kept
    // in statistics elements (stat_size: fp32 on CUDA, ARCHITECTURE §2).
    void (*delta_step)(int kind, real *o, real *state, const real *q, const real *k, const real *v, const real *g,
                       const real *beta, real scale, int N, int H, int K, int V);
    // Plain ELU+1 linear attention (§1.1, §3.8, §4.10), q and k raw (feature map inside);
    // state (S (N,H,K,V), z (N,H,K), statistics elements as delta_step's); z unused when
    // normalize == 0.
    void (*linear_attn_chunk_forward)(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                                      const real *S0, const real *z0, real scale, int normalize, int B, int T, int H,
                                      int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
    void (*linear_attn_chunk_backward)(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                       const real *dST, const real *dzT, const real *q, const real *k,
                                       const real *v, const real *S0, const real *z0, real scale, int normalize,
                                       int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
                                       void *workspace);
    void (*linear_attn_step)(real *o, real *S, real *z, const real *q, const real *k, const real *v, real scale,
                             int normalize, int N, int H, int K, int V);
    // Causal depthwise short conv (+ SiLU) over (B,T,D), weight (D,W), bias (D) or NULL,
    // conv state (N,D,W-1) = the W-1 inputs before each sequence (§5.1).
    void (*short_conv_forward)(real *y, real *state_out, const real *x, const real *w, const real *bias,
                               const real *state_in, int B, int T, int D, int W, const int *offsets, int nseq,
                               int silu);
    // dx, dstate_in written; dw, dbias accumulated
    void (*short_conv_backward)(real *dx, real *dw, real *dbias, real *dstate_in, const real *dy,
                                const real *dstate_out, const real *x, const real *w, const real *bias,
                                const real *state_in, int B, int T, int D, int W, const int *offsets, int nseq,
                                int silu);
    void (*short_conv_step)(real *y, real *state, const real *x, const real *w, const real *bias, int N, int D,
                            int W, int silu);
    // y = x / sqrt(sum x^2 + eps) per row of D; rstd (rows, statistics) saved (§1.4, §2.2)
    void (*l2norm_forward)(real *y, real *rstd, const real *x, size_t rows, int D, real eps);
    void (*l2norm_backward)(real *dx, const real *dy, const real *y, const real *rstd, size_t rows, int D);
    // decay gate over x (N,H,K): lower_bound 0: g = -exp(A_log[h]) softplus(x + dt_bias[h,i]);
    // lower_bound < 0: g = lb sigmoid(exp(A_log[h]) (x + dt_bias[h,i])). dx written;
    // dA_log (H), ddt_bias (H*K) accumulated (§2.2).
    void (*decay_gate_forward)(real *g, const real *x, const real *A_log, const real *dt_bias, size_t N, int H,
                               int K, real lower_bound);
    void (*decay_gate_backward)(real *dx, real *dA_log, real *ddt_bias, const real *dg, const real *x,
                                const real *A_log, const real *dt_bias, size_t N, int H, int K, real lower_bound);
    // beta = sigmoid(b) (x2 with neg_eigval); db written
    void (*beta_forward)(real *beta, const real *b, size_t n, int neg_eigval);
    void (*beta_backward)(real *db, const real *dbeta, const real *beta, size_t n, int neg_eigval);
    // per-row gated RMSNorm (§5.2): y = x r w act(z), act = sigmoid or swish; rstd
    // (rows, statistics) saved;
    // dx, dz written, dw accumulated
    void (*gated_rmsnorm_forward)(real *y, real *rstd, const real *x, const real *z, const real *w, size_t rows,
                                  int D, real eps, int swish);
    void (*gated_rmsnorm_backward)(real *dx, real *dz, real *dw, const real *dy, const real *x, const real *z,
                                   const real *w, const real *rstd, size_t rows, int D, int swish);
    // ---- optional fused ops: NULL means the graph runs the separate ops ----
    // act = gelu(pre), pre = inp @ w^T + bias (bias may be NULL): matmul_forward then
    // gelu_forward, in one go (both act and pre written)
    void (*matmul_gelu_forward)(real *act, real *pre, const real *inp, const real *w, const real *bias, int N, int C,
                                int OC);
    // matmul_backward of a layer whose input is act = gelu(pre), with gelu_backward folded
    // in: dpre = (dout @ w) * gelu'(pre) (written), dw += dout^T @ act, dbias += sum_rows dout
    void (*matmul_backward_gelu)(real *dpre, real *dw, real *dbias, const real *dout, const real *act, const real *w,
                                 const real *pre, int N, int C, int OC);

    // res = a + b (written, n = N*C), then layernorm_forward(out, mean, rstd, res, w, bias)
    // in one pass (the norm sees res as stored)
    void (*add_layernorm_forward)(real *res, real *out, real *mean, real *rstd, const real *a, const real *b,
                                  const real *w, const real *bias, int N, int C, real eps);
    // layernorm_backward with the input gradient ACCUMULATED into dres (the residual
    // stream's gradient): dres += dinp; dw, db accumulated as layernorm_backward
    void (*layernorm_backward_add)(real *dres, real *dw, real *db, const real *dout, const real *inp, const real *w,
                                   const real *mean, const real *rstd, int N, int C);

    // ---- optimizer ----
    // Accumulated in double: sum of a statistics buffer (stat_size elements: the
    // per-row losses), and sum of squares of elements (elem_size: the gradients, for
    // the global norm).
    double (*sum)(const real *x, size_t n);
    double (*sum_squares)(const real *x, size_t n);
    // x *= s
    void (*scale)(real *x, real s, size_t n);
    // One AdamW step on n elements (optim/adamw.c has the equations). grad_scale
    // multiplies the gradient first (clipping); step t >= 1 drives bias correction.
    // master: NULL (update param in place) or, on a backend that keeps_master, the fp32
    // master copy of param (n floats): the step updates master, then param = round(master).
    void (*adamw_update)(real *param, const real *grad, float *m, float *v, float *master, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
    // Optional (NULL: one adamw_update per tensor): adamw_update on n_seg segments of the
    // same buffers at once; segment i covers elements [off[i], off[i] + len[i]) of param,
    // grad, m, v and master (host arrays off, len, lr, wd) with learning rate lr[i] and
    // weight decay wd[i]; the results equal adamw_update's on each segment.
    void (*adamw_update_multi)(real *param, const real *grad, float *m, float *v, float *master, int n_seg,
                               const size_t *off, const size_t *len, const float *lr, const float *wd, float beta1,
                               float beta2, float eps, float grad_scale, int t);
    // One Muon step on a (rows, cols) tensor holding n_blocks logical matrices stacked
    // along rows (optim/muon.h has the equations). M is the fp32 momentum; master as for
    // adamw_update; work holds muon_workspace_size(rows / n_blocks, cols) elements.
    // scale_rule: MuonScaleRule.
    void (*muon_update)(real *param, const real *grad, float *M, float *master, int rows, int cols, int n_blocks,
                        float momentum, int nesterov, int ns_steps, int scale_rule, float lr, float weight_decay,
                        float grad_scale, real *work);
} Backend;

// ptr advanced by n elements of the backend's element type
static inline real *backend_offset(const Backend *be, const real *ptr, size_t n) {
    return (real *)((char *)ptr + n * be->elem_size);
}

// The CPU reference backend (model/ops/cpu_backend.c).
const Backend *backend_cpu(void);

#ifdef HAVE_CUDA
// The CUDA backend (kernels/): bf16 parameters and activations, fp32 statistics,
// optimizer state and master weights. Dies if no CUDA device is usable.
const Backend *backend_cuda(void);
#endif

#endif
