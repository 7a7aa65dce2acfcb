// The CUDA ops, one function per Backend member (model/backend.h gives each contract).
// Pointers are device memory: bf16 tensors, fp32 statistics. Every op runs on the
// backend's stream and returns without synchronizing, except sum / sum_squares
// (they return a host value).
#ifndef HYBRID_OPS_CUDA_H
#define HYBRID_OPS_CUDA_H

#include <stddef.h>

#include "base/real.h"

// embed.cu
void cuda_embed_forward(real *out, const int *tokens, const real *wte, const real *wpe, int B, int T, int C);
void cuda_embed_backward(real *dwte, real *dwpe, const real *dout, const int *tokens, int B, int T, int C);
// layernorm.cu (also RMSNorm)
void cuda_layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *w, const real *b, int N,
                            int C, real eps);
void cuda_layernorm_backward(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w,
                             const real *mean, const real *rstd, int N, int C);
void cuda_add_layernorm_forward(real *res, real *out, real *mean, real *rstd, const real *a, const real *b,
                                const real *w, const real *bias, int N, int C, real eps);
void cuda_layernorm_backward_add(real *dres, real *dw, real *db, const real *dout, const real *inp, const real *w,
                                 const real *mean, const real *rstd, int N, int C);
void cuda_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C, real eps);
void cuda_rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w, const real *rstd,
                           int N, int C);
// matmul.cu
void cuda_matmul_forward(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC);
void cuda_matmul_backward(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w, int N,
                          int C, int OC);
void cuda_matmul_gelu_forward(real *act, real *pre, const real *inp, const real *w, const real *bias, int N, int C,
                              int OC);
void cuda_matmul_backward_gelu(real *dpre, real *dw, real *dbias, const real *dout, const real *act, const real *w,
                               const real *pre, int N, int C, int OC);
// attention.cu
void cuda_attention_forward(real *out, real *lse, const real *qkv, int B, int T, int C, int NH);
void cuda_attention_backward(real *dqkv, const real *dout, const real *qkv, const real *out, const real *lse, int B,
                             int T, int C, int NH);
// elementwise.cu
void cuda_gelu_forward(real *out, const real *inp, size_t n);
void cuda_gelu_backward(real *dinp, const real *inp, const real *dout, size_t n);
void cuda_glu_forward(real *out, const real *inp, int N, int H, int kind, real beta, real linear_beta);
void cuda_glu_backward(real *dinp, const real *dout, const real *inp, int N, int H, int kind, real beta,
                       real linear_beta);
void cuda_add_forward(real *out, const real *a, const real *b, size_t n);
void cuda_add_inplace(real *acc, const real *x, size_t n);
void cuda_scale(real *x, real s, size_t n);
double cuda_sum(const real *x, size_t n);
double cuda_sum_squares(const real *x, size_t n);
// crossentropy.cu
void cuda_crossentropy_forward(real *losses, const real *logits, const int *targets, int N, int V, int Vp);
void cuda_crossentropy_backward(real *dlogits, const real *logits, const int *targets, real dloss, int N, int V,
                                int Vp);
// optim.cu
void cuda_adamw_update(real *param, const real *grad, float *m, float *v, float *master, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
void cuda_adamw_update_multi(real *param, const real *grad, float *m, float *v, float *master, int n_seg,
                             const size_t *off, const size_t *len, const float *lr, const float *wd, float beta1,
                             float beta2, float eps, float grad_scale, int t);
void cuda_muon_update(real *param, const real *grad, float *M, float *master, int rows, int cols, int n_blocks,
                      float momentum, int nesterov, int ns_steps, int scale_rule, float lr, float weight_decay,
                      float grad_scale, real *work);

#endif
