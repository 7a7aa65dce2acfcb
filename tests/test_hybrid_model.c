// Model-level checks of the hybrid blocks (issue 5; docs/hybrid.md, "Verification
// identities"), double build:
//  - AttnRes: layer 0's mixer reads the embedding itself and has no AttnRes parameters; at
//    zero pseudo-queries every AttnRes output is the mean of its sources and the key-norm
//    weights get exactly zero gradient while the queries do not (docs/hybrid.md, "AttnRes
//    op backward");
//  - router: a uniform shift of the selection bias changes nothing (bit-identical); an
//    expert no token reaches gets exactly zero weight gradient; with the latent MoE the
//    routed scale and the renormalisation do not change the output (docs/hybrid.md,
//    "Latent-norm invariance");
//  - the once-per-step balance: only backward passes count, the statistics match a recount
//    of the selections, the bias moves by +-rate (centred), the counts start over;
//  - MoE results are bit-identical run to run and with 1 vs 2 threads;
//  - parameter counts and FLOPs of the KL-S / KL-XS configs match docs/hybrid.md, "The KL-S
//    and KL-XS family".
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include "train/config.h"
#include "hybrid_test_util.h"
#include "model/backend.h"
#include "model/params.h"
#include "testing.h"

static void fill_tokens(int *t, int n, int V, unsigned long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int)rng_below(&r, (uint64_t)V);
}

// ---------------------------------------------------------------------------------------
static void test_attnres_model(void) {
    Config c = tiny_hybrid("layers", "MMAM", "attn_res_block", "2", NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 5);
    model_init_params(&m, 9);  // queries at zero, norms at one: the documented init
    int in[10], tg[10];
    fill_tokens(in, 10, c.model.vocab_size, 1);
    fill_tokens(tg, 10, c.model.vocab_size, 2);
    CHECK(params_find(&m.table, "blocks.0.attnres_attn.query") < 0, "layer 0's attention AttnRes should not exist");
    CHECK(params_find(&m.table, "blocks.1.attnres_attn.query") >= 0, "layer 1's attention AttnRes is missing");
    model_zero_grad(&m);
    model_forward(&m, in, tg, 2, 5);
    CHECK(m.acts.blocks[0].xa_in == m.acts.encoded, "layer 0's mixer input is not the embedding");
    // every op at w = 0: the uniform mean of its sources
    const size_t nc = (size_t)10 * c.model.d_model;
    double worst = 0;
    for (int l = 0; l <= c.model.n_layer; l++) {
        for (int site = 0; site < 2; site++) {
            const AttnResActs *a = l == c.model.n_layer ? (site ? NULL : &m.acts.ar_out)
                                                  : site ? &m.acts.blocks[l].ar_ffn : &m.acts.blocks[l].ar_attn;
            if (!a || !a->srcs) continue;
            for (size_t k = 0; k < nc; k++) {
                double mean = 0;
                for (int i = 0; i < a->n; i++) mean += a->srcs[i][k];
                worst = fmax(worst, fabs(a->out[k] - mean / a->n));
            }
        }
    }
    CHECK(worst < 1e-14, "zero pseudo-queries: AttnRes outputs differ from the source mean by %g", worst);
    model_backward(&m, 1.0f);
    int norms_zero = 1, queries_live = 1;
    for (int i = 0; i < m.table.count; i++) {
        const ParamInfo *p = &m.table.items[i];
        if (!strstr(p->name, "attnres")) continue;
        const real *g = model_tensor(&m, m.grads, i);
        double mx = 0;
        for (size_t j = 0; j < p->numel; j++) mx = fmax(mx, fabs(g[j]));
        if (strstr(p->name, ".norm.")) norms_zero &= mx == 0.0;
        else queries_live &= mx > 0.0;
    }
    CHECK(norms_zero, "at w = 0 the AttnRes key-norm weights must get exactly zero gradient");
    CHECK(queries_live, "at w = 0 every AttnRes pseudo-query must get a gradient");
    model_destroy(&m);
}

