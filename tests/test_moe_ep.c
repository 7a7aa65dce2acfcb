// Expert parallelism (docs/hybrid.md, "Expert parallelism" and "Expert-parallel exchange";
// model/moe_dispatch_ep.c, model/params_shard.c), double build. Run under `mpirun -np 2` and
// `-np 4` (tests/moe_ep.sh); for every EP size that divides the world (ep 2 on 2 ranks; ep 2 x
// dp 2 and ep 4 on 4 ranks) and tiny hybrid MoE configs (latent + shared expert, plain without
// shared expert, 8 experts top-3 SwiGLU), each rank runs its own tokens (ranks hold different
// numbers of rows) through two models with the same weights: a reference with every expert
// local (ep_size 1, unsharded) and one expert parallel, whose expert weights are sharded:
//  (a) the logits and the loss equal the reference;
//  (b) every non-expert gradient (router, shared expert, latent projections, attention,
//      embeddings: the embedding gradient is the model's input gradient) equals the
//      reference; a rank's expert gradients equal its experts' rows of the references'
//      gradients summed over the EP group; tokens really crossed ranks;
//  (m) memory: a rank's buffer holds exactly E / ep experts of every routed tensor (the rows
//      of its own experts, with the same values as the unsharded model), everything else
//      whole; model_init_params on the sharded model gives the same values as unsharded;
//  (c) a misconfigured ep_size (not dividing moe_experts; not the runtime's EP group size),
//      a sharded model run with ep_size 1 or cached, and resharding die with a clear message
//      (checked before MPI starts, so the forked child is safe);
//  (s) the sharded table itself (a world of one, every EP rank of ep 2 and 4): each rank's
//      init is its slice of the unsharded init, and full <-> local round-trips.
// Without a launcher (a world of one) it runs (c), (s) and the trivial ep_size 1 case.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "train/config.h"
#include "dist/comm.h"
#include "dist/dist.h"
#include "hybrid_test_util.h"
#include "model/moe_dispatch_ep.h"
#include "testing.h"

#define TOL 1e-12

static Comm *g_comm;
static double g_worst[3];  // logits + loss, non-expert gradients, expert gradients (summed)

static void fill_tokens(int *t, int n, int V, unsigned long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int)rng_below(&r, (uint64_t)V);
}

// max |a - b| / max |b| (the absolute difference when b is all zero)
static double rel_diff(const real *a, const real *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i]));
    return s > 0 ? d / s : d;
}

typedef struct {
    double loss;
    real *logits, *grads;
} Run;

static Run run_once(Model *m, const int *in, const int *tg, int B, int T) {
    Run r;
    const size_t nl = (size_t)B * T * m->cfg.padded_vocab_size;
    model_zero_grad(m);
    r.loss = model_forward(m, in, tg, B, T);
    r.logits = xmalloc(sizeof(real) * nl);
    memcpy(r.logits, model_logits(m, 0, B * T), sizeof(real) * nl);
    model_backward(m, 1.0f);
    r.grads = xmalloc(sizeof(real) * m->table.local_total);
    memcpy(r.grads, m->grads, sizeof(real) * m->table.local_total);
    return r;
}

