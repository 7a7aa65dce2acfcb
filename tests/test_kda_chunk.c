// Chunkwise == recurrent for KDA, GDN, DeltaNet and linear attention (docs/delta-rule.md,
// "Chunkwise equals recurrent"): forward outputs, final state and every gradient, for chunk
// sizes 1, 2, 4, 16, 64 with partial last chunks and document boundaries; the special-case
// relations (docs/delta-rule.md, "How the four rules relate" and "Special-case
// identities"); decode steps == recurrent forward; realistic strong decays
// (docs/delta-rule.md, "Stress cases"); thread-count independence.
#include <omp.h>

#include "tests/linear_problem.h"
#include "tests/testing.h"

#define TOL 1e-10

// worst error seen per tensor, for the summary
static const char *tensor_names[] = {"o", "hT", "zT", "dq", "dk", "dv", "dg", "dbeta", "dh0", "dz0"};
enum { NTENSORS = 10 };
static double worst[NTENSORS];

static void compare_results(const Prob *p, const Result *a, const Result *ref, const char *what) {
    const real *av[NTENSORS] = {a->o, a->hT, a->zT, a->dq, a->dk, a->dv, a->dg, a->dbeta, a->dh0, a->dz0};
    const real *rv[NTENSORS] = {ref->o, ref->hT, ref->zT, ref->dq, ref->dk, ref->dv,
                                ref->dg, ref->dbeta, ref->dh0, ref->dz0};
    const size_t nv[NTENSORS] = {p->nv, p->nh, p->nz, p->nqk, p->nqk, p->nv, p->ng, p->nb, p->nh, p->nz};
    const int la = prob_is_la(p), norm = p->variant == V_LA;
    for (int x = 0; x < NTENSORS; x++) {
        if ((x == 2 || x == 9) && !norm) continue;                                 // z: normalised LA only
        if (x == 6 && p->variant != V_GDN && p->variant != V_KDA) continue;       // dg: gated only
        if (x == 7 && la) continue;                                                // dbeta: delta rule only
        CHECK(max_abs(rv[x], nv[x]) > 0, "%s %s: reference %s is all zero", variant_name[p->variant], what,
              tensor_names[x]);
        double e = tensor_err(av[x], rv[x], nv[x]);
        if (e > worst[x]) worst[x] = e;
        CHECK(e <= TOL, "%s %s: %s rel err %.3e", variant_name[p->variant], what, tensor_names[x], e);
    }
}

static void chunk_vs_recurrent(LinearDims d, const int *chunks, int nchunks, int use_h0, int use_dhT,
                               uint64_t seed, const char *label) {
    for (int variant = V_DELTANET; variant <= V_LA_UNNORM; variant++) {
        Prob p;
        prob_init(&p, d, variant, seed + variant, use_h0, use_dhT);
        Result ref, got;
        result_alloc(&ref, &p);
        result_alloc(&got, &p);
        prob_run(&p, 0, &ref);
        CHECK(all_finite(ref.o, p.nv) && all_finite(ref.dq, p.nqk), "%s recurrent finite", label);
        for (int c = 0; c < nchunks; c++) {
            prob_run(&p, chunks[c], &got);
            char what[128];
            snprintf(what, sizeof what, "%s chunk %d", label, chunks[c]);
            compare_results(&p, &got, &ref, what);
        }
        result_free(&ref);
        result_free(&got);
        prob_free(&p);
    }
}

