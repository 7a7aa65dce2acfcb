// Data parallelism end to end (docs/distributed.md, "Tests (`make test`, CPU, MPI)"; issue 8):
// the double-precision CLI ($BUILD/hybrid_f64) under `mpirun --oversubscribe`, so that any
// difference larger than double rounding is a bug, not float noise. One global batch, split
// 1, 2 or 4 ways:
//   - DP (replicated AdamW), ZeRO-1 and Muon with whole-matrix ownership give the losses
//     and gradient norms of the 1-rank run to 1e-9 relative (the metrics print 9 digits)
//     and the same final weights and optimizer state: the checkpoints store float32, so
//     the bound is 2e-7 of each tensor's largest magnitude (a rounding step of float);
//   - expert parallelism (ep 2, ep 2 x dp 2; AdamW and Muon) on a tiny MoE hybrid gives the same numbers
//     (gradient norms included: each sharded expert counts once), each rank holding only
//     its experts; an ep 2 checkpoint resumes on 1 rank (ep 1) and an ep 1 checkpoint on
//     ep 2, continuing as the uninterrupted 1-rank run; ZeRO-1 with sharded experts is refused;
//   - a run stopped and resumed under MPI continues exactly as the uninterrupted one;
//     a 2-rank checkpoint resumes on 1 rank with the same global micro-batch;
//   - ranks that disagree on the config or the data fail at start with a message on
//     every rank; a rank that dies (a bad token id in its slice) takes the job down
//     instead of leaving the others waiting; a rank that hangs makes the others time out;
//     SIGTERM to mpirun stops every rank after the same step with one checkpoint.
// Skipped where mpirun or the MPI build is missing ("skipped: ...", exit status 77: run_all.sh
// counts it).
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/config.h"
#include "train/checkpoint_config.h"
#include "checkpoints/checkpoint.h"
#include "cli_util.h"
#include "dist/dist.h"
#include "model/params.h"
#include "testing.h"

#define DIR_ "out/test-tmp/dist-cli"
// ASAN_OPTIONS: under `make test SANITIZE=1` the ranks are not leak-checked, because Open
// MPI leaves allocations at exit in plugins it has unloaded (no suppression can name them);
// memory errors are still caught, and the same trainer code is leak-checked in the
// single-process CLI tests.
#define MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 " \
               "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 timeout 300 mpirun --oversubscribe "
// global micro-batch 4 x 32 tokens; batch_size = 4 / ranks
// (a key may be given once on the command line: TINY_BASE leaves out the keys that some runs
// change, and TINY adds their usual values)
#define TINY_BASE                                                                                   \
    " train configs/gpt2-tiny.conf --layers 'A x2' --d_model 32 --n_head 2 --vocab_size 64 "       \
    "--padded_vocab_size 0 --context_length 32 --seq_len 32 --total_batch_size 256 "               \
    "--warmup_steps 2 --val_every 3 --val_batches 2 --sample_tokens 4 --threads 1 "
#define TRAIN_DATA "--train_data '" DIR_ "/data/train_*.bin' "
#define VAL_DATA "--val_data '" DIR_ "/data/val_*.bin' "
#define TINY TINY_BASE "--steps 6 --lr 1e-2 --log_every 1 " TRAIN_DATA VAL_DATA

static char g_bin[512];

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[4096], full[4600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s > %s/last.log 2>&1", cmd, DIR_);
    int rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static char *log_text(void) {
    char *t = read_file(DIR_ "/last.log", NULL);
    return t ? t : xstrdup("");
}

// The last log for a CHECK message (kept until the next call, so nothing leaks).
static const char *logged(void) {
    static char *last;
    free(last);
    last = log_text();
    return last;
}

// Every number after `key` in a metrics log, in order.
static int numbers(const char *path, const char *key, double *out, int cap) {
    char *text = read_file(path, NULL);
    if (!text) return 0;
    int n = 0;
    for (char *p = strstr(text, key); p && n < cap; p = strstr(p + 1, key)) out[n++] = atof(p + strlen(key));
    free(text);
    return n;
}

// Largest relative difference of the values of `key` between two metrics logs (1e9 when
// the counts differ).
static double metric_diff(const char *a, const char *b, const char *key, int *count) {
    double x[256], y[256];
    int n = numbers(a, key, x, 256), m = numbers(b, key, y, 256);
    *count = n;
    if (n != m || n == 0) return 1e9;
    double worst = 0;
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(x[i] - y[i]) / fmax(fabs(x[i]), 1e-30));
    return worst;
}

