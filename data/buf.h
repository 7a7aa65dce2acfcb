// A growable byte buffer (header only).
#ifndef HYBRID_BUF_H
#define HYBRID_BUF_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static inline void buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}
static inline void buf_append(Buf *b, const void *bytes, size_t n) {
    buf_reserve(b, n);
    if (n) memcpy(b->data + b->len, bytes, n);
    b->len += n;
}
static inline void buf_putc(Buf *b, char c) {
    buf_reserve(b, 1);
    b->data[b->len++] = c;
}
static inline void buf_free(Buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

#endif
