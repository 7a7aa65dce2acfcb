// Export to fla's KDAForCausalLM (checkpoints/export_fla.c): config.json holds KDAConfig's
// keys with our sizes, model.safetensors every tensor of fla's state dict under its name with
// the shape fla's modules give it (a table written from fla/layers/kda.py and
// fla/modules/mlp.py, not from our parameter table) and our values; every config fla cannot
// compute is refused with the reason.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "checkpoints/hf_io.h"
#include "checkpoints/hf_json.h"
#include "checkpoints/safetensors.h"
#include "tests/interop_test_util.h"
#include "tests/testing.h"
#include "train/config.h"

static char g_root[256];

// K x2, d 64, 2 heads of K = 32, V = 64 (expand_v 2), gate rank 64, conv 3, SwiGLU 96.
static const char *const KDA_KEYS[] = {"layers", "K x2", "d_model", "64", "n_head", "2", "linear_heads", "2",
                                       "linear_value_dim", "64", "conv_size", "3", "norm", "rmsnorm", "position",
                                       "none", "mlp", "swiglu", "mlp_hidden", "96", "bias", "false", "vocab_size",
                                       "100", "context_length", "32", "seq_len", "16", "norm_eps", "1e-6", NULL};

// config.json parses as JSON and holds KDAConfig's keys with our sizes
static void check_config(const char *dir, int tied, double lower_bound) {
    char *path = io_path(dir, "config.json");
    HfJson j;
    hf_json_load(&j, path);
    long long v;
    double x;
    int b;
    char s[64];
    const struct { const char *key; long long want; } ints[] = {
        {"hidden_size", 64}, {"num_heads", 2}, {"head_dim", 32}, {"num_hidden_layers", 2}, {"conv_size", 3},
        {"intermediate_size", 96}, {"vocab_size", 100}, {"max_position_embeddings", 32},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        CHECK(hf_json_int(&j, ints[i].key, &v) && v == ints[i].want, "%s: %s = %lld, want %lld", path, ints[i].key, v,
              ints[i].want);
    CHECK(hf_json_string(&j, "model_type", s, sizeof s) && !strcmp(s, "kda"), "model_type %s", s);
    CHECK(hf_json_array_has(&j, "architectures", "KDAForCausalLM"), "architectures");
    CHECK(hf_json_string(&j, "hidden_act", s, sizeof s) && !strcmp(s, "swish"), "hidden_act %s", s);
    CHECK(hf_json_real(&j, "expand_v", &x) && x == 2.0, "expand_v %g", x);
    CHECK(hf_json_real(&j, "norm_eps", &x) && x == 1e-6, "norm_eps %g", x);
    CHECK(hf_json_bool(&j, "tie_word_embeddings", &b) && b == tied, "tie_word_embeddings");
    CHECK(hf_json_bool(&j, "use_short_conv", &b) && b && hf_json_bool(&j, "allow_neg_eigval", &b) && !b,
          "short conv / neg eigval");
    CHECK(hf_json_bool(&j, "safe_gate", &b) && b == (lower_bound < 0), "safe_gate");
    if (lower_bound < 0) CHECK(hf_json_real(&j, "lower_bound", &x) && x == lower_bound, "lower_bound %g", x);
    else CHECK(!hf_json_real(&j, "lower_bound", &x), "lower_bound should be null");
    CHECK(!hf_json_int(&j, "attn", &v) && !hf_json_int(&j, "attnres_block_size", &v) &&
              !hf_json_int(&j, "eos_token_id", &v),
          "attn, attnres_block_size and eos_token_id (50256 is outside the vocabulary) should be null");
    hf_json_free(&j);
    free(path);
}

static void test_export(int tied, double lower_bound) {
    char lb[16];
    snprintf(lb, sizeof lb, "%g", lower_bound);
    const char *extra[] = {"tie_embeddings", tied ? "true" : "false", "kda_gate_lower_bound", lb, NULL};
    IoModel M;
    io_model_make(&M, KDA_KEYS, extra, 9, 1.0);
    char *dir = io_path(g_root, tied ? "fla-tied" : "fla-untied");
    export_fla_kda(dir, &M.c.model, &M.t, &M.mp, M.p);
    check_config(dir, tied, lower_bound);

    // fla's state dict: name, shape from fla's modules, our tensor and its first row
    typedef struct { const char *fla; int ndim; int64_t shape[3]; const char *ours; int row0; } Expect;
    const Expect top[] = {
        {"model.embeddings.weight", 2, {100, 64}, "embed.tok.weight", 0},
        {"model.norm.weight", 1, {64}, "norm_f.weight", 0},
        {"lm_head.weight", 2, {100, 64}, tied ? "embed.tok.weight" : "lm_head.weight", 0},
    };
    const Expect layer[] = {  // hidden 64, H 2, K 32, V 64 (key_dim 64, value_dim 128), rank V, conv 3, MLP 96
        {"attn_norm.weight", 1, {64}, "norm1.weight", 0},
        {"attn.q_proj.weight", 2, {64, 64}, "attn.q_proj.weight", 0},
        {"attn.k_proj.weight", 2, {64, 64}, "attn.k_proj.weight", 0},
        {"attn.v_proj.weight", 2, {128, 64}, "attn.v_proj.weight", 0},
        {"attn.q_conv1d.weight", 3, {64, 1, 3}, "attn.q_conv1d.weight", 0},
        {"attn.k_conv1d.weight", 3, {64, 1, 3}, "attn.k_conv1d.weight", 0},
        {"attn.v_conv1d.weight", 3, {128, 1, 3}, "attn.v_conv1d.weight", 0},
        {"attn.f_proj.0.weight", 2, {64, 64}, "attn.f_proj.0.weight", 0},
        {"attn.f_proj.1.weight", 2, {64, 64}, "attn.f_proj.1.weight", 0},
        {"attn.b_proj.weight", 2, {2, 64}, "attn.b_proj.weight", 0},
        {"attn.A_log", 1, {2}, "attn.A_log", 0},
        {"attn.dt_bias", 1, {64}, "attn.dt_bias", 0},
        {"attn.g_proj.0.weight", 2, {64, 64}, "attn.g_proj.0.weight", 0},
        {"attn.g_proj.1.weight", 2, {128, 64}, "attn.g_proj.1.weight", 0},
        {"attn.g_proj.1.bias", 1, {128}, "attn.g_proj.1.bias", 0},
        {"attn.o_norm.weight", 1, {64}, "attn.o_norm.weight", 0},
        {"attn.o_proj.weight", 2, {64, 128}, "attn.o_proj.weight", 0},
        {"mlp_norm.weight", 1, {64}, "norm2.weight", 0},
        {"mlp.gate_proj.weight", 2, {96, 64}, "mlp.up.weight", 0},
        {"mlp.up_proj.weight", 2, {96, 64}, "mlp.up.weight", 96},
        {"mlp.down_proj.weight", 2, {64, 96}, "mlp.down.weight", 0},
    };
    const int per_layer = (int)(sizeof layer / sizeof layer[0]);
    char *st = io_path(dir, "model.safetensors");
    StFile f;
    st_open(&f, st);
    CHECK(f.count == 3 + 2 * per_layer, "%d tensors, fla's KDAForCausalLM state dict has %d", f.count, 3 + 2 * per_layer);
    long bad_values = 0;
    for (int k = 0; k < 3 + 2 * per_layer; k++) {
        const Expect e = k < 3 ? top[k] : layer[(k - 3) % per_layer];
        char fla[128], ours[128];
        if (k < 3) {
            snprintf(fla, sizeof fla, "%s", e.fla);
            snprintf(ours, sizeof ours, "%s", e.ours);
        } else {
            snprintf(fla, sizeof fla, "model.layers.%d.%s", (k - 3) / per_layer, e.fla);
            snprintf(ours, sizeof ours, "blocks.%d.%s", (k - 3) / per_layer, e.ours);
        }
        const StTensor *s = st_find(&f, fla);
        CHECK(s != NULL, "%s missing", fla);
        if (!s) continue;
        int same = s->ndim == e.ndim && !strcmp(s->dtype, "F32");
        for (int d = 0; same && d < e.ndim; d++) same = s->shape[d] == e.shape[d];
        char got[64];
        st_shape_str(s->shape, s->ndim, got, sizeof got);
        CHECK(same, "%s has shape %s dtype %s", fla, got, s->dtype);
        const int index = params_find(&M.t, ours);
        CHECK(index >= 0, "no %s in our table", ours);
        if (!same || index < 0) continue;
        const ParamInfo *p = &M.t.items[index];
        const size_t row = p->ndim > 1 ? p->numel / (size_t)p->shape[0] : 1;
        bad_values += memcmp(st_data(&f, s), M.p + p->offset + (size_t)e.row0 * row, s->numel * sizeof(float)) != 0;
    }
    CHECK(bad_values == 0, "%ld exported tensors differ from the source", bad_values);
    st_close(&f);
    printf("fla export (%s, %s gate): %d tensors with fla's names, shapes and our values\n", tied ? "tied" : "untied",
           lower_bound < 0 ? "lower-bound" : "softplus", 3 + 2 * per_layer);
    free(st);
    free(dir);
    io_model_free(&M);
}

typedef struct {
    const char *dir;
    const IoModel *M;
} Call;

static void call_export(void *arg) {
    const Call *c = arg;
    export_fla_kda(c->dir, &c->M->c.model, &c->M->t, &c->M->mp, c->M->p);
}

static void test_refusals(void) {
    const struct {
        const char *kv[8];
        const char *why;
    } cases[] = {
        {{"layers", "KA", NULL}, "layer 1 is 'A': fla's attention layer (fla/layers/attn.py) always applies RoPE and "
                                 "ours has no positions"},
        {{"layers", "GK", NULL}, "layer 0 is 'G' (Gated DeltaNet): KDAForCausalLM holds only KDA ('K') layers"},
        {{"layers", "KD", NULL}, "layer 1 is 'D'"},
        {{"norm", "layernorm", NULL}, "norm must be rmsnorm"},
        {{"position", "learned", NULL}, "position must be none"},
        {{"mlp", "gelu", NULL}, "mlp must be swiglu"},
        {{"mlp", "situ", NULL}, "mlp must be swiglu"},
        {{"bias", "true", NULL}, "bias must be false"},
        {{"moe_experts", "4", "moe_hidden", "32", NULL}, "moe_experts must be 0"},
        {{"attn_res_block", "2", NULL}, "attn_res_block must be 0"},
        {{"gate_rank", "16", NULL}, "gate_rank = 16 must equal linear_value_dim = 64"},
        {{"linear_head_dim", "512", "linear_value_dim", "512", NULL}, "linear_head_dim = 512 exceeds 256"},
        {{"linear_head_dim", "11", "linear_value_dim", "15", NULL}, "linear_value_dim = 15 is not int(linear_head_dim "
                                                                    "* expand_v)"},
    };
    char *dir = io_path(g_root, "refused");
    char want[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        IoModel M;
        io_model_make(&M, KDA_KEYS, cases[i].kv, 9, 1.0);
        Call call = {dir, &M};
        snprintf(want, sizeof want, "%s: cannot export as fla KDAForCausalLM: %s", dir, cases[i].why);
        CHECK(expect_death(call_export, &call, cases[i].why, want), "%s", cases[i].why);
        io_model_free(&M);
    }
    CHECK(!dir_exists(dir), "a refused export wrote %s", dir);
    printf("fla export: %zu configs refused with their reasons\n", sizeof cases / sizeof cases[0]);
    free(dir);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "out/test-tmp/fla-export-%ld", (long)getpid());
    mkdir_p(g_root);
    test_export(1, 0);
    test_export(0, -5);
    test_refusals();
    remove_tree(g_root);
    TEST_MAIN_END();
}
