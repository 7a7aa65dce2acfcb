// llm.c-compatible token shards (docs/background.md, "llm.c token shards"): a header of 256
// little-endian int32
// (magic 20240520, version 1, token count), then the tokens as uint16.
#ifndef HYBRID_SHARD_H
#define HYBRID_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)

// Checks magic, version and that the file size equals header + 2 * count.
// Returns the token count; dies naming the file and the problem otherwise.
size_t shard_validate(const char *path);

// Reads tokens [start, start + n) of a validated shard into out.
void shard_read(const char *path, size_t start, size_t n, uint16_t *out);

// Writes a shard atomically (temporary name, fsync, rename).
void shard_write(const char *path, const uint16_t *tokens, size_t n);

#endif
