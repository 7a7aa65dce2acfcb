// MoE channel mixer (docs/hybrid.md, "MoE channel mixer"): sigmoid router with a
// selection-only bias, top-k weights renormalised and scaled (docs/hybrid.md, "Router
// forward"), dropless dispatch (docs/hybrid.md, "Dropless permutation and grouped expert
// FFN"), routed GLU experts (SwiGLU or SiTU, as `mlp` says), an always-on shared MLP, and
// optionally the K3 latent variant (variant (b) of docs/hybrid.md, "MoE layer variants").
// x is the normalised input (N, C); E experts, K = top_k, m = moe_hidden.
//   logits = x W_r^T;  sel, weights, scores = router(logits, bias)
//   A: z = x                       B: z = x W_down^T (N, l)
//   r = sum_j weights_j Expert_{sel_j}(z)       (expert width De = C or l)
//   A: routed = r                  B: routed = RMSNorm_{gamma_lat}(r) W_up^T
//   out = routed + Shared(x)       (Shared: a GLU MLP of width moe_shared * moe_shared_hidden)
// Backward per docs/hybrid.md, "MoE backward"; the router learns only through the weights
// (+ the optional balance loss of docs/hybrid.md, "Auxiliary balance losses"); the bias gets
// no gradient. The backward also counts the slots per expert for the once-per-step bias
// update (model_moe_step; docs/hybrid.md, "Aux-loss-free bias balancing").
//   Expert parallel (m->ep_size > 1; docs/hybrid.md, "Expert parallelism" and
// "Expert-parallel exchange"): routing, dispatch plan, gather and combine stay on the rank
// that owns the tokens; only the expert FFN moves: the sorted rows go to the EP ranks that
// own their experts and the outputs come back (moe_dispatch_ep.h). The rank holds only its
// own experts' weights and gradients (the table's routed tensors are sharded).
// The counts for the bias update are this rank's tokens (the trainer sums them over ranks).
#include "base/comm.h"
#include "model.h"
#include "model/ops/norm_glu/glu_mlp.h"
#include "moe_dispatch_ep.h"
#include "base/util.h"

typedef struct {
    int C, E, K, M, De, l, Ms;  // Ms: shared MLP width (0 = none)
} MoeDims;

static MoeDims dims(const ModelConfig *c) {
    MoeDims d = {c->d_model, c->moe_experts, c->moe_top_k, c->moe_hidden, c->d_model, c->moe_latent_dim,
                 c->moe_shared * c->moe_shared_hidden};
    if (d.l) d.De = d.l;
    return d;
}

void moe_params(const ModelConfig *c, ParamTable *t, int l, MoeParams *p) {
    MoeDims d = dims(c);
    const double s = c->init_std, so = params_resid_std(c);
    int rshape[2] = {d.E, d.C};
    p->router_w = params_add(t, GROUP_ROUTER, INIT_NORMAL, s, 2, rshape, "blocks.%d.moe.router.weight", l);
    p->router_bias = params_vector(t, GROUP_STATE, INIT_ZERO, d.E, "blocks.%d.moe.router.bias", l);
    if (d.l) p->latent_down = params_matrix(t, s, d.l, d.C, "blocks.%d.moe.latent_down.weight", l);
    // routed experts stacked by expert: Muon orthogonalises each W1_e, W3_e, W2_e on its own
    p->w13 = params_matrix(t, s, d.E * 2 * d.M, d.De, "blocks.%d.moe.experts.w13", l);
    t->items[p->w13].blocks = 2 * d.E;
    t->items[p->w13].routed = 1;
    p->w2 = params_matrix(t, d.l ? s : so, d.E * d.De, d.M, "blocks.%d.moe.experts.w2", l);
    t->items[p->w2].blocks = d.E;
    t->items[p->w2].routed = 1;
    if (d.l) {
        p->latent_norm = params_vector(t, GROUP_NORM, INIT_ONE, d.l, "blocks.%d.moe.latent_norm.weight", l);
        p->latent_up = params_matrix(t, so, d.C, d.l, "blocks.%d.moe.latent_up.weight", l);
    }
    if (d.Ms) {
        p->shared_up = params_matrix(t, s, 2 * d.Ms, d.C, "blocks.%d.moe.shared.up.weight", l);
        t->items[p->shared_up].blocks = 2;
        p->shared_down = params_matrix(t, so, d.C, d.Ms, "blocks.%d.moe.shared.down.weight", l);
    }
}

