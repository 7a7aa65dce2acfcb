// The parameter table: every tensor of the model, generated from the config. One table drives
// init, optimizer groups, the checkpoint format and the safetensors names
// (docs/architecture.md, "The parameter table"). Parameters live in one contiguous buffer;
// gradients mirror it element for element.
//   Two layouts of the same tensors: the full one (shape, numel, offset, total: every tensor
// whole, as checkpoints, init and the tools see the model) and this rank's buffer
// (local_offset, local_numel, local_total). They are the same unless the routed-expert
// tensors are split over an expert-parallel group (params_shard; docs/hybrid.md, "Expert
// parallelism"): then a rank's buffer holds only its experts' rows of each routed tensor.
#ifndef HYBRID_PARAMS_H
#define HYBRID_PARAMS_H

#include <stddef.h>
#include <stdio.h>

#include "model_config.h"
#include "base/rng.h"

// Every tensor starts at a multiple of PARAM_ALIGN elements of the parameter, gradient and
// optimizer-state buffers (64 elements: 128 bytes in bf16, 256 in fp32). The elements between
// two tensors are zero and stay zero: no op reads or writes them, so their gradient and moments
// are zero too. Packed end to end, one odd-sized tensor (a KDA layer's A_log has one element a
// head) left every later tensor only 4-byte aligned, and cuBLASLt picks slower GEMM kernels for
// such pointers (docs/cuda.md, "Parameter alignment").
#define PARAM_ALIGN 64
static inline size_t params_align_up(size_t n) { return (n + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN; }

#define PARAM_NAME_MAX 96
#define PARAM_MAX_DIMS 4

// Optimizer group: decides weight decay (and, later, Muon vs AdamW).
typedef enum {
    GROUP_MATRIX,   // 2-D hidden weight matrices: weight decay
    GROUP_EMBED,    // token / position embeddings (and the tied lm_head): weight decay
    GROUP_NORM,     // norm gains and shifts: no weight decay
    GROUP_BIAS,     // linear biases: no weight decay
    GROUP_ROUTER,   // MoE router weights: AdamW (never Muon), no weight decay by default
    GROUP_STATE,    // not trained: no gradient, no optimizer, not counted as a parameter, but
                    // saved with the weights (the MoE selection bias: docs/hybrid.md,
                    // "Router forward" and "Aux-loss-free bias balancing")
    GROUP_GATE,     // A_log, dt_bias and short-conv kernels of the K/G/D/L mixers: no weight
                    // decay, never Muon (fla marks them _no_weight_decay; docs/kda.md,
                    // "Layer parameters")
    GROUP_COUNT
} ParamGroup;

typedef enum {
    INIT_NORMAL,    // N(0, std)
    INIT_ZERO,
    INIT_ONE,
    INIT_LOG_UNIFORM,  // log U(init_lo, init_hi] (A_log; docs/kda.md, "Layer parameters")
    INIT_DT_BIAS,      // softplus^-1(dt), dt = exp U(log init_lo, log init_hi) clamped >= 1e-4
                       // (dt_bias; docs/kda.md, "Layer parameters")
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
    double init_lo, init_hi;    // INIT_LOG_UNIFORM and INIT_DT_BIAS only
    int blocks;                 // logical matrices stacked along rows (fused q|k|v = 3); Muon
                                // orthogonalises each separately. 1 for ordinary tensors.
    int routed;                 // 1: stacked routed-expert weights, of which only top_k / E
                                // are active for a token (active-parameter counts, FLOPs)
    // this rank's part (params_shard): elements [local_lo, local_lo + local_numel) of the
    // full tensor, at local_offset in the parameter buffer; the whole tensor unless sharded
    size_t local_offset, local_numel, local_lo;
} ParamInfo;

typedef struct {
    ParamInfo *items;
    int count;
    size_t total;               // elements of the full layout (host arrays): every tensor whole, each at a
                                // multiple of PARAM_ALIGN (the gaps count; params_count counts tensors)
    size_t local_total;         // elements in this rank's parameter buffer (== total unless sharded)
    int ep_size, ep_rank;       // routed tensors split over ep_size ranks, this rank's part
                                // ep_rank (1, 0: unsharded)
} ParamTable;

// Indices into the table of each module's tensors; -1 where the config has no such tensor.
typedef struct {
    int up_w, up_b;        // (H,C) for GELU, (2H,C) [gate | up] for GLU
    int down_w, down_b;    // (C,H)
} MlpParams;
typedef struct {
    int w, b;              // b = -1 without a shift (rmsnorm, or bias = false)
} NormParams;

// MoE (docs/hybrid.md, "MoE channel mixer"): router, the selection bias (GROUP_STATE), routed
// experts stacked by expert (w13 (E*2m, De) = per expert [W1_e; W3_e], w2 (E*De, m)), the
// shared MLP (-1 without), the latent projections and norm (-1 for variant A; De = l with
// them, d without).
typedef struct {
    int router_w, router_bias;
    int w13, w2;
    int shared_up, shared_down;
    int latent_down, latent_norm, latent_up;
} MoeParams;
// One Block AttnRes op (docs/hybrid.md, "Block AttnRes layer algorithm"): pseudo-query w
// and key-norm weight gamma; -1 when unused.
typedef struct {
    int query, norm;
} AttnResParams;
// One block: x + mixer(norm1(x)), then + channel(norm2(x)).
typedef struct {
    NormParams norm1, norm2;
    void *mixer;           // the token mixer's tensor indices (its MixerOps.params_size, model/mixer.h)
    MlpParams mlp;         // the dense channel mixer
    int moe_layer;         // 1: the channel mixer is MoE (moe_experts > 0, layer >= dense_first)
    MoeParams moe;
    AttnResParams ar_attn, ar_ffn;  // the AttnRes ops before the mixer and the channel mixer
} BlockParams;

typedef struct {
    int tok_embed, pos_embed;   // pos_embed -1 without learned positions
    int lm_head;                // the tok_embed index when tied
    NormParams normf;
    AttnResParams ar_out;       // the final AttnRes before normf (-1 without AttnRes)
    int n_layer;
    BlockParams *blocks;        // n_layer entries
    int *block_first;           // table index of block l's first tensor; [n_layer]: the first
                                // tensor after the blocks (== count when there is none)
} ModelParams;

// Appends a tensor to the table and returns its index (the modules build with this).
int params_add(ParamTable *t, ParamGroup group, InitRule init, double std, int ndim, const int *shape,
               const char *fmt, ...) __attribute__((format(printf, 7, 8)));
// Shorthands: a 2-D weight (out, in) in GROUP_MATRIX with N(0, std); a vector.
int params_matrix(ParamTable *t, double std, int out, int in, const char *fmt, int layer);
int params_vector(ParamTable *t, ParamGroup g, InitRule init, int n, const char *fmt, int layer);
// std of residual output projections: init_std / sqrt(2 * n_layer) (GPT-2)
double params_resid_std(const ModelConfig *c);

void params_build(const ModelConfig *c, ParamTable *t, ModelParams *mp);
void params_free(ParamTable *t, ModelParams *mp);

int params_find(const ParamTable *t, const char *name);  // -1 if absent
const char *param_group_name(ParamGroup g);
int param_group_decays(ParamGroup g);

// Fills a host float buffer of t->local_total elements (the local layout; == t->total
// unless sharded) following each tensor's init rule. Every element of every tensor is drawn
// in table order from one generator seeded with `seed`, and a rank keeps its part: a sharded
// rank gets exactly its slice of the unsharded values.
void params_init(const ParamTable *t, float *host, unsigned long seed);

// ---- expert-parallel sharding (docs/hybrid.md, "Expert parallelism"), model/params_shard.c
// Splits every routed tensor (stacked by expert along dim 0) over ep_size ranks: rank
// ep_rank keeps the rows of experts [ep_rank E/ep_size, (ep_rank+1) E/ep_size), and the local
// layout is laid out again in table order. ep_size = 1 makes the local layout the full one.
// Dies unless ep_size divides each routed tensor's first dimension.
void params_shard(ParamTable *t, int ep_size, int ep_rank);
int params_sharded(const ParamTable *t);                 // 1 if some tensor is split
// Rows and Muon blocks of tensor p's local part (shape[0] and blocks scaled by local/full).
int params_local_rows(const ParamInfo *p);
int params_local_blocks(const ParamInfo *p);
// A host fp32 array of the full layout (local 0: t->total elements, every tensor whole) or of this
// rank's buffer (local 1: t->local_total), zero-filled: the gaps between tensors (PARAM_ALIGN)
// stay zero wherever it is uploaded. Free with free().
float *params_host_array(const ParamTable *t, int local);
// Full layout (t->total) <-> local layout (t->local_total). to_full zeros the elements
// other ranks hold.
void params_full_to_local(const ParamTable *t, const float *full, float *local);
void params_local_to_full(const ParamTable *t, const float *local, float *full);
// Routed elements in the local layout (the expert weights this rank holds).
size_t params_local_routed(const ParamTable *t);

// Parameter count of the tensors that are not embeddings (as GPT-2 papers count them).
// GROUP_STATE tensors are never parameters.
size_t params_count_non_embedding(const ParamTable *t);
// All trained parameters (table.total less GROUP_STATE).
size_t params_count(const ParamTable *t);
// Parameters a token actually uses: routed-expert tensors count top_k / E of their
// elements ("active" in docs/hybrid.md, "Parameter counts and FLOPs per token");
// non_embedding leaves out GROUP_EMBED.
double params_count_active(const ModelConfig *c, const ParamTable *t, int non_embedding);

// Training FLOPs per token (forward + backward), docs/hybrid.md, "Parameter counts and FLOPs
// per token": 6 * (active non-embedding parameters) + 6 * padded_vocab * d_model (the lm_head)
// + the sequence-mixing term of each layer's token mixer (MixerOps.flops) for sequences of
// seq_len tokens.
double params_flops_per_token(const ModelConfig *c, const ParamTable *t, int seq_len);

// Prints the table, the totals and the FLOPs per token at seq_len.
void params_print(const ModelConfig *c, const ParamTable *t, int seq_len, FILE *f);

#endif
