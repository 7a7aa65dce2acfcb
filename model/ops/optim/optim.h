// The optimizer family: the elementwise AdamW update and the Muon update of one matrix
// tensor, on backend memory. optim/optimizer.c drives them (parameter groups, learning
// rates, clipping, ZeRO-1 windows, Muon ownership); the math is in docs/optimizers.md.
//
// CPU reference: model/ops/optim/adamw.c, muon.c (muon.h has the Muon reference API:
// Newton-Schulz and the per-matrix update). CUDA: kernels/optim/. Contracts as every
// family (model/backend.h). Optimizer state (m, v, Muon momentum) and master weights are
// fp32 on every backend. The hyperparameters (lr, betas, eps, weight decay, momentum, the
// clipping factor grad_scale) are `real`: the double build takes them exactly as the
// config's doubles (1 - beta1 is not off by float rounding), the float build (the only one
// with CUDA, whose definitions spell them float) as floats.
#ifndef HYBRID_OPS_OPTIM_H
#define HYBRID_OPS_OPTIM_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/op_table.h"

typedef struct OptimOps {
    // One AdamW step on n elements (Loshchilov & Hutter, with bias correction and decoupled
    // weight decay). For each element, with g = grad * grad_scale and step t >= 1:
    //   m = beta1 * m + (1 - beta1) * g
    //   v = beta2 * v + (1 - beta2) * g^2
    //   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)
    //   param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)
    // master: NULL (update param in place) or, on a backend that keeps_master, the fp32
    // master copy of param (n floats): the step updates master, then param = round(master).
    void (*adamw_update)(real *param, const real *grad, float *m, float *v, float *master, size_t n, real lr,
                         real beta1, real beta2, real eps, real weight_decay, real grad_scale, int t);
    // One Muon step on a (rows, cols) tensor holding n_blocks logical matrices stacked along
    // rows (muon.h has the equations). M is the fp32 momentum; master as for adamw_update;
    // work holds muon_workspace_size(rows / n_blocks, cols) elements. scale_rule: a
    // MuonScaleRule, which picks the update scale and the momentum form together
    // (muon_momentum_form: keller keeps M in KellerJordan/Muon's EMA form, moonlight and
    // none in the sum form).
    void (*muon_update)(real *param, const real *grad, float *M, float *master, int rows, int cols, int n_blocks,
                        real momentum, int nesterov, int ns_steps, int scale_rule, real lr, real weight_decay,
                        real grad_scale, real *work);

    // ---- optional (not in OPTIM_OPS): NULL means one adamw_update per tensor ----
    // adamw_update on n_seg segments of the same buffers at once; segment i covers elements
    // [off[i], off[i] + len[i]) of param, grad, m, v and master (host arrays off, len, lr, wd)
    // with learning rate lr[i] and weight decay wd[i]; the results equal adamw_update's on
    // each segment.
    void (*adamw_update_multi)(real *param, const real *grad, float *m, float *v, float *master, int n_seg,
                               const size_t *off, const size_t *len, const real *lr, const real *wd, real beta1,
                               real beta2, real eps, real grad_scale, int t);
} OptimOps;

#define OPTIM_OPS(X) X(adamw_update) X(muon_update)

#define OPTIM_DECLARE_CPU(member) OP_DECLARE(OptimOps, cpu_, member)
OPTIM_OPS(OPTIM_DECLARE_CPU)
const OptimOps *cpu_optim_ops(void);

#endif
