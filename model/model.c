#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

// Model.head_grad: what the classifier's backward has done for the last forward
enum {
    HEAD_GRAD_NONE,     // nothing: the logits of the last forward can be made (model_logits)
    HEAD_GRAD_PENDING,  // model_forward_train: the lm_head gradient accumulated, d(final norm
                        // output) in acts.dbranch, for dlogits_scale; model_backward goes on from there
    HEAD_GRAD_DONE,     // model_backward ran
};

// Saved activations (cv) and backward scratch shared by all blocks (scratch: each
// block's layout starts at the same offset; the region is as large as the largest).
static void layout(Model *m, Carver *cv, Carver *scratch) {
    const ModelConfig *c = &m->cfg;
    const size_t N = (size_t)m->max_B * m->max_T, C = c->d_model, Vp = c->padded_vocab_size;
    const int S = c->attn_res_block, L = c->n_layer;
    Acts *a = &m->acts;
    a->encoded = carve(cv, N * C);
    size_t scratch_max = 0;
    for (int l = 0; l < c->n_layer; l++) {
        BlockActs *b = &a->blocks[l];
        Carver s = {scratch->base, 0, scratch->elem, scratch->stat};
        if (S) {
            AttnResPlan pa = attnres_plan(ATTNRES_ATTN, l, S, L);
            if (!pa.identity) attnres_layout(m, cv, &b->ar_attn, pa.n_sources);
        }
        norm_layout(m, cv, &b->norm1);
        mixer_of(c, l)->layout(m, l, cv, &s);
        b->mixer_out = carve(cv, N * C);
        b->res_mid = carve(cv, N * C);
        if (S) attnres_layout(m, cv, &b->ar_ffn, attnres_plan(ATTNRES_FFN, l, S, L).n_sources);
        norm_layout(m, cv, &b->norm2);
        if (m->mp.blocks[l].moe_layer) moe_layout(m, cv, &s, &b->moe);
        else mlp_layout(m, cv, &s, &b->mlp);
        b->channel_out = carve(cv, N * C);
        b->res_out = carve(cv, N * C);
        if (s.used > scratch_max) scratch_max = s.used;
    }
    // the output AttnRes, the sealed blocks and their gradient accumulators (docs/hybrid.md,
    // "Block AttnRes layer algorithm" and "AttnRes backward through the stack")
    if (S) {
        AttnResPlan po = attnres_plan(ATTNRES_OUT, 0, S, L);
        attnres_layout(m, cv, &a->ar_out, po.n_sources);
        a->ar_nblocks = po.n_blocks;
        if (cv->base && !a->ar_blocks) {
            a->ar_blocks = xcalloc((size_t)po.n_blocks, sizeof(*a->ar_blocks));
            a->ar_dblocks = xcalloc((size_t)po.n_blocks, sizeof(*a->ar_dblocks));
        }
        for (int j = 0; j < po.n_blocks; j++) {
            real *d = carve(cv, N * C);
            if (cv->base) a->ar_dblocks[j] = d;
        }
        a->ar_work = carve_stat(cv, N * po.n_sources);  // the output op has the most sources
    }
    norm_layout(m, cv, &a->normf);
    a->logits = carve(cv, (size_t)m->logits_rows * Vp);  // one chunk of rows (classifier_rows)
    a->losses = carve_stat(cv, N);
    a->dresid = carve(cv, N * C);
    a->dtmp = carve(cv, N * C);
    a->dbranch = carve(cv, N * C);
    a->tokens = carve_bytes(cv, N * sizeof(int));
    a->targets = carve_bytes(cv, N * sizeof(int));
    doc_segments_layout(m, cv);
    scratch->used = scratch_max;
}

