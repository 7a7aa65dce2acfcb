// The chunkwise delta rule on the CUDA backend, KDA and GDN, timed for the side-by-side with
// fla (`make bench-kda`; BENCHMARKS.md, "H200: chunkwise KDA and GDN against fla").
//   bench_delta_rule [--shape B,T,H,K,V]... [--kinds kda,gdn] [--arith split,bf16] [--reps N]
//                    [--warmup N] [--chunk C] [--seed S] [--json FILE] [--conv B,T,D,W]...
// Default shapes (issue 15): 8,4096,16,128,128  2,16384,16,128,128  64,1024,6,128,128 (the
// training shape); both kinds; both arithmetics; 20 timed repetitions after 5 warm-up runs;
// chunk 64.
//
// --arith: the tensor-core kernels' arithmetic, each case run in every one listed: split (the hi +
// lo products, HYBRID_DR_BF16=0) and bf16 (one bf16 MMA a product, fla's and the default,
// HYBRID_DR_BF16=1); this program sets the variable for each run (docs/delta-rule.md, "One MMA a
// product"). The records say which.
//
// What runs: the table's delta_chunk_forward (fwd), delta_chunk_backward (bwd: it recomputes
// the forward, so it needs only the inputs and dout) and the two back to back (fwdbwd), each
// repetition timed alone with CUDA events on the backend's stream (kernels/timer.cu); the
// median and the minimum in ms. No initial state, no final state (h0, hT, dhT, dh0 NULL),
// scale K^-0.5, one workspace of max(forward, backward) bytes (as model/mixer_linear_params.c).
//
// Inputs, bf16 on the device, made as fla's own tests make them (scripts/bench_fla_kda.py makes
// the same distributions for fla): q, k = randn rows, each L2-normalised over K; v = randn;
// beta = sigmoid(randn); g = logsigmoid(randn) per channel (KDA, fla tests/ops/test_kda.py),
// logsigmoid(uniform[0,1)) per head (GDN, fla tests/ops/test_gdn.py); dout = randn.
//
// Memory (peak_bytes): the backend memory each pass needs: inputs q, k, v, g, beta, plus
//   fwd: o and the workspace; bwd: dout, dq, dk, dv, dg, dbeta and the workspace; fwdbwd: all
// of them. The fwdbwd number is what the backend holds while it runs (checked against
// cuda_memory_stats); scratch_get buffers (not backend allocations) are not in it, so the
// device memory in use is printed too.
//
// --json FILE: one record per kind, shape, arithmetic and pass (median_ms, min_ms, peak_bytes), rewritten
// after every case so that a run that dies later keeps what it measured.
//
// --conv B,T,D,W (repeatable): the short causal convolution with SiLU instead (the KDA layer's
// q/k/v convolution: model/mixer_linear.c calls it once per tensor, no bias, no states; the 3:1
// hybrid's shape is --conv 64,1024,768,4): short_conv_forward (fwd) and short_conv_backward
// (bwd: dx and dw += ...), each timed alone, the median and minimum ms and GB/s of the bytes
// they must move (fwd: x read, y written, 4 B*T*D bytes; bwd: x, dy read, dx written, 6 B*T*D;
// the dw partials not counted). With --conv and no --shape only the convolutions run; --json
// records the chunkwise cases only. HYBRID_CONV_REF=1 times the general kernels instead.
//
// Under the CPU emulator (HYBRID_CUDA_EMU; `make out/build/emu/bench_delta_rule`) the same
// program runs at tiny shapes with a wall clock: it proves the plumbing, its times mean nothing.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"
#include "kernels/cuda_backend.h"
#include "model/backend.h"
#include "tests/gpu/bench_util.h"
#include "model/ops/delta_rule/delta_rule.h"


#define MAX_SHAPES 16
typedef struct {
    int B, T, H, K, V;
} Shape;

static const Shape default_shapes[] = {{8, 4096, 16, 128, 128}, {2, 16384, 16, 128, 128}, {64, 1024, 6, 128, 128}};

static const char *const pass_names[3] = {"fwd", "bwd", "fwdbwd"};

