// The per-operand precision audit of the tensor-core chunkwise delta rule (docs/delta-rule.md,
// "Accuracy: the per-operand audit"). The kernels split operands that are not exact in bf16
// hi + lo and multiply two split operands on three MMAs (kernels/delta_rule/chunk.cuh); built
// with -DHYBRID_DR_PRECISION_AUDIT they zero the lo parts of the operands named in a runtime mask
// (kernels/delta_rule/split_operand.h: the thirteen still split, Q_r, K_r, K_c for KDA only;
// eight that this audit found droppable, the gradient kernels', are one bf16 since branch
// dr-fewer-mma and have no tag), which is exactly what dropping those MMA terms and storing
// those operands as one bf16 would compute. This program runs the KDA forward and
// backward (the table's members, tensor cores) under a set of masks on fixed random inputs
// (tests/gpu/delta_rule_prob.h: the parity test's distributions, h0 and dhT given) and prints
// the RMS relative error of every output against the CPU reference (doubles inside; the metric
// of tests/gpu/test_delta_rule.c), the worst over the cases: one with fla's gate range, one with
// strong decay (DeltaNet: the one case without a gate); GDN and DeltaNet, which run the same
// kernels, on request. The masks: none (today's kernels), each operand dropped alone, all dropped
// (one MMA a product, as fla), then a greedy search for the largest subset within the bars,
// twice: once holding the fp32 states hT, dh0 to the parity test's 1e-4, once to the bf16 bar
// 5e-3 (issue 15's bars: o 5e-3; dq, dk, dv 8e-3; dg, dbeta 2e-2).
// Not a test (its exit status is 1 only if today's kernels are outside the bars); built only with
// the audit macro: `make out/build/emu/audit_delta_rule_precision` (the CPU emulator) or
// `make out/build/gpu/audit_delta_rule_precision` (the GPU), then run it; --help lists options.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/delta_rule/split_operand.h"
#include "model/backend.h"
#include "model/ops/delta_rule/delta_rule.h"
#define GPU_HARNESS_NO_CHECKS  // (no check counters: an audit, not a test)
#include "tests/gpu/harness.h"
#include "tests/gpu/delta_rule_prob.h"
#include "tests/gpu/split_operand_mask.h"

// chunk_fwd_mma.cu under HYBRID_DR_PRECISION_AUDIT: bit DRS_x zeroes operand x's lo parts
extern void cuda_delta_precision_audit_mask(unsigned mask);

#define CHUNK 64
#define BAR_F32 1e-4  // the parity test's bar for the fp32 states (TOL_F32)
#define BAR_BF16 5e-3  // the bf16 output bar (TOL_OUT), the states' alternative

// the bars; the states' is the argument
static double bar(int e, double state_bar) {
    static const double B[DR_NOUT] = {TOL_OUT, 0, TOL_GRAD, TOL_GRAD, TOL_GRAD, 2e-2, 2e-2, 0};
    return dr_out_is_state(e) ? state_bar : B[e];
}

static const char *const OP_NAME[DRS_COUNT] = {
#define OP_NAME_(tag, name, where) name,
    DR_SPLIT_OPERANDS(OP_NAME_)
#undef OP_NAME_
};
static const char *const OP_WHERE[DRS_COUNT] = {
#define OP_WHERE_(tag, name, where) where,
    DR_SPLIT_OPERANDS(OP_WHERE_)
#undef OP_WHERE_
};

// One case: a problem, its device inputs and the CPU reference of every output.
typedef struct {
    const char *label;
    Prob p;
    DevIn d;
    float *ref[DR_NOUT];
} Case;

static const DeltaRuleOps *D;
static int B_ = 1, K_ = 128, V_ = 128;  // every case's batch and head sizes (--B, --K, --V)

static void *cpu_ws(const Prob *p, int backward) {
    size_t b = cpu_linear_workspace_size(p->kind, backward, p->B, p->T, p->H, p->K, p->V, p->N, CHUNK);
    return xmalloc(b ? b : 1);
}

