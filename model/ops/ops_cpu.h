// The CPU reference ops (ARCHITECTURE §2): plain loops over `real` (float for
// training, double for the gradient checks). Each declaration has exactly the
// signature of the matching Backend member in model/backend.h, whose comments give
// the semantics: forward writes outputs and saved tensors, backward accumulates (+=)
// into parameter gradients and writes (=) input gradients. No op allocates memory.
// Results never depend on the number of OpenMP threads.
#ifndef HYBRID_OPS_CPU_H
#define HYBRID_OPS_CPU_H

#include <stddef.h>

#include "base/real.h"

// embed.c
void cpu_embed_forward(real *out, const int *tokens, const real *wte, const real *wpe, int B, int T, int C);
void cpu_embed_backward(real *dwte, real *dwpe, const real *dout, const int *tokens, int B, int T, int C);

// layernorm.c
void cpu_layernorm_forward(real *out, real *mean, real *rstd, const real *inp, const real *w, const real *b,
                           int N, int C, real eps);
void cpu_layernorm_backward(real *dinp, real *dw, real *db, const real *dout, const real *inp, const real *w,
                            const real *mean, const real *rstd, int N, int C);

// matmul.c
void cpu_matmul_forward(real *out, const real *inp, const real *w, const real *bias, int N, int C, int OC);
void cpu_matmul_backward(real *dinp, real *dw, real *dbias, const real *dout, const real *inp, const real *w,
                         int N, int C, int OC);

// attention.c
// one causal attention row for one head (attention.c); returns its log-sum-exp
double cpu_attention_row(real *o, const real *base, int i, int C, int hs);
void cpu_attention_forward(real *out, real *lse, const real *qkv, int B, int T, int C, int NH);
void cpu_attention_backward(real *dqkv, const real *dout, const real *qkv, const real *out, const real *lse,
                            int B, int T, int C, int NH);

// gelu.c
void cpu_gelu_forward(real *out, const real *inp, size_t n);
void cpu_gelu_backward(real *dinp, const real *inp, const real *dout, size_t n);

// elementwise.c
void cpu_add_forward(real *out, const real *a, const real *b, size_t n);
void cpu_add_inplace(real *acc, const real *x, size_t n);
double cpu_sum(const real *x, size_t n);
double cpu_sum_squares(const real *x, size_t n);
void cpu_scale(real *x, real s, size_t n);

// crossentropy.c
void cpu_crossentropy_forward(real *losses, const real *logits, const int *targets, int N, int V, int Vp);
void cpu_crossentropy_backward(real *dlogits, const real *logits, const int *targets, real dloss, int N, int V,
                               int Vp);

#endif
