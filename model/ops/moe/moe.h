// The MoE family (docs/hybrid.md, "MoE channel mixer"): the router with top-k selection, the
// balance loss, dropless dispatch (the sort of token slots by expert, gather, combine), the
// grouped expert GLU MLP, the per-step expert counts and the aux-loss-free bias update. The
// router and latent projections are core matmuls; the shared experts and, in the CPU
// reference, each routed expert are the GLU MLP of norm_glu/glu_mlp.h.
//
// CPU reference: model/ops/moe/*.c. CUDA: kernels/moe/ (ported, emulator-verified by
// tests/gpu/test_moe.c; not yet handed out: awaiting its GPU run, so until then the CUDA
// backend has no MoE family and moe_experts > 0 is refused on --device cuda). Contracts as
// every family (model/backend.h). Slots: token t's j-th routed copy is slot n = t*K + j (j = rank in
// the selection order).
//
// Whole MoE layer (model/moe.c; variant A = (a), latent variant B = (b) of docs/hybrid.md,
// "MoE layer variants"):
//   logits = x W_r^T; router -> sel, weights, scores; plan -> perm, pos, offsets
//   [B: z = x W_down^T (N, l); the routed path below runs on z, width l]
//   xp = gather(x or z); experts -> yp; r = combine(yp, weights)
//   [B: n = RMSNorm_{gamma_lat}(r); routed = n W_up^T]   (A: routed = r)
//   out = routed + shared GLU MLP(x)   (A with shared experts: the combine adds it, `add`).
// Backward: combine_backward -> dyp, dweights; experts_backward -> dxp; gather_backward ->
// dx (A: accumulated into the shared MLP's dx; B: dz); router_weights_backward -> dscores
// [+ aux loss]; router_scores_backward -> dlogits; the matmul backward of W_r; then the sum of
// the dx contributions.
#ifndef HYBRID_OPS_MOE_H
#define HYBRID_OPS_MOE_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/norm_glu/norm_glu.h"
#include "model/ops/op_table.h"

typedef enum { ROUTER_SIGMOID = 0, ROUTER_SOFTMAX = 1 } RouterScoreFn;

