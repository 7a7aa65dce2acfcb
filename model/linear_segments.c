// Sequence boundaries of the K/G/D/L mixers (docs/kda.md, "Document boundaries").
// With reset_at_eot, the flattened B*T rows are cut at every batch-row start and after
// every end-of-text token (the token after an EOT starts a new sequence, whose
// recurrent and conv states start from zero), FlashAttention's cu_seqlens convention
// (kda-spec §0.1). The short convs take all the offsets at once; the chunkwise ops run
// over consecutive groups of at most `cap` sequences, each with its offsets rebased to
// its first row, because their workspaces grow with the number of sequences.
// Softmax-attention layers ignore all of this.
#include <stdlib.h>
#include <string.h>

#include "mixer_linear.h"
#include "model.h"
#include "base/util.h"

void linear_segments_layout(Model *m, Carver *cv) {
    const Config *c = &m->cfg;
    LinearSegments *s = &m->acts.seg;
    if (!c->reset_at_eot || !strpbrk(c->layers, "KGDL")) return;  // inactive: offsets NULL
    const size_t N = (size_t)m->max_B * m->max_T;
    s->active = 1;
    s->cap = lin_segment_cap(m->max_B, m->max_T, c->chunk_size);
    s->offsets = carve_bytes(cv, (N + 1) * sizeof(int));
    s->group_offsets = carve_bytes(cv, (2 * N + 2) * sizeof(int));
    if (cv->base && !s->host) {  // the second layout pass: host copies
        s->host = xmalloc(sizeof(int) * (4 * N + 5));
        s->host_group = s->host + N + 1;
        s->first = s->host_group + 2 * N + 2;
    }
}

void linear_segments_build(Model *m, const int *inputs, int B, int T) {
    LinearSegments *s = &m->acts.seg;
    if (!s->active) return;
    const int N = B * T, eot = m->cfg.eot_token;
    int *off = s->host, n = 0;
    off[0] = 0;
    for (int i = 1; i < N; i++)
        if (i % T == 0 || inputs[i - 1] == eot) off[++n] = i;
    off[++n] = N;
    s->nseq = n;
    // groups of at most cap sequences, each with offsets rebased to its first row
    int g = 0;
    s->first[0] = 0;
    while (s->first[g] < n) {
        const int s0 = s->first[g], s1 = s0 + s->cap < n ? s0 + s->cap : n;
        int *rebased = s->host_group + s0 + g;
        for (int j = s0; j <= s1; j++) rebased[j - s0] = off[j] - off[s0];
        s->first[++g] = s1;
    }
    s->ngroups = g;
    m->be->upload_tokens(s->offsets, off, (size_t)n + 1);
    m->be->upload_tokens(s->group_offsets, s->host_group, (size_t)(n + g));
}

void linear_segments_free(LinearSegments *s) {
    free(s->host);
    memset(s, 0, sizeof *s);
}