// (m): the sharded layout of m against the unsharded ref with the same weights.
static void check_memory(const char *label, const Model *m, const Model *ref, int ep) {
    const int E = m->cfg.moe_experts;
    size_t routed_full = 0, routed_local = 0, wrong = 0;
    for (int i = 0; i < m->table.count; i++) {
        const ParamInfo *p = &m->table.items[i], *q = &ref->table.items[i];
        const size_t want = p->routed ? p->numel / (size_t)ep : p->numel;
        const size_t lo = p->routed ? (size_t)g_dist.ep_rank * want : 0;
        CHECK(p->local_numel == want && p->local_lo == lo && p->numel == q->numel,
              "%s ep %d: %s holds %zu elements from %zu, want %zu from %zu (rank %d)", label, ep, p->name, p->local_numel,
              p->local_lo, want, lo, g_dist.rank);
        if (p->routed) routed_full += p->numel, routed_local += p->local_numel;
        const real *a = model_tensor(m, m->params, i), *b = ref->params + q->offset + p->local_lo;
        for (size_t j = 0; j < p->local_numel; j++) wrong += a[j] != b[j];
    }
    CHECK(routed_full > 0 && routed_local * (size_t)ep == routed_full && params_local_routed(&m->table) == routed_local,
          "%s ep %d: rank %d holds %zu of %zu routed-expert elements, not 1/%d", label, ep, g_dist.rank, routed_local,
          routed_full, ep);
    // the local layout: every tensor's own part, each at a multiple of PARAM_ALIGN (model/params.h)
    size_t want_elems = 0;
    for (int i = 0; i < m->table.count; i++) want_elems = params_align_up(want_elems) + m->table.items[i].local_numel;
    want_elems = (want_elems + m->buffer_multiple - 1) / m->buffer_multiple * m->buffer_multiple;
    CHECK(model_buffer_elems(m) == want_elems && want_elems < ref->table.total,
          "%s ep %d: the parameter buffer has %zu elements, want %zu (the unsharded one has %zu)", label, ep,
          model_buffer_elems(m), want_elems, ref->table.total);
    CHECK(wrong == 0, "%s ep %d: %zu sharded weights differ from the unsharded model's (rank %d)", label, ep, wrong,
          g_dist.rank);
    CHECK(E % ep == 0 && m->acts.blocks[m->cfg.n_layer - 1].moe.ep->El == E / ep, "%s ep %d: experts per rank", label, ep);
    // init on the sharded model = this rank's slice of the unsharded init
    Model a, b;
    model_create(&a, &m->cfg, backend_cpu(), 1, 2);
    model_create(&b, &m->cfg, backend_cpu(), 1, 2);
    model_set_expert_parallel(&a, g_comm, ep);
    model_init_params(&a, 11);
    model_init_params(&b, 11);
    wrong = 0;
    for (int i = 0; i < a.table.count; i++) {
        const ParamInfo *p = &a.table.items[i];
        const real *x = model_tensor(&a, a.params, i), *y = b.params + p->offset + p->local_lo;
        for (size_t j = 0; j < p->local_numel; j++) wrong += x[j] != y[j];
    }
    CHECK(wrong == 0, "%s ep %d: model_init_params on the sharded model differs from the unsharded init in %zu "
          "elements (rank %d)", label, ep, wrong, g_dist.rank);
    model_destroy(&a);
    model_destroy(&b);
}

