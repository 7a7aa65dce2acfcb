// Import of Hugging Face GPT2LMHeadModel folders (checkpoints/import_hf.c): export -> import
// of a random GPT-2 shaped model gives the same model keys, the same weights bit for bit
// (the padding rows of the embedding zero) and the same logits; the variants transformers
// writes (no "transformer." prefix, causal-mask buffers, a saved copy of the tied head,
// untied heads, F16 and BF16 tensors) are read; GPT-2 124M's config.json gives the model keys
// of configs/gpt2-124m.conf; and every defect of a hand-made folder is refused with a message
// naming the file and the tensor or key.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "checkpoints/hf_io.h"
#include "checkpoints/hf_util.h"
#include "checkpoints/safetensors.h"
#include "model/model.h"
#include "tests/interop_test_util.h"
#include "tests/testing.h"
#include "train/checkpoint_config.h"
#include "train/config.h"

static char g_root[256];

// A GPT-2 shaped model with every tensor random (biases and norms too, so a mix-up shows).
static const char *const GPT2_KEYS[] = {"layers", "A x2", "d_model", "64", "n_head", "4", "vocab_size", "100",
                                        "context_length", "32", "seq_len", "16", "mlp_hidden", "96", "norm_eps",
                                        "1e-6", NULL};
static const char *const UNTIED[] = {"tie_embeddings", "false", NULL};

static void gpt2_make(IoModel *M, int tied) { io_model_make(M, GPT2_KEYS, tied ? NULL : UNTIED, 5, 0.1); }

// Imports dir as `hybrid import` does: the config from config.json, then the weights.
static void import_dir(const char *dir, IoModel *out) {
    HfGpt2Config h;
    import_hf_gpt2_config(dir, &h);
    config_defaults(&out->c);
    checkpoint_config_from_hf_gpt2(&out->c, &h);
    config_set_override(&out->c, "seq_len", "16");
    config_finalize(&out->c);
    params_build(&out->c.model, &out->t, &out->mp);
    out->p = import_hf_gpt2_weights(dir, &h, &out->c.model, &out->t);
}

// Elements of the imported model that differ from the source, and of its padding rows that
// are not zero (a separate count).
static long differing(const IoModel *src, const IoModel *got, long *padding_nonzero) {
    long bad = 0;
    *padding_nonzero = 0;
    for (int i = 0; i < src->t.count; i++) {
        const ParamInfo *p = &src->t.items[i];
        const int vocab_rows = !strcmp(p->name, "embed.tok.weight") || !strcmp(p->name, "lm_head.weight");
        const size_t real = vocab_rows ? (size_t)src->c.model.vocab_size * p->shape[1] : p->numel;
        const float *a = src->p + p->offset, *b = got->p + got->t.items[i].offset;
        bad += memcmp(a, b, real * sizeof(float)) != 0;
        for (size_t j = real; j < p->numel; j++) *padding_nonzero += b[j] != 0.0f;
    }
    return bad;
}

// The real-vocabulary logits of both models on the same tokens: bit-identical?
static int same_logits(const IoModel *a, const IoModel *b, double *loss_a, double *loss_b) {
    const int B = 2, T = 16, V = a->c.model.vocab_size, Vp = a->c.model.padded_vocab_size;
    int in[32], tg[32];
    for (int i = 0; i < B * T; i++) in[i] = (i * 37 + 11) % V, tg[i] = (i * 53 + 7) % V;
    Model ma, mb;
    model_create(&ma, &a->c.model, backend_cpu(), B, T);
    model_create(&mb, &b->c.model, backend_cpu(), B, T);
    model_set_params(&ma, a->p);
    model_set_params(&mb, b->p);
    *loss_a = model_forward(&ma, in, tg, B, T);
    *loss_b = model_forward(&mb, in, tg, B, T);
    float *za = xmalloc(sizeof(float) * Vp), *zb = xmalloc(sizeof(float) * Vp);
    int same = *loss_a == *loss_b;
    for (int bi = 0; bi < B; bi++)
        for (int t = 0; t < T; t++) {
            model_logits_row(&ma, bi, t, za);
            model_logits_row(&mb, bi, t, zb);
            same &= !memcmp(za, zb, sizeof(float) * V);
        }
    free(za);
    free(zb);
    model_destroy(&ma);
    model_destroy(&mb);
    return same;
}

