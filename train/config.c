#define _POSIX_C_SOURCE 200809L
#include "train/config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "data/mqar.h"
#include "model/mixer.h"

typedef enum { T_INT, T_LONG, T_REAL, T_BOOL, T_STR, T_ENUM, T_LAYERS } KeyType;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset;
    const char *def;       // default value as text
    const char *choices;   // T_ENUM: space-separated names, index = enum value
    int model;             // 1 if the key fixes parameter shapes (checked on resume)
    const char *help;
} Key;

// K: a run key (Config.name); KM: a model key (Config.model.name); KO: an optimizer key
// (Config.optim.name).
#define K(name, type, def, choices, shape, help) {#name, type, offsetof(Config, name), def, choices, shape, help}
#define KM(name, type, def, choices, shape, help) {#name, type, offsetof(Config, model.name), def, choices, shape, help}
#define KO(name, type, def, choices, shape, help) {#name, type, offsetof(Config, optim.name), def, choices, shape, help}

static const Key KEYS[] = {
    // model
    KM(layers_spec, T_LAYERS, "A x12", NULL, 1,
      "token mixer of every layer, one letter each (the letters are listed above); 'PATTERN xN' repeats"),
    KM(d_model, T_INT, "768", NULL, 1, "residual stream width"),
    KM(n_head, T_INT, "12", NULL, 1, "attention heads"),
    KM(vocab_size, T_INT, "50257", NULL, 1, "tokenizer vocabulary size"),
    KM(padded_vocab_size, T_INT, "0", NULL, 1, "embedding rows (0 = vocab_size rounded up to 128)"),
    KM(context_length, T_INT, "1024", NULL, 1, "longest sequence the model is built for"),
    KM(norm, T_ENUM, "layernorm", "layernorm rmsnorm", 1, "normalisation layer"),
    KM(norm_eps, T_REAL, "1e-5", NULL, 1, "epsilon inside the norms"),
    KM(position, T_ENUM, "learned", "learned none", 1, "position information: learned absolute embeddings or none"),
    KM(mlp, T_ENUM, "gelu", "gelu swiglu situ", 1, "channel mixer: tanh-GELU MLP, SwiGLU or SiTU gated MLP"),
    KM(mlp_hidden, T_INT, "0", NULL, 1, "MLP hidden width (0 = 4 * d_model for gelu, 8/3 * d_model rounded up to 64 for GLUs)"),
    KM(situ_beta, T_REAL, "4.0", NULL, 1, "SiTU gate saturation beta (K3: 4)"),
    KM(situ_linear_beta, T_REAL, "25.0", NULL, 1, "SiTU up-branch cap (K3: 25; 0 = no cap)"),
    KM(bias, T_BOOL, "true", NULL, 1, "biases in linear layers and norms"),
    KM(tie_embeddings, T_BOOL, "true", NULL, 1, "lm_head shares the token embedding"),
    KM(recompute_mlp, T_BOOL, "false", NULL, 0,
       "keep only the MLP's pre-activation and recompute its activation in the backward (less memory, same numbers)"),
    KM(init_std, T_REAL, "0.02", NULL, 0, "std of the normal init; residual projections get std/sqrt(2*n_layer)"),
    // MLA, MoE, AttnRes (docs/hybrid.md, "MLA token mixer (M)", "MoE channel mixer" and
    // "Block Attention Residuals")
    KM(mla_kv_rank, T_INT, "512", NULL, 1, "MLA: KV latent width r_kv"),
    KM(mla_q_rank, T_INT, "0", NULL, 1, "MLA: q LoRA width r_q (0 = direct q projection)"),
    KM(mla_qk_nope_dim, T_INT, "128", NULL, 1, "MLA: per-head q/k width without position (d_n)"),
    KM(mla_rope_dim, T_INT, "64", NULL, 1, "MLA: decoupled position slice d_r (per-head q, shared k; 0 = none)"),
    KM(mla_v_dim, T_INT, "128", NULL, 1, "MLA: per-head value width d_v"),
    KM(mla_rope, T_BOOL, "false", NULL, 1, "MLA: rotate the d_r slice (RoPE); false = NoPE as Kimi Linear"),
    KM(mla_rope_theta, T_REAL, "10000", NULL, 1, "MLA: RoPE base"),
    KM(mla_gate, T_BOOL, "false", NULL, 1, "MLA: sigmoid output gate (K3 gated MLA)"),
    KM(moe_experts, T_INT, "0", NULL, 1, "MoE: routed experts E (0 = dense MLP everywhere)"),
    KM(moe_top_k, T_INT, "2", NULL, 1, "MoE: experts per token"),
    KM(moe_hidden, T_INT, "0", NULL, 1, "MoE: routed expert hidden width m (required with moe_experts)"),
    KM(moe_shared, T_INT, "1", NULL, 1, "MoE: shared experts (one MLP of moe_shared * moe_shared_hidden)"),
    KM(moe_shared_hidden, T_INT, "0", NULL, 1, "MoE: hidden width per shared expert (0 = moe_hidden)"),
    KM(moe_latent_dim, T_INT, "0", NULL, 1, "MoE: latent width l of the routed experts (K3 latent MoE; 0 = full width)"),
    KM(moe_renorm, T_BOOL, "true", NULL, 1, "MoE: renormalise the top-k routing weights"),
    KM(moe_router, T_ENUM, "sigmoid", "sigmoid softmax", 1, "MoE: router scores, sigmoid (DeepSeek-V3, Kimi) or softmax over the experts"),
    KM(moe_route_scale, T_REAL, "1.0", NULL, 1, "MoE: routed scaling factor rho"),
    KM(moe_bias_update_rate, T_REAL, "1e-3", NULL, 0, "MoE: aux-loss-free bias step per optimizer step (0 = off)"),
    KM(moe_aux_loss_coef, T_REAL, "0", NULL, 0, "MoE: sequence-wise balance loss coefficient alpha (0 = off)"),
    KM(dense_first, T_INT, "0", NULL, 1, "MoE: the first N layers use the dense MLP (mlp_hidden)"),
    KM(attn_res_block, T_INT, "0", NULL, 1, "Block AttnRes block size in decoder layers (0 = plain residuals)"),
    // linear-attention mixers (K G D L)
    KM(linear_heads, T_INT, "0", NULL, 1, "heads of the K/G/D/L mixers (0 = n_head)"),
    KM(linear_head_dim, T_INT, "0", NULL, 1, "key head dim of the K/G/D/L mixers (0 = d_model / linear_heads)"),
    KM(linear_value_dim, T_INT, "0", NULL, 1, "value head dim of the K/G/D/L mixers (0 = linear_head_dim)"),
    KM(conv_size, T_INT, "4", NULL, 1, "short causal convolution window of K/G/D (1..64)"),
    KM(chunk_size, T_INT, "64", NULL, 0, "chunk size of the chunkwise K/G/D/L forms"),
    KM(kda_gate_lower_bound, T_REAL, "0", NULL, 1, "KDA gate: 0 = -exp(A_log) softplus(x + dt_bias); in [-5, 0) = lb sigmoid(exp(A_log)(x + dt_bias))"),
    KM(gate_rank, T_INT, "0", NULL, 1, "rank of KDA's low-rank decay gate and output gate (0 = linear_value_dim)"),
    KM(reset_at_eot, T_BOOL, "false", NULL, 1, "K/G/D/L states restart after every eot_token (softmax attention is not masked)"),
    KM(eot_token, T_INT, "50256", NULL, 1, "end-of-text token id (GPT-2: 50256)"),
    KM(classifier_chunk, T_INT, "0", NULL, 0, "tokens per chunk of the classifier (lm_head + cross-entropy): only a chunk's logits exist at once (0 = as many as fit in 256 MiB, a multiple of 128)"),
    // training
    K(batch_size, T_INT, "4", NULL, 0, "micro-batch rows per rank"),
    K(seq_len, T_INT, "1024", NULL, 0, "tokens per row"),
    K(total_batch_size, T_LONG, "0", NULL, 0, "tokens per optimizer step over all ranks (0 = one micro-batch); a multiple of batch_size*seq_len*ranks"),
    KO(steps, T_INT, "100", NULL, 0, "optimizer steps"),
    K(stop_at_step, T_INT, "0", NULL, 0, "end this run after this many steps with a checkpoint, as if interrupted (0 = off)"),
    KO(optimizer, T_ENUM, "adamw", "adamw muon", 0, "optimizer: AdamW everywhere, or Muon on hidden matrices + AdamW on the rest"),
    KO(lr, T_REAL, "6e-4", NULL, 0, "peak learning rate"),
    KO(lr_schedule, T_ENUM, "cosine", "cosine linear constant wsd", 0, "learning-rate schedule after warmup"),
    KO(warmup_steps, T_INT, "0", NULL, 0, "linear warmup steps"),
    KO(final_lr_frac, T_REAL, "0.0", NULL, 0, "final learning rate as a fraction of lr"),
    KO(wsd_decay_frac, T_REAL, "0.2", NULL, 0, "wsd: fraction of steps spent decaying"),
    KO(weight_decay, T_REAL, "0.1", NULL, 0, "decoupled weight decay (matrices and embeddings only)"),
    KO(beta1, T_REAL, "0.9", NULL, 0, "AdamW beta1"),
    KO(beta2, T_REAL, "0.95", NULL, 0, "AdamW beta2"),
    KO(adam_eps, T_REAL, "1e-8", NULL, 0, "AdamW epsilon"),
    KO(grad_clip, T_REAL, "1.0", NULL, 0, "clip the global gradient norm to this (0 = off)"),
    KO(muon_momentum, T_REAL, "0.95", NULL, 0, "Muon momentum"),
    KO(muon_nesterov, T_BOOL, "true", NULL, 0, "Muon Nesterov momentum"),
    KO(muon_ns_steps, T_INT, "5", NULL, 0, "Muon Newton-Schulz iterations"),
    KO(muon_scale, T_ENUM, "moonlight", "moonlight keller", 0,
      "Muon flavour: moonlight (momentum M = mu*M + g, scale 0.2*sqrt(max(rows,cols)): AdamW's lr and wd carry "
      "over) or keller (KellerJordan/Muon: M = mu*M + (1-mu)*g, scale sqrt(max(1,rows/cols)))"),
    KO(lr_matrix, T_REAL, "0", NULL, 0, "peak lr of 2-D hidden matrices (0 = lr)"),
    KO(lr_embed, T_REAL, "0", NULL, 0, "peak lr of embeddings and lm_head (0 = lr)"),
    KO(lr_norm, T_REAL, "0", NULL, 0, "peak lr of norm weights (0 = lr)"),
    KO(lr_bias, T_REAL, "0", NULL, 0, "peak lr of biases (0 = lr)"),
    KO(wd_matrix, T_REAL, "-1", NULL, 0, "weight decay of 2-D hidden matrices (-1 = weight_decay)"),
    KO(wd_embed, T_REAL, "-1", NULL, 0, "weight decay of embeddings and lm_head (-1 = weight_decay)"),
    KO(wd_norm, T_REAL, "-1", NULL, 0, "weight decay of norm weights (-1 = none)"),
    KO(wd_bias, T_REAL, "-1", NULL, 0, "weight decay of biases (-1 = none)"),
    KO(lr_router, T_REAL, "0", NULL, 0, "peak lr of MoE router weights (0 = lr)"),
    KO(wd_router, T_REAL, "-1", NULL, 0, "weight decay of MoE router weights (-1 = none)"),
    KO(lr_gate, T_REAL, "0", NULL, 0, "peak lr of A_log, dt_bias and short-conv kernels (0 = lr)"),
    KO(wd_gate, T_REAL, "-1", NULL, 0, "weight decay of A_log, dt_bias and short-conv kernels (-1 = none)"),
    K(seed, T_LONG, "1337", NULL, 0, "seed for init and data order"),
    K(vocab_dir, T_STR, "out/vocab", NULL, 0, "folder with GPT-2's encoder.json and vocab.bpe (samples print as text when present)"),
    K(train_data, T_STR, "", NULL, 0, "glob of training shards (llm.c format)"),
    K(val_data, T_STR, "", NULL, 0, "glob of validation shards (empty = no validation)"),
    K(val_every, T_INT, "50", NULL, 0, "steps between validation passes (0 = only at the end)"),
    K(val_batches, T_INT, "0", NULL, 0, "validation batches per pass (0 = the whole val split)"),
    K(shuffle, T_BOOL, "true", NULL, 0, "shuffle shard order and samples every epoch"),
    // generated MQAR data (docs/mqar.md, "Training on MQAR")
    K(mqar_pairs, T_INT, "0", NULL, 0,
      "MQAR: key-value pairs per sequence; > 0 trains on generated MQAR sequences of seq_len tokens over vocab_size "
      "instead of train_data/val_data (0 = shards)"),
    K(mqar_train_sequences, T_LONG, "100000", NULL, 0, "MQAR: training sequences (one epoch)"),
    K(mqar_val_sequences, T_INT, "1000", NULL, 0, "MQAR: validation sequences (0 = no validation)"),
    K(mqar_seed, T_LONG, "0", NULL, 0, "MQAR: seed of the generated sequences (train, val and eval-mqar streams)"),
    K(out_dir, T_STR, "out/runs/default", NULL, 0, "folder for the metrics log and checkpoints"),
    K(checkpoint_every, T_INT, "0", NULL, 0, "steps between checkpoints (0 = only at the end)"),
    K(keep_checkpoints, T_INT, "3", NULL, 0, "how many recent checkpoints to keep"),
    K(log_every, T_INT, "1", NULL, 0, "steps between progress lines"),
    K(sample_every, T_INT, "0", NULL, 0, "steps between samples (0 = only at the end)"),
    K(sample_tokens, T_INT, "64", NULL, 0, "tokens to generate per sample"),
    K(temperature, T_REAL, "1.0", NULL, 0, "sampling temperature (0 = greedy)"),
    K(device, T_ENUM, "cpu", "cpu cuda", 0, "where to run"),
    K(threads, T_INT, "0", NULL, 0, "CPU threads (0 = OpenMP default)"),
    K(zero, T_BOOL, "false", NULL, 0, "ZeRO-1 under mpirun: each rank keeps and updates 1/N of the AdamW state (optimizer = adamw)"),
    K(expert_parallel, T_INT, "1", NULL, 0, "ranks per expert-parallel group under mpirun (divides the ranks and moe_experts)"),
    K(bucket_mb, T_REAL, "25", NULL, 0, "gradient all-reduce bucket size in MB (overlapped with the backward on the GPU)"),
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

// Where each key was last set ("file:line" or "--key"), for error messages.
static char g_origin[NKEYS][160];

static const char *user_name(const Key *k) { return !strcmp(k->name, "layers_spec") ? "layers" : k->name; }

const char *config_model_key_given(void) {
    for (int i = 0; i < NKEYS; i++)
        if (KEYS[i].model && g_origin[i][0]) return user_name(&KEYS[i]);
    return NULL;
}

static const Key *find_key(const char *name, int *index) {
    char norm[128];
    size_t n = strlen(name);
    if (n >= sizeof(norm)) return NULL;
    for (size_t i = 0; i <= n; i++) norm[i] = name[i] == '-' ? '_' : name[i];
    if (!strcmp(norm, "layers")) strcpy(norm, "layers_spec");  // user-facing name
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(KEYS[i].name, norm)) {
            if (index) *index = i;
            return &KEYS[i];
        }
    return NULL;
}