static const char *usage =
    "usage: bench_delta_rule [--shape B,T,H,K,V]... [--kinds kda,gdn] [--arith split,bf16] [--reps N]\n"
    "                        [--warmup N] [--chunk C] [--seed S] [--json FILE] [--conv B,T,D,W]...\n"
    "  --shape   repeatable; default: 8,4096,16,128,128 2,16384,16,128,128 64,1024,6,128,128\n"
    "  --kinds   comma-separated subset of kda,gdn (default kda,gdn)\n"
    "  --arith   comma-separated subset of split,bf16 (default split,bf16): the split hi + lo products\n"
    "            (HYBRID_DR_BF16=0), one bf16 MMA a product (=1, the kernels' default); set here for each run\n"
    "  --reps    timed repetitions per pass (default 20); --warmup untimed runs before (default 5)\n"
    "  --chunk   chunk size (default 64, fla's); --seed the inputs' seed (default 1)\n"
    "  --json    also write one record per kind, shape, arithmetic and pass (bench_summary_kda.py reads it)\n"
    "  --conv    repeatable: time the short convolution + SiLU forward and backward at B,T,D,W instead\n"
    "            (with --shape too: both); the 3:1 hybrid's: 64,1024,768,4\n";

static void bad_arg(const char *fmt, const char *what) { bench_bad_arg("bench_delta_rule", usage, fmt, what); }

static int parse_shape(const char *s, Shape *out) {
    long v[5];
    const char *p = s;
    for (int i = 0; i < 5; i++) {
        char buf[32];
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if ((i < 4) != (c != NULL) || len == 0 || len >= sizeof buf) return 0;
        memcpy(buf, p, len);
        buf[len] = 0;
        if ((v[i] = bench_parse_int(buf, 1, 1L << 30)) < 0) return 0;
        p = c ? c + 1 : p + len;
    }
    // the ops take int shapes and index B*T*H*max(K,V) elements: keep that product in range
    double n = (double)v[0] * (double)v[1] * (double)v[2] * (double)(v[3] > v[4] ? v[3] : v[4]);
    if (n > 4e9 || (double)v[0] * (double)v[1] > 2e9) return 0;
    *out = (Shape){(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4]};
    return 1;
}

// ---- inputs: fixed-size blocks, each with its own stream, so the numbers do not depend on
// ---- the number of OpenMP threads
#define FILL_BLOCK 65536
enum { DIST_NORMAL, DIST_SIGMOID_NORMAL, DIST_LOGSIGMOID_NORMAL, DIST_LOGSIGMOID_UNIFORM };

static double logsigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }

static void fill(float *x, size_t n, int dist, uint64_t seed) {
    size_t nb = (n + FILL_BLOCK - 1) / FILL_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nb; b++) {
        Rng r;
        rng_seed(&r, seed * 0x100000001B3ull + b);
        size_t end = (b + 1) * FILL_BLOCK < n ? (b + 1) * FILL_BLOCK : n;
        for (size_t i = b * FILL_BLOCK; i < end; i++) {
            double u;
            switch (dist) {
            case DIST_NORMAL: u = rng_normal(&r); break;
            case DIST_SIGMOID_NORMAL: u = 1.0 / (1.0 + exp(-rng_normal(&r))); break;
            case DIST_LOGSIGMOID_NORMAL: u = logsigmoid(rng_normal(&r)); break;
            default: u = logsigmoid(rng_uniform(&r)); break;
            }
            x[i] = (float)u;
        }
    }
}

// each row of D values scaled to unit L2 norm (fla: F.normalize(x, p=2, dim=-1))
static void l2_normalise_rows(float *x, size_t rows, int D) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float *p = x + r * (size_t)D;
        double s = 0;
        for (int i = 0; i < D; i++) s += (double)p[i] * p[i];
        double inv = 1.0 / (sqrt(s) > 1e-12 ? sqrt(s) : 1e-12);
        for (int i = 0; i < D; i++) p[i] = (float)(p[i] * inv);
    }
}

// ---- backend memory, counted: the bytes this program holds now ----
static const Backend *be;
static size_t g_held;

typedef struct {
    void *p;
    size_t bytes;
} Buf;

