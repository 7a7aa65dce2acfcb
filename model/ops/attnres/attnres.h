// The Block AttnRes family (docs/hybrid.md, "Block Attention Residuals"): one AttnRes op
// mixes n source tensors per token with a softmax over depth (a pseudo-query w and a key
// RMSNorm weight gamma per op).
// The bookkeeping of which sources each op reads (attnres_plan) is shared by the graph.
//
// CPU reference: model/ops/attnres/attnres.c. CUDA: kernels/attnres/ (ported and
// emulator-verified, tests/gpu/test_attnres.c; not yet handed out to the backend, awaiting its
// GPU run, so attn_res_block > 0 is still refused on --device cuda).
// Contracts as every family (model/backend.h); probs, logits, rstd and work are
// statistics elements (stat_size wide).
#ifndef HYBRID_OPS_ATTNRES_H
#define HYBRID_OPS_ATTNRES_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/op_table.h"

typedef struct AttnResOps {
    // Sources srcs[0..n) each (N, C) (a host array of backend pointers: blocks b_0.. then the
    // partial, as attnres_plan says), pseudo-query w (C) (zero-initialised), norm weight gamma
    // (C) (one-initialised):
    //   q = w * gamma; rho_i = (mean_c V_i^2 + eps)^(-1/2); z_i = rho_i (V_i . q);
    //   p = softmax_i(z); out = sum_i p_i V_i.
    // Saves probs, logits (= z) and rstd (= rho), each (N, n), row-major by token.
    void (*attnres_forward)(real *out, real *probs, real *logits, real *rstd, const real *const *srcs, int n,
                            const real *w, const real *gamma, int N, int C, double eps);
    // pi_i = dout . V_i; dz_i = p_i (pi_i - sum_j p_j pi_j);
    // dV_i = p_i dout + dz_i rho_i q - (dz_i z_i rho_i^2 / C) V_i   -> ACCUMULATED into dsrcs[i]
    //   (a NULL entry skips that source);
    // dq = sum_tokens sum_i dz_i rho_i V_i; dw += dq * gamma; dgamma += dq * w  (accumulated).
    // work: N*n statistics elements of scratch.
    void (*attnres_backward)(real *const *dsrcs, real *dw, real *dgamma, real *work, const real *dout,
                             const real *const *srcs, int n, const real *w, const real *gamma, const real *probs,
                             const real *logits, const real *rstd, int N, int C);
} AttnResOps;

#define ATTNRES_OPS(X) X(attnres_forward) X(attnres_backward)

#define ATTNRES_DECLARE_CPU(member) OP_DECLARE(AttnResOps, cpu_, member)
ATTNRES_OPS(ATTNRES_DECLARE_CPU)
const AttnResOps *cpu_attnres_ops(void);

// Bookkeeping of the K3 layer algorithm (docs/hybrid.md, "Block AttnRes layer algorithm"),
// block size S in decoder layers, 0-indexed layer l. State: sealed blocks b_0, b_1, ... and
// the running partial P (starts as the
// embedding E). For each layer:
//   attention op: sources = b_0 .. b_{n_blocks-1}, then P (has_partial). If `identity`
//     (l = 0), the op is not applied: x_a = E. If `seal`, P is pushed as block b_{n_blocks}
//     AFTER the op reads it, and P becomes empty (the next P is just the mixer output).
//   ffn op: sources = b_0 .. b_{n_blocks-1}, then P (= P before the mixer + mixer output).
//   out op (after the last layer; `layer` ignored): all sealed blocks, then the final P.
// Every version of P that is a source must stay alive until the backward (P_mid and P_out
// of every layer; they are new buffers, not in-place sums).
// Backward (docs/hybrid.md, "AttnRes backward through the stack"): keep dP and one accumulator
// dB_j per block, all zeroed; the out op's backward seeds them. Per layer in reverse: FFN
// backward -> ffn AttnRes backward with
// dsrcs = {dB_0.., dP_mid} where dP_mid starts as a copy of dP_out; mixer backward ->
//   identity (l = 0):  dE = dx_a + dB_0;
//   seal (l % S == 0): attention AttnRes backward with dsrcs = {dB_0 .. dB_{m-1}, dB_m}
//                      (m = n_blocks; the partial it read IS b_m); then dP_in = dB_m;
//   otherwise:         dsrcs = {dB_0 .., dP_in} with dP_in starting as a copy of dP_mid.
// Source counts: attention 1 + l/S at a boundary, else 2 + floor(l/S); ffn 2 + floor(l/S).
typedef enum { ATTNRES_ATTN = 0, ATTNRES_FFN = 1, ATTNRES_OUT = 2 } AttnResSite;
typedef struct {
    int n_blocks;     // sealed blocks b_0 .. b_{n_blocks-1} that are sources
    int has_partial;  // 1: the partial P is the last source
    int n_sources;    // n_blocks + has_partial
    int seal;         // attention site only: after the op, P becomes block b_{n_blocks}
    int identity;     // attention site of layer 0: x_a = E, the op is not run
} AttnResPlan;
AttnResPlan attnres_plan(AttnResSite site, int layer, int block_size, int n_layer);
// Number of blocks sealed over the whole stack: floor((n_layer - 1) / S) + 1.
int attnres_num_blocks(int n_layer, int block_size);

#endif
