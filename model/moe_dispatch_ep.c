// Expert-parallel token exchange (moe_dispatch_ep.h; docs/hybrid.md, "Expert-parallel
// exchange") and the buffers it needs (model_set_expert_parallel, model.h).
#include "moe_dispatch_ep.h"

#include <stdlib.h>

#include "base/carve.h"
#include "base/comm.h"
#include "model.h"
#include "base/util.h"

// ---- the exchange ----

// elements of the current width: send counts/displs, then receive counts/displs
static void ep_elems(MoeEp *ep, int width) {
    for (int q = 0; q < ep->P; q++) {
        ep->elems[q] = ep->send_rows[q] * (size_t)width;
        ep->elems[ep->P + q] = ep->send_displs[q] * (size_t)width;
        ep->elems[2 * ep->P + q] = ep->recv_rows[q] * (size_t)width;
        ep->elems[3 * ep->P + q] = ep->recv_displs[q] * (size_t)width;
    }
}

void ep_plan(const Model *m, MoeEp *ep, const int *offsets, int E) {
    const Backend *be = m->be;
    Comm *comm = m->comm;
    const int P = ep->P, El = ep->El;
    int off[E + 1], cnt[E];
    be->copy_to_host(off, offsets, sizeof(int) * (size_t)(E + 1));
    for (int e = 0; e < E; e++) cnt[e] = off[e + 1] - off[e];
    // count exchange: peer q gets the El counts of its experts, C_in[q][e] comes back
    size_t *n = ep->elems;
    for (int q = 0; q < P; q++) n[q] = n[2 * P + q] = (size_t)El, n[P + q] = n[3 * P + q] = (size_t)q * El;
    be->copy_from_host(ep->dev_counts, cnt, sizeof(int) * (size_t)E);
    comm->alltoallv(comm, ep->dev_counts, n, n + P, ep->dev_cin, n + 2 * P, n + 3 * P, DT_INT, COMM_EP);
    be->copy_to_host(ep->cin, ep->dev_cin, sizeof(int) * (size_t)E);
    // rows each way; the sender's rows for q are contiguous (xp is grouped by expert)
    size_t at = 0;
    for (int q = 0; q < P; q++) {
        ep->send_displs[q] = (size_t)off[q * El];
        ep->send_rows[q] = (size_t)(off[(q + 1) * El] - off[q * El]);
        ep->recv_displs[q] = at;
        ep->recv_rows[q] = 0;
        for (int e = 0; e < El; e++) ep->recv_rows[q] += (size_t)ep->cin[q * El + e];
        at += ep->recv_rows[q];
    }
    if (at > (size_t)ep->rows_max)
        die("expert parallel: EP rank %d receives %zu rows, more than the %d its buffers hold (every rank of the "
            "group must build its model for the same batch size and sequence length)",
            ep->rank, at, ep->rows_max);
    ep->recv_total = (int)at;
    // the owner's expert-major layout (e0: q0 q1 ..)(e1: ..) and both permutations
    ep->host_offsets[0] = 0;
    for (int e = 0; e < El; e++) {
        int rows = 0;
        for (int q = 0; q < P; q++) rows += ep->cin[q * El + e];
        ep->host_offsets[e + 1] = ep->host_offsets[e] + rows;
    }
    int cursor[El];
    for (int e = 0; e < El; e++) cursor[e] = ep->host_offsets[e];
    for (int q = 0, j = 0; q < P; q++)
        for (int e = 0; e < El; e++)
            for (int i = 0; i < ep->cin[q * El + e]; i++, j++) {
                ep->to_expert[cursor[e]] = j;
                ep->to_source[j] = cursor[e]++;
            }
    be->copy_from_host(ep->offsets, ep->host_offsets, sizeof(int) * (size_t)(El + 1));
    be->copy_from_host(ep->perm_e, ep->to_expert, sizeof(int) * at);
    be->copy_from_host(ep->perm_s, ep->to_source, sizeof(int) * at);
}