// docs/delta-rule.md, "Special-case identities": GDN == KDA with g broadcast over K,
// dg(GDN) = sum_i dg(KDA); DeltaNet == KDA with g = 0.
static void special_cases(void) {
    LinearDims d = linear_dims(2, 23, 2, 8, 5);
    for (int chunk = 0; chunk <= 16; chunk += 16) {
        Prob gdn, kda;
        prob_init(&gdn, d, V_GDN, 77, 1, 1);
        prob_init(&kda, d, V_KDA, 77, 1, 1);
        // same q, k, v, beta, h0, dout, dhT; KDA's g = GDN's g broadcast
        memcpy(kda.q, gdn.q, gdn.nqk * sizeof(real));
        memcpy(kda.k, gdn.k, gdn.nqk * sizeof(real));
        memcpy(kda.v, gdn.v, gdn.nv * sizeof(real));
        memcpy(kda.beta, gdn.beta, gdn.nb * sizeof(real));
        memcpy(kda.h0, gdn.h0, gdn.nh * sizeof(real));
        memcpy(kda.dout, gdn.dout, gdn.nv * sizeof(real));
        memcpy(kda.dhT, gdn.dhT, gdn.nh * sizeof(real));
        for (size_t r = 0; r < gdn.nb; r++)
            for (int i = 0; i < d.K; i++) kda.g[r * d.K + i] = gdn.g[r];
        Result rg, rk;
        result_alloc(&rg, &gdn);
        result_alloc(&rk, &kda);
        prob_run(&gdn, chunk, &rg);
        prob_run(&kda, chunk, &rk);
        real *dgsum = tnew(gdn.nb);
        for (size_t r = 0; r < gdn.nb; r++) {
            double s = 0;
            for (int i = 0; i < d.K; i++) s += rk.dg[r * d.K + i];
            dgsum[r] = (real)s;
        }
        double e_o = tensor_err(rg.o, rk.o, gdn.nv), e_h = tensor_err(rg.hT, rk.hT, gdn.nh);
        double e_dq = tensor_err(rg.dq, rk.dq, gdn.nqk), e_dg = tensor_err(rg.dg, dgsum, gdn.nb);
        CHECK(e_o <= 1e-13 && e_h <= 1e-13 && e_dq <= 1e-13, "GDN == KDA(broadcast g), chunk %d: %.2e %.2e %.2e",
              chunk, e_o, e_h, e_dq);
        CHECK(e_dg <= 1e-12, "dg(GDN) == sum_i dg(KDA), chunk %d: %.2e", chunk, e_dg);
        printf("special: chunk %2d  GDN vs KDA(broadcast): o %.1e hT %.1e dq %.1e dg(sum) %.1e\n", chunk, e_o, e_h,
               e_dq, e_dg);

        // DeltaNet == KDA with g = 0
        Prob dn;
        prob_init(&dn, d, V_DELTANET, 78, 1, 1);
        memcpy(dn.q, kda.q, kda.nqk * sizeof(real));
        memcpy(dn.k, kda.k, kda.nqk * sizeof(real));
        memcpy(dn.v, kda.v, kda.nv * sizeof(real));
        memcpy(dn.beta, kda.beta, kda.nb * sizeof(real));
        memcpy(dn.h0, kda.h0, kda.nh * sizeof(real));
        memcpy(dn.dout, kda.dout, kda.nv * sizeof(real));
        memcpy(dn.dhT, kda.dhT, kda.nh * sizeof(real));
        memset(kda.g, 0, kda.ng * sizeof(real));
        Result rd;
        result_alloc(&rd, &dn);
        prob_run(&dn, chunk, &rd);
        prob_run(&kda, chunk, &rk);
        e_o = tensor_err(rd.o, rk.o, dn.nv);
        double e_dk = tensor_err(rd.dk, rk.dk, dn.nqk), e_dh0 = tensor_err(rd.dh0, rk.dh0, dn.nh);
        CHECK(e_o <= 1e-13 && e_dk <= 1e-13 && e_dh0 <= 1e-13, "DeltaNet == KDA(g=0), chunk %d: %.2e %.2e %.2e",
              chunk, e_o, e_dk, e_dh0);
        free(dgsum);
        result_free(&rg), result_free(&rk), result_free(&rd);
        prob_free(&gdn), prob_free(&kda), prob_free(&dn);
    }
}