static Buf balloc(size_t bytes) {
    Buf b = {be->alloc(bytes), bytes ? bytes : 1};  // the backend allocates at least one byte
    g_held += b.bytes;
    return b;
}
static void bfree(Buf *b) {
    if (!b->p) return;
    be->free(b->p);
    g_held -= b->bytes;
    b->p = NULL;
}
static Buf upload_new(const float *h, size_t n) {
    Buf b = balloc(n * be->elem_size);
    be->upload((real *)b.p, h, n);
    return b;
}


// ---- one kind at one shape ----
typedef struct {
    const DeltaRuleOps *t;
    LinearKind kind;
    Shape s;
    int chunk;
    float scale;
    Buf q, k, v, g, beta, o, dout, dq, dk, dv, dg, dbeta, ws;
} Case;

static void run_fwd(void *arg) {
    Case *c = arg;
    const Shape *s = &c->s;
    c->t->delta_chunk_forward(c->kind, (real *)c->o.p, NULL, (const real *)c->q.p, (const real *)c->k.p,
                              (const real *)c->v.p, (const real *)c->g.p, (const real *)c->beta.p, NULL, c->scale,
                              s->B, s->T, s->H, s->K, s->V, NULL, s->B, c->chunk, c->ws.p);
}
static void run_bwd(void *arg) {
    Case *c = arg;
    const Shape *s = &c->s;
    c->t->delta_chunk_backward(c->kind, (real *)c->dq.p, (real *)c->dk.p, (real *)c->dv.p, (real *)c->dg.p,
                               (real *)c->dbeta.p, NULL, (const real *)c->dout.p, NULL, (const real *)c->q.p,
                               (const real *)c->k.p, (const real *)c->v.p, (const real *)c->g.p,
                               (const real *)c->beta.p, NULL, c->scale, s->B, s->T, s->H, s->K, s->V, NULL, s->B,
                               c->chunk, c->ws.p);
}
static void run_fwdbwd(void *c) {
    run_fwd(c);
    run_bwd(c);
}

static const char *const arith_names[2] = {"split", "bf16"};

typedef struct {
    const char *kind;
    Shape s;
    int arith;  // 0 split, 1 bf16 (arith_names)
    int pass;
    double median_ms, min_ms;
    size_t peak_bytes, device_used_bytes;
} Record;

// One pass (fn on its case c) timed: warmup runs, then reps timed alone; median and min in ms
static void time_pass(void *c, void (*fn)(void *), int warmup, int reps, double *med, double *mn) {
    double *t = xmalloc(sizeof(double) * (size_t)reps);
    for (int i = -warmup; i < reps; i++) {
#ifndef HYBRID_CUDA_EMU
        if (i == 0 && cuda_profile_enabled()) cuda_profile_reset();  // the timed repetitions only
#endif
        bench_timer_start(be);
        fn(c);
        double ms = bench_timer_stop_ms(be);
        if (i >= 0) t[i] = ms;
    }
#ifndef HYBRID_CUDA_EMU
    // HYBRID_CUDA_PROFILE=1: each op and kernel per repetition (the events between kernels cost a
    // little: take the medians from a run without it)
    if (cuda_profile_enabled()) cuda_profile_print(stdout, reps);
#endif
    bench_median_min(t, reps, med, mn);
    free(t);
}

// the JSON file, rewritten after every case: a run that dies later keeps what it measured
static void write_json(const char *path, const Record *rec, int nrec, int reps, int warmup, int chunk) {
    FILE *f = xfopen(path, "w");
    fprintf(f, "{\"impl\": \"hybrid.c\", \"emulated\": %s, \"reps\": %d, \"warmup\": %d, \"chunk\": %d, "
               "\"records\": [\n",
#ifdef HYBRID_CUDA_EMU
            "true",
#else
            "false",
#endif
            reps, warmup, chunk);
    for (int i = 0; i < nrec; i++) {
        const Record *r = &rec[i];
        fprintf(f,
                "  {\"kind\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, \"K\": %d, \"V\": %d, \"pass\": \"%s\", "
                "\"arith\": \"%s\", \"status\": \"ok\", \"median_ms\": %.4f, \"min_ms\": %.4f, \"peak_bytes\": %zu, "
                "\"device_used_bytes\": %zu}%s\n",
                r->kind, r->s.B, r->s.T, r->s.H, r->s.K, r->s.V, pass_names[r->pass], arith_names[r->arith],
                r->median_ms, r->min_ms, r->peak_bytes, r->device_used_bytes, i + 1 < nrec ? "," : "");
    }
    fprintf(f, "]}\n");
    xfclose(f, path);
}

