#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// ---------------------------------------------------------------------------
// Activation layout: every buffer is carved out of one allocation. The layout
// runs twice: once to count bytes (base NULL), once to hand out pointers.

typedef struct {
    char *base;
    size_t used;
    size_t elem;
} Carver;

static void *carve_bytes(Carver *cv, size_t bytes) {
    size_t at = cv->used;
    cv->used += (bytes + 255) / 256 * 256;  // 256-byte alignment for every buffer
    return cv->base ? cv->base + at : NULL;
}

static real *carve(Carver *cv, size_t n) { return carve_bytes(cv, n * cv->elem); }

static void layout_acts(Model *m, Carver *cv) {
    const Config *c = &m->cfg;
    const size_t N = (size_t)m->max_B * m->max_T, C = c->d_model, H = c->mlp_hidden, Vp = c->padded_vocab_size;
    Acts *a = &m->acts;
    a->encoded = carve(cv, N * C);
    for (int l = 0; l < c->n_layer; l++) {
        BlockActs *b = &a->blocks[l];
        b->ln1 = carve(cv, N * C);
        b->ln1_mean = carve(cv, N);
        b->ln1_rstd = carve(cv, N);
        b->qkv = carve(cv, N * 3 * C);
        b->atty = carve(cv, N * C);
        b->att_lse = carve(cv, N * c->n_head);
        b->attproj = carve(cv, N * C);
        b->res_mid = carve(cv, N * C);
        b->ln2 = carve(cv, N * C);
        b->ln2_mean = carve(cv, N);
        b->ln2_rstd = carve(cv, N);
        b->fc = carve(cv, N * H);
        b->fc_gelu = carve(cv, N * H);
        b->fcproj = carve(cv, N * C);
        b->res_out = carve(cv, N * C);
    }
    a->lnf = carve(cv, N * C);
    a->lnf_mean = carve(cv, N);
    a->lnf_rstd = carve(cv, N);
    a->logits = carve(cv, N * Vp);
    a->losses = carve(cv, N);
    a->dresid = carve(cv, N * C);
    a->dtmp = carve(cv, N * C);
    a->dln = carve(cv, N * C);
    a->dqkv = carve(cv, N * 3 * C);
    a->dfc = carve(cv, N * H);
    a->dfc_gelu = carve(cv, N * H);
    a->tokens = carve_bytes(cv, N * sizeof(int));
    a->targets = carve_bytes(cv, N * sizeof(int));
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
    Carver cv = {NULL, 0, be->elem_size};
    layout_acts(m, &cv);
    m->act_bytes = cv.used;
    m->act_memory = be->alloc(cv.used);
    cv = (Carver){m->act_memory, 0, be->elem_size};
    layout_acts(m, &cv);
}

