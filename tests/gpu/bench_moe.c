// The MoE channel mixer on the CUDA backend, timed for the side-by-side with PyTorch
// (`make bench-moe`; BENCHMARKS.md, "H200: the MoE layer against PyTorch").
//   bench_moe [--config FILE] [--shape config[:N] | C,E,K,M,S,N]... [--reps N] [--warmup N]
//             [--profile-reps N] [--seed S] [--json FILE]
// Default: the config's own MoE shape (configs/kl-s-3-1.conf: d_model, moe_experts, moe_top_k,
// moe_hidden, moe_shared * moe_shared_hidden, N = batch_size * seq_len tokens: one training
// micro-batch) and the large shape 2048,64,8,1024,0,16384 (d 2048, 64 experts, top-8, expert
// hidden 1024, no shared expert, 16384 tokens); 20 timed repetitions after 5 warm-up runs.
//
// What runs, one path with the trainer: the model's own MoE layer functions (model/moe.c
// moe_forward / moe_backward, what model.c's graph calls for a MoE block) on a model of one
// block built from the config with its MoE keys replaced by the shape's (one MLA mixer block,
// whose mixer never runs; dense_first 0, no AttnRes, a 128-token vocabulary: only the MoE
// layer is timed). Every other key (router sigmoid/softmax, renorm, route scale, SwiGLU or
// SiTU, latent dim, balance loss) is the config's. Passes, each repetition timed alone with
// CUDA events on the backend's stream (kernels/timer.cu), median and min in ms:
//   fwd     moe_forward(x) -> out
//   bwd     moe_backward(dout) -> din and the parameter gradients, on the last forward's
//           activations (the gradients are zeroed before each repetition, outside the timer)
//   fwdbwd  both
// Then, on the layer's own buffers after its passes (so the routing is the layer's):
//   experts_fwd/bwd/fwdbwd  the grouped expert op alone (moe_experts_forward / _backward:
//           the grouped GEMMs plus the GLU pass)
//   dense_fwd/bwd/fwdbwd    the dense reference: the backend's cuBLASLt matmul on the same
//           R = N*K rows with one expert's weights: matmul_forward (R,De) x W13_0^T and
//           (R,m) x W2_0^T, matmul_backward of both (dX and dW each): exactly the FLOPs of the
//           routed GEMMs (6 R De m forward, 12 R De m backward), no GLU. Its dW GEMMs write the
//           layer's own gradient tensors, the backend's parameter-gradient type (fp32 on CUDA:
//           kernels/core/matmul.cu's dW GEMM has bf16 A and B, fp32 C = D), as the grouped
//           weight gradients do, so the shares of dense below compare like with like
//   router_matmul           matmul_forward + matmul_backward of the router logits (N, C, E)
// and --profile-reps more forward+backward repetitions of the layer with the backend's op
// timers on (HYBRID_CUDA_PROFILE's events, turned on here with cuda_profile_set; not in the
// timed runs above): the op table and the breakdown
//   router   moe_router_* (+ moe_aux_*) + the router logits matmul (timed alone, above)
//   permute  moe_plan, moe_gather_fwd/bwd
//   experts  moe_experts_fwd/bwd; of which the grouped GEMMs (moe_experts/gemm_*) and the GLU
//   combine  moe_combine_fwd/bwd
//   dense    the other matmuls (shared experts, latent projections) and their glu_*, rmsnorm_*
//   other    the rest (adds, moe_count; in variant A with shared experts the adds are in the
//            combine forward and the gather backward)
// Grouped-GEMM efficiency = dense_fwdbwd median / the grouped GEMM kernels' time per
// forward+backward (profiled), i.e. the fraction of cuBLAS's throughput at the same FLOPs
// (target >= 0.7); the op-level ratio dense_fwdbwd / experts_fwdbwd (GLU pass included) is
// printed beside it. Then each grouped GEMM alone (profiled part moe_experts/gemm_*): ms, GFLOP
// and TFLOP/s, and that rate as a share of the dense fwd+bwd's (JSON: "gemm_tflops"); the
// weight gradients' parts include their split-k reduction (moe_experts/wgrad_reduce).
// The expert GEMMs run by default (HYBRID_MOE_GEMM=mixed) the forward's on our grouped kernels
// and the backward's data gradients on ours or cuBLAS by experts.cu's rule, with
// HYBRID_MOE_GEMM=own all on ours, with HYBRID_MOE_GEMM=cublas the four row GEMMs on cuBLAS's
// grouped batched GEMM and the weight gradients (fp32) one cublasGemmEx per expert
// (kernels/moe/experts_cublas.h; the table's "path" column says which ran where): the same
// moe_experts/gemm_* parts (each includes the cuBLAS path's small pointer-array or offsets-check
// kernel), so the runs' tables compare line by line; the copy of the offsets to the host
// (cublas: one stream synchronization per forward; mixed: issued by the forward, waited for by
// the backward) is the part moe_experts/offsets_to_host, inside the experts op and the layer
// times, not in the GEMMs'.
// The mode is printed at the start and in the JSON ("moe_gemm").
//
// Inputs (scripts/bench_torch_moe.py makes the same distributions): x = randn (N, C) (the
// layer reads the RMSNorm output, unit RMS); dout = randn (N, C); weights by the table's
// init rules (model_init_params: normal(0, init_std), the output projections normal(0,
// init_std / sqrt(2 n_layer)) with n_layer 1; the selection bias zero): a random router, so the
// load is what such a router gives (printed: max and min expert rows over the mean).
//
// Memory (peak_bytes), the MoE layer's backend bytes: its parameters (+ gradients for bwd,
// fwdbwd), its saved activations (moe_layout), x and out (fwd), + its backward scratch, dout
// and din (bwd, fwdbwd). The carrier block's other tensors are not counted.
//
// --json FILE: one record per shape and pass, and one per shape with the breakdown, rewritten
// after every shape so that a run that dies later keeps what it measured.
//
// Under the CPU emulator (HYBRID_CUDA_EMU; `make out/build/emu/bench_moe`) the same program
// runs at tiny shapes with a wall clock: it proves the plumbing, its times mean nothing.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "model/model.h"
#include "train/config.h"
#include "tests/gpu/bench_util.h"