// Dies, naming the layer and the part of it, if the backend lacks a family the config needs.
static void check_backend(const Model *m) {
    const ModelConfig *c = &m->cfg;
    char who[128];
    backend_require(m->be, FAMILY_CORE, "every model");
    if (c->norm == NORM_RMSNORM) backend_require(m->be, FAMILY_NORM_GLU, "norm = rmsnorm");
    if (c->attn_res_block) backend_require(m->be, FAMILY_ATTNRES, "attn_res_block > 0");
    for (int l = 0; l < c->n_layer; l++) {
        const MixerOps *mx = mixer_of(c, l);
        snprintf(who, sizeof who, "layer %d (mixer '%c', %s)", l, mx->letter, mx->name);
        backend_require(m->be, mx->families, who);
        snprintf(who, sizeof who, "layer %d (%s)", l, m->mp.blocks[l].moe_layer ? "MoE" : "the GLU MLP");
        if (m->mp.blocks[l].moe_layer) backend_require(m->be, FAMILY_MOE | FAMILY_NORM_GLU, who);
        else if (c->mlp != MLP_GELU) backend_require(m->be, FAMILY_NORM_GLU, who);
    }
}

void model_create(Model *m, const ModelConfig *c, const Backend *be, int B, int T) { model_create_padded(m, c, be, B, T, 1); }

size_t model_buffer_elems(const Model *m) { return m->buffer_elems; }

// The classifier's chunk (rows of acts.logits): classifier_chunk, or else as many rows as fit
// in CLASSIFIER_CHUNK_BYTES, rounded down to a multiple of 128; never more than the N tokens of
// a micro-batch (a chunk of N rows is the unchunked classifier, bit for bit). 256 MiB is about
// 0.5% of an H200 training run's peak (the 3:1 hybrid at B64 T1024: ~52 GiB, 6.1 GiB of it the
// full logits before chunking) and at GPT-2's padded vocabulary (50304) gives chunks of 2560
// rows in bf16 on CUDA, whose matmuls (2560 x 768 x 50304) are still large ones; in float on
// the CPU 1280 rows, more than the tiny configs' 1024 tokens, whose step thus stays unchunked.
#define CLASSIFIER_CHUNK_BYTES ((size_t)256 << 20)
static int classifier_rows(const ModelConfig *c, const Backend *be, size_t N) {
    size_t rows = (size_t)c->classifier_chunk;
    if (!rows) {
        rows = CLASSIFIER_CHUNK_BYTES / ((size_t)c->padded_vocab_size * be->elem_size) / 128 * 128;
        if (rows < 128) rows = 128;
    }
    return (int)(rows < N ? rows : N);
}

size_t model_block_offset(const Model *m, int l) {
    int idx = m->mp.block_first[l];
    return idx < m->table.count ? m->table.items[idx].local_offset : m->table.local_total;
}

void model_create_padded(Model *m, const ModelConfig *c, const Backend *be, int B, int T, size_t multiple) {
    memset(m, 0, sizeof *m);
    m->ep_size = 1;
    m->cfg = *c;
    m->be = be;
    m->max_B = B;
    m->max_T = T;
    if (c->position == POS_LEARNED && T > c->context_length)
        die("model: sequence length %d exceeds context_length %d", T, c->context_length);
    params_build(c, &m->table, &m->mp);
    check_backend(m);
    if (multiple < 1) multiple = 1;
    m->buffer_multiple = multiple;
    m->logits_rows = classifier_rows(c, be, (size_t)B * T);
    model_alloc_buffers(m);
    m->acts.blocks = xcalloc((size_t)c->n_layer, sizeof(BlockActs));
    for (int l = 0; l < c->n_layer; l++) m->acts.blocks[l].mixer = xcalloc(1, mixer_of(c, l)->acts_size);
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
    model_release_expert_parallel(m);
    model_cache_free(m);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        attnres_free(&m->acts.blocks[l].ar_attn);
        attnres_free(&m->acts.blocks[l].ar_ffn);
        free(m->acts.blocks[l].mixer);
    }
    attnres_free(&m->acts.ar_out);
    free((void *)m->acts.ar_blocks);
    free(m->acts.ar_dblocks);
    m->be->free(m->params);
    m->be->free(m->grads);
    m->be->free(m->act_memory);
    m->be->free(m->scratch_memory);
    free(m->acts.blocks);
    doc_segments_free(&m->acts.seg);
    params_free(&m->table, &m->mp);
    memset(m, 0, sizeof *m);
}

