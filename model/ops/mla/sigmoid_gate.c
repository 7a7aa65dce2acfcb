// Sigmoid output gate (docs/hybrid.md, "Sigmoid output gate"; in gated MLA, docs/hybrid.md,
// "MLA forward (decompressed form)", step 5, and "MLA backward, in order", step 2):
//   y = o sigma(z);   do = dy sigma(z);   dz = dy o sigma(z) (1 - sigma(z))
#include <math.h>

#include "model/ops/mla/mla.h"

static inline double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

void cpu_sigmoid_gate_forward(real *y, const real *o, const real *z, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = (real)(o[i] * sigmoid(z[i]));
}

void cpu_sigmoid_gate_backward(real *d_o, real *dz, const real *dy, const real *o, const real *z, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double s = sigmoid(z[i]);
        d_o[i] = (real)(dy[i] * s);
        dz[i] = (real)(dy[i] * o[i] * s * (1.0 - s));
    }
}
