// Token-sharded data loader over llm.c-format shards (docs/background.md, "llm.c token
// shards" and "Token-sharded loading").
//
// One "sample" is one global micro-batch of world * B * T tokens (+1 for the shifted
// targets). Rank r reads slot r of every sample: ranks see disjoint, contiguous slices
// and together cover every sample exactly once per epoch. With shuffle on, the shard
// order and the sample order inside each shard are permuted per epoch from
// (seed, epoch), so the position is fully described by (epoch, shard, sample).
#ifndef HYBRID_LOADER_H
#define HYBRID_LOADER_H

#include <stddef.h>
#include <stdint.h>

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
} Loader;

// Opens and checks every shard that matches `pattern` (a glob; data/shardcheck.h: the
// manifest, sizes, checksums and token ids, each shard read once). Dies naming the file
// on a missing match, a set that does not match its manifest, wrong magic or version, a
// size that does not match the header, a token id >= vocab_size, or a shard too small
// for one sample. Rank 0 prints the notes (a set without a manifest).
void loader_open(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size, int shuffle,
                 uint64_t seed);
void loader_close(Loader *L);
// Next B*T inputs and targets (targets are inputs shifted by one). Wraps to a new
// epoch at the end.
void loader_next(Loader *L, int *inputs, int *targets);
// Rewinds to the start (for validation passes).
void loader_reset(Loader *L);
// Samples per epoch, over all shards.
size_t loader_samples_per_epoch(const Loader *L);
// Moves to a saved position (resume).
void loader_seek(Loader *L, LoaderPosition pos);

#endif