void model_alloc_buffers(Model *m) {
    const Backend *be = m->be;
    if (m->params) be->free(m->params);
    if (m->grads) be->free(m->grads);
    m->buffer_elems = (m->table.local_total + m->buffer_multiple - 1) / m->buffer_multiple * m->buffer_multiple;
    m->params = be->alloc(m->buffer_elems * be->elem_size);
    m->grads = be->alloc(m->buffer_elems * be->grad_size);
}

void model_init_params(Model *m, unsigned long seed) {
    float *host = params_host_array(&m->table, 1);
    params_init(&m->table, host, seed);  // this rank's part of the unsharded values
    m->be->upload(m->params, host, m->table.local_total);
    free(host);
}

// Full layout <-> the local buffer (the same unless the experts are sharded).
void model_set_params(Model *m, const float *host) {
    if (!params_sharded(&m->table)) {
        m->be->upload(m->params, host, m->table.total);
        return;
    }
    float *local = params_host_array(&m->table, 1);
    params_full_to_local(&m->table, host, local);
    m->be->upload(m->params, local, m->table.local_total);
    free(local);
}

// (grads: buf holds parameter gradients, grad_size bytes each)
static void get_full(const Model *m, const real *buf, int grads, float *host) {
    const size_t n = params_sharded(&m->table) ? m->table.local_total : m->table.total;
    float *local = params_sharded(&m->table) ? params_host_array(&m->table, 1) : host;
    if (grads)
        backend_grad_download(m->be, local, buf, n);
    else
        m->be->download(local, buf, n);
    if (local == host) return;
    params_local_to_full(&m->table, local, host);
    free(local);
}

void model_get_params(const Model *m, float *host) { get_full(m, m->params, 0, host); }
void model_get_grads(const Model *m, float *host) { get_full(m, m->grads, 1, host); }
void model_zero_grad(Model *m) { backend_grad_zero(m->be, m->grads, m->table.local_total); }

real *model_tensor(const Model *m, real *buf, int index) {
    if (index < 0) return NULL;
    return backend_offset(m->be, buf, m->table.items[index].local_offset);
}

real *model_grad(const Model *m, int index) {
    if (index < 0) return NULL;
    return backend_grad_offset(m->be, m->grads, m->table.items[index].local_offset);
}
#define P(idx) model_tensor(m, m->params, (idx))
#define G(idx) model_grad(m, (idx))

// The token mixer of layer l; in cached mode its cached form, from position pos0.
static void mixer_forward(Model *m, int l, real *out, const real *in, int B, int T, int pos0) {
    const MixerOps *mx = mixer_of(&m->cfg, l);
    if (m->cached) mx->forward_cached(m, l, out, in, T, pos0);
    else mx->forward(m, l, out, in, B, T);
}

// The channel mixer: MoE for layers >= dense_first when moe_experts > 0, else the dense MLP.
static void channel_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    if (m->mp.blocks[l].moe_layer) moe_forward(m, l, out, in, B, T);
    else mlp_forward(m, l, out, in, B, T);
}

static void channel_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    if (m->mp.blocks[l].moe_layer) moe_backward(m, l, din, dout, B, T);
    else mlp_backward(m, l, din, dout, B, T);
}

// The gradients of the biases whose gradient is the column sums of the module's dout
// (Model.dout_bias_summed), or NULL
static real *channel_out_bias_grad(Model *m, int l) {
    return m->mp.blocks[l].moe_layer ? NULL : mlp_out_bias_grad(m, l);
}
static real *mixer_out_bias_grad(Model *m, int l) {
    const MixerOps *mx = mixer_of(&m->cfg, l);
    return mx->out_bias_grad ? mx->out_bias_grad(m, l) : NULL;
}

// AttnRes sources (docs/hybrid.md, "Block AttnRes layer algorithm"): sealed blocks
// b_0 .. b_{n_blocks-1}, then the partial P (if any).
static void ar_sources(const real **src, const real *const *blocks, const AttnResPlan *pl, const real *P) {
    for (int j = 0; j < pl->n_blocks; j++) src[j] = blocks[j];
    if (pl->has_partial) src[pl->n_blocks] = P;
}

