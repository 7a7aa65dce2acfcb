// trainer_state.txt of a checkpoint: `key = value` lines (step, world, data_epoch,
// data_shard, data_sample, rng, tokens_seen). Integers are written exactly and
// tokens_seen with %.17g, so a save/load round trip is bit-identical.
#ifndef HYBRID_TRAINER_STATE_H
#define HYBRID_TRAINER_STATE_H

#include "checkpoints/checkpoint.h"

void trainer_state_write(const char *path, const TrainerState *ts);
// Dies naming the file (and line) on a missing, unknown, repeated or invalid key.
void trainer_state_read(const char *path, TrainerState *ts);

#endif
