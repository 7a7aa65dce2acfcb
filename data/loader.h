// Token-sharded data loader over llm.c-format shards (docs/background.md, "llm.c token
// shards" and "Token-sharded loading").
//
// One "sample" is one global micro-batch of world * B * T tokens (+1 for the shifted
// targets). Rank r reads slot r of every sample: ranks see disjoint, contiguous slices
// and together cover every sample exactly once per epoch. With shuffle on, the shard
// order and the sample order inside each shard are permuted per epoch from
// (seed, epoch), so the position is fully described by (epoch, shard, sample).
//
// The same loader also serves generated MQAR sequences (loader_open_mqar; docs/mqar.md,
// "Training on MQAR"): one virtual shard of a fixed number of sequences, each made on demand
// from its index, with targets -1 except at the queries. Positions, shuffling, resume and
// validation work exactly as for shards.
#ifndef HYBRID_LOADER_H
#define HYBRID_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/mqar.h"

typedef struct {
    uint64_t epoch;   // epochs completed
    uint64_t shard;   // index into this epoch's shard order
    uint64_t sample;  // index into this shard's sample order
} LoaderPosition;

typedef struct {
    char **paths;       // sorted shard paths
    size_t *ntok;       // tokens in each shard
    size_t *nsamples;   // samples in each shard
    int nshards;
    int B, T, rank, world;
    int vocab_size;     // token ids must be below this
    int shuffle;
    uint64_t seed;
    LoaderPosition pos;
    // per-epoch permutations (recomputed from seed and epoch)
    int *shard_order;
    uint64_t *sample_order;  // for the current shard
    uint16_t *buf;           // B*T+1 tokens
    // MQAR (mqar.pairs > 0): sequences of stream mqar_stream under mqar_seed instead of shards
    MqarSpec mqar;
    uint64_t mqar_seed;
    MqarStream mqar_stream;
} Loader;

// Opens and checks every shard that matches `pattern` (a glob; data/shardcheck.h: the
// manifest, sizes, checksums and token ids, each shard read once). Dies naming the file
// on a missing match, a set that does not match its manifest, wrong magic or version, a
// size that does not match the header, a token id >= vocab_size, or a shard too small
// for one sample. Rank 0 prints the notes (a set without a manifest).
void loader_open(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size, int shuffle,
                 uint64_t seed);
// loader_open without shuffling, with the batch lowered from B to the largest b for which every
// shard holds one sample of world * b * T + 1 tokens; returns the batch it uses. The trainer's
// validation loader: a split smaller than one training batch validates with smaller batches
// instead of stopping the run. Dies as loader_open does when a shard holds not even one
// sequence per rank.
int loader_open_fit(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size);
// A loader over `sequences` generated MQAR sequences of spec (which must pass mqar_check;
// T = spec->seq_len): one sample is world * B whole sequences, sample k holding sequences
// k * world * B .. (k + 1) * world * B - 1 and rank r the r-th B of them; a remainder of
// fewer than world * B sequences is never read. `what` names the setting that chose
// `sequences` in messages (e.g. "mqar_train_sequences"); dies when there are too few for one
// sample.
void loader_open_mqar(Loader *L, const MqarSpec *spec, uint64_t mqar_seed, MqarStream stream, uint64_t sequences,
                      const char *what, int B, int rank, int world, int shuffle, uint64_t seed);
void loader_close(Loader *L);
// Next B*T inputs and targets (shards: the targets are the inputs shifted by one; MQAR:
// the sequences' own targets). Wraps to a new epoch at the end.
void loader_next(Loader *L, int *inputs, int *targets);
// Rewinds to the start (for validation passes).
void loader_reset(Loader *L);
// Samples per epoch, over all shards.
size_t loader_samples_per_epoch(const Loader *L);
// Moves to a saved position (resume).
void loader_seek(Loader *L, LoaderPosition pos);

#endif
