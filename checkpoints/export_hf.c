// Export to a Hugging Face GPT2LMHeadModel folder: config.json + model.safetensors with
// the names save_pretrained writes (tied lm_head.weight omitted) and Conv1D's (in, out)
// weight layout, i.e. our Linear (out, in) matrices transposed. The embedding keeps
// only the vocab_size real rows (no padding rows).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "checkpoints/safetensors.h"
#include "base/util.h"

// Dies unless the config is exactly what GPT2LMHeadModel computes.
static void check_gpt2_shaped(const char *dir, const ModelConfig *c, const ModelParams *mp) {
    const char *why = NULL;
    if (strspn(c->layers, "A") != strlen(c->layers)) why = "every layer must be 'A' (softmax attention)";
    else if (c->norm != NORM_LAYERNORM) why = "norm must be layernorm";
    else if (!c->bias) why = "bias must be true (GPT-2 has biases in every linear layer and norm)";
    else if (c->position != POS_LEARNED) why = "position must be learned";
    else if (c->mlp != MLP_GELU) why = "mlp must be gelu";
    else if (!c->tie_embeddings) why = "tie_embeddings must be true";
    else if (c->attn_res_block) why = "attn_res_block must be 0 (GPT-2 has plain residuals)";
    else if (mp->pos_embed < 0 || mp->normf.b < 0 || mp->lm_head != mp->tok_embed)
        why = "the parameter table lacks a GPT-2 tensor";
    if (why) die("%s: cannot export as Hugging Face GPT-2: %s (config: layers = %s)", dir, why, c->layers_spec);
}

// dst (cols, rows) = transpose of src (rows, cols), in cache-sized tiles.
static float *transpose(const float *src, int rows, int cols) {
    float *dst = xmalloc(sizeof(float) * (size_t)rows * (size_t)cols);
    enum { TILE = 32 };
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < rows; r0 += TILE)
        for (int c0 = 0; c0 < cols; c0 += TILE)
            for (int r = r0; r < r0 + TILE && r < rows; r++)
                for (int c = c0; c < c0 + TILE && c < cols; c++)
                    dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
    return dst;
}

// Shortest %g text that reads back as the same double (valid JSON for finite values).
static void real_text(double x, char *buf, size_t size) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

static void write_config_json(const char *dir, const ModelConfig *c) {
    char eps[32], std[32], inner[16], eos[16];
    real_text(c->norm_eps, eps, sizeof eps);
    real_text(c->init_std, std, sizeof std);
    snprintf(inner, sizeof inner, c->mlp_hidden == 4 * c->d_model ? "null" : "%d", c->mlp_hidden);
    // GPT-2's <|endoftext|> is token 50256; a smaller vocabulary has no such token
    snprintf(eos, sizeof eos, c->vocab_size > 50256 ? "50256" : "null");
    char text[4096];
    int n = snprintf(text, sizeof text,
                     "{\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"bos_token_id\": %s,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"eos_token_id\": %s,\n"
                     "  \"initializer_range\": %s,\n"
                     "  \"layer_norm_epsilon\": %s,\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": %s,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"resid_pdrop\": 0.0,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"summary_activation\": null,\n"
                     "  \"summary_first_dropout\": 0.1,\n"
                     "  \"summary_proj_to_labels\": true,\n"
                     "  \"summary_type\": \"cls_index\",\n"
                     "  \"summary_use_proj\": true,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"torch_dtype\": \"float32\",\n"
                     "  \"use_cache\": true,\n"
                     "  \"vocab_size\": %d\n"
                     "}\n",
                     eos, eos, std, eps, c->context_length, c->d_model, c->n_head, inner, c->n_layer,
                     c->context_length, c->vocab_size);
    if (n < 0 || (size_t)n >= sizeof text) die("%s: config.json does not fit its buffer", dir);
    size_t plen = strlen(dir) + 16;
    char *path = xmalloc(plen);
    snprintf(path, plen, "%s/config.json", dir);
    write_file_atomic(path, text, (size_t)n);
    free(path);
}

