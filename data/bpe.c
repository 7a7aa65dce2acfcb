// The BPE merge loop for one pre-split piece.
//
// OpenAI's encoder.py repeats: find the adjacent pair with the lowest merge rank,
// merge every occurrence of it left to right, until no pair has a rank. That is
// O(n^2) in the piece length. Here the symbols form a linked list and the candidate
// pairs sit in a min-heap ordered by (rank, position), so each merge costs O(log n).
//
// Same result: GPT-2's vocab.bpe is consistent (checked when it is loaded): every
// token is produced by exactly one merge, and every merge uses only tokens produced
// by earlier ones. A merge at rank r therefore only creates pairs of rank > r, so
// after the leftmost occurrence of the best pair is merged, the best pair left is the
// same pair further right (if any): popping by (rank, position) merges its
// occurrences left to right, exactly like one pass of encoder.py.
#include <stdlib.h>

#include "data/tokenizer_impl.h"
#include "base/util.h"

void bpe_work_free(BpeWork *w) {
    free(w->tok);
    free(w->prev);
    free(w->next);
    free(w->heap);
}

static void heap_push(BpeWork *w, size_t *n, uint64_t x) {
    if (*n == w->heap_cap) {
        w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 64;
        w->heap = xrealloc(w->heap, w->heap_cap * sizeof(uint64_t));
    }
    size_t i = (*n)++;
    while (i > 0 && w->heap[(i - 1) / 2] > x) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = x;
}

static uint64_t heap_pop(BpeWork *w, size_t *n) {
    uint64_t top = w->heap[0], x = w->heap[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && w->heap[c + 1] < w->heap[c]) c++;
        if (w->heap[c] >= x) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    w->heap[i] = x;
    return top;
}

// Pushes the pair that starts at symbol i, if it has a merge.
static void push_pair(const Tokenizer *t, BpeWork *w, size_t *nheap, int i) {
    int j = w->next[i], rank, merged;
    if (j >= 0 && merge_lookup(t, w->tok[i], w->tok[j], &rank, &merged))
        heap_push(w, nheap, (uint64_t)rank << 32 | (uint32_t)i);
}

void bpe_piece(const Tokenizer *t, BpeWork *w, const unsigned char *bytes, size_t n, TokenVec *out) {
    if (n == 0) return;
    if (n > (size_t)INT32_MAX) die("bpe: piece of %zu bytes is too long", n);
    if (n > w->cap) {
        w->cap = n;
        w->tok = xrealloc(w->tok, n * sizeof(int));
        w->prev = xrealloc(w->prev, n * sizeof(int));
        w->next = xrealloc(w->next, n * sizeof(int));
    }
    for (size_t i = 0; i < n; i++) {
        w->tok[i] = t->byte_token[bytes[i]];
        w->prev[i] = (int)i - 1;
        w->next[i] = i + 1 < n ? (int)i + 1 : -1;
    }
    size_t nheap = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, w, &nheap, (int)i);
    while (nheap > 0) {
        uint64_t top = heap_pop(w, &nheap);
        int rank = (int)(top >> 32), i = (int)(uint32_t)top, j = w->next[i];
        int r, merged;
        // stale entry: i was merged away (tok -1), or its pair changed since the push
        if (w->tok[i] < 0 || j < 0 || !merge_lookup(t, w->tok[i], w->tok[j], &r, &merged) || r != rank) continue;
        w->tok[i] = merged;  // i absorbs j
        w->tok[j] = -1;
        w->next[i] = w->next[j];
        if (w->next[j] >= 0) w->prev[w->next[j]] = i;
        if (w->prev[i] >= 0) push_pair(t, w, &nheap, w->prev[i]);
        push_pair(t, w, &nheap, i);
    }
    for (int i = 0; i >= 0; i = w->next[i]) tokenvec_push(out, w->tok[i]);
}
