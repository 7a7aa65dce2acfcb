// Rotary position embedding, interleaved pairs (DSV3 layout; docs/hybrid.md, "RoPE on the
// decoupled slice"). Pair i of a d-wide slice at position p = pos0 + t is rotated by
// phi = p * base^(-2i/d):
//   forward  R(phi):  y0 = x0 cos phi - x1 sin phi,   y1 = x0 sin phi + x1 cos phi
//   backward R(-phi): dx0 = dy0 cos phi + dy1 sin phi, dx1 = -dy0 sin phi + dy1 cos phi
// (R is orthogonal, so its transpose is its inverse). In place allowed: each pair is read
// fully before it is written.
#include <math.h>

#include "model/ops/mla/mla.h"
#include "base/util.h"

static void rope_apply(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                       double base, double sign) {
    if (d % 2) die("rope: the rotated width %d must be even", d);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)b * T + t;
            double p = (double)(pos0 + t);
            for (int i = 0; i < d / 2; i++) {
                double phi = p * pow(base, -2.0 * i / d);
                double cs = cos(phi), sn = sign * sin(phi);
                for (int h = 0; h < NH; h++) {
                    size_t at = r * row + (size_t)h * head + 2 * i;
                    double x0 = inp[at], x1 = inp[at + 1];
                    out[at] = (real)(x0 * cs - x1 * sn);
                    out[at + 1] = (real)(x0 * sn + x1 * cs);
                }
            }
        }
    }
}

void cpu_rope_forward(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                      double base) {
    rope_apply(out, inp, B, T, NH, d, row, head, pos0, base, 1.0);
}

void cpu_rope_backward(real *dinp, const real *dout, int B, int T, int NH, int d, int row, int head, int pos0,
                       double base) {
    rope_apply(dinp, dout, B, T, NH, d, row, head, pos0, base, -1.0);
}
