// A numbered series of token shards, <dir>/<name>_<split>_000000.bin, 000001, ...:
// tokens are appended and every shard holds exactly shard_tokens of them except the
// last one (documents run on across shard boundaries, as in llm.c's fineweb.py).
#ifndef HYBRID_SHARDSEQ_H
#define HYBRID_SHARDSEQ_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *dir, *name, *split;
    size_t shard_tokens;
    uint16_t *buf;
    size_t n, cap;
    int nshards;           // shards written so far
    uint64_t total;        // tokens pushed so far
} ShardSeq;

void shardseq_init(ShardSeq *s, const char *dir, const char *name, const char *split, size_t shard_tokens);
// Appends tokens (each must be < 65536), writing every shard that fills up.
void shardseq_push(ShardSeq *s, const int *ids, size_t n);
// Writes the last, partial shard (if it holds any tokens) and frees the buffer.
void shardseq_finish(ShardSeq *s);
// The path of shard i (a new string).
char *shardseq_path(const ShardSeq *s, int i);
// Removes <dir>/<name>_<split>_NNNNNN.bin files left by an earlier run; returns how many.
int shardseq_remove_old(const char *dir, const char *name, const char *split);

#endif
