// Whole-model finite differences for the gradient tests (double build): perturbing the
// tensors that start at special points, and comparing every parameter element's analytic
// gradient with a central difference of the loss. The tests apply their own checks to the
// per-tensor results (tolerance, tensors allowed a zero gradient, the untrained state).
#ifndef HYBRID_MODEL_FD_H
#define HYBRID_MODEL_FD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "model/model.h"
#include "base/rng.h"
#include "base/util.h"

#ifndef REAL_DOUBLE
#error "gradient tests need the double build (-DREAL_DOUBLE)"
#endif

// Adds scale * N(0, 1) (generator seeded with seed) to every element of the tensors
// that do not start normal: zeros and ones (biases, norm gains), and unless keep_ranges
// the log-uniform / dt-bias inits too. Gradients at such special points are not generic.
static inline void model_perturb_special(Model *m, uint64_t seed, double scale, int keep_ranges) {
    float *p = xmalloc(sizeof(float) * m->table.total);
    model_get_params(m, p);
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < m->table.count; i++) {
        const ParamInfo *pi = &m->table.items[i];
        int special = keep_ranges ? (pi->init == INIT_ZERO || pi->init == INIT_ONE) : pi->init != INIT_NORMAL;
        if (special)
            for (size_t j = 0; j < pi->numel; j++) p[pi->offset + j] += (float)(scale * rng_normal(&rng));
    }
    model_set_params(m, p);
    free(p);
}

typedef double (*ModelLoss)(Model *m, void *ctx);

// The plain loss: the mean cross-entropy of one batch (ctx for model_batch_loss).
typedef struct {
    const int *inputs, *targets;
    int B, T;
} FdBatch;

static inline double model_batch_loss(Model *m, void *ctx) {
    const FdBatch *b = ctx;
    return model_forward(m, b->inputs, b->targets, b->B, b->T);
}

typedef struct {
    double max_err;       // max |numeric - analytic| over the tensor's elements (NaN propagates)
    double max_numeric;   // max |numeric|
    double max_analytic;  // max |analytic|
} TensorFd;

// max |numeric - analytic| / max |numeric| (the absolute error when the tensor has none)
static inline double tensor_fd_rel(const TensorFd *t) {
    return t->max_numeric > 0 ? t->max_err / t->max_numeric : t->max_err;
}

// One TensorFd per table tensor (caller frees), comparing m->grads (the caller ran the
// backward) with central differences of loss(m, ctx) in every parameter element:
// order 2: (L(w+h) - L(w-h)) / 2h;  order 4: (8 (L(w+h) - L(w-h)) - (L(w+2h) - L(w-2h))) / 12h.
static inline TensorFd *model_fd_compare(Model *m, ModelLoss loss, void *ctx, double h, int order) {
    TensorFd *out = xcalloc((size_t)(m->table.count ? m->table.count : 1), sizeof(TensorFd));
    for (int i = 0; i < m->table.count; i++) {
        const ParamInfo *pi = &m->table.items[i];
        TensorFd *t = &out[i];
        for (size_t j = 0; j < pi->numel; j++) {
            real *w = &m->params[pi->offset + j];
            const real saved = *w;
            double f[4];  // L(w + h), L(w - h), L(w + 2h), L(w - 2h)
            const double at[4] = {h, -h, 2 * h, -2 * h};
            for (int e = 0; e < (order == 4 ? 4 : 2); e++) {
                *w = saved + at[e];
                f[e] = loss(m, ctx);
            }
            *w = saved;
            double numeric = order == 4 ? (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * h) : (f[0] - f[1]) / (2 * h);
            double analytic = m->grads[pi->offset + j];
            double d = fabs(numeric - analytic);
            if (!(d <= t->max_err)) t->max_err = d;
            t->max_numeric = fmax(t->max_numeric, fabs(numeric));
            t->max_analytic = fmax(t->max_analytic, fabs(analytic));
        }
    }
    return out;
}

#endif