#define MAX_SHAPES 16
typedef struct {
    int from_config;  // 1: the config's MoE keys (N given or batch_size * seq_len)
    int C, E, K, M, S;  // S: shared MLP hidden width (0: none)
    long N;
} Shape;

static const char *const pass_names[] = {"fwd", "bwd", "fwdbwd", "experts_fwd", "experts_bwd", "experts_fwdbwd",
                                         "dense_fwd", "dense_bwd", "dense_fwdbwd", "router_matmul"};
enum { P_FWD, P_BWD, P_FWDBWD, P_EFWD, P_EBWD, P_EFWDBWD, P_DFWD, P_DBWD, P_DFWDBWD, P_ROUTER, NPASS };

static const char *usage =
    "usage: bench_moe [--config FILE] [--shape config[:N] | C,E,K,M,S,N]... [--reps N] [--warmup N]\n"
    "                 [--profile-reps N] [--seed S] [--json FILE]\n"
    "  --config   the model config whose MoE keys and options are used (default configs/kl-s-3-1.conf)\n"
    "  --shape    repeatable. 'config': the config's own MoE shape at batch_size*seq_len tokens;\n"
    "             'config:N' at N tokens; C,E,K,M,S,N: d_model C, E experts, top-K, expert hidden M,\n"
    "             shared MLP hidden S (0: none), N tokens (variant A: no latent)\n"
    "             default: config 2048,64,8,1024,0,16384\n"
    "  --reps     timed repetitions per pass (default 20); --warmup untimed runs before (default 5)\n"
    "  --profile-reps  profiled forward+backward repetitions for the breakdown (default 5; 0: none)\n"
    "  --seed     the inputs' and weights' seed (default 1)\n"
    "  --json     also write the records (scripts/bench_summary_moe.py reads them)\n";

static void bad_arg(const char *fmt, const char *what) { bench_bad_arg("bench_moe", usage, fmt, what); }

static int parse_shape(const char *s, Shape *out) {
    memset(out, 0, sizeof *out);
    if (!strcmp(s, "config")) {
        out->from_config = 1;
        return 1;
    }
    if (!strncmp(s, "config:", 7)) {
        out->from_config = 1;
        return (out->N = bench_parse_int(s + 7, 1, 1L << 30)) > 0;
    }
    long v[6];
    const char *p = s;
    for (int i = 0; i < 6; i++) {
        char buf[32];
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if ((i < 5) != (c != NULL) || len == 0 || len >= sizeof buf) return 0;
        memcpy(buf, p, len);
        buf[len] = 0;
        if ((v[i] = bench_parse_int(buf, i == 4 ? 0 : 1, 1L << 30)) < 0) return 0;
        p = c ? c + 1 : p + len;
    }
    if (v[2] > v[1]) return 0;  // top-k <= experts
    *out = (Shape){0, (int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], v[5]};
    return 1;
}

// ---- inputs: fixed-size blocks, each with its own stream (independent of the thread count) ----
#define FILL_BLOCK 65536
static void fill_normal(float *x, size_t n, uint64_t seed) {
    size_t nb = (n + FILL_BLOCK - 1) / FILL_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        Rng r;
        rng_seed(&r, seed * 0x100000001B3ull + b);
        size_t end = (b + 1) * FILL_BLOCK < n ? (b + 1) * FILL_BLOCK : n;
        for (size_t i = b * FILL_BLOCK; i < end; i++) x[i] = (float)rng_normal(&r);
    }
}

static const Backend *be;

// ---- one shape: the one-block model and the buffers around its MoE layer ----
typedef struct {
    Model m;
    int B, T, N, C, De, E, K, M;
    GluAct act;
    real *x, *out, *dout, *din;  // (N, C)
    real *dlogits_r, *dx_r;      // the router matmul alone: (N, E), (N, C)
} Case;

#define PRM(c, idx) model_tensor(&(c)->m, (c)->m.params, (idx))
#define GRD(c, idx) model_grad(&(c)->m, (idx))  // (grad_size elements: fp32 on CUDA)

static void run_fwd(Case *c) { moe_forward(&c->m, 0, c->out, c->x, c->B, c->T); }
static void run_bwd(Case *c) { moe_backward(&c->m, 0, c->din, c->dout, c->B, c->T); }
static void run_fwdbwd(Case *c) {
    run_fwd(c);
    run_bwd(c);
}
static void zero_grads(Case *c) { model_zero_grad(&c->m); }

