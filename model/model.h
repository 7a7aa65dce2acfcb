// The model graph, written once (ARCHITECTURE §2): which op runs after which, what is
// saved for the backward, and the residual bookkeeping. Every op goes through the
// backend table, so the same code drives the CPU reference and CUDA. The sublayers
// (token mixers, channel mixers, norms) are modules (layers.h); this file strings
// them into blocks:  x = x + mixer(norm1(x));  x = x + channel(norm2(x)).
#ifndef HYBRID_MODEL_H
#define HYBRID_MODEL_H

#include "backend.h"
#include "config.h"
#include "layers.h"
#include "params.h"

// Saved activations of one block (rows N = B*T).
typedef struct {
    NormActs norm1, norm2;
    AttnActs attn;                     // mixer 'A'
    LinearActs lin;                    // mixers 'K' 'G' 'D' 'L'
    MlpActs mlp;
    real *mixer_out;                   // (N,C) mixer branch
    real *res_mid;                     // (N,C) input + mixer branch
    real *channel_out;                 // (N,C) channel branch
    real *res_out;                     // (N,C) block output
} BlockActs;

typedef struct {
    real *encoded;                     // (N,C) embeddings
    BlockActs *blocks;                 // n_layer
    NormActs normf;
    real *logits;                      // (N,Vp); dlogits in place after the backward
    real *losses;                      // (N)
    // backward scratch
    real *dresid, *dtmp, *dbranch;     // (N,C)
    int *tokens, *targets;             // (N)
    LinearSegments seg;                // sequence boundaries of the K/G/D/L mixers
} Acts;

typedef struct Model {
    Config cfg;
    ParamTable table;
    ModelParams mp;
    const Backend *be;
    real *params, *grads;              // backend memory, table.total elements each
    int max_B, max_T;                  // activation buffers are sized for these
    Acts acts;
    void *act_memory, *scratch_memory;
    size_t act_bytes, scratch_bytes;
    int last_B, last_T;                // shape of the last forward
    int last_has_targets;
    int last_count;                    // rows of the last forward whose target counts
} Model;

// Builds the parameter table and allocates parameters, gradients and activations
// for micro-batches of up to B x T tokens. Parameters start at zero: call
// model_init_params or model_set_params.
void model_create(Model *m, const Config *c, const Backend *be, int B, int T);
void model_destroy(Model *m);
void model_init_params(Model *m, unsigned long seed);               // the table's init rules
void model_set_params(Model *m, const float *host);                  // host fp32, table.total
void model_get_params(const Model *m, float *host);
void model_get_grads(const Model *m, float *host);

// Forward on B x T tokens (B <= max_B, T <= max_T). With targets, computes the
// per-row losses and returns their mean over rows whose target is >= 0; without
// (targets NULL) it stops at the logits and returns 0.
double model_forward(Model *m, const int *inputs, const int *targets, int B, int T);
// Backward of the last forward (which must have had targets): accumulates into
// m->grads the gradient of loss_scale * mean loss.
void model_backward(Model *m, float loss_scale);
void model_zero_grad(Model *m);
// Host copy of the logits of row (b, t) of the last forward, padded vocab wide
// (valid until model_backward, which turns the logits into their gradient in place).
void model_logits_row(const Model *m, int b, int t, float *out);

// Pointer to tensor `index` of the table inside buf (m->params or m->grads); NULL for -1.
real *model_tensor(const Model *m, real *buf, int index);

#endif
