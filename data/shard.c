#include "shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32.h"
#include "base/util.h"

#define SCAN_BYTES (1u << 20)

// Reads up to n bytes (fewer only at the end of the file).
static size_t read_full(int fd, void *buf, size_t n, const char *path) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die("%s: read error (%s)", path, strerror(errno));
        if (r == 0) break;
        got += (size_t)r;
    }
    return got;
}

// Opens the shard and checks its header against its size; returns the open fd.
static int open_checked(const char *path, int32_t *header, uint64_t *bytes, size_t *tokens) {
    int fd = open_regular(path);
    if (fd < 0) die("%s: cannot open shard (%s)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) die("%s: cannot stat (%s)", path, strerror(errno));
    size_t got = read_full(fd, header, SHARD_HEADER_BYTES, path);
    if (got != SHARD_HEADER_BYTES) die("%s: truncated shard header (%zu of %d bytes)", path, got, SHARD_HEADER_BYTES);
    if (header[0] != SHARD_MAGIC) die("%s: not a token shard (magic %d, expected %d)", path, header[0], SHARD_MAGIC);
    if (header[1] != SHARD_VERSION)
        die("%s: unsupported shard version %d (expected %d: uint16 tokens)", path, header[1], SHARD_VERSION);
    if (header[2] < 0) die("%s: negative token count %d in the header", path, header[2]);
    size_t want = SHARD_HEADER_BYTES + 2 * (size_t)header[2];
    if ((size_t)st.st_size != want)
        die("%s: header says %d tokens (%zu bytes) but the file has %lld bytes", path, header[2], want,
            (long long)st.st_size);
    *bytes = (uint64_t)st.st_size;
    *tokens = (size_t)header[2];
    return fd;
}

size_t shard_validate(const char *path) {
    int32_t header[SHARD_HEADER_INTS];
    uint64_t bytes;
    size_t tokens;
    close(open_checked(path, header, &bytes, &tokens));
    return tokens;
}

void shard_scan(const char *path, int vocab_size, ShardScan *s) {
    int32_t header[SHARD_HEADER_INTS];
    int fd = open_checked(path, header, &s->bytes, &s->tokens);
    s->crc = crc32_update(0, header, SHARD_HEADER_BYTES);
    s->bad_index = -1;
    s->bad_id = 0;
    uint16_t *buf = xmalloc(SCAN_BYTES);
    for (size_t done = 0; done < s->tokens;) {
        size_t want = s->tokens - done < SCAN_BYTES / 2 ? s->tokens - done : SCAN_BYTES / 2;
        if (read_full(fd, buf, 2 * want, path) != 2 * want) die("%s: the file shrank while it was read", path);
        s->crc = crc32_update(s->crc, buf, 2 * want);
        unsigned max = 0;
        for (size_t i = 0; i < want; i++) max = buf[i] > max ? buf[i] : max;
        if (s->bad_index < 0 && max >= (unsigned)vocab_size)
            for (size_t i = 0; i < want; i++)
                if (buf[i] >= vocab_size) {
                    s->bad_index = (int64_t)(done + i);
                    s->bad_id = buf[i];
                    break;
                }
        done += want;
    }
    free(buf);
    close(fd);
}

void shard_read(const char *path, size_t start, size_t n, uint16_t *out) {
    FILE *f = xfopen(path, "rb");
    if (fseek(f, (long)(SHARD_HEADER_BYTES + 2 * start), SEEK_SET) != 0) die("%s: seek failed", path);
    xfread(out, sizeof(uint16_t), n, f, path);
    fclose(f);
}

uint32_t shard_write(const char *path, const uint16_t *tokens, size_t n) {
    if (n > 0x7fffffff) die("%s: %zu tokens do not fit one shard (int32 count)", path, n);
    int32_t header[SHARD_HEADER_INTS] = {SHARD_MAGIC, SHARD_VERSION, (int32_t)n};
    AtomicFile f;
    atomic_open(&f, path);
    atomic_write(&f, header, SHARD_HEADER_BYTES);
    atomic_write(&f, tokens, 2 * n);
    atomic_commit(&f);
    return crc32_update(crc32_update(0, header, SHARD_HEADER_BYTES), tokens, 2 * n);
}