// Their gradient accumulators (docs/hybrid.md, "AttnRes backward through the stack"): dB_j
// per block, then dP for the partial.
static void ar_grads(real **dsrc, real *const *dB, const AttnResPlan *pl, real *dP) {
    for (int j = 0; j < pl->n_blocks; j++) dsrc[j] = dB[j];
    if (pl->has_partial) dsrc[pl->n_blocks] = dP;
}

// The graph on the uploaded tokens, rows b*T + t at positions pos0 + t: embeddings, the
// blocks and the final norm (the classifier runs apart, below). Block l, with P the block input:
//   plain residuals: P_mid = P + mixer(norm1(P));  P_out = P_mid + channel(norm2(P_mid))
//   Block AttnRes (docs/hybrid.md, "Block AttnRes layer algorithm"): the mixer reads
//   norm1(AttnRes(blocks, P)); at a block boundary (l % S == 0) P is sealed as a block
//   and P_mid = the mixer output alone; the channel mixer reads norm2(AttnRes(blocks,
//   P_mid)); the head reads normf(AttnRes(blocks, P_last)).
static void run_graph(Model *m, int B, int T, int pos0) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    const int N = B * T, C = c->d_model, S = c->attn_res_block, L = c->n_layer;
    const real *wpe = mp->pos_embed >= 0 ? backend_offset(be, P(mp->pos_embed), (size_t)pos0 * C) : NULL;
    be->core->embed_forward(a->encoded, a->tokens, P(mp->tok_embed), wpe, B, T, C);
    const real *Pc = a->encoded;  // the residual stream; with AttnRes the running partial sum
    int nb = 0;                   // AttnRes: blocks sealed so far
    const real *src[CONFIG_MAX_LAYERS + 2];
    // plain residuals: each residual add runs with the norm that reads its result
    // (norm_forward_add); normed says the next norm1 / normf is already done
    int normed = 0;
    for (int l = 0; l < L; l++) {
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        b->xa_in = Pc;
        if (S) {
            AttnResPlan pa = attnres_plan(ATTNRES_ATTN, l, S, L);
            if (pa.n_blocks != nb) die("model: AttnRes plan out of step at layer %d", l);
            if (!pa.identity) {
                ar_sources(src, a->ar_blocks, &pa, Pc);
                attnres_forward(m, &p->ar_attn, &b->ar_attn, src, N);
                b->xa_in = b->ar_attn.out;
            }
            if (pa.seal) a->ar_blocks[nb++] = Pc, Pc = NULL;  // push P; P := empty
        }
        if (!normed) norm_forward(m, &p->norm1, &b->norm1, b->xa_in, N);
        normed = 0;
        mixer_forward(m, l, b->mixer_out, b->norm1.out, B, T, pos0);
        b->pmid = b->mixer_out;
        if (Pc) {
            if (S) be->core->add_forward(b->res_mid, Pc, b->mixer_out, (size_t)N * C);
            else norm_forward_add(m, &p->norm2, &b->norm2, b->res_mid, Pc, b->mixer_out, N);
            b->pmid = b->res_mid;
        }
        b->xf_in = b->pmid;
        if (S) {
            AttnResPlan pf = attnres_plan(ATTNRES_FFN, l, S, L);
            ar_sources(src, a->ar_blocks, &pf, b->pmid);
            attnres_forward(m, &p->ar_ffn, &b->ar_ffn, src, N);
            b->xf_in = b->ar_ffn.out;
        }
        if (S || !Pc) norm_forward(m, &p->norm2, &b->norm2, b->xf_in, N);
        channel_forward(m, l, b->channel_out, b->norm2.out, B, T);
        if (S) {
            be->core->add_forward(b->res_out, b->pmid, b->channel_out, (size_t)N * C);
        } else {  // with the next block's norm1, or the final norm
            const NormParams *np = l + 1 < L ? &mp->blocks[l + 1].norm1 : &mp->normf;
            NormActs *na = l + 1 < L ? &a->blocks[l + 1].norm1 : &a->normf;
            norm_forward_add(m, np, na, b->res_out, b->pmid, b->channel_out, N);
            normed = 1;
        }
        Pc = b->res_out;
    }
    const real *h = Pc;
    if (S) {
        AttnResPlan po = attnres_plan(ATTNRES_OUT, 0, S, L);
        ar_sources(src, a->ar_blocks, &po, Pc);
        attnres_forward(m, &mp->ar_out, &a->ar_out, src, N);
        h = a->ar_out.out;
    }
    if (!normed) norm_forward(m, &mp->normf, &a->normf, h, N);
    m->logits_count = 0;  // the logits of this forward are made on demand (model_logits)
    m->head_grad = HEAD_GRAD_NONE;
}