// the grouped expert op alone, on the layer's buffers (its last forward's plan and rows)
static void run_efwd(Case *c) {
    const MoeParams *p = &c->m.mp.blocks[0].moe;
    MoeActs *a = &c->m.acts.blocks[0].moe;
    be->moe->moe_experts_forward(a->yp, a->hp, a->ap, a->xp, PRM(c, p->w13), PRM(c, p->w2), a->offsets, c->E, c->De,
                                 c->M, c->act);
}
static void run_ebwd(Case *c) {
    const MoeParams *p = &c->m.mp.blocks[0].moe;
    MoeActs *a = &c->m.acts.blocks[0].moe;
    be->moe->moe_experts_backward(a->dxp, GRD(c, p->w13), GRD(c, p->w2), a->dhp, a->dap, a->dyp, a->xp, a->hp, a->ap,
                                  PRM(c, p->w13), PRM(c, p->w2), a->offsets, c->E, c->De, c->M, c->act);
}
static void run_efwdbwd(Case *c) {
    run_efwd(c);
    run_ebwd(c);
}
// the dense reference: cuBLASLt on all R = N*K rows with expert 0's weights (the same FLOPs)
static void run_dfwd(Case *c) {
    const MoeParams *p = &c->m.mp.blocks[0].moe;
    MoeActs *a = &c->m.acts.blocks[0].moe;
    const int R = c->N * c->K;
    be->core->matmul_forward(a->hp, a->xp, PRM(c, p->w13), NULL, R, c->De, 2 * c->M);
    be->core->matmul_forward(a->yp, a->ap, PRM(c, p->w2), NULL, R, c->M, c->De);
}
static void run_dbwd(Case *c) {
    const MoeParams *p = &c->m.mp.blocks[0].moe;
    MoeActs *a = &c->m.acts.blocks[0].moe;
    const int R = c->N * c->K;
    be->core->matmul_backward(a->dap, GRD(c, p->w2), NULL, a->dyp, a->ap, PRM(c, p->w2), R, c->M, c->De);
    be->core->matmul_backward(a->dxp, GRD(c, p->w13), NULL, a->dhp, a->xp, PRM(c, p->w13), R, c->De, 2 * c->M);
}
static void run_dfwdbwd(Case *c) {
    run_dfwd(c);
    run_dbwd(c);
}
// the router logits matmul, forward and backward, alone (for the breakdown)
static void run_router(Case *c) {
    const MoeParams *p = &c->m.mp.blocks[0].moe;
    MoeActs *a = &c->m.acts.blocks[0].moe;
    be->core->matmul_forward(a->logits, c->x, PRM(c, p->router_w), NULL, c->N, c->C, c->E);
    be->core->matmul_backward(c->dx_r, GRD(c, p->router_w), NULL, c->dlogits_r, c->x, PRM(c, p->router_w), c->N, c->C,
                              c->E);
}

typedef struct {
    const char *name;
    Shape s;
    int pass;
    double median_ms, min_ms;
    size_t peak_bytes;
} Record;

static void time_pass(Case *c, void (*fn)(Case *), void (*pre)(Case *), int warmup, int reps, double *med,
                      double *mn) {
    double *t = xmalloc(sizeof(double) * (size_t)reps);
    for (int i = -warmup; i < reps; i++) {
        if (pre) pre(c);
        bench_timer_start(be);
        fn(c);
        double ms = bench_timer_stop_ms(be);
        if (i >= 0) t[i] = ms;
    }
    bench_median_min(t, reps, med, mn);
    free(t);
}

// ---- the breakdown of the profiled forward+backward repetitions ----
enum { CAT_ROUTER, CAT_PERMUTE, CAT_EXPERTS, CAT_COMBINE, CAT_DENSE, CAT_OTHER, NCAT };
static const char *const cat_names[NCAT] = {"router", "permute", "experts", "combine", "dense", "other"};

#define MAX_OPS 128
typedef struct {
    int n, reps;
    const char *names[MAX_OPS];
    double ms[MAX_OPS];  // per forward+backward
    long calls[MAX_OPS];
    double cat_ms[NCAT], gemm_ms, glu_ms, matmul_ms;  // per forward+backward
    double copy_ms;  // the cuBLAS path's copy of the offsets to the host (moe_experts/offsets_to_host)
    double cublas_calls;  // GEMMs that ran on cuBLAS per forward+backward (6 on that path)
} Profile;

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static int category(const char *op) {
    if (starts(op, "moe_router_") || starts(op, "moe_aux_")) return CAT_ROUTER;
    if (!strcmp(op, "moe_plan") || starts(op, "moe_gather_")) return CAT_PERMUTE;
    if (starts(op, "moe_experts_")) return CAT_EXPERTS;
    if (starts(op, "moe_combine_")) return CAT_COMBINE;
    if (starts(op, "matmul_") || starts(op, "glu_") || starts(op, "rmsnorm_")) return CAT_DENSE;
    return CAT_OTHER;
}