static void check_case(const char *label, Config c, int ep, int disable_expert0) {
    dist_set_ep(ep);
    const int maxB = 2, T = 5, B = g_dist.rank % 2 ? 1 : 2;  // odd ranks hold fewer rows
    Model m, mref;
    for (int k = 0; k < 2; k++) {
        Model *x = k ? &m : &mref;
        model_create(x, &c.model, backend_cpu(), maxB, T);
        tiny_hybrid_params(x, 3, 0.3);  // the same parameters on every rank
        if (disable_expert0) {          // no token of any rank picks expert 0 in the last layer
            int l = c.model.n_layer - 1;
            model_tensor(x, x->params, x->mp.blocks[l].moe.router_bias)[0] = -10;
        }
    }
    model_set_expert_parallel(&m, g_comm, ep);  // keeps this rank's experts only
    check_memory(label, &m, &mref, ep);
    int in[10], tg[10];
    fill_tokens(in, B * T, c.model.vocab_size, 100 + g_dist.rank);
    fill_tokens(tg, B * T, c.model.vocab_size, 200 + g_dist.rank);

    Run ref = run_once(&mref, in, tg, B, T);  // this rank's tokens, every expert local
    Run par = run_once(&m, in, tg, B, T);

    char what[160];
    // (a) forward
    double e_logits = rel_diff(par.logits, ref.logits, (size_t)B * T * c.model.padded_vocab_size);
    double e_loss = rel_err(par.loss, ref.loss, 1e-300);
    snprintf(what, sizeof what, "%s ep %d: logits / loss vs EP off", label, ep);
    CHECK(e_logits <= TOL && e_loss <= TOL, "%s: %.3e / %.3e (rank %d)", what, e_logits, e_loss, g_dist.rank);
    g_worst[0] = fmax(g_worst[0], fmax(e_logits, e_loss));
    // (b) gradients: per tensor
    double e_dense = 0, e_expert = 0;
    for (int i = 0; i < m.table.count; i++) {
        const ParamInfo *pi = &m.table.items[i];
        real *gp = par.grads + pi->local_offset, *gr = ref.grads + pi->offset;
        if (!pi->routed) {
            double e = rel_diff(gp, gr, pi->numel);
            CHECK(e <= TOL, "%s ep %d: gradient of %s differs from EP off by %.3e (rank %d)", label, ep, pi->name, e,
                  g_dist.rank);
            e_dense = fmax(e_dense, e);
            continue;
        }
        // this rank's experts' rows of the references summed over the group (the tensor is
        // stacked by expert)
        g_comm->allreduce_sum(g_comm, gr, pi->numel, DT_REAL, COMM_EP);
        double e = rel_diff(gp, gr + pi->local_lo, pi->local_numel);
        CHECK(e <= TOL, "%s ep %d: EP-group sum of the gradient of %s differs from the references' sum by %.3e (rank %d)",
              label, ep, pi->name, e, g_dist.rank);
        e_expert = fmax(e_expert, e);
    }
    g_worst[1] = fmax(g_worst[1], e_dense);
    g_worst[2] = fmax(g_worst[2], e_expert);
    // the exchange was not vacuous: rows went to other ranks, and (disable_expert0) an
    // owner had an expert without rows
    double crossed = 0;
    int empty_expert = 0;
    for (int l = 0; l < c.model.n_layer; l++) {
        const MoeEp *x = m.acts.blocks[l].moe.ep;
        if (!m.mp.blocks[l].moe_layer) continue;
        CHECK(x && m.acts.blocks[l].moe.ep_last == ep, "%s ep %d: layer %d did not run expert parallel", label, ep, l);
        if (!x) continue;
        for (int q = 0; q < ep; q++)
            if (q != x->rank) crossed += (double)x->send_rows[q];
        for (int e = 0; e < x->El; e++) empty_expert |= x->host_offsets[e + 1] == x->host_offsets[e];
    }
    dist_allreduce_sum_double(&crossed, 1);
    dist_allreduce_max_int(&empty_expert, 1);
    CHECK(crossed > 0, "%s ep %d: no row went to another rank", label, ep);
    if (disable_expert0) CHECK(empty_expert, "%s ep %d: expert 0 was expected to get no rows", label, ep);
    if (dist_is_root())
        printf("  %-34s ep %d x dp %d: %5.0f rows crossed ranks; max rel diff logits/loss %.2e, dense grads %.2e, "
               "expert grads (group sum) %.2e\n",
               label, ep, g_dist.world / ep, crossed, fmax(e_logits, e_loss), e_dense, e_expert);
    free(ref.logits), free(ref.grads), free(par.logits), free(par.grads);
    model_destroy(&m);
    model_destroy(&mref);
}