// d(loss_scale * mean loss)/d(loss_i) = loss_scale / count for the rows that count
static real loss_grad(int count, float loss_scale) { return count ? (real)loss_scale / (real)count : 0; }

// ---- The classifier ----
// logits = x W^T (x = the final norm's output normf.out (N, C), W = the lm_head (Vp, C), the
// token embedding when tied), then the softmax cross-entropy, over the N rows of the last
// forward in chunks of at most logits_rows rows through one (logits_rows, Vp) buffer, so that
// the (N, Vp) logits never exist (the largest activation otherwise: 6.1 GiB in bf16 at 64k
// tokens). For the chunk of rows [r, r + n):
//   logits_c = x_c W^T                                   (matmul_forward, into acts.logits)
//   CLS_LOSS:  losses_c                                  (crossentropy_forward)
//   CLS_TRAIN: losses_c and dlogits_c in place           (crossentropy_forward_backward)
//   CLS_GRAD:  dlogits_c in place                        (crossentropy_backward)
//   with dlogits: dW += dlogits_c^T x_c, dx_c = dlogits_c W  (matmul_backward: rows r.. of
//              acts.dbranch, the gradient into the final norm's output)
// Every row is independent; only dW sums over them, a chunk at a time, into the lm_head's
// gradient (its rounding is that of one sum over all N rows only when one chunk covers them:
// logits_rows >= N). Gradients are never narrower than fp32 (Backend.grad_size), so a chunk's
// addition rounds as any fp32 sum does: 26 chunks at GPT-2's B64 T1024 cost nothing in bf16.
typedef enum { CLS_LOSS, CLS_TRAIN, CLS_GRAD } ClassifierPass;

static void classifier(Model *m, int N, ClassifierPass pass, real dloss) {
    const Backend *be = m->be;
    const CoreOps *op = be->core;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    const int C = m->cfg.d_model, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    for (int r = 0; r < N; r += m->logits_rows) {
        const int n = N - r < m->logits_rows ? N - r : m->logits_rows;
        const real *x = backend_offset(be, a->normf.out, (size_t)r * C);
        real *losses = backend_stat_offset(be, a->losses, (size_t)r);
        const int *tg = a->targets + r;
        op->matmul_forward(a->logits, x, P(mp->lm_head), NULL, n, C, Vp);
        if (pass == CLS_LOSS) {
            op->crossentropy_forward(losses, a->logits, tg, n, V, Vp);
            m->logits_from = r, m->logits_count = n;  // model_logits may reuse them
            continue;
        }
        if (pass == CLS_TRAIN) op->crossentropy_forward_backward(losses, a->logits, a->logits, tg, dloss, n, V, Vp);
        else op->crossentropy_backward(a->logits, a->logits, tg, dloss, n, V, Vp);
        m->logits_count = 0;
        real *dx = backend_offset(be, a->dbranch, (size_t)r * C);
        op->matmul_backward(dx, G(mp->lm_head), NULL, a->logits, x, P(mp->lm_head), n, C, Vp);
    }
}

// Every forward starts here: the one after model_forward_train must be its model_backward.
static void check_no_pending_head(const Model *m, const char *who) {
    if (m->head_grad == HEAD_GRAD_PENDING)
        die("%s: the last model_forward_train already accumulated the classifier's gradient; its model_backward "
            "must run before another forward",
            who);
}