static void profile_layer(Case *c, int reps, double router_ms, Profile *pr) {
    memset(pr, 0, sizeof *pr);
    pr->reps = reps;
    if (reps < 1) return;
    be->synchronize();
    cuda_profile_set(1);
    cuda_profile_reset();
    const long calls0 = cuda_moe_cublas_calls();
    for (int i = 0; i < reps; i++) run_fwdbwd(c);  // (the gradients accumulate: no zeroing op in the table)
    be->synchronize();
    pr->cublas_calls = (double)(cuda_moe_cublas_calls() - calls0) / reps;
    pr->n = cuda_profile_read(pr->names, pr->ms, pr->calls, MAX_OPS);
    printf("the MoE layer's forward+backward, by op (%d profiled repetitions, events around every op: not the "
           "timed runs):\n",
           reps);
    cuda_profile_print(stdout, reps);
    cuda_profile_set(0);
    for (int i = 0; i < pr->n; i++) {
        pr->ms[i] /= reps;
        const char *op = pr->names[i];
        if (strchr(op, '/')) {  // a part, already inside its op
            if (starts(op, "moe_experts/gemm_")) pr->gemm_ms += pr->ms[i];
            else if (starts(op, "moe_experts/glu_")) pr->glu_ms += pr->ms[i];
            else if (!strcmp(op, "moe_experts/offsets_to_host")) pr->copy_ms += pr->ms[i];
            continue;
        }
        if (starts(op, "matmul_")) pr->matmul_ms += pr->ms[i];
        pr->cat_ms[category(op)] += pr->ms[i];
    }
    // the router logits matmul is one of the matmuls: its time (measured alone) moves to the router
    double r = router_ms < pr->matmul_ms ? router_ms : pr->matmul_ms;
    pr->cat_ms[CAT_ROUTER] += r;
    pr->cat_ms[CAT_DENSE] -= r;
}

// ---- the grouped GEMMs one by one (profiled parts moe_experts/gemm_*, kernels/moe/experts.cu) ----
// FLOPs per call in units of R De m (R = N K routed rows, De the expert input width, m the
// expert hidden width): the forward H13 = X W13^T (R, 2m) and Y = A W2^T; the backward dA = dY
// W2, dW2 += dY^T A, dX = dH13 W13, dW13 += dH13^T X. Each runs once per forward+backward.
static const struct {
    const char *part;
    double units;  // FLOPs / (R De m)
} gemm_parts[] = {{"moe_experts/gemm_fwd13", 4},   {"moe_experts/gemm_fwd2", 2},  {"moe_experts/gemm_dgrad2", 2},
                  {"moe_experts/gemm_wgrad2", 2},  {"moe_experts/gemm_dgrad13", 4}, {"moe_experts/gemm_wgrad13", 4}};
#define NGEMM ((int)(sizeof gemm_parts / sizeof gemm_parts[0]))

// the profiled ms of part `name` per forward+backward (-1: not in the profile)
static double part_ms(const Profile *pr, const char *name) {
    for (int i = 0; i < pr->n; i++)
        if (!strcmp(pr->names[i], name)) return pr->ms[i];
    return -1;
}

// one line per grouped GEMM: ms, GFLOP, TFLOP/s (the split-k reduction of a weight gradient
// is inside its part; moe_experts/wgrad_reduce shows its share); tflops[] for the JSON
// path: where the mode sends the GEMM (cuda_moe_gemm_on_cublas, whose GEMM numbering is
// gemm_parts' order; "wgmma": one of ours on the wgmma kernels); operands that do not suit
// cuBLAS (or the wgmma kernels) would run ours (mma.sync) regardless
static void print_gemms(const Profile *pr, double R, int E, int De, int M, double dense_tflops, double tflops[]) {
    if (pr->reps < 1) return;
    printf("%-26s %9s %9s %9s %12s %7s\n", "grouped GEMM (profiled)", "ms", "GFLOP", "TFLOP/s", "of dense", "path");
    for (int g = 0; g < NGEMM; g++) {
        const double ms = part_ms(pr, gemm_parts[g].part), gf = gemm_parts[g].units * R * De * M / 1e9;
        tflops[g] = ms > 0 ? gf / ms : 0;  // GFLOP / ms = TFLOP/s
        printf("%-26s %9.3f %9.2f %9.1f %11.0f%% %7s\n", gemm_parts[g].part + strlen("moe_experts/"), ms, gf,
               tflops[g], dense_tflops > 0 ? 100 * tflops[g] / dense_tflops : 0,
               cuda_moe_gemm_on_cublas(g, E, De, M) ? "cublas" : cuda_moe_wgmma() ? "wgmma" : "own");
    }
    const double red = part_ms(pr, "moe_experts/wgrad_reduce");
    if (red > 0) printf("  (of which the weight gradients' split-k reductions: %.3f ms)\n", red);
}

// ---- output ----
static FILE *json_open(const char *path, int reps, int warmup, int profile_reps, const char *config) {
    FILE *f = xfopen(path, "w");
    fprintf(f, "{\"impl\": \"hybrid.c\", \"emulated\": %s, \"reps\": %d, \"warmup\": %d, \"profile_reps\": %d, "
               "\"config\": \"%s\", \"moe_gemm\": \"%s\", \"moe_wgmma\": %d, \"records\": [\n",
#ifdef HYBRID_CUDA_EMU
            "true",
#else
            "false",
#endif
            reps, warmup, profile_reps, config, cuda_moe_gemm_name(), cuda_moe_wgmma());
    return f;
}

static void json_shape(FILE *f, const Shape *s) {
    fprintf(f, "\"C\": %d, \"E\": %d, \"K\": %d, \"M\": %d, \"S\": %d, \"N\": %ld", s->C, s->E, s->K, s->M, s->S, s->N);
}

