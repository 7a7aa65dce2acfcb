// The model's configuration: every key that defines the network (the `model` section of
// the config keys, train/config.c). The model (model/) sees only this; the trainer's ModelConfig
// (train/config.h) holds it with the optimizer's and the run's keys.
#ifndef HYBRID_MODEL_CONFIG_H
#define HYBRID_MODEL_CONFIG_H

#define CONFIG_MAX_LAYERS 256
#define CONFIG_STR 512

typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;
typedef enum { POS_LEARNED, POS_NONE } PositionKind;
typedef enum { MLP_GELU, MLP_SWIGLU, MLP_SITU } MlpKind;

typedef struct {
    char layers_spec[CONFIG_STR];     // as written, e.g. "A x12"
    char layers[CONFIG_MAX_LAYERS + 1]; // expanded, one letter per layer
    int n_layer;                      // strlen(layers)
    int d_model;
    int n_head;
    int vocab_size;
    int padded_vocab_size;            // 0 in a file means: round vocab_size up to 128
    int context_length;               // longest sequence (size of learned positions)
    NormKind norm;
    double norm_eps;
    PositionKind position;
    MlpKind mlp;
    int mlp_hidden;                   // 0 in a file means 4 * d_model (GELU) or 8/3 d_model rounded to 64 (GLU)
    double situ_beta, situ_linear_beta;
    int bias;
    int tie_embeddings;
    double init_std;
    // ---- MLA token mixer 'M' (docs/hybrid.md, "MLA token mixer (M)"); heads = n_head ----
    int mla_kv_rank;                  // r_kv: KV latent width
    int mla_q_rank;                   // r_q: q LoRA width (0 = direct q projection)
    int mla_qk_nope_dim;              // d_n: per-head query/key width without position
    int mla_rope_dim;                 // d_r: decoupled rope slice (per-head q, shared k); 0 = none
    int mla_v_dim;                    // d_v: per-head value width
    int mla_rope;                     // 0: the d_r slice stays unrotated (NoPE, Kimi); 1: RoPE
                                      // (docs/hybrid.md, "RoPE on the decoupled slice")
    double mla_rope_theta;
    int mla_gate;                     // sigmoid output gate (K3 gated MLA; docs/hybrid.md,
                                      // "MLA forward (decompressed form)", step 5)
    // ---- MoE channel mixer (docs/hybrid.md, "MoE channel mixer") ----
    int moe_experts;                  // E routed experts (0 = dense MLP in every layer)
    int moe_top_k;
    int moe_hidden;                   // m: routed expert hidden width
    int moe_shared;                   // N_s shared experts (one full-width MLP of N_s * moe_shared_hidden)
    int moe_shared_hidden;            // m_s (0 = moe_hidden)
    int moe_latent_dim;               // l: latent routed experts (variant (b) of docs/hybrid.md,
                                      // "MoE layer variants"); 0 = variant (a)
    int moe_renorm;                   // renormalise the top-k weights
    int moe_router;                   // router scores: 0 sigmoid, 1 softmax (RouterScoreFn's values)
    double moe_route_scale;           // rho, routed_scaling_factor
    double moe_bias_update_rate;      // gamma_b of the aux-loss-free bias update (docs/hybrid.md,
                                      // "Aux-loss-free bias balancing"); 0 = off
    double moe_aux_loss_coef;         // alpha of the sequence-wise balance loss (docs/hybrid.md,
                                      // "Auxiliary balance losses"); 0 = off
    int dense_first;                  // the first N layers use the dense MLP
    // ---- Block AttnRes (docs/hybrid.md, "Block Attention Residuals") ----
    int attn_res_block;               // block size S in decoder layers (0 = plain residuals)
    int recompute_mlp;                // dense MLPs save only h (pre-activation); the backward
                                      // recomputes act = f(h) into scratch (model/mlp.c)
    // ---- linear-attention mixers K, G, D, L (docs/kda.md; docs/delta-rule.md, "Layers") ----
    int linear_heads;                 // heads H (0 = n_head)
    int linear_head_dim;              // key head dim K (0 = d_model / linear_heads)
    int linear_value_dim;             // value head dim V (0 = linear_head_dim)
    int conv_size;                    // short convolution window W (docs/delta-rule.md,
                                      // "Short causal convolution with SiLU")
    int chunk_size;                   // chunk C of the chunkwise forms (docs/delta-rule.md,
                                      // "Chunkwise forward")
    double kda_gate_lower_bound;      // 0 = softplus gate; in [-5, 0): lower-bound gate
                                      // (docs/delta-rule.md, "Input transforms: L2 norm,
                                      // decay gate and beta")
    int gate_rank;                    // rank of KDA's low-rank gate / output gate (0 = linear_value_dim)
    int reset_at_eot;                 // linear-mixer states restart after every eot_token
    int eot_token;                    // id of end-of-text
    // ---- the classifier (lm_head and cross-entropy; model/model.c, "The classifier") ----
    int classifier_chunk;             // rows (tokens) of its logits buffer: the logits exist a
                                      // chunk of rows at a time, never (B*T, Vp); 0 = derived
                                      // (model.c, classifier_rows). Not a shape: changes no formula
} ModelConfig;

// Where a config key was last set ("file:line", "command line --key" or "default"), for
// messages that name a second key.
typedef const char *(*ConfigOriginFn)(const char *key);

// Derives the dependent values (padded_vocab_size, mlp_hidden, moe_shared_hidden, and each
// token mixer's, model/mixer.h) and checks the combination. Returns NULL, or a message (in a
// static buffer) with *key set to the config key to blame.
const char *model_config_finalize(ModelConfig *c, ConfigOriginFn origin, const char **key);

#endif
