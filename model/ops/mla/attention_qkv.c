// Causal softmax attention with separate, strided q, k, v and d_qk != d_v
// (docs/hybrid.md, "MLA forward (decompressed form)", step 3, and "Causal attention with a
// stored logsumexp"). For sequence b, head h, query i, key j <= i:
//   S_ij  = scale q_i . k_j
//   lse_i = log sum_{j<=i} exp(S_ij)                       (saved, (B, NH, T))
//   P_ij  = exp(S_ij - lse_i),   out_i = sum_j P_ij v_j
// Backward (flash style: P recomputed from lse; dO = dout):
//   D_i   = dO_i . out_i                  (= sum_j P_ij dP_ij)
//   dP_ij = dO_i . v_j
//   dS_ij = P_ij (dP_ij - D_i)
//   dq_i  = scale sum_{j<=i} dS_ij k_j
//   dk_j  = scale sum_{i>=j} dS_ij q_i,   dv_j = sum_{i>=j} P_ij dO_i
// The forward is two passes over the keys of a row (row max, then exp/sum/weighted values),
// i.e. the online-softmax recurrence of docs/hybrid.md, "Causal attention with a stored
// logsumexp" with one key per tile and the max known in advance. The backward runs two
// deterministic passes: one thread per query row for dq, one per key row for dk, dv (which
// recomputes D_i; no scratch memory). Scores and sums in double.
#include <math.h>

#include "model/ops/mla/mla.h"
#include "base/util.h"

static inline double dot(const real *a, const real *b, int n) {
    double s = 0.0;
    for (int c = 0; c < n; c++) s += (double)a[c] * b[c];
    return s;
}

static void check_layout(const AttnLayout *L, int backward) {
    if (L->B <= 0 || L->T <= 0 || L->NH <= 0 || L->dqk <= 0 || L->dv <= 0)
        die("attention: bad shape B=%d T=%d NH=%d dqk=%d dv=%d", L->B, L->T, L->NH, L->dqk, L->dv);
    if (backward && L->NH > 1 && (L->q_head == 0 || L->k_head == 0 || L->v_head == 0))
        die("attention backward: a head stride of 0 (shared head) is not supported; materialise the shared part");
}

void cpu_attention_qkv_forward(real *out, real *lse, const real *q, const real *k, const real *v, const AttnLayout *L) {
    check_layout(L, 0);
    const int B = L->B, T = L->T, NH = L->NH, dqk = L->dqk, dv = L->dv;
    const double scale = L->scale;
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                const size_t r0 = (size_t)b * T;  // first row of this sequence
                const real *qi = q + (r0 + i) * L->q_row + (size_t)h * L->q_head;
                // pass 1: row maximum
                double m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    double s = scale * dot(qi, k + (r0 + j) * L->k_row + (size_t)h * L->k_head, dqk);
                    if (s > m) m = s;
                }
                // pass 2: normaliser and weighted sum of values
                double acc[dv];
                for (int c = 0; c < dv; c++) acc[c] = 0.0;
                double sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    double e = exp(scale * dot(qi, k + (r0 + j) * L->k_row + (size_t)h * L->k_head, dqk) - m);
                    const real *vj = v + (r0 + j) * L->v_row + (size_t)h * L->v_head;
                    sum += e;
                    for (int c = 0; c < dv; c++) acc[c] += e * vj[c];
                }
                real *o = out + (r0 + i) * (size_t)NH * dv + (size_t)h * dv;
                for (int c = 0; c < dv; c++) o[c] = (real)(acc[c] / sum);
                lse[((size_t)b * NH + h) * T + i] = (real)(m + log(sum));
            }
        }
    }
}

void cpu_attention_qkv_backward(real *dq, real *dk, real *dv, const real *dout, const real *q, const real *k, const real *v,
                       const real *out, const real *lse, const AttnLayout *L) {
    check_layout(L, 1);
    const int B = L->B, T = L->T, NH = L->NH, dqk = L->dqk, dvh = L->dv;
    const double scale = L->scale;
    const size_t orow = (size_t)NH * dvh;
    // pass 1: dq, one query row per work item
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int i = 0; i < T; i++) {
                const size_t r0 = (size_t)b * T;
                const real *qi = q + (r0 + i) * L->q_row + (size_t)h * L->q_head;
                const real *dOi = dout + (r0 + i) * orow + (size_t)h * dvh;
                const real *Oi = out + (r0 + i) * orow + (size_t)h * dvh;
                double l = lse[((size_t)b * NH + h) * T + i];
                double D = dot(dOi, Oi, dvh);
                double acc[dqk];
                for (int c = 0; c < dqk; c++) acc[c] = 0.0;
                for (int j = 0; j <= i; j++) {
                    const real *kj = k + (r0 + j) * L->k_row + (size_t)h * L->k_head;
                    const real *vj = v + (r0 + j) * L->v_row + (size_t)h * L->v_head;
                    double p = exp(scale * dot(qi, kj, dqk) - l);
                    double ds = p * (dot(dOi, vj, dvh) - D);
                    for (int c = 0; c < dqk; c++) acc[c] += scale * ds * kj[c];
                }
                real *dqi = dq + (r0 + i) * L->q_row + (size_t)h * L->q_head;
                for (int c = 0; c < dqk; c++) dqi[c] = (real)acc[c];
            }
        }
    }
    // pass 2: dk, dv, one key row per work item, queries i >= j in order
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int j = 0; j < T; j++) {
                const size_t r0 = (size_t)b * T;
                const real *kj = k + (r0 + j) * L->k_row + (size_t)h * L->k_head;
                const real *vj = v + (r0 + j) * L->v_row + (size_t)h * L->v_head;
                double ak[dqk], av[dvh];
                for (int c = 0; c < dqk; c++) ak[c] = 0.0;
                for (int c = 0; c < dvh; c++) av[c] = 0.0;
                for (int i = j; i < T; i++) {
                    const real *qi = q + (r0 + i) * L->q_row + (size_t)h * L->q_head;
                    const real *dOi = dout + (r0 + i) * orow + (size_t)h * dvh;
                    const real *Oi = out + (r0 + i) * orow + (size_t)h * dvh;
                    double p = exp(scale * dot(qi, kj, dqk) - lse[((size_t)b * NH + h) * T + i]);
                    double ds = p * (dot(dOi, vj, dvh) - dot(dOi, Oi, dvh));
                    for (int c = 0; c < dvh; c++) av[c] += p * dOi[c];
                    for (int c = 0; c < dqk; c++) ak[c] += scale * ds * qi[c];
                }
                real *dkj = dk + (r0 + j) * L->k_row + (size_t)h * L->k_head;
                real *dvj = dv + (r0 + j) * L->v_row + (size_t)h * L->v_head;
                for (int c = 0; c < dqk; c++) dkj[c] = (real)ak[c];
                for (int c = 0; c < dvh; c++) dvj[c] = (real)av[c];
            }
        }
    }
}
