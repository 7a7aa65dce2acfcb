// The trainer's side of checkpoints (checkpoints/checkpoint.h has the format): saving with
// the run's config, reading a checkpoint's config.conf, and the checks that a checkpoint
// can continue under a run's config.
#ifndef HYBRID_CHECKPOINT_CONFIG_H
#define HYBRID_CHECKPOINT_CONFIG_H

#include "checkpoints/checkpoint.h"
#include "checkpoints/hf_io.h"
#include "train/config.h"

// checkpoint_save with c's text as config.conf and the Muon momentum form of c's optimizer.
void checkpoint_save_run(const Config *c, const ParamTable *t, const float *params, const float *m, const float *v,
                         const TrainerState *ts);

// Reads the config stored in a checkpoint directory (defaults + config.conf, finalized).
void checkpoint_read_config(const char *dir, Config *c);

// Dies with "<dir>/config.conf: checkpoint has n_head = 4 but the config says 8" if the
// checkpoint's config differs from `want` in a key that fixes the parameter shapes.
void checkpoint_check_config(const char *dir, const Config *want);

// Dies naming <dir>/optimizer.safetensors if its optimizer state cannot continue under
// `want`: a Muon checkpoint resumed by a Muon run whose momentum form differs (e.g. a
// muon_scale = keller checkpoint written before keller took the EMA form: its momentum is
// the sum form). Checkpoints of AdamW runs, or resumed by one, pass; so does a missing file
// (checkpoint_load reports it).
void checkpoint_check_optimizer(const char *dir, const Config *want);

// Sets the model keys of a GPT2LMHeadModel's config.json (hf_io.h) on c: layers = A x
// n_layer, d_model, n_head, vocab_size (padded_vocab_size 0: rounded up to 128),
// context_length, mlp_hidden, norm_eps, init_std, GPT-2's switches, tie_embeddings and
// eot_token. The caller finalizes.
void checkpoint_config_from_hf_gpt2(Config *c, const HfGpt2Config *h);

#endif
