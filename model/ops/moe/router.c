// MoE router (forward: docs/hybrid.md, "Router forward"; backward: docs/hybrid.md, "MoE
// backward", steps 5-8). Per token t:
//   s = sigmoid(u) or softmax_E(u)                 (u = logits, scores saved)
//   a = s + b                                      (bias b: selection only, no gradient)
//   sel = top-K of a, decreasing; ties -> lower expert index first
//   w_j = s[sel_j]; renorm (K > 1): w_j /= S, S = sum_j s[sel_j] + 1e-20; w_j *= rho
// Backward with the selection fixed:
//   renorm: ds[sel_j] = rho/S (dw_j - sum_i dw_i s[sel_i] / S);  else ds[sel_j] = rho dw_j
//   ds = 0 for unselected experts (the routed path never reaches their logits)
//   sigmoid: du = ds s (1 - s);  softmax: du = s (ds - sum_e ds_e s_e)
// Top-k uses strict '>' scanning experts in index order, so equal keys keep the lower index.
#include <math.h>

#include "model/ops/moe/moe.h"
#include "base/util.h"

#define RENORM_EPS 1e-20

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void cpu_router_forward(int *sel, real *weights, real *scores, const real *logits, const real *bias, int N, int E,
                        int K, RouterScoreFn fn, int renorm, double scale) {
    if (K < 1 || K > E) die("router: top-k %d must be in [1, %d]", K, E);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const real *u = logits + (size_t)t * E;
        real *s = scores + (size_t)t * E;
        if (fn == ROUTER_SOFTMAX) {
            double m = -INFINITY, sum = 0.0;
            for (int e = 0; e < E; e++) m = u[e] > m ? u[e] : m;
            for (int e = 0; e < E; e++) sum += exp(u[e] - m);
            for (int e = 0; e < E; e++) s[e] = (real)(exp(u[e] - m) / sum);
        } else {
            for (int e = 0; e < E; e++) s[e] = (real)sigmoid(u[e]);
        }
        // top-K of the biased key, lower index wins ties
        unsigned char taken[E];
        for (int e = 0; e < E; e++) taken[e] = 0;
        int *st = sel + (size_t)t * K;
        for (int j = 0; j < K; j++) {
            int best = -1;
            double ab = 0.0;
            for (int e = 0; e < E; e++) {
                if (taken[e]) continue;
                double a = (double)s[e] + (bias ? (double)bias[e] : 0.0);
                if (best < 0 || a > ab) best = e, ab = a;
            }
            st[j] = best;
            taken[best] = 1;
        }
        // weights from the unbiased scores
        double S = 0.0;
        for (int j = 0; j < K; j++) S += s[st[j]];
        double f = (renorm && K > 1) ? scale / (S + RENORM_EPS) : scale;
        for (int j = 0; j < K; j++) weights[(size_t)t * K + j] = (real)(f * s[st[j]]);
    }
}

void cpu_router_weights_backward(real *dscores, const real *dweights, const real *scores, const int *sel, int N,
                                 int E, int K, int renorm, double scale) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const real *s = scores + (size_t)t * E, *dw = dweights + (size_t)t * K;
        const int *st = sel + (size_t)t * K;
        real *ds = dscores + (size_t)t * E;
        for (int e = 0; e < E; e++) ds[e] = 0;
        if (renorm && K > 1) {
            double S = RENORM_EPS;
            for (int j = 0; j < K; j++) S += s[st[j]];
            double dot = 0.0;
            for (int j = 0; j < K; j++) dot += (double)dw[j] * s[st[j]];
            for (int j = 0; j < K; j++) ds[st[j]] = (real)(scale / S * (dw[j] - dot / S));
        } else {
            for (int j = 0; j < K; j++) ds[st[j]] = (real)(scale * dw[j]);
        }
    }
}

void cpu_router_scores_backward(real *dlogits, const real *dscores, const real *scores, int N, int E,
                                RouterScoreFn fn) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const real *s = scores + (size_t)t * E, *ds = dscores + (size_t)t * E;
        real *du = dlogits + (size_t)t * E;
        if (fn == ROUTER_SOFTMAX) {
            double dot = 0.0;
            for (int e = 0; e < E; e++) dot += (double)ds[e] * s[e];
            for (int e = 0; e < E; e++) du[e] = (real)(s[e] * (ds[e] - dot));
        } else {
            for (int e = 0; e < E; e++) du[e] = (real)(ds[e] * s[e] * (1.0 - s[e]));
        }
    }
}