int config_is_key(const char *key) { return find_key(key, NULL) != NULL; }

static const char *origin_of(const char *name) {
    int i;
    if (!find_key(name, &i)) return "?";
    return g_origin[i][0] ? g_origin[i] : "default";
}

const char *config_origin(const char *name) { return origin_of(name); }

// Expands "KKKM x4 A" into "KKKMKKKMKKKMA". Returns an error message or NULL.
static const char *expand_layers(const char *spec, char *out) {
    static char err[256];
    size_t n = 0;
    char buf[CONFIG_STR];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL, *prev = NULL;
    size_t prev_start = 0;
    for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (tok[0] == 'x' && tok[1] && isdigit((unsigned char)tok[1])) {
            if (!prev) return "a repeat 'xN' needs a pattern before it";
            char *end;
            long r = strtol(tok + 1, &end, 10);
            if (*end || r < 1) {
                snprintf(err, sizeof err, "bad repeat '%s'", tok);
                return err;
            }
            size_t len = n - prev_start;
            for (long i = 1; i < r; i++) {
                if (n + len > CONFIG_MAX_LAYERS) return "more than 256 layers";
                memcpy(out + n, out + prev_start, len);
                n += len;
            }
            prev = NULL;
            continue;
        }
        prev_start = n;
        for (char *c = tok; *c; c++) {
            if (!mixer_find(*c)) {
                snprintf(err, sizeof err, "unknown layer type '%c' (this build has: %s)", *c, mixer_letters_help());
                return err;
            }
            if (n >= CONFIG_MAX_LAYERS) return "more than 256 layers";
            out[n++] = *c;
        }
        prev = tok;
    }
    if (n == 0) return "no layers given";
    out[n] = 0;
    return NULL;
}

