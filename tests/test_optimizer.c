// The optimizer step (optim/optimizer.c) through the CPU backend's table, in the double
// build: the hyperparameters must reach the ops in the build's precision (optim.h), so one
// step equals the equations evaluated by hand in double with the config's exact values.
// A float rounding of any of them (lr, beta1, beta2, eps, weight decay, the clipping
// factor, Muon's momentum) shows up at ~1e-7 relative to the update, e.g. 1 - (float)0.9
// is 0.10000002384; each check below also measures what those float casts would give, so
// the test is seen to tell them apart.
//
//  (a) AdamW: one step at t = 4 from a nonzero state (bias corrections and both betas
//      matter), clipping active, on the tiny hybrid (tests/hybrid_test_util.h: every
//      parameter group, each with its lr and weight decay).
//  (b) Muon (moonlight and keller) on the hidden matrices + AdamW on the rest: the Muon
//      tensors equal muon_update_blocks with the config's exact momentum, lr and decay.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "base/rng.h"
#include "base/util.h"
#include "hybrid_test_util.h"
#include "model/model.h"
#include "model/ops/optim/muon.h"
#include "optim/optimizer.h"
#include "testing.h"

#define STEP_T 3  // steps already taken: this step is t = 4

// The tiny hybrid (MLA, MoE with router and selection bias, AttnRes: every parameter group)
// with distinct lrs per group and clipping that acts.
static Config tiny(const char *optimizer, const char *muon_scale) {
    return tiny_hybrid("optimizer", optimizer, "muon_scale", muon_scale, "lr", "6e-4", "lr_norm", "1.3e-3",
                       "lr_matrix", "0.023", "lr_router", "2.2e-3", "beta1", "0.9", "beta2", "0.95", "adam_eps",
                       "1e-8", "weight_decay", "0.1", "muon_momentum", "0.95", "grad_clip", "0.3", NULL);
}

typedef struct {
    double err;      // max over tensors of max|p - p_hand| / max|p_hand - p0|: this build against the equations
    double err_f32;  // the same for the equations with every hyperparameter rounded to float
} Errors;

// Per tensor: the largest deviation from the hand result and the largest update.
typedef struct {
    double dev, dev_f32, upd;
} TensorErr;

static void tensor_add(TensorErr *t, double p, double hand, double hand_f32, double p0) {
    t->dev = fmax(t->dev, fabs(p - hand));
    t->dev_f32 = fmax(t->dev_f32, fabs(hand_f32 - hand));
    t->upd = fmax(t->upd, fabs(hand - p0));
}

static void tensor_done(Errors *e, const TensorErr *t) {
    if (t->upd == 0) return;
    e->err = fmax(e->err, t->dev / t->upd);
    e->err_f32 = fmax(e->err_f32, t->dev_f32 / t->upd);
}

// AdamW on one element, as optim.h writes it, with the stored (fp32) moments.
static double adamw_hand(double p, double g, float *m, float *v, double lr, double b1, double b2, double eps, double wd,
                         int t) {
    *m = (float)(b1 * (double)*m + (1.0 - b1) * g);
    *v = (float)(b2 * (double)*v + (1.0 - b2) * g * g);
    double mhat = *m / (1.0 - pow(b1, t)), vhat = *v / (1.0 - pow(b2, t));
    return p - lr * (mhat / (sqrt(vhat) + eps) + wd * p);
}

static double f32(double x) { return (double)(float)x; }