// (c) decode steps reproduce the recurrent forward token by token (same arithmetic:
// equal to the last bit in double).
static void decode_steps(void) {
    const int B = 3, T = 20, H = 2, K = 8, V = 6;
    LinearDims d = linear_dims(B, T, H, K, V);
    for (int variant = V_DELTANET; variant <= V_LA_UNNORM; variant++) {
        Prob p;
        prob_init(&p, d, variant, 300 + variant, 1, 1);
        Result ref;
        result_alloc(&ref, &p);
        prob_forward(&p, 0, ref.o, ref.hT, ref.zT);
        real *S = tnew(p.nh), *z = tnew(p.nz), *o = tnew((size_t)B * H * V);
        real *qt = tnew((size_t)B * H * K), *kt = tnew((size_t)B * H * K), *gt = tnew((size_t)B * H * K);
        real *vt = tnew((size_t)B * H * V), *bt = tnew((size_t)B * H);
        memcpy(S, p.h0, p.nh * sizeof(real));
        memcpy(z, p.z0, p.nz * sizeof(real));
        const int gK = variant == V_KDA ? K : 1;
        double err = 0;
        for (int t = 0; t < T; t++) {
            for (int b = 0; b < B; b++) {  // gather token t of every sequence
                const size_t row = ((size_t)b * T + t) * H, dst = (size_t)b * H;
                memcpy(qt + dst * K, p.q + row * K, (size_t)H * K * sizeof(real));
                memcpy(kt + dst * K, p.k + row * K, (size_t)H * K * sizeof(real));
                memcpy(vt + dst * V, p.v + row * V, (size_t)H * V * sizeof(real));
                memcpy(bt + dst, p.beta + row, (size_t)H * sizeof(real));
                memcpy(gt + dst * gK, p.g + row * gK, (size_t)H * gK * sizeof(real));
            }
            switch (variant) {
            case V_KDA: kda_step(o, S, qt, kt, vt, gt, bt, p.scale, B, H, K, V); break;
            case V_GDN: gdn_step(o, S, qt, kt, vt, gt, bt, p.scale, B, H, K, V); break;
            case V_DELTANET: deltanet_step(o, S, qt, kt, vt, bt, p.scale, B, H, K, V); break;
            default: cpu_linear_attn_step(o, S, z, qt, kt, vt, p.scale, variant == V_LA, B, H, K, V);
            }
            for (int b = 0; b < B; b++)
                for (int x = 0; x < H * V; x++)
                    err = fmax(err, fabs((double)o[(size_t)b * H * V + x] -
                                         (double)ref.o[((size_t)b * T + t) * H * V + x]));
        }
        double eS = tensor_err(S, ref.hT, p.nh), ez = variant == V_LA ? tensor_err(z, ref.zT, p.nz) : 0;
        err /= max_abs(ref.o, p.nv);
        CHECK(err <= 1e-14 && eS <= 1e-14 && ez <= 1e-14, "%s decode: o %.2e state %.2e z %.2e",
              variant_name[variant], err, eS, ez);
        printf("decode %-19s o %.1e  state %.1e\n", variant_name[variant], err, eS);
        free(S), free(z), free(o), free(qt), free(kt), free(gt), free(vt), free(bt);
        result_free(&ref);
        prob_free(&p);
    }
}

