// Learning-rate schedules (docs/background.md, "Learning-rate schedules"). `step` counts
// from 0; warmup is linear,
// lr * (step + 1) / warmup_steps, then:
//   cosine:   lr_min + (lr - lr_min) * (1 + cos(pi * p)) / 2
//   linear:   lr - (lr - lr_min) * p
//   constant: lr
//   wsd:      lr until the last wsd_decay_frac of the steps, then
//             lr_min + (lr - lr_min) * (1 - sqrt(q)), q the fraction of the decay done
// with p = (step - warmup) / (steps - warmup) and lr_min = lr * final_lr_frac.
#ifndef HYBRID_SCHEDULE_H
#define HYBRID_SCHEDULE_H

#include "optim/optim_config.h"

double lr_at_step(const OptimConfig *c, int step);

#endif