typedef struct {
    ParamTable t;
    ModelParams mp;
    float *p, *m, *v;
    TrainerState ts;
} Ckpt;

static void load(Ckpt *c, const char *dir) {
    Config cfg;
    checkpoint_read_config(dir, &cfg);
    params_build(&cfg.model, &c->t, &c->mp);
    c->p = xmalloc(sizeof(float) * c->t.total);
    c->m = xmalloc(sizeof(float) * c->t.total);
    c->v = xmalloc(sizeof(float) * c->t.total);
    checkpoint_load(dir, &c->t, c->p, c->m, c->v, &c->ts);
}

static void unload(Ckpt *c) {
    free(c->p);
    free(c->m);
    free(c->v);
    params_free(&c->t, &c->mp);
}

// Worst per-tensor difference over weights, m and v, each relative to the tensor's
// largest magnitude.
static double ckpt_diff(const char *da, const char *db, char *where, size_t cap) {
    Ckpt a, b;
    load(&a, da);
    load(&b, db);
    double worst = a.t.total == b.t.total ? 0 : 1e9;
    for (int i = 0; i < a.t.count && worst < 1e9; i++) {
        const ParamInfo *pi = &a.t.items[i];
        const float *xa[3] = {a.p, a.m, a.v}, *xb[3] = {b.p, b.m, b.v};
        for (int k = 0; k < 3; k++) {
            double scale = 0, d = 0;
            for (size_t j = pi->offset; j < pi->offset + pi->numel; j++) {
                scale = fmax(scale, fabs(xa[k][j]));
                d = fmax(d, fabs((double)xa[k][j] - xb[k][j]));
            }
            double rel = scale > 0 ? d / scale : d;
            if (rel > worst) {
                worst = rel;
                snprintf(where, cap, "%s (%s)", pi->name, k == 0 ? "weights" : k == 1 ? "m" : "v");
            }
        }
    }
    unload(&a);
    unload(&b);
    return worst;
}


// `run` against the 1-rank reference `ref`: losses, norms, val losses, final checkpoint.
static void same_as(const char *ref, const char *other, const char *what) {
    char ma[256], mb[256], where[160] = "";
    snprintf(ma, sizeof ma, DIR_ "/%s/metrics.jsonl", ref);
    snprintf(mb, sizeof mb, DIR_ "/%s/metrics.jsonl", other);
    int n = 0, nv = 0, nn = 0;
    double dl = metric_diff(ma, mb, "\"loss\": ", &n), dn = metric_diff(ma, mb, "\"grad_norm\": ", &nn),
           dv = metric_diff(ma, mb, "\"val_loss\": ", &nv);
    CHECK(n == 6 && dl <= 1e-9, "%s: losses differ from the 1-rank run by %.3g relative (%d steps)", what, dl, n);
    CHECK(nn == 6 && dn <= 1e-9, "%s: gradient norms differ by %.3g relative", what, dn);
    CHECK(nv == 2 && dv <= 1e-9, "%s: val losses differ by %.3g relative (%d passes)", what, dv, nv);
    char ca[256], cb[256];
    snprintf(ca, sizeof ca, DIR_ "/%s/checkpoints/step_00000006", ref);
    snprintf(cb, sizeof cb, DIR_ "/%s/checkpoints/step_00000006", other);
    double dc = ckpt_diff(ca, cb, where, sizeof where);
    CHECK(dc <= 2e-7, "%s: final checkpoint differs by %.3g of the tensor scale at %s", what, dc, where);
    printf("  %-40s loss %.1e  norm %.1e  val %.1e  checkpoint %.1e\n", what, dl, dn, dv, dc);
}