void ep_dispatch(const Model *m, MoeEp *ep, real *dst, const real *src, int width) {
    const int P = ep->P;
    ep_elems(ep, width);
    const size_t *n = ep->elems;
    m->comm->alltoallv(m->comm, src, n, n + P, ep->work, n + 2 * P, n + 3 * P, DT_REAL, COMM_EP);
    m->be->moe->moe_gather_forward(dst, ep->work, ep->perm_e, ep->recv_total, 1, width);
}

void ep_combine(const Model *m, MoeEp *ep, real *dst, const real *src, int width) {
    const int P = ep->P;
    ep_elems(ep, width);
    const size_t *n = ep->elems;
    m->be->moe->moe_gather_forward(ep->work, src, ep->perm_s, ep->recv_total, 1, width);
    m->comm->alltoallv(m->comm, ep->work, n + 2 * P, n + 3 * P, dst, n, n + P, DT_REAL, COMM_EP);
}

// ---- buffers ----

// Backend memory of every MoE layer's exchange (cv: per layer; scratch: shared, each
// layer starting at the same offset). Two passes, as model.c's layout.
static void ep_layout(Model *m, Carver *cv, Carver *scratch) {
    const ModelConfig *c = &m->cfg;
    const int P = m->ep_size, E = c->moe_experts, El = E / P, K = c->moe_top_k, M = c->moe_hidden;
    const int De = c->moe_latent_dim ? c->moe_latent_dim : c->d_model;
    // dropless worst case: every source sends each of its N tokens to at most min(K, El)
    // of this rank's experts (a token's K experts are distinct)
    const size_t R = (size_t)P * m->max_B * m->max_T * (size_t)(K < El ? K : El);
    if (R > (size_t)1 << 30) die("expert parallel: %zu receive rows per layer is more than this build supports", R);
    size_t scratch_used = 0;
    for (int l = 0; l < c->n_layer; l++) {
        if (!m->mp.blocks[l].moe_layer) continue;
        MoeEp *ep = m->acts.blocks[l].moe.ep;
        Carver s = {scratch->base, 0, scratch->elem, scratch->stat};
        ep->rows_max = (int)R;
        ep->dev_counts = carve_bytes(cv, sizeof(int) * (size_t)E);
        ep->dev_cin = carve_bytes(cv, sizeof(int) * (size_t)E);
        ep->offsets = carve_bytes(cv, sizeof(int) * (size_t)(El + 1));
        ep->perm_e = carve_bytes(cv, sizeof(int) * R);
        ep->perm_s = carve_bytes(cv, sizeof(int) * R);
        ep->xe = carve(cv, R * De);
        ep->he = carve(cv, R * 2 * M);
        ep->ae = carve(cv, R * M);
        ep->work = carve(&s, R * De);
        ep->ye = carve(&s, R * De);
        ep->dxe = carve(&s, R * De);
        ep->dhe = carve(&s, R * 2 * M);
        ep->dae = carve(&s, R * M);
        if (s.used > scratch_used) scratch_used = s.used;
    }
    scratch->used = scratch_used;
}

void model_release_expert_parallel(Model *m) {
    for (int l = 0; m->acts.blocks && l < m->cfg.n_layer; l++) {
        MoeEp *ep = m->acts.blocks[l].moe.ep;
        if (!ep) continue;
        free(ep->send_rows);
        free(ep->cin);
        free(ep->to_expert);
        free(ep);
        m->acts.blocks[l].moe.ep = NULL;
    }
    if (m->ep_memory) m->be->free(m->ep_memory);
    if (m->ep_scratch_memory) m->be->free(m->ep_scratch_memory);
    m->ep_memory = m->ep_scratch_memory = NULL;
}

void model_check_expert_parallel(const ModelConfig *c, int ep_size) {
    if (ep_size < 1) die("expert parallel: ep_size = %d must be at least 1", ep_size);
    if (c->moe_experts > 0 && c->moe_experts % ep_size)
        die("expert parallel: ep_size = %d does not divide moe_experts = %d (each EP rank owns moe_experts / ep_size "
            "consecutive experts)",
            ep_size, c->moe_experts);
}