void moe_layout(const Model *m, Carver *cv, Carver *scratch, MoeActs *a) {
    MoeDims d = dims(&m->cfg);
    const size_t N = (size_t)m->max_B * m->max_T, NK = N * d.K;
    a->logits = carve(cv, N * d.E);
    a->scores = carve(cv, N * d.E);
    a->weights = carve(cv, NK);
    a->sel = carve_bytes(cv, NK * sizeof(int));
    a->perm = carve_bytes(cv, NK * sizeof(int));
    a->pos = carve_bytes(cv, NK * sizeof(int));
    a->offsets = carve_bytes(cv, (size_t)(d.E + 1) * sizeof(int));
    a->counts = carve_bytes(cv, (size_t)d.E * sizeof(long));
    if (d.l) a->z = carve(cv, N * d.l);
    a->xp = carve(cv, NK * d.De);
    a->hp = carve(cv, NK * 2 * d.M);
    a->ap = carve(cv, NK * d.M);
    a->yp = carve(cv, NK * d.De);
    if (d.l || !d.Ms) a->r = carve(cv, N * d.De);  // (variant A with shared experts combines into out)
    if (d.l) {
        a->r_n = carve(cv, N * d.l);
        a->rstd_r = carve_stat(cv, N);
        a->routed = carve(cv, N * d.C);
    }
    if (d.Ms) {
        a->hs = carve(cv, N * 2 * d.Ms);
        a->as = carve(cv, N * d.Ms);
        a->shared = carve(cv, N * d.C);
    }
    a->dyp = carve(scratch, NK * d.De);
    a->dweights = carve(scratch, NK);
    a->dxp = carve(scratch, NK * d.De);
    a->dhp = carve(scratch, NK * 2 * d.M);
    a->dap = carve(scratch, NK * d.M);
    if (d.l) a->dxin = carve(scratch, N * d.l);  // dz (variant A's gather backward adds into dx)
    if (d.l) {
        a->dr = carve(scratch, N * d.l);
        a->dr_n = carve(scratch, N * d.l);
    }
    a->dscores = carve(scratch, N * d.E);
    a->dlogits = carve(scratch, N * d.E);
    if (d.Ms) {
        a->dhs = carve(scratch, N * 2 * d.Ms);
        a->das = carve(scratch, N * d.Ms);
    }
    a->dx = carve(scratch, N * d.C);
}

#define PRM(idx) model_tensor(m, m->params, (idx))
#define GRD(idx) model_grad(m, (idx))

// The exchange of this layer when the forward runs expert parallel, else NULL. The cached
// forward (decoding, often on one rank alone) runs every expert locally, which needs the
// whole expert weights: it dies on a model whose experts are sharded.
static MoeEp *ep_for_forward(Model *m, MoeActs *a) {
    const int sharded = m->table.ep_size;
    if (sharded > 1 && (m->ep_size != sharded || m->cached))
        die("expert parallel: this rank holds only its experts' weights (sharded over %d ranks), so the MoE layers "
            "must run expert parallel on every rank of the group (%s); gather the weights into an unsharded model "
            "(model_get_params on every rank, summed) to run it alone",
            sharded, m->cached ? "the cached forward runs every expert locally" : "m->ep_size was changed");
    if (m->ep_size <= 1 || m->cached) return NULL;
    if (!a->ep || a->ep->P != m->ep_size)
        die("expert parallel: m->ep_size = %d, but model_set_expert_parallel(m, comm, %d) was not called", m->ep_size,
            m->ep_size);
    if (m->comm->group_size(m->comm, COMM_EP) != m->ep_size)
        die("expert parallel: m->ep_size = %d, but the runtime's expert-parallel group now has %d ranks", m->ep_size,
            m->comm->group_size(m->comm, COMM_EP));
    return a->ep;
}

// The local experts' slice of the stacked expert tensor `idx` in m->params (grads 0) or
// m->grads (grads 1): `per` elements per expert. With the experts sharded the buffer holds
// exactly these rows.
static real *local_experts(const Model *m, const MoeEp *ep, int grads, int idx, size_t per) {
    const size_t skip = (size_t)ep->rank * ep->El * per - m->table.items[idx].local_lo;
    return grads ? backend_grad_offset(m->be, model_grad(m, idx), skip)
                 : backend_offset(m->be, model_tensor(m, m->params, idx), skip);
}