// ---------------------------------------------------------------------------------------
static double loss_with(const Config *c, unsigned long seed, const int *in, const int *tg, void (*edit)(Model *)) {
    Model m;
    model_create(&m, &c->model, backend_cpu(), 2, 5);
    tiny_hybrid_params(&m, seed, 0.3);
    if (edit) edit(&m);
    double l = model_forward(&m, in, tg, 2, 5);
    model_destroy(&m);
    return l;
}

static void shift_bias(Model *m) {
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (!m->mp.blocks[l].moe_layer) continue;
        real *b = model_tensor(m, m->params, m->mp.blocks[l].moe.router_bias);
        for (int e = 0; e < m->cfg.moe_experts; e++) b[e] += 0.25;
    }
}

static void test_router_model(void) {
    int in[10], tg[10];
    fill_tokens(in, 10, 11, 3);
    fill_tokens(tg, 10, 11, 4);
    // a uniform bias shift keeps every selection: bit-identical loss
    Config c = tiny_hybrid(NULL);
    double l0 = loss_with(&c, 4, in, tg, NULL), l1 = loss_with(&c, 4, in, tg, shift_bias);
    CHECK(l0 == l1, "a uniform selection-bias shift changed the loss: %.17g vs %.17g", l0, l1);
    // latent MoE: RMSNorm(alpha r) = RMSNorm(r), so rho and the renormalisation (a per-token
    // common factor of the routed weights) cancel (docs/hybrid.md, "Latent-norm
    // invariance"); a tiny norm eps makes it exact
    Config a = tiny_hybrid("norm_eps", "1e-30", NULL);
    Config b = tiny_hybrid("norm_eps", "1e-30", "moe_route_scale", "2.446", "moe_renorm", "false", NULL);
    double la = loss_with(&a, 6, in, tg, NULL), lb = loss_with(&b, 6, in, tg, NULL);
    CHECK(rel_err(la, lb, 1e-30) < 1e-12, "latent MoE: scale/renorm changed the loss %.17g -> %.17g", la, lb);
    Config va = tiny_hybrid("moe_latent_dim", "0", NULL);
    Config vb = tiny_hybrid("moe_latent_dim", "0", "moe_route_scale", "2.446", NULL);
    CHECK(loss_with(&va, 6, in, tg, NULL) != loss_with(&vb, 6, in, tg, NULL), "variant A should depend on rho");

    // an expert that no token reaches gets exactly zero weight gradient
    Config z = tiny_hybrid("moe_experts", "5", NULL);
    Model m;
    model_create(&m, &z.model, backend_cpu(), 2, 5);
    tiny_hybrid_params(&m, 8, 0.3);
    const int l = 3, dead = 2, E = 5, M = z.model.moe_hidden, De = z.model.moe_latent_dim;
    real *bias = model_tensor(&m, m.params, m.mp.blocks[l].moe.router_bias);
    bias[dead] = -100;  // scores lie in (0, 1): never selected
    model_zero_grad(&m);
    model_forward(&m, in, tg, 2, 5);
    model_backward(&m, 1.0f);
    const real *g13 = model_tensor(&m, m.grads, m.mp.blocks[l].moe.w13);
    const real *g2 = model_tensor(&m, m.grads, m.mp.blocks[l].moe.w2);
    double dead_g = 0, live_g = 0;
    for (int e = 0; e < E; e++) {
        double mx = 0;
        for (size_t j = 0; j < (size_t)2 * M * De; j++) mx = fmax(mx, fabs(g13[(size_t)e * 2 * M * De + j]));
        for (size_t j = 0; j < (size_t)De * M; j++) mx = fmax(mx, fabs(g2[(size_t)e * De * M + j]));
        if (e == dead) dead_g = mx;
        else live_g = fmax(live_g, mx);
    }
    CHECK(dead_g == 0.0 && live_g > 0, "unrouted expert: gradient %g (others %g)", dead_g, live_g);
    model_destroy(&m);
}

