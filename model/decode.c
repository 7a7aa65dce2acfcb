// Model-level decoding: one token through every block with per-layer caches (decode.h).
// The block structure is model.c's (x + mixer(norm1(x)), + channel(norm2(x))), run on
// one row of the activation buffers; only the mixers differ, each stepping its cache.
#include "decode.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define P(idx) model_tensor(m, m->params, (idx))

static int is_linear(char mixer) { return mixer && strchr("KGDL", mixer) != NULL; }

// every layer letter has a decode step, and the backend has the entries it needs
int model_decode_supported(const Model *m) {
    const Backend *be = m->be;
    // the per-token loop below runs plain residuals and the dense MLP: MoE and Block
    // AttnRes models (and MLA, which has its own cached forward: model_forward_cached)
    // sample through full forwards until the two decode paths are unified
    if (m->cfg.moe_experts > 0 || m->cfg.attn_res_block > 0) return 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const char x = m->cfg.layers[l];
        if (is_linear(x) && !be->delta_rule) return 0;
        if (x != 'A' && !is_linear(x)) return 0;
    }
    return 1;
}

void model_decode_init(Decoder *d, Model *m, int max_len) {
    if (!model_decode_supported(m)) die("decode: layers = %s has a mixer without a decode step", m->cfg.layers_spec);
    if (max_len < 1) die("decode: max_len must be positive");
    if (m->cfg.position == POS_LEARNED && max_len > m->cfg.context_length)
        die("decode: %d tokens exceed context_length %d (learned positions)", max_len, m->cfg.context_length);
    memset(d, 0, sizeof *d);
    d->max_len = max_len;
    d->bounded = m->cfg.position == POS_LEARNED || strchr(m->cfg.layers, 'A') != NULL;
    d->layers = xcalloc((size_t)m->cfg.n_layer, sizeof(LayerCache));
    d->token = m->be->alloc(sizeof(int));
    for (int l = 0; l < m->cfg.n_layer; l++) {
        LayerCache *c = &d->layers[l];
        c->mixer = m->cfg.layers[l];
        if (c->mixer == 'A') attn_cache_init(m, l, &c->attn, max_len);
        else if (is_linear(c->mixer)) linear_cache_init(m, l, &c->lin);
    }
}

// the recurrent states only: what a sequence boundary (reset_at_eot) clears
static void reset_linear(Decoder *d, Model *m) {
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (is_linear(d->layers[l].mixer)) linear_cache_reset(m, l, &d->layers[l].lin);
}

void model_decode_reset(Decoder *d, Model *m) {
    reset_linear(d, m);  // the KV caches need no clearing: rows past pos are never read
    d->pos = 0;
}

void model_decode_free(Decoder *d, Model *m) {
    for (int l = 0; l < m->cfg.n_layer; l++) {
        LayerCache *c = &d->layers[l];
        if (c->mixer == 'A') attn_cache_free(m, &c->attn);
        else if (is_linear(c->mixer)) linear_cache_free(m, &c->lin);
    }
    free(d->layers);
    m->be->free(d->token);
    memset(d, 0, sizeof *d);
}

void model_decode_step(Decoder *d, Model *m, int token, float *logits) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    const int C = c->d_model, pos = d->pos;
    if (token < 0 || token >= c->vocab_size) die("decode: token id %d is outside [0, %d)", token, c->vocab_size);
    if (d->bounded && pos >= d->max_len) die("decode: position %d is past the %d tokens the caches were made for", pos, d->max_len);
    be->upload_tokens(d->token, &token, 1);
    const real *wpe = mp->pos_embed >= 0 ? backend_offset(be, P(mp->pos_embed), (size_t)pos * C) : NULL;
    be->core->embed_forward(a->encoded, d->token, P(mp->tok_embed), wpe, 1, 1, C);
    const real *x = a->encoded;
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        LayerCache *lc = &d->layers[l];
        norm_forward(m, &p->norm1, &b->norm1, x, 1);
        switch (lc->mixer) {
        case 'A': attn_decode_step(m, l, &lc->attn, b->mixer_out, b->norm1.out, pos); break;
        case 'K': case 'G': case 'D': case 'L': linear_decode_step(m, l, &lc->lin, b->mixer_out, b->norm1.out); break;
        default: die("decode: no decode step for layer type '%c'", lc->mixer);
        }
        be->core->add_forward(b->res_mid, x, b->mixer_out, (size_t)C);
        norm_forward(m, &p->norm2, &b->norm2, b->res_mid, 1);
        mlp_forward(m, l, b->channel_out, b->norm2.out, 1, 1);
        be->core->add_forward(b->res_out, b->res_mid, b->channel_out, (size_t)C);
        x = b->res_out;
    }
    norm_forward(m, &mp->normf, &a->normf, x, 1);
    be->core->matmul_forward(a->logits, a->normf.out, P(mp->lm_head), NULL, 1, C, c->padded_vocab_size);
    be->download(logits, a->logits, (size_t)c->padded_vocab_size);
    // the activation buffers now hold this one row: no backward, logits row (0, 0)
    m->last_B = m->last_T = 1;
    m->last_has_targets = 0;
    d->pos++;
    if (c->reset_at_eot && token == c->eot_token) reset_linear(d, m);  // the next token starts a new sequence
}