// ---- (c) misconfiguration ----
static Config g_death_cfg;
static void die_check_3(void *arg) {
    (void)arg;
    model_check_expert_parallel(&g_death_cfg.model, 3);
}
static void die_set_3(void *arg) {
    Model m;
    model_create(&m, &g_death_cfg.model, backend_cpu(), 1, 4);
    model_set_expert_parallel(&m, arg, 3);
}
static void die_group(void *arg) {
    Model m;
    model_create(&m, &g_death_cfg.model, backend_cpu(), 1, 4);
    model_set_expert_parallel(&m, arg, 2);  // a world of one: the EP group has 1 rank
}
static void die_no_call(void *arg) {
    (void)arg;
    Model m;
    model_create(&m, &g_death_cfg.model, backend_cpu(), 1, 4);
    tiny_hybrid_params(&m, 3, 0.3);
    m.ep_size = 2;  // without model_set_expert_parallel
    int tok[4] = {1, 2, 3, 4};
    model_forward(&m, tok, NULL, 1, 4);
}
// a model with the experts of EP rank 0 of 2 only, as model_set_expert_parallel leaves it
static void shard_by_hand(Model *m) {
    model_create(m, &g_death_cfg.model, backend_cpu(), 1, 4);
    params_shard(&m->table, 2, 0);
    model_alloc_buffers(m);
    tiny_hybrid_params(m, 3, 0.3);
}
static void die_sharded_local(void *arg) {
    (void)arg;
    Model m;
    shard_by_hand(&m);
    m.ep_size = 1;  // "EP off" on a rank that lacks half the experts
    int tok[4] = {1, 2, 3, 4};
    model_forward(&m, tok, NULL, 1, 4);
}
static void die_sharded_cached(void *arg) {
    (void)arg;
    Model m;
    shard_by_hand(&m);
    m.ep_size = 2;
    model_cache_init(&m, 4);
    int tok[1] = {1};
    model_forward_cached(&m, tok, 1);
}
static void die_reshard(void *arg) {
    Model m;
    shard_by_hand(&m);
    model_set_expert_parallel(&m, arg, 1);
}
static void test_misconfigured(Comm *comm) {
    g_death_cfg = tiny_hybrid(NULL);  // 4 experts
    CHECK(expect_death(die_check_3, NULL, "ep 3 of 4 experts", "ep_size = 3 does not divide moe_experts = 4"),
          "model_check_expert_parallel accepted ep_size 3 for 4 experts");
    CHECK(expect_death(die_set_3, comm, "set ep 3 of 4 experts", "ep_size = 3 does not divide moe_experts = 4"),
          "model_set_expert_parallel accepted ep_size 3 for 4 experts");
    CHECK(expect_death(die_group, comm, "ep 2 in a world of one", "expert-parallel group has 1 ranks", "dist_set_ep(2)"),
          "model_set_expert_parallel accepted an ep_size other than the runtime's EP group");
    CHECK(expect_death(die_no_call, NULL, "ep_size set by hand", "model_set_expert_parallel(m, comm, 2) was not called"),
          "a forward with m->ep_size = 2 and no buffers did not die");
    CHECK(expect_death(die_sharded_local, NULL, "sharded model run locally", "holds only its experts' weights",
                       "sharded over 2 ranks", "m->ep_size was changed"),
          "a forward with ep_size 1 on a sharded model did not die");
    CHECK(expect_death(die_sharded_cached, NULL, "sharded model, cached forward", "sharded over 2 ranks",
                       "the cached forward runs every expert locally"),
          "a cached forward on a sharded model did not die");
    CHECK(expect_death(die_reshard, comm, "unshard", "already sharded over 2 ranks; ep_size = 1"),
          "model_set_expert_parallel(1) on a sharded model did not die");
}

// ---- (s) the sharded table, every EP rank, without MPI ----
static void test_sharded_table(const char *label, const Config *c) {
    for (int ep = 2; ep <= 4; ep *= 2) {
        if (c->model.moe_experts % ep) continue;
        ParamTable t;
        ModelParams mp;
        params_build(&c->model, &t, &mp);
        const size_t total = t.total;
        float *full = xcalloc(total, sizeof(float)), *back = xcalloc(total, sizeof(float));  // (zero gaps between tensors)
        params_init(&t, full, 5);
        for (int r = 0; r < ep; r++) {
            params_shard(&t, ep, r);
            float *local = xcalloc(t.local_total, sizeof(float)), *want = xcalloc(t.local_total, sizeof(float));
            params_init(&t, local, 5);
            params_full_to_local(&t, full, want);
            CHECK(!memcmp(local, want, sizeof(float) * t.local_total),
                  "%s: EP rank %d of %d: the sharded init is not the slice of the unsharded one", label, r, ep);
            params_local_to_full(&t, local, back);
            size_t bad = 0, routed = 0;
            for (int i = 0; i < t.count; i++) {
                const ParamInfo *p = &t.items[i];
                for (size_t j = 0; j < p->numel; j++) {
                    const int mine = j >= p->local_lo && j < p->local_lo + p->local_numel;
                    bad += back[p->offset + j] != (mine ? full[p->offset + j] : 0.0f);
                }
                if (!p->routed) continue;
                routed++;
                bad += params_local_rows(p) * ep != p->shape[0] || params_local_blocks(p) * ep != p->blocks;
            }
            CHECK(bad == 0 && routed > 0 && params_sharded(&t) && t.total == total,
                  "%s: EP rank %d of %d: local_to_full / rows / blocks wrong in %zu places", label, r, ep, bad);
            free(local);
            free(want);
        }
        params_shard(&t, 1, 0);
        CHECK(!params_sharded(&t) && t.local_total == total, "%s: params_shard(1) did not restore the full layout",
              label);
        free(full);
        free(back);
        params_free(&t, &mp);
    }
}

