// MoE load balancing (docs/hybrid.md, "Load balancing") and load statistics.
//  A. sign update (DSV3; docs/hybrid.md, "Aux-loss-free bias balancing"):
//     b_e += gamma sign(mean_c - c_e), optionally centred.
//  B. the sequence-wise auxiliary loss (gradient into the scores; docs/hybrid.md, "Auxiliary
//     balance losses"): per sequence of L tokens, s'_te = s_te / sum_e s_te,
//       f_e = E/(K L) #{t: e in sel_t}, P_e = (1/L) sum_t s'_te, loss = alpha sum_e f_e P_e,
//       averaged over the N/L sequences. With g_e = alpha f_e / (L nseq) (dL/ds'_te):
//       ds_te = (g_e - sum_e' g_e' s'_te') / sum_e' s_te'.
#include <math.h>
#include <stdlib.h>

#include "model/ops/moe/moe.h"
#include "base/util.h"

void cpu_moe_count(long *counts, const int *sel, int N, int K, int E) {
    for (size_t n = 0; n < (size_t)N * K; n++) {
        if (sel[n] < 0 || sel[n] >= E) die("moe: expert index %d out of range [0, %d)", sel[n], E);
        counts[sel[n]]++;
    }
}

MoeLoadStats moe_load_stats(const long *counts, int E) {
    MoeLoadStats st = {0, 0, 0.0, 0.0, 0.0};
    if (E <= 0) return st;
    double sum = 0.0;
    st.min = st.max = counts[0];
    for (int e = 0; e < E; e++) {
        sum += (double)counts[e];
        if (counts[e] < st.min) st.min = counts[e];
        if (counts[e] > st.max) st.max = counts[e];
    }
    st.mean = sum / E;
    if (st.mean > 0) {
        double var = 0.0;
        for (int e = 0; e < E; e++) var += ((double)counts[e] - st.mean) * ((double)counts[e] - st.mean);
        st.cv = sqrt(var / E) / st.mean;
        st.max_violation = (double)st.max / st.mean - 1.0;
    }
    return st;
}

void cpu_moe_bias_update_sign(real *bias, const long *counts, int E, double gamma, int center) {
    double mean = 0.0;
    for (int e = 0; e < E; e++) mean += (double)counts[e];
    mean /= E;
    double upd[E], umean = 0.0;
    for (int e = 0; e < E; e++) {
        double d = mean - (double)counts[e];
        upd[e] = gamma * (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0);
        umean += upd[e];
    }
    umean /= E;
    for (int e = 0; e < E; e++) bias[e] = (real)(bias[e] + upd[e] - (center ? umean : 0.0));
}

double cpu_moe_aux_loss_forward(const real *scores, const int *sel, int N, int E, int K, int L, double alpha) {
    if (L <= 0 || N % L) die("seq aux loss: N = %d is not a multiple of the sequence length %d", N, L);
    int nseq = N / L;
    double total = 0.0;
    for (int q = 0; q < nseq; q++) {
        double cnt[E], P[E];
        for (int e = 0; e < E; e++) cnt[e] = P[e] = 0.0;
        for (int t = q * L; t < (q + 1) * L; t++) {
            const real *s = scores + (size_t)t * E;
            double z = 0.0;
            for (int e = 0; e < E; e++) z += s[e];
            for (int e = 0; e < E; e++) P[e] += s[e] / z / L;
            for (int j = 0; j < K; j++) cnt[sel[(size_t)t * K + j]] += 1.0;
        }
        double l = 0.0;
        for (int e = 0; e < E; e++) l += (double)E / ((double)K * L) * cnt[e] * P[e];
        total += alpha * l;
    }
    return total / nseq;
}

void cpu_moe_aux_loss_backward(real *dscores, const real *scores, const int *sel, int N, int E, int K, int L,
                                   double alpha, double dloss) {
    if (L <= 0 || N % L) die("seq aux loss: N = %d is not a multiple of the sequence length %d", N, L);
    int nseq = N / L;
#pragma omp parallel for schedule(static)
    for (int q = 0; q < nseq; q++) {
        double g[E];
        for (int e = 0; e < E; e++) g[e] = 0.0;
        for (int t = q * L; t < (q + 1) * L; t++)
            for (int j = 0; j < K; j++) g[sel[(size_t)t * K + j]] += 1.0;
        // g_e = dloss alpha f_e / (L nseq)
        for (int e = 0; e < E; e++) g[e] = dloss * alpha * ((double)E / ((double)K * L) * g[e]) / L / nseq;
        for (int t = q * L; t < (q + 1) * L; t++) {
            const real *s = scores + (size_t)t * E;
            real *ds = dscores + (size_t)t * E;
            double z = 0.0, gs = 0.0;
            for (int e = 0; e < E; e++) z += s[e];
            for (int e = 0; e < E; e++) gs += g[e] * s[e] / z;
            for (int e = 0; e < E; e++) ds[e] += (real)((g[e] - gs) / z);
        }
    }
}

void cpu_moe_bias_update(real *bias, float *master, const long *counts, int E, double rate) {
    if (!master) {
        cpu_moe_bias_update_sign(bias, counts, E, rate, 1);
        return;
    }
    real b[E];
    for (int e = 0; e < E; e++) b[e] = (real)master[e];
    cpu_moe_bias_update_sign(b, counts, E, rate, 1);
    for (int e = 0; e < E; e++) bias[e] = (real)(master[e] = (float)b[e]);
}