static int parse_bool(const char *v, int *out) {
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) { *out = 1; return 1; }
    if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) { *out = 0; return 1; }
    return 0;
}

// Sets key `name` to `value`; `where` names the source for errors.
static void set_key(Config *c, const char *name, const char *value, const char *where) {
    int index;
    const Key *k = find_key(name, &index);
    if (!k) die("%s: unknown config key '%s' (see `hybrid train --help` for the list)", where, name);
    char *field = (char *)c + k->offset;
    char *end;
    errno = 0;
    switch (k->type) {
    case T_INT: {
        long v = strtol(value, &end, 10);
        if (!*value || *end || errno || v < -2147483647L || v > 2147483647L)
            die("%s: %s: '%s' is not an integer", where, user_name(k), value);
        if (v < 0) die("%s: %s: must not be negative (got %ld)", where, user_name(k), v);
        *(int *)field = (int)v;
        break;
    }
    case T_LONG: {
        long v = strtol(value, &end, 10);
        if (!*value || *end || errno) die("%s: %s: '%s' is not an integer", where, user_name(k), value);
        if (v < 0) die("%s: %s: must not be negative (got %ld)", where, user_name(k), v);
        *(long *)field = v;
        break;
    }
    case T_REAL: {
        double v = strtod(value, &end);
        if (!*value || *end || errno || !isfinite(v)) die("%s: %s: '%s' is not a number", where, user_name(k), value);
        *(double *)field = v;
        break;
    }
    case T_BOOL:
        if (!parse_bool(value, (int *)field))
            die("%s: %s: '%s' is not a boolean (true/false)", where, user_name(k), value);
        break;
    case T_STR:
        if (strlen(value) >= CONFIG_STR) die("%s: %s: value longer than %d characters", where, user_name(k), CONFIG_STR - 1);
        strcpy(field, value);
        break;
    case T_ENUM: {
        int idx = 0, found = -1;
        const char *p = k->choices;
        size_t vl = strlen(value);
        while (*p) {
            const char *e = strchr(p, ' ');
            size_t l = e ? (size_t)(e - p) : strlen(p);
            if (l == vl && !strncmp(p, value, l)) found = idx;
            idx++;
            p += l;
            while (*p == ' ') p++;
        }
        if (found < 0) die("%s: %s: '%s' is not one of: %s", where, user_name(k), value, k->choices);
        *(int *)field = found;
        break;
    }
    case T_LAYERS: {
        if (strlen(value) >= CONFIG_STR) die("%s: layers: value too long", where);
        const char *err = expand_layers(value, c->model.layers);
        if (err) die("%s: layers: %s", where, err);
        strcpy(c->model.layers_spec, value);
        c->model.n_layer = (int)strlen(c->model.layers);
        break;
    }
    }
    snprintf(g_origin[index], sizeof g_origin[index], "%s", where);
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++) set_key(c, KEYS[i].name, KEYS[i].def, "default");
    for (int i = 0; i < NKEYS; i++) g_origin[i][0] = 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

