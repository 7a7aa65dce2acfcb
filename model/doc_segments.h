// Document boundaries of the flattened B*T rows, for the mixers whose state restarts after
// an end-of-text token when reset_at_eot is on (MixerOps.resets_at_eot: K, G, D, L; docs/kda.md,
// "Document boundaries"). Rows are cut at every batch-row start and after every EOT token
// (the token after an EOT starts a new sequence), FlashAttention's cu_seqlens convention.
// The short convs take all the offsets at once; the chunkwise ops run over consecutive
// groups of at most `cap` sequences, each with its offsets rebased to its first row,
// because their workspaces grow with the number of sequences. Softmax attention and MLA
// ignore all of this (reset_at_eot does not mask them).
#ifndef HYBRID_DOC_SEGMENTS_H
#define HYBRID_DOC_SEGMENTS_H

#include "base/carve.h"

struct Model;

typedef struct {
    int active;                  // reset_at_eot and some layer's mixer resets at EOT
    int cap;                     // sequences per chunkwise call
    int nseq, ngroups;           // of the last forward
    int last_is_eot;             // the last row of the last forward is an EOT token
    int *offsets;                // backend memory (N+1): the nseq+1 offsets (short convs)
    int *group_offsets;          // backend memory (2N+2): group g's rebased offsets at first[g] + g
    int *host;                   // host (N+1 + 2N+2 + N+2): offsets, group offsets, first
    int *host_group, *first;     // views into host
} DocSegments;

// Most sequences one chunkwise call handles (the workspaces are sized for it): every
// batch row, or one per chunk of the whole micro-batch if that is more.
static inline int doc_segment_cap(int max_B, int max_T, int chunk) {
    const long n = (long)max_B * max_T, per_chunk = (n + chunk - 1) / chunk;
    return per_chunk > max_B ? (int)per_chunk : max_B;
}

void doc_segments_layout(struct Model *m, Carver *cv);
// From the host input ids of a forward (B rows of T)
void doc_segments_build(struct Model *m, const int *inputs, int B, int T);
void doc_segments_free(DocSegments *s);

#endif
