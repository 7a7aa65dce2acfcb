#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// Saved activations (cv) and backward scratch shared by all blocks (scratch: each
// block's layout starts at the same offset; the region is as large as the largest).
static void layout(Model *m, Carver *cv, Carver *scratch) {
    const Config *c = &m->cfg;
    const size_t N = (size_t)m->max_B * m->max_T, C = c->d_model, Vp = c->padded_vocab_size;
    Acts *a = &m->acts;
    a->encoded = carve(cv, N * C);
    size_t scratch_max = 0;
    for (int l = 0; l < c->n_layer; l++) {
        BlockActs *b = &a->blocks[l];
        Carver s = {scratch->base, 0, scratch->elem, scratch->stat};
        norm_layout(m, cv, &b->norm1);
        switch (c->layers[l]) {
        case 'A': attn_layout(m, cv, &s, &b->attn); break;
        case 'K': case 'G': case 'D': case 'L': linear_layout(m, l, cv, &s, &b->lin); break;
        }
        b->mixer_out = carve(cv, N * C);
        b->res_mid = carve(cv, N * C);
        norm_layout(m, cv, &b->norm2);
        mlp_layout(m, cv, &s, &b->mlp);
        b->channel_out = carve(cv, N * C);
        b->res_out = carve(cv, N * C);
        if (s.used > scratch_max) scratch_max = s.used;
    }
    norm_layout(m, cv, &a->normf);
    a->logits = carve(cv, N * Vp);
    a->losses = carve_stat(cv, N);
    a->dresid = carve(cv, N * C);
    a->dtmp = carve(cv, N * C);
    a->dbranch = carve(cv, N * C);
    a->tokens = carve_bytes(cv, N * sizeof(int));
    a->targets = carve_bytes(cv, N * sizeof(int));
    linear_segments_layout(m, cv);
    scratch->used = scratch_max;
}

void model_create(Model *m, const Config *c, const Backend *be, int B, int T) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->be = be;
    m->max_B = B;
    m->max_T = T;
    if (c->position == POS_LEARNED && T > c->context_length)
        die("model: sequence length %d exceeds context_length %d", T, c->context_length);
    params_build(c, &m->table, &m->mp);
    m->params = be->alloc(m->table.total * be->elem_size);
    m->grads = be->alloc(m->table.total * be->elem_size);
    m->acts.blocks = xcalloc((size_t)c->n_layer, sizeof(BlockActs));
    Carver cv = {NULL, 0, be->elem_size, be->stat_size}, scratch = {NULL, 0, be->elem_size, be->stat_size};
    layout(m, &cv, &scratch);
    m->act_bytes = cv.used;
    m->scratch_bytes = scratch.used;
    m->act_memory = be->alloc(cv.used);
    m->scratch_memory = be->alloc(scratch.used ? scratch.used : 1);
    cv = (Carver){m->act_memory, 0, be->elem_size, be->stat_size};
    scratch = (Carver){m->scratch_memory, 0, be->elem_size, be->stat_size};
    layout(m, &cv, &scratch);
}

void model_destroy(Model *m) {
    m->be->free(m->params);
    m->be->free(m->grads);
    m->be->free(m->act_memory);
    m->be->free(m->scratch_memory);
    free(m->acts.blocks);
    linear_segments_free(&m->acts.seg);
    params_free(&m->table, &m->mp);
    memset(m, 0, sizeof *m);
}

void model_init_params(Model *m, unsigned long seed) {
    float *host = xmalloc(sizeof(float) * m->table.total);
    params_init(&m->table, host, seed);
    model_set_params(m, host);
    free(host);
}

void model_set_params(Model *m, const float *host) { m->be->upload(m->params, host, m->table.total); }
void model_get_params(const Model *m, float *host) { m->be->download(host, m->params, m->table.total); }
void model_get_grads(const Model *m, float *host) { m->be->download(host, m->grads, m->table.total); }
void model_zero_grad(Model *m) { m->be->zero(m->grads, m->table.total); }

real *model_tensor(const Model *m, real *buf, int index) {
    if (index < 0) return NULL;
    return backend_offset(m->be, buf, m->table.items[index].offset);
}
#define P(idx) model_tensor(m, m->params, (idx))
#define G(idx) model_tensor(m, m->grads, (idx))

static void mixer_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    switch (m->cfg.layers[l]) {
    case 'A': attn_forward(m, l, out, in, B, T); break;
    case 'K': case 'G': case 'D': case 'L': linear_forward(m, l, out, in, B, T); break;
    default: die("model: no forward for layer type '%c'", m->cfg.layers[l]);
    }
}