void config_load_file(Config *c, const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) die("%s: cannot read config file (%s)", path, strerror(errno));
    if (strlen(text) != len) die("%s: config file contains a NUL byte", path);
    int lineno = 0;
    // split by hand: strtok would skip empty lines and break the line numbers
    for (char *line = text; line; ) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (*s) {
            char where[160];
            snprintf(where, sizeof where, "%s:%d", path, lineno);
            char *eq = strchr(s, '=');
            if (!eq) die("%s: expected 'key = value', got '%s'", where, s);
            *eq = 0;
            char *key = trim(s), *value = trim(eq + 1);
            if (!*key) die("%s: missing key before '='", where);
            int index;  // a key given twice in one file is a mistake, not an override
            size_t plen = strlen(path);
            if (find_key(key, &index) && !strncmp(g_origin[index], path, plen) && g_origin[index][plen] == ':')
                die("%s: %s is given twice (first at %s)", where, key, g_origin[index]);
            set_key(c, key, value, where);
        }
        line = next;
    }
    free(text);
}

void config_set_override(Config *c, const char *key, const char *value) {
    char where[160];
    snprintf(where, sizeof where, "command line --%s", key);
    set_key(c, key, value, where);
}

void config_finalize(Config *c) {
#define BAD(key, ...) do { fprintf(stderr, "hybrid: error: %s: ", origin_of(key)); \
        fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)
    // the model's keys (model/model_config.c, with each token mixer's)
    const char *key = NULL, *why = model_config_finalize(&c->model, config_origin, &key);
    if (why) BAD(key, "%s", why);
    // the run's
    if (c->batch_size < 1) BAD("batch_size", "batch_size must be positive");
    if (c->seq_len < 1) BAD("seq_len", "seq_len must be positive");
    if ((int64_t)c->batch_size * c->seq_len > INT_MAX)
        BAD("batch_size", "batch_size x seq_len = %lld tokens per micro-batch exceeds %d",
            (long long)c->batch_size * c->seq_len, INT_MAX);
    if (c->total_batch_size && c->total_batch_size < (long)c->batch_size * c->seq_len)
        BAD("total_batch_size", "total_batch_size = %ld is less than one micro-batch of batch_size x seq_len = %ld "
                                "tokens: no step would train on anything (0 = one micro-batch)",
            c->total_batch_size, (long)c->batch_size * c->seq_len);
    if (c->sample_tokens > CONFIG_SAMPLE_TOKENS_MAX)
        BAD("sample_tokens", "sample_tokens = %d exceeds %d", c->sample_tokens, CONFIG_SAMPLE_TOKENS_MAX);
    if (c->model.position == POS_LEARNED && c->seq_len > c->model.context_length)
        BAD("seq_len", "seq_len = %d exceeds context_length = %d (learned positions; context_length set at %s)",
            c->seq_len, c->model.context_length, origin_of("context_length"));
    if (c->mqar_pairs > 0) {
        const MqarSpec spec = {c->model.vocab_size, c->seq_len, c->mqar_pairs};
        char why[256];
        const char *bad = mqar_check(&spec, why, sizeof why);
        if (bad) BAD(bad, "%s", why);
        if (c->train_data[0] || c->val_data[0])
            BAD(c->train_data[0] ? "train_data" : "val_data",
                "%s is set, but mqar_pairs = %d > 0 (set at %s) trains on generated MQAR sequences: give one or the "
                "other (train_data = \"\" and val_data = \"\" for MQAR)",
                c->train_data[0] ? "train_data" : "val_data", c->mqar_pairs, origin_of("mqar_pairs"));
        if (c->mqar_train_sequences < 1) BAD("mqar_train_sequences", "mqar_train_sequences must be at least 1");
    }
    // the optimizer's
    const OptimConfig *o = &c->optim;
    if (o->steps < 1) BAD("steps", "steps must be at least 1");
    if (c->stop_at_step > o->steps) BAD("stop_at_step", "stop_at_step = %d exceeds steps = %d", c->stop_at_step, o->steps);
    if (o->lr <= 0) BAD("lr", "lr must be positive");
    if (o->warmup_steps > o->steps)
        BAD("warmup_steps", "warmup_steps = %d exceeds steps = %d", o->warmup_steps, o->steps);
    if (o->final_lr_frac < 0 || o->final_lr_frac > 1) BAD("final_lr_frac", "final_lr_frac must lie in [0, 1]");
    if (o->wsd_decay_frac < 0 || o->wsd_decay_frac > 1) BAD("wsd_decay_frac", "wsd_decay_frac must lie in [0, 1]");
    if (o->weight_decay < 0) BAD("weight_decay", "weight_decay must not be negative");
    if (o->beta1 < 0 || o->beta1 >= 1) BAD("beta1", "beta1 must lie in [0, 1)");
    if (o->beta2 < 0 || o->beta2 >= 1) BAD("beta2", "beta2 must lie in [0, 1)");
    if (o->adam_eps <= 0) BAD("adam_eps", "adam_eps must be positive");
    if (o->grad_clip < 0) BAD("grad_clip", "grad_clip must not be negative");
    if (o->muon_momentum < 0 || o->muon_momentum >= 1) BAD("muon_momentum", "muon_momentum must lie in [0, 1)");
    if (o->muon_ns_steps < 1) BAD("muon_ns_steps", "muon_ns_steps must be at least 1");
    {
        const char *lr_keys[6] = {"lr_matrix", "lr_embed", "lr_norm", "lr_bias", "lr_router", "lr_gate"};
        const char *wd_keys[6] = {"wd_matrix", "wd_embed", "wd_norm", "wd_bias", "wd_router", "wd_gate"};
        const double lrs[6] = {o->lr_matrix, o->lr_embed, o->lr_norm, o->lr_bias, o->lr_router, o->lr_gate};
        const double wds[6] = {o->wd_matrix, o->wd_embed, o->wd_norm, o->wd_bias, o->wd_router, o->wd_gate};
        for (int i = 0; i < 6; i++) {
            if (lrs[i] < 0) BAD(lr_keys[i], "%s must not be negative (0 = lr)", lr_keys[i]);
            if (wds[i] < 0 && wds[i] != -1) BAD(wd_keys[i], "%s must be >= 0, or -1 for the default", wd_keys[i]);
        }
    }
    // the run's, again
    if (c->keep_checkpoints < 1) BAD("keep_checkpoints", "keep_checkpoints must be at least 1");
    if (c->expert_parallel < 1) BAD("expert_parallel", "expert_parallel must be at least 1");
    if (c->expert_parallel > 1 && (c->model.moe_experts < 1 || c->model.moe_experts % c->expert_parallel))
        BAD("expert_parallel", "expert_parallel = %d must divide moe_experts = %d", c->expert_parallel,
            c->model.moe_experts);
    if (c->bucket_mb <= 0) BAD("bucket_mb", "bucket_mb must be positive");
    if (c->zero && o->optimizer == OPT_MUON)
        BAD("zero", "zero = true shards AdamW state; with optimizer = muon the hidden matrices are already split by "
                    "ownership (each rank orthogonalises its own): set zero = false");
    if (c->log_every < 1) BAD("log_every", "log_every must be at least 1");
    if (c->temperature < 0) BAD("temperature", "temperature must not be negative");
    if (!c->out_dir[0]) BAD("out_dir", "out_dir must not be empty");