// (d) realistic decays: g from the real gate formula (docs/delta-rule.md, "KDA layer") with
// strongly negative values
// (one channel pinned at -20 per step, so Gamma reaches -1280 within a chunk of 64).
static void strong_decay(void) {
    const int T = 200, H = 2, K = 32, V = 16;
    LinearDims d = linear_dims(1, T, H, K, V);
    for (int variant = V_GDN; variant <= V_KDA; variant++) {
        Prob p;
        prob_init(&p, d, variant, 500 + variant, 1, 1);
        const int gK = variant == V_KDA ? K : 1;
        Rng r;
        rng_seed(&r, 99);
        real *x = tnew(p.ng), *A_log = tnew(H), *dt_bias = tnew((size_t)H * gK);
        fill_normal(&r, x, p.ng, 2.0);
        for (int h = 0; h < H; h++) A_log[h] = (real)log(1.0 + 15.0 * rng_uniform(&r));  // log U(1,16)
        for (int i = 0; i < H * gK; i++) {  // inverse softplus of dt ~ logU(1e-3, 1e-1)
            double dt = exp(log(1e-3) + rng_uniform(&r) * (log(1e-1) - log(1e-3)));
            dt_bias[i] = (real)(dt + log(-expm1(-dt)));
        }
        cpu_decay_gate_forward(p.g, x, A_log, dt_bias, (size_t)T, H, gK, 0);
        double gmin = 0;
        for (size_t i = 0; i < p.ng; i++) {
            if (p.g[i] < -20) p.g[i] = -20;  // "down to -20 per step"
            gmin = fmin(gmin, p.g[i]);
        }
        for (int t = 0; t < T; t++) p.g[(size_t)t * H * gK] = -20;  // head 0, channel 0: always -20
        Result ref, got;
        result_alloc(&ref, &p);
        result_alloc(&got, &p);
        prob_run(&p, 0, &ref);
        prob_run(&p, 64, &got);
        int finite = all_finite(got.o, p.nv) && all_finite(got.hT, p.nh) && all_finite(got.dq, p.nqk) &&
                     all_finite(got.dk, p.nqk) && all_finite(got.dv, p.nv) && all_finite(got.dg, p.ng) &&
                     all_finite(got.dbeta, p.nb) && all_finite(got.dh0, p.nh);
        CHECK(finite, "%s strong decay: chunk outputs finite", variant_name[variant]);
        compare_results(&p, &got, &ref, "strong decay chunk 64");
        printf("strong decay %s: min g %.1f, chunk 64: o err %.1e, dg err %.1e\n", variant_name[variant], gmin,
               tensor_err(got.o, ref.o, p.nv), tensor_err(got.dg, ref.dg, p.ng));
        free(x), free(A_log), free(dt_bias);
        result_free(&ref), result_free(&got);
        prob_free(&p);
    }
}

// docs/delta-rule.md, "Stress cases": beta exactly 0 and 1, nearly-no-decay gates
// (|g| < 1e-4) and gates pinned
// at -5 (the lower bound) for whole chunks; chunk == recurrent.
static void stress_beta_gates(void) {
    LinearDims d = linear_dims(1, 150, 2, 16, 8);
    Prob p;
    prob_init(&p, d, V_KDA, 700, 1, 1);
    Rng r;
    rng_seed(&r, 701);
    for (size_t row = 0; row < p.nb; row++) {
        const int t = (int)(row / 2);
        if (t % 5 == 1) p.beta[row] = 0;
        if (t % 5 == 3) p.beta[row] = 1;
        for (int i = 0; i < d.K; i++) {
            real *g = &p.g[row * d.K + i];
            if (t >= 64 && t < 128) *g = -5;  // the second chunk of 64 entirely at the bound
            else if (i % 2) *g = (real)(-1e-4 * rng_uniform(&r));
        }
    }
    Result ref, got;
    result_alloc(&ref, &p);
    result_alloc(&got, &p);
    prob_run(&p, 0, &ref);
    static const int cs[] = {16, 64};
    for (int c = 0; c < 2; c++) {
        prob_run(&p, cs[c], &got);
        compare_results(&p, &got, &ref, cs[c] == 16 ? "stress chunk 16" : "stress chunk 64");
    }
    result_free(&ref), result_free(&got);
    prob_free(&p);
}