// ---- hand-made folders ----

typedef struct {
    StFile f;
    StOut *o;
    int n;
    char names[64][128];
    void *owned[64];
    int n_owned;
} Edit;

// The exported folder's tensors, to change before writing them elsewhere.
static void edit_open(Edit *e, const char *dir) {
    memset(e, 0, sizeof *e);
    char *st = io_path(dir, "model.safetensors");
    st_open(&e->f, st);
    free(st);
    e->o = xcalloc((size_t)e->f.count + 8, sizeof(StOut));
    for (int i = 0; i < e->f.count; i++) {
        const StTensor *s = &e->f.tensors[i];
        snprintf(e->names[i], sizeof e->names[i], "%s", s->name);
        e->o[i] = (StOut){e->names[i], "F32", s->ndim, {0}, st_data(&e->f, s)};
        for (int d = 0; d < s->ndim; d++) e->o[i].shape[d] = s->shape[d];
    }
    e->n = e->f.count;
}

static int edit_find(Edit *e, const char *name) {
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->o[i].name, name)) return i;
    die("edit_find: no %s", name);
}

static void *edit_alloc(Edit *e, size_t bytes) { return e->owned[e->n_owned++] = xcalloc(1, bytes); }

static void edit_add(Edit *e, const char *name, const char *dtype, int ndim, const int64_t *shape) {
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= (size_t)shape[d];
    snprintf(e->names[e->n], sizeof e->names[0], "%s", name);
    e->o[e->n] = (StOut){e->names[e->n], dtype, ndim, {0}, edit_alloc(e, numel * 8 + 8)};
    for (int d = 0; d < ndim; d++) e->o[e->n].shape[d] = shape[d];
    e->n++;
}

static void edit_drop(Edit *e, const char *name) {
    int i = edit_find(e, name);
    e->o[i] = e->o[--e->n];
}

// Writes the tensors as dir/model.safetensors and config.json (the source's, with `from`
// replaced by `to` when given), then frees the edit.
static void edit_write(Edit *e, const char *src_dir, const char *dir, const char *from, const char *to) {
    mkdir_p(dir);
    char *st = io_path(dir, "model.safetensors");
    st_write(st, e->o, e->n, NULL, 0);
    free(st);
    char *cj = io_path(src_dir, "config.json"), *text = read_file(cj, NULL);
    free(cj);
    if (from) {
        char *at = strstr(text, from);
        if (!at) die("edit_write: config.json has no %s", from);
        size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
        char *out = xmalloc(n);
        snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
        free(text);
        text = out;
    }
    hf_write_text(dir, "config.json", text);
    free(text);
    st_close(&e->f);
    for (int i = 0; i < e->n_owned; i++) free(e->owned[i]);
    free(e->o);
}

static void call_import(void *dir) {
    IoModel got;
    import_dir(dir, &got);
}

// float -> IEEE half for the values of test_dtypes (exactly representable ones)
static uint16_t to_half(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    const uint16_t sign = (uint16_t)(b >> 16 & 0x8000);
    const float a = fabsf(x);
    if (a < 0x1p-14f) return sign | (uint16_t)(a * 0x1p24f);  // subnormal: a multiple of 2^-24
    const int e = (int)(b >> 23 & 0xff) - 127 + 15;
    return sign | (uint16_t)(e << 10) | (uint16_t)(b >> 13 & 0x3ff);
}

