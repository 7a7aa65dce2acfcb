#include "shardseq.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/shard.h"
#include "base/util.h"

void shardseq_init(ShardSeq *s, const char *dir, const char *name, const char *split, size_t shard_tokens) {
    memset(s, 0, sizeof(*s));
    s->dir = xstrdup(dir);
    s->name = xstrdup(name);
    s->split = xstrdup(split);
    s->shard_tokens = shard_tokens;
}

char *shardseq_path(const ShardSeq *s, int i) {
    size_t n = strlen(s->dir) + strlen(s->name) + strlen(s->split) + 32;
    char *path = xmalloc(n);
    snprintf(path, n, "%s/%s_%s_%06d.bin", s->dir, s->name, s->split, i);
    return path;
}

static void write_shard(ShardSeq *s) {
    char *path = shardseq_path(s, s->nshards++);
    shard_write(path, s->buf, s->n);
    free(path);
    s->n = 0;
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

void shardseq_finish(ShardSeq *s) {
    if (s->n > 0) write_shard(s);
    free(s->buf);
    free(s->dir), free(s->name), free(s->split);
    s->buf = NULL;
    s->dir = s->name = s->split = NULL;
}

int shardseq_remove_old(const char *dir, const char *name, const char *split) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t plen = strlen(name) + strlen(split) + 2;
    char *prefix = xmalloc(plen + 1);
    snprintf(prefix, plen + 1, "%s_%s_", name, split);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *f = e->d_name;
        if (strncmp(f, prefix, plen) != 0 || strlen(f) != plen + 10 || strcmp(f + plen + 6, ".bin") != 0) continue;
        if (strspn(f + plen, "0123456789") != 6) continue;
        size_t n = strlen(dir) + strlen(f) + 2;
        char *path = xmalloc(n);
        snprintf(path, n, "%s/%s", dir, f);
        if (unlink(path) != 0) die("prepare: cannot remove the old shard %s (%s)", path, strerror(errno));
        free(path);
        removed++;
    }
    closedir(d);
    free(prefix);
    return removed;
}
