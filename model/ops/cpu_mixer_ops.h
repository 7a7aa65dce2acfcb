// CPU implementations of the backend entries the K/G/D/L mixers and decoding use
// (model/backend.h): thin wrappers over the linear_ops.h functions, plus the
// single-row attention of the decode KV cache. cpu_backend.c puts them in its table.
#ifndef HYBRID_CPU_MIXER_OPS_H
#define HYBRID_CPU_MIXER_OPS_H

#include <stddef.h>

#include "base/real.h"

// attention_step.c
void cpu_attention_step(real *out, const real *qkv, int T, int C, int NH);

// cpu_linear.c
size_t cpu_linear_workspace_size(int kind, int backward, int B, int T, int H, int K, int V, int nseq, int chunk);
void cpu_delta_chunk_forward(int kind, real *o, real *hT, const real *q, const real *k, const real *v,
                             const real *g, const real *beta, const real *h0, real scale, int B, int T, int H, int K,
                             int V, const int *offsets, int nseq, int chunk, void *workspace);
void cpu_delta_chunk_backward(int kind, real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0,
                              const real *dout, const real *dhT, const real *q, const real *k, const real *v,
                              const real *g, const real *beta, const real *h0, real scale, int B, int T, int H,
                              int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
void cpu_delta_step(int kind, real *o, real *state, const real *q, const real *k, const real *v, const real *g,
                    const real *beta, real scale, int N, int H, int K, int V);
void cpu_linear_attn_chunk_forward(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                                   const real *S0, const real *z0, real scale, int normalize, int B, int T, int H,
                                   int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
void cpu_linear_attn_chunk_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                    const real *dST, const real *dzT, const real *q, const real *k, const real *v,
                                    const real *S0, const real *z0, real scale, int normalize, int B, int T, int H,
                                    int K, int V, const int *offsets, int nseq, int chunk, void *workspace);

#endif