static inline double gib(size_t b) { return b / 1073741824.0; }

// ---- the short convolution (--conv) ----
typedef struct {
    int B, T, D, W;
} ConvShape;

static int parse_conv(const char *s, ConvShape *out) {
    long v[4];
    char extra;
    if (sscanf(s, "%ld,%ld,%ld,%ld%c", &v[0], &v[1], &v[2], &v[3], &extra) != 4) return 0;
    for (int i = 0; i < 4; i++)
        if (v[i] < 1 || v[i] > (1L << 30)) return 0;
    if (v[3] > 64 || (double)v[0] * v[1] * v[2] > 4e9) return 0;
    out->B = (int)v[0], out->T = (int)v[1], out->D = (int)v[2], out->W = (int)v[3];
    return 1;
}

typedef struct {
    const DeltaRuleOps *t;
    ConvShape s;
    Buf x, w, y, dy, dx, dw;
} ConvCase;

static void conv_fwd(void *arg) {
    ConvCase *c = arg;
    const ConvShape *s = &c->s;
    c->t->short_conv_forward((real *)c->y.p, NULL, (const real *)c->x.p, (const real *)c->w.p, NULL, NULL, s->B, s->T,
                             s->D, s->W, NULL, 0, 1);
}
static void conv_bwd(void *arg) {
    ConvCase *c = arg;
    const ConvShape *s = &c->s;
    c->t->short_conv_backward((real *)c->dx.p, (real *)c->dw.p, NULL, NULL, (const real *)c->dy.p, NULL,
                              (const real *)c->x.p, (const real *)c->w.p, NULL, NULL, s->B, s->T, s->D, s->W, NULL, 0,
                              1);
}

static void run_conv(const DeltaRuleOps *t, ConvShape s, int warmup, int reps, uint64_t seed) {
    const size_t n = (size_t)s.B * s.T * s.D, nw = (size_t)s.D * s.W;
    float *h = xmalloc(sizeof(float) * n);
    ConvCase c = {0};
    c.t = t;
    c.s = s;
    fill(h, n, DIST_NORMAL, seed * 7919 + 1), c.x = upload_new(h, n);
    fill(h, n, DIST_NORMAL, seed * 7919 + 2), c.dy = upload_new(h, n);
    fill(h, nw, DIST_NORMAL, seed * 7919 + 3);
    for (size_t i = 0; i < nw; i++) h[i] *= 0.5f;
    c.w = upload_new(h, nw);
    // dw is a parameter gradient: grad_size bytes an element (model/backend.h)
    c.y = balloc(n * be->elem_size), c.dx = balloc(n * be->elem_size), c.dw = balloc(nw * be->grad_size);
    backend_grad_zero(be, (real *)c.dw.p, nw);
    char shape[64];
    snprintf(shape, sizeof shape, "%d,%d,%d,%d", s.B, s.T, s.D, s.W);
    void (*fns[2])(void *) = {conv_fwd, conv_bwd};
    const double bytes[2] = {4.0 * n, 6.0 * n};
    for (int p = 0; p < 2; p++) {
        double med, mn;
        time_pass(&c, fns[p], warmup, reps, &med, &mn);
        printf("conv %-22s %-7s %10.3f %10.3f %9.0f\n", shape, p ? "bwd" : "fwd", med, mn, bytes[p] / (med * 1e6));
        fflush(stdout);
    }
    be->download(h, (const real *)c.y.p, n);
    size_t bad = count_nonfinite(h, n);
    be->download(h, (const real *)c.dx.p, n);
    bad += count_nonfinite(h, n);
    if (bad) printf("     WARNING: %zu non-finite values in y and dx: these times are of a broken kernel\n", bad);
    Buf *all[] = {&c.x, &c.w, &c.y, &c.dy, &c.dx, &c.dw};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bfree(all[i]);
    free(h);
}

