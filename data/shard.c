#include "shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"

size_t shard_validate(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("%s: cannot open shard (%s)", path, strerror(errno));
    int32_t header[SHARD_HEADER_INTS];
    size_t got = fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f);
    fclose(f);
    if (got != SHARD_HEADER_INTS)
        die("%s: truncated shard header (%zu of %d bytes)", path, got * 4, SHARD_HEADER_BYTES);
    if (header[0] != SHARD_MAGIC)
        die("%s: not a token shard (magic %d, expected %d)", path, header[0], SHARD_MAGIC);
    if (header[1] != SHARD_VERSION)
        die("%s: unsupported shard version %d (expected %d: uint16 tokens)", path, header[1], SHARD_VERSION);
    if (header[2] < 0) die("%s: negative token count %d in the header", path, header[2]);
    struct stat st;
    if (stat(path, &st) != 0) die("%s: cannot stat (%s)", path, strerror(errno));
    size_t want = SHARD_HEADER_BYTES + 2 * (size_t)header[2];
    if ((size_t)st.st_size != want)
        die("%s: header says %d tokens (%zu bytes) but the file has %lld bytes", path, header[2], want,
            (long long)st.st_size);
    return (size_t)header[2];
}

void shard_read(const char *path, size_t start, size_t n, uint16_t *out) {
    FILE *f = xfopen(path, "rb");
    if (fseek(f, (long)(SHARD_HEADER_BYTES + 2 * start), SEEK_SET) != 0) die("%s: seek failed", path);
    xfread(out, sizeof(uint16_t), n, f, path);
    fclose(f);
}

void shard_write(const char *path, const uint16_t *tokens, size_t n) {
    if (n > 0x7fffffff) die("%s: %zu tokens do not fit one shard (int32 count)", path, n);
    size_t bytes = SHARD_HEADER_BYTES + 2 * n;
    char *buf = xcalloc(1, bytes);
    int32_t *header = (int32_t *)buf;
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    memcpy(buf + SHARD_HEADER_BYTES, tokens, 2 * n);
    write_file_atomic(path, buf, bytes);
    free(buf);
}
