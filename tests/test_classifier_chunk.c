// The chunked classifier (model/model.c, "The classifier"): the logits exist a chunk of
// classifier_chunk rows at a time. In double, against the same model with one chunk of all N
// rows (today's unchunked classifier), for chunks of 1, of sizes that do not divide N and that
// do, and of N: the per-row losses and the loss, d(final norm output) (acts.dbranch) and the
// lm_head's gradient right after model_forward_train, then every gradient after model_backward
// (the tied token embedding too), over two micro-steps accumulated with loss_scale 1/2, and the
// model_forward + model_backward path; and the logits rows model_logits makes afterwards. Each
// model's activations and scratch start filled with its own garbage and its gradients with the
// same garbage (the head's += must add to it). Then the misuse that must die.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "model/model.h"
#include "base/rng.h"
#include "base/util.h"
#include "testing.h"

#define B 2
#define T 7
#define N (B * T)
#define TOL 1e-12

static Config tiny(int tie, int attnres, int chunk) {
    Config c;
    config_defaults(&c);
    config_set_override(&c, "layers", "A x2");
    c.model.d_model = 8;
    c.model.n_head = 2;
    c.model.vocab_size = 11;
    c.model.padded_vocab_size = 16;
    c.model.context_length = 8;
    c.seq_len = T;
    c.batch_size = B;
    c.model.mlp_hidden = 0;
    c.model.init_std = 0.4;
    c.model.tie_embeddings = tie;
    c.model.classifier_chunk = chunk;
    if (attnres) {  // the RMSNorm / AttnRes path reads d(final norm output) through another op
        config_set_override(&c, "norm", "rmsnorm");
        config_set_override(&c, "mlp", "swiglu");
        config_set_override(&c, "attn_res_block", "1");
    }
    config_finalize(&c);
    return c;
}

static void fill(real *p, size_t n, unsigned long seed, double scale) {
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (real)(scale * (2.0 * rng_uniform(&r) - 1.0));
}

static Model make(const Config *c, unsigned long garbage) {
    Model m;
    model_create(&m, &c->model, backend_cpu(), B, T);
    model_init_params(&m, 7);
    fill(m.act_memory, m.act_bytes / sizeof(real), garbage, 1e6);
    fill(m.scratch_memory, m.scratch_bytes / sizeof(real), garbage + 1, 1e6);
    fill(m.grads, m.table.local_total, 99, 1.0);  // the same in every model
    return m;
}

// max |a - b| / max |a| over n values (0 if both are zero)
static double rel(const real *a, const real *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan((double)a[i]) || isnan((double)b[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        s = fmax(s, fabs((double)a[i]));
    }
    return s > 0 ? d / s : d;
}

static const real *grad_of(const Model *m, int index) { return model_grad(m, index); }
static size_t numel(const Model *m, int index) { return m->table.items[index].numel; }

static void batch(int *in, int *tg, unsigned long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < N; i++) {
        in[i] = (int)(rng_uniform(&r) * 11) % 11;
        tg[i] = (int)(rng_uniform(&r) * 11) % 11;
    }
    tg[3] = -1;  // an ignored row
}

