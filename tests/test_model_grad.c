// Whole-model gradient check: the backward of a tiny GPT-2 (every op chained through
// the graph, tied embeddings, an ignored target) against central finite differences
// in double, for every parameter element. Also: overfitting one batch to near-zero loss.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "model/model.h"
#include "base/util.h"
#include "optim/optimizer.h"
#include "model_fd.h"
#include "testing.h"
#include "tests/expect_death.h"

static Config tiny_with(int tie, int bias, const char *norm, const char *mlp, const char *position) {
    Config c;
    config_defaults(&c);
    config_set_override(&c, "layers", "A x2");
    c.model.d_model = 8;
    c.model.n_head = 2;
    c.model.vocab_size = 11;
    c.model.padded_vocab_size = 16;
    c.model.context_length = 8;
    c.seq_len = 5;
    c.batch_size = 2;
    c.model.mlp_hidden = 0;
    c.model.init_std = 0.4;  // large enough that every branch matters
    c.model.tie_embeddings = tie;
    c.model.bias = bias;
    config_set_override(&c, "norm", norm);
    config_set_override(&c, "mlp", mlp);
    config_set_override(&c, "position", position);
    config_set_override(&c, "situ_beta", "2.0");
    config_set_override(&c, "situ_linear_beta", "3.0");  // small caps so both saturations matter
    config_finalize(&c);
    return c;
}

static Config tiny(int tie, int bias) { return tiny_with(tie, bias, "layernorm", "gelu", "learned"); }

static void gradcheck(const char *label, Config c) {
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 5);
    model_init_params(&m, 42);
    // biases and norm shifts start at zero/one; perturb them so their gradients are generic
    model_perturb_special(&m, 7, 0.3, 0);
    int inputs[10] = {1, 5, 3, 9, 0, 10, 2, 2, 7, 4};
    int targets[10] = {5, 3, 9, 0, 10, 2, -1, 7, 4, 6};

    model_zero_grad(&m);
    model_forward(&m, inputs, targets, 2, 5);
    model_backward(&m, 1.0f);
    // analytic gradient (real = double here: the whole library is the double build)
    FdBatch batch = {inputs, targets, 2, 5};
    TensorFd *fd = model_fd_compare(&m, model_batch_loss, &batch, 1e-5, 2);
    for (int i = 0; i < m.table.count; i++) {
        const ParamInfo *pi = &m.table.items[i];
        double rel = tensor_fd_rel(&fd[i]);
        int padding_rows = (i == m.mp.tok_embed || i == m.mp.lm_head);
        CHECK(fd[i].max_numeric > 0 || padding_rows, "%s: gradient is identically zero", pi->name);
        CHECK(rel <= 1e-6, "%s (%s): max |fd - analytic| / max |fd| = %.3e", pi->name, label, rel);
    }
    free(fd);
    // the training forward (the cross-entropy gradient computed with the loss) gives the
    // same loss and gradient bits as model_forward then model_backward, with another scale too
    double l1 = model_forward(&m, inputs, targets, 2, 5);
    size_t np = m.table.total;
    float *g1 = xmalloc(sizeof(float) * np), *g2 = xmalloc(sizeof(float) * np);
    model_zero_grad(&m);
    model_backward(&m, 0.75f);
    model_get_grads(&m, g1);
    model_zero_grad(&m);
    double l2 = model_forward_train(&m, inputs, targets, 2, 5, 0.75f);
    model_backward(&m, 0.75f);
    model_get_grads(&m, g2);
    CHECK(l1 == l2 && !memcmp(g1, g2, sizeof(float) * np), "%s: model_forward_train differs from model_forward", label);
    free(g1), free(g2);
    model_destroy(&m);
}

// After model_forward_train the logits hold their gradient: reading them, or a backward
// for another loss scale, dies instead of giving wrong numbers.
static Model *g_death_model;
static void logits_after_train(void *arg) {
    float row[16];
    (void)arg;
    model_logits_row(g_death_model, 0, 0, row);
}
static void backward_other_scale(void *arg) {
    (void)arg;
    model_backward(g_death_model, 2.0f);
}
static void train_forward_misuse(void) {
    Config c = tiny(1, 1);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 5);
    model_init_params(&m, 42);
    int inputs[10] = {1, 5, 3, 9, 0, 10, 2, 2, 7, 4};
    int targets[10] = {5, 3, 9, 0, 10, 2, -1, 7, 4, 6};
    float row[16];
    model_forward(&m, inputs, targets, 2, 5);
    model_logits_row(&m, 0, 0, row);  // the logits are there after the evaluation forward
    model_forward_train(&m, inputs, targets, 2, 5, 1.0f);
    g_death_model = &m;
    CHECK(expect_death(logits_after_train, NULL, "logits", "turned into their gradient"),
          "model_logits_row after model_forward_train");
    CHECK(expect_death(backward_other_scale, NULL, "scale", "already hold the gradient for 1"),
          "model_backward with another loss_scale");
    model_destroy(&m);
}

static void overfit(void) {
    Config c = tiny(1, 1);
    c.model.d_model = 32;
    c.model.n_head = 4;
    c.model.mlp_hidden = 128;
    c.model.vocab_size = 64;
    c.model.padded_vocab_size = 64;
    c.model.context_length = 16;
    c.model.init_std = 0.02;
    c.optim.lr = 3e-3;
    c.optim.weight_decay = 0.0;
    c.optim.grad_clip = 1.0;
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 16);
    model_init_params(&m, 1);
    Optimizer o;
    optimizer_create(&o, &m, &c.optim);
    int in[32], tg[32];
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 32; i++) in[i] = (int)rng_below(&r, 64);
    for (int i = 0; i < 32; i++) tg[i] = (int)rng_below(&r, 64);
    float first = 0, loss = 0;
    for (int step = 0; step < 300; step++) {
        model_zero_grad(&m);
        loss = model_forward(&m, in, tg, 2, 16);
        if (step == 0) first = loss;
        model_backward(&m, 1.0f);
        optimizer_step(&o, &m, c.optim.lr, grad_global_norm(&m));
    }
    CHECK(fabsf(first - logf(64.0f)) < 0.1f, "initial loss %.4f should be near ln(64) = %.4f", first, logf(64.0f));
    CHECK(loss < 0.02f, "one batch should overfit to near zero, final loss %.5f", loss);
    printf("overfit: loss %.4f -> %.5f in 300 steps\n", first, loss);
    optimizer_destroy(&o, &m);
    model_destroy(&m);
}

int main(void) {
    // thousands of tiny forwards: one thread, so OpenMP barriers on a busy machine do not
    // dominate (the ops are thread-count independent; test_ops_grad checks that)
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    gradcheck("GPT-2", tiny(1, 1));
    gradcheck("untied", tiny(0, 1));
    gradcheck("no bias", tiny(1, 0));
    gradcheck("rmsnorm + swiglu, no positions", tiny_with(1, 0, "rmsnorm", "swiglu", "none"));
    gradcheck("rmsnorm + situ", tiny_with(0, 0, "rmsnorm", "situ", "learned"));
    gradcheck("layernorm + situ + bias", tiny_with(1, 1, "layernorm", "situ", "none"));
    omp_set_num_threads(threads);
    train_forward_misuse();
    overfit();
    TEST_MAIN_END();
}
