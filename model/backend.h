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
