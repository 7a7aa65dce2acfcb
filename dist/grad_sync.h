// Data-parallel gradient reduction and parameter synchronisation (docs/distributed.md,
// "What each step does").
//
// Each rank's backward runs with loss_scale 1 / (accumulation steps * world), so the SUM
// over ranks of the gradients is the gradient of the global batch's mean loss: the same
// number a single process gets from the whole global batch, up to rounding.
//  - AdamW / Muon: an all-reduce in buckets of `bucket_mb`, launched from model_backward's
//    grads_ready hook as soon as a bucket's layers are final (on the GPU on NCCL's own
//    stream, overlapping the rest of the backward), on the last micro-batch of a step.
//  - ZeRO-1 (zero = true, AdamW): one reduce-scatter after the backward: each rank gets
//    the summed gradients of its window only, updates its window of the AdamW state,
//    and the parameters are all-gathered.
//  - Muon: each hidden matrix is updated by its owner rank (optim/optimizer.c) and
//    broadcast from there.
// A world of one does none of this (every call returns at once).
#ifndef HYBRID_GRAD_SYNC_H
#define HYBRID_GRAD_SYNC_H

#include "dist/comm.h"
#include "model/model.h"
#include "optim/optimizer.h"

typedef struct {
    Model *model;
    Optimizer *opt;
    Comm *comm;          // NULL: one process
    int world, rank, zero;
    size_t bucket_elems; // elements per all-reduce bucket
    size_t sent_lo;      // buckets launched so far cover [sent_lo, buffer end)
    int armed;           // the running backward is the step's last: reduce as grads become final
    int buckets;         // launched this step (reported by the tests and the docs)
    real *grad_shard;    // ZeRO-1: the reduced gradients of this rank's window
} GradSync;

// bucket_mb: the size of a reduction bucket (the bucket_mb key)
void grad_sync_create(GradSync *g, Model *m, Optimizer *opt, Comm *comm, double bucket_mb);
void grad_sync_destroy(GradSync *g);
// Before the backward of the step's last micro-batch.
void grad_sync_arm(GradSync *g);
// After that backward: the remaining buckets (or the ZeRO-1 reduce-scatter), then waits.
void grad_sync_finish(GradSync *g);
// The global gradient norm of the reduced gradients (every rank gets the same value).
double grad_sync_norm(GradSync *g);
// After optimizer_step (and model_moe_step): every rank gets the updated parameters.
void grad_sync_params(GradSync *g);
// The per-expert load counts of every MoE layer summed over the ranks, so the bias update
// (model_moe_step) sees the global batch.
void grad_sync_moe_counts(GradSync *g);

#endif
