// The parameter table: every tensor of the model, generated from the config.
// One table drives init, optimizer groups, the checkpoint format and the
// safetensors names (ARCHITECTURE §2). Parameters live in one contiguous buffer;
// gradients mirror it element for element.
#ifndef HYBRID_PARAMS_H
#define HYBRID_PARAMS_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "rng.h"

#define PARAM_NAME_MAX 96
#define PARAM_MAX_DIMS 4

// Optimizer group: decides weight decay (and, later, Muon vs AdamW).
typedef enum {
    GROUP_MATRIX,   // 2-D hidden weight matrices: weight decay
    GROUP_EMBED,    // token / position embeddings (and the tied lm_head): weight decay
    GROUP_NORM,     // norm gains and shifts: no weight decay
    GROUP_BIAS,     // linear biases: no weight decay
    GROUP_COUNT
} ParamGroup;

typedef enum {
    INIT_NORMAL,    // N(0, std)
    INIT_ZERO,
    INIT_ONE,
} InitRule;

typedef struct {
    char name[PARAM_NAME_MAX];
    int ndim;
    int shape[PARAM_MAX_DIMS];  // PyTorch layout: a Linear weight is (out, in)
    size_t offset;              // in elements, into the parameter buffer
    size_t numel;
    ParamGroup group;
    InitRule init;
    double init_std;            // INIT_NORMAL only
    int blocks;                 // logical matrices stacked along rows (fused q|k|v = 3); Muon
                                // orthogonalises each separately. 1 for ordinary tensors.
} ParamInfo;

typedef struct {
    ParamInfo *items;
    int count;
    size_t total;               // elements in the parameter buffer
} ParamTable;

// Indices into the table for one transformer block; -1 where the config has no such tensor.
typedef struct {
    int norm1_w, norm1_b;
    int attn_qkv_w, attn_qkv_b, attn_out_w, attn_out_b;
    int norm2_w, norm2_b;
    int mlp_up_w, mlp_up_b, mlp_down_w, mlp_down_b;
} BlockParams;

typedef struct {
    int tok_embed, pos_embed;   // pos_embed -1 without learned positions
    int lm_head;                // the tok_embed index when tied
    int normf_w, normf_b;
    BlockParams *blocks;        // n_layer entries
} ModelParams;

void params_build(const Config *c, ParamTable *t, ModelParams *mp);
void params_free(ParamTable *t, ModelParams *mp);

int params_find(const ParamTable *t, const char *name);  // -1 if absent
const char *param_group_name(ParamGroup g);
int param_group_decays(ParamGroup g);

// Fills a host float buffer of t->total elements following each tensor's init rule.
// Tensors are drawn in table order from one generator seeded with `seed`.
void params_init(const ParamTable *t, float *host, unsigned long seed);

// Parameter count of the tensors that are not embeddings (as GPT-2 papers count them).
size_t params_count_non_embedding(const ParamTable *t);

// Training FLOPs per token (forward + backward), llm.c's convention: 6 * (matmul
// parameters, the lm_head included once) + 6 * n_layer * d_model * seq_len for causal attention.
double params_flops_per_token(const Config *c, const ParamTable *t);

// Prints the table, the totals and the FLOPs per token.
void params_print(const Config *c, const ParamTable *t, FILE *f);

#endif
