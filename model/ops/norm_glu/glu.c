// Gated activations on a (N, 2H) input whose rows are [gate g (H) | up u (H)]; output (N, H).
//
// SwiGLU (docs/hybrid.md, "SwiGLU"): h = silu(g) u, silu(g) = g sigma(g)
//   dg = dh u sigma(g) (1 + g (1 - sigma(g))),  du = dh silu(g)
//
// SiTU (docs/hybrid.md, "SiTU"): h = a(g) c(u),
//   a(g) = beta tanh(g/beta) sigma(g),   c(u) = lbeta tanh(u/lbeta)  (or u if lbeta <= 0)
//   with tau = tanh(g/beta), s = sigma(g), kappa = tanh(u/lbeta):
//   a'(g) = (1 - tau^2) s + beta tau s (1 - s),   c'(u) = 1 - kappa^2 (or 1)
//   dg = dh c(u) a'(g),  du = dh a(g) c'(u)
// All in double; the backward recomputes from the saved input.
#include <math.h>

#include "model/ops/norm_glu/norm_glu.h"
#include "base/util.h"

// numerically stable logistic function
static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void cpu_swiglu_forward(real *out, const real *inp, int N, int H) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *g = inp + (size_t)i * 2 * H, *u = g + H;
        real *h = out + (size_t)i * H;
        for (int c = 0; c < H; c++) h[c] = (real)(g[c] * sigmoid(g[c]) * u[c]);
    }
}

void cpu_swiglu_backward(real *dinp, const real *dout, const real *inp, int N, int H) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *g = inp + (size_t)i * 2 * H, *u = g + H, *dh = dout + (size_t)i * H;
        real *dg = dinp + (size_t)i * 2 * H, *du = dg + H;
        for (int c = 0; c < H; c++) {
            double x = g[c], s = sigmoid(x);
            dg[c] = (real)(dh[c] * u[c] * s * (1.0 + x * (1.0 - s)));
            du[c] = (real)(dh[c] * x * s);
        }
    }
}

void cpu_situ_forward(real *out, const real *inp, int N, int H, double beta, double linear_beta) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *g = inp + (size_t)i * 2 * H, *u = g + H;
        real *h = out + (size_t)i * H;
        for (int c = 0; c < H; c++) {
            double a = beta * tanh(g[c] / beta) * sigmoid(g[c]);
            double cu = linear_beta > 0 ? linear_beta * tanh(u[c] / linear_beta) : (double)u[c];
            h[c] = (real)(a * cu);
        }
    }
}

void cpu_situ_backward(real *dinp, const real *dout, const real *inp, int N, int H, double beta,
                       double linear_beta) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const real *g = inp + (size_t)i * 2 * H, *u = g + H, *dh = dout + (size_t)i * H;
        real *dg = dinp + (size_t)i * 2 * H, *du = dg + H;
        for (int c = 0; c < H; c++) {
            double tau = tanh(g[c] / beta), s = sigmoid(g[c]);
            double a = beta * tau * s;
            double da = (1.0 - tau * tau) * s + beta * tau * s * (1.0 - s);
            double cu, dc;
            if (linear_beta > 0) {
                double kappa = tanh(u[c] / linear_beta);
                cu = linear_beta * kappa;
                dc = 1.0 - kappa * kappa;
            } else {
                cu = u[c];
                dc = 1.0;
            }
            dg[c] = (real)(dh[c] * cu * da);
            du[c] = (real)(dh[c] * a * dc);
        }
    }
}

void cpu_glu_forward(real *out, const real *inp, int N, int H, GluAct act) {
    switch (act.kind) {
    case GLU_SWIGLU: cpu_swiglu_forward(out, inp, N, H); return;
    case GLU_SITU: cpu_situ_forward(out, inp, N, H, act.beta, act.linear_beta); return;
    }
    die("glu: unknown activation kind %d", (int)act.kind);
}

void cpu_glu_backward(real *dinp, const real *dout, const real *inp, int N, int H, GluAct act) {
    switch (act.kind) {
    case GLU_SWIGLU: cpu_swiglu_backward(dinp, dout, inp, N, H); return;
    case GLU_SITU: cpu_situ_backward(dinp, dout, inp, N, H, act.beta, act.linear_beta); return;
    }
    die("glu: unknown activation kind %d", (int)act.kind);
}
