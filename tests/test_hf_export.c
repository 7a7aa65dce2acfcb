// The Hugging Face GPT-2 export (checkpoints/hf_io.h, `hybrid export`): a small model's
// config.json and tensor layout, the configs it refuses and their messages, and the 124M
// model's 148 tensors, names, shapes and every value (the (in, out) transposes included).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "checkpoints/hf_io.h"
#include "checkpoints/safetensors.h"
#include "tests/checkpoint_test_util.h"
#include "tests/testing.h"
#include "train/config.h"

static char g_root[256];  // out/test-tmp/hf-export-<pid>, removed at the end

typedef struct {
    const char *dir;
    const CkModel *M;
} ExportCall;

static void call_export(void *a) {
    const ExportCall *c = a;
    export_hf_gpt2(c->dir, &c->M->c.model, &c->M->t, &c->M->mp, c->M->p);
}

static void test_export_small(void) {
    CkModel M;
    const char *kv[] = {"mlp_hidden", "96", NULL};
    model_make(&M, kv);
    char *dir = path_of(g_root, "hf-small");
    export_hf_gpt2(dir, &M.c.model, &M.t, &M.mp, M.p);
    char *cfg_path = path_of(dir, "config.json"), *st_path = path_of(dir, "model.safetensors");
    char *cfg = read_file(cfg_path, NULL);
    CHECK(cfg && strstr(cfg, "\"n_inner\": 96,") && strstr(cfg, "\"vocab_size\": 100\n") &&
          strstr(cfg, "\"eos_token_id\": null"), "small config.json:\n%s", cfg ? cfg : "(none)");
    free(cfg);
    StFile f;
    st_open(&f, st_path);
    const StTensor *wte = st_find(&f, "transformer.wte.weight"), *fc = st_find(&f, "transformer.h.1.mlp.c_fc.weight");
    CHECK(f.count == 2 + 12 * 2 + 2, "%d tensors", f.count);
    CHECK(wte && wte->shape[0] == 100 && wte->shape[1] == 64, "wte keeps only the real vocabulary rows");
    CHECK(fc && fc->shape[0] == 64 && fc->shape[1] == 96, "c_fc is (in, out)");
    st_close(&f);
    free(cfg_path);
    free(st_path);

    const char *untied[] = {"tie_embeddings", "false", NULL}, *rms[] = {"norm", "rmsnorm", NULL},
               *nobias[] = {"bias", "false", NULL};
    const char *const *bad[] = {untied, rms, nobias};
    const char *why[] = {"tie_embeddings must be true", "norm must be layernorm", "bias must be true"};
    for (int i = 0; i < 3; i++) {
        CkModel X;
        model_make(&X, bad[i]);
        ExportCall call = {.dir = dir, .M = &X};
        char want[600];
        snprintf(want, sizeof want, "%s: cannot export as Hugging Face GPT-2: %s", dir, why[i]);
        expect_die(why[i], call_export, &call, want, NULL);
        model_free(&X);
    }
    free(dir);
    model_free(&M);
}