// A value of x's size that F16 holds exactly: 11 significant bits, or a multiple of 2^-24.
static float half_exact(float x) {
    if (fabsf(x) < 0x1p-14f) return ldexpf(rintf(ldexpf(x, 24)), -24);
    uint32_t b;
    memcpy(&b, &x, 4);
    b &= ~0x1fffu;
    memcpy(&x, &b, 4);
    return x;
}

static void test_conversions(void) {
    const uint16_t half[] = {0x3c00, 0x0001, 0x8400, 0x7bff, 0xfc00, 0x0000, 0x8000, 0x3555};
    const float want[] = {1.0f, 0x1p-24f, -0x1p-14f, 65504.0f, -INFINITY, 0.0f, -0.0f, 0.333251953125f};
    float got[8];
    CHECK(hf_to_f32("F16", half, got, 8), "F16 refused");
    for (int i = 0; i < 8; i++) CHECK(!memcmp(&got[i], &want[i], 4), "F16 %04x -> %.9g, want %.9g", half[i], got[i], want[i]);
    const uint16_t nan16 = 0x7e01;
    hf_to_f32("F16", &nan16, got, 1);
    CHECK(isnan(got[0]), "F16 NaN");
    const uint16_t bf[] = {0x3f80, 0xc2f7, 0x0001};
    const float bwant[] = {1.0f, -123.5f, 0x1p-133f};
    CHECK(hf_to_f32("BF16", bf, got, 3), "BF16 refused");
    for (int i = 0; i < 3; i++) CHECK(got[i] == bwant[i], "BF16 %04x -> %g", bf[i], got[i]);
    CHECK(!hf_to_f32("F64", bf, got, 1) && !hf_to_f32("I32", bf, got, 1), "F64 / I32 accepted");
}