// A run stopped and resumed against the uninterrupted one (float CLI, whose checkpoints hold
// the whole state): the same metrics lines and a bit-identical final checkpoint.
static void same_resumed(const char *full, const char *resumed, const char *what) {
    char ma[256], mb[256], where[160] = "";
    snprintf(ma, sizeof ma, DIR_ "/%s/metrics.jsonl", full);
    snprintf(mb, sizeof mb, DIR_ "/%s/metrics.jsonl", resumed);
    char *a = cli_stable_lines(ma), *b = cli_stable_lines(mb);
    CHECK(!strcmp(a, b), "%s: the resumed run differs from the uninterrupted one:\n%s---\n%s", what, a, b);
    free(a);
    free(b);
    snprintf(ma, sizeof ma, DIR_ "/%s/checkpoints/step_00000006", full);
    snprintf(mb, sizeof mb, DIR_ "/%s/checkpoints/step_00000006", resumed);
    double dc = ckpt_diff(ma, mb, where, sizeof where);
    CHECK(dc == 0, "%s: the resumed run's final checkpoint differs by %.3g at %s", what, dc, where);
    printf("  %-40s bit-identical metrics and checkpoint\n", what);
}

static int train(int ranks, const char *out, const char *extra) {
    return run(MPIRUN "-np %d %s" TINY "--batch_size %d --out_dir " DIR_ "/%s %s", ranks, g_bin, 4 / ranks, out,
               extra);
}

