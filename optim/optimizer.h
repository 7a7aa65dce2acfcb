// The optimizer step over the whole parameter table: global gradient norm,
// clipping, and AdamW per tensor with the weight decay of its group.
// State (moments) lives in backend memory, fp32, mirroring the parameter buffer.
#ifndef HYBRID_OPTIMIZER_H
#define HYBRID_OPTIMIZER_H

#include "model/model.h"

typedef struct {
    float *m, *v;     // backend memory, table.total elements each
    size_t n;
    int t;            // steps taken (bias correction uses t + 1 for the next)
} Optimizer;

void optimizer_create(Optimizer *o, const Model *model);
void optimizer_destroy(Optimizer *o, const Model *model);
// Global L2 norm of the gradients.
double grad_global_norm(const Model *model);
// One step at learning rate lr: clips to c->grad_clip (if > 0) using grad_norm, then
// updates every tensor. Returns nothing; the caller logs grad_norm.
void optimizer_step(Optimizer *o, Model *model, double lr, double grad_norm);
// Host copies of the moments (checkpoints), and restore.
void optimizer_get_state(const Optimizer *o, const Model *model, float *m, float *v);
void optimizer_set_state(Optimizer *o, const Model *model, const float *m, const float *v, int t);

#endif