void model_destroy(Model *m) {
    m->be->free(m->params);
    m->be->free(m->grads);
    m->be->free(m->act_memory);
    free(m->acts.blocks);
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

// Pointer to tensor `index` of the table inside buf (params or grads); NULL for index -1.
static real *tensor(const Model *m, real *buf, int index) {
    if (index < 0) return NULL;
    return backend_offset(m->be, buf, m->table.items[index].offset);
}
#define P(idx) tensor(m, m->params, (idx))
#define G(idx) tensor(m, m->grads, (idx))

double model_forward(Model *m, const int *inputs, const int *targets, int B, int T) {
    const Backend *be = m->be;
    const Config *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    if (B > m->max_B || T > m->max_T)
        die("model_forward: batch %dx%d exceeds the allocated %dx%d", B, T, m->max_B, m->max_T);
    const int N = B * T, C = c->d_model, H = c->mlp_hidden, NH = c->n_head;
    const int V = c->vocab_size, Vp = c->padded_vocab_size;
    const real eps = (real)c->norm_eps;
    for (int i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= V) die("model_forward: token id %d at position %d is outside [0, %d)", inputs[i], i, V);
    m->last_B = B;
    m->last_T = T;
    m->last_has_targets = targets != NULL;
    be->upload_tokens(a->tokens, inputs, (size_t)N);

    be->embed_forward(a->encoded, a->tokens, P(mp->tok_embed), P(mp->pos_embed), B, T, C);
    const real *x = a->encoded;
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        // token mixer: x + Attn(LN1(x))
        be->layernorm_forward(b->ln1, b->ln1_mean, b->ln1_rstd, x, P(p->norm1_w), P(p->norm1_b), N, C, eps);
        be->matmul_forward(b->qkv, b->ln1, P(p->attn_qkv_w), P(p->attn_qkv_b), N, C, 3 * C);
        be->attention_forward(b->atty, b->att_lse, b->qkv, B, T, C, NH);
        be->matmul_forward(b->attproj, b->atty, P(p->attn_out_w), P(p->attn_out_b), N, C, C);
        be->add_forward(b->res_mid, x, b->attproj, (size_t)N * C);
        // channel mixer: x + MLP(LN2(x))
        be->layernorm_forward(b->ln2, b->ln2_mean, b->ln2_rstd, b->res_mid, P(p->norm2_w), P(p->norm2_b), N, C, eps);
        be->matmul_forward(b->fc, b->ln2, P(p->mlp_up_w), P(p->mlp_up_b), N, C, H);
        be->gelu_forward(b->fc_gelu, b->fc, (size_t)N * H);
        be->matmul_forward(b->fcproj, b->fc_gelu, P(p->mlp_down_w), P(p->mlp_down_b), N, H, C);
        be->add_forward(b->res_out, b->res_mid, b->fcproj, (size_t)N * C);
        x = b->res_out;
    }
    be->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, P(mp->normf_w), P(mp->normf_b), N, C, eps);
    be->matmul_forward(a->logits, a->lnf, P(mp->lm_head), NULL, N, C, Vp);
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
    const int B = m->last_B, T = m->last_T, N = B * T, C = c->d_model, H = c->mlp_hidden, NH = c->n_head;
    const int V = c->vocab_size, Vp = c->padded_vocab_size;

    // d(loss_scale * mean loss)/d(loss_i) = loss_scale / count for the rows that count
    real dloss = m->last_count ? (real)loss_scale / (real)m->last_count : 0;
    // in place: the logits become dlogits (the logits are not needed after this)
    be->crossentropy_backward(a->logits, a->logits, a->targets, dloss, N, V, Vp);
    be->matmul_backward(a->dln, G(mp->lm_head), NULL, a->logits, a->lnf, P(mp->lm_head), N, C, Vp);
    const real *x_last = c->n_layer ? a->blocks[c->n_layer - 1].res_out : a->encoded;
    be->layernorm_backward(a->dresid, G(mp->normf_w), G(mp->normf_b), a->dln, x_last, P(mp->normf_w), a->lnf_mean,
                           a->lnf_rstd, N, C);
    // a->dresid now holds dLoss/d(block output); walk the blocks backwards.
    for (int l = c->n_layer - 1; l >= 0; l--) {
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        const real *x = l ? a->blocks[l - 1].res_out : a->encoded;
        // channel mixer: res_out = res_mid + MLP(LN2(res_mid))
        be->matmul_backward(a->dfc_gelu, G(p->mlp_down_w), G(p->mlp_down_b), a->dresid, b->fc_gelu, P(p->mlp_down_w),
                            N, H, C);
        be->gelu_backward(a->dfc, b->fc, a->dfc_gelu, (size_t)N * H);
        be->matmul_backward(a->dln, G(p->mlp_up_w), G(p->mlp_up_b), a->dfc, b->ln2, P(p->mlp_up_w), N, C, H);
        be->layernorm_backward(a->dtmp, G(p->norm2_w), G(p->norm2_b), a->dln, b->res_mid, P(p->norm2_w), b->ln2_mean,
                               b->ln2_rstd, N, C);
        be->add_inplace(a->dresid, a->dtmp, (size_t)N * C);  // now d(res_mid)
        // token mixer: res_mid = x + Attn(LN1(x))
        be->matmul_backward(a->dln, G(p->attn_out_w), G(p->attn_out_b), a->dresid, b->atty, P(p->attn_out_w), N, C, C);
        be->attention_backward(a->dqkv, a->dln, b->qkv, b->atty, b->att_lse, B, T, C, NH);
        be->matmul_backward(a->dln, G(p->attn_qkv_w), G(p->attn_qkv_b), a->dqkv, b->ln1, P(p->attn_qkv_w), N, C,
                            3 * C);
        be->layernorm_backward(a->dtmp, G(p->norm1_w), G(p->norm1_b), a->dln, x, P(p->norm1_w), b->ln1_mean,
                               b->ln1_rstd, N, C);
        be->add_inplace(a->dresid, a->dtmp, (size_t)N * C);  // now d(x)
    }
    be->embed_backward(G(mp->tok_embed), G(mp->pos_embed), a->dresid, a->tokens, B, T, C);
}

void model_logits_row(const Model *m, int b, int t, float *out) {
    const size_t Vp = (size_t)m->cfg.padded_vocab_size;
    const real *row = backend_offset(m->be, m->acts.logits, ((size_t)b * m->last_T + t) * Vp);
    m->be->download(out, row, Vp);
}