void moe_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MoeParams *p = &m->mp.blocks[l].moe;
    MoeActs *a = &m->acts.blocks[l].moe;
    const MoeDims d = dims(c);
    const int N = B * T;
    a->in = (real *)in;
    // router (docs/hybrid.md, "Router forward"): sigmoid scores, biased top-k selection,
    // unbiased renormalised weights
    be->core->matmul_forward(a->logits, in, PRM(p->router_w), NULL, N, d.C, d.E);
    be->moe->router_forward(a->sel, a->weights, a->scores, a->logits, PRM(p->router_bias), N, d.E, d.K, (RouterScoreFn)c->moe_router, c->moe_renorm,
                       c->moe_route_scale);
    be->moe->moe_dispatch_plan(a->perm, a->pos, a->offsets, a->sel, N, d.K, d.E);
    // routed experts (docs/hybrid.md, "Routed and shared experts" and "Dropless permutation
    // and grouped expert FFN"), in the latent space for variant (b)
    const real *zin = in;
    if (d.l) {
        be->core->matmul_forward(a->z, in, PRM(p->latent_down), NULL, N, d.C, d.l);
        zin = a->z;
    }
    be->moe->moe_gather_forward(a->xp, zin, a->perm, N, d.K, d.De);
    MoeEp *ep = ep_for_forward(m, a);
    a->ep_last = ep ? ep->P : 1;
    // rows to their experts' owners, the local experts, outputs back (docs/hybrid.md,
    // "Expert-parallel exchange")
    if (ep) {
        const size_t s13 = (size_t)2 * d.M * d.De, s2 = (size_t)d.De * d.M;
        ep_plan(m, ep, a->offsets, d.E);
        ep_dispatch(m, ep, ep->xe, a->xp, d.De);
        be->moe->moe_experts_forward(ep->ye, ep->he, ep->ae, ep->xe, local_experts(m, ep, 0, p->w13, s13),
                                local_experts(m, ep, 0, p->w2, s2), ep->offsets, ep->El, d.De, d.M, model_glu_act(c));
        ep_combine(m, ep, a->yp, ep->ye, d.De);
    } else {
        be->moe->moe_experts_forward(a->yp, a->hp, a->ap, a->xp, PRM(p->w13), PRM(p->w2), a->offsets, d.E, d.De, d.M,
                                model_glu_act(c));
    }
    // shared experts: one full-width GLU MLP on x
    if (d.Ms)
        glu_mlp_forward(be->core, be->norm_glu, a->shared, a->hs, a->as, in, PRM(p->shared_up), NULL,
                        PRM(p->shared_down), NULL, N, d.C, d.Ms, model_glu_act(c));
    if (!d.l && d.Ms) {  // variant A: out = r + shared, the add fused into the combine
        be->moe->moe_combine_forward(out, a->yp, a->weights, a->pos, a->shared, N, d.K, d.De);
    } else {
        be->moe->moe_combine_forward(a->r, a->yp, a->weights, a->pos, NULL, N, d.K, d.De);
        const real *routed = a->r;
        if (d.l) {  // K3 Stable LatentMoE: W_up RMSNorm(r)
            be->norm_glu->rmsnorm_forward(a->r_n, a->rstd_r, a->r, PRM(p->latent_norm), N, d.l, (real)c->norm_eps);
            be->core->matmul_forward(a->routed, a->r_n, PRM(p->latent_up), NULL, N, d.l, d.C);
            routed = a->routed;
        }
        if (d.Ms) {
            be->core->add_forward(out, routed, a->shared, (size_t)N * d.C);
        } else {  // out = routed
            be->zero(out, (size_t)N * d.C);
            be->core->add_inplace(out, routed, (size_t)N * d.C);
        }
    }
    // optional balance loss (docs/hybrid.md, "Auxiliary balance losses"), per sequence of T
    // tokens, only when training
    a->aux_loss = 0;
    if (c->moe_aux_loss_coef > 0 && m->last_has_targets)
        a->aux_loss = be->moe->moe_aux_loss_forward(a->scores, a->sel, N, d.E, d.K, T, c->moe_aux_loss_coef);
}

