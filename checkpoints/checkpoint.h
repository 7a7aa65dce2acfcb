// Checkpoints (ARCHITECTURE §4). A checkpoint is a directory
//   <out_dir>/checkpoints/step_00000100/
//       config.conf          the full config (config_write)
//       model.safetensors    fp32 weights, names and shapes from the parameter table
//       optimizer.safetensors  fp32 AdamW moments "m.<name>", "v.<name>" (Muon tensors: the
//                            momentum in m); metadata CHECKPOINT_MUON_MOMENTUM_KEY = "ema"
//                            when a Muon run keeps its momentum in the EMA form (muon.h)
//       trainer_state.txt    step, data position, RNG state, world size (key = value)
// written under a temporary name and renamed into place, so a crash never leaves a
// half-written checkpoint; the last `keep` checkpoints are kept.
//
// The Muon momentum form: without the metadata key a Muon checkpoint's momentum is in the
// sum form (muon_scale = moonlight, and every checkpoint written before muon_scale = keller
// took KellerJordan/Muon's EMA form), so moonlight and AdamW checkpoints are unchanged.
#ifndef HYBRID_CHECKPOINT_H
#define HYBRID_CHECKPOINT_H

#include <stdint.h>

#include "data/loader.h"
#include "model/config.h"
#include "model/params.h"

// optimizer.safetensors metadata: the Muon momentum form ("ema"; absent: "sum")
#define CHECKPOINT_MUON_MOMENTUM_KEY "hybrid.muon_momentum"

typedef struct {
    int step;              // optimizer steps completed
    int world;             // ranks the run used
    LoaderPosition data;   // the training loader's position
    uint64_t rng;          // the trainer's sampling RNG state
    double tokens_seen;
} TrainerState;

// Writes checkpoint `step` under out_dir/checkpoints/, then removes all but the newest
// `keep` (the one just written is never removed, even if older steps exist) and any
// leftover .step_*.tmp folder of an interrupted save. params, m and v are host fp32 arrays
// of t->total elements (m, v may be NULL for a weights-only checkpoint). Returns nothing;
// dies with a clear error on failure.
void checkpoint_save(const char *out_dir, const Config *c, const ParamTable *t, const float *params, const float *m,
                     const float *v, const TrainerState *ts, int keep);

// Path of the newest complete checkpoint under out_dir/checkpoints (caller frees), or NULL.
// Complete = a folder named step_%08d: a save only gets that name once fully written.
char *checkpoint_latest(const char *out_dir);

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

// Loads a checkpoint into host arrays of t->total elements. Every tensor of the table
// must be present with its shape (dies naming the file and tensor otherwise); m and v
// may be NULL to skip the optimizer state; ts may be NULL.
void checkpoint_load(const char *dir, const ParamTable *t, float *params, float *m, float *v, TrainerState *ts);

// Writes a Hugging Face GPT2LMHeadModel folder (config.json + model.safetensors with
// HF names and Conv1D (in, out) layout). Dies if the config is not GPT-2 shaped.
void export_hf_gpt2(const char *dir, const Config *c, const ParamTable *t, const ModelParams *mp, const float *params);

#endif