// model_forward; train: model_forward_train (the cross-entropy gradient for loss_scale too)
static double forward(Model *m, const int *inputs, const int *targets, int B, int T, int train, float loss_scale) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    if (B > m->max_B || T > m->max_T)
        die("model_forward: batch %dx%d exceeds the allocated %dx%d", B, T, m->max_B, m->max_T);
    const int N = B * T, V = c->vocab_size;
    for (int i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= V) die("model_forward: token id %d at position %d is outside [0, %d)", inputs[i], i, V);
    check_no_pending_head(m, "model_forward");
    m->last_B = B;
    m->last_T = T;
    m->last_has_targets = targets != NULL;
    m->cached = 0;
    be->upload_tokens(a->tokens, inputs, (size_t)N);
    doc_segments_build(m, inputs, B, T);
    run_graph(m, B, T, 0);
    m->moe_aux_loss = 0;
    for (int l = 0; l < c->n_layer; l++)
        if (mp->blocks[l].moe_layer) m->moe_aux_loss += a->blocks[l].moe.aux_loss;
    if (!targets) return 0.0;

    int count = 0;
    for (int i = 0; i < N; i++) {
        if (targets[i] >= V) die("model_forward: target id %d at position %d is outside [0, %d)", targets[i], i, V);
        count += targets[i] >= 0;
    }
    m->last_count = count;
    be->upload_tokens(a->targets, targets, (size_t)N);
    if (train) {  // the classifier's backward too: its dlogits need nothing later
        classifier(m, N, CLS_TRAIN, loss_grad(count, loss_scale));
        m->head_grad = HEAD_GRAD_PENDING;
        m->dlogits_scale = loss_scale;
    } else {
        classifier(m, N, CLS_LOSS, 0);
    }
    // ignored rows have loss 0, so the mean is the sum over the rows that count
    return count ? be->core->sum(a->losses, (size_t)N) / count : 0.0;
}

double model_forward(Model *m, const int *inputs, const int *targets, int B, int T) {
    return forward(m, inputs, targets, B, T, 0, 0.f);
}

double model_forward_train(Model *m, const int *inputs, const int *targets, int B, int T, float loss_scale) {
    if (!targets) die("model_forward_train: no targets (model_forward computes logits alone)");
    return forward(m, inputs, targets, B, T, 1, loss_scale);
}

