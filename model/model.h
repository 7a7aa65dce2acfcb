// The model graph, written once (docs/architecture.md, "One graph, two backends"): which op
// runs after which, what is saved for the backward, and the residual bookkeeping. Every op
// goes through the backend table, so the same code drives the CPU reference and CUDA. The
// sublayers (token mixers, channel mixers, norms) are modules (layers.h); this file strings
// them into blocks:  x = x + mixer(norm1(x));  x = x + channel(norm2(x)), or with Block AttnRes
// (attn_res_block > 0; docs/hybrid.md, "Block AttnRes layer algorithm") each sublayer reading
// an AttnRes mix of the sealed blocks and the running partial sum.
#ifndef HYBRID_MODEL_H
#define HYBRID_MODEL_H

#include "backend.h"
#include "model_config.h"
#include "doc_segments.h"
#include "layers.h"
#include "mixer.h"
#include "params.h"

// Saved activations of one block (rows N = B*T).
typedef struct {
    NormActs norm1, norm2;
    void *mixer;                       // the token mixer's activations (MixerOps.acts_size)
    void *cache;                       // its generation cache (MixerOps.cache_size; NULL without one)
    MlpActs mlp;
    MoeActs moe;
    real *mixer_out;                   // (N,C) mixer branch
    real *res_mid;                     // (N,C) input + mixer branch
    real *channel_out;                 // (N,C) channel branch
    real *res_out;                     // (N,C) block output
    // Block AttnRes (docs/hybrid.md, "Block AttnRes layer algorithm"); without it
    // xa_in = the block input, xf_in = pmid
    AttnResActs ar_attn, ar_ffn;
    const real *xa_in, *xf_in;         // inputs of norm1 and norm2
    const real *pmid;                  // P_mid: res_mid, or mixer_out right after a block seal
} BlockActs;

typedef struct {
    real *encoded;                     // (N,C) embeddings
    BlockActs *blocks;                 // n_layer
    NormActs normf;
    AttnResActs ar_out;                // the final AttnRes (h = ar_out.out)
    const real **ar_blocks;            // sealed AttnRes blocks of the last forward (host array)
    real **ar_dblocks;                 // backward: one gradient accumulator per block (N,C)
    real *ar_work;                     // backward: AttnRes scratch, N * (max sources)
    int ar_nblocks;                    // blocks the stack seals
    real *logits;                      // (logits_rows, Vp): one chunk of the classifier's logits
                                       // (dlogits in place while it trains), never all N rows
    real *losses;                      // (N)
    // backward scratch; dbranch also carries d(final norm output) from the classifier's
    // backward (model_forward_train) to model_backward
    real *dresid, *dtmp, *dbranch;     // (N,C)
    int *tokens, *targets;             // (N)
    DocSegments seg;                   // document boundaries (reset_at_eot)
} Acts;

typedef struct Model {
    ModelConfig cfg;
    ParamTable table;
    ModelParams mp;
    const Backend *be;
    real *params, *grads;              // backend memory, table.local_total elements each (+ padding)
    size_t buffer_elems;               // elements allocated in params and grads
    size_t buffer_multiple;            // they are padded to a multiple of this
    int max_B, max_T;                  // activation buffers are sized for these
    Acts acts;
    void *act_memory, *scratch_memory;
    size_t act_bytes, scratch_bytes;
    int last_B, last_T;                // shape of the last forward
    int last_has_targets;
    int last_count;                    // rows of the last forward whose target counts
    int logits_rows;                   // rows of acts.logits: the classifier's chunk
    int logits_from, logits_count;     // the rows of the last forward whose logits acts.logits
                                       // holds now (count 0: none)
    int head_grad;                     // HEAD_GRAD_*: what the classifier's backward has done
                                       // for the last forward (model.c, "The classifier")
    float dlogits_scale;               // the loss_scale that backward ran for
    double moe_aux_loss;               // sum over MoE layers of the last forward's balance loss
    float backward_scale;              // loss_scale of the running backward (aux-loss gradient)
    // Set by model_backward around one module's backward: the column sums of that module's
    // dout were already added to the gradient of its output bias (the bias its out_bias_grad
    // names), by the fused norm backward that wrote dout (layernorm_backward_add's dsum), so
    // the module's backward leaves that gradient alone. 0 everywhere else.
    int dout_bias_summed;
    // Distributed runs (docs/distributed.md, dist/): the collectives (NULL: one process) and
    // the expert-parallel group size (1: every rank runs every expert; >1: model/moe.c
    // dispatches tokens to the ranks of the COMM_EP group that own their experts; set it
    // with model_set_expert_parallel).
    struct Comm *comm;
    int ep_size;
    void *ep_memory, *ep_scratch_memory;  // the expert-parallel exchange's buffers
    // Called by model_backward as soon as a part of the gradient buffer is final: the
    // parameters from block `block` on (block = n_layer: the tensors after the blocks, right
    // after the head's backward; -1: everything, after the embeddings). The data-parallel
    // reduction (dist/grad_sync.c) starts its buckets there. NULL: none.
    void (*grads_ready)(struct Model *m, int block, void *ctx);
    void *grads_ready_ctx;
    int cached;                        // the graph runs in cached mode (model_forward_cached)
    int cache_len;                     // positions the caches hold (model_cache_init; 0: no caches)
    int cache_pos;                     // cached mode: tokens already in the caches
} Model;

