// Config parsing: defaults, files, overrides, layer patterns, and every rejection
// with its file:line and reason.
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "base/util.h"
#include "testing.h"

static const char *DIR_ = "out/test-tmp/config";

static char *write_conf(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", DIR_, name);
    write_file_atomic(path, text, strlen(text));
    return path;
}

typedef struct {
    const char *text;
    const char *key, *value;  // optional override
} Case;

static void load_case(void *ctx) {
    Case *k = ctx;
    Config c;
    config_defaults(&c);
    config_load_file(&c, write_conf("case.conf", k->text));
    if (k->key) config_set_override(&c, k->key, k->value);
    config_finalize(&c);
}

static void bad(const char *text, const char *key, const char *value, const char *expect) {
    Case k = {text, key, value};
    CHECK(expect_death(load_case, &k, "death", expect), "config '%s' should fail with '%s'", text, expect);
}

static void missing_file(void *ctx) {
    (void)ctx;
    Config c;
    config_defaults(&c);
    config_load_file(&c, "out/test-tmp/config/does-not-exist.conf");
}

int main(void) {
    mkdir_p(DIR_);
    // defaults are GPT-2 124M
    Config c;
    config_defaults(&c);
    config_finalize(&c);
    CHECK(c.model.n_layer == 12 && !strcmp(c.model.layers, "AAAAAAAAAAAA"), "layers %s", c.model.layers);
    CHECK(c.model.padded_vocab_size == 50304, "padded %d", c.model.padded_vocab_size);
    CHECK(c.model.mlp_hidden == 3072, "mlp_hidden %d", c.model.mlp_hidden);

    // the shipped 124M config is exactly GPT-2 small
    config_defaults(&c);
    config_load_file(&c, "configs/gpt2-124m.conf");
    config_finalize(&c);
    CHECK(c.model.n_layer == 12 && c.model.d_model == 768 && c.model.n_head == 12 && c.model.vocab_size == 50257 &&
              c.model.padded_vocab_size == 50304 && c.model.context_length == 1024 && c.model.norm == NORM_LAYERNORM &&
              c.model.position == POS_LEARNED && c.model.mlp == MLP_GELU && c.model.bias && c.model.tie_embeddings,
          "gpt2-124m.conf is not GPT-2 small");

    // file + comments + blank lines + overrides (with '-' for '_')
    config_defaults(&c);
    config_load_file(&c, write_conf("ok.conf", "# comment\n\nlayers = AA x3   # six\nd_model = 64\nn_head = 4\n"
                                                "lr = 1e-3\nbias = false\n"));
    config_set_override(&c, "n-head", "8");
    config_set_override(&c, "layers", "A x2");
    config_finalize(&c);
    CHECK(c.model.n_layer == 2 && c.model.d_model == 64 && c.model.n_head == 8 && c.optim.lr == 1e-3 && !c.model.bias, "parsed values wrong");
    config_defaults(&c);
    config_load_file(&c, write_conf("ok2.conf", "layers = AA x3 A\n"));
    CHECK(c.model.n_layer == 7, "AA x3 A should give 7 layers, got %d", c.model.n_layer);

    // linear-attention mixers: letters K G D L, sizes derived from d_model and n_head
    config_defaults(&c);
    config_load_file(&c, write_conf("lin.conf", "layers = KGDLA x2\nd_model = 64\nn_head = 4\nlinear_value_dim = 8\n"));
    config_finalize(&c);
    CHECK(c.model.n_layer == 10 && !strcmp(c.model.layers, "KGDLAKGDLA"), "layers %s", c.model.layers);
    CHECK(c.model.linear_heads == 4 && c.model.linear_head_dim == 16 && c.model.linear_value_dim == 8 && c.model.gate_rank == 8 &&
              c.model.conv_size == 4 && c.model.chunk_size == 64 && c.model.kda_gate_lower_bound == 0 && !c.model.reset_at_eot,
          "linear defaults: H %d K %d V %d R %d", c.model.linear_heads, c.model.linear_head_dim, c.model.linear_value_dim, c.model.gate_rank);

    // write -> load round trip gives the same config
    {
        Config a, b;
        config_defaults(&a);
        config_set_override(&a, "d_model", "96");
        config_set_override(&a, "n_head", "3");
        config_set_override(&a, "lr_schedule", "wsd");
        config_finalize(&a);
        char *path = write_conf("roundtrip.conf", "");
        FILE *f = xfopen(path, "w");
        config_write(&a, f);
        fclose(f);
        config_defaults(&b);
        config_load_file(&b, path);
        config_finalize(&b);
        CHECK(config_model_mismatch(&a, &b) == NULL, "round trip changed a model key");
        CHECK(b.optim.lr_schedule == SCHED_WSD && b.model.d_model == 96, "round trip lost values");
        b.model.n_head = 4;
        const char *diff = config_model_mismatch(&a, &b);
        CHECK(diff && !strcmp(diff, "n_head"), "mismatch should name n_head, got %s", diff ? diff : "NULL");
    }

    // rejections name the file:line (or the override) and the reason
    bad("d_model = 64\nwidth = 3\n", NULL, NULL, "case.conf:2: unknown config key 'width'");
    bad("d_model = sixty\n", NULL, NULL, "case.conf:1: d_model: 'sixty' is not an integer");
    bad("lr = fast\n", NULL, NULL, "case.conf:1: lr: 'fast' is not a number");
    bad("bias = maybe\n", NULL, NULL, "case.conf:1: bias: 'maybe' is not a boolean");
    bad("norm = batchnorm\n", NULL, NULL, "case.conf:1: norm: 'batchnorm' is not one of: layernorm rmsnorm");
    bad("layers = AQA\n", NULL, NULL, "case.conf:1: layers: unknown layer type 'Q'");
    bad("layers = x3\n", NULL, NULL, "case.conf:1: layers: a repeat 'xN' needs a pattern before it");
    bad("just some words\n", NULL, NULL, "case.conf:1: expected 'key = value'");
    bad("\n\nd_model = -5\n", NULL, NULL, "case.conf:3: d_model: must not be negative");
    bad("d_model = 100\nn_head = 3\n", NULL, NULL, "case.conf:2: n_head = 3 does not divide d_model = 100");
    bad("vocab_size = 50257\npadded_vocab_size = 50000\n", NULL, NULL,
        "case.conf:2: padded_vocab_size = 50000 is smaller than vocab_size = 50257");
    bad("context_length = 128\nseq_len = 256\n", NULL, NULL, "case.conf:2: seq_len = 256 exceeds context_length = 128");
    bad("steps = 10\nwarmup_steps = 20\n", NULL, NULL, "case.conf:2: warmup_steps = 20 exceeds steps = 10");
    bad("beta2 = 1.0\n", NULL, NULL, "case.conf:1: beta2 must lie in [0, 1)");
    bad("layers = K\nd_model = 64\nn_head = 4\nlinear_heads = 3\n", NULL, NULL,
        "case.conf:4: linear_heads = 3 does not divide d_model = 64");
    bad("kda_gate_lower_bound = -6\n", NULL, NULL, "case.conf:1: kda_gate_lower_bound must lie in [-5, 0]");
    bad("conv_size = 0\n", NULL, NULL, "case.conf:1: conv_size must lie in [1, 64]");
    bad("vocab_size = 100\nreset_at_eot = true\n", NULL, NULL,
        "eot_token = 50256 is outside the vocabulary (vocab_size = 100; reset_at_eot set at out/test-tmp/config/case.conf:2)");
    bad("d_model = 64\n", "n_heads", "4", "command line --n_heads: unknown config key 'n_heads'");
    bad("d_model = 64\n", "n_head", "5", "command line --n_head: n_head = 5 does not divide d_model = 64");
    CHECK(expect_death(missing_file, NULL, "death", "does-not-exist.conf: cannot read config file"), "missing file");
    TEST_MAIN_END();
}