int main(void) {
    const char *build = getenv("BUILD") ? getenv("BUILD") : "out/build";
    snprintf(g_bin, sizeof g_bin, "%s/hybrid_f64", build);
    if (file_exists(g_bin)) {  // the double build is the CPU reference: it has no CUDA and says so
        remove_tree(DIR_);
        cli_make_markov_shards(DIR_, 64);
        CHECK(run("%s" TINY "--batch_size 4 --device cuda --out_dir " DIR_ "/f64cuda", g_bin) == 1 &&
                  strstr(logged(), "this is the double-precision CPU reference build, which has no CUDA"),
              "hybrid_f64 --device cuda should refuse with a message:\n%s", logged());
    }
    if (!dist_mpi_available() || system("command -v mpirun > /dev/null 2>&1") != 0) {
        TEST_MAIN_SKIP("the distributed runs: this build has no MPI or mpirun is missing (Debian: libopenmpi-dev "
                       "openmpi-bin)");
    }
    if (!file_exists(g_bin)) {
        CHECK(0, "%s is not built (make %s)", g_bin, g_bin);
        TEST_MAIN_END();
    }
    remove_tree(DIR_);
    cli_make_markov_shards(DIR_, 64);

    // ---- data parallel, ZeRO-1, Muon: 1 rank vs 2 and 4 ----
    const char *shuffled = "--shuffle true --seed 7";
    CHECK(train(1, "adamw1", shuffled) == 0, "1-rank run failed:\n%s", logged());
    CHECK(train(2, "adamw2", shuffled) == 0, "2-rank run failed:\n%s", logged());
    char *out = log_text();
    CHECK(strstr(out, "distributed: 2 rank(s) over mpi") != NULL, "no distributed banner:\n%s", out);
    free(out);
    CHECK(train(4, "adamw4", shuffled) == 0, "4-rank run failed:\n%s", logged());
    CHECK(train(2, "zero2", "--shuffle true --seed 7 --zero true") == 0, "ZeRO-1 run failed:\n%s", logged());
    CHECK(train(4, "zero4", "--shuffle true --seed 7 --zero true") == 0, "ZeRO-1 4-rank run failed:\n%s", logged());
    same_as("adamw1", "adamw2", "DP 2 ranks (AdamW)");
    same_as("adamw1", "adamw4", "DP 4 ranks (AdamW)");
    same_as("adamw1", "zero2", "ZeRO-1 2 ranks");
    same_as("adamw1", "zero4", "ZeRO-1 4 ranks");
    const char *muon = "--optimizer muon --lr_matrix 2e-2";
    CHECK(train(1, "muon1", muon) == 0, "1-rank Muon run failed:\n%s", logged());
    CHECK(train(2, "muon2", muon) == 0, "2-rank Muon run failed:\n%s", logged());
    CHECK(train(4, "muon4", muon) == 0, "4-rank Muon run failed:\n%s", logged());
    same_as("muon1", "muon2", "Muon 2 ranks (matrices by owner)");
    same_as("muon1", "muon4", "Muon 4 ranks (matrices by owner)");
    // a sanity check of the comparison itself: a different lr must show up
    CHECK(run(MPIRUN "-np 2 %s" TINY_BASE "--steps 6 --lr 9e-3 " TRAIN_DATA VAL_DATA
                     "--batch_size 2 --out_dir " DIR_ "/other --shuffle true --seed 7",
              g_bin) == 0,
          "lr run failed");
    int n;
    double d = metric_diff(DIR_ "/adamw1/metrics.jsonl", DIR_ "/other/metrics.jsonl", "\"loss\": ", &n);
    CHECK(d > 1e-6, "a run with another lr should differ, but differs by only %.3g", d);

    // ---- expert parallelism: a tiny KM hybrid with MoE and AttnRes, ep 2 (2 ranks) and
    // ep 2 x dp 2 (4 ranks) against 1 rank; the expert loads and bias updates are global ----
    const char *moe = " train configs/hybrid-tiny.conf --layers 'KM' --d_model 32 --n_head 2 --vocab_size 64 "
                      "--padded_vocab_size 0 --context_length 32 --seq_len 32 --total_batch_size 256 --steps 6 "
                      "--warmup_steps 2 --mlp_hidden 64 --mla_kv_rank 16 --mla_qk_nope_dim 8 --mla_rope_dim 4 "
                      "--mla_v_dim 8 --moe_experts 4 --moe_top_k 2 --moe_hidden 16 --moe_shared_hidden 32 "
                      "--val_every 3 --val_batches 2 --log_every 1 --sample_tokens 4 --threads 1 "
                      "--train_data '" DIR_ "/data/train_*.bin' --val_data '" DIR_ "/data/val_*.bin' ";
    CHECK(run(MPIRUN "-np 1 %s%s --batch_size 4 --out_dir " DIR_ "/moe1", g_bin, moe) == 0, "1-rank MoE run failed:\n%s",
          logged());
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moe2ep2 --expert_parallel 2", g_bin, moe) == 0,
          "ep 2 run failed:\n%s", logged());
    out = log_text();
    CHECK(strstr(out, "expert_parallel 2") != NULL, "no EP banner:\n%s", out);
    CHECK(strstr(out, "experts: sharded over expert_parallel 2: each rank holds 2 of 4 experts per MoE layer") != NULL,
          "no expert-sharding line:\n%s", out);
    free(out);
    CHECK(run(MPIRUN "-np 4 %s%s --batch_size 1 --out_dir " DIR_ "/moe4ep2 --expert_parallel 2", g_bin, moe) == 0,
          "ep 2 x dp 2 run failed:\n%s", logged());
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moe2ep1", g_bin, moe) == 0, "dp 2 MoE run failed:\n%s",
          logged());
    same_as("moe1", "moe2ep1", "MoE hybrid, DP 2 (ep 1)");
    same_as("moe1", "moe2ep2", "MoE hybrid, EP 2");
    same_as("moe1", "moe4ep2", "MoE hybrid, EP 2 x DP 2");
    // Muon on sharded experts: every rank orthogonalises its own experts' blocks
    CHECK(run(MPIRUN "-np 1 %s%s --batch_size 4 --out_dir " DIR_ "/moemuon1 %s", g_bin, moe, muon) == 0,
          "1-rank MoE Muon run failed:\n%s", logged());
    CHECK(run(MPIRUN "-np 4 %s%s --batch_size 1 --out_dir " DIR_ "/moemuon4 --expert_parallel 2 %s", g_bin, moe, muon) ==
              0,
          "ep 2 x dp 2 Muon run failed:\n%s", logged());
    same_as("moemuon1", "moemuon4", "MoE hybrid, Muon, EP 2 x DP 2");
    {
        int n1 = 0, n2 = 0;
        double dl = metric_diff(DIR_ "/moe1/metrics.jsonl", DIR_ "/moe2ep2/metrics.jsonl", "\"moe_load_max\": ", &n1);
        double dm = metric_diff(DIR_ "/moe1/metrics.jsonl", DIR_ "/moe4ep2/metrics.jsonl", "\"moe_load_cv\": ", &n2);
        CHECK(n1 == 6 && dl == 0 && n2 == 6 && dm <= 1e-9, "expert loads differ from the 1-rank run: %.3g, %.3g", dl, dm);
    }
    // checkpoints hold every expert whatever the EP size. An ep 2 checkpoint at step 3
    // continues on 1 rank as it does on ep 2, and a 1-rank one continues on ep 2 as on 1 rank
    // (double CLI: the same start, only the order of the sums differs) ...
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moeA --expert_parallel 2 --stop_at_step 3", g_bin,
              moe) == 0,
          "ep 2 run to step 3 failed:\n%s", logged());
    CHECK(run("mkdir -p " DIR_ "/moeA1 && cp " DIR_ "/moeA/metrics.jsonl " DIR_ "/moeA1/") == 0, "copy failed");
    CHECK(run(MPIRUN "-np 1 %s%s --batch_size 4 --out_dir " DIR_ "/moeA1 --resume " DIR_ "/moeA/checkpoints/step_00000003",
              g_bin, moe) == 0,
          "1-rank resume of an ep 2 checkpoint failed:\n%s", logged());
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moeA --expert_parallel 2 --resume auto", g_bin, moe) == 0,
          "ep 2 resume failed:\n%s", logged());
    same_as("moeA", "moeA1", "MoE: ep 2 checkpoint resumed on 1 rank");
    CHECK(run(MPIRUN "-np 1 %s%s --batch_size 4 --out_dir " DIR_ "/moeB --stop_at_step 3", g_bin, moe) == 0,
          "1-rank MoE run to step 3 failed:\n%s", logged());
    CHECK(run("mkdir -p " DIR_ "/moeB2 && cp " DIR_ "/moeB/metrics.jsonl " DIR_ "/moeB2/") == 0, "copy failed");
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moeB2 --expert_parallel 2 --resume " DIR_
                     "/moeB/checkpoints/step_00000003",
              g_bin, moe) == 0,
          "ep 2 resume of a 1-rank checkpoint failed:\n%s", logged());
    CHECK(run(MPIRUN "-np 1 %s%s --batch_size 4 --out_dir " DIR_ "/moeB --resume auto", g_bin, moe) == 0,
          "1-rank resume failed:\n%s", logged());
    same_as("moeB", "moeB2", "MoE: 1-rank checkpoint resumed on ep 2");
    // ... and (float CLI, whose checkpoints hold the whole state) an ep 2 x dp 2 run stopped at
    // step 3 and resumed is bit-identical to the uninterrupted one: the sharded weights and
    // moments go through the gather and back exactly
    {
        const char *hyb = getenv("HYBRID") ? getenv("HYBRID") : "./hybrid";
        CHECK(run(MPIRUN "-np 4 %s%s --batch_size 1 --out_dir " DIR_ "/moeF --expert_parallel 2", hyb, moe) == 0,
              "float ep 2 x dp 2 run failed:\n%s", logged());
        CHECK(run(MPIRUN "-np 4 %s%s --batch_size 1 --out_dir " DIR_ "/moeFr --expert_parallel 2 --stop_at_step 3", hyb,
                  moe) == 0,
              "float ep 2 x dp 2 run to step 3 failed:\n%s", logged());
        CHECK(run(MPIRUN "-np 4 %s%s --batch_size 1 --out_dir " DIR_ "/moeFr --expert_parallel 2 --resume auto", hyb, moe) ==
                  0,
              "float ep 2 x dp 2 resume failed:\n%s", logged());
        same_resumed("moeF", "moeFr", "MoE: ep 2 x dp 2 resumed (float)");
    }
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moezero --expert_parallel 2 --zero true", g_bin,
              moe) != 0 &&
              strstr(logged(), "zero = true with expert_parallel = 2 is not supported"),
          "ZeRO-1 with sharded experts should be refused with the reason:\n%s", logged());
    CHECK(run(MPIRUN "-np 2 %s%s --batch_size 2 --out_dir " DIR_ "/moebad --expert_parallel 4", g_bin, moe) != 0,
          "expert_parallel 4 on 2 ranks should fail");
    out = log_text();
    CHECK(strstr(out, "expert_parallel = 4 must divide the number of ranks (2)") != NULL, "unclear EP error:\n%s", out);
    free(out);

    // ---- resume under MPI (the float CLI, whose checkpoints hold the whole state, so
    // the continuation must be bit-exact): ZeRO-1 on 2 ranks stopped at step 3, resumed ----
    const char *hybrid = getenv("HYBRID") ? getenv("HYBRID") : "./hybrid";
    CHECK(run(MPIRUN "-np 2 %s" TINY "--batch_size 2 --zero true --out_dir " DIR_ "/f2", hybrid) == 0,
          "float 2-rank run failed:\n%s", logged());
    CHECK(run(MPIRUN "-np 2 %s" TINY "--batch_size 2 --zero true --out_dir " DIR_ "/resume --stop_at_step 3", hybrid) == 0,
          "float run to step 3 failed:\n%s", logged());
    CHECK(run(MPIRUN "-np 2 %s" TINY "--batch_size 2 --zero true --out_dir " DIR_ "/resume --resume auto", hybrid) == 0,
          "resumed run failed:\n%s", logged());
    same_resumed("f2", "resume", "ZeRO-1 2 ranks resumed (float)");
    // a 2-rank checkpoint resumed on 1 rank (same global micro-batch of 4 sequences) continues
    // as it does on 2 ranks (double CLI; steps 1-3 of both logs come from the same run)
    CHECK(train(2, "w2", "--shuffle true --seed 7 --stop_at_step 3") == 0, "2-rank run to step 3 failed");
    CHECK(run("mkdir -p " DIR_ "/w1 && cp " DIR_ "/w2/metrics.jsonl " DIR_ "/w1/metrics.jsonl") == 0, "copy failed");
    CHECK(train(1, "w1", "--shuffle true --seed 7 --resume " DIR_ "/w2/checkpoints/step_00000003") == 0,
          "1-rank resume of a 2-rank checkpoint failed:\n%s", logged());
    out = log_text();
    CHECK(strstr(out, "resuming a 2-rank checkpoint on 1 rank(s)") != NULL, "no world-size message:\n%s", out);
    free(out);
    CHECK(train(2, "w2", "--shuffle true --seed 7 --resume auto") == 0, "2-rank resume failed:\n%s", logged());
    same_as("w2", "w1", "2-rank checkpoint resumed on 1 rank");
    // another global micro-batch is refused with the reason
    CHECK(run("%s" TINY "--batch_size 2 --out_dir " DIR_ "/w2 --resume auto", g_bin) != 0, "a resume that changes "
          "the global micro-batch should fail");
    out = log_text();
    CHECK(strstr(out, "2 rank(s) x batch_size 2") && strstr(out, "same global micro-batch"), "unclear error:\n%s", out);
    free(out);

    // ---- mismatches between ranks fail at start, on every rank ----
    CHECK(run(MPIRUN "-np 1 %s" TINY "--batch_size 2 --out_dir " DIR_ "/mm : -np 1 %s" TINY_BASE
                     "--steps 6 --log_every 1 " TRAIN_DATA VAL_DATA "--batch_size 2 --out_dir " DIR_ "/mm --lr 2e-2",
              g_bin, g_bin) != 0,
          "ranks with different configs should fail");
    out = log_text();
    CHECK(strstr(out, "[rank 1] the config differs from rank 0's") && strstr(out, "lr = 0.01") &&
              strstr(out, "lr = 0.02") && strstr(out, "[rank 0] the config differs between ranks"),
          "config mismatch message:\n%s", out);
    free(out);
    // the same config, but the ranks find different shards (relative globs, one working
    // folder per rank)
    CHECK(run("mkdir -p " DIR_ "/ma " DIR_ "/mb/data && cp -r " DIR_ "/data " DIR_ "/ma/ && cp " DIR_
              "/data/train_000000.bin " DIR_ "/data/val_000002.bin " DIR_ "/mb/data/") == 0,
          "copy failed");
    char abs_bin[4096];
    CHECK(realpath(g_bin, abs_bin) != NULL, "realpath %s", g_bin);
    const char *rel = " train configs/gpt2-tiny.conf --layers 'A x2' --d_model 32 --n_head 2 --vocab_size 64 "
                      "--padded_vocab_size 0 --context_length 32 --seq_len 32 --total_batch_size 256 --steps 2 "
                      "--warmup_steps 1 --threads 1 --batch_size 2 --train_data 'data/train_*.bin' --val_data '' --out_dir run";
    char cfg[4096];
    CHECK(realpath("configs/gpt2-tiny.conf", cfg) != NULL, "realpath configs/gpt2-tiny.conf");
    char relcmd[4096];
    snprintf(relcmd, sizeof relcmd, "%s", rel);
    char *at = strstr(relcmd, "configs/gpt2-tiny.conf");
    char tail[4096];
    snprintf(tail, sizeof tail, "%s", at + strlen("configs/gpt2-tiny.conf"));
    snprintf(at, sizeof relcmd - (size_t)(at - relcmd), "%s%s", cfg, tail);
    CHECK(run(MPIRUN "-np 1 -wdir " DIR_ "/ma %s%s : -np 1 -wdir " DIR_ "/mb %s%s", abs_bin, relcmd, abs_bin, relcmd) != 0,
          "ranks that find different data should fail");
    out = log_text();
    CHECK(strstr(out, "[rank 1] the training data differs from rank 0's") &&
              strstr(out, "[rank 0] the training data differs between ranks"),
          "data mismatch message:\n%s", out);
    free(out);

    // ---- a rank that dies takes the job down (no hang): a bad token in rank 1's slice. Every
    // rank checks every shard when it opens the set (data/shardcheck.c, since the manifests), so
    // both find the token; whichever check ends first names its rank and aborts the job, so the
    // message may come from either (a rank that alone dies: the kill below) ----
    CHECK(run("mkdir -p " DIR_ "/bad && cp " DIR_ "/data/train_000000.bin " DIR_ "/bad/train_000000.bin") == 0, "copy");
    {
        // token 70 lies in rank 1's half of the first global micro-batch (rank 1 reads 64..128)
        FILE *f = xfopen(DIR_ "/bad/train_000000.bin", "r+b");
        uint16_t bad = 9999;
        fseek(f, 256 * 4 + 70 * 2, SEEK_SET);
        xfwrite(&bad, 2, 1, f, DIR_ "/bad/train_000000.bin");
        xfclose(f, DIR_ "/bad/train_000000.bin");
    }
    double t0 = now_seconds();
    int rc = run(MPIRUN "-np 2 %s" TINY_BASE "--steps 6 --lr 1e-2 " VAL_DATA "--batch_size 2 --out_dir " DIR_
                        "/dead --shuffle false --train_data '" DIR_ "/bad/train_*.bin'",
                 g_bin);
    double took = now_seconds() - t0;
    out = log_text();
    CHECK(rc != 0 && rc != 124 && took < 120, "the job should fail fast (rc %d after %.0f s):\n%s", rc, took, out);
    CHECK((strstr(out, "[rank 0]") || strstr(out, "[rank 1]")) && strstr(out, "9999"), "the dying rank's message:\n%s",
          out);
    free(out);

    // ---- rank 1 alone killed (SIGKILL after its second step: HYBRID_KILL_AT in its environment
    // only, through env as its program) while rank 0 goes on: mpirun ends the job fast, naming
    // the killed rank ----
    t0 = now_seconds();
    rc = run(MPIRUN "-np 1 %s" TINY "--batch_size 2 --out_dir " DIR_ "/killed : -np 1 env HYBRID_KILL_AT=train-step:2 %s"
                    TINY "--batch_size 2 --out_dir " DIR_ "/killed",
             g_bin, g_bin);
    took = now_seconds() - t0;
    out = log_text();
    CHECK(rc != 0 && rc != 124 && took < 120, "a killed rank should end the job fast (rc %d after %.0f s):\n%s", rc,
          took, out);
    CHECK(strstr(out, "rank 1") && (strstr(out, "signal 9") || strstr(out, "Killed")), "mpirun names the killed rank:\n%s",
          out);
    free(out);

    // ---- SIGTERM to mpirun (a scheduler's stop): every rank finishes the same step, one
    // checkpoint is written, and the run resumes from it ----
    {
        run("rm -rf " DIR_ "/sig");
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 "
                 "timeout 120 mpirun --oversubscribe -np 2 %s" TINY_BASE "--lr 1e-2 --log_every 100000 " TRAIN_DATA
                 "--batch_size 2 --steps 100000 --checkpoint_every 0 --val_data '' --out_dir " DIR_ "/sig > " DIR_ "/sig.log 2>&1 &)",
                 g_bin);
        CHECK(system(cmd) == 0, "could not start the run to interrupt");
        int started = 0;
        for (int i = 0; i < 600 && !started; i++) {  // up to 60 s for the first logged step
            char *m = read_file(DIR_ "/sig/metrics.jsonl", NULL);
            started = m && strstr(m, "\"step\": 2,") != NULL;
            free(m);
            if (!started) usleep(100000);
        }
        CHECK(started, "the run to interrupt never logged a step");
        // (progress lines are off: Open MPI 4.1's mpirun stops forwarding output once it is
        // signalled, so a rank printing hundreds of lines a second blocks on a full pipe and
        // is killed before it can checkpoint; at real step rates the pipe never fills)
        sleep(1);
        CHECK(run("pkill -TERM -f '^mpirun.*dist-cli/sig'") == 0, "no mpirun to signal");
        char *log = NULL;
        for (int i = 0; i < 600; i++) {
            free(log);
            log = read_file(DIR_ "/sig.log", NULL);
            if (log && strstr(log, "interrupted after step")) break;
            usleep(100000);
        }
        int at = 0;
        const char *msg = log ? strstr(log, "interrupted after step ") : NULL;
        if (msg) at = atoi(msg + strlen("interrupted after step "));
        CHECK(at > 0, "SIGTERM did not stop the ranks with a checkpoint:\n%s", log ? log : "(no log)");
        char ck[512];
        snprintf(ck, sizeof ck, DIR_ "/sig/checkpoints/step_%08d", at);
        CHECK(at > 0 && dir_exists(ck), "no checkpoint %s after the interrupt", ck);
        free(log);
        run("pkill -KILL -f 'dist-cli/sig' ; true");
        if (at > 0)
            CHECK(run(MPIRUN "-np 2 %s" TINY_BASE "--lr 1e-2 " TRAIN_DATA
                             "--batch_size 2 --steps %d --checkpoint_every 0 --val_data '' --out_dir " DIR_
                             "/sig --resume auto",
                      g_bin, at + 2) == 0 &&
                      strstr(logged(), "resumed from"),
                  "resuming after the interrupt failed:\n%s", logged());
    }

    // ---- a rank that hangs: the others give up after HYBRID_DIST_TIMEOUT seconds ----
    t0 = now_seconds();
    rc = run("HYBRID_DIST_TIMEOUT=3 HYBRID_FAULT_HANG_RANK=1 " MPIRUN "-np 2 -x HYBRID_DIST_TIMEOUT -x "
             "HYBRID_FAULT_HANG_RANK %s" TINY "--batch_size 2 --out_dir " DIR_ "/hang",
             g_bin);
    took = now_seconds() - t0;
    out = log_text();
    CHECK(rc != 0 && rc != 124 && took < 60, "a hung rank should end the job after the timeout (rc %d after %.0f s):\n%s",
          rc, took, out);
    CHECK(strstr(out, "[rank 0] waited") && strstr(out, "another rank has died or hangs"), "timeout message:\n%s", out);
    free(out);
    TEST_MAIN_END();
}