int main(int argc, char **argv) {
    Shape shapes[MAX_SHAPES];
    ConvShape convs[MAX_SHAPES];
    int nconvs = 0;
    int nshapes = 0, reps = 20, warmup = 5, chunk = DELTA_DEFAULT_CHUNK, want_kda = 1, want_gdn = 1;
    int want_arith[2] = {1, 1};  // split, bf16
    uint64_t seed = 1;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s", usage);
            return 0;
        }
        if (strcmp(a, "--shape") && strcmp(a, "--kinds") && strcmp(a, "--arith") && strcmp(a, "--reps") &&
            strcmp(a, "--warmup") && strcmp(a, "--chunk") && strcmp(a, "--seed") && strcmp(a, "--json") &&
            strcmp(a, "--conv"))
            bad_arg("unknown argument '%s'", a);
        if (!val) bad_arg("%s needs a value", a);
        i++;
        if (!strcmp(a, "--shape")) {
            if (nshapes == MAX_SHAPES) bad_arg("at most 16 shapes (%s)", val);
            if (!parse_shape(val, &shapes[nshapes]))
                bad_arg("--shape wants five positive integers B,T,H,K,V (B*T*H*max(K,V) <= 4e9), not '%s'", val);
            nshapes++;
        } else if (!strcmp(a, "--conv")) {
            if (nconvs == MAX_SHAPES) bad_arg("at most 16 convolution shapes (%s)", val);
            if (!parse_conv(val, &convs[nconvs]))
                bad_arg("--conv wants four positive integers B,T,D,W (W <= 64, B*T*D <= 4e9), not '%s'", val);
            nconvs++;
        } else if (!strcmp(a, "--kinds")) {
            want_kda = want_gdn = 0;
            char buf[64];
            if (strlen(val) >= sizeof buf) bad_arg("--kinds: '%s' is not a list of kda,gdn", val);
            strcpy(buf, val);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (!strcmp(tok, "kda")) want_kda = 1;
                else if (!strcmp(tok, "gdn")) want_gdn = 1;
                else bad_arg("--kinds: unknown kind '%s' (kda, gdn)", tok);
            }
            if (!want_kda && !want_gdn) bad_arg("--kinds: no kind in '%s'", val);
        } else if (!strcmp(a, "--arith")) {
            want_arith[0] = want_arith[1] = 0;
            char buf[64];
            if (strlen(val) >= sizeof buf) bad_arg("--arith: '%s' is not a list of split,bf16", val);
            strcpy(buf, val);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                if (!strcmp(tok, "split")) want_arith[0] = 1;
                else if (!strcmp(tok, "bf16")) want_arith[1] = 1;
                else bad_arg("--arith: unknown arithmetic '%s' (split, bf16)", tok);
            }
            if (!want_arith[0] && !want_arith[1]) bad_arg("--arith: none in '%s'", val);
        } else if (!strcmp(a, "--reps")) {
            reps = (int)bench_int_option("bench_delta_rule", usage, a, val, 1, 100000);
        } else if (!strcmp(a, "--warmup")) {
            warmup = (int)bench_int_option("bench_delta_rule", usage, a, val, 0, 100000);
        } else if (!strcmp(a, "--chunk")) {
            chunk = (int)bench_int_option("bench_delta_rule", usage, a, val, 1, 1024);
        } else if (!strcmp(a, "--seed")) {
            seed = (uint64_t)bench_int_option("bench_delta_rule", usage, a, val, 0, 1L << 30);
        } else {
            json = val;
        }
    }
    if (nshapes == 0 && nconvs == 0) {
        nshapes = (int)(sizeof default_shapes / sizeof default_shapes[0]);
        memcpy(shapes, default_shapes, sizeof default_shapes);
    }

    if (cuda_device_count() < 1) {
        fprintf(stderr, "bench_delta_rule: no CUDA device visible\n");
        return 1;
    }
    be = backend_cuda();
    const DeltaRuleOps *t = be->delta_rule;
    size_t live0, peak0, used0, total;
    cuda_memory_stats(&live0, &peak0, &used0, &total);

