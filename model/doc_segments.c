// Document boundaries (doc_segments.h).
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/doc_segments.h"
#include "model/mixer.h"
#include "model/model.h"

void doc_segments_layout(Model *m, Carver *cv) {
    const ModelConfig *c = &m->cfg;
    DocSegments *s = &m->acts.seg;
    int used = 0;
    for (int l = 0; l < c->n_layer; l++) used |= mixer_of(c, l)->resets_at_eot;
    if (!c->reset_at_eot || !used) return;  // inactive: offsets NULL
    const size_t N = (size_t)m->max_B * m->max_T;
    s->active = 1;
    s->cap = doc_segment_cap(m->max_B, m->max_T, c->chunk_size);
    s->offsets = carve_bytes(cv, (N + 1) * sizeof(int));
    s->group_offsets = carve_bytes(cv, (2 * N + 2) * sizeof(int));
    if (cv->base && !s->host) {  // the second layout pass: host copies
        s->host = xmalloc(sizeof(int) * (4 * N + 5));
        s->host_group = s->host + N + 1;
        s->first = s->host_group + 2 * N + 2;
    }
}

void doc_segments_build(Model *m, const int *inputs, int B, int T) {
    DocSegments *s = &m->acts.seg;
    if (!s->active) return;
    const int N = B * T, eot = m->cfg.eot_token;
    s->last_is_eot = inputs[N - 1] == eot;
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

void doc_segments_free(DocSegments *s) {
    free(s->host);
    memset(s, 0, sizeof *s);
}
