// Data-parallel gradient reduction and parameter synchronisation (grad_sync.h).
#include "grad_sync.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

// The collectives' type of a parameter gradient: the element type, or fp32 (the CUDA
// backend's gradients: bf16 elements, fp32 gradients).
static CommType grad_type(const Backend *be) {
    if (be->grad_size == be->elem_size) return DT_REAL;
    if (be->grad_size != sizeof(float))
        die("grad_sync: backend %s has %zu-byte gradients, which no collective sums", be->name, be->grad_size);
    return DT_FLOAT;
}

// Sums [lo, hi) of the gradient buffer: over the world, except the parts of sharded expert
// tensors, which only the ranks holding the same experts sum (docs/distributed.md, "Expert
// parallelism"). Every rank has the same layout, so all issue the same calls.
static void reduce_range(GradSync *g, size_t lo, size_t hi) {
    const Model *m = g->model;
    const Backend *be = m->be;
    const ParamTable *t = &m->table;
    const CommType dt = grad_type(be);
    if (!params_sharded(t)) {
        g->comm->allreduce_sum_async(g->comm, backend_grad_offset(be, m->grads, lo), hi - lo, dt, COMM_WORLD);
        return;
    }
    size_t at = lo;  // the start of the run of world-reduced elements not sent yet
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        size_t a = p->local_offset, b = a + p->local_numel;
        if (p->local_numel == p->numel || b <= lo || a >= hi) continue;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a > at)
            g->comm->allreduce_sum_async(g->comm, backend_grad_offset(be, m->grads, at), a - at, dt, COMM_WORLD);
        g->comm->allreduce_sum_async(g->comm, backend_grad_offset(be, m->grads, a), b - a, dt, COMM_EP_DP);
        at = b;
    }
    if (hi > at) g->comm->allreduce_sum_async(g->comm, backend_grad_offset(be, m->grads, at), hi - at, dt, COMM_WORLD);
}

static void launch(GradSync *g, size_t lo) {
    if (lo >= g->sent_lo) return;
    reduce_range(g, lo, g->sent_lo);
    g->sent_lo = lo;
    g->buckets++;
}

// model_backward's hook: the gradients from block `block` on are final.
static void on_grads_ready(Model *m, int block, void *ctx) {
    GradSync *g = ctx;
    if (!g->armed) return;
    size_t lo = block < 0 ? 0 : model_block_offset(m, block);
    if (block < 0 || g->sent_lo - lo >= g->bucket_elems) launch(g, lo);
}

void grad_sync_create(GradSync *g, Model *m, Optimizer *opt, Comm *comm, double bucket_mb) {
    memset(g, 0, sizeof *g);
    g->model = m;
    g->opt = opt;
    g->comm = comm;
    g->world = opt->world;
    g->rank = opt->rank;
    g->zero = opt->zero;
    size_t bytes = (size_t)(bucket_mb * 1024 * 1024);
    g->bucket_elems = bytes / m->be->grad_size;
    if (g->bucket_elems < 1) g->bucket_elems = 1;
    if (g->world == 1 || !comm) return;
    if (g->zero) {
        g->grad_shard = m->be->alloc((opt->hi - opt->lo) * m->be->grad_size);
        opt->grad_shard = g->grad_shard;
    } else {
        m->grads_ready = on_grads_ready;
        m->grads_ready_ctx = g;
    }
}

void grad_sync_destroy(GradSync *g) {
    if (g->grad_shard) g->model->be->free(g->grad_shard);
    if (g->model && g->model->grads_ready == on_grads_ready) g->model->grads_ready = NULL;
    memset(g, 0, sizeof *g);
}

void grad_sync_arm(GradSync *g) {
    g->armed = g->world > 1 && g->comm && !g->zero;
    g->sent_lo = model_buffer_elems(g->model);
    g->buckets = 0;
}

void grad_sync_finish(GradSync *g) {
    if (g->world == 1 || !g->comm) return;
    if (g->zero) {
        g->comm->reduce_scatter_sum(g->comm, g->model->grads, g->grad_shard, g->opt->hi - g->opt->lo,
                                    grad_type(g->model->be), COMM_WORLD);
        g->buckets = 1;
        return;
    }
    if (!g->armed) die("grad_sync_finish: the last backward was not armed (grad_sync_arm)");
    launch(g, 0);  // whatever the hook has not sent (it sends everything at block -1)
    g->comm->wait(g->comm);
    g->armed = 0;
}

// With sharded experts each expert's (reduced) gradient lives on its EP rank: the squares of
// the whole tensors count once on every rank, those of the sharded parts are summed over the
// EP group, so every expert counts exactly once. One reduction per run of tensors of one kind
// that follow each other in the buffer without a gap (a layer's routed experts, the tensors
// between two MoE layers), not one per tensor: each is a device round trip on CUDA.
static double sharded_norm(const Model *m) {
    const Backend *be = m->be;
    const ParamTable *t = &m->table;
    double ss[2] = {0, 0};  // whole tensors, this rank's expert parts
    for (int i = 0, j; i < t->count; i = j) {
        const int sharded = t->items[i].local_numel != t->items[i].numel;
        size_t end = t->items[i].local_offset + t->items[i].local_numel;
        for (j = i + 1; j < t->count && (t->items[j].local_numel != t->items[j].numel) == sharded &&
                        t->items[j].local_offset == end;
             j++)
            end += t->items[j].local_numel;
        ss[sharded] += be->core->sum_squares(model_grad(m, i), end - t->items[i].local_offset);
    }
    dist_allreduce_sum_double_ep(ss + 1, 1);
    return sqrt(ss[0] + ss[1]);
}

double grad_sync_norm(GradSync *g) {
    const Backend *be = g->model->be;
    if (params_sharded(&g->model->table)) return sharded_norm(g->model);
    if (!g->zero || g->world == 1 || !g->comm) return grad_global_norm(g->model);
    double ss = be->core->sum_squares(g->grad_shard, g->opt->hi - g->opt->lo);
    dist_allreduce_sum_double(&ss, 1);
    return sqrt(ss);
}

void grad_sync_params(GradSync *g) {
    if (g->world == 1 || !g->comm) return;
    const Backend *be = g->model->be;
    Optimizer *o = g->opt;
    if (g->zero) {  // every rank's window of updated parameters to every rank
        size_t shard = o->hi - o->lo;
        g->comm->allgather(g->comm, backend_offset(be, g->model->params, o->lo), g->model->params, shard, DT_REAL,
                           COMM_WORLD);
        return;
    }
    // Muon: each hidden matrix from the rank that updated it
    for (int i = 0; i < g->model->table.count; i++) {
        if (o->owner[i] < 0) continue;
        const ParamInfo *p = &g->model->table.items[i];
        g->comm->broadcast(g->comm, backend_offset(be, g->model->params, p->local_offset), p->local_numel, DT_REAL,
                           o->owner[i], COMM_WORLD);
    }
}

void grad_sync_moe_counts(GradSync *g) {
    if (g->world == 1 || !g->comm) return;
    Model *m = g->model;
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (m->mp.blocks[l].moe_layer)
            g->comm->allreduce_sum(g->comm, m->acts.blocks[l].moe.counts, (size_t)m->cfg.moe_experts, DT_LONG,
                                   COMM_WORLD);
}