static Case make_case(const char *label, LinearKind kind, int strong, int T, int H) {
    Case c = {0};
    c.label = label;
    strong_decay = strong;
    c.p = make_prob(kind, B_, T, H, K_, V_, NULL, 0);
    strong_decay = 0;
    c.d = upload(&c.p);
    const Prob *p = &c.p;
    for (int e = 0; e < DR_NOUT; e++) c.ref[e] = p->g || e != DR_DG ? xmalloc(sizeof(float) * dr_out_len(p, e)) : NULL;
    void *wc = cpu_ws(p, 0);
    cpu_delta_chunk_forward(p->kind, c.ref[DR_O], c.ref[DR_HT], p->q, p->k, p->v, p->g, p->beta, p->h0, p->scale, p->B,
                            p->T, p->H, p->K, p->V, NULL, 0, CHUNK, wc);
    free(wc);
    wc = cpu_ws(p, 1);
    cpu_delta_chunk_backward(p->kind, c.ref[DR_DQ], c.ref[DR_DK], c.ref[DR_DV], c.ref[DR_DG], c.ref[DR_DB], c.ref[DR_DH0],
                             p->dout, p->dhT, p->q, p->k, p->v, p->g, p->beta, p->h0, p->scale, p->B, p->T, p->H, p->K,
                             p->V, NULL, 0, CHUNK, wc);
    free(wc);
    return c;
}

static void free_case(Case *c) {
    for (int e = 0; e < DR_NOUT; e++) free(c->ref[e]);
    free_dev(&c->d);
    free_prob(&c->p);
}

// The forward and the backward under mask on case c: err[e] (rel_rms against the reference;
// dg 0 where the kind has none).
static void run_case(const Case *c, unsigned mask, double err[DR_NOUT]) {
    const Prob *p = &c->p;
    cuda_delta_precision_audit_mask(mask);
    void *out[DR_NOUT];
    dr_run(D, p, &c->d, 1, 1, out);
    for (int e = 0; e < DR_NOUT; e++) {
        const size_t n = dr_out_len(p, e);
        err[e] = !out[e] ? 0 : dr_out_is_state(e) ? err_f32(out[e], c->ref[e], n) : err_bf16(out[e], c->ref[e], n);
    }
    dr_out_free(out);
    cuda_delta_precision_audit_mask(0);
}

// each error the worst over the cases (verbose: every case's errors printed)
static void run_mask(const Case *cases, int ncases, unsigned mask, double err[DR_NOUT], int verbose) {
    for (int e = 0; e < DR_NOUT; e++) err[e] = 0;
    for (int a = 0; a < ncases; a++) {
        double ea[DR_NOUT];
        run_case(&cases[a], mask, ea);
        if (verbose) {
            printf("    %-14s", cases[a].label);
            for (int e = 0; e < DR_NOUT; e++) printf(" %s %.2e", dr_out_name(e), ea[e]);
            printf("\n");
        }
        for (int e = 0; e < DR_NOUT; e++) err[e] = fmax(err[e], ea[e]);
    }
}

// the largest ratio error / bar over the outputs (within the bars: <= 1)
static double worst(const double err[DR_NOUT], double state_bar) {
    double w = 0;
    for (int e = 0; e < DR_NOUT; e++) w = fmax(w, err[e] / bar(e, state_bar));
    return w;
}

static void mask_label(unsigned mask, char *s, size_t n) {
    if (mask == 0) {
        snprintf(s, n, "none (today)");
        return;
    }
    if (mask == ALL_OPS) {
        snprintf(s, n, "all (one MMA a product)");
        return;
    }
    s[0] = 0;
    for (int o = 0; o < DRS_COUNT; o++)
        if (mask >> o & 1) {
            const size_t l = strlen(s);
            snprintf(s + l, n - l, "%s%s", l ? "," : "", OP_TAG[o]);
        }
}

static void print_header(void) {
    printf("| lo dropped | ");
    for (int e = 0; e < DR_NOUT; e++) printf("%s | ", dr_out_name(e));
    printf("within |\n|---|");
    for (int e = 0; e < DR_NOUT; e++) printf("---|");
    printf("---|\n");
    fflush(stdout);
}

