// Checkpoints (docs/architecture.md, "File formats"). A checkpoint is a directory
//   <out_dir>/checkpoints/step_00000100/
//       config.conf          the full config (the trainer's config_write)
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
#include "model/model_config.h"
#include "model/ops/optim/muon.h"
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
// leftover .step_*.tmp folder of an interrupted save. config_text becomes config.conf (the
// trainer's config_to_text). params, m and v are host fp32 arrays of t->total elements (m,
// v may be NULL for a weights-only checkpoint); muon_form: the form of the Muon momentum
// that m holds for a Muon run (MUON_MOMENTUM_EMA is recorded in the metadata; AdamW runs
// pass MUON_MOMENTUM_SUM, recorded by the key's absence). Dies with a clear error on failure.
void checkpoint_save(const char *out_dir, const char *config_text, const ParamTable *t, const float *params,
                     const float *m, const float *v, MuonMomentumForm muon_form, const TrainerState *ts, int keep);

// Writes a weights-only checkpoint into the new folder `dir` itself (config.conf,
// model.safetensors, trainer_state.txt; no optimizer.safetensors), under a temporary name
// renamed into place: what `hybrid import` makes. Dies if dir exists.
void checkpoint_save_weights(const char *dir, const char *config_text, const ParamTable *t, const float *params,
                             const TrainerState *ts);

// 1 if the checkpoint folder has optimizer state (optimizer.safetensors), 0 for weights only.
int checkpoint_has_optimizer(const char *dir);

// Path of the newest complete checkpoint under out_dir/checkpoints (caller frees), or NULL.
// Complete = a folder named step_%08d: a save only gets that name once fully written.
char *checkpoint_latest(const char *out_dir);

// The form of the Muon momentum stored in <dir>/optimizer.safetensors (its metadata; absent:
// the sum form). Returns 0 if there is no optimizer file; dies on an unknown value. (The
// trainer's checks against a run's config: train/checkpoint_config.h.)
int checkpoint_muon_momentum(const char *dir, MuonMomentumForm *form);

// Loads a checkpoint into host arrays of t->total elements. Every tensor of the table
// must be present with its shape (dies naming the file and tensor otherwise); m and v
// may be NULL to skip the optimizer state; ts may be NULL.
void checkpoint_load(const char *dir, const ParamTable *t, float *params, float *m, float *v, TrainerState *ts);

#endif
