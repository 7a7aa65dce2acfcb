// The trainer's configuration: `key = value` files (configs/*.conf) plus `--key value`
// overrides. Every key is listed once, in the table in train/config.c, which drives
// parsing, validation messages, `--help` and the checkpoint copy. A Config is the model's
// keys (ModelConfig, model/model_config.h), the optimizer's (OptimConfig,
// optim/optim_config.h) and the run's (batch shape, data, checkpoints, output, device).
#ifndef HYBRID_CONFIG_H
#define HYBRID_CONFIG_H

#include <stdio.h>

#include "model/model_config.h"
#include "optim/optim_config.h"

typedef enum { DEVICE_CPU, DEVICE_CUDA } DeviceKind;

// Most tokens one sample may generate (sample_tokens, hybrid sample --tokens): the caches of
// the cached forward and the token buffer are sized from it.
#define CONFIG_SAMPLE_TOKENS_MAX 65536
// Most gradient-accumulation micro-steps one optimizer step may take.
#define CONFIG_ACCUM_MAX (1 << 20)

typedef struct {
    ModelConfig model;
    OptimConfig optim;
    // ---- the run ----
    int batch_size;                   // micro-batch rows per rank
    int seq_len;                      // tokens per row
    long total_batch_size;            // tokens per optimizer step, all ranks; 0 = one micro-batch
    int stop_at_step;
    long seed;
    char vocab_dir[CONFIG_STR];       // GPT-2 encoder.json + vocab.bpe, for text samples
    char train_data[CONFIG_STR];
    char val_data[CONFIG_STR];
    int val_every;
    int val_batches;                  // 0 = the whole val split
    int shuffle;
    // generated MQAR data instead of shards (mqar_pairs > 0; docs/mqar.md, "Training on MQAR")
    int mqar_pairs;
    long mqar_train_sequences;
    int mqar_val_sequences;           // 0 = no validation
    long mqar_seed;
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
// The text config_write gives `key` in buf (for messages; "?" if there is no such key).
void config_value_text(const Config *c, const char *key, char *buf, size_t size);
// Prints the key reference (name, default, help) for --help.
void config_print_keys(FILE *f);
// True if `key` names a config key.
int config_is_key(const char *key);
// Where key was last set ("file:line", "command line --key" or "default"), for messages.
const char *config_origin(const char *key);
// The first key that fixes parameter shapes (a resume-checked model key) set by a file or
// an override since config_defaults, or NULL.
const char *config_model_key_given(void);

#endif
