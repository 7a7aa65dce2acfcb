// AdamW on the CPU, exactly the equations of optim.h (OptimOps.adamw_update). Per element, in double:
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2     (stored as float)
//   param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param),
//   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)
// The update uses the stored (float) m and v. Elements are independent, so the
// parallel loop is deterministic.
#include <math.h>

#include "model/ops/optim/optim.h"

void cpu_adamw_update(real *param, const real *grad, float *m, float *v, float *master, size_t n, real lr,
                      real beta1, real beta2, real eps, real weight_decay, real grad_scale, int t) {
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double g = (double)grad[i] * grad_scale;
        m[i] = (float)(beta1 * (double)m[i] + (1.0 - beta1) * g);
        v[i] = (float)(beta2 * (double)v[i] + (1.0 - beta2) * g * g);
        double mhat = m[i] / bc1, vhat = v[i] / bc2;
        double p = master ? (double)master[i] : (double)param[i];
        p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p);
        if (master) master[i] = (float)p;
        param[i] = master ? (real)master[i] : (real)p;
    }
}
