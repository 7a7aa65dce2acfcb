#include "params.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "mixer.h"
#include "base/util.h"

int params_add(ParamTable *t, ParamGroup group, InitRule init, double std, int ndim, const int *shape,
               const char *fmt, ...) {
    t->items = xrealloc(t->items, sizeof(ParamInfo) * (size_t)(t->count + 1));
    ParamInfo *p = &t->items[t->count];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    // every tensor starts at a multiple of PARAM_ALIGN elements of the buffers (params.h)
    t->total = params_align_up(t->total);
    t->local_total = params_align_up(t->local_total);
    p->offset = t->total;
    p->group = group;
    p->init = init;
    p->init_std = std;
    p->blocks = 1;
    p->local_offset = t->local_total;
    p->local_numel = p->numel;
    t->total += p->numel;
    t->local_total += p->local_numel;
    return t->count++;
}

int params_matrix(ParamTable *t, double std, int out, int in, const char *fmt, int layer) {
    int shape[2] = {out, in};
    return params_add(t, GROUP_MATRIX, INIT_NORMAL, std, 2, shape, fmt, layer);
}

int params_vector(ParamTable *t, ParamGroup g, InitRule init, int n, const char *fmt, int layer) {
    int shape[1] = {n};
    return params_add(t, g, init, 0.0, 1, shape, fmt, layer);
}

double params_resid_std(const ModelConfig *c) { return c->init_std / sqrt(2.0 * c->n_layer); }

void params_build(const ModelConfig *c, ParamTable *t, ModelParams *mp) {
    memset(t, 0, sizeof *t);
    memset(mp, 0, sizeof *mp);
    t->ep_size = 1;
    const int C = c->d_model;
    int shape[2] = {c->padded_vocab_size, C};
    mp->tok_embed = params_add(t, GROUP_EMBED, INIT_NORMAL, c->init_std, 2, shape, "embed.tok.weight");
    mp->pos_embed = -1;
    if (c->position == POS_LEARNED) {
        int pshape[2] = {c->context_length, C};
        mp->pos_embed = params_add(t, GROUP_EMBED, INIT_NORMAL, c->init_std, 2, pshape, "embed.pos.weight");
    }
    mp->n_layer = c->n_layer;
    mp->blocks = xcalloc((size_t)c->n_layer, sizeof(BlockParams));
    mp->block_first = xcalloc((size_t)c->n_layer + 1, sizeof(int));
    for (int l = 0; l < c->n_layer; l++) {
        mp->block_first[l] = t->count;
        BlockParams *b = &mp->blocks[l];
        memset(b, -1, sizeof *b);  // every index -1 until created
        const MixerOps *mx = mixer_of(c, l);
        b->mixer = xmalloc(mx->params_size);
        memset(b->mixer, -1, mx->params_size);
        // layer 0's attention input is the embedding itself (docs/hybrid.md, "Block AttnRes
        // layer algorithm")
        if (c->attn_res_block && l > 0)
            attnres_params(c, t, &b->ar_attn, "blocks.%d.attnres_attn", l);
        norm_params(c, t, &b->norm1, "blocks.%d.norm1", l);
        mx->params(c, t, l, b->mixer);
        if (c->attn_res_block) attnres_params(c, t, &b->ar_ffn, "blocks.%d.attnres_ffn", l);
        norm_params(c, t, &b->norm2, "blocks.%d.norm2", l);
        b->moe_layer = c->moe_experts > 0 && l >= c->dense_first;
        if (b->moe_layer) moe_params(c, t, l, &b->moe);
        else mlp_params(c, t, l, &b->mlp);
    }
    mp->block_first[c->n_layer] = t->count;
    mp->ar_out = (AttnResParams){-1, -1};
    if (c->attn_res_block) attnres_params(c, t, &mp->ar_out, "attnres_out", -1);
    norm_params(c, t, &mp->normf, "norm_f", -1);
    if (c->tie_embeddings) {
        mp->lm_head = mp->tok_embed;
    } else {
        mp->lm_head = params_add(t, GROUP_EMBED, INIT_NORMAL, c->init_std, 2, shape, "lm_head.weight");
    }
}

void params_free(ParamTable *t, ModelParams *mp) {
    free(t->items);
    for (int l = 0; l < mp->n_layer; l++) free(mp->blocks[l].mixer);
    free(mp->blocks);
    free(mp->block_first);
    memset(t, 0, sizeof *t);
    memset(mp, 0, sizeof *mp);
}

int params_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (!strcmp(t->items[i].name, name)) return i;
    return -1;
}

const char *param_group_name(ParamGroup g) {
    switch (g) {
    case GROUP_MATRIX: return "matrix";
    case GROUP_EMBED: return "embed";
    case GROUP_NORM: return "norm";
    case GROUP_BIAS: return "bias";
    case GROUP_ROUTER: return "router";
    case GROUP_STATE: return "state";
    case GROUP_GATE: return "gate";
    default: return "?";
    }
}