// Builds the parameter table and allocates parameters, gradients and activations
// for micro-batches of up to B x T tokens. Parameters start at zero: call
// model_init_params or model_set_params.
void model_create(Model *m, const ModelConfig *c, const Backend *be, int B, int T);
// The same, with the parameter and gradient buffers padded with zeros to a multiple of
// `multiple` elements (ZeRO-1 splits them into equal shards, dist/grad_sync.c).
void model_create_padded(Model *m, const ModelConfig *c, const Backend *be, int B, int T, size_t multiple);
// Elements allocated in m->params and m->grads (table.local_total plus the padding).
size_t model_buffer_elems(const Model *m);
// (Re)allocates m->params and m->grads for the table's local layout (contents undefined).
void model_alloc_buffers(Model *m);
// First element of block l's tensors in the parameter buffer; l = n_layer: the first
// tensor after the blocks (the final norm, the untied lm_head); the blocks' tensors are
// contiguous and in layer order.
size_t model_block_offset(const Model *m, int l);
void model_destroy(Model *m);
void model_init_params(Model *m, unsigned long seed);               // the table's init rules
// Host fp32 arrays in the full layout (table.total elements, every tensor whole). With the
// experts sharded (model_set_expert_parallel) set takes this rank's part, and get fills this
// rank's part and zeros the elements of the experts other ranks hold.
void model_set_params(Model *m, const float *host);
void model_get_params(const Model *m, float *host);
void model_get_grads(const Model *m, float *host);

// Forward on B x T tokens (B <= max_B, T <= max_T). With targets, computes the
// per-row losses and returns their mean over rows whose target is >= 0; without
// (targets NULL) it stops at the logits and returns 0.
double model_forward(Model *m, const int *inputs, const int *targets, int B, int T);
// The logits are never all there at once: the classifier (lm_head, then the cross-entropy)
// runs over chunks of at most m->logits_rows rows (config key classifier_chunk) in one
// (logits_rows, Vp) buffer; model_forward keeps the final norm's output, from which
// model_logits_row / model_logits compute the rows asked for.
//
// The training forward: model_forward with targets (the same loss), which also runs the
// classifier's backward, since its upstream gradient is known now: chunk by chunk the
// logits become d(loss_scale * mean loss)/dlogits in place (crossentropy_forward_backward),
// which are accumulated into the lm_head's gradient in m->grads (the token embedding's when
// tied) and turned into d(final norm output), kept for model_backward. model_backward(m,
// loss_scale) must follow, with the same loss_scale, before any other forward (which dies);
// model_logits_row dies until the next model_forward. Evaluation and sampling, which need no
// gradient, use model_forward.
double model_forward_train(Model *m, const int *inputs, const int *targets, int B, int T, float loss_scale);
// Backward of the last forward (which must have had targets): accumulates into
// m->grads the gradient of loss_scale * mean loss. After model_forward it first runs the
// classifier's backward (the logits again, chunk by chunk); after model_forward_train that
// is done. Once per forward: a second call dies.
void model_backward(Model *m, float loss_scale);
void model_zero_grad(Model *m);
// Host copy of the logits of row (b, t) of the last forward (model_forward or
// model_forward_cached), padded vocab wide. Dies after model_forward_train or
// model_backward (the classifier then made gradients of them).
void model_logits_row(Model *m, int b, int t, float *out);
// The logits of rows row .. row + n - 1 (row = b * T + t) of the last forward, in backend
// memory (the classifier's buffer; n <= m->logits_rows), valid until the next call into the
// model. The same conditions as model_logits_row. Consecutive rows of one chunk are
// computed once.
const real *model_logits(Model *m, int row, int n);