typedef struct {
    const char *name;
    Shape s;
    int De, latent;
    double load_max, load_min, flops_fwd;
    Profile prof;
    double gemm_eff, op_eff;
    double gemm_tflops[NGEMM];  // per grouped GEMM (gemm_parts' order), profiled
} ShapeInfo;

static void write_json(const char *path, const Record *rec, int nrec, const ShapeInfo *si, int nsi, int reps,
                       int warmup, int profile_reps, const char *config) {
    FILE *f = json_open(path, reps, warmup, profile_reps, config);
    for (int i = 0; i < nrec; i++) {
        const Record *r = &rec[i];
        fprintf(f, "  {\"name\": \"%s\", ", r->name);
        json_shape(f, &r->s);
        fprintf(f, ", \"pass\": \"%s\", \"status\": \"ok\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"peak_bytes\": %zu}%s\n",
                pass_names[r->pass], r->median_ms, r->min_ms, r->peak_bytes, i + 1 < nrec ? "," : "");
    }
    fprintf(f, "], \"shapes\": [\n");
    for (int i = 0; i < nsi; i++) {
        const ShapeInfo *x = &si[i];
        fprintf(f, "  {\"name\": \"%s\", ", x->name);
        json_shape(f, &x->s);
        fprintf(f, ", \"latent\": %d, \"load_max_over_mean\": %.4f, \"load_min_over_mean\": %.4f, "
                   "\"routed_gemm_flops_fwd\": %.6g, \"routed_gemm_flops_fwdbwd\": %.6g, \"profile_reps\": %d, "
                   "\"grouped_gemm_ms\": %.4f, \"experts_glu_ms\": %.4f, \"grouped_gemm_efficiency\": %.4f, "
                   "\"experts_op_efficiency\": %.4f, \"offsets_to_host_ms\": %.4f, \"cublas_calls\": %.2f, "
                   "\"breakdown_ms\": {",
                x->latent, x->load_max, x->load_min, x->flops_fwd, 3 * x->flops_fwd, x->prof.reps, x->prof.gemm_ms,
                x->prof.glu_ms, x->gemm_eff, x->op_eff, x->prof.copy_ms, x->prof.cublas_calls);
        for (int k = 0; k < NCAT; k++) fprintf(f, "%s\"%s\": %.4f", k ? ", " : "", cat_names[k], x->prof.cat_ms[k]);
        fprintf(f, "}, \"gemm_tflops\": {");
        for (int g = 0; g < NGEMM; g++)
            fprintf(f, "%s\"%s\": %.2f", g ? ", " : "", gemm_parts[g].part + strlen("moe_experts/"),
                    x->gemm_tflops[g]);
        fprintf(f, "}, \"ops_ms\": {");
        for (int k = 0; k < x->prof.n; k++)
            fprintf(f, "%s\"%s\": %.4f", k ? ", " : "", x->prof.names[k], x->prof.ms[k]);
        fprintf(f, "}}%s\n", i + 1 < nsi ? "," : "");
    }
    fprintf(f, "]}\n");
    xfclose(f, path);
}

static void set_int(Config *cfg, const char *key, long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    config_set_override(cfg, key, buf);
}

// The config with the shape's MoE keys, cut to one MLA block of MoE; dies (config_finalize's
// message) on a combination the model refuses.
static void shape_config(Config *cfg, const char *path, Shape *s) {
    config_defaults(cfg);
    config_load_file(cfg, path);
    if (cfg->model.moe_experts < 1) {
        fprintf(stderr, "bench_moe: %s has no MoE (moe_experts = %d)\n", path, cfg->model.moe_experts);
        exit(2);
    }
    if (s->from_config) {
        if (!s->N) s->N = (long)cfg->batch_size * cfg->seq_len;
    } else {
        set_int(cfg, "d_model", s->C);
        set_int(cfg, "moe_experts", s->E);
        set_int(cfg, "moe_top_k", s->K);
        set_int(cfg, "moe_hidden", s->M);
        set_int(cfg, "moe_shared", s->S ? 1 : 0);
        set_int(cfg, "moe_shared_hidden", s->S);
        set_int(cfg, "moe_latent_dim", 0);
    }
    if (s->N * (long)cfg->model.moe_top_k > (1L << 31) - 1) {
        fprintf(stderr, "bench_moe: N * top_k = %ld slots is more than the ops' int indices hold\n",
                s->N * (long)cfg->model.moe_top_k);
        exit(2);
    }
    // rows N = B * T: T = seq_len when it divides N (the trainer's micro-batch), else one row
    int T = cfg->seq_len > 0 && s->N % cfg->seq_len == 0 ? cfg->seq_len : (int)s->N;
    config_set_override(cfg, "layers", "M");
    config_set_override(cfg, "dense_first", "0");
    config_set_override(cfg, "attn_res_block", "0");
    config_set_override(cfg, "vocab_size", "128");
    config_set_override(cfg, "padded_vocab_size", "128");
    config_set_override(cfg, "eot_token", "127");
    set_int(cfg, "context_length", T);
    cfg->batch_size = (int)(s->N / T);
    cfg->seq_len = T;
    config_finalize(cfg);
    const ModelConfig *mc = &cfg->model;
    s->C = mc->d_model;
    s->E = mc->moe_experts;
    s->K = mc->moe_top_k;
    s->M = mc->moe_hidden;
    s->S = mc->moe_shared * mc->moe_shared_hidden;
}