static void mixer_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    switch (m->cfg.layers[l]) {
    case 'A': attn_backward(m, l, din, dout, B, T); break;
    case 'K': case 'G': case 'D': case 'L': linear_backward(m, l, din, dout, B, T); break;
    default: die("model: no backward for layer type '%c'", m->cfg.layers[l]);
    }
}

double model_forward(Model *m, const int *inputs, const int *targets, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    if (B > m->max_B || T > m->max_T)
        die("model_forward: batch %dx%d exceeds the allocated %dx%d", B, T, m->max_B, m->max_T);
    const int N = B * T, C = c->d_model, V = c->vocab_size, Vp = c->padded_vocab_size;
    for (int i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= V) die("model_forward: token id %d at position %d is outside [0, %d)", inputs[i], i, V);
    m->last_B = B;
    m->last_T = T;
    m->last_has_targets = targets != NULL;
    be->upload_tokens(a->tokens, inputs, (size_t)N);
    linear_segments_build(m, inputs, B, T);

    be->embed_forward(a->encoded, a->tokens, P(mp->tok_embed), P(mp->pos_embed), B, T, C);
    const real *x = a->encoded;
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        norm_forward(m, &p->norm1, &b->norm1, x, N);
        mixer_forward(m, l, b->mixer_out, b->norm1.out, B, T);
        be->add_forward(b->res_mid, x, b->mixer_out, (size_t)N * C);
        norm_forward(m, &p->norm2, &b->norm2, b->res_mid, N);
        mlp_forward(m, l, b->channel_out, b->norm2.out, B, T);
        be->add_forward(b->res_out, b->res_mid, b->channel_out, (size_t)N * C);
        x = b->res_out;
    }
    norm_forward(m, &mp->normf, &a->normf, x, N);
    be->matmul_forward(a->logits, a->normf.out, P(mp->lm_head), NULL, N, C, Vp);
    if (!targets) return 0.0;

    int count = 0;
    for (int i = 0; i < N; i++) {
        if (targets[i] >= V) die("model_forward: target id %d at position %d is outside [0, %d)", targets[i], i, V);
        count += targets[i] >= 0;
    }
    m->last_count = count;
    be->upload_tokens(a->targets, targets, (size_t)N);
    be->crossentropy_forward(a->losses, a->logits, a->targets, N, V, Vp);
    // ignored rows have loss 0, so the mean is the sum over the rows that count
    return count ? be->sum(a->losses, (size_t)N) / count : 0.0;
}

void model_backward(Model *m, float loss_scale) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    if (!m->last_has_targets) die("model_backward: the last forward had no targets");
    const int B = m->last_B, T = m->last_T, N = B * T, C = c->d_model;
    const int V = c->vocab_size, Vp = c->padded_vocab_size;

    // d(loss_scale * mean loss)/d(loss_i) = loss_scale / count for the rows that count;
    // in place: the logits become dlogits (they are not needed after this)
    real dloss = m->last_count ? (real)loss_scale / (real)m->last_count : 0;
    be->crossentropy_backward(a->logits, a->logits, a->targets, dloss, N, V, Vp);
    be->matmul_backward(a->dbranch, G(mp->lm_head), NULL, a->logits, a->normf.out, P(mp->lm_head), N, C, Vp);
    const real *x_last = c->n_layer ? a->blocks[c->n_layer - 1].res_out : a->encoded;
    norm_backward(m, &mp->normf, &a->normf, a->dresid, a->dbranch, x_last, N);
    // a->dresid holds dLoss/d(block output); walk the blocks backwards
    for (int l = c->n_layer - 1; l >= 0; l--) {
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        const real *x = l ? a->blocks[l - 1].res_out : a->encoded;
        // res_out = res_mid + channel(norm2(res_mid))
        mlp_backward(m, l, a->dbranch, a->dresid, B, T);
        norm_backward(m, &p->norm2, &b->norm2, a->dtmp, a->dbranch, b->res_mid, N);
        be->add_inplace(a->dresid, a->dtmp, (size_t)N * C);  // now d(res_mid)
        // res_mid = x + mixer(norm1(x))
        mixer_backward(m, l, a->dbranch, a->dresid, B, T);
        norm_backward(m, &p->norm1, &b->norm1, a->dtmp, a->dbranch, x, N);
        be->add_inplace(a->dresid, a->dtmp, (size_t)N * C);  // now d(x)
    }
    be->embed_backward(G(mp->tok_embed), G(mp->pos_embed), a->dresid, a->tokens, B, T, C);
}

void model_logits_row(const Model *m, int b, int t, float *out) {
    const size_t Vp = (size_t)m->cfg.padded_vocab_size;
    const real *row = backend_offset(m->be, m->acts.logits, ((size_t)b * m->last_T + t) * Vp);
    m->be->download(out, row, Vp);
}