int main(int argc, char **argv) {
    omp_set_num_threads(1);
    // the death tests fork, so they run before MPI starts (a world of one)
    Comm *local = comm_mpi_create(sizeof(real));
    test_misconfigured(local);
    local->destroy(local);

    dist_init(&argc, &argv);
    g_comm = comm_mpi_create(sizeof(real));
    struct {
        const char *label;
        Config c;
        int disable_expert0;
    } cases[] = {
        {"latent + shared, 4 experts top-2", tiny_hybrid(NULL), 1},
        {"plain, no shared, 4 experts top-2", tiny_hybrid("moe_latent_dim", "0", "moe_shared", "0", NULL), 0},
        {"plain + shared, 8 experts top-3", tiny_hybrid("moe_latent_dim", "0", "moe_experts", "8", "moe_top_k", "3",
                                                      "mlp", "swiglu", NULL), 0},
    };
    const int ncase = (int)(sizeof cases / sizeof cases[0]);
    if (g_dist.world == 1) {
        printf("  a world of one (%s): only ep_size 1; run under mpirun (tests/moe_ep.sh) for the expert-parallel "
               "checks\n",
               dist_mpi_available() ? "MPI built in" : "built without MPI");
        for (int i = 0; i < ncase; i++) {  // ep_size 1 is the plain local path: identical results
            Model m;
            model_create(&m, &cases[i].c.model, backend_cpu(), 2, 5);
            tiny_hybrid_params(&m, 3, 0.3);
            int in[10], tg[10];
            fill_tokens(in, 10, cases[i].c.model.vocab_size, 100);
            fill_tokens(tg, 10, cases[i].c.model.vocab_size, 200);
            Run a = run_once(&m, in, tg, 2, 5);
            model_set_expert_parallel(&m, g_comm, 1);
            Run b = run_once(&m, in, tg, 2, 5);
            CHECK(a.loss == b.loss && !memcmp(a.grads, b.grads, sizeof(real) * m.table.total),
                  "%s: ep_size 1 changed the results", cases[i].label);
            free(a.logits), free(a.grads), free(b.logits), free(b.grads);
            model_destroy(&m);
        }
    }
    if (g_dist.world == 1)
        for (int i = 0; i < ncase; i++) test_sharded_table(cases[i].label, &cases[i].c);
    for (int ep = 2; ep <= g_dist.world; ep *= 2) {
        if (g_dist.world % ep) continue;
        for (int i = 0; i < ncase; i++)
            if (cases[i].c.model.moe_experts % ep == 0) check_case(cases[i].label, cases[i].c, ep, cases[i].disable_expert0);
    }
    double worst[3] = {g_worst[0], g_worst[1], g_worst[2]};
    int failed = g_checks_failed;
    if (g_dist.world > 1) {  // the worst differences and any failure, over every rank
        for (int i = 0; i < 3; i++) {
            double v = worst[i];
            double *all = xmalloc(sizeof(double) * (size_t)g_dist.world);
            dist_allgather_bytes(&v, all, sizeof v);
            for (int r = 0; r < g_dist.world; r++) worst[i] = fmax(worst[i], all[r]);
            free(all);
        }
        dist_allreduce_max_int(&failed, 1);
        if (dist_is_root())
            printf("  %d ranks: worst rel diff logits/loss %.2e, dense grads %.2e, expert grads %.2e (tolerance %.0e)\n",
                   g_dist.world, worst[0], worst[1], worst[2], TOL);
    }
    g_comm->destroy(g_comm);
    dist_finalize();
    if (failed && !g_checks_failed) fprintf(stderr, "[rank %d] another rank failed\n", g_dist.rank);
    printf("%s [rank %d of %d]: %d checks passed, %d failed\n", __FILE__, g_dist.rank, g_dist.world, g_checks_passed,
           g_checks_failed);
    return failed ? 1 : 0;
}
