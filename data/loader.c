#include "loader.h"

#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"
#include "shard.h"
#include "shardcheck.h"

// Fisher-Yates from a generator seeded by (seed, epoch, salt): every rank computes
// the same permutation, so ranks agree on which sample forms each global batch.
static void permute(uint64_t *perm, size_t n, uint64_t seed, uint64_t epoch, uint64_t salt) {
    for (size_t i = 0; i < n; i++) perm[i] = i;
    Rng r;
    rng_seed(&r, seed ^ (epoch * 0x9E3779B97F4A7C15ull) ^ (salt * 0xC2B2AE3D27D4EB4Full));
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng_below(&r, i);
        uint64_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

static void prepare_epoch(Loader *L) {
    uint64_t *order = xmalloc(sizeof(uint64_t) * (size_t)L->nshards);
    if (L->shuffle) permute(order, (size_t)L->nshards, L->seed, L->pos.epoch, 0x5AD5);
    else for (int i = 0; i < L->nshards; i++) order[i] = (uint64_t)i;
    for (int i = 0; i < L->nshards; i++) L->shard_order[i] = (int)order[i];
    free(order);
}

static void prepare_shard(Loader *L) {
    int s = L->shard_order[L->pos.shard];
    free(L->sample_order);
    L->sample_order = xmalloc(sizeof(uint64_t) * (L->nsamples[s] ? L->nsamples[s] : 1));
    if (L->shuffle) permute(L->sample_order, L->nsamples[s], L->seed, L->pos.epoch, 1 + (uint64_t)s);
    else for (size_t i = 0; i < L->nsamples[s]; i++) L->sample_order[i] = i;
}

void loader_open(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size, int shuffle,
                 uint64_t seed) {
    memset(L, 0, sizeof *L);
    ShardList list;
    shards_open(&list, pattern, vocab_size, rank == 0);
    L->nshards = list.n;
    L->paths = list.paths;  // the loader owns them now
    L->ntok = list.ntok;
    L->nsamples = xcalloc((size_t)L->nshards, sizeof(size_t));
    L->B = B;
    L->T = T;
    L->rank = rank;
    L->world = world;
    L->vocab_size = vocab_size;
    L->shuffle = shuffle;
    L->seed = seed;
    const size_t sample_tokens = (size_t)world * B * T;
    for (int i = 0; i < L->nshards; i++) {
        // every slot needs B*T+1 tokens: the last target comes from the next slot
        L->nsamples[i] = L->ntok[i] > 0 ? (L->ntok[i] - 1) / sample_tokens : 0;
        if (L->nsamples[i] == 0)
            die("%s: %zu tokens is too small for one batch of %d rank(s) x %d x %d + 1 tokens", L->paths[i], L->ntok[i],
                world, B, T);
    }
    L->shard_order = xmalloc(sizeof(int) * (size_t)L->nshards);
    L->buf = xmalloc(sizeof(uint16_t) * ((size_t)B * T + 1));
    loader_seek(L, (LoaderPosition){0, 0, 0});
}

void loader_close(Loader *L) {
    for (int i = 0; i < L->nshards; i++) free(L->paths[i]);
    free(L->paths);
    free(L->ntok);
    free(L->nsamples);
    free(L->shard_order);
    free(L->sample_order);
    free(L->buf);
    memset(L, 0, sizeof *L);
}

void loader_seek(Loader *L, LoaderPosition pos) {
    if (pos.shard >= (uint64_t)L->nshards) die("data: saved position names shard %llu of %d", (unsigned long long)pos.shard, L->nshards);
    L->pos = pos;
    prepare_epoch(L);
    int s = L->shard_order[pos.shard];
    if (pos.sample >= L->nsamples[s])
        die("%s: saved position names sample %llu of %zu (were the shards or batch shape changed?)", L->paths[s],
            (unsigned long long)pos.sample, L->nsamples[s]);
    prepare_shard(L);
}

void loader_reset(Loader *L) { loader_seek(L, (LoaderPosition){0, 0, 0}); }

size_t loader_samples_per_epoch(const Loader *L) {
    size_t n = 0;
    for (int i = 0; i < L->nshards; i++) n += L->nsamples[i];
    return n;
}

void loader_next(Loader *L, int *inputs, int *targets) {
    const size_t BT = (size_t)L->B * L->T;
    int s = L->shard_order[L->pos.shard];
    size_t sample = L->sample_order[L->pos.sample];
    size_t start = sample * (size_t)L->world * BT + (size_t)L->rank * BT;
    shard_read(L->paths[s], start, BT + 1, L->buf);
    for (size_t i = 0; i <= BT; i++)  // checked at open; this catches a file replaced since
        if (L->buf[i] >= L->vocab_size)
            die("%s: token id %u at token %zu is >= vocab_size %d (the file changed after it was checked at open)",
                L->paths[s], L->buf[i], start + i, L->vocab_size);
    for (size_t i = 0; i < BT; i++) {
        inputs[i] = L->buf[i];
        targets[i] = L->buf[i + 1];
    }
    // advance: next sample, next shard, next epoch
    if (++L->pos.sample >= L->nsamples[s]) {
        L->pos.sample = 0;
        if (++L->pos.shard >= (uint64_t)L->nshards) {
            L->pos.shard = 0;
            L->pos.epoch++;
            prepare_epoch(L);
        }
        prepare_shard(L);
    }
}