static void compare(const char *label, int tie, int attnres, int chunk) {
    Config cr = tiny(tie, attnres, 0), cc = tiny(tie, attnres, chunk);
    Model ref = make(&cr, 1000), m = make(&cc, 2000);
    const int C = cr.model.d_model, Vp = cr.model.padded_vocab_size;
    CHECK(ref.logits_rows == N, "%s: the reference classifier has %d rows, not all %d", label, ref.logits_rows, N);
    CHECK(m.logits_rows == (chunk < N ? chunk : N), "%s: chunk %d gave %d rows", label, chunk, m.logits_rows);
    const int lm = ref.mp.lm_head;
    CHECK((lm == ref.mp.tok_embed) == tie, "%s: lm_head is%s the token embedding", label, tie ? " not" : "");
    int in[N], tg[N];
    // two micro-steps of model_forward_train + model_backward, loss_scale 1/2 each
    for (int step = 0; step < 2; step++) {
        batch(in, tg, 10 + step);
        double lr = model_forward_train(&ref, in, tg, B, T, 0.5f), lc = model_forward_train(&m, in, tg, B, T, 0.5f);
        CHECK(rel_err(lr, lc, 1e-300) <= TOL, "%s chunk %d step %d: loss %.17g vs %.17g", label, chunk, step, lc, lr);
        double e = rel(ref.acts.losses, m.acts.losses, N);
        CHECK(e <= TOL, "%s chunk %d step %d: per-row losses differ by %.3e", label, chunk, step, e);
        e = rel(ref.acts.dbranch, m.acts.dbranch, (size_t)N * C);
        CHECK(e <= TOL, "%s chunk %d step %d: d(final norm output) differs by %.3e", label, chunk, step, e);
        e = rel(grad_of(&ref, lm), grad_of(&m, lm), numel(&ref, lm));
        CHECK(e <= TOL, "%s chunk %d step %d: lm_head gradient after the forward differs by %.3e", label, chunk, step, e);
        model_backward(&ref, 0.5f);
        model_backward(&m, 0.5f);
        e = rel(ref.grads, m.grads, ref.table.local_total);
        CHECK(e <= TOL, "%s chunk %d step %d: the gradients differ by %.3e", label, chunk, step, e);
        e = rel(grad_of(&ref, ref.mp.tok_embed), grad_of(&m, m.mp.tok_embed), numel(&ref, ref.mp.tok_embed));
        CHECK(e <= TOL, "%s chunk %d step %d: the token embedding's gradient differs by %.3e", label, chunk, step, e);
    }
    // the evaluation forward (losses only), its logits, then its backward (the classifier again)
    batch(in, tg, 20);
    double lr = model_forward(&ref, in, tg, B, T), lc = model_forward(&m, in, tg, B, T);
    CHECK(rel_err(lr, lc, 1e-300) <= TOL, "%s chunk %d: evaluation loss %.17g vs %.17g", label, chunk, lc, lr);
    double e = rel(ref.acts.losses, m.acts.losses, N), worst = 0;
    CHECK(e <= TOL, "%s chunk %d: evaluation per-row losses differ by %.3e", label, chunk, e);
    for (int r = N - 1; r >= 0; r--) {  // backwards: every row outside the chunk held
        real want[16];
        memcpy(want, model_logits(&ref, r, 1), sizeof want);
        worst = fmax(worst, rel(want, model_logits(&m, r, 1), (size_t)Vp));
    }
    CHECK(worst <= TOL, "%s chunk %d: logits rows differ by %.3e", label, chunk, worst);
    model_backward(&ref, 0.25f);
    model_backward(&m, 0.25f);
    e = rel(ref.grads, m.grads, ref.table.local_total);
    CHECK(e <= TOL, "%s chunk %d: model_forward + model_backward gradients differ by %.3e", label, chunk, e);
    model_destroy(&ref);
    model_destroy(&m);
}

// the misuse: each dies with a message naming it
static Model *g_m;
static void logits_after_train(void *arg) {
    (void)arg;
    float row[16];
    model_logits_row(g_m, 0, 0, row);
}
static void forward_before_backward(void *arg) {
    int *in = arg;
    model_forward(g_m, in, NULL, B, T);
}
static void second_backward(void *arg) {
    (void)arg;
    model_backward(g_m, 1.0f);
}
static void too_many_rows(void *arg) {
    (void)arg;
    model_logits(g_m, 0, g_m->logits_rows + 1);
}

static void misuse(void) {
    Config c = tiny(1, 0, 3);
    Model m = make(&c, 5);
    int in[N], tg[N];
    batch(in, tg, 30);
    g_m = &m;
    model_forward(&m, in, tg, B, T);
    CHECK(expect_death(too_many_rows, NULL, "model_logits", "at most 3 at once"), "model_logits beyond a chunk");
    model_forward_train(&m, in, tg, B, T, 1.0f);
    CHECK(expect_death(logits_after_train, NULL, "model_logits_row", "turned into their gradient"),
          "model_logits_row after model_forward_train");
    CHECK(expect_death(forward_before_backward, in, "model_forward", "must run before another forward"),
          "a forward between model_forward_train and its backward");
    model_backward(&m, 1.0f);
    CHECK(expect_death(logits_after_train, NULL, "model_logits_row", "turned into their gradient"),
          "model_logits_row after model_backward");
    CHECK(expect_death(second_backward, NULL, "model_backward", "already ran"), "a second backward");
    model_forward(&m, in, NULL, B, T);  // no targets: the logits are made on demand
    float row[16];
    model_logits_row(&m, 1, 2, row);
    CHECK(isfinite(row[0]), "model_logits_row after a forward without targets");
    model_destroy(&m);
}

int main(void) {
    const int chunks[] = {1, 3, 4, 7, 13, N, N + 5};
    for (int attnres = 0; attnres <= 1; attnres++)
        for (int tie = 1; tie >= 0; tie--)
            for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
                compare(attnres ? (tie ? "AttnRes, tied" : "AttnRes, untied") : (tie ? "GPT-2, tied" : "GPT-2, untied"),
                        tie, attnres, chunks[i]);
    misuse();
    TEST_MAIN_END();
}