// ---------------------------------------------------------------------------------------
static void test_balance_step(void) {
    Config c = tiny_hybrid("moe_experts", "6", "moe_bias_update_rate", "0.01", NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 5);
    tiny_hybrid_params(&m, 5, 0.3);
    int in[10], tg[10];
    fill_tokens(in, 10, c.model.vocab_size, 7);
    fill_tokens(tg, 10, c.model.vocab_size, 8);
    const int E = 6, K = c.model.moe_top_k;
    MoeStepStats st;
    // a forward alone (evaluation, sampling) counts nothing
    model_forward(&m, in, tg, 2, 5);
    for (int l = 0; l < c.model.n_layer; l++)
        if (m.mp.blocks[l].moe_layer)
            for (int e = 0; e < E; e++) CHECK(m.acts.blocks[l].moe.counts[e] == 0, "forward alone counted");
    // two micro-batches of one step
    long want[CONFIG_MAX_LAYERS][8];
    memset(want, 0, sizeof want);
    real bias0[CONFIG_MAX_LAYERS][8];
    for (int rep = 0; rep < 2; rep++) {
        model_forward(&m, rep ? tg : in, rep ? in : tg, 2, 5);
        model_backward(&m, 0.5f);
        for (int l = 0; l < c.model.n_layer; l++)
            if (m.mp.blocks[l].moe_layer)
                for (int n = 0; n < 10 * K; n++) want[l][m.acts.blocks[l].moe.sel[n]]++;
    }
    for (int l = 0; l < c.model.n_layer; l++)
        if (m.mp.blocks[l].moe_layer)
            memcpy(bias0[l], model_tensor(&m, m.params, m.mp.blocks[l].moe.router_bias), sizeof(real) * E);
    model_moe_step(&m, NULL, &st);
    long mn = 1L << 40, mx = 0;
    double cv_sum = 0, cv_max = 0;
    int ok_bias = 1, layers = 0;
    for (int l = 0; l < c.model.n_layer; l++) {
        if (!m.mp.blocks[l].moe_layer) continue;
        MoeLoadStats ls = moe_load_stats(want[l], E);
        mn = ls.min < mn ? ls.min : mn;
        mx = ls.max > mx ? ls.max : mx;
        cv_sum += ls.cv;
        cv_max = fmax(cv_max, ls.cv);
        layers++;
        const real *b = model_tensor(&m, m.params, m.mp.blocks[l].moe.router_bias);
        double mean = 0, upd[8], umean = 0;
        for (int e = 0; e < E; e++) mean += want[l][e] / (double)E;
        for (int e = 0; e < E; e++) {
            upd[e] = 0.01 * (want[l][e] < mean ? 1 : want[l][e] > mean ? -1 : 0);
            umean += upd[e] / E;
        }
        for (int e = 0; e < E; e++) ok_bias &= fabs(b[e] - (bias0[l][e] + upd[e] - umean)) < 1e-15;
        for (int e = 0; e < E; e++) CHECK(m.acts.blocks[l].moe.counts[e] == 0, "counts not cleared after the step");
    }
    CHECK(st.layers == layers && st.min == mn && st.max == mx && fabs(st.cv_mean - cv_sum / layers) < 1e-15 &&
              st.cv_max == cv_max,
          "step stats (%d layers, min %ld max %ld cv %g/%g) vs recount (%d, %ld, %ld, %g/%g)", st.layers, st.min,
          st.max, st.cv_mean, st.cv_max, layers, mn, mx, cv_sum / layers, cv_max);
    CHECK(ok_bias, "the bias update is not the centred sign rule");
    CHECK(st.min + st.max > 0, "no slots counted");
    // an empty step leaves the bias alone and reports zero loads
    real keep[8];
    memcpy(keep, model_tensor(&m, m.params, m.mp.blocks[3].moe.router_bias), sizeof keep[0] * E);
    model_moe_step(&m, NULL, &st);
    CHECK(st.max == 0 && !memcmp(keep, model_tensor(&m, m.params, m.mp.blocks[3].moe.router_bias), sizeof keep[0] * E),
          "an empty step changed the bias or reported loads");
    model_destroy(&m);
}

