// Bit hashes of every output of the tensor-core chunkwise delta rule (the table's forward and
// backward: o, hT, dq, dk, dv, dg, dbeta, dh0) over a fixed set of cases, to show that two
// builds of the kernels compute the same bits (docs/delta-rule.md, "Accuracy: the per-operand
// audit"). Linked two ways: with the normal kernels (`make out/build/emu/hash_delta_rule`) and
// with the kernels built under -DHYBRID_DR_PRECISION_AUDIT (`make
// out/build/emu/hash_delta_rule_audit`), where --mask M zeroes the lo parts of the operands in M
// (kernels/delta_rule/split_operand.h's tags, a number, or "all") as the audit program does.
// E.g. the rewrite that dropped the lo parts of eight operands from the gradient kernels
// (branch dr-fewer-mma) was checked by running this program with the audit build of the kernels
// before it under the mask of those operands and with the normal build after it: every line the
// same (docs/delta-rule.md, "Fewer MMAs: the audit's droppable operands").
// Each line: the case, the output, an FNV-1a hash of its bits and one with -0 folded to +0 (a
// difference in the sign of zero alone shows as a first hash that differs and a second that
// does not). --alt also runs each backward under HYBRID_DR_GRAD_REF=1 (the single gradient
// kernel) and each forward and backward under HYBRID_DR_DELTA_F32=1 (the fp32 Delta layout); the
// single gradient kernel has the split arithmetic only, so --alt wants HYBRID_DR_BF16=0 (the
// kernels' default is one bf16 MMA a product) and says so otherwise. The hashes are of the
// arithmetic the environment selects: compare two builds with HYBRID_DR_BF16 set explicitly.
// Not a test (no bars): the GPU build works too, for comparing two GPU builds.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "model/backend.h"
#include "model/ops/delta_rule/delta_rule.h"
#define GPU_HARNESS_NO_CHECKS  // (no check counters: not a test)
#include "tests/gpu/harness.h"
#include "tests/gpu/delta_rule_prob.h"
#include "tests/gpu/split_operand_mask.h"

// defined by chunk_fwd_mma.cu under HYBRID_DR_PRECISION_AUDIT only (weak: NULL in a normal build)
extern void cuda_delta_precision_audit_mask(unsigned mask) __attribute__((weak));

static const DeltaRuleOps *D;

// FNV-1a over the bits of n floats; fold: -0 hashed as +0
static uint64_t hash_f32(const float *x, size_t n, int fold) {
    uint64_t h = 1469598103934665603ull;
    for (size_t a = 0; a < n; a++) {
        uint32_t u;
        memcpy(&u, &x[a], 4);
        if (fold && u == 0x80000000u) u = 0;
        for (int b = 0; b < 4; b++) {
            h ^= (u >> (8 * b)) & 0xffu;
            h *= 1099511628211ull;
        }
    }
    return h;
}

// the forward (when fwd_too) and the backward of one case under the current environment, each
// output's two hashes; with_state: h0, dhT given
static void run(const Prob *p, const DevIn *d, int with_state, const char *label, int fwd_too) {
    void *out[DR_NOUT];
    dr_run(D, p, d, fwd_too, with_state, out);
    for (int e = 0; e < DR_NOUT; e++) {
        if (!out[e]) continue;
        const size_t n = dr_out_len(p, e);
        float *x = dr_out_is_state(e) ? get_f32((const float *)out[e], n) : get_bf16(out[e], n);
        printf("%-44s %-6s %016llx %016llx\n", label, dr_out_name(e), (unsigned long long)hash_f32(x, n, 0),
               (unsigned long long)hash_f32(x, n, 1));
        free(x);
    }
    dr_out_free(out);
    fflush(stdout);
}