void moe_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MoeParams *p = &m->mp.blocks[l].moe;
    MoeActs *a = &m->acts.blocks[l].moe;
    const MoeDims d = dims(c);
    const int N = B * T;
    const size_t nc = (size_t)N * d.C;
    // shared MLP (writes din)
    if (d.Ms) {
        glu_mlp_backward(be->core, be->norm_glu, din, GRD(p->shared_up), NULL, GRD(p->shared_down), NULL, a->dhs,
                         a->das, dout, a->in, a->hs, a->as, PRM(p->shared_up), PRM(p->shared_down), N, d.C, d.Ms,
                         model_glu_act(c));
    } else {
        be->zero(din, nc);
    }
    // routed output side (docs/hybrid.md, "MoE backward", step 1)
    const real *dr = dout;
    if (d.l) {
        be->core->matmul_backward(a->dr_n, GRD(p->latent_up), NULL, dout, a->r_n, PRM(p->latent_up), N, d.l, d.C);
        be->norm_glu->rmsnorm_backward(a->dr, GRD(p->latent_norm), a->dr_n, a->r, PRM(p->latent_norm), a->rstd_r, N, d.l);
        dr = a->dr;
    }
    // steps 2-4: combine, experts, gather
    be->moe->moe_combine_backward(a->dyp, a->dweights, dr, a->yp, a->weights, a->pos, N, d.K, d.De);
    if (a->ep_last > 1) {  // the transpose of the forward's exchange: dy to the owners, dx back
        MoeEp *ep = a->ep;
        const size_t s13 = (size_t)2 * d.M * d.De, s2 = (size_t)d.De * d.M;
        real *dye = ep->ye;  // the forward's output rows are not needed any more
        ep_dispatch(m, ep, dye, a->dyp, d.De);
        be->moe->moe_experts_backward(ep->dxe, local_experts(m, ep, 1, p->w13, s13), local_experts(m, ep, 1, p->w2, s2),
                                 ep->dhe, ep->dae, dye, ep->xe, ep->he, ep->ae, local_experts(m, ep, 0, p->w13, s13),
                                 local_experts(m, ep, 0, p->w2, s2), ep->offsets, ep->El, d.De, d.M, model_glu_act(c));
        ep_combine(m, ep, a->dxp, ep->dxe, d.De);
    } else {
        be->moe->moe_experts_backward(a->dxp, GRD(p->w13), GRD(p->w2), a->dhp, a->dap, a->dyp, a->xp, a->hp, a->ap,
                                 PRM(p->w13), PRM(p->w2), a->offsets, d.E, d.De, d.M, model_glu_act(c));
    }
    if (d.l) {  // dz, then through W_down into din
        be->moe->moe_gather_backward(a->dxin, a->dxp, a->pos, N, d.K, d.De, 0);
        matmul_backward_add(be, din, GRD(p->latent_down), NULL, a->dxin, a->in, PRM(p->latent_down), N, d.C, d.l,
                            a->dx);
    } else {  // din += dx (the add fused into the gather's backward)
        be->moe->moe_gather_backward(din, a->dxp, a->pos, N, d.K, d.De, 1);
    }
    // steps 5-7: router, selection fixed; the balance loss reaches every score
    be->moe->router_weights_backward(a->dscores, a->dweights, a->scores, a->sel, N, d.E, d.K, c->moe_renorm,
                                c->moe_route_scale);
    if (c->moe_aux_loss_coef > 0)
        be->moe->moe_aux_loss_backward(a->dscores, a->scores, a->sel, N, d.E, d.K, T, c->moe_aux_loss_coef,
                                  m->backward_scale);
    be->moe->router_scores_backward(a->dlogits, a->dscores, a->scores, N, d.E, (RouterScoreFn)c->moe_router);
    matmul_backward_add(be, din, GRD(p->router_w), NULL, a->dlogits, a->in, PRM(p->router_w), N, d.C, d.E, a->dx);
    // the step's expert loads for the bias update (docs/hybrid.md, "Aux-loss-free bias
    // balancing"): training micro-batches only
    be->moe->moe_count(a->counts, a->sel, N, d.K, d.E);
}
