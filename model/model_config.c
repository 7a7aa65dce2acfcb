// The model config's derived values and checks (model_config.h). Messages are built in a
// static buffer; the caller (train/config.c) prefixes where the blamed key was set.
#include "model/model_config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "model/mixer.h"

static char g_msg[512];

static const char *bad(const char **key, const char *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *bad(const char **key, const char *k, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    *key = k;
    return g_msg;
}

// MoE keys (docs/hybrid.md, "MoE channel mixer"), checked only where they matter.
static const char *moe_config(ModelConfig *c, ConfigOriginFn origin, const char **key) {
    if (c->moe_experts == 0) return NULL;
    if (c->mlp == MLP_GELU)
        return bad(key, "mlp", "MoE experts are gated MLPs: set mlp = swiglu or situ (moe_experts = %d set at %s)",
                   c->moe_experts, origin("moe_experts"));
    if (c->moe_top_k < 1 || c->moe_top_k > c->moe_experts)
        return bad(key, "moe_top_k", "moe_top_k = %d must lie in [1, moe_experts = %d]", c->moe_top_k, c->moe_experts);
    if (c->moe_hidden < 1)
        return bad(key, "moe_hidden", "moe_hidden must be set (the routed expert width; moe_experts = %d)",
                   c->moe_experts);
    if (c->moe_shared_hidden == 0) c->moe_shared_hidden = c->moe_hidden;
    if (c->moe_route_scale <= 0) return bad(key, "moe_route_scale", "moe_route_scale must be positive");
    if (c->moe_bias_update_rate < 0)
        return bad(key, "moe_bias_update_rate", "moe_bias_update_rate must not be negative");
    if (c->moe_aux_loss_coef < 0) return bad(key, "moe_aux_loss_coef", "moe_aux_loss_coef must not be negative");
    if (c->dense_first > c->n_layer)
        return bad(key, "dense_first", "dense_first = %d exceeds the %d layers", c->dense_first, c->n_layer);
    return NULL;
}

// Every size the model derives from the keys, computed in 64 bits: each tensor dimension
// must fit the int a shape holds (an overflowed product would build a wrong or negative
// shape). The message names the key to change.
static const char *check_sizes(const ModelConfig *c, const char **key) {
    const int64_t C = c->d_model, H = c->n_head, E = c->moe_experts;
    const int64_t De = c->moe_latent_dim ? c->moe_latent_dim : C;
    const struct {
        int64_t value;
        const char *key, *what;
    } dims[] = {
        {3 * C, "d_model", "3 x d_model (the fused q|k|v rows of an 'A' layer)"},
        {2 * (int64_t)c->mlp_hidden, "mlp_hidden", "2 x mlp_hidden (the fused gate|up rows)"},
        {(int64_t)c->context_length * C, "context_length", "context_length x d_model"},
        {H * ((int64_t)c->mla_qk_nope_dim + c->mla_rope_dim), "mla_qk_nope_dim",
         "n_head x (mla_qk_nope_dim + mla_rope_dim)"},
        {H * ((int64_t)c->mla_qk_nope_dim + c->mla_v_dim), "mla_v_dim", "n_head x (mla_qk_nope_dim + mla_v_dim)"},
        {(int64_t)c->mla_kv_rank + c->mla_rope_dim, "mla_kv_rank", "mla_kv_rank + mla_rope_dim"},
        {E * 2 * (int64_t)c->moe_hidden, "moe_hidden", "moe_experts x 2 x moe_hidden (the stacked expert rows)"},
        {E * De, "moe_experts", "moe_experts x the expert width"},
        {2 * (int64_t)c->moe_shared * c->moe_shared_hidden, "moe_shared",
         "2 x moe_shared x moe_shared_hidden (the shared experts' fused rows)"},
        {(int64_t)c->linear_heads * c->linear_head_dim, "linear_head_dim", "linear_heads x linear_head_dim"},
        {(int64_t)c->linear_heads * c->linear_value_dim, "linear_value_dim", "linear_heads x linear_value_dim"},
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].value > INT_MAX)
            return bad(key, dims[i].key, "%s = %lld exceeds %d, the largest tensor dimension", dims[i].what,
                       (long long)dims[i].value, INT_MAX);
    return NULL;
}

const char *model_config_finalize(ModelConfig *c, ConfigOriginFn origin, const char **key) {
    if (c->d_model < 1) return bad(key, "d_model", "d_model must be positive");
    if (c->n_head < 1) return bad(key, "n_head", "n_head must be positive");
    if (c->vocab_size < 2) return bad(key, "vocab_size", "vocab_size must be at least 2");
    if (c->vocab_size > 65536)
        return bad(key, "vocab_size", "vocab_size %d does not fit the uint16 shard format", c->vocab_size);
    if (c->padded_vocab_size == 0) c->padded_vocab_size = (c->vocab_size + 127) / 128 * 128;
    if (c->padded_vocab_size < c->vocab_size)
        return bad(key, "padded_vocab_size", "padded_vocab_size = %d is smaller than vocab_size = %d",
                   c->padded_vocab_size, c->vocab_size);
    if (c->mlp_hidden == 0) {  // in 64 bits: a huge d_model must not overflow here
        const int64_t d = c->d_model, h = c->mlp == MLP_GELU ? 4 * d : (8 * d / 3 + 63) / 64 * 64;
        if (h > INT_MAX)
            return bad(key, "d_model", "d_model = %d makes the derived mlp_hidden %lld, which exceeds %d", c->d_model,
                       (long long)h, INT_MAX);
        c->mlp_hidden = (int)h;
    }
    if (c->situ_beta <= 0) return bad(key, "situ_beta", "situ_beta must be positive");
    if (c->situ_linear_beta < 0)
        return bad(key, "situ_linear_beta", "situ_linear_beta must not be negative (0 = no cap)");
    const char *why = moe_config(c, origin, key);
    if (why) return why;
    if (c->context_length < 1) return bad(key, "context_length", "context_length must be positive");
    if (c->norm_eps <= 0) return bad(key, "norm_eps", "norm_eps must be positive");
    if (c->init_std <= 0) return bad(key, "init_std", "init_std must be positive");
    if (c->classifier_chunk < 0)
        return bad(key, "classifier_chunk", "classifier_chunk must not be negative (0 = derived from a byte budget)");
    // every registered mixer derives and checks its keys (only the checks that need the
    // mixer to be used are skipped when no layer has its letter)
    for (const MixerOps *const *mx = mixer_all(); *mx; mx++)
        if ((why = (*mx)->config(c, strchr(c->layers, (*mx)->letter) != NULL, origin, key))) return why;
    if (c->reset_at_eot && c->eot_token >= c->vocab_size)
        return bad(key, "eot_token", "eot_token = %d is outside the vocabulary (vocab_size = %d; reset_at_eot set at %s)",
                   c->eot_token, c->vocab_size, origin("reset_at_eot"));
    return check_sizes(c, key);
}
