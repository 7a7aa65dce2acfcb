// Export to a Hugging Face GPT2LMHeadModel folder: config.json + model.safetensors with
// the names save_pretrained writes (tied lm_head.weight omitted) and Conv1D's (in, out)
// weight layout, i.e. our Linear (out, in) matrices transposed. The embedding keeps
// only the vocab_size real rows (no padding rows).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/hf_io.h"
#include "checkpoints/hf_gpt2.h"
#include "checkpoints/hf_util.h"
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

static void write_config_json(const char *dir, const ModelConfig *c) {
    char eps[32], std[32], inner[16], eos[16];
    hf_real_text(c->norm_eps, eps, sizeof eps);
    hf_real_text(c->init_std, std, sizeof std);
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
    hf_write_text(dir, "config.json", text);
}

void export_hf_gpt2(const char *dir, const ModelConfig *c, const ParamTable *t, const ModelParams *mp, const float *params) {
    check_gpt2_shaped(dir, c, mp);
    HfGpt2Name *names = xmalloc(sizeof(HfGpt2Name) * (size_t)HF_GPT2_TENSORS(c->n_layer));
    const int n = hf_gpt2_names(c->n_layer, names);
    HfTensors e;
    hf_tensors_init(&e, n);
    for (int i = 0; i < n; i++) {
        const int index = params_find(t, names[i].ours);
        if (index < 0) die("%s: cannot export as GPT-2: the parameter table lacks %s", dir, names[i].ours);
        hf_tensors_add_param(&e, t, params, index, names[i].vocab_rows ? c->vocab_size : 0, names[i].conv1d,
                             names[i].hf);
    }
    write_config_json(dir, c);
    hf_tensors_write(&e, dir);
    hf_tensors_free(&e);
    free(names);
}
