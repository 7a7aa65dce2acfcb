// safetensors writer: builds the header, checksums the data, then streams header and
// tensors to a temporary file that is fsynced and renamed into place.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32.h"
#include "base/util.h"
#include "safetensors.h"

typedef struct {
    char *s;
    size_t len, cap;
} Buf;

__attribute__((format(printf, 2, 3))) static void put(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) die("safetensors: formatting the header failed");
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = 2 * b->cap + (size_t)n + 1;
        b->s = xrealloc(b->s, b->cap);
    }
}

static void put_string(Buf *b, const char *s) {
    put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') put(b, "\\%c", c);
        else if (c < 0x20) put(b, "\\u%04x", c);
        else put(b, "%c", c);
    }
    put(b, "\"");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static size_t tensor_bytes(const char *path, const StOut *t) {
    int es = st_dtype_size(t->dtype);
    if (!es) die("%s: tensor '%s': unknown dtype '%s'", path, t->name, t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) die("%s: tensor '%s': %d dimensions", path, t->name, t->ndim);
    size_t n = (size_t)es;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) die("%s: tensor '%s': negative dimension", path, t->name);
        n *= (size_t)t->shape[d];
    }
    return n;
}

static void check_names(const char *path, const StOut *tensors, int count, const char *const *meta, int n_meta) {
    const char **names = xmalloc(sizeof(char *) * (size_t)(count ? count : 1));
    for (int i = 0; i < count; i++) {
        names[i] = tensors[i].name;
        if (!names[i][0] || !strcmp(names[i], "__metadata__")) die("%s: bad tensor name '%s'", path, names[i]);
    }
    qsort(names, (size_t)count, sizeof *names, cmp_str);
    for (int i = 1; i < count; i++)
        if (!strcmp(names[i - 1], names[i])) die("%s: tensor '%s' given twice", path, names[i]);
    free(names);
    for (int i = 0; i < n_meta; i++)
        if (!strcmp(meta[2 * i], "format") || !strcmp(meta[2 * i], ST_CRC_KEY))
            die("%s: metadata key '%s' is written by st_write itself", path, meta[2 * i]);
}

void st_write(const char *path, const StOut *tensors, int count, const char *const *meta, int n_meta) {
    check_names(path, tensors, count, meta, n_meta);
    uint32_t crc = 0;
    size_t *bytes = xmalloc(sizeof(size_t) * (size_t)(count ? count : 1));
    for (int i = 0; i < count; i++) {
        bytes[i] = tensor_bytes(path, &tensors[i]);
        crc = crc32_update(crc, tensors[i].data, bytes[i]);
    }

    Buf h = {xmalloc(4096), 0, 4096};
    put(&h, "{\"__metadata__\":{\"format\":\"pt\",\"%s\":\"%08x\"", ST_CRC_KEY, crc);
    for (int i = 0; i < n_meta; i++) {
        put(&h, ",");
        put_string(&h, meta[2 * i]);
        put(&h, ":");
        put_string(&h, meta[2 * i + 1]);
    }
    put(&h, "}");
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        const StOut *t = &tensors[i];
        put(&h, ",");
        put_string(&h, t->name);
        put(&h, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (int d = 0; d < t->ndim; d++) put(&h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        put(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes[i]);
        off += bytes[i];
    }
    put(&h, "}");
    while (h.len % 8) put(&h, " ");  // the data section starts 8-aligned

    AtomicFile f;
    atomic_open(&f, path);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    atomic_write(&f, len8, 8);
    atomic_write(&f, h.s, h.len);
    for (int i = 0; i < count; i++) atomic_write(&f, tensors[i].data, bytes[i]);
    atomic_commit(&f);
    free(h.s);
    free(bytes);
}
