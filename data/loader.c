#include "loader.h"

#include <stdio.h>
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

// loader_open, and with fit set loader_open_fit: B lowered first to the largest batch every
// shard holds one sample of (left as it is when not even one sequence fits, so that the error
// below names the shard)
static void open_shards(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size,
                        int shuffle, uint64_t seed, int fit) {
    memset(L, 0, sizeof *L);
    ShardList list;
    shards_open(&list, pattern, vocab_size, rank == 0);
    for (int i = 0; fit && i < list.n; i++) {
        const size_t b = list.ntok[i] > 0 ? (list.ntok[i] - 1) / ((size_t)world * T) : 0;
        if (b >= 1 && b < (size_t)B) B = (int)b;
    }
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

void loader_open(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size, int shuffle,
                 uint64_t seed) {
    open_shards(L, pattern, B, T, rank, world, vocab_size, shuffle, seed, 0);
}

int loader_open_fit(Loader *L, const char *pattern, int B, int T, int rank, int world, int vocab_size) {
    open_shards(L, pattern, B, T, rank, world, vocab_size, 0, 0, 1);
    return L->B;
}

void loader_open_mqar(Loader *L, const MqarSpec *spec, uint64_t mqar_seed, MqarStream stream, uint64_t sequences,
                      const char *what, int B, int rank, int world, int shuffle, uint64_t seed) {
    memset(L, 0, sizeof *L);
    char why[256];
    if (mqar_check(spec, why, sizeof why)) die("%s", why);
    const uint64_t per_sample = (uint64_t)world * (uint64_t)B;
    if (sequences < per_sample)
        die("%s = %llu MQAR sequences is fewer than one batch of %d rank(s) x batch_size %d", what,
            (unsigned long long)sequences, world, B);
    char name[160];
    snprintf(name, sizeof name, "MQAR %s (%s = %llu, mqar_pairs = %d)", stream == MQAR_TRAIN ? "train" : "val", what,
             (unsigned long long)sequences, spec->pairs);
    L->nshards = 1;
    L->paths = xmalloc(sizeof(char *));
    L->paths[0] = xstrdup(name);
    L->ntok = xmalloc(sizeof(size_t));
    L->ntok[0] = (size_t)sequences * (size_t)spec->seq_len;
    L->nsamples = xmalloc(sizeof(size_t));
    L->nsamples[0] = (size_t)(sequences / per_sample);
    L->B = B;
    L->T = spec->seq_len;
    L->rank = rank;
    L->world = world;
    L->vocab_size = spec->vocab_size;
    L->shuffle = shuffle;
    L->seed = seed;
    L->mqar = *spec;
    L->mqar_seed = mqar_seed;
    L->mqar_stream = stream;
    L->shard_order = xmalloc(sizeof(int));
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

// This rank's B sequences of MQAR sample `sample`.
static void mqar_next(Loader *L, size_t sample, int *inputs, int *targets) {
    const size_t T = (size_t)L->T;
    const uint64_t first = ((uint64_t)sample * (uint64_t)L->world + (uint64_t)L->rank) * (uint64_t)L->B;
    for (int b = 0; b < L->B; b++)
        mqar_sequence(&L->mqar, L->mqar_seed, L->mqar_stream, first + (uint64_t)b, inputs + b * T, targets + b * T);
}

// This rank's B*T+1 tokens of shard s's sample `sample`, as inputs and shifted targets.
static void shard_next(Loader *L, int s, size_t sample, int *inputs, int *targets) {
    const size_t BT = (size_t)L->B * L->T;
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
}

void loader_next(Loader *L, int *inputs, int *targets) {
    int s = L->shard_order[L->pos.shard];
    size_t sample = L->sample_order[L->pos.sample];
    if (L->mqar.pairs > 0) mqar_next(L, sample, inputs, targets);
    else shard_next(L, s, sample, inputs, targets);
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
