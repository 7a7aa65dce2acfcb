// Sequences on the flattened token axis, looked up on the device (model/ops/delta_rule/
// delta_rule.h, "Sequences and document boundaries"): offsets == NULL: B sequences of T rows;
// else nseq sequences cut by offsets (device memory, nseq+1 ints, cu_seqlens, empty segments
// allowed). The host never reads offsets, so no launch waits for a copy.
//
// Chunk slots (every chunkwise kernel: linear_attn*.cu, chunk_*.cu through chunk.cuh): sequence s
// with bos_s and ceil(len_s / C) chunks owns the chunk slots [f(s), f(s) + ceil(len_s / C)),
// f(s) = floor(bos_s / C) + s, which never overlap the next sequence's (f(s+1) >= f(s) +
// ceil(len_s / C)); all slots are below floor(rows / C) + N. A chunk-parallel kernel launches
// one block per slot and finds its sequence by binary search; surplus blocks exit.
#ifndef HYBRID_KERNELS_DELTA_RULE_SEQ_INDEX_CUH
#define HYBRID_KERNELS_DELTA_RULE_SEQ_INDEX_CUH

#include "kernels/common.cuh"

// first row of sequence s (s may be N: then the row count)
__device__ __forceinline__ size_t seq_bos(const int *offsets, int T, int s) {
    return offsets ? (size_t)offsets[s] : (size_t)s * (size_t)T;
}

// Walks the rows of one thread in increasing order, tracking the sequence that holds the row
// (a binary search once, then steps over sequence ends, empty segments included).
struct SeqCursor {
    const int *offsets;
    int T, s;
    size_t bos, eos;
    __device__ void init(const int *offsets_, int nseq, int T_, size_t row) {
        offsets = offsets_;
        T = T_;
        if (offsets) {  // the last s with offsets[s] <= row: the non-empty segment holding row
            int lo = 0, hi = nseq - 1;
            while (lo < hi) {
                int mid = (lo + hi + 1) >> 1;
                if ((size_t)offsets[mid] <= row) lo = mid;
                else hi = mid - 1;
            }
            s = lo;
        } else {
            s = (int)(row / (size_t)T);
        }
        bos = seq_bos(offsets, T, s);
        eos = seq_bos(offsets, T, s + 1);
    }
    __device__ void advance(size_t row) {
        while (row >= eos) {
            s++;
            bos = eos;
            eos = seq_bos(offsets, T, s + 1);
        }
    }
};

// The chunk in chunk slot `slot` (above): sets s, bos (of the chunk), rows (1..C) and the
// chunk index n within its sequence; returns 0 for a slot no chunk uses.
__device__ __forceinline__ int chunk_of_slot(const int *offsets, int N, int T, int C, int slot, int *s_out,
                                             size_t *tok0, int *rows, int *n_out) {
    int lo = 0, hi = N - 1;  // the last s with f(s) <= slot
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (seq_bos(offsets, T, mid) / (size_t)C + (size_t)mid <= (size_t)slot) lo = mid;
        else hi = mid - 1;
    }
    const size_t bos = seq_bos(offsets, T, lo), eos = seq_bos(offsets, T, lo + 1);
    const size_t f = bos / (size_t)C + (size_t)lo;
    if ((size_t)slot < f) return 0;
    const size_t n = (size_t)slot - f;
    if (n * (size_t)C >= eos - bos) return 0;
    *s_out = lo;
    *n_out = (int)n;
    *tok0 = bos + n * (size_t)C;
    const size_t left = eos - *tok0;
    *rows = left < (size_t)C ? (int)left : C;
    return 1;
}

// number of chunk slots for `rows` rows in N sequences
static inline size_t chunk_slots(size_t rows, int N, int C) { return rows / (size_t)C + (size_t)N; }

#endif
