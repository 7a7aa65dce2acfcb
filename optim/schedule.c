#include "schedule.h"

#include <math.h>

double lr_at_step(const OptimConfig *c, int step) {
    const double peak = c->lr, floor = c->lr * c->final_lr_frac;
    const int warm = c->warmup_steps, total = c->steps;
    if (step < warm) return peak * (double)(step + 1) / (double)warm;
    if (c->lr_schedule == SCHED_CONSTANT) return peak;
    if (c->lr_schedule == SCHED_WSD) {
        int decay_start = total - (int)lround(c->wsd_decay_frac * total);
        if (decay_start < warm) decay_start = warm;
        if (step < decay_start || decay_start >= total) return peak;
        double q = (double)(step - decay_start) / (double)(total - decay_start);
        return floor + (peak - floor) * (1.0 - sqrt(q));
    }
    double p = total > warm ? (double)(step - warm) / (double)(total - warm) : 1.0;
    if (p > 1) p = 1;
    if (c->lr_schedule == SCHED_COSINE) return floor + (peak - floor) * 0.5 * (1.0 + cos(M_PI * p));
    return peak - (peak - floor) * p;  // SCHED_LINEAR
}