static void run_case(LinearKind kind, int B, int T, int H, int K, int V, const int *offsets, int nseq, int strong,
                     int with_state, int alt) {
    strong_decay = strong;
    Prob p = make_prob(kind, offsets ? 1 : B, offsets ? offsets[nseq] : T, H, K, V, offsets, nseq);
    strong_decay = 0;
    DevIn d = upload(&p);
    char label[128];
    snprintf(label, sizeof label, "%s B%d T%d H%d K%d V%d%s%s%s", kind_name(kind), p.B, p.T, H, K, V,
             offsets ? " varlen" : "", strong ? " strong" : "", with_state ? " h0,dhT" : "");
    run(&p, &d, with_state, label, 1);
    if (alt) {
        static const char *const ENV[2][2] = {{"HYBRID_DR_GRAD_REF", "ref"}, {"HYBRID_DR_DELTA_F32", "f32"}};
        for (int a = 0; a < 2; a++) {
            char l2[160];
            snprintf(l2, sizeof l2, "%s [%s]", label, ENV[a][1]);
            setenv(ENV[a][0], "1", 1);
            run(&p, &d, with_state, l2, a == 1);
            unsetenv(ENV[a][0]);
        }
    }
    free_dev(&d);
    free_prob(&p);
}

int main(int argc, char **argv) {
    unsigned mask = 0;
    int alt = 0;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--mask") && a + 1 < argc) mask = parse_mask(argv[++a], "hash_delta_rule");
        else if (!strcmp(argv[a], "--alt")) alt = 1;
        else {
            printf("usage: hash_delta_rule [--mask TAG,TAG,..|all|N] [--alt]\n");
            return !strcmp(argv[a], "--help") ? 0 : 2;
        }
    }
    const char *arith = getenv("HYBRID_DR_BF16");
    if ((alt || mask) && !(arith && !strcmp(arith, "0"))) {
        // (the audit's lo masks and the single gradient kernel exist in the split arithmetic only)
        fprintf(stderr, "hash_delta_rule: --%s needs the split arithmetic: run with HYBRID_DR_BF16=0 (the kernels' "
                        "default is one bf16 MMA a product)\n", alt ? "alt" : "mask");
        return 2;
    }
    if (mask && !cuda_delta_precision_audit_mask) {
        fprintf(stderr, "hash_delta_rule: --mask needs the audit build (hash_delta_rule_audit)\n");
        return 2;
    }
    gpu_test_init("hash_delta_rule");
    D = G->delta_rule;
    if (cuda_delta_precision_audit_mask) cuda_delta_precision_audit_mask(mask);
    printf("mask 0x%x\n", mask);
    static const int off_small[] = {0, 0, 5, 70, 70, 71, 150, 150};
    const LinearKind kinds[3] = {LINEAR_KDA, LINEAR_GDN, LINEAR_DELTANET};
    for (int a = 0; a < 3; a++) {
        const LinearKind kd = kinds[a];
        run_case(kd, 2, 130, 2, 32, 32, NULL, 0, 0, 1, alt);
        run_case(kd, 2, 130, 2, 32, 32, NULL, 0, 0, 0, 0);  // h0, dhT NULL
        run_case(kd, 2, 130, 2, 32, 32, NULL, 0, 1, 1, 0);  // strong decay
        run_case(kd, 2, 70, 2, 20, 13, NULL, 0, 0, 1, 0);   // K, V not multiples of 8
        run_case(kd, 2, 70, 2, 13, 16, NULL, 0, 0, 1, 0);   // K odd
        run_case(kd, 1, 0, 2, 16, 32, off_small, 7, 0, 1, 0);
        run_case(kd, 1, 100, 2, 64, 64, NULL, 0, 0, 1, 0);
        run_case(kd, 1, 130, 1, 128, 128, NULL, 0, 0, 1, alt);
        run_case(kd, 1, 130, 1, 128, 128, NULL, 0, 1, 1, 0);
        run_case(kd, 1, 128, 1, 128, 128, NULL, 0, 1, 1, alt);  // whole chunks only (dr_full_chunks)
        run_case(kd, 1, 70, 1, 256, 64, NULL, 0, 1, 1, alt);
    }
    gpu_test_summary();
    return 0;
}
