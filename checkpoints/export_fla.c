// Export to an fla KDAForCausalLM folder (fla-org/flash-linear-attention, fla/models/kda/):
// config.json with model_type "kda" and KDAConfig's keys, model.safetensors with the names
// of the model's state dict. Our K layer is fla's KimiDeltaAttention tensor for tensor
// (model/mixer_linear_params.c names them after it), so blocks.<l>.attn.<x> becomes
// model.layers.<l>.attn.<x> unchanged; the [gate | up] SwiGLU matrix splits into gate_proj and
// up_proj; the norms are attn_norm, mlp_norm and model.norm.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "checkpoints/hf_io.h"
#include "checkpoints/hf_util.h"
#include "model/mixer.h"

// The reason KDAForCausalLM cannot compute this config, or NULL.
static const char *why_not_fla(const ModelConfig *c) {
    static char msg[320];
    for (int l = 0; l < c->n_layer; l++) {
        if (c->layers[l] == 'K') continue;
        if (c->layers[l] == 'A')
            snprintf(msg, sizeof msg,
                     "layer %d is 'A': fla's attention layer (fla/layers/attn.py) always applies RoPE and ours has no "
                     "positions, so the two would compute different models; only K layers can be exported", l);
        else
            snprintf(msg, sizeof msg, "layer %d is '%c' (%s): KDAForCausalLM holds only KDA ('K') layers and RoPE "
                     "attention", l, c->layers[l], mixer_find(c->layers[l])->name);
        return msg;
    }
    const int K = c->linear_head_dim, V = c->linear_value_dim;
    if (c->norm != NORM_RMSNORM) return "norm must be rmsnorm (fla's RMSNorm)";
    if (c->position != POS_NONE) return "position must be none (KDAForCausalLM has no position embedding)";
    if (c->mlp != MLP_SWIGLU) return "mlp must be swiglu (fla's GatedMLP with hidden_act swish)";
    if (c->bias) return "bias must be false (fla's projections, norms and MLP have no biases)";
    if (c->moe_experts) return "moe_experts must be 0 (KDAForCausalLM has a dense MLP in every layer)";
    if (c->attn_res_block) return "attn_res_block must be 0 (Block AttnRes is not mapped to fla's attnres_block_size)";
    if (c->gate_rank != V) {
        snprintf(msg, sizeof msg, "gate_rank = %d must equal linear_value_dim = %d (the rank of fla's f_proj and g_proj "
                 "is its value head dim)", c->gate_rank, V);
        return msg;
    }
    if (K > 256) {
        snprintf(msg, sizeof msg, "linear_head_dim = %d exceeds 256 (fla's chunk_kda takes key head dims up to 256)", K);
        return msg;
    }
    const double expand_v = (double)V / K;  // fla: head_v_dim = int(head_dim * expand_v)
    if ((int)(K * expand_v) != V) {
        snprintf(msg, sizeof msg, "linear_value_dim = %d is not int(linear_head_dim * expand_v) for expand_v = %d/%d in "
                 "double precision, so fla would build another value width", V, V, K);
        return msg;
    }
    return NULL;
}

