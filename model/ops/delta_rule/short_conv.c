// Causal depthwise short convolution + SiLU (docs/delta-rule.md, "Short causal convolution
// with SiLU"), forward, backward and the decode step, with an incoming / outgoing conv
// state of the last W-1 inputs.
#include <string.h>

#include "model/ops/delta_rule/internal.h"
#include "base/util.h"

static void conv_check(int B, int T, int D, int W, const int *offsets, int nseq, const char *op) {
    if (D < 1 || W < 1) die("%s: bad D=%d W=%d", op, D, W);
    LinearDims d = {B, T, 1, 1, 1, offsets, nseq};  // reuse the sequence checks
    lin_check_dims(&d, op);
}

// Input of channel c at local time tau (may be negative: then from the incoming state).
static inline double conv_x(const real *x, const real *state_in, size_t bos, int tau, int s, int c, int D, int W) {
    if (tau >= 0) return (double)x[(bos + (size_t)tau) * D + c];
    if (!state_in) return 0.0;
    return (double)state_in[((size_t)s * D + c) * (W - 1) + (tau + W - 1)];
}

// pre-activation a[t][c] = bias[c] + sum_j w[c][j] x[t-(W-1)+j][c]
static inline double conv_pre(const real *x, const real *w, const real *bias, const real *state_in, size_t bos,
                              int t, int s, int c, int D, int W) {
    double a = bias ? (double)bias[c] : 0.0;
    for (int j = 0; j < W; j++) a += (double)w[(size_t)c * W + j] * conv_x(x, state_in, bos, t - (W - 1) + j, s, c, D, W);
    return a;
}

void cpu_short_conv_forward(real *y, real *state_out, const real *x, const real *w, const real *bias,
                            const real *state_in, int B, int T, int D, int W, const int *offsets, int nseq,
                            int silu) {
    conv_check(B, T, D, W, offsets, nseq, "cpu_short_conv_forward");
    LinearDims d = {B, T, 1, 1, 1, offsets, nseq};
    const int N = linear_num_seqs(&d);
#pragma omp parallel for schedule(static)
    for (int sc = 0; sc < N * D; sc++) {
        const int s = sc / D, c = sc % D;
        size_t bos;
        int len;
        lin_seq(&d, s, &bos, &len);
        for (int t = 0; t < len; t++) {
            const double a = conv_pre(x, w, bias, state_in, bos, t, s, c, D, W);
            y[(bos + (size_t)t) * D + c] = (real)(silu ? a * lin_sigmoid(a) : a);
        }
        if (state_out)  // the last W-1 inputs, oldest first
            for (int m = 0; m < W - 1; m++)
                state_out[((size_t)s * D + c) * (W - 1) + m] =
                    (real)conv_x(x, state_in, bos, len - (W - 1) + m, s, c, D, W);
    }
}

// dL/da at local time t (0 <= t < len): dy ⊙ SiLU'(a) = dy ⊙ sigma(a)(1 + a(1 - sigma(a)))
static inline double conv_da(const real *dy, const real *x, const real *w, const real *bias, const real *state_in,
                             size_t bos, int t, int s, int c, int D, int W, int silu) {
    double da = (double)dy[(bos + (size_t)t) * D + c];
    if (silu) {
        const double a = conv_pre(x, w, bias, state_in, bos, t, s, c, D, W), sg = lin_sigmoid(a);
        da *= sg * (1.0 + a * (1.0 - sg));
    }
    return da;
}

void cpu_short_conv_backward(real *dx, real *dw, real *dbias, real *dstate_in, const real *dy,
                             const real *dstate_out, const real *x, const real *w, const real *bias,
                             const real *state_in, int B, int T, int D, int W, const int *offsets, int nseq,
                             int silu) {
    conv_check(B, T, D, W, offsets, nseq, "cpu_short_conv_backward");
    if (W > 64) die("cpu_short_conv_backward: kernel width W=%d > 64", W);
    LinearDims d = {B, T, 1, 1, 1, offsets, nseq};
    const int N = linear_num_seqs(&d);
    // Parallel over channels: each channel owns its column of dx, its dw row and dbias,
    // and sums over the sequences in order (deterministic).
#pragma omp parallel for schedule(static)
    for (int c = 0; c < D; c++) {
        double dwc[64], dbc = 0;
        for (int j = 0; j < W; j++) dwc[j] = 0;
        for (int s = 0; s < N; s++) {
            size_t bos;
            int len;
            lin_seq(&d, s, &bos, &len);
            // parameters: dw[c][j] += sum_t x[t-(W-1)+j] da[t],  dbias[c] += sum_t da[t]
            for (int t = 0; t < len; t++) {
                const double da = conv_da(dy, x, w, bias, state_in, bos, t, s, c, D, W, silu);
                dbc += da;
                for (int j = 0; j < W; j++) dwc[j] += conv_x(x, state_in, bos, t - (W - 1) + j, s, c, D, W) * da;
            }
            // inputs at local time tau in [-(W-1), len): dx[tau] = sum_j w[c][j] da[tau+(W-1)-j]
            // (outputs inside the sequence only) + the gradient of the outgoing state, which
            // copies the inputs at tau >= len-(W-1). tau < 0 are the incoming state's slots.
            for (int tau = -(W - 1); tau < len; tau++) {
                double acc = 0;
                for (int j = 0; j < W; j++) {
                    const int t = tau + (W - 1) - j;
                    if (t >= 0 && t < len)
                        acc += (double)w[(size_t)c * W + j] * conv_da(dy, x, w, bias, state_in, bos, t, s, c, D, W, silu);
                }
                const int m = tau - (len - (W - 1));
                if (dstate_out && m >= 0) acc += (double)dstate_out[((size_t)s * D + c) * (W - 1) + m];
                if (tau >= 0) dx[(bos + (size_t)tau) * D + c] = (real)acc;
                else if (dstate_in) dstate_in[((size_t)s * D + c) * (W - 1) + (tau + W - 1)] = (real)acc;
            }
        }
        for (int j = 0; j < W; j++) dw[(size_t)c * W + j] += (real)dwc[j];
        if (dbias) dbias[c] += (real)dbc;
    }
}

void cpu_short_conv_step(real *y, real *state, const real *x, const real *w, const real *bias, int N, int D, int W,
                         int silu) {
#pragma omp parallel for schedule(static)
    for (int nc = 0; nc < N * D; nc++) {
        const int c = nc % D;
        real *st = state + (size_t)nc * (W - 1);
        double a = bias ? (double)bias[c] : 0.0;
        for (int j = 0; j < W - 1; j++) a += (double)w[(size_t)c * W + j] * (double)st[j];
        a += (double)w[(size_t)c * W + W - 1] * (double)x[nc];
        y[nc] = (real)(silu ? a * lin_sigmoid(a) : a);
        for (int m = 0; m + 1 < W - 1; m++) st[m] = st[m + 1];
        if (W > 1) st[W - 2] = x[nc];
    }
}
