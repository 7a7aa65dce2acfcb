// Model and training configuration: `key = value` files (configs/*.conf) plus
// `--key value` overrides. Every key is listed once, in the table in config.c,
// which drives parsing, validation messages, `--help` and the checkpoint copy.
#ifndef HYBRID_CONFIG_H
#define HYBRID_CONFIG_H

#include <stdio.h>

#define CONFIG_MAX_LAYERS 256
#define CONFIG_STR 512

typedef enum { NORM_LAYERNORM, NORM_RMSNORM } NormKind;
typedef enum { POS_LEARNED, POS_NONE } PositionKind;
typedef enum { MLP_GELU, MLP_SWIGLU, MLP_SITU } MlpKind;
typedef enum { SCHED_COSINE, SCHED_LINEAR, SCHED_CONSTANT, SCHED_WSD } ScheduleKind;
typedef enum { OPT_ADAMW, OPT_MUON } OptimizerKind;
typedef enum { MUON_SCALE_KEY_MOONLIGHT, MUON_SCALE_KEY_KELLER } MuonScaleKey;
typedef enum { DEVICE_CPU, DEVICE_CUDA } DeviceKind;

typedef struct {
    // ---- model ----
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
    // ---- MLA token mixer 'M' (blocks-spec §1); heads = n_head ----
    int mla_kv_rank;                  // r_kv: KV latent width
    int mla_q_rank;                   // r_q: q LoRA width (0 = direct q projection)
    int mla_qk_nope_dim;              // d_n: per-head query/key width without position
    int mla_rope_dim;                 // d_r: decoupled rope slice (per-head q, shared k); 0 = none
    int mla_v_dim;                    // d_v: per-head value width
    int mla_rope;                     // 0: the d_r slice stays unrotated (NoPE, Kimi); 1: RoPE (§1.6)
    double mla_rope_theta;
    int mla_gate;                     // sigmoid output gate (K3 gated MLA, §1.3 step 5)
    // ---- MoE channel mixer (§2) ----
    int moe_experts;                  // E routed experts (0 = dense MLP in every layer)
    int moe_top_k;
    int moe_hidden;                   // m: routed expert hidden width
    int moe_shared;                   // N_s shared experts (one full-width MLP of N_s * moe_shared_hidden)
    int moe_shared_hidden;            // m_s (0 = moe_hidden)
    int moe_latent_dim;               // l: latent routed experts (§2.1 variant B); 0 = variant A
    int moe_renorm;                   // renormalise the top-k weights
    double moe_route_scale;           // rho, routed_scaling_factor
    double moe_bias_update_rate;      // gamma_b of the aux-loss-free bias update (§2.6 A); 0 = off
    double moe_aux_loss_coef;         // alpha of the sequence-wise balance loss (§2.6 C); 0 = off
    int dense_first;                  // the first N layers use the dense MLP
    // ---- Block AttnRes (§4) ----
    int attn_res_block;               // block size S in decoder layers (0 = plain residuals)
    // ---- linear-attention mixers K, G, D, L (kda-spec §5; docs/kda.md) ----
    int linear_heads;                 // heads H (0 = n_head)
    int linear_head_dim;              // key head dim K (0 = d_model / linear_heads)
    int linear_value_dim;             // value head dim V (0 = linear_head_dim)
    int conv_size;                    // short convolution window W (§5.1)
    int chunk_size;                   // chunk C of the chunkwise forms (§3)
    double kda_gate_lower_bound;      // 0 = softplus gate; in [-5, 0): lower-bound gate (§1.4)
    int gate_rank;                    // rank of KDA's low-rank gate / output gate (0 = linear_value_dim)
    int reset_at_eot;                 // linear-mixer states restart after every eot_token
    int eot_token;                    // id of end-of-text
    // ---- training ----
    int batch_size;                   // micro-batch rows per rank
    int seq_len;                      // tokens per row
    long total_batch_size;            // tokens per optimizer step, all ranks; 0 = one micro-batch
    int steps;
    int stop_at_step;
    OptimizerKind optimizer;
    double lr;
    ScheduleKind lr_schedule;
    int warmup_steps;
    double final_lr_frac;
    double wsd_decay_frac;
    double weight_decay;
    double beta1, beta2, adam_eps;
    double grad_clip;                 // 0 = off
    double muon_momentum;
    int muon_nesterov;
    int muon_ns_steps;
    MuonScaleKey muon_scale;
    // per-group peak lr (0 = lr) and weight decay (-1 = weight_decay for matrix/embed, 0 for norm/bias)
    double lr_matrix, lr_embed, lr_norm, lr_bias;
    double wd_matrix, wd_embed, wd_norm, wd_bias;
    double lr_router, wd_router;      // MoE router weights (AdamW; wd -1 = none)
    double lr_gate, wd_gate;          // gate/decay parameters and short-conv kernels (GROUP_GATE)
    long seed;
    char vocab_dir[CONFIG_STR];       // GPT-2 encoder.json + vocab.bpe, for text samples
    char train_data[CONFIG_STR];
    char val_data[CONFIG_STR];
    int val_every;
    int val_batches;                  // 0 = the whole val split
    int shuffle;
    char out_dir[CONFIG_STR];
    int checkpoint_every;             // 0 = only at the end
    int keep_checkpoints;
    int log_every;
    int sample_every;                 // 0 = only at the end
    int sample_tokens;
    double temperature;
    DeviceKind device;
    int threads;                      // 0 = OpenMP default
    int zero;                         // ZeRO-1 (dist/grad_sync.c)
    int expert_parallel;              // expert-parallel group size
    double bucket_mb;                 // gradient reduction bucket
} Config;

// Fills every key with its default.
void config_defaults(Config *c);
// Applies a config file; dies with "path:line: reason" on an unknown key or bad value.
void config_load_file(Config *c, const char *path);
// Applies one `--key value` override (key without the dashes; '-' and '_' are equal).
void config_set_override(Config *c, const char *key, const char *value);
// Derives dependent values and checks the combination; dies naming where each key was set.
void config_finalize(Config *c);
// Writes every key as `key = value` (a loadable config file).
void config_write(const Config *c, FILE *f);
// config_write's text as a string (caller frees).
char *config_to_text(const Config *c);
// Compares the keys that fix the parameter shapes; returns the first differing key or NULL.
const char *config_model_mismatch(const Config *a, const Config *b);
// Prints the key reference (name, default, help) for --help.
void config_print_keys(FILE *f);
// True if `key` names a config key.
int config_is_key(const char *key);
// Where key was last set ("file:line", "command line --key" or "default"), for messages.
const char *config_origin(const char *key);

#endif
