#include "shardseq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "data/shardset.h"
#include "base/kill_point.h"
#include "base/util.h"

void shardseq_init(ShardSeq *s, const char *dir, const char *name, const char *split, size_t shard_tokens,
                   Manifest *manifest) {
    memset(s, 0, sizeof(*s));
    s->dir = xstrdup(dir);
    s->name = xstrdup(name);
    s->split = xstrdup(split);
    s->shard_tokens = shard_tokens;
    s->manifest = manifest;
}

char *shardseq_name(const ShardSeq *s, int i) {
    size_t n = strlen(s->name) + strlen(s->split) + 32;
    char *name = xmalloc(n);
    snprintf(name, n, "%s_%s_%06d.bin", s->name, s->split, i);
    return name;
}

char *shardseq_path(const ShardSeq *s, int i) {
    char *name = shardseq_name(s, i);
    size_t n = strlen(s->dir) + strlen(name) + 2;
    char *path = xmalloc(n);
    snprintf(path, n, "%s/%s", s->dir, name);
    free(name);
    return path;
}

static void write_shard(ShardSeq *s) {
    char *name = shardseq_name(s, s->nshards), *path = shardseq_path(s, s->nshards);
    uint32_t crc = shard_write(path, s->buf, s->n);
    if (s->manifest) manifest_add(s->manifest, s->split, name, s->n, SHARD_HEADER_BYTES + 2 * (uint64_t)s->n, crc);
    free(name), free(path);
    s->nshards++;
    s->n = 0;
    kill_point("prepare-shard");
}

void shardseq_push(ShardSeq *s, const int *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s->n == s->cap) {  // grow towards one shard, so small outputs stay small
            s->cap = s->cap ? 2 * s->cap : 1 << 16;
            if (s->cap > s->shard_tokens) s->cap = s->shard_tokens;
            s->buf = xrealloc(s->buf, s->cap * sizeof(uint16_t));
        }
        if ((unsigned)ids[i] > 0xFFFF) die("prepare: token id %d does not fit a uint16 shard", ids[i]);
        s->buf[s->n++] = (uint16_t)ids[i];
        s->total++;
        if (s->n == s->shard_tokens) write_shard(s);
    }
}

void shardseq_flush(ShardSeq *s) {
    if (s->n > 0) write_shard(s);
}

void shardseq_finish(ShardSeq *s) {
    shardseq_flush(s);
    free(s->buf);
    free(s->dir), free(s->name), free(s->split);
    s->buf = NULL;
    s->dir = s->name = s->split = NULL;
}