// Pointer to tensor `index` of the table inside buf (m->params, or a buffer of the same
// layout and element type); NULL for -1.
real *model_tensor(const Model *m, real *buf, int index);
// Pointer to the gradient of tensor `index` in m->grads (grad_size elements); NULL for -1.
real *model_grad(const Model *m, int index);

// ---- expert parallelism (docs/hybrid.md, "Expert parallelism" and "Expert-parallel
//      exchange"), model/moe_dispatch_ep.c
// Turns expert parallelism on for an EP group of ep_size ranks (the runtime's COMM_EP
// group: call dist_set_ep(ep_size) first) and allocates the exchange's buffers (owner-side
// rows for the dropless worst case ep_size * max_B * max_T * min(top_k, E / ep_size) per MoE
// layer). Call it after model_create, on every rank of the group, with every rank's model
// built for the same max_B x max_T. comm (non-NULL) also becomes m->comm. Dies unless ep_size
// divides moe_experts.
//   EP rank q owns the experts q*E/ep_size .. (q+1)*E/ep_size - 1 and, with ep_size > 1, holds
// only theirs: the table's routed tensors are sharded (params_shard) and m->params / m->grads
// shrink to the local layout, keeping the values this rank had for its experts (so it may be
// called before or after the parameters are set). An owner accumulates its experts'
// gradients over the tokens of the whole EP group; dist/grad_sync.c sums them over the ranks
// that hold the same experts. Sharding cannot be undone: ep_size = 1 (or another size) on a
// sharded model dies; ep_size = 1 on an unsharded one frees the buffers.
//   Every MoE forward/backward is collective over the group, and a sharded model cannot run
// alone or cached (decoding): that dies with a message. To sample on one rank, gather the
// weights (model_get_params on every rank, summed) into an unsharded model (train.c does).
void model_set_expert_parallel(Model *m, struct Comm *comm, int ep_size);
// Dies with a clear message unless ep_size >= 1 divides moe_experts (models without MoE:
// any ep_size >= 1).
void model_check_expert_parallel(const ModelConfig *c, int ep_size);
// Frees the buffers (model_destroy calls it).
void model_release_expert_parallel(Model *m);

// ---- cached (incremental) forward of one sequence: the one generation path ----
// The same graph (run_graph) on the new tokens only: every token mixer keeps a cache of the
// prefix (MixerOps.forward_cached: A its packed qkv rows, M its latent rows [chat | k_rope]
// attended in the absorbed form, K/G/D/L their O(1) recurrent and conv states), and the
// per-token parts (norms, AttnRes, MoE, MLP) simply run on the new rows. The logits equal
// those of a full forward up to rounding (tests/test_decode.c), reset_at_eot included. The
// cached forward runs on the activation buffers: do not use it between a forward and its
// backward. MoE runs every expert locally (no expert-parallel exchange).
// Allocates the caches for a sequence of up to max_len tokens (with learned positions at most
// context_length), at position 0; again with another max_len, it replaces them.
void model_cache_init(Model *m, int max_len);
// Empties the caches (position 0).
void model_cache_reset(Model *m);
void model_cache_free(Model *m);  // model_destroy frees them too
// Runs the next n tokens (positions cache_pos .. cache_pos+n-1; n <= max_T of the model, and
// the caches must hold them); their logits are then model_logits_row(m, 0, i), i < n.
void model_forward_cached(Model *m, const int *tokens, int n);

// ---- MoE load balancing once per optimizer step (docs/hybrid.md, "Load balancing"),
//      model/moe_step.c ----
typedef struct {
    int layers;                        // MoE layers
    long min, max;                     // fewest / most slots any expert of any layer got this step
    double cv_mean, cv_max;            // coefficient of variation of the per-expert counts
                                       // (mean over MoE layers, worst layer)
} MoeStepStats;
int model_has_moe(const Model *m);
// After the optimizer step: load statistics of the step's training micro-batches (counted in
// model_backward), then the aux-loss-free bias update (moe_bias_update_rate > 0), then the
// counts are cleared for the next step. master: the optimizer's fp32 master weights on a
// backend that keeps them (Optimizer.master), else NULL.
void model_moe_step(Model *m, float *master, MoeStepStats *st);

#endif