// Keeps only this rank's experts (docs/hybrid.md, "Expert parallelism"): the table's local
// layout becomes the sharded one, and the parameters (and gradients) move into smaller
// buffers, keeping their values.
static void shard_experts(Model *m, int ep_rank) {
    if (m->table.ep_size == m->ep_size) return;  // already sharded this way
    const Backend *be = m->be;
    const size_t es = be->elem_size, gs = be->grad_size, n = m->table.local_total;  // unsharded: the full layout
    char *old = xmalloc(n * (es + gs));
    be->copy_to_host(old, m->params, n * es);  // raw elements: no rounding in any build
    be->copy_to_host(old + n * es, m->grads, n * gs);
    params_shard(&m->table, m->ep_size, ep_rank);
    model_alloc_buffers(m);
    for (int i = 0; i < m->table.count; i++) {
        const ParamInfo *p = &m->table.items[i];
        const size_t from = p->offset + p->local_lo;
        be->copy_from_host(model_tensor(m, m->params, i), old + from * es, p->local_numel * es);
        be->copy_from_host(model_grad(m, i), old + n * es + from * gs, p->local_numel * gs);
    }
    free(old);
}

void model_set_expert_parallel(Model *m, Comm *comm, int ep_size) {
    model_check_expert_parallel(&m->cfg, ep_size);
    if (ep_size > 1 && !comm) die("expert parallel: ep_size = %d needs a Comm (comm_mpi_create / comm_nccl_create)", ep_size);
    if (ep_size > 1 && comm->group_size(comm, COMM_EP) != ep_size)
        die("expert parallel: ep_size = %d, but the runtime's expert-parallel group has %d ranks (call dist_set_ep(%d) "
            "first)",
            ep_size, comm->group_size(comm, COMM_EP), ep_size);
    if (m->table.ep_size > 1 && ep_size != m->table.ep_size)
        die("expert parallel: the expert weights are already sharded over %d ranks; ep_size = %d would need the other "
            "ranks' experts (build a new model and load the full weights into it)",
            m->table.ep_size, ep_size);
    model_release_expert_parallel(m);
    if (comm) m->comm = comm;
    m->ep_size = ep_size;
    if (ep_size == 1 || !model_has_moe(m)) return;
    shard_experts(m, comm->group_rank(comm, COMM_EP));
    const int P = ep_size, E = m->cfg.moe_experts, El = E / P;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (!m->mp.blocks[l].moe_layer) continue;
        MoeEp *ep = xcalloc(1, sizeof *ep);
        ep->P = P;
        ep->rank = comm->group_rank(comm, COMM_EP);
        ep->El = El;
        ep->send_rows = xcalloc(8 * (size_t)P, sizeof(size_t));
        ep->send_displs = ep->send_rows + P;
        ep->recv_rows = ep->send_rows + 2 * P;
        ep->recv_displs = ep->send_rows + 3 * P;
        ep->elems = ep->send_rows + 4 * P;
        ep->cin = xcalloc((size_t)E + El + 1, sizeof(int));
        ep->host_offsets = ep->cin + E;
        m->acts.blocks[l].moe.ep = ep;
    }
    const Backend *be = m->be;
    Carver cv = {NULL, 0, be->elem_size, be->stat_size}, scratch = cv;
    ep_layout(m, &cv, &scratch);
    m->ep_memory = be->alloc(cv.used);
    m->ep_scratch_memory = be->alloc(scratch.used);
    Carver cv2 = {m->ep_memory, 0, be->elem_size, be->stat_size};
    Carver scratch2 = {m->ep_scratch_memory, 0, be->elem_size, be->stat_size};
    ep_layout(m, &cv2, &scratch2);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        MoeEp *ep = m->acts.blocks[l].moe.ep;
        if (!ep) continue;
        ep->to_expert = xcalloc(2 * (size_t)ep->rows_max, sizeof(int));
        ep->to_source = ep->to_expert + ep->rows_max;
    }
}