#undef BAD
}

static void write_value(const Config *c, const Key *k, FILE *f) {
    const char *field = (const char *)c + k->offset;
    switch (k->type) {
    case T_INT: fprintf(f, "%d", *(const int *)field); break;
    case T_LONG: fprintf(f, "%ld", *(const long *)field); break;
    case T_REAL: fprintf(f, "%.17g", *(const double *)field); break;
    case T_BOOL: fprintf(f, "%s", *(const int *)field ? "true" : "false"); break;
    case T_STR: fprintf(f, "%s", field); break;
    case T_LAYERS: fprintf(f, "%s", c->model.layers_spec); break;
    case T_ENUM: {
        int want = *(const int *)field, idx = 0;
        const char *p = k->choices;
        while (*p) {
            const char *e = strchr(p, ' ');
            int l = e ? (int)(e - p) : (int)strlen(p);
            if (idx == want) fprintf(f, "%.*s", l, p);
            idx++;
            p += l;
            while (*p == ' ') p++;
        }
        break;
    }
    }
}

void config_write(const Config *c, FILE *f) {
    for (int i = 0; i < NKEYS; i++) {
        fprintf(f, "%s = ", user_name(&KEYS[i]));
        write_value(c, &KEYS[i], f);
        fprintf(f, "\n");
    }
}