// One optimizer_step on the tiny hybrid from random gradients and a random nonzero state;
// every tensor checked against the hand equations (AdamW) or muon_update_blocks (Muon);
// GROUP_STATE tensors (the MoE selection bias) must not move.
static Errors one_step(const char *label, const char *optimizer, const char *muon_scale) {
    Config c = tiny(optimizer, muon_scale);
    Model model;
    model_create(&model, &c.model, backend_cpu(), 2, 5);
    tiny_hybrid_params(&model, 5, 0.3);
    Optimizer o;
    optimizer_create(&o, &model, &c.optim);
    const size_t n = model.table.total;
    Rng rng;
    rng_seed(&rng, 17);
    float *m0 = xmalloc(sizeof(float) * n), *v0 = xmalloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        model.grads[i] = 0.05 * rng_normal(&rng);
        m0[i] = (float)(0.01 * rng_normal(&rng));
        v0[i] = (float)(1e-4 * (0.1 + rng_uniform(&rng)));
    }
    optimizer_set_state(&o, &model, m0, v0, STEP_T);
    double *p0 = xmalloc(sizeof(double) * n), *g = xmalloc(sizeof(double) * n);
    for (size_t i = 0; i < n; i++) {
        p0[i] = model.params[i];
        g[i] = model.grads[i];
    }

    const double norm = grad_global_norm(&model), lr = 0.7 * c.optim.lr;
    CHECK(norm > c.optim.grad_clip, "%s: the gradient norm %g must exceed grad_clip %g (clipping active)", label, norm,
          c.optim.grad_clip);
    optimizer_step(&o, &model, lr, norm);
    float *m1 = xmalloc(sizeof(float) * n), *v1 = xmalloc(sizeof(float) * n);
    optimizer_get_state(&o, &model, m1, v1);

    const double scale = c.optim.grad_clip / norm, schedule = lr / c.optim.lr;
    const int t = STEP_T + 1;
    Errors e = {0, 0};
    int n_muon = 0, n_state = 0, moments_bad = 0, state_moved = 0;
    for (int k = 0; k < model.table.count; k++) {
        const ParamInfo *pi = &model.table.items[k];
        const double glr = group_peak_lr(&c.optim, pi->group) * schedule, gwd = group_weight_decay(&c.optim, pi->group);
        const size_t a = pi->offset, len = pi->numel;
        if (pi->group == GROUP_STATE) {
            n_state++;
            for (size_t i = a; i < a + len; i++)
                state_moved += model.params[i] != p0[i] || m1[i] != m0[i] || v1[i] != v0[i];
            continue;
        }
        if (optimizer_uses_muon(&c.optim, pi)) {
            n_muon++;
            const int rows = (int)pi->shape[0], cols = (int)pi->shape[1];
            const MuonScaleRule rule = optimizer_muon_rule(&c.optim);
            CHECK(rule == (!strcmp(muon_scale, "keller") ? MUON_SCALE_KELLER : MUON_SCALE_MOONLIGHT), "%s: rule", label);
            MuonConfig mc = {c.optim.muon_momentum, c.optim.muon_nesterov, c.optim.muon_ns_steps, rule, muon_momentum_form(rule)};
            MuonConfig mc32 = mc;
            mc32.momentum = f32(c.optim.muon_momentum);
            double *w = xmalloc(sizeof(double) * muon_workspace_size(rows / pi->blocks, cols));
            double *W = xmalloc(sizeof(double) * len), *W32 = xmalloc(sizeof(double) * len);
            float *M = xmalloc(sizeof(float) * len), *M32 = xmalloc(sizeof(float) * len);
            memcpy(W, p0 + a, sizeof(double) * len);
            memcpy(W32, p0 + a, sizeof(double) * len);
            memcpy(M, m0 + a, sizeof(float) * len);
            memcpy(M32, m0 + a, sizeof(float) * len);
            muon_update_blocks(W, g + a, M, rows, cols, pi->blocks, &mc, glr, gwd, scale, w);
            muon_update_blocks(W32, g + a, M32, rows, cols, pi->blocks, &mc32, f32(glr), f32(gwd), f32(scale), w);
            TensorErr te = {0, 0, 0};
            for (size_t i = 0; i < len; i++) tensor_add(&te, model.params[a + i], W[i], W32[i], p0[a + i]);
            tensor_done(&e, &te);
            moments_bad += memcmp(M, m1 + a, sizeof(float) * len) != 0;
            free(w);
            free(W);
            free(W32);
            free(M);
            free(M32);
            continue;
        }
        TensorErr te = {0, 0, 0};
        for (size_t i = a; i < a + len; i++) {
            const double gi = g[i] * scale;
            float m = m0[i], v = v0[i], m32 = m0[i], v32 = v0[i];
            double hand = adamw_hand(p0[i], gi, &m, &v, glr, c.optim.beta1, c.optim.beta2, c.optim.adam_eps, gwd, t);
            double hand32 = adamw_hand(p0[i], g[i] * f32(scale), &m32, &v32, f32(glr), f32(c.optim.beta1), f32(c.optim.beta2),
                                       f32(c.optim.adam_eps), f32(gwd), t);
            tensor_add(&te, model.params[i], hand, hand32, p0[i]);
            moments_bad += m != m1[i] || v != v1[i];
        }
        tensor_done(&e, &te);
    }
    CHECK(!strcmp(optimizer, "muon") == (n_muon > 0), "%s: %d Muon tensors", label, n_muon);
    CHECK(moments_bad == 0, "%s: %d stored moments (elements or Muon tensors) differ from the hand equations", label,
          moments_bad);
    CHECK(n_state > 0 && state_moved == 0, "%s: %d of the %d GROUP_STATE tensors' elements moved", label, state_moved,
          n_state);
    CHECK(e.err < 1e-13, "%s: the step differs from the equations in double by %.3g of the update", label, e.err);
    CHECK(e.err_f32 > 1e-9, "%s: float-rounded hyperparameters change the update by only %.3g: the test would not see them",
          label, e.err_f32);
    printf("%-22s one step (t = %d, clip factor %.4f, %d Muon tensors): max |p - p_hand| / max |update| = %.2g; "
           "with float hyperparameters it would be %.2g\n",
           label, t, scale, n_muon, e.err, e.err_f32);
    free(m0);
    free(v0);
    free(m1);
    free(v1);
    free(p0);
    free(g);
    optimizer_destroy(&o, &model);
    model_destroy(&model);
    return e;
}

int main(void) {
    one_step("adamw", "adamw", "moonlight");
    one_step("muon moonlight", "muon", "moonlight");
    one_step("muon keller", "muon", "keller");
    TEST_MAIN_END();
}