#ifdef HYBRID_CUDA_EMU
    printf("bench_delta_rule: CPU EMULATOR BUILD (HYBRID_CUDA_EMU): wall-clock times of the emulated kernels; "
           "they say nothing about GPU speed. This run checks the program's plumbing only.\n");
#endif
    if (nconvs) {
        printf("hybrid.c short causal convolution + SiLU (CUDA delta-rule table), bf16, no bias, no states; %d timed "
               "repetitions after %d warm-up, each timed alone%s\n",
               reps, warmup, getenv("HYBRID_CONV_REF") ? " (HYBRID_CONV_REF set: the general kernels if it is 1)" : "");
        printf("%-4s %-22s %-7s %10s %10s %9s\n", "op", "B,T,D,W", "pass", "median ms", "min ms", "GB/s");
        for (int i = 0; i < nconvs; i++) run_conv(t, convs[i], warmup, reps, seed);
        printf("GB/s: fwd 4 B*T*D bytes (x read, y written), bwd 6 B*T*D (x, dy read, dx written) over the median\n");
        if (nshapes == 0) return 0;
    }
    printf("hybrid.c chunkwise delta rule (CUDA delta-rule table), bf16 inputs, chunk %d, no h0/hT; %d timed "
           "repetitions after %d warm-up, each timed alone (%s)\n",
           chunk, reps, warmup,
#ifdef HYBRID_CUDA_EMU
           "wall clock");
#else
           "CUDA events on the backend's stream");
