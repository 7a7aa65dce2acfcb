// Import of a Hugging Face GPT2LMHeadModel folder (hf_io.h): config.json to our model keys,
// model.safetensors to the parameter buffer, the inverse of export_hf.c through the same
// name map (hf_gpt2_names.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "checkpoints/hf_gpt2.h"
#include "checkpoints/hf_io.h"
#include "checkpoints/hf_json.h"
#include "checkpoints/hf_util.h"
#include "checkpoints/safetensors.h"

// ---- config.json ----

// An integer key, GPT2Config's default when absent; dies outside [lo, hi].
static int int_key(const HfJson *j, const char *key, long long def, long long lo, long long hi, const char *why) {
    long long v = def;
    hf_json_int(j, key, &v);
    if (v < lo || v > hi) die("%s: \"%s\" = %lld %s", j->path, key, v, why);
    return (int)v;
}

// A boolean key that must keep the value GPT-2 under our graph computes.
static void bool_key(const HfJson *j, const char *key, int def, int want, const char *why) {
    int v = def;
    hf_json_bool(j, key, &v);
    if (v != want) die("%s: \"%s\" = %s: %s", j->path, key, v ? "true" : "false", why);
}

void import_hf_gpt2_config(const char *dir, HfGpt2Config *h) {
    char path[1024], s[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    HfJson j;
    hf_json_load(&j, path);
    if (!hf_json_string(&j, "model_type", s, sizeof s)) snprintf(s, sizeof s, "(none)");
    if (strcmp(s, "gpt2"))
        die("%s: model_type is \"%s\": hybrid import --hf reads GPT-2 folders (model_type \"gpt2\", GPT2LMHeadModel) "
            "only", path, s);
    char text[160];
    hf_json_text(&j, "architectures", text, sizeof text);
    if (strcmp(text, "absent") && strcmp(text, "null") && !hf_json_array_has(&j, "architectures", "GPT2LMHeadModel") &&
        !hf_json_array_has(&j, "architectures", "GPT2Model"))
        die("%s: architectures is %s: only GPT2LMHeadModel (or its body GPT2Model) can be imported", path, text);

    memset(h, 0, sizeof *h);
    h->n_layer = int_key(&j, "n_layer", 12, 1, CONFIG_MAX_LAYERS, "is outside [1, 256] (hybrid.c's layer limit)");
    h->n_embd = int_key(&j, "n_embd", 768, 1, 1 << 20, "is not a positive width");
    h->n_head = int_key(&j, "n_head", 12, 1, h->n_embd, "is not in [1, n_embd]");
    if (h->n_embd % h->n_head) die("%s: \"n_head\" = %d does not divide \"n_embd\" = %d", path, h->n_head, h->n_embd);
    h->n_positions = int_key(&j, "n_positions", 1024, 1, 1 << 24, "is not a positive length");
    h->vocab_size = int_key(&j, "vocab_size", 50257, 2, 65536,
                            "does not fit hybrid.c's uint16 token shards (2 to 65536 tokens)");
    long long inner = 0;
    if (hf_json_int(&j, "n_inner", &inner) && (inner < 1 || inner > 1 << 24))
        die("%s: \"n_inner\" = %lld is not a positive width (or null for 4 n_embd)", path, inner);
    h->n_inner = (int)inner;
    h->eps = 1e-5;
    hf_json_real(&j, "layer_norm_epsilon", &h->eps);
    if (!(h->eps > 0)) die("%s: \"layer_norm_epsilon\" = %g must be positive", path, h->eps);
    h->init_std = 0.02;
    if (hf_json_real(&j, "initializer_range", &h->init_std) && !(h->init_std > 0)) h->init_std = 0.02;
    snprintf(s, sizeof s, "gelu_new");
    hf_json_string(&j, "activation_function", s, sizeof s);
    if (strcmp(s, "gelu_new") && strcmp(s, "gelu_pytorch_tanh"))
        die("%s: \"activation_function\" is \"%s\": our GPT-2 MLP is the tanh-approximation GELU (gelu_new or "
            "gelu_pytorch_tanh)", path, s);
    bool_key(&j, "scale_attn_weights", 1, 1, "our attention always scales the scores by 1/sqrt(head size)");
    bool_key(&j, "scale_attn_by_inverse_layer_idx", 0, 0, "our attention has no per-layer score scaling");
    bool_key(&j, "add_cross_attention", 0, 0, "cross-attention layers have no counterpart here");
    h->tied = 1;
    hf_json_bool(&j, "tie_word_embeddings", &h->tied);
    long long eos = -1;
    hf_json_int(&j, "eos_token_id", &eos);
    h->eos = eos >= 0 && eos < h->vocab_size ? (int)eos : -1;
    hf_json_free(&j);
}

// ---- model.safetensors ----

typedef struct {
    StFile f;
    const char *path;
    const char *prefix;  // "transformer." (GPT2LMHeadModel) or "" (a bare GPT2Model state dict)
    char *used;          // per tensor of the file
    char summary[200];   // the config.json sizes, for messages
} Reader;

// The file's name for a GPT2LMHeadModel name ("transformer.x" or "x").
static void file_name(const Reader *r, const char *hf, char *out, size_t size) {
    const char *bare = !strncmp(hf, "transformer.", 12) ? hf + 12 : hf;
    snprintf(out, size, "%s%s", !strncmp(hf, "transformer.", 12) ? r->prefix : "", bare);
}

// Tensor `name` of the file, checked to have HF shape `want` (ndim dims) and a dtype we
// convert; marked used.
static const StTensor *check_tensor(Reader *r, const char *name, const int64_t *want, int ndim) {
    const StTensor *s = st_find(&r->f, name);
    char ws[64], hs[64];
    st_shape_str(want, ndim, ws, sizeof ws);
    if (!s) die("%s: tensor '%s' is missing (%s implies shape %s)", r->path, name, r->summary, ws);
    r->used[s - r->f.tensors] = 1;
    int same = s->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = s->shape[d] == want[d];
    if (!same) {
        st_shape_str(s->shape, s->ndim, hs, sizeof hs);
        die("%s: tensor '%s' has shape %s but %s implies %s", r->path, name, hs, r->summary, ws);
    }
    if (strcmp(s->dtype, "F32") && strcmp(s->dtype, "F16") && strcmp(s->dtype, "BF16"))
        die("%s: tensor '%s' has dtype %s: only F32, F16 and BF16 tensors can be imported", r->path, name, s->dtype);
    return s;
}

// One table tensor from its HF name: checked (convert = 0), or read into params (convert =
// 1) transposed back from Conv1D, or only its first `rows` rows (a padded embedding: the
// padding rows stay zero).
static void param(Reader *r, const ParamTable *t, float *params, const char *ours, const char *hf, int conv1d,
                  int rows, int convert) {
    const int index = params_find(t, ours);
    if (index < 0) die("%s: the parameter table lacks %s", r->path, ours);
    const ParamInfo *p = &t->items[index];
    int64_t want[PARAM_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) want[d] = p->shape[d];
    if (rows) want[0] = rows;
    if (conv1d) {
        want[0] = p->shape[1];
        want[1] = p->shape[0];
    }
    char name[160];
    file_name(r, hf, name, sizeof name);
    const StTensor *s = check_tensor(r, name, want, p->ndim);
    if (!convert) return;
    float *dst = params + p->offset;
    memset(dst, 0, p->numel * sizeof(float));
    if (!conv1d) {
        hf_to_f32(s->dtype, st_data(&r->f, s), dst, s->numel);
        return;
    }
    float *tmp = xmalloc(p->numel * sizeof(float));
    hf_to_f32(s->dtype, st_data(&r->f, s), tmp, s->numel);
    float *back = hf_transpose(tmp, p->shape[1], p->shape[0]);
    memcpy(dst, back, p->numel * sizeof(float));
    free(back);
    free(tmp);
}

// Dies unless a saved copy of the tied head holds the embedding's values.
static void same_as_embedding(Reader *r, const StTensor *head) {
    char name[64];
    file_name(r, "transformer.wte.weight", name, sizeof name);
    const StTensor *wte = st_find(&r->f, name);  // checked before: the same shape
    float *a = xmalloc(sizeof(float) * head->numel), *b = xmalloc(sizeof(float) * head->numel);
    hf_to_f32(head->dtype, st_data(&r->f, head), a, head->numel);
    hf_to_f32(wte->dtype, st_data(&r->f, wte), b, wte->numel);
    if (memcmp(a, b, sizeof(float) * head->numel))
        die("%s: tensor 'lm_head.weight' differs from %s but config.json ties them (tie_word_embeddings = true)",
            r->path, name);
    free(a);
    free(b);
}

// h.N.attn.bias / h.N.attn.masked_bias: the causal-mask buffers older transformers saved
static int is_mask_buffer(const char *name) {
    const char *a = strstr(name, ".attn.");
    return !strncmp(name, "h.", 2) && a && (!strcmp(a, ".attn.bias") || !strcmp(a, ".attn.masked_bias"));
}

// Every tensor of the model: checked (convert = 0) or read (convert = 1).
static void all_params(Reader *r, const HfGpt2Name *names, int n, const HfGpt2Config *h, const ModelConfig *c,
                       const ParamTable *t, float *params, int convert) {
    for (int i = 0; i < n; i++)
        param(r, t, params, names[i].ours, names[i].hf, names[i].conv1d, names[i].vocab_rows ? c->vocab_size : 0,
              convert);
    if (!h->tied) param(r, t, params, "lm_head.weight", "lm_head.weight", 0, c->vocab_size, convert);
}

float *import_hf_gpt2_weights(const char *dir, const HfGpt2Config *h, const ModelConfig *c, const ParamTable *t) {
    char path[1024], other[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!file_exists(path)) {
        snprintf(other, sizeof other, "%s/model.safetensors.index.json", dir);
        if (file_exists(other))
            die("%s: a sharded checkpoint (model.safetensors.index.json) is not supported: save it as one "
                "model.safetensors (save_pretrained(..., max_shard_size=\"100GB\"))", dir);
        snprintf(other, sizeof other, "%s/pytorch_model.bin", dir);
        if (file_exists(other))
            die("%s: has pytorch_model.bin but no model.safetensors: pickle files are not read; save the model with "
                "save_pretrained(..., safe_serialization=True)", dir);
    }
    Reader r = {.path = path};
    st_open(&r.f, path);
    r.used = xcalloc((size_t)r.f.count + 1, 1);
    r.prefix = st_find(&r.f, "transformer.wte.weight") ? "transformer." : "";
    if (!*r.prefix && !st_find(&r.f, "wte.weight"))
        die("%s: neither transformer.wte.weight nor wte.weight: not a GPT-2 state dict", path);
    snprintf(r.summary, sizeof r.summary,
             "config.json (n_layer %d, n_embd %d, n_head %d, n_positions %d, vocab_size %d, n_inner %d)", h->n_layer,
             h->n_embd, h->n_head, h->n_positions, h->vocab_size, h->n_inner ? h->n_inner : 4 * h->n_embd);

    HfGpt2Name *names = xmalloc(sizeof(HfGpt2Name) * (size_t)HF_GPT2_TENSORS(c->n_layer));
    const int n = hf_gpt2_names(c->n_layer, names);
    const StTensor *head = st_find(&r.f, "lm_head.weight");
    if (!h->tied && !head) die("%s: tensor 'lm_head.weight' is missing (config.json has tie_word_embeddings = false)", path);
    // every check first (names, shapes, dtypes, a saved tied head, nothing left over), then
    // the buffer and the conversion: the buffer's size comes from config.json, which only
    // the checks tie to the file (a config.json of 10^6-wide layers beside small weights is
    // refused naming a tensor, not by an allocation of 10^14 bytes)
    all_params(&r, names, n, h, c, t, NULL, 0);
    if (h->tied && head) {
        const int64_t head_shape[2] = {c->vocab_size, c->d_model};
        same_as_embedding(&r, check_tensor(&r, "lm_head.weight", head_shape, 2));
    }
    const size_t np = strlen(r.prefix);
    for (int i = 0; i < r.f.count; i++) {
        const char *name = r.f.tensors[i].name;
        if (r.used[i] || (!strncmp(name, r.prefix, np) && is_mask_buffer(name + np))) continue;
        die("%s: unexpected tensor '%s': GPT2LMHeadModel under %s has no such parameter", path, name, r.summary);
    }
    float *params = params_host_array(t, 0);
    all_params(&r, names, n, h, c, t, params, 1);
    free(names);
    free(r.used);
    st_close(&r.f);
    return params;
}
