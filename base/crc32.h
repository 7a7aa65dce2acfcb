// CRC-32 (IEEE 802.3, zlib's crc32()): the checksum of safetensors files (checkpoints/) and of
// token shards in a shard manifest (data/manifest.h).
#ifndef HYBRID_CRC32_H
#define HYBRID_CRC32_H

#include <stddef.h>
#include <stdint.h>

// Continues `crc` (0 to start) over len bytes: crc32(crc32(0, a), b) = crc32(0, a + b).
uint32_t crc32_update(uint32_t crc, const void *data, size_t len);

#endif