static void test_round_trip(int tied) {
    IoModel src, got;
    gpt2_make(&src, tied);
    char *dir = io_path(g_root, tied ? "hf-tied" : "hf-untied");
    if (tied) {
        export_hf_gpt2(dir, &src.c.model, &src.t, &src.mp, src.p);
    } else {  // export_hf writes tied models only: add the head and untie config.json by hand
        IoModel tmp;
        gpt2_make(&tmp, 1);
        memcpy(tmp.p, src.p, sizeof(float) * tmp.t.total);  // the untied table has lm_head last
        char *tied_dir = io_path(g_root, "hf-untied-base");
        export_hf_gpt2(tied_dir, &tmp.c.model, &tmp.t, &tmp.mp, tmp.p);
        Edit e;
        edit_open(&e, tied_dir);
        const int64_t head[2] = {100, 64};
        edit_add(&e, "lm_head.weight", "F32", 2, head);
        memcpy((void *)e.o[e.n - 1].data, src.p + src.t.items[params_find(&src.t, "lm_head.weight")].offset,
               sizeof(float) * 100 * 64);
        edit_write(&e, tied_dir, dir, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
        free(tied_dir);
        io_model_free(&tmp);
    }
    import_dir(dir, &got);
    const char *key = config_model_mismatch(&got.c, &src.c);
    CHECK(key == NULL, "%s: the imported config differs in %s", dir, key ? key : "");
    CHECK(got.c.model.padded_vocab_size == 128 && got.c.model.mlp_hidden == 96 && got.c.model.norm_eps == 1e-6 &&
              got.c.model.tie_embeddings == tied,
          "imported padded vocab %d, mlp_hidden %d, eps %g", got.c.model.padded_vocab_size, got.c.model.mlp_hidden,
          got.c.model.norm_eps);
    long pad = 0, bad = differing(&src, &got, &pad);
    CHECK(bad == 0, "%s: %ld tensors differ after export -> import", dir, bad);
    CHECK(pad == 0, "%s: %ld padding elements are not zero", dir, pad);
    double la, lb;
    CHECK(same_logits(&src, &got, &la, &lb), "%s: logits or loss differ (loss %.17g vs %.17g)", dir, la, lb);
    printf("export -> import (%s): same keys, weights and logits, loss %.6f\n", tied ? "tied" : "untied", la);
    io_model_free(&got);
    io_model_free(&src);
    free(dir);
}

// Imports dir and returns its weights (caller frees).
static float *import_weights(const char *dir) {
    IoModel got;
    import_dir(dir, &got);
    float *p = got.p;
    got.p = NULL;
    io_model_free(&got);
    return p;
}

// Even tensors as BF16 (the top half of each float), odd ones as F16: the import gives
// what the same rounded values give as F32. Then the forms transformers writes: no
// "transformer." prefix, the causal-mask buffers, a saved copy of the tied head.
static void test_variants(const char *src_dir, size_t total) {
    Edit e16, e32;
    edit_open(&e16, src_dir);
    edit_open(&e32, src_dir);
    for (int i = 0; i < e16.n; i++) {
        size_t n = 1;
        for (int d = 0; d < e16.o[i].ndim; d++) n *= (size_t)e16.o[i].shape[d];
        const float *x = e16.o[i].data;
        uint16_t *y = edit_alloc(&e16, 2 * n);
        float *r = edit_alloc(&e32, 4 * n);
        for (size_t j = 0; j < n; j++) {
            uint32_t b;
            memcpy(&b, &x[j], 4);
            b &= 0xffff0000u;
            if (i % 2) r[j] = half_exact(x[j]), y[j] = to_half(r[j]);
            else memcpy(&r[j], &b, 4), y[j] = (uint16_t)(b >> 16);
        }
        e16.o[i].dtype = i % 2 ? "F16" : "BF16";
        e16.o[i].data = y;
        e32.o[i].data = r;
    }
    char *d16 = io_path(g_root, "hf-16bit"), *d32 = io_path(g_root, "hf-rounded");
    edit_write(&e16, src_dir, d16, NULL, NULL);
    edit_write(&e32, src_dir, d32, NULL, NULL);
    float *a = import_weights(d16), *b = import_weights(d32);
    CHECK(!memcmp(a, b, sizeof(float) * total), "F16 / BF16 tensors import differently from their F32 values");
    free(a);
    free(b);

    Edit e;
    edit_open(&e, src_dir);
    for (int i = 0; i < e.n; i++)
        if (!strncmp(e.names[i], "transformer.", 12)) memmove(e.names[i], e.names[i] + 12, strlen(e.names[i]) - 11);
    const int64_t mask[4] = {1, 1, 32, 32}, head[2] = {100, 64};
    edit_add(&e, "h.0.attn.bias", "F32", 4, mask);
    edit_add(&e, "h.1.attn.masked_bias", "F32", 0, mask);
    edit_add(&e, "lm_head.weight", "F32", 2, head);
    memcpy((void *)e.o[e.n - 1].data, e.o[edit_find(&e, "wte.weight")].data, sizeof(float) * 100 * 64);
    char *bare = io_path(g_root, "hf-bare");
    edit_write(&e, src_dir, bare, NULL, NULL);
    a = import_weights(bare);
    b = import_weights(src_dir);
    CHECK(!memcmp(a, b, sizeof(float) * total), "a bare GPT2Model state dict with mask buffers imports differently");
    free(a);
    free(b);
    printf("variants: F16 + BF16 tensors, no prefix, mask buffers, a saved tied head\n");
    free(bare);
    free(d16);
    free(d32);
}

// Each defect of a folder made from the exported one, refused with its message.
static void test_defects(const char *src_dir) {
    typedef struct {
        const char *what;
        const char *drop, *add, *add_dtype;  // a tensor to leave out / to add
        int64_t add_shape[2];
        int add_ndim;
        const char *from, *to;               // a change of config.json
        const char *want1, *want2;           // in the message (after "<dir>/")
    } Defect;
    const Defect cases[] = {
        {"another model type", NULL, NULL, NULL, {0}, 0, "\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"",
         "config.json: model_type is \"llama\"", "GPT-2 folders"},
        {"another architecture", NULL, NULL, NULL, {0}, 0, "[\"GPT2LMHeadModel\"]", "[\"GPT2ForTokenClassification\"]",
         "config.json: architectures is [\"GPT2ForTokenClassification\"]", "only GPT2LMHeadModel"},
        {"another activation", NULL, NULL, NULL, {0}, 0, "\"gelu_new\"", "\"relu\"",
         "config.json: \"activation_function\" is \"relu\"", "tanh-approximation GELU"},
        {"per-layer attention scaling", NULL, NULL, NULL, {0}, 0, "\"scale_attn_by_inverse_layer_idx\": false",
         "\"scale_attn_by_inverse_layer_idx\": true", "config.json: \"scale_attn_by_inverse_layer_idx\" = true", NULL},
        {"heads that do not divide", NULL, NULL, NULL, {0}, 0, "\"n_head\": 4", "\"n_head\": 5",
         "config.json: \"n_head\" = 5 does not divide \"n_embd\" = 64", NULL},
        {"a vocabulary too large", NULL, NULL, NULL, {0}, 0, "\"vocab_size\": 100", "\"vocab_size\": 70000",
         "config.json: \"vocab_size\" = 70000 does not fit", NULL},
        {"a string for a number", NULL, NULL, NULL, {0}, 0, "\"n_embd\": 64", "\"n_embd\": \"64\"",
         "config.json: \"n_embd\" is \"64\", not an integer", NULL},
        {"broken JSON", NULL, NULL, NULL, {0}, 0, "\"n_layer\": 2,", "\"n_layer\": 2,,",
         "config.json: not valid JSON", NULL},
        {"a missing tensor", "transformer.h.1.ln_2.bias", NULL, NULL, {0}, 0, NULL, NULL,
         "model.safetensors: tensor 'transformer.h.1.ln_2.bias' is missing", "implies shape (64)"},
        {"an unexpected tensor", NULL, "transformer.h.2.ln_1.weight", "F32", {64}, 1, NULL, NULL,
         "model.safetensors: unexpected tensor 'transformer.h.2.ln_1.weight'", "n_layer 2"},
        {"a shape config.json disagrees with", NULL, NULL, NULL, {0}, 0, "\"n_inner\": 96", "\"n_inner\": 128",
         "model.safetensors: tensor 'transformer.h.0.mlp.c_fc.weight' has shape (64, 96) but config.json",
         "implies (64, 128)"},
        // checked before the buffer is allocated: not "out of memory allocating 10^14 bytes"
        {"a width far past the weights", NULL, NULL, NULL, {0}, 0, "\"n_embd\": 64", "\"n_embd\": 1048576",
         "model.safetensors: tensor 'transformer.wte.weight' has shape (100, 64) but config.json",
         "implies (100, 1048576)"},
        {"an F64 tensor", "transformer.ln_f.bias", "transformer.ln_f.bias", "F64", {64}, 1, NULL, NULL,
         "model.safetensors: tensor 'transformer.ln_f.bias' has dtype F64: only F32, F16 and BF16", NULL},
        {"a tied head that differs", NULL, "lm_head.weight", "F32", {100, 64}, 2, NULL, NULL,
         "model.safetensors: tensor 'lm_head.weight' differs from transformer.wte.weight", "tie_word_embeddings = true"},
        {"an untied model without a head", NULL, NULL, NULL, {0}, 0, "\"tie_word_embeddings\": true",
         "\"tie_word_embeddings\": false", "model.safetensors: tensor 'lm_head.weight' is missing", NULL},
        {"no embedding at all", "transformer.wte.weight", NULL, NULL, {0}, 0, NULL, NULL,
         "model.safetensors: neither transformer.wte.weight nor wte.weight", NULL},
    };
    char want[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const Defect *d = &cases[i];
        char name[32];
        snprintf(name, sizeof name, "defect-%zu", i);
        char *dir = io_path(g_root, name);
        Edit e;
        edit_open(&e, src_dir);
        if (d->drop) edit_drop(&e, d->drop);
        if (d->add) edit_add(&e, d->add, d->add_dtype, d->add_ndim, d->add_shape);
        edit_write(&e, src_dir, dir, d->from, d->to);
        snprintf(want, sizeof want, "%s/%s", dir, d->want1);
        CHECK(expect_death(call_import, dir, d->what, want, d->want2 ? d->want2 : ""), "%s", d->what);
        free(dir);
    }
    // folders without model.safetensors
    char *dir = io_path(g_root, "pickle");
    mkdir_p(dir);
    hf_write_text(dir, "pytorch_model.bin", "not read");
    char *cj = io_path(src_dir, "config.json"), *text = read_file(cj, NULL);
    hf_write_text(dir, "config.json", text);
    snprintf(want, sizeof want, "%s: has pytorch_model.bin but no model.safetensors: pickle files are not read", dir);
    CHECK(expect_death(call_import, dir, "pickle only", want), "pickle only");
    hf_write_text(dir, "model.safetensors.index.json", "{}");
    snprintf(want, sizeof want, "%s: a sharded checkpoint (model.safetensors.index.json) is not supported", dir);
    CHECK(expect_death(call_import, dir, "sharded", want), "sharded");
    free(dir);
    dir = io_path(g_root, "no-config");
    mkdir_p(dir);
    snprintf(want, sizeof want, "%s/config.json: cannot read", dir);
    CHECK(expect_death(call_import, dir, "no config.json", want), "no config.json");
    free(dir);
    free(text);
    free(cj);
    printf("defects: %zu refused with their messages, and the folders without model.safetensors\n",
           sizeof cases / sizeof cases[0]);
}

// The config.json of OpenAI's GPT-2 124M (openai-community/gpt2, with its dropout and summary
// keys): the import's model keys are those of configs/gpt2-124m.conf, so `train
// configs/gpt2-124m.conf --resume` takes the imported weights.
static void test_gpt2_124m_config(void) {
    char *dir = io_path(g_root, "gpt2-124m");
    hf_write_text(dir, "config.json",
                  "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], \"attn_pdrop\": 0.1,\n"
                  " \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, \"initializer_range\": 0.02,\n"
                  " \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", \"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12,\n"
                  " \"n_layer\": 12, \"n_positions\": 1024, \"resid_pdrop\": 0.1, \"summary_activation\": null,\n"
                  " \"summary_first_dropout\": 0.1, \"summary_proj_to_labels\": true, \"summary_type\": \"cls_index\",\n"
                  " \"summary_use_proj\": true, \"task_specific_params\": {\"text-generation\": {\"do_sample\": true,\n"
                  " \"max_length\": 50}}, \"vocab_size\": 50257}\n");
    HfGpt2Config h;
    import_hf_gpt2_config(dir, &h);
    Config got, want;
    config_defaults(&got);
    checkpoint_config_from_hf_gpt2(&got, &h);
    config_finalize(&got);
    config_defaults(&want);
    config_load_file(&want, "configs/gpt2-124m.conf");
    config_finalize(&want);
    const char *key = config_model_mismatch(&got, &want);
    CHECK(key == NULL, "GPT-2 124M's config.json imports with %s unlike configs/gpt2-124m.conf", key ? key : "");
    CHECK(got.model.padded_vocab_size == 50304 && got.model.eot_token == 50256, "padded vocab %d, eot %d",
          got.model.padded_vocab_size, got.model.eot_token);
    free(dir);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "out/test-tmp/hf-import-%ld", (long)getpid());
    mkdir_p(g_root);
    test_conversions();
    test_gpt2_124m_config();
    test_round_trip(1);
    test_round_trip(0);
    IoModel src;
    gpt2_make(&src, 1);
    char *dir = io_path(g_root, "hf-source");
    export_hf_gpt2(dir, &src.c.model, &src.t, &src.mp, src.p);
    test_variants(dir, src.t.total);
    test_defects(dir);
    free(dir);
    io_model_free(&src);
    remove_tree(g_root);
    TEST_MAIN_END();
}