// ---------------------------------------------------------------------------------------
// forward + backward on a model big enough that every loop splits across threads
// (the double values themselves: a download to float could hide a difference)
static void run_once(int threads, double *loss, real *grads, real *logits) {
    omp_set_num_threads(threads);
    Config c = tiny_hybrid("d_model", "32", "n_head", "4", "vocab_size", "64", "padded_vocab_size", "64",
                           "context_length", "32", "seq_len", "32", "moe_experts", "8", "moe_hidden", "16",
                           "moe_latent_dim", "16", "mla_kv_rank", "16", "init_std", "0.1", NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 32);
    tiny_hybrid_params(&m, 12, 0.1);
    int in[64], tg[64];
    fill_tokens(in, 64, 64, 13);
    fill_tokens(tg, 64, 64, 14);
    model_zero_grad(&m);
    *loss = model_forward(&m, in, tg, 2, 32);
    memcpy(logits, model_logits(&m, 63, 1), sizeof(real) * 64);
    model_backward(&m, 1.0f);
    memcpy(grads, m.grads, sizeof(real) * m.table.total);
    model_destroy(&m);
}

static void test_determinism(void) {
    Config c = tiny_hybrid("d_model", "32", "n_head", "4", "vocab_size", "64", "padded_vocab_size", "64",
                           "context_length", "32", "seq_len", "32", "moe_experts", "8", "moe_hidden", "16",
                           "moe_latent_dim", "16", "mla_kv_rank", "16", NULL);
    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    size_t n = t.total;
    params_free(&t, &mp);
    double l[3];
    real *g[3], *lg[3];
    for (int k = 0; k < 3; k++) {
        g[k] = xmalloc(sizeof(real) * n), lg[k] = xmalloc(sizeof(real) * 64);
        run_once(k == 2 ? 1 : 2, &l[k], g[k], lg[k]);
    }
    CHECK(l[0] == l[1] && !memcmp(g[0], g[1], sizeof(real) * n) && !memcmp(lg[0], lg[1], sizeof(real) * 64),
          "MoE hybrid: two runs differ");
    CHECK(l[0] == l[2] && !memcmp(g[0], g[2], sizeof(real) * n) && !memcmp(lg[0], lg[2], sizeof(real) * 64),
          "MoE hybrid: 1 vs 2 threads differ");
    printf("determinism: loss %.12f bit-identical over 2 runs and 1 vs 2 threads (%zu gradients)\n", l[0], n);
    for (int k = 0; k < 3; k++) free(g[k]), free(lg[k]);
    omp_set_num_threads(1);
}

// ---------------------------------------------------------------------------------------
// recompute_mlp: the dense MLPs keep only h and recompute act = f(h) in the backward. The same
// op on the same h, so the loss and every gradient are the same bits as without it, for each
// activation; and the saved activations shrink by N x mlp_hidden a dense layer.
static void recompute_run(const char *mlp, const char *moe, const char *recompute, double *loss, real *grads,
                          size_t *act_bytes) {
    Config c = tiny_hybrid("d_model", "16", "n_head", "2", "mlp", mlp, "mlp_hidden", "12", "moe_experts", moe,
                           "recompute_mlp", recompute, NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 5);
    tiny_hybrid_params(&m, 21, 0.2);
    int in[10], tg[10];
    fill_tokens(in, 10, 11, 22);
    fill_tokens(tg, 10, 11, 23);
    model_zero_grad(&m);
    *loss = model_forward(&m, in, tg, 2, 5);
    model_backward(&m, 1.0f);
    memcpy(grads, m.grads, sizeof(real) * m.table.total);
    *act_bytes = m.act_bytes;
    model_destroy(&m);
}

