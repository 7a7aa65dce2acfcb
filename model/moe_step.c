// Once per optimizer step (docs/hybrid.md, "Aux-loss-free bias balancing"): the load
// statistics of the step's expert counts (accumulated by moe_backward over the step's training
// micro-batches), the aux-loss-free bias update b_e += gamma sign(mean c - c_e) (centred), and
// a fresh count.
// The bias is a GROUP_STATE tensor of the parameter table, so checkpoints carry it and a
// resumed run continues bit-exactly.
#include <math.h>
#include <stdlib.h>

#include "model.h"
#include "base/util.h"

int model_has_moe(const Model *m) {
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (m->mp.blocks[l].moe_layer) return 1;
    return 0;
}

void model_moe_step(Model *m, float *master, MoeStepStats *st) {
    const ModelConfig *c = &m->cfg;
    const int E = c->moe_experts;
    MoeStepStats s = {0, 0, 0, 0.0, 0.0};
    long *counts = xcalloc((size_t)(E > 0 ? E : 1), sizeof(long)), *zeros = xcalloc((size_t)(E > 0 ? E : 1), sizeof(long));
    for (int l = 0; l < c->n_layer; l++) {
        const BlockParams *p = &m->mp.blocks[l];
        if (!p->moe_layer) continue;
        MoeActs *a = &m->acts.blocks[l].moe;
        m->be->copy_to_host(counts, a->counts, sizeof(long) * (size_t)E);
        MoeLoadStats ls = moe_load_stats(counts, E);
        if (s.layers == 0 || ls.min < s.min) s.min = ls.min;
        if (s.layers == 0 || ls.max > s.max) s.max = ls.max;
        s.cv_mean += ls.cv;
        s.cv_max = fmax(s.cv_max, ls.cv);
        s.layers++;
        if (c->moe_bias_update_rate > 0)
            m->be->moe->moe_bias_update(model_tensor(m, m->params, p->moe.router_bias),
                                   master ? master + m->table.items[p->moe.router_bias].local_offset : NULL, a->counts, E,
                                   c->moe_bias_update_rate);
        m->be->copy_from_host(a->counts, zeros, sizeof(long) * (size_t)E);
    }
    if (s.layers) s.cv_mean /= s.layers;
    free(counts);
    free(zeros);
    if (st) *st = s;
}