#endif
    printf("inputs: q,k randn rows L2-normalised; v randn; beta sigmoid(randn); g logsigmoid(randn) per channel "
           "(KDA), logsigmoid(U[0,1)) per head (GDN); dout randn; scale K^-0.5; seed %llu\n",
           (unsigned long long)seed);
    if (getenv("HYBRID_DR_BF16"))
        printf("note: HYBRID_DR_BF16 is set in the environment; --arith decides each run's value instead\n");
    printf("%-4s %-22s %-6s %-7s %10s %10s %11s\n", "kind", "B,T,H,K,V", "arith", "pass", "median ms", "min ms",
           "memory MiB");

    Record *rec = xmalloc(sizeof(Record) * (size_t)nshapes * 2 * 2 * 3);
    int nrec = 0;
    for (int si = 0; si < nshapes; si++) {
        Shape s = shapes[si];
        size_t rows = (size_t)s.B * s.T * s.H, nk = rows * (size_t)s.K, nv = rows * (size_t)s.V;
        float *h = xmalloc(sizeof(float) * (nk > nv ? nk : nv));
        for (int ki = 0; ki < 2; ki++) {
            if ((ki == 0 && !want_kda) || (ki == 1 && !want_gdn)) continue;
            Case c = {0};
            c.t = t;
            c.kind = ki == 0 ? LINEAR_KDA : LINEAR_GDN;
            c.s = s;
            c.chunk = chunk;
            c.scale = 1.0f / sqrtf((float)s.K);
            const char *kname = ki == 0 ? "kda" : "gdn";
            size_t ng = ki == 0 ? nk : rows;  // KDA g (B,T,H,K); GDN g (B,T,H)
            // the same numbers for both kinds except g (seeds per tensor and shape)
            uint64_t base = seed * 1000003ull + (uint64_t)si * 16;
            fill(h, nk, DIST_NORMAL, base + 1), l2_normalise_rows(h, rows, s.K), c.q = upload_new(h, nk);
            fill(h, nk, DIST_NORMAL, base + 2), l2_normalise_rows(h, rows, s.K), c.k = upload_new(h, nk);
            fill(h, nv, DIST_NORMAL, base + 3), c.v = upload_new(h, nv);
            fill(h, rows, DIST_SIGMOID_NORMAL, base + 4), c.beta = upload_new(h, rows);
            fill(h, ng, ki == 0 ? DIST_LOGSIGMOID_NORMAL : DIST_LOGSIGMOID_UNIFORM, base + 5 + (uint64_t)ki);
            c.g = upload_new(h, ng);
            fill(h, nv, DIST_NORMAL, base + 7), c.dout = upload_new(h, nv);
            size_t in_bytes = c.q.bytes + c.k.bytes + c.v.bytes + c.g.bytes + c.beta.bytes;
            c.o = balloc(nv * be->elem_size);
            c.dq = balloc(nk * be->elem_size);
            c.dk = balloc(nk * be->elem_size);
            c.dv = balloc(nv * be->elem_size);
            c.dg = balloc(ng * be->elem_size);
            c.dbeta = balloc(rows * be->elem_size);
            size_t wf = t->linear_workspace_size(c.kind, 0, s.B, s.T, s.H, s.K, s.V, s.B, chunk);
            size_t wb = t->linear_workspace_size(c.kind, 1, s.B, s.T, s.H, s.K, s.V, s.B, chunk);
            c.ws = balloc(wf > wb ? wf : wb);
            size_t grads = c.dq.bytes + c.dk.bytes + c.dv.bytes + c.dg.bytes + c.dbeta.bytes;
            size_t need[3] = {in_bytes + c.o.bytes + wf, in_bytes + c.dout.bytes + grads + wb, g_held};
#ifndef HYBRID_CUDA_EMU  // (the emulator's free does not give its bytes back to the count)
            size_t live, peak, used;
            cuda_memory_stats(&live, &peak, &used, &total);
            if (live - live0 != g_held)
                printf("note: the backend holds %zu bytes more than this program allocated\n", live - live0 - g_held);
#endif
            void (*fns[3])(void *) = {run_fwd, run_bwd, run_fwdbwd};
            for (int ar = 0; ar < 2; ar++) {
                if (!want_arith[ar]) continue;
                setenv("HYBRID_DR_BF16", ar ? "1" : "0", 1);  // (read by the kernels' entries at each call)
                for (int p = 0; p < 3; p++) {
                    Record *r = &rec[nrec++];
                    r->kind = kname;
                    r->s = s;
                    r->arith = ar;
                    r->pass = p;
                    time_pass(&c, fns[p], warmup, reps, &r->median_ms, &r->min_ms);
                    r->peak_bytes = need[p];
                    size_t l, pk, u, tot;
                    cuda_memory_stats(&l, &pk, &u, &tot);
                    r->device_used_bytes = u;
                    char shape[48];
                    snprintf(shape, sizeof shape, "%d,%d,%d,%d,%d", s.B, s.T, s.H, s.K, s.V);
                    printf("%-4s %-22s %-6s %-7s %10.3f %10.3f %11.1f\n", kname, shape, arith_names[ar], pass_names[p],
                           r->median_ms, r->min_ms, mib(r->peak_bytes));
                    fflush(stdout);
                }
                // a sanity look at the results: a benchmark of a kernel that writes NaN measures nothing
                be->download(h, (const real *)c.o.p, nv);
                size_t bad = count_nonfinite(h, nv);
                be->download(h, (const real *)c.dq.p, nk);
                bad += count_nonfinite(h, nk);
                if (bad)
                    printf("     WARNING: %zu non-finite values in o and dq (%s): these times are of a broken kernel\n",
                           bad, arith_names[ar]);
            }
            printf("     workspace: forward %.1f MiB, backward %.1f MiB", mib(wf), mib(wb));
#ifndef HYBRID_CUDA_EMU
            printf("; device in use %.2f GiB (context, libraries and scratch included)", gib(rec[nrec - 1].device_used_bytes));
#endif
            printf("\n");
            if (json) write_json(json, rec, nrec, reps, warmup, chunk);
            Buf *all[] = {&c.q, &c.k, &c.v, &c.g, &c.beta, &c.o, &c.dout, &c.dq, &c.dk, &c.dv, &c.dg, &c.dbeta, &c.ws};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) bfree(all[i]);
        }
        free(h);
    }
    printf("memory MiB: the backend memory the pass needs (inputs q,k,v,g,beta; fwd + o + workspace; bwd + dout + "
           "dq,dk,dv,dg,dbeta + workspace; fwdbwd all of it)\n");
#ifdef HYBRID_CUDA_EMU
    printf("(CPU emulator: these times mean nothing)\n");
#endif

    if (json) printf("wrote %s\n", json);
    free(rec);
    return 0;
}
