// A hash map from byte strings to 64-bit values (open addressing, linear probing).
// Keys are copied into the map's own arena. Used for the tokenizer's vocabulary
// (token bytes -> id) and its cache of pre-split words (bytes -> token ids).
#ifndef HYBRID_STRMAP_H
#define HYBRID_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t key_off;  // offset of the key in `keys`
    uint32_t key_len;  // UINT32_MAX marks an empty slot
    uint32_t hash;     // low bits of the key's hash, to skip most key compares
    uint64_t value;
} StrMapSlot;

typedef struct {
    StrMapSlot *slots;
    size_t cap;        // power of two
    size_t count;
    char *keys;        // arena holding every key
    size_t keys_len, keys_cap;
} StrMap;

uint64_t hash_bytes(const void *data, size_t len);

void strmap_init(StrMap *m, size_t expected);
void strmap_free(StrMap *m);
void strmap_clear(StrMap *m);  // drops every entry, keeps the memory
// Returns 1 and sets *value if the key is present, else 0.
int strmap_get(const StrMap *m, const void *key, size_t len, uint64_t *value);
// Inserts the key or overwrites its value.
void strmap_put(StrMap *m, const void *key, size_t len, uint64_t value);
// Bytes held by keys (for callers that cap the map's size).
static inline size_t strmap_key_bytes(const StrMap *m) { return m->keys_len; }

#endif
