#include "manifest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define MAGIC "hybrid-shard-manifest 1"

void manifest_init(Manifest *m, const char *name, int vocab_size, int eot) {
    memset(m, 0, sizeof *m);
    m->name = xstrdup(name);
    m->vocab_size = vocab_size;
    m->eot = eot;
}

void manifest_add(Manifest *m, const char *split, const char *file, uint64_t tokens, uint64_t bytes, uint32_t crc) {
    if (m->n == m->cap) m->e = xrealloc(m->e, sizeof(ManifestEntry) * (size_t)(m->cap = m->cap ? 2 * m->cap : 16));
    ManifestEntry *e = &m->e[m->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->split, sizeof e->split, "%s", split);
    e->file = xstrdup(file);
    e->tokens = tokens, e->bytes = bytes, e->crc = crc;
}

static int by_file(const void *a, const void *b) {
    return strcmp(((const ManifestEntry *)a)->file, ((const ManifestEntry *)b)->file);
}

void manifest_write(const Manifest *m, const char *path) {
    qsort(m->e, (size_t)m->n, sizeof *m->e, by_file);
    size_t cap = 256 + (size_t)m->n * 64 + strlen(m->name), len = 0;
    for (int i = 0; i < m->n; i++) cap += strlen(m->e[i].file);
    char *text = xmalloc(cap);
    len += (size_t)snprintf(text + len, cap - len, MAGIC "\nname %s\nvocab_size %d\neot %d\nshards %d\n", m->name,
                            m->vocab_size, m->eot, m->n);
    for (int i = 0; i < m->n; i++) {
        const ManifestEntry *e = &m->e[i];
        len += (size_t)snprintf(text + len, cap - len, "shard %s %" PRIu64 " %" PRIu64 " %08x %s\n", e->split, e->tokens,
                                e->bytes, e->crc, e->file);
    }
    write_file_atomic(path, text, len);
    free(text);
}

// "key value" with the value a whole number >= 0; 0 if the line is not that key
static int read_number(const char *line, const char *key, long long max, long long *v) {
    size_t n = strlen(key);
    if (strncmp(line, key, n) || line[n] != ' ') return 0;
    char *end;
    errno = 0;
    *v = strtoll(line + n + 1, &end, 10);
    return !errno && !*end && end != line + n + 1 && *v >= 0 && *v <= max;
}

int manifest_read(Manifest *m, const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        if (errno == ENOENT) return 0;
        die("%s: cannot read the shard manifest (%s)", path, strerror(errno));
    }
    if (strlen(text) != len) die("%s: not a shard manifest (it holds a NUL byte)", path);
    manifest_init(m, "", 0, 0);
    long long nshards = -1, v;
    int lineno = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (lineno == 1) {
            if (strcmp(line, MAGIC)) die("%s:1: not a shard manifest (expected \"" MAGIC "\")", path);
        } else if (!strncmp(line, "name ", 5)) {
            free(m->name);
            m->name = xstrdup(line + 5);
        } else if (read_number(line, "vocab_size", 65536, &v)) {
            m->vocab_size = (int)v;
        } else if (read_number(line, "eot", 65535, &v)) {
            m->eot = (int)v;
        } else if (read_number(line, "shards", 1 << 30, &v)) {
            nshards = v;
        } else {
            char split[16];
            uint64_t tokens, bytes;
            unsigned crc;
            int file = 0;
            if (sscanf(line, "shard %15s %" SCNu64 " %" SCNu64 " %8x %n", split, &tokens, &bytes, &crc, &file) != 4 ||
                !file || !line[file])
                die("%s:%d: malformed manifest line \"%s\"", path, lineno, line);
            manifest_add(m, split, line + file, tokens, bytes, crc);
        }
    }
    free(text);
    if (lineno == 0) die("%s: the shard manifest is empty", path);
    if (nshards != m->n)
        die("%s: the manifest says \"shards %lld\" but lists %d (it was cut short or edited)", path, nshards, m->n);
    return 1;
}

ManifestEntry *manifest_find(const Manifest *m, const char *file) {
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].file, file)) return &m->e[i];
    return NULL;
}

void manifest_free(Manifest *m) {
    for (int i = 0; i < m->n; i++) free(m->e[i].file);
    free(m->e);
    free(m->name);
    memset(m, 0, sizeof *m);
}

char *manifest_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 16;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s_manifest.txt", dir, name);
    return p;
}

int shard_name_parse(const char *path, char **dir, char **name, char **split) {
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t n = strlen(base);
    // ..._NNNNNN.bin
    if (n < 12 || strcmp(base + n - 4, ".bin") || base[n - 11] != '_' || strspn(base + n - 10, "0123456789") != 6)
        return 0;
    const char *split_end = base + n - 11, *s = split_end;
    while (s > base && s[-1] != '_') s--;
    if (s == split_end || s - 1 <= base) return 0;  // no split word, or no name before it
    *dir = slash ? xstrdup(path) : xstrdup(".");
    if (slash) (*dir)[slash - path] = 0;
    if (slash == path) strcpy(*dir, "/");
    *name = xstrdup(base);
    (*name)[s - 1 - base] = 0;
    *split = xstrdup(s);
    (*split)[split_end - s] = 0;
    return 1;
}