static void test_recompute_mlp(void) {
    const char *mlps[] = {"gelu", "swiglu", "situ"}, *moes[] = {"0", "4"};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            if (i == 0 && j == 1) continue;  // MoE experts are gated MLPs: no GELU with MoE
            Config c = tiny_hybrid("d_model", "16", "n_head", "2", "mlp", mlps[i], "mlp_hidden", "12", "moe_experts",
                                   moes[j], NULL);
            ParamTable t;
            ModelParams mp;
            params_build(&c.model, &t, &mp);
            const size_t n = t.total;
            params_free(&t, &mp);
            const int dense = moes[j][0] == '0' ? c.model.n_layer : c.model.dense_first;
            real *g0 = xmalloc(sizeof(real) * n), *g1 = xmalloc(sizeof(real) * n);
            double l0, l1;
            size_t b0, b1;
            recompute_run(mlps[i], moes[j], "false", &l0, g0, &b0);
            recompute_run(mlps[i], moes[j], "true", &l1, g1, &b1);
            CHECK(l0 == l1 && !memcmp(g0, g1, sizeof(real) * n), "recompute_mlp (mlp %s, moe_experts %s): loss %.17g "
                  "against %.17g, or the gradients differ", mlps[i], moes[j], l1, l0);
            // N x mlp_hidden a dense layer, as carve.h rounds every buffer (256 bytes)
            const size_t saved = (size_t)dense * ((2 * 5 * 12 * sizeof(real) + 255) / 256 * 256);
            CHECK(b0 - b1 == saved, "recompute_mlp (mlp %s, moe_experts %s): saved activations %zu -> %zu bytes, "
                  "expected %zu less", mlps[i], moes[j], b0, b1, saved);
            free(g0), free(g1);
        }
    printf("recompute_mlp: gelu, swiglu and situ, dense (and MoE for the gated ones): the same loss and gradients, bit for bit, "
           "N x mlp_hidden fewer saved values a dense layer\n");
}

// ---------------------------------------------------------------------------------------
typedef struct {
    const char *file, *override_key, *override_value;
    double total, active_ne, mflops, tol_m;  // millions, as docs/hybrid.md rounds them
} Expect;

static void test_family_counts(void) {
    const Expect ex[] = {
        // docs/hybrid.md, "The KL-S and KL-XS family": KL-S variant A with q-LoRA and
        // AttnRes, T = 1024
        {"configs/kl-s-0-1.conf", NULL, NULL, 248.5, 86.0, 842, 0.05},
        // variant B (latent l = 384, expert m = 512): 257-262M total, 95-100M active, 867-895 MFLOPs;
        // 0:1 is the top of the FLOPs range and the bottom of the parameter range
        {"configs/kl-s-0-1.conf", "moe_latent_dim", "384", 257.3, 94.8, 895, 0.1},
        // KL-XS: 128-131M total, 40-43M active, 440-460 MFLOPs
        {"configs/kl-xs-0-1.conf", NULL, NULL, 128.2, 40.5, 460, 0.1},
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        Config c;
        config_defaults(&c);
        config_load_file(&c, ex[i].file);
        if (ex[i].override_key) {
            config_set_override(&c, ex[i].override_key, ex[i].override_value);
            config_set_override(&c, "moe_hidden", "512");
        }
        config_finalize(&c);
        ParamTable t;
        ModelParams mp;
        params_build(&c.model, &t, &mp);
        double total = (double)params_count(&t) / 1e6, act = params_count_active(&c.model, &t, 1) / 1e6;
        double fl = params_flops_per_token(&c.model, &t, c.seq_len) / 1e6;
        printf("%-24s %-18s total %.3fM, active non-embedding %.3fM, %.1f MFLOP/token\n", ex[i].file,
               ex[i].override_key ? "(latent MoE)" : "", total, act, fl);
        CHECK(fabs(total - ex[i].total) <= ex[i].tol_m, "%s: total %.3fM, docs/hybrid.md says %.1fM", ex[i].file, total,
              ex[i].total);
        CHECK(fabs(act - ex[i].active_ne) <= ex[i].tol_m, "%s: active %.3fM, docs/hybrid.md says %.1fM", ex[i].file, act,
              ex[i].active_ne);
        CHECK(fabs(fl - ex[i].mflops) <= 0.5, "%s: %.1f MFLOP/token, docs/hybrid.md says %.0f", ex[i].file, fl, ex[i].mflops);
        params_free(&t, &mp);
    }
    // GPT-2 124M: the family's reference (docs/hybrid.md, "The KL-S and KL-XS family"),
    // ~799 MFLOP/token with the same formula
    Config g;
    config_defaults(&g);
    config_load_file(&g, "configs/gpt2-124m.conf");
    config_finalize(&g);
    ParamTable t;
    ModelParams mp;
    params_build(&g.model, &t, &mp);
    double fl = params_flops_per_token(&g.model, &t, g.seq_len) / 1e6;
    CHECK(fabs(fl - 799) <= 0.5, "GPT-2 124M: %.1f MFLOP/token, docs/hybrid.md says 799", fl);
    params_free(&t, &mp);
}