int main(int argc, char **argv) {
    Shape shapes[MAX_SHAPES];
    int nshapes = 0, reps = 20, warmup = 5, profile_reps = 5;
    uint64_t seed = 1;
    const char *json = NULL, *config = "configs/kl-s-3-1.conf";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s", usage);
            return 0;
        }
        if (strcmp(a, "--shape") && strcmp(a, "--config") && strcmp(a, "--reps") && strcmp(a, "--warmup") &&
            strcmp(a, "--profile-reps") && strcmp(a, "--seed") && strcmp(a, "--json"))
            bad_arg("unknown argument '%s'", a);
        if (!val) bad_arg("%s needs a value", a);
        i++;
        if (!strcmp(a, "--shape")) {
            if (nshapes == MAX_SHAPES) bad_arg("at most 16 shapes (%s)", val);
            if (!parse_shape(val, &shapes[nshapes]))
                bad_arg("--shape wants 'config', 'config:N' or six integers C,E,K,M,S,N (positive; S >= 0; "
                        "K <= E), not '%s'",
                        val);
            nshapes++;
        } else if (!strcmp(a, "--config")) {
            FILE *f = fopen(val, "r");
            if (!f) bad_arg("--config: cannot read '%s'", val);
            fclose(f);
            config = val;
        } else if (!strcmp(a, "--reps")) {
            reps = (int)bench_int_option("bench_moe", usage, a, val, 1, 100000);
        } else if (!strcmp(a, "--warmup")) {
            warmup = (int)bench_int_option("bench_moe", usage, a, val, 0, 100000);
        } else if (!strcmp(a, "--profile-reps")) {
            profile_reps = (int)bench_int_option("bench_moe", usage, a, val, 0, 100000);
        } else if (!strcmp(a, "--seed")) {
            seed = (uint64_t)bench_int_option("bench_moe", usage, a, val, 0, 1L << 30);
        } else {
            json = val;
        }
    }
    if (nshapes == 0) {
        parse_shape("config", &shapes[nshapes++]);
        parse_shape("2048,64,8,1024,0,16384", &shapes[nshapes++]);
    }

    if (cuda_device_count() < 1) {
        fprintf(stderr, "bench_moe: no CUDA device visible\n");
        return 1;
    }
    be = backend_cuda();
    cuda_profile_set(0);  // the timed runs go without the op timers (HYBRID_CUDA_PROFILE or not)

#ifdef HYBRID_CUDA_EMU
    printf("bench_moe: CPU EMULATOR BUILD (HYBRID_CUDA_EMU): wall-clock times of the emulated kernels; they say "
           "nothing about GPU speed. This run checks the program's plumbing only.\n");
