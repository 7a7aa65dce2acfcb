// A numbered series of token shards, <dir>/<name>_<split>_000000.bin, 000001, ...:
// tokens are appended and every shard holds exactly shard_tokens of them except the
// last one (documents run on across shard boundaries, as in llm.c's fineweb.py). Each
// shard written is added to a manifest (data/manifest.h).
#ifndef HYBRID_SHARDSEQ_H
#define HYBRID_SHARDSEQ_H

#include <stddef.h>
#include <stdint.h>

#include "data/manifest.h"

typedef struct {
    char *dir, *name, *split;
    size_t shard_tokens;
    Manifest *manifest;    // where each written shard is listed (NULL: nowhere)
    uint16_t *buf;
    size_t n, cap;
    int nshards;           // shards written so far
    uint64_t total;        // tokens pushed so far
} ShardSeq;

void shardseq_init(ShardSeq *s, const char *dir, const char *name, const char *split, size_t shard_tokens,
                   Manifest *manifest);
// Appends tokens (each must be < 65536), writing every shard that fills up.
void shardseq_push(ShardSeq *s, const int *ids, size_t n);
// Writes the last, partial shard (if it holds any tokens).
void shardseq_flush(ShardSeq *s);
// shardseq_flush, then frees the buffer and the names.
void shardseq_finish(ShardSeq *s);
// The file name of shard i, <name>_<split>_NNNNNN.bin (a new string).
char *shardseq_name(const ShardSeq *s, int i);
// Its path, <dir>/<file name> (a new string).
char *shardseq_path(const ShardSeq *s, int i);

#endif