static void test_export_124m(void) {
    Config c;
    config_defaults(&c);
    config_finalize(&c);
    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    float *p = xmalloc(sizeof(float) * t.total);
#pragma omp parallel for
    for (size_t i = 0; i < t.total; i++) {  // a cheap hash: every element distinct in practice
        uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
        p[i] = (float)(int32_t)(z >> 32) * (1.0f / 2147483648.0f);
    }
    char *dir = path_of(g_root, "hf-124m");
    double t0 = now_seconds();
    export_hf_gpt2(dir, &c.model, &t, &mp, p);
    printf("124M export: %.2f s\n", now_seconds() - t0);

    char *cfg_path = path_of(dir, "config.json");
    char *cfg = read_file(cfg_path, NULL);
    const char *keys[] = {"\"model_type\": \"gpt2\"", "\"architectures\": [\"GPT2LMHeadModel\"]",
                          "\"vocab_size\": 50257\n", "\"n_positions\": 1024,", "\"n_embd\": 768,",
                          "\"n_layer\": 12,", "\"n_head\": 12,", "\"n_inner\": null,",
                          "\"activation_function\": \"gelu_new\"", "\"layer_norm_epsilon\": 1e-05,",
                          "\"tie_word_embeddings\": true", "\"bos_token_id\": 50256,", "\"eos_token_id\": 50256,"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        CHECK(cfg && strstr(cfg, keys[i]), "config.json lacks %s", keys[i]);
    free(cfg);
    free(cfg_path);

    // GPT2LMHeadModel's state dict as save_pretrained writes it (tied lm_head omitted)
    typedef struct { const char *hf, *ours; int ndim; int64_t shape[2]; int transposed; } Expect;
    const Expect top[] = {
        {"transformer.wte.weight", "embed.tok.weight", 2, {50257, 768}, 0},
        {"transformer.wpe.weight", "embed.pos.weight", 2, {1024, 768}, 0},
        {"transformer.ln_f.weight", "norm_f.weight", 1, {768}, 0},
        {"transformer.ln_f.bias", "norm_f.bias", 1, {768}, 0},
    };
    const Expect layer[] = {
        {"ln_1.weight", "norm1.weight", 1, {768}, 0},
        {"ln_1.bias", "norm1.bias", 1, {768}, 0},
        {"attn.c_attn.weight", "attn.qkv.weight", 2, {768, 2304}, 1},
        {"attn.c_attn.bias", "attn.qkv.bias", 1, {2304}, 0},
        {"attn.c_proj.weight", "attn.out.weight", 2, {768, 768}, 1},
        {"attn.c_proj.bias", "attn.out.bias", 1, {768}, 0},
        {"ln_2.weight", "norm2.weight", 1, {768}, 0},
        {"ln_2.bias", "norm2.bias", 1, {768}, 0},
        {"mlp.c_fc.weight", "mlp.up.weight", 2, {768, 3072}, 1},
        {"mlp.c_fc.bias", "mlp.up.bias", 1, {3072}, 0},
        {"mlp.c_proj.weight", "mlp.down.weight", 2, {3072, 768}, 1},
        {"mlp.c_proj.bias", "mlp.down.bias", 1, {768}, 0},
    };
    char *st_path = path_of(dir, "model.safetensors");
    StFile f;
    st_open(&f, st_path);
    CHECK(f.count == 148, "%d tensors, GPT2LMHeadModel has 148", f.count);
    CHECK(st_meta(&f, "format") && !strcmp(st_meta(&f, "format"), "pt"), "format metadata");
    long bad_values = 0;
    for (int k = 0; k < 4 + 12 * 12; k++) {
        Expect e = k < 4 ? top[k] : layer[(k - 4) % 12];
        char hf[128], ours[128];
        if (k < 4) {
            snprintf(hf, sizeof hf, "%s", e.hf);
            snprintf(ours, sizeof ours, "%s", e.ours);
        } else {
            snprintf(hf, sizeof hf, "transformer.h.%d.%s", (k - 4) / 12, e.hf);
            snprintf(ours, sizeof ours, "blocks.%d.%s", (k - 4) / 12, e.ours);
        }
        const StTensor *s = st_find(&f, hf);
        CHECK(s != NULL, "%s missing", hf);
        if (!s) continue;
        int same = s->ndim == e.ndim && !strcmp(s->dtype, "F32");
        for (int d = 0; same && d < e.ndim; d++) same = s->shape[d] == e.shape[d];
        char got[64];
        st_shape_str(s->shape, s->ndim, got, sizeof got);
        CHECK(same, "%s has shape %s dtype %s", hf, got, s->dtype);
        if (!same) continue;
        const float *src = p + t.items[params_find(&t, ours)].offset, *dst = st_data(&f, s);
        size_t rows = (size_t)e.shape[0], cols = e.ndim == 2 ? (size_t)e.shape[1] : 1;
        for (size_t r = 0; r < rows; r++)  // HF (in, out)[r][c] = ours (out, in)[c][r]
            for (size_t col = 0; col < cols; col++) {
                float want = e.transposed ? src[col * rows + r] : src[r * cols + col], have;
                memcpy(&have, (const char *)dst + 4 * (r * cols + col), 4);
                bad_values += have != want;
            }
    }
    CHECK(bad_values == 0, "%ld exported values differ from the source", bad_values);
    // a few transposed elements by hand: c_attn.weight[i][o] == qkv.weight[o][i]
    const StTensor *qkv = st_find(&f, "transformer.h.11.attn.c_attn.weight");
    const float *src = p + t.items[params_find(&t, "blocks.11.attn.qkv.weight")].offset;
    const int pairs[][2] = {{0, 0}, {0, 1}, {1, 0}, {767, 2303}, {5, 1600}};
    for (int i = 0; qkv && i < 5; i++) {
        int in = pairs[i][0], o = pairs[i][1];
        float have;
        memcpy(&have, (const char *)st_data(&f, qkv) + 4 * ((size_t)in * 2304 + o), 4);
        CHECK(have == src[(size_t)o * 768 + in], "c_attn.weight[%d][%d]", in, o);
    }
    st_close(&f);
    free(st_path);
    remove_tree(dir);
    free(dir);
    free(p);
    params_free(&t, &mp);
}


int main(void) {
    snprintf(g_root, sizeof g_root, "out/test-tmp/hf-export-%ld", (long)getpid());
    mkdir_p(g_root);
    test_export_small();
    test_export_124m();
    remove_tree(g_root);
    TEST_MAIN_END();
}