typedef struct MoeOps {
    // Router (docs/hybrid.md, "Router forward"), logits (N, E) = x W_r^T:
    //   scores s (N, E) = sigmoid(logits) or softmax_E(logits)          (saved)
    //   selection key a = s + bias (bias (E) may be NULL; it only affects the selection)
    //   sel (N, K): the K experts with the largest a, in decreasing a; ties: lower index wins
    //   weights (N, K): w_j = s[sel_j]; if renorm && K > 1: w_j /= (sum_j s[sel_j] + 1e-20);
    //                   then w_j *= scale (routed_scaling_factor)
    // No group-limited routing (Kimi configs use 1 group).
    void (*router_forward)(int *sel, real *weights, real *scores, const real *logits, const real *bias, int N,
                           int E, int K, RouterScoreFn fn, int renorm, double scale);
    // dweights (N, K) -> dscores (N, E) (written; zero outside the selected experts), with the
    // selection held fixed (docs/hybrid.md, "MoE backward", step 5): S = sum_j s[sel_j] + 1e-20,
    //   renorm: ds[sel_j] = scale/S (dw_j - sum_i dw_i s[sel_i] / S);  else ds[sel_j] = scale dw_j.
    void (*router_weights_backward)(real *dscores, const real *dweights, const real *scores, const int *sel, int N,
                                    int E, int K, int renorm, double scale);
    // dscores (N, E) -> dlogits (N, E) (written), docs/hybrid.md, "MoE backward", step 6:
    //   sigmoid: du = ds s (1 - s);   softmax: du = s (ds - sum_e ds_e s_e).
    // An auxiliary loss adds its dscores before this step. The bias never gets a gradient.
    void (*router_scores_backward)(real *dlogits, const real *dscores, const real *scores, int N, int E,
                                   RouterScoreFn fn);
    // DSV3 complementary sequence-wise balance loss (docs/hybrid.md, "Auxiliary balance
    // losses"; sigmoid router), sequences of L
    // rows (N % L == 0): per sequence s' = s / sum_e s, f_e = E/(K L) * #{t: e in sel_t},
    // P_e = mean_t s'_{t,e}, loss_seq = alpha sum_e f_e P_e; returns the mean over sequences
    // (L = N gives the batch-wise loss; f is a constant). The backward ACCUMULATES
    // dloss * dL/ds into dscores (N, E) (it reaches all E scores), before router_scores_backward.
    double (*moe_aux_loss_forward)(const real *scores, const int *sel, int N, int E, int K, int L, double alpha);
    void (*moe_aux_loss_backward)(real *dscores, const real *scores, const int *sel, int N, int E, int K, int L,
                                  double alpha, double dloss);
    // Dropless dispatch (docs/hybrid.md, "Dropless permutation and grouped expert FFN"):
    // stable counting sort of the N*K slots by expert: offsets (E+1):
    // expert e owns sorted rows [offsets[e], offsets[e+1]); perm (N*K): perm[p] = slot at sorted
    // row p (slots of one expert in increasing slot order); pos (N*K): pos[n] = sorted row of
    // slot n (the inverse of perm). Deterministic. Dies if a sel entry is outside [0, E).
    void (*moe_dispatch_plan)(int *perm, int *pos, int *offsets, const int *sel, int N, int K, int E);
    // xp (N*K, C): xp[p] = x[perm[p] / K]; backward: g[t] = sum_{j<K} dxp[pos[t*K + j]] in j
    // order, then dx[t] = g[t] (written) or, with accumulate, dx[t] += g[t] with g[t] rounded to
    // real first (the same numbers as the gather into a buffer and add_inplace)
    void (*moe_gather_forward)(real *xp, const real *x, const int *perm, int N, int K, int C);
    void (*moe_gather_backward)(real *dx, const real *dxp, const int *pos, int N, int K, int C, int accumulate);
    // r[t] = sum_{j<K} weights[t*K+j] yp[pos[t*K+j]] in j order; out (N, C) = r (written) or, when
    // add (N, C; must not overlap out) is not NULL, r rounded to real + add[t] (the same numbers as
    // the combine into a buffer and add_forward: model/moe.c adds the shared experts so);
    // backward: dyp[pos[n]] = weights[n] dout[t]; dweights[n] = dout[t] . yp[pos[n]] (both written)
    void (*moe_combine_forward)(real *out, const real *yp, const real *weights, const int *pos, const real *add, int N,
                                int K, int C);
    void (*moe_combine_backward)(real *dyp, real *dweights, const real *dout, const real *yp, const real *weights,
                                 const int *pos, int N, int K, int C);
    // Grouped expert GLU MLP over the sorted rows (docs/hybrid.md, "Routed and shared
    // experts" and "Dropless permutation and grouped expert FFN"): expert e maps rows
    // [offsets[e], offsets[e+1]) of xp (width C) with w13 + e*2M*C ([W1_e; W3_e], (2M, C)) and
    // w2 + e*C*M ((C, M)). Saves hp (rows, 2M), ap (rows, M); yp (rows, C); rows = offsets[E].
    void (*moe_experts_forward)(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                                const int *offsets, int E, int C, int M, GluAct act);
    // dxp written; dw13 (E, 2M, C), dw2 (E, C, M) accumulated (an expert with no rows gets
    // exactly nothing added); dhp (rows, 2M) and dap (rows, M) are scratch
    void (*moe_experts_backward)(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                                 const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                                 const int *offsets, int E, int C, int M, GluAct act);
    // counts[e] += slots routed to expert e (counts: E longs, backend memory)
    void (*moe_count)(long *counts, const int *sel, int N, int K, int E);
    // Aux-loss-free balancing (docs/hybrid.md, "Aux-loss-free bias balancing"):
    // bias[e] += rate * sign(mean(counts) - counts[e]), centred so that sum(bias) is
    // unchanged. Outside autograd. master: NULL, or on a backend
    // that keeps_master the fp32 master copy of bias (E floats): the update applies to it,
    // then bias = round(master), as the optimizer's updates do.
    void (*moe_bias_update)(real *bias, float *master, const long *counts, int E, double rate);
} MoeOps;

#define MOE_OPS(X)                                                                                      \
    X(router_forward) X(router_weights_backward) X(router_scores_backward) X(moe_aux_loss_forward)       \
    X(moe_aux_loss_backward) X(moe_dispatch_plan) X(moe_gather_forward) X(moe_gather_backward)          \
    X(moe_combine_forward) X(moe_combine_backward) X(moe_experts_forward) X(moe_experts_backward)       \
    X(moe_count) X(moe_bias_update)

#define MOE_DECLARE_CPU(member) OP_DECLARE(MoeOps, cpu_, member)
MOE_OPS(MOE_DECLARE_CPU)
const MoeOps *cpu_moe_ops(void);

// ---- balance.c: CPU-only parts of the balancing (statistics and the other rules) ----
typedef struct {
    long min, max;
    double mean;           // = total slots / E
    double cv;             // coefficient of variation: population std / mean (0 if mean == 0)
    double max_violation;  // max / mean - 1 (0 if mean == 0)
} MoeLoadStats;
MoeLoadStats moe_load_stats(const long *counts, int E);
// docs/hybrid.md, "Aux-loss-free bias balancing" (DSV3): b_e += gamma sign(mean_c - c_e);
// if center, subtract the mean of the update so that sum_e b_e is unchanged
// (cpu_moe_bias_update uses center = 1).
void cpu_moe_bias_update_sign(real *bias, const long *counts, int E, double gamma, int center);

#endif