static void print_row(unsigned mask, const double err[DR_NOUT]) {
    char lab[512];
    mask_label(mask, lab, sizeof lab);
    printf("| %s | ", lab);
    for (int e = 0; e < DR_NOUT; e++) printf("%.2e | ", err[e]);
    const char *v = worst(err, BAR_F32) <= 1 ? "all bars" : worst(err, BAR_BF16) <= 1 ? "states > 1e-4" : "no";
    printf("%s |\n", v);
    fflush(stdout);
}

// the largest growth over today's error, in bars, over the outputs
static double growth(const double err[DR_NOUT], const double base[DR_NOUT], double state_bar) {
    double w = 0;
    for (int e = 0; e < DR_NOUT; e++) w = fmax(w, (err[e] - base[e]) / bar(e, state_bar));
    return w;
}

// Greedy: the operands whose solo run is within the bars (state bar sb; worst ratio <= margin),
// in the order of their solo growth over today's errors (base), each added to the subset if the
// subset with it stays within.
static unsigned greedy(const Case *cases, int ncases, const double base[DR_NOUT], const double solo[DRS_COUNT][DR_NOUT],
                       double sb, double margin, int verbose) {
    int order[DRS_COUNT], n = 0;
    for (int o = 0; o < DRS_COUNT; o++)
        if (worst(solo[o], sb) <= margin) order[n++] = o;
    for (int a = 1; a < n; a++)  // insertion sort by the solo growth
        for (int b = a; b > 0 && growth(solo[order[b]], base, sb) < growth(solo[order[b - 1]], base, sb); b--) {
            const int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
    unsigned mask = 0;
    for (int a = 0; a < n; a++) {
        const unsigned m = mask | 1u << order[a];
        double err[DR_NOUT];
        if (a == 0) memcpy(err, solo[order[a]], sizeof err);
        else run_mask(cases, ncases, m, err, verbose);
        const int ok = worst(err, sb) <= margin;
        printf("  + %-8s worst ratio %.3f: %s\n", OP_TAG[order[a]], worst(err, sb), ok ? "kept" : "left");
        fflush(stdout);
        if (ok) mask = m;
    }
    return mask;
}

static void usage(void) {
    printf("usage: audit_delta_rule_precision [--T n] [--H n] [--kind KDA|GDN|DeltaNet ...] [--margin x] "
           "[--verbose] [--mask M ...]\n"
           "  --T, --H   sequence length and heads of every case (default T %d, H %d)\n"
           "  --B, --K, --V  batch, key and value head sizes of every case (default 1, 128, 128)\n"
           "  --kind     the kinds audited, each its own tables, in the order given (default KDA)\n"
           "  --margin   the search keeps a subset whose worst error / bar is <= x (default 1)\n"
           "  --mask M   only these masks (and none): TAG,TAG,.. or all or a number; no search\n"
           "  --verbose  every case's errors\n"
           "operands (TAG: name, where):\n",
#ifdef HYBRID_CUDA_EMU
           256, 1
#else
           1024, 2
#endif
    );
    for (int o = 0; o < DRS_COUNT; o++) printf("  %-7s %-10s %s\n", OP_TAG[o], OP_NAME[o], OP_WHERE[o]);
}

// One kind's tables; returns whether today's kernels are within the bars.
static int audit_kind(LinearKind kind, int T, int H, const unsigned *masks, int nmasks, double margin, int verbose) {
    const int nc = kind == LINEAR_DELTANET ? 1 : 2;
    Case cases[2];
    cases[0] = make_case(nc == 1 ? "no gate" : "fla gates", kind, 0, T, H);
    if (nc == 2) cases[1] = make_case("strong decay", kind, 1, T, H);
    printf("\n%s, B %d, T %d, H %d, K %d, V %d, h0 and dhT given; worst RMS relative error over %s\n",
           kind_name(kind), B_, T, H, K_, V_, nc == 1 ? "the case" : "2 cases (fla gates, strong decay)");
    printf("bars: o %.0e; dq, dk, dv %.0e; dg, dbeta 2e-2; hT, dh0 %.0e (the parity test) or %.0e\n", TOL_OUT,
           TOL_GRAD, BAR_F32, BAR_BF16);
    double err[DR_NOUT], base[DR_NOUT];
    run_mask(cases, nc, 0, base, verbose);
    memcpy(err, base, sizeof err);
    const int today_ok = worst(err, BAR_F32) <= 1;
    if (!today_ok) printf("NOTE: today's kernels (no lo dropped) are outside the bars on these inputs\n");
    print_header();
    print_row(0, err);
    if (nmasks) {
        for (int a = 0; a < nmasks; a++) {
            run_mask(cases, nc, masks[a], err, verbose);
            print_row(masks[a], err);
        }
    } else {
        static double solo[DRS_COUNT][DR_NOUT];
        for (int o = 0; o < DRS_COUNT; o++) {
            run_mask(cases, nc, 1u << o, solo[o], verbose);
            print_row(1u << o, solo[o]);
        }
        run_mask(cases, nc, ALL_OPS, err, verbose);
        print_row(ALL_OPS, err);
        unsigned best[2];
        const double sb[2] = {BAR_F32, BAR_BF16};
        for (int s = 0; s < 2; s++) {
            printf("search, states within %.0e:\n", sb[s]);
            if (worst(err, sb[s]) <= margin) {  // (the whole set passes)
                printf("  all operands within\n");
                best[s] = ALL_OPS;
            } else {
                best[s] = greedy(cases, nc, base, solo, sb[s], margin, verbose);
            }
        }
        printf("\nthe subsets found (states within 1e-4, then 5e-3):\n");
        print_header();
        for (int s = 0; s < 2; s++) {
            run_mask(cases, nc, best[s], err, verbose);
            print_row(best[s], err);
        }
    }
    for (int a = 0; a < nc; a++) free_case(&cases[a]);
    return today_ok;
}

int main(int argc, char **argv) {
#ifdef HYBRID_CUDA_EMU
    int T = 256, H = 1;
#else
    int T = 1024, H = 2;
#endif
    int verbose = 0, nmasks = 0, nkinds = 0;
    LinearKind kinds[3];
    double margin = 1;
    unsigned masks[64] = {0};
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--T") && a + 1 < argc) T = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--H") && a + 1 < argc) H = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--B") && a + 1 < argc) B_ = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--K") && a + 1 < argc) K_ = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--V") && a + 1 < argc) V_ = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--margin") && a + 1 < argc) margin = atof(argv[++a]);
        else if (!strcmp(argv[a], "--kind") && a + 1 < argc && nkinds < 3) {
            const char *k = argv[++a];
            kinds[nkinds++] = !strcmp(k, "KDA") ? LINEAR_KDA : !strcmp(k, "GDN") ? LINEAR_GDN : LINEAR_DELTANET;
            if (strcmp(k, "KDA") && strcmp(k, "GDN") && strcmp(k, "DeltaNet")) {
                usage();
                return 2;
            }
        }
        else if (!strcmp(argv[a], "--verbose")) verbose = 1;
        else if (!strcmp(argv[a], "--mask") && a + 1 < argc && nmasks < 64) masks[nmasks++] = parse_mask(argv[++a], "audit_delta_rule_precision");
        else {
            usage();
            return !strcmp(argv[a], "--help") ? 0 : 2;
        }
    }
    if (T < 1 || H < 1 || B_ < 1 || K_ < 1 || K_ > 256 || V_ < 1 || V_ > 256 || margin <= 0) {
        usage();
        return 2;
    }
    gpu_test_init("audit_delta_rule_precision");
    D = G->delta_rule;
    if (nkinds == 0) kinds[nkinds++] = LINEAR_KDA;
    int ok = 1;
    for (int a = 0; a < nkinds; a++) ok &= audit_kind(kinds[a], T, H, masks, nmasks, margin, verbose);
    gpu_test_summary();
    return ok ? 0 : 1;
}