static void write_config_json(const char *dir, const ModelConfig *c) {
    char eps[32], std[32], expand_v[32], lb[32], eos[16];
    hf_real_text(c->norm_eps, eps, sizeof eps);
    hf_real_text(c->init_std, std, sizeof std);
    hf_real_text((double)c->linear_value_dim / c->linear_head_dim, expand_v, sizeof expand_v);
    if (c->kda_gate_lower_bound < 0) hf_real_text(c->kda_gate_lower_bound, lb, sizeof lb);
    else snprintf(lb, sizeof lb, "null");
    if (c->eot_token < c->vocab_size) snprintf(eos, sizeof eos, "%d", c->eot_token);
    else snprintf(eos, sizeof eos, "null");
    char text[4096];
    int n = snprintf(text, sizeof text,
                     "{\n"
                     "  \"allow_neg_eigval\": false,\n"
                     "  \"architectures\": [\"KDAForCausalLM\"],\n"
                     "  \"attn\": null,\n"
                     "  \"attn_mode\": \"chunk\",\n"
                     "  \"attnres_block_size\": null,\n"
                     "  \"bos_token_id\": %s,\n"
                     "  \"conv_size\": %d,\n"
                     "  \"eos_token_id\": %s,\n"
                     "  \"expand_v\": %s,\n"
                     "  \"fuse_cross_entropy\": true,\n"
                     "  \"fuse_norm\": true,\n"
                     "  \"fuse_swiglu\": true,\n"
                     "  \"head_dim\": %d,\n"
                     "  \"hidden_act\": \"swish\",\n"
                     "  \"hidden_ratio\": 4,\n"
                     "  \"hidden_size\": %d,\n"
                     "  \"initializer_range\": %s,\n"
                     "  \"intermediate_size\": %d,\n"
                     "  \"lower_bound\": %s,\n"
                     "  \"max_position_embeddings\": %d,\n"
                     "  \"model_type\": \"kda\",\n"
                     "  \"norm_eps\": %s,\n"
                     "  \"num_heads\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n"
                     "  \"num_v_heads\": null,\n"
                     "  \"pad_token_id\": null,\n"
                     "  \"safe_gate\": %s,\n"
                     "  \"tie_word_embeddings\": %s,\n"
                     "  \"torch_dtype\": \"float32\",\n"
                     "  \"use_cache\": true,\n"
                     "  \"use_l2warp\": false,\n"
                     "  \"use_short_conv\": true,\n"
                     "  \"vocab_size\": %d\n"
                     "}\n",
                     eos, c->conv_size, eos, expand_v, c->linear_head_dim, c->d_model, std, c->mlp_hidden, lb,
                     c->context_length, eps, c->linear_heads, c->n_layer, c->kda_gate_lower_bound < 0 ? "true" : "false",
                     c->tie_embeddings ? "true" : "false", c->vocab_size);
    if (n < 0 || (size_t)n >= sizeof text) die("%s: config.json does not fit its buffer", dir);
    hf_write_text(dir, "config.json", text);
}

// fla's name for a table tensor (the MLP's [gate | up] matrix is split by the caller); 0 if none.
static int fla_name(const char *ours, char *out, size_t size) {
    int l, at = 0;
    if (!strcmp(ours, "embed.tok.weight")) return snprintf(out, size, "model.embeddings.weight") > 0;
    if (!strcmp(ours, "norm_f.weight")) return snprintf(out, size, "model.norm.weight") > 0;
    if (!strcmp(ours, "lm_head.weight")) return snprintf(out, size, "lm_head.weight") > 0;
    if (sscanf(ours, "blocks.%d.%n", &l, &at) != 1 || !at) return 0;
    const char *rest = ours + at;
    static const struct { const char *ours, *fla; } block[] = {
        {"norm1.weight", "attn_norm.weight"}, {"norm2.weight", "mlp_norm.weight"},
        {"mlp.down.weight", "mlp.down_proj.weight"},
    };
    for (size_t i = 0; i < sizeof block / sizeof block[0]; i++)
        if (!strcmp(rest, block[i].ours)) return snprintf(out, size, "model.layers.%d.%s", l, block[i].fla) > 0;
    if (!strncmp(rest, "attn.", 5)) return snprintf(out, size, "model.layers.%d.%s", l, rest) > 0;
    return 0;
}

void export_fla_kda(const char *dir, const ModelConfig *c, const ParamTable *t, const ModelParams *mp,
                    const float *params) {
    const char *why = why_not_fla(c);
    if (why) die("%s: cannot export as fla KDAForCausalLM: %s (config: layers = %s)", dir, why, c->layers_spec);
    HfTensors e;
    hf_tensors_init(&e, t->count + c->n_layer + 1);
    char name[128];
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        int l = 0;
        while (l < c->n_layer && mp->blocks[l].mlp.up_w != i) l++;
        if (l < c->n_layer) {
            const int H = c->mlp_hidden;  // [gate | up]: gate first (model/ops/norm_glu/glu.c)
            snprintf(name, sizeof name, "model.layers.%d.mlp.gate_proj.weight", l);
            hf_tensors_add_rows(&e, t, params, i, 0, H, name);
            snprintf(name, sizeof name, "model.layers.%d.mlp.up_proj.weight", l);
            hf_tensors_add_rows(&e, t, params, i, H, H, name);
            continue;
        }
        if (!fla_name(p->name, name, sizeof name))
            die("%s: cannot export as fla KDAForCausalLM: no fla name for tensor %s", dir, p->name);
        const int vocab_rows = i == mp->tok_embed || i == mp->lm_head;
        hf_tensors_add_param(&e, t, params, i, vocab_rows ? c->vocab_size : 0, 0, name);
    }
    // a tied head is written too, so the folder loads whether or not transformers ties it
    if (mp->lm_head == mp->tok_embed) hf_tensors_add_param(&e, t, params, mp->tok_embed, c->vocab_size, 0, "lm_head.weight");
    write_config_json(dir, c);
    hf_tensors_write(&e, dir);
    hf_tensors_free(&e);
}