int param_group_decays(ParamGroup g) { return g == GROUP_MATRIX || g == GROUP_EMBED; }

// One draw of tensor p's init rule.
static float init_value(const ParamInfo *p, Rng *rng) {
    switch (p->init) {
    case INIT_NORMAL: return (float)(p->init_std * rng_normal(rng));
    case INIT_ZERO: return 0.0f;
    case INIT_ONE: return 1.0f;
    case INIT_LOG_UNIFORM:  // (lo, hi]: 1 - u avoids log 0 when lo = 0
        return (float)log(p->init_lo + (p->init_hi - p->init_lo) * (1.0 - rng_uniform(rng)));
    case INIT_DT_BIAS: {    // fla: dt + log(-expm1(-dt)) = softplus^-1(dt)
        double dt = exp(log(p->init_lo) + rng_uniform(rng) * (log(p->init_hi) - log(p->init_lo)));
        if (dt < 1e-4) dt = 1e-4;
        return (float)(dt + log(-expm1(-dt)));
    }
    }
    return 0.0f;
}

void params_init(const ParamTable *t, float *host, unsigned long seed) {
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        float *w = host + p->local_offset;
        const size_t lo = p->local_lo, hi = p->local_lo + p->local_numel;
        for (size_t j = 0; j < p->numel; j++) {  // every draw, so later tensors get the same values
            float v = init_value(p, &rng);
            if (j >= lo && j < hi) w[j - lo] = v;
        }
    }
}

size_t params_count_non_embedding(const ParamTable *t) {
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->items[i].group != GROUP_EMBED && t->items[i].group != GROUP_STATE) n += t->items[i].numel;
    return n;
}

size_t params_count(const ParamTable *t) {
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->items[i].group != GROUP_STATE) n += t->items[i].numel;
    return n;
}

double params_count_active(const ModelConfig *c, const ParamTable *t, int non_embedding) {
    double n = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        if (p->group == GROUP_STATE || (non_embedding && p->group == GROUP_EMBED)) continue;
        n += p->routed ? (double)p->numel * c->moe_top_k / c->moe_experts : (double)p->numel;
    }
    return n;
}

double params_flops_per_token(const ModelConfig *c, const ParamTable *t, int seq_len) {
    // every active non-embedding parameter is one multiply-add per token (x 3 for fwd + bwd),
    // plus the lm_head matmul (tied or not): padded vocab x d_model
    double flops = 6.0 * params_count_active(c, t, 1) + 6.0 * (double)c->padded_vocab_size * c->d_model;
    for (int l = 0; l < c->n_layer; l++) flops += mixer_of(c, l)->flops(c, seq_len);
    return flops;
}

void params_print(const ModelConfig *c, const ParamTable *t, int seq_len, FILE *f) {
    fprintf(f, "%-36s %-18s %12s %12s  %-6s %s\n", "name", "shape", "numel", "offset", "group", "init");
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        char shape[64] = "(";
        for (int d = 0; d < p->ndim; d++) {
            char part[24];
            snprintf(part, sizeof part, d ? ", %d" : "%d", p->shape[d]);
            strcat(shape, part);
        }
        strcat(shape, ")");
        char init[64];
        if (p->init == INIT_NORMAL) snprintf(init, sizeof init, "normal(%.4g)", p->init_std);
        else if (p->init == INIT_LOG_UNIFORM) snprintf(init, sizeof init, "logU(%g,%g)", p->init_lo, p->init_hi);
        else if (p->init == INIT_DT_BIAS) snprintf(init, sizeof init, "dt_bias(%g,%g)", p->init_lo, p->init_hi);
        else snprintf(init, sizeof init, "%s", p->init == INIT_ZERO ? "zeros" : "ones");
        fprintf(f, "%-36s %-18s %12zu %12zu  %-6s %s\n", p->name, shape, p->numel, p->offset,
                param_group_name(p->group), init);
    }
    size_t total = params_count(t), nonemb = params_count_non_embedding(t), emb = total - nonemb;
    fprintf(f, "\nparameters: %zu total (%.2fM), %zu in embeddings, %zu non-embedding\n", total,
            (double)total / 1e6, emb, nonemb);
    if (c->moe_experts > 0) {
        double act = params_count_active(c, t, 0), act_ne = params_count_active(c, t, 1);
        fprintf(f, "active per token (top-%d of %d routed experts + shared): %.0f (%.2fM), %.0f non-embedding (%.2fM)\n",
                c->moe_top_k, c->moe_experts, act, act / 1e6, act_ne, act_ne / 1e6);
    }
    size_t state = 0;  // (t->total also counts the alignment gaps between tensors)
    for (int i = 0; i < t->count; i++)
        if (t->items[i].group == GROUP_STATE) state += t->items[i].numel;
    if (state) fprintf(f, "state (saved, not trained): %zu\n", state);
    double fl = params_flops_per_token(c, t, seq_len);
    fprintf(f, "training FLOPs per token (seq_len %d): %.4g (%.1f MFLOP)\n", seq_len, fl, fl / 1e6);
}
