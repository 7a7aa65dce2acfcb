// Shared by the hybrid model tests: a tiny hybrid config (MLA, MoE, AttnRes; every key
// can be overridden), parameters with the one/zero-initialised tensors perturbed so that
// every gradient is generic, and the router's smallest selection margin (to keep the
// finite-difference checks away from top-k ties).
#ifndef HYBRID_TEST_UTIL_H
#define HYBRID_TEST_UTIL_H

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "model/model.h"
#include "base/util.h"
#include "model_fd.h"

// Tiny defaults; pairs of (key, value) strings override them, ending with NULL.
static inline Config tiny_hybrid(const char *first_key, ...) {
    Config c;
    config_defaults(&c);
    const char *base[][2] = {
        {"layers", "MAMM"}, {"d_model", "8"}, {"n_head", "2"}, {"vocab_size", "11"}, {"padded_vocab_size", "16"},
        {"context_length", "8"}, {"seq_len", "5"}, {"batch_size", "2"}, {"norm", "rmsnorm"}, {"position", "none"},
        {"bias", "false"}, {"mlp", "situ"}, {"mlp_hidden", "6"}, {"situ_beta", "2.0"}, {"situ_linear_beta", "3.0"},
        {"init_std", "0.4"}, {"mla_kv_rank", "4"}, {"mla_q_rank", "3"}, {"mla_qk_nope_dim", "3"},
        {"mla_rope_dim", "2"}, {"mla_v_dim", "3"}, {"mla_rope", "true"}, {"mla_rope_theta", "100"},
        {"mla_gate", "true"}, {"moe_experts", "4"}, {"moe_top_k", "2"}, {"moe_hidden", "3"}, {"moe_shared", "1"},
        {"moe_shared_hidden", "4"}, {"moe_latent_dim", "5"}, {"moe_route_scale", "1.7"},
        {"moe_aux_loss_coef", "0.05"}, {"dense_first", "1"}, {"attn_res_block", "2"},
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) config_set_override(&c, base[i][0], base[i][1]);
    va_list ap;
    va_start(ap, first_key);
    for (const char *k = first_key; k; k = va_arg(ap, const char *)) config_set_override(&c, k, va_arg(ap, const char *));
    va_end(ap);
    config_finalize(&c);
    return c;
}

// Init with `seed`, then perturb every tensor that does not start normal (norm gains, AttnRes
// queries, the MoE selection bias) so that nothing sits at a special point.
static inline void tiny_hybrid_params(Model *m, unsigned long seed, double scale) {
    model_init_params(m, seed);
    model_perturb_special(m, seed * 7 + 1, scale, 0);
}

// Smallest gap, over MoE layers and tokens of the last forward, between the K-th and the
// (K+1)-th biased selection key s + b (infinity without MoE or with K = E).
static inline double moe_min_margin(const Model *m, int N) {
    const ModelConfig *c = &m->cfg;
    double worst = INFINITY;
    const int E = c->moe_experts, K = c->moe_top_k;
    if (E == 0 || K >= E) return worst;
    for (int l = 0; l < c->n_layer; l++) {
        if (!m->mp.blocks[l].moe_layer) continue;
        const real *s = m->acts.blocks[l].moe.scores;
        const real *b = model_tensor(m, m->params, m->mp.blocks[l].moe.router_bias);
        for (int t = 0; t < N; t++) {
            double key[64];
            for (int e = 0; e < E; e++) key[e] = (double)s[(size_t)t * E + e] + b[e];
            for (int i = 0; i <= K; i++)  // partial selection sort: the K+1 largest first
                for (int j = i + 1; j < E; j++)
                    if (key[j] > key[i]) {
                        double tmp = key[i];
                        key[i] = key[j];
                        key[j] = tmp;
                    }
            worst = fmin(worst, key[K - 1] - key[K]);
        }
    }
    return worst;
}

#endif