// ---------------------------------------------------------------------------------------
typedef struct {
    const char *k1, *v1, *k2, *v2;
} BadKeys;

static void finalize_bad(void *ctx) {
    const BadKeys *b = ctx;
    tiny_hybrid(b->k1, b->v1, b->k2, b->v2, NULL);
}

static void test_config_errors(void) {
    const struct {
        BadKeys keys;
        const char *expect;
    } cases[] = {
        {{"moe_top_k", "5", "moe_experts", "4"}, "moe_top_k = 5 must lie in [1, moe_experts = 4]"},
        {{"moe_hidden", "0", "mlp", "situ"}, "moe_hidden must be set"},
        {{"mlp", "gelu", "moe_hidden", "3"}, "set mlp = swiglu or situ"},
        {{"mla_rope_dim", "3", "mla_rope", "true"}, "needs an even mla_rope_dim"},
        {{"mla_kv_rank", "0", "layers", "MA"}, "mla_kv_rank must be positive"},
        {{"dense_first", "9", "layers", "MM"}, "dense_first = 9 exceeds the 2 layers"},
        {{"layers", "KKKQ", "mlp", "situ"}, "unknown layer type 'Q'"},
        {{"moe_route_scale", "0", "mlp", "situ"}, "moe_route_scale must be positive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        BadKeys k = cases[i].keys;
        CHECK(expect_death(finalize_bad, &k, cases[i].expect, cases[i].expect), "config case %zu", i);
    }
    // without M layers and without MoE the hybrid keys are not checked
    Config c = tiny_hybrid("layers", "AA", "mla_kv_rank", "0", NULL);
    CHECK(c.model.n_layer == 2, "A-only config with an unused bad MLA key should load");
}

// ---------------------------------------------------------------------------------------
// A backend without a family a config needs is refused once, at model creation, naming the
// layer, the part of it and the family (the CPU table with one family taken away).
typedef struct {
    const char *layers, *extra_key, *extra_value;
    size_t family;  // offsetof(Backend, <family>) to take away
} Lacking;

static void create_on_lacking(void *ctx) {
    const Lacking *k = ctx;
    static Backend be;
    be = *backend_cpu();
    *(const void **)((char *)&be + k->family) = NULL;
    be.name = "cpu-without-a-family";
    Config c = tiny_hybrid("layers", k->layers, k->extra_key, k->extra_value, NULL);
    Model m;
    model_create(&m, &c.model, &be, 1, 4);
}

static void test_backend_families(void) {
    const struct {
        Lacking k;
        const char *expect[2];
    } cases[] = {
        {{"AAKA", "moe_experts", "0", offsetof(Backend, delta_rule)}, {"no delta-rule", "layer 2 (mixer 'K', KDA)"}},
        {{"AAAM", "moe_experts", "0", offsetof(Backend, mla)}, {"no MLA", "layer 3 (mixer 'M', MLA)"}},
        {{"AA", "dense_first", "1", offsetof(Backend, moe)}, {"no MoE", "layer 1 (MoE)"}},
        {{"AA", "moe_experts", "0", offsetof(Backend, attnres)}, {"no Block AttnRes", "attn_res_block > 0"}},
        {{"AA", "moe_experts", "0", offsetof(Backend, norm_glu)}, {"no norms-and-GLU", "norm = rmsnorm"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Lacking k = cases[i].k;
        CHECK(expect_death(create_on_lacking, &k, cases[i].expect[0], cases[i].expect[0], cases[i].expect[1]),
              "backend family case %zu", i);
    }
    // the same configs on the full CPU backend build
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Config c = tiny_hybrid("layers", cases[i].k.layers, cases[i].k.extra_key, cases[i].k.extra_value, NULL);
        Model m;
        model_create(&m, &c.model, backend_cpu(), 1, 4);
        model_destroy(&m);
    }
}

int main(void) {
    omp_set_num_threads(1);
    test_backend_families();
    test_attnres_model();
    test_router_model();
    test_balance_step();
    test_determinism();
    test_recompute_mlp();
    test_family_counts();
    test_config_errors();
    TEST_MAIN_END();
}