#endif
    printf("hybrid.c MoE layer (model/moe.c on the CUDA backend), bf16, config %s; %d timed repetitions after %d "
           "warm-up, each timed alone (%s); seed %llu\n",
           config, reps, warmup,
#ifdef HYBRID_CUDA_EMU
           "wall clock",
#else
           "CUDA events on the backend's stream",
#endif
           (unsigned long long)seed);
    printf("expert GEMMs: %s (HYBRID_MOE_GEMM=mixed, the default: the forward on ours, the backward's data "
           "gradients on ours or cuBLAS by kernels/moe/experts.cu's rule, the offsets' copy issued by the forward "
           "and waited for by a backward that calls cuBLAS; "
           "=own: our grouped kernels; =cublas: the four row GEMMs on cuBLAS's grouped batched GEMM, which copies "
           "the offsets to the host once per forward; the weight gradients, fp32, on ours in every mode)\n",
           cuda_moe_gemm_name());
    printf("GEMMs of ours on wgmma: %s (HYBRID_MOE_WGMMA=auto, the default, on compute capability 9.0, or =1: "
           "the sm_90a warpgroup-MMA kernels, kernels/moe/experts_wg.cu; =0: mma.sync)\n",
           cuda_moe_wgmma() ? "yes" : "no");
    static const char *const ws_names[] = {"0", "rows", "all", "auto"};
    printf("wgmma GEMMs warp-specialized: HYBRID_MOE_WG_WS=%s (auto, the default: every row GEMM with the plain store, "
           "weights and whole tiles' rows by TMA, stored staged; 0: none, one role a thread; rows: the row GEMMs on a producer "
           "warpgroup and two consumers, kernels/moe/grouped_gemm_ws.cuh; all: our weight gradients too; launches "
           "counted at the end); by TMA under rows and all: HYBRID_MOE_WG_TMA=%d (0: nothing; 1: the weights; 2: the "
           "weights and whole tiles' rows, and under all the weight gradients' whole k-steps)\n",
           ws_names[cuda_moe_wg_ws()], cuda_moe_wg_tma());
    printf("their plain store under rows and all: HYBRID_MOE_WG_WS_STORE=%s (direct, the default: from registers; "
           "staged: through shared memory in 16-byte row segments)\n",
           cuda_moe_wg_ws_staged() ? "staged" : "direct");
    printf("inputs: x, dout randn (N, C); weights by the init rules (random router, natural load)\n");

    Record *rec = xmalloc(sizeof(Record) * (size_t)nshapes * NPASS);
    ShapeInfo *info = xcalloc((size_t)nshapes, sizeof(ShapeInfo));
    int nrec = 0, nbad = 0;
    for (int si = 0; si < nshapes; si++) {
        Shape s = shapes[si];
        Config cfg;
        shape_config(&cfg, config, &s);
        const ModelConfig *mc = &cfg.model;
        const char *name = s.from_config ? "config" : (s.C == 2048 && s.E == 64 && s.K == 8 && s.M == 1024 && s.S == 0 &&
                                                       s.N == 16384)
                                                          ? "large"
                                                          : "custom";
        Case c;
        memset(&c, 0, sizeof c);
        c.B = cfg.batch_size;
        c.T = cfg.seq_len;
        c.N = (int)s.N;
        c.C = s.C;
        c.E = s.E;
        c.K = s.K;
        c.M = s.M;
        c.De = mc->moe_latent_dim ? mc->moe_latent_dim : s.C;
        c.act = model_glu_act(mc);
        model_create(&c.m, mc, be, c.B, c.T);
        if (!c.m.mp.blocks[0].moe_layer) die("bench_moe: the one-block model has no MoE layer");
        uint64_t base = seed * 1000003ull + (uint64_t)si * 16;
        model_init_params(&c.m, (unsigned long)base);
        const size_t nc = (size_t)c.N * c.C;
        float *h = xmalloc(sizeof(float) * nc);
        c.x = be->alloc(nc * be->elem_size);
        c.dout = be->alloc(nc * be->elem_size);
        c.out = be->alloc(nc * be->elem_size);
        c.din = be->alloc(nc * be->elem_size);
        c.dx_r = be->alloc(nc * be->elem_size);
        c.dlogits_r = be->alloc((size_t)c.N * c.E * be->elem_size);
        fill_normal(h, nc, base + 1), be->upload(c.x, h, nc);
        fill_normal(h, nc, base + 2), be->upload(c.dout, h, nc);
        {
            float *g = xmalloc(sizeof(float) * (size_t)c.N * c.E);
            fill_normal(g, (size_t)c.N * c.E, base + 3), be->upload(c.dlogits_r, g, (size_t)c.N * c.E);
            free(g);
        }

        // the MoE layer's bytes: parameters, their gradients (grad_size elements), saved activations,
        // backward scratch (moe_layout counted)
        size_t pbytes = 0, gbytes = 0;
        for (int i = 0; i < c.m.table.count; i++)
            if (strstr(c.m.table.items[i].name, ".moe.")) {
                pbytes += c.m.table.items[i].numel * be->elem_size;
                gbytes += c.m.table.items[i].numel * be->grad_size;
            }
        Carver cv = {NULL, 0, be->elem_size, be->stat_size}, sc = {NULL, 0, be->elem_size, be->stat_size};
        MoeActs tmp;
        memset(&tmp, 0, sizeof tmp);
        moe_layout(&c.m, &cv, &sc, &tmp);
        const size_t io = nc * be->elem_size;
        size_t need[NPASS] = {0};
        need[P_FWD] = pbytes + cv.used + 2 * io;
        need[P_BWD] = pbytes + gbytes + cv.used + sc.used + 3 * io;
        need[P_FWDBWD] = pbytes + gbytes + cv.used + sc.used + 4 * io;

        printf("\n== %s: C %d, E %d, top-%d, expert hidden %d, shared hidden %d%s, N %d tokens (%d x %d), %s router%s, "
               "%s\n",
               name, c.C, c.E, c.K, c.M, s.S, mc->moe_latent_dim ? " (latent variant B)" : "", c.N, c.B, c.T,
               mc->moe_router ? "softmax" : "sigmoid", mc->moe_renorm ? " renormalised" : "",
               mc->mlp == MLP_SITU ? "SiTU" : "SwiGLU");
        printf("%-16s %10s %10s %11s\n", "pass", "median ms", "min ms", "memory MiB");
        void (*fns[NPASS])(Case *) = {run_fwd,     run_bwd,  run_fwdbwd, run_efwd,    run_ebwd,
                                      run_efwdbwd, run_dfwd, run_dbwd,   run_dfwdbwd, run_router};
        double med[NPASS], mn[NPASS];
        ShapeInfo *x = &info[si];
        x->name = name;
        x->s = s;
        x->De = c.De;
        x->latent = mc->moe_latent_dim;
        for (int p = 0; p < NPASS; p++) {
            if (p == P_EFWD) {  // the load of the layer's routing (its last forward's plan)
                int *off = xmalloc(sizeof(int) * (size_t)(c.E + 1));
                be->copy_to_host(off, c.m.acts.blocks[0].moe.offsets, sizeof(int) * (size_t)(c.E + 1));
                double mean = (double)off[c.E] / c.E;
                long mx = 0, mnn = off[c.E];
                for (int e = 0; e < c.E; e++) {
                    long n = off[e + 1] - off[e];
                    mx = n > mx ? n : mx;
                    mnn = n < mnn ? n : mnn;
                }
                x->load_max = mx / mean;
                x->load_min = mnn / mean;
                printf("load: %d slots over %d experts, max %.2fx and min %.2fx the mean\n", off[c.E], c.E, x->load_max,
                       x->load_min);
                free(off);
            }
            int grads = p == P_BWD || p == P_FWDBWD || p == P_EBWD || p == P_EFWDBWD || p == P_DBWD || p == P_DFWDBWD;
            time_pass(&c, fns[p], grads ? zero_grads : NULL, warmup, reps, &med[p], &mn[p]);
            Record *r = &rec[nrec++];
            *r = (Record){name, s, p, med[p], mn[p], need[p]};
            if (need[p]) printf("%-16s %10.3f %10.3f %11.1f\n", pass_names[p], med[p], mn[p], mib(need[p]));
            else printf("%-16s %10.3f %10.3f %11s\n", pass_names[p], med[p], mn[p], "-");
            fflush(stdout);
            if (p == P_FWDBWD) {  // a sanity look: a benchmark of a layer that writes NaN measures nothing
                be->download(h, c.out, nc);
                size_t bad = count_nonfinite(h, nc);
                be->download(h, c.din, nc);
                bad += count_nonfinite(h, nc);
                if (bad) {
                    printf("WARNING: %zu non-finite values in out and din: these times are of a broken layer\n", bad);
                    nbad++;
                }
            }
        }
        // FLOPs of the routed GEMMs: rows R = N*K, forward 2 R De 2m + 2 R m De
        const double R = (double)c.N * c.K;
        x->flops_fwd = 6.0 * R * c.De * c.M;
        profile_layer(&c, profile_reps, med[P_ROUTER], &x->prof);
        x->op_eff = med[P_DFWDBWD] / med[P_EFWDBWD];
        x->gemm_eff = x->prof.gemm_ms > 0 ? med[P_DFWDBWD] / x->prof.gemm_ms : 0;
        printf("routed expert GEMMs: %.3g GFLOP per forward+backward; dense cuBLAS at those FLOPs %.3f ms (%.1f "
               "TFLOP/s)\n",
               3 * x->flops_fwd / 1e9, med[P_DFWDBWD], 3 * x->flops_fwd / (med[P_DFWDBWD] * 1e9));
        if (x->prof.reps > 0) {
            printf("grouped GEMMs (%s, profiled) %.3f ms (%.1f TFLOP/s): efficiency %.2f of dense (target >= "
                   "0.70: %s); the GLU passes %.3f ms; the offsets' copy to the host %.3f ms\n",
                   cuda_moe_gemm_name(), x->prof.gemm_ms, x->prof.gemm_ms > 0 ? 3 * x->flops_fwd / (x->prof.gemm_ms * 1e9) : 0, x->gemm_eff,
#ifdef HYBRID_CUDA_EMU
                   "no verdict under the emulator",
#else
                   x->gemm_eff >= 0.7 ? "met" : "NOT met",
#endif
                   x->prof.glu_ms, x->prof.copy_ms);
            if (strcmp(cuda_moe_gemm_name(), "own")) {  // (a GEMM whose operands do not suit cuBLAS runs ours)
                int want = 0;
                for (int g = 0; g < NGEMM; g++) want += cuda_moe_gemm_on_cublas(g, c.E, c.De, c.M);
                printf("GEMM calls on cuBLAS per forward+backward: %.1f of 6 (a weight gradient's per-expert calls "
                       "count one), the mode sends %d there%s\n",
                       x->prof.cublas_calls, want,
                       x->prof.cublas_calls < want ? " (the others ran our kernels: see kernels/moe/experts_cublas.h)"
                                                   : "");
            }
            print_gemms(&x->prof, R, c.E, c.De, c.M, 3 * x->flops_fwd / (med[P_DFWDBWD] * 1e9), x->gemm_tflops);
            printf("breakdown per forward+backward (profiled):");
            for (int k = 0; k < NCAT; k++) printf(" %s %.3f ms%s", cat_names[k], x->prof.cat_ms[k], k + 1 < NCAT ? "," : "");
            printf("\n  (router: its ops + the logits matmul timed alone, %.3f ms; dense: the other matmuls, "
                   "the shared experts' GLU and any latent norm)\n",
                   med[P_ROUTER]);
        }
        printf("experts op (GEMMs + GLU) %.3f ms: op-level efficiency %.2f of the dense GEMMs\n", med[P_EFWDBWD],
               x->op_eff);
        printf("memory MiB: the MoE layer's parameters %.1f, their gradients %.1f, saved activations %.1f, backward "
               "scratch %.1f\n",
               mib(pbytes), mib(gbytes), mib(cv.used), mib(sc.used));
        if (json) write_json(json, rec, nrec, info, si + 1, reps, warmup, profile_reps, config);
        real *bufs[] = {c.x, c.dout, c.out, c.din, c.dx_r, c.dlogits_r};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(bufs[i]);
        model_destroy(&c.m);
        free(h);
    }
    printf("\nmemory MiB: the MoE layer's backend bytes per pass (parameters, saved activations, x and out; bwd "
           "and fwdbwd + gradients, backward scratch, dout and din)\n");
#ifdef HYBRID_CUDA_EMU
    printf("(CPU emulator: these times mean nothing)\n");
#endif
    printf("warp-specialized GEMM launches: %ld (row GEMMs with TMA: %ld, with the rows by TMA too: %ld; stored "
           "staged: %ld; weight gradients by TMA: %ld)\n",
           cuda_moe_wg_ws_launches(), cuda_moe_wg_tma_launches(), cuda_moe_wg_tma_rows_launches(),
           cuda_moe_wg_ws_staged_launches(), cuda_moe_wg_tma_wgrad_launches());
    if (json) printf("wrote %s\n", json);
    free(rec);
    free(info);
    return nbad ? 1 : 0;
}
