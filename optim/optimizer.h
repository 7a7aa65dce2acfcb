// The optimizer step over the whole parameter table: global gradient norm,
// clipping, then per tensor AdamW or Muon (optimizer = muon puts the 2-D hidden
// matrices on Muon; embeddings, lm_head, norms, biases and the MoE router stay on
// AdamW), each with its group's learning rate and weight decay. GROUP_STATE tensors
// (the MoE selection bias) are not trained. State lives in backend memory, fp32,
// mirroring the parameter buffer: m and v for AdamW, m as Muon's momentum. On a
// backend that keeps_master (CUDA: bf16 parameters) the optimizer also holds the fp32
// master weights: every step updates them and rounds them into the parameters, and
// checkpoints store them (optimizer_get_weights / optimizer_set_weights), so a resumed
// run continues bit for bit.
#ifndef HYBRID_OPTIMIZER_H
#define HYBRID_OPTIMIZER_H

#include "model/model.h"
#include "optim/optim_config.h"
#include "model/ops/optim/muon.h"

//
// Distributed runs (dist/grad_sync.c; docs/distributed.md, "What each step does"): with
// ZeRO-1 a rank keeps m, v and
// the master weights only for its window [lo, hi) of the (padded) parameter buffer and
// updates only the AdamW elements inside it, reading the reduced gradients from
// grad_shard; with Muon each hidden matrix tensor has one owner rank that orthogonalises
// and updates it (the others skip it), balanced by the cost of its Newton-Schulz. The
// parameters are made equal again afterwards (grad_sync_params). Checkpoints gather the
// state: every rank fills what it owns and zeros elsewhere, rank 0 sums.
typedef struct {
    float *m, *v;     // backend memory: the window [lo, hi) of the parameter buffer
    size_t n;         // table.total
    size_t lo, hi;    // this rank's window: [0, n) unless ZeRO-1
    int rank, world, zero;
    int *owner;       // per table tensor: the rank that updates it (Muon matrices; -1: by window)
    real *grad_shard; // ZeRO-1: the reduced gradients of the window (set by grad_sync), else NULL
    int t;            // steps taken (bias correction uses t + 1 for the next)
    real *work;       // Muon's Newton-Schulz workspace (NULL for AdamW)
    float *master;    // fp32 master weights of the window (backend memory) when the backend keeps_master, else NULL
    int master_ready; // master holds the current weights (set from the params at the first step if not)
    OptimConfig cfg;  // the optimizer's keys (lr, betas, groups, Muon)
} Optimizer;

// One process: the whole buffer, under the optimizer config oc (copied).
void optimizer_create(Optimizer *o, const Model *model, const OptimConfig *oc);
// Rank `rank` of `world`; zero: ZeRO-1 windows (model_buffer_elems must be a multiple of world).
void optimizer_create_sharded(Optimizer *o, const Model *model, const OptimConfig *oc, int rank, int world, int zero);
// Where the master weight of elements [offset, offset + count) lives on this rank (NULL
// without master weights or when the range is outside the window; dies if it straddles).
float *optimizer_master_of(const Optimizer *o, size_t offset, size_t count);
void optimizer_destroy(Optimizer *o, const Model *model);
// Global L2 norm of the gradients.
double grad_global_norm(const Model *model);
// Does tensor p go to Muon under config c?
int optimizer_uses_muon(const OptimConfig *c, const ParamInfo *p);
// The Muon rule of c's muon_scale: its update scale and its momentum form (muon.h).
MuonScaleRule optimizer_muon_rule(const OptimConfig *c);
// Peak learning rate and weight decay of a group under config c.
double group_peak_lr(const OptimConfig *c, ParamGroup g);
double group_weight_decay(const OptimConfig *c, ParamGroup g);
// One step with the schedule's learning rate lr (for the base `lr`; each group scales
// it by its own peak / lr): clips to c->grad_clip (if > 0) using grad_norm, then updates.
void optimizer_step(Optimizer *o, Model *model, double lr, double grad_norm);
// Host copies of the moments (checkpoints), and restore. With several ranks each rank
// fills the elements it owns and zeros the rest (sum them onto one rank for the whole);
// the set functions take whole buffers and keep the window.
void optimizer_get_state(const Optimizer *o, const Model *model, float *m, float *v);
void optimizer_set_state(Optimizer *o, const Model *model, const float *m, const float *v, int t);
// The fp32 weights a checkpoint stores: the master copy when the backend keeps one,
// else the parameters. host: table.total floats.
void optimizer_get_weights(const Optimizer *o, const Model *model, float *host);
// Sets the parameters from fp32 weights and, when the backend keeps a master copy,
// the master to exactly these values (resume). host: table.total floats.
void optimizer_set_weights(Optimizer *o, Model *model, const float *host);

#endif
