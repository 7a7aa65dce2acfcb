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

#include "real.h"

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
