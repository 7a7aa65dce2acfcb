// GELU, tanh approximation (docs/hybrid.md, "GELU (tanh approximation)"):
//   y = 0.5 x (1 + t),  t = tanh(k (x + 0.044715 x^3)),  k = sqrt(2/pi)
//   dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)
#include <math.h>

#include "model/ops/core/core.h"

#define GELU_K 0.7978845608028654  // sqrt(2/pi)
#define GELU_A 0.044715

void cpu_gelu_forward(real *out, const real *inp, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double t = tanh(GELU_K * (x + GELU_A * x * x * x));
        out[i] = (real)(0.5 * x * (1.0 + t));
    }
}

void cpu_gelu_backward(real *dinp, const real *inp, const real *dout, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double t = tanh(GELU_K * (x + GELU_A * x * x * x));
        double dydx = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
        dinp[i] = (real)(dydx * dout[i]);
    }
}