void model_backward(Model *m, float loss_scale) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const ModelParams *mp = &m->mp;
    Acts *a = &m->acts;
    if (!m->last_has_targets) die("model_backward: the last forward had no targets");
    const int B = m->last_B, T = m->last_T, N = B * T, C = c->d_model;

    m->backward_scale = loss_scale;  // the MoE balance loss enters with weight loss_scale
    if (m->head_grad == HEAD_GRAD_DONE)
        die("model_backward: the backward of the last forward already ran (one backward per forward)");
    if (m->head_grad == HEAD_GRAD_NONE) {  // after model_forward: the classifier's backward, chunk by chunk
        classifier(m, N, CLS_GRAD, loss_grad(m->last_count, loss_scale));
        m->dlogits_scale = loss_scale;
    } else if (loss_scale != m->dlogits_scale) {
        die("model_backward: loss_scale %g, but the classifier's gradients already hold the gradient for %g "
            "(model_forward_train ran its backward for that loss_scale)",
            (double)loss_scale, (double)m->dlogits_scale);
    }
    m->head_grad = HEAD_GRAD_DONE;  // a->dbranch: d(final norm output)
    const int S = c->attn_res_block, L = c->n_layer;
    const size_t nc = (size_t)N * C;
    // dP: the gradient of the current residual stream / AttnRes partial; with AttnRes one
    // accumulator dB_j per sealed block as well (docs/hybrid.md, "AttnRes backward through
    // the stack"), all starting at zero
    real *dP = a->dresid, *dB[CONFIG_MAX_LAYERS + 1], *dsrc[CONFIG_MAX_LAYERS + 2];
    if (S) {
        norm_backward(m, &mp->normf, &a->normf, a->dtmp, a->dbranch, a->ar_out.out, N);
        for (int j = 0; j < a->ar_nblocks; j++) be->zero(dB[j] = a->ar_dblocks[j], nc);
        be->zero(dP, nc);
        AttnResPlan po = attnres_plan(ATTNRES_OUT, 0, S, L);
        ar_grads(dsrc, dB, &po, dP);
        attnres_backward(m, &mp->ar_out, &a->ar_out, dsrc, a->dtmp, N);
    } else {
        norm_backward(m, &mp->normf, &a->normf, dP, a->dbranch, L ? a->blocks[L - 1].res_out : a->encoded, N);
    }
    if (m->grads_ready) m->grads_ready(m, L, m->grads_ready_ctx);  // the tensors after the blocks are final
    // walk the blocks backwards; dP holds d(block output) = d(P_out). Where the backend has
    // the fused norm backward-add, it also sums the columns of the dP it makes into the
    // output bias gradient of the module that reads dP next (the mixer's, then the previous
    // block's channel mixer's); m->dout_bias_summed tells that module's backward.
    m->dout_bias_summed = 0;
    for (int l = L - 1; l >= 0; l--) {
        if (l < L - 1 && m->grads_ready) m->grads_ready(m, l + 1, m->grads_ready_ctx);  // block l+1 is final
        const BlockParams *p = &mp->blocks[l];
        BlockActs *b = &a->blocks[l];
        // P_out = P_mid + channel(norm2(x_f)), x_f = P_mid or AttnRes(blocks, P_mid)
        channel_backward(m, l, a->dbranch, dP, B, T);
        m->dout_bias_summed = 0;
        if (S) {
            norm_backward(m, &p->norm2, &b->norm2, a->dtmp, a->dbranch, b->xf_in, N);
            AttnResPlan pf = attnres_plan(ATTNRES_FFN, l, S, L);
            ar_grads(dsrc, dB, &pf, dP);
            attnres_backward(m, &p->ar_ffn, &b->ar_ffn, dsrc, a->dtmp, N);
        } else {
            m->dout_bias_summed = norm_backward_add(m, &p->norm2, &b->norm2, dP, a->dbranch, b->xf_in, N, a->dtmp,
                                                    mixer_out_bias_grad(m, l));
        }
        // dP = d(P_mid); P_mid = (P_in or empty) + mixer(norm1(x_a))
        mixer_of(c, l)->backward(m, l, a->dbranch, dP, B, T);
        m->dout_bias_summed = 0;
        if (!S) {  // d(block input) = the dout of block l - 1's channel mixer
            m->dout_bias_summed = norm_backward_add(m, &p->norm1, &b->norm1, dP, a->dbranch, b->xa_in, N, a->dtmp,
                                                    l ? channel_out_bias_grad(m, l - 1) : NULL);
            continue;
        }
        norm_backward(m, &p->norm1, &b->norm1, a->dtmp, a->dbranch, b->xa_in, N);
        AttnResPlan pa = attnres_plan(ATTNRES_ATTN, l, S, L);
        if (pa.identity) {  // layer 0: x_a = E, which is also block b_0
            be->core->add_inplace(dB[0], a->dtmp, nc);
            dP = dB[0];
        } else if (pa.seal) {  // the partial read here IS block b_m; P was reset, so dP_in = dB_m
            int mb = pa.n_blocks;
            for (int j = 0; j <= mb; j++) dsrc[j] = dB[j];
            attnres_backward(m, &p->ar_attn, &b->ar_attn, dsrc, a->dtmp, N);
            real *t = dP;
            dP = dB[mb];
            dB[mb] = t;  // popped: no earlier op reads b_m
        } else {  // P_mid = P_in + a: dP_in = dP_mid + the attention op's partial gradient
            ar_grads(dsrc, dB, &pa, dP);
            attnres_backward(m, &p->ar_attn, &b->ar_attn, dsrc, a->dtmp, N);
        }
    }
    m->dout_bias_summed = 0;
    be->core->embed_backward(G(mp->tok_embed), G(mp->pos_embed), dP, a->tokens, B, T, C);
    if (m->grads_ready) m->grads_ready(m, -1, m->grads_ready_ctx);  // every gradient is final
}

