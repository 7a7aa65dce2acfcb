// DEFLATE (RFC 1951) decoding, for reading compressed inputs without a zlib dependency:
// the zlib streams (RFC 1950) of SWORD modules (data/corpus_sword.c) and gzip files
// (RFC 1952, also dictzip's .dict.dz). Stored, fixed and dynamic Huffman blocks; the
// checksum of each wrapper (Adler-32, CRC-32 and length) is checked.
#ifndef HYBRID_INFLATE_H
#define HYBRID_INFLATE_H

#include <stddef.h>
#include <stdint.h>

#include "data/buf.h"

// Each appends the decompressed bytes to out and returns NULL, or a static message on a
// malformed or truncated stream (out then holds what was decoded before the error).
// *used (may be NULL) gets the number of input bytes the stream took.
const char *inflate_raw(const uint8_t *in, size_t n, Buf *out, size_t *used);
const char *inflate_zlib(const uint8_t *in, size_t n, Buf *out);
const char *inflate_gzip(const uint8_t *in, size_t n, Buf *out);  // every member, one after another

#endif