// docs/delta-rule.md, "Causality": perturbing tokens after t0 leaves the chunkwise outputs
// of tokens <= t0
// bitwise unchanged (exact relative-form decays need no reference row).
static void causality(void) {
    const int T = 40, t0 = 21;  // t0 in the middle of chunk 1 (C = 16)
    LinearDims d = linear_dims(1, T, 2, 8, 4);
    for (int variant = V_DELTANET; variant <= V_LA; variant++) {
        Prob p;
        prob_init(&p, d, variant, 800 + variant, 1, 1);
        real *o1 = tnew(p.nv), *o2 = tnew(p.nv), *h = tnew(p.nh), *z = tnew(p.nz);
        prob_forward(&p, 16, o1, h, z);
        const size_t after = (size_t)(t0 + 1) * d.H;  // first row after t0
        for (size_t x = after * d.K; x < p.nqk; x++) p.q[x] += 0.5, p.k[x] -= 0.25;
        for (size_t x = after * d.V; x < p.nv; x++) p.v[x] *= 2;
        for (size_t x = after * (p.ng / p.nb); x < p.ng; x++) p.g[x] *= 3;
        for (size_t x = after; x < p.nb; x++) p.beta[x] = 1 - p.beta[x];
        prob_forward(&p, 16, o2, h, z);
        CHECK(memcmp(o1, o2, after * d.V * sizeof(real)) == 0, "%s: chunk outputs are not causal",
              variant_name[variant]);
        CHECK(memcmp(o1 + after * d.V, o2 + after * d.V, (p.nv - after * d.V) * sizeof(real)) != 0,
              "%s: later outputs did not change", variant_name[variant]);
        free(o1), free(o2), free(h), free(z);
        prob_free(&p);
    }
}

// Results do not depend on the number of OpenMP threads (bitwise).
static void determinism(void) {
    static const int offs[] = {0, 9, 40, 41, 70};
    LinearDims d = linear_dims_varlen(70, 3, 8, 4, offs, 4);
    Prob p;
    prob_init(&p, d, V_KDA, 900, 1, 1);
    Result a, b;
    result_alloc(&a, &p);
    result_alloc(&b, &p);
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    prob_run(&p, 16, &a);
    omp_set_num_threads(nt > 1 ? nt : 2);
    prob_run(&p, 16, &b);
    omp_set_num_threads(nt);
    CHECK(memcmp(a.o, b.o, p.nv * sizeof(real)) == 0 && memcmp(a.dg, b.dg, p.ng * sizeof(real)) == 0 &&
              memcmp(a.dh0, b.dh0, p.nh * sizeof(real)) == 0,
          "chunk KDA differs between 1 and %d threads", nt > 1 ? nt : 2);
    result_free(&a), result_free(&b);
    prob_free(&p);
}

int main(void) {
    static const int chunks[] = {1, 2, 4, 16, 64};
    // batch of 2, T = 37: partial last chunks for C = 2, 4, 16, 64 (single chunk for 64)
    chunk_vs_recurrent(linear_dims(2, 37, 2, 16, 8), chunks, 5, 1, 1, 10, "B=2 T=37");
    // document boundaries (varlen, B = 1), per-segment h0
    static const int offs1[] = {0, 17, 37, 88};
    chunk_vs_recurrent(linear_dims_varlen(88, 2, 16, 8, offs1, 3), chunks, 5, 1, 1, 20, "varlen [0,17,37,88]");
    // empty and length-1 segments, a 130-token segment (two full chunks of 64 + 2);
    // zero initial state, no final-state gradient
    static const int offs2[] = {0, 1, 1, 20, 150};
    chunk_vs_recurrent(linear_dims_varlen(150, 2, 16, 8, offs2, 4), chunks, 5, 0, 0, 30, "varlen [0,1,1,20,150]");
    // one medium case: K != V, several heads
    static const int c64[] = {64};
    chunk_vs_recurrent(linear_dims(1, 300, 4, 32, 24), c64, 1, 1, 1, 40, "B=1 T=300 H=4 K=32 V=24");

    special_cases();
    decode_steps();
    strong_decay();
    stress_beta_gates();
    causality();
    determinism();
    printf("chunk vs recurrent, worst tensor-relative error over all cases (incl. strong decay, stress):\n");
    for (int x = 0; x < NTENSORS; x++) printf("  %-6s %.2e\n", tensor_names[x], worst[x]);
    TEST_MAIN_END();
}