void model_cache_init(Model *m, int max_len) {
    const ModelConfig *c = &m->cfg;
    if (max_len < 1) die("model_cache_init: max_len = %d must be positive", max_len);
    if (c->position == POS_LEARNED && max_len > c->context_length)
        die("model_cache_init: %d tokens exceed context_length %d (learned positions)", max_len, c->context_length);
    model_cache_free(m);
    for (int l = 0; l < c->n_layer; l++) {
        const MixerOps *mx = mixer_of(c, l);
        m->acts.blocks[l].cache = xcalloc(1, mx->cache_size);
        mx->cache_init(m, l, max_len);
        mx->cache_reset(m, l);
    }
    m->cache_len = max_len;
    m->cache_pos = 0;
}

void model_cache_reset(Model *m) {
    if (!m->cache_len) die("model_cache_reset: no caches (call model_cache_init first)");
    for (int l = 0; l < m->cfg.n_layer; l++) mixer_of(&m->cfg, l)->cache_reset(m, l);
    m->cache_pos = 0;
}

void model_cache_free(Model *m) {
    if (!m->cache_len) return;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        mixer_of(&m->cfg, l)->cache_free(m, l);
        free(m->acts.blocks[l].cache);
        m->acts.blocks[l].cache = NULL;
    }
    m->cache_len = 0;
    m->cache_pos = 0;
}

void model_forward_cached(Model *m, const int *tokens, int n) {
    const ModelConfig *c = &m->cfg;
    if (!m->cache_len) die("model_forward_cached: no caches (call model_cache_init first)");
    if (n < 1 || n > m->max_T)
        die("model_forward_cached: %d tokens at once; the model's buffers hold 1 to %d", n, m->max_T);
    if (m->cache_pos + n > m->cache_len)
        die("model_forward_cached: %d more tokens after %d exceed the %d the caches were made for", n, m->cache_pos,
            m->cache_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
            die("model_forward_cached: token id %d is outside [0, %d)", tokens[i], c->vocab_size);
    check_no_pending_head(m, "model_forward_cached");
    m->last_B = 1;
    m->last_T = n;
    m->last_has_targets = 0;  // no backward after a cached forward
    m->cached = 1;
    m->be->upload_tokens(m->acts.tokens, tokens, (size_t)n);
    doc_segments_build(m, tokens, 1, n);
    run_graph(m, 1, n, m->cache_pos);
    m->cached = 0;
    m->cache_pos += n;
}

static const real *logits_of(Model *m, int row, int n, const char *who) {
    const Backend *be = m->be;
    if (m->head_grad != HEAD_GRAD_NONE)
        die("%s: the logits of the last forward were turned into their gradient (model_forward_train or "
            "model_backward); model_forward makes them again",
            who);
    const int N = m->last_B * m->last_T, Vp = m->cfg.padded_vocab_size;
    if (n < 1 || n > m->logits_rows || row < 0 || row > N - n)
        die("%s: rows %d..%d of a forward of %d rows (at most %d at once)", who, row, row + n - 1, N, m->logits_rows);
    if (row < m->logits_from || row + n > m->logits_from + m->logits_count) {
        int from = row / m->logits_rows * m->logits_rows;  // the chunk of row, for the next calls
        if (row + n > from + m->logits_rows) from = row;
        m->logits_count = N - from < m->logits_rows ? N - from : m->logits_rows;
        m->logits_from = from;
        be->core->matmul_forward(m->acts.logits, backend_offset(be, m->acts.normf.out, (size_t)from * m->cfg.d_model),
                                 model_tensor(m, m->params, m->mp.lm_head), NULL, m->logits_count, m->cfg.d_model, Vp);
    }
    return backend_offset(be, m->acts.logits, (size_t)(row - m->logits_from) * Vp);
}

const real *model_logits(Model *m, int row, int n) { return logits_of(m, row, n, "model_logits"); }

void model_logits_row(Model *m, int b, int t, float *out) {
    if (b < 0 || b >= m->last_B || t < 0 || t >= m->last_T)
        die("model_logits_row: row (%d, %d) of a forward of %d x %d", b, t, m->last_B, m->last_T);
    m->be->download(out, logits_of(m, b * m->last_T + t, 1, "model_logits_row"), (size_t)m->cfg.padded_vocab_size);
}