const char *config_model_mismatch(const Config *a, const Config *b) {
    for (int i = 0; i < NKEYS; i++) {
        if (!KEYS[i].model) continue;
        char va[CONFIG_STR + 32], vb[CONFIG_STR + 32];
        FILE *fa = fmemopen(va, sizeof va, "w"), *fb = fmemopen(vb, sizeof vb, "w");
        if (!fa || !fb) die("fmemopen failed");
        write_value(a, &KEYS[i], fa);
        write_value(b, &KEYS[i], fb);
        fclose(fa);
        fclose(fb);
        if (strcmp(va, vb)) return user_name(&KEYS[i]);
    }
    return NULL;
}

char *config_to_text(const Config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("open_memstream failed");
    config_write(c, f);
    fclose(f);
    return text;
}

void config_value_text(const Config *c, const char *key, char *buf, size_t size) {
    int index;
    const Key *k = find_key(key, &index);
    snprintf(buf, size, "?");
    if (!k) return;
    FILE *f = fmemopen(buf, size, "w");
    if (!f) die("fmemopen failed");
    write_value(c, k, f);
    fclose(f);
}

void config_print_keys(FILE *f) {
    fprintf(f, "  layers letters: %s\n", mixer_letters_help());
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        if (k->type == T_ENUM)
            fprintf(f, "  --%-18s %s [%s] (default %s)\n", user_name(k), k->help, k->choices, k->def);
        else
            fprintf(f, "  --%-18s %s (default %s)\n", user_name(k), k->help, *k->def ? k->def : "\"\"");
    }
}
