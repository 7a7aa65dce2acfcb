#include "strmap.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define EMPTY UINT32_MAX

static inline uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

// Eight bytes at a time, each word mixed into the running state.
uint64_t hash_bytes(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix64(h ^ w);
        p += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, len);
    return mix64(h ^ w ^ ((uint64_t)len << 56));
}

static void alloc_slots(StrMap *m, size_t cap) {
    m->slots = xmalloc(cap * sizeof(StrMapSlot));
    m->cap = cap;
    for (size_t i = 0; i < cap; i++) m->slots[i].key_len = EMPTY;
}

void strmap_init(StrMap *m, size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    alloc_slots(m, cap);
    m->count = 0;
    m->keys_cap = 1024;
    m->keys = xmalloc(m->keys_cap);
    m->keys_len = 0;
}

void strmap_free(StrMap *m) {
    free(m->slots);
    free(m->keys);
    memset(m, 0, sizeof(*m));
}

void strmap_clear(StrMap *m) {
    for (size_t i = 0; i < m->cap; i++) m->slots[i].key_len = EMPTY;
    m->count = 0;
    m->keys_len = 0;
}

// Index of the key's slot, or of the empty slot where it would go.
static size_t find(const StrMap *m, const void *key, size_t len, uint64_t h) {
    size_t mask = m->cap - 1, i = (size_t)(h >> 32) & mask;
    for (;;) {
        const StrMapSlot *s = &m->slots[i];
        if (s->key_len == EMPTY) return i;
        if (s->hash == (uint32_t)h && s->key_len == len && memcmp(m->keys + s->key_off, key, len) == 0) return i;
        i = (i + 1) & mask;
    }
}

int strmap_get(const StrMap *m, const void *key, size_t len, uint64_t *value) {
    size_t i = find(m, key, len, hash_bytes(key, len));
    if (m->slots[i].key_len == EMPTY) return 0;
    *value = m->slots[i].value;
    return 1;
}

static void grow(StrMap *m) {
    StrMapSlot *old = m->slots;
    size_t old_cap = m->cap;
    alloc_slots(m, old_cap * 2);
    for (size_t j = 0; j < old_cap; j++) {
        if (old[j].key_len == EMPTY) continue;
        size_t i = find(m, m->keys + old[j].key_off, old[j].key_len,
                        hash_bytes(m->keys + old[j].key_off, old[j].key_len));
        m->slots[i] = old[j];
    }
    free(old);
}

void strmap_put(StrMap *m, const void *key, size_t len, uint64_t value) {
    if (len >= EMPTY || m->keys_len + len >= EMPTY) die("strmap: key arena over 4 GiB");
    uint64_t h = hash_bytes(key, len);
    size_t i = find(m, key, len, h);
    if (m->slots[i].key_len != EMPTY) {
        m->slots[i].value = value;
        return;
    }
    if (2 * (m->count + 1) > m->cap) {
        grow(m);
        i = find(m, key, len, h);
    }
    while (m->keys_len + len > m->keys_cap) m->keys = xrealloc(m->keys, m->keys_cap *= 2);
    memcpy(m->keys + m->keys_len, key, len);
    m->slots[i] = (StrMapSlot){(uint32_t)m->keys_len, (uint32_t)len, (uint32_t)h, value};
    m->keys_len += len;
    m->count++;
}
