// AdamW (Loshchilov & Hutter) with bias correction and decoupled weight decay.
// For each element, with g = grad * grad_scale and step t >= 1:
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   m_hat = m / (1 - beta1^t),  v_hat = v / (1 - beta2^t)
//   param -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * param)
#ifndef HYBRID_ADAMW_H
#define HYBRID_ADAMW_H

#include <stddef.h>

#include "base/real.h"

// master: NULL updates param in place; otherwise master (n floats) is updated and
// param = (real)master (the backend-table form, model/backend.h).
void adamw_update_cpu(real *param, const real *grad, float *m, float *v, float *master, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);

#endif