typedef struct {
    StOut *items;
    char (*names)[128];
    int count;
    float **owned;  // transposed copies to free
    int n_owned;
} Export;

// Adds tensor `index` of the table under `name`; 2-D weights are transposed to (in, out)
// when `conv1d` is set. `rows` limits the first dimension (the unpadded vocabulary).
static void add(Export *e, const ParamTable *t, const float *params, int index, int conv1d, int rows,
                const char *name) {
    const ParamInfo *p = &t->items[index];
    StOut *o = &e->items[e->count];
    snprintf(e->names[e->count], sizeof e->names[0], "%s", name);
    o->name = e->names[e->count++];
    o->dtype = "F32";
    o->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++) o->shape[d] = p->shape[d];
    if (rows) o->shape[0] = rows;
    o->data = params + p->offset;
    if (conv1d) {
        float *tr = transpose(params + p->offset, p->shape[0], p->shape[1]);
        e->owned[e->n_owned++] = tr;
        o->data = tr;
        o->shape[0] = p->shape[1];
        o->shape[1] = p->shape[0];
    }
}

void export_hf_gpt2(const char *dir, const ModelConfig *c, const ParamTable *t, const ModelParams *mp, const float *params) {
    check_gpt2_shaped(dir, c, mp);
    int max = 4 + 12 * c->n_layer;
    Export e = {xcalloc((size_t)max, sizeof(StOut)), xcalloc((size_t)max, 128), 0,
                xcalloc((size_t)max, sizeof(float *)), 0};
    char name[128];
    add(&e, t, params, mp->tok_embed, 0, c->vocab_size, "transformer.wte.weight");
    add(&e, t, params, mp->pos_embed, 0, 0, "transformer.wpe.weight");
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *b = &mp->blocks[l];
        // the attention tensors by their table names (the mixer keeps its indices private)
        int attn[4];
        const char *attn_names[4] = {"attn.qkv.weight", "attn.qkv.bias", "attn.out.weight", "attn.out.bias"};
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "blocks.%d.%s", l, attn_names[i]);
            attn[i] = params_find(t, name);
        }
        const struct { int index, conv1d; const char *suffix; } parts[] = {
            {b->norm1.w, 0, "ln_1.weight"},      {b->norm1.b, 0, "ln_1.bias"},
            {attn[0], 1, "attn.c_attn.weight"}, {attn[1], 0, "attn.c_attn.bias"},
            {attn[2], 1, "attn.c_proj.weight"}, {attn[3], 0, "attn.c_proj.bias"},
            {b->norm2.w, 0, "ln_2.weight"},      {b->norm2.b, 0, "ln_2.bias"},
            {b->mlp.up_w, 1, "mlp.c_fc.weight"}, {b->mlp.up_b, 0, "mlp.c_fc.bias"},
            {b->mlp.down_w, 1, "mlp.c_proj.weight"}, {b->mlp.down_b, 0, "mlp.c_proj.bias"},
        };
        for (int i = 0; i < 12; i++) {
            if (parts[i].index < 0) die("%s: cannot export as GPT-2: layer %d lacks %s", dir, l, parts[i].suffix);
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, parts[i].suffix);
            add(&e, t, params, parts[i].index, parts[i].conv1d, 0, name);
        }
    }
    add(&e, t, params, mp->normf.w, 0, 0, "transformer.ln_f.weight");
    add(&e, t, params, mp->normf.b, 0, 0, "transformer.ln_f.bias");

    mkdir_p(dir);
    write_config_json(dir, c);
    size_t plen = strlen(dir) + 24;
    char *path = xmalloc(plen);
    snprintf(path, plen, "%s/model.safetensors", dir);
    st_write(path, e.items, e.count, NULL, 0);
    free(path);
    for (int i = 0; i < e.n_owned; i++) free(e.owned[i]);
    free(e.owned);
    free(e.names);
    free(e.items);
}
