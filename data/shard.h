// llm.c-compatible token shards (docs/background.md, "llm.c token shards"): a header of 256
// little-endian int32 (magic 20240520, version 1, token count), then the tokens as uint16.
#ifndef HYBRID_SHARD_H
#define HYBRID_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)

// Checks magic, version and that the file size equals header + 2 * count (a regular
// file only: base/util.h, open_regular). Returns the token count; dies naming the file
// and the problem otherwise.
size_t shard_validate(const char *path);

// What one full read of a shard found.
typedef struct {
    size_t tokens;      // the header's count, checked against the size
    uint64_t bytes;     // file size
    uint32_t crc;       // CRC-32 of the whole file
    int64_t bad_index;  // the first token >= vocab_size (its index), or -1
    unsigned bad_id;    // and its id
} ShardScan;

// shard_validate, then reads every byte once: the CRC-32 and the first token id that is
// >= vocab_size. The caller decides what to report first (data/shardcheck.c).
void shard_scan(const char *path, int vocab_size, ShardScan *s);

// Reads tokens [start, start + n) of a validated shard into out.
void shard_read(const char *path, size_t start, size_t n, uint16_t *out);

// Writes a shard atomically (temporary name, fsync, rename); returns the CRC-32 of the
// file, for the manifest.
uint32_t shard_write(const char *path, const uint16_t *tokens, size_t n);

#endif
