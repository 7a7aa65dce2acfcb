// Inside the tokenizer: the loaded vocabulary and merge table (tokenizer.c), the BPE
// merge loop (bpe.c) and the encoder (tokenizer_encode.c) share these definitions.
#ifndef HYBRID_TOKENIZER_IMPL_H
#define HYBRID_TOKENIZER_IMPL_H

#include <stdint.h>

#include "data/tokenizer.h"

#define MERGE_EMPTY UINT64_MAX

typedef struct {
    uint64_t key;  // left id << 32 | right id; MERGE_EMPTY marks a free slot
    int32_t rank, merged;
} MergeSlot;

struct Tokenizer {
    int n_vocab;
    int eot;
    char *bytes;            // every token's bytes, concatenated
    uint32_t *offset;       // token i is bytes[offset[i] .. offset[i+1])
    int byte_token[256];    // the single-byte token of each byte
    // merges: (left id, right id) -> (rank, merged id), open addressing
    MergeSlot *merges;
    size_t merge_cap;       // power of two
    int n_merges;
};

static inline uint64_t merge_hash(uint64_t key) {
    key ^= key >> 31;
    key *= 0x9e3779b97f4a7c15ull;
    return key ^ (key >> 29);
}

// Rank of merging (a, b) and the merged id; returns 0 if the pair has no merge.
static inline int merge_lookup(const Tokenizer *t, int a, int b, int *rank, int *merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = t->merge_cap - 1, i = merge_hash(key) & mask;
    for (;;) {
        const MergeSlot *s = &t->merges[i];
        if (s->key == key) {
            *rank = s->rank;
            *merged = s->merged;
            return 1;
        }
        if (s->key == MERGE_EMPTY) return 0;
        i = (i + 1) & mask;
    }
}

// Scratch memory for bpe_piece, grown as needed (one per Encoder).
typedef struct {
    int *tok, *prev, *next;
    uint64_t *heap;  // (rank << 32 | position of the left symbol), a min-heap
    size_t cap, heap_cap;
} BpeWork;

// Appends the BPE tokens of bytes[0..n) to out. O(n log n) in the piece length.
void bpe_piece(const Tokenizer *t, BpeWork *w, const unsigned char *bytes, size_t n, TokenVec *out);
void bpe_work_free(BpeWork *w);

#endif
