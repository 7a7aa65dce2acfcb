// The shards a glob names, checked once when the loader opens them (data/README.md):
//
// - first, a committed but unfinished publish of `hybrid prepare` in the pattern's folder
//   is finished (data/shardset.h), so the set is the old one or the new one, never a mix;
// - shards named <name>_<split>_NNNNNN.bin with <name>_manifest.txt beside them must be
//   exactly the manifest's shards of that split: a missing, extra, truncated or modified
//   shard (or one of another prepare run) is refused, naming the file and the problem;
// - every shard is read once: header, size, the CRC-32 (against the manifest) and every
//   token id (< vocab_size; an error names the shard, the token's index and byte offset);
// - shards without a manifest (llm.c's own) are accepted with one note saying so.
#ifndef HYBRID_SHARDCHECK_H
#define HYBRID_SHARDCHECK_H

#include <stddef.h>

typedef struct {
    char **paths;  // sorted, as glob() gives them
    size_t *ntok;  // tokens in each
    int n;
} ShardList;

// Expands and checks `pattern`; dies naming the file and the problem. notes: print the
// notes (rank 0).
void shards_open(ShardList *s, const char *pattern, int vocab_size, int notes);
void shards_free(ShardList *s);

#endif
