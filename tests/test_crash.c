// The crash suite: `kill -9` at seeded random points of a training run (steps, checkpoint
// writes, checkpoint rotation, the metrics rewrite of a resume, samples) and of `prepare`,
// each followed by what a user would do next (`--resume auto`, or prepare again). What
// must hold after every trial:
//   training  the run finishes with the uninterrupted run's metrics lines and its final
//             checkpoint files, byte for byte (the kill may come again during a resume)
//   prepare   at any moment the shard set is a complete set (the old one or the new one),
//             and the next prepare gives exactly the uninterrupted run's files
// Kills come two ways: HYBRID_KILL_AT=<site>:<n> (base/kill_point.h) at a seeded site and
// count, and a seeded wall-clock delay (`timeout -s KILL`), which lands anywhere.
// HYBRID_CRASH_SEED and HYBRID_CRASH_TRIALS change the seed and the number of trials (the
// defaults keep `make test` short; under the sanitizer build the default is halved).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/rng.h"
#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/crash"
#define STEPS 8
// checkpoints every step (two kept: rotation at every save), a sample every 4 steps,
// validation every 4
#define TRAIN                                                                                                   \
    "./hybrid train configs/gpt2-tiny.conf --layers 'A x2' --d_model 32 --n_head 2 --vocab_size 64 "           \
    "--padded_vocab_size 0 --context_length 32 --seq_len 32 --batch_size 4 --total_batch_size 256 --steps 8 " \
    "--warmup_steps 2 --lr 1e-2 --val_every 4 --val_batches 2 --log_every 1 --sample_every 4 --sample_tokens 4 " \
    "--checkpoint_every 1 --keep_checkpoints 2 --threads 1 --train_data '" DIR_ "/data/train_*.bin' "            \
    "--val_data '" DIR_ "/data/val_*.bin' "

// the final checkpoint's files that must match the uninterrupted run's (config.conf names
// the run's own out_dir)
static const char *const g_files[] = {"model.safetensors", "optimizer.safetensors", "trainer_state.txt"};

static int run(const char *cmd) { return cli_run(DIR_, cmd); }

// The last command's output (a static copy, for messages).
static const char *log_text(void) {
    static char buf[16384];
    char *t = read_file(DIR_ "/last.log", NULL);
    snprintf(buf, sizeof buf, "%s", t ? t : "");
    free(t);
    return buf;
}

static int was_killed(int st) {
    return (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || (WIFEXITED(st) && WEXITSTATUS(st) == 137);
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

// One kill: at a kill point, or after a delay. Writes the command's prefix into buf and a
// description into what.
static void pick_kill(Rng *r, char *buf, size_t n, char *what, size_t wn, const char *const *sites,
                      const int *max_count, int nsites, double max_delay) {
    int k = (int)rng_below(r, (uint64_t)nsites + 1);
    if (k < nsites) {
        int count = 1 + (int)rng_below(r, (uint64_t)max_count[k]);
        snprintf(buf, n, "HYBRID_KILL_AT=%s:%d ", sites[k], count);
        snprintf(what, wn, "kill at %s:%d", sites[k], count);
    } else {
        double delay = 0.02 + max_delay * (double)rng_below(r, 1000) / 1000.0;
        snprintf(buf, n, "timeout -s KILL %.3f ", delay);
        snprintf(what, wn, "kill after %.3f s", delay);
    }
}

static void training_trials(uint64_t seed, int trials, double max_delay) {
    CHECK(run(TRAIN "--out_dir " DIR_ "/ref") == 0, "the uninterrupted run failed:\n%s", log_text());
    char *ref = cli_stable_lines(DIR_ "/ref/metrics.jsonl");
    static const char *const sites[] = {"train-step", "checkpoint-write", "checkpoint-prune", "atomic-replace",
                                        "sample"};
    // passes per run: 8 steps, 8 checkpoints, 6 prunes, 4 files replaced per checkpoint plus
    // the metrics rewrite of a resume, 2 samples
    static const int max_count[] = {STEPS, STEPS, STEPS - 2, 4 * STEPS + 1, 2};
    Rng r;
    rng_seed(&r, seed);
    int kills = 0;
    for (int t = 0; t < trials; t++) {
        char out[256], cmd[2048], prefix[128], what[3][96] = {{0}};
        snprintf(out, sizeof out, DIR_ "/t%d", t);
        remove_tree(out);
        // up to three kills in a row (the first on a fresh run, the others on its resumes),
        // then a resume that runs to the end
        int nkill = 1 + (int)rng_below(&r, 3), ok = 1;
        for (int k = 0; k < nkill && ok; k++) {
            pick_kill(&r, prefix, sizeof prefix, what[k], sizeof what[k], sites, max_count, 5, max_delay);
            snprintf(cmd, sizeof cmd, "%s" TRAIN "--out_dir %s%s", prefix, out, k ? " --resume auto" : "");
            int st = run(cmd);
            kills += was_killed(st);
            ok = was_killed(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0);
            CHECK(ok, "seed %llu trial %d (%s): the run neither finished nor was killed (status %d):\n%s",
                  (unsigned long long)seed, t, what[k], st, log_text());
        }
        if (!ok) continue;
        snprintf(cmd, sizeof cmd, TRAIN "--out_dir %s --resume auto", out);
        CHECK(run(cmd) == 0, "seed %llu trial %d (%s; %s; %s): the final resume failed:\n%s", (unsigned long long)seed,
              t, what[0], what[1], what[2], log_text());
        char path[512];
        snprintf(path, sizeof path, "%s/metrics.jsonl", out);
        char *got = cli_stable_lines(path);
        CHECK(!strcmp(ref, got), "seed %llu trial %d (%s; %s; %s): the metrics differ from the uninterrupted run:\n%s---\n%s",
              (unsigned long long)seed, t, what[0], what[1], what[2], ref, got);
        free(got);
        for (size_t f = 0; f < sizeof g_files / sizeof g_files[0]; f++) {
            char a[512], b[512];
            snprintf(a, sizeof a, DIR_ "/ref/checkpoints/step_%08d/%s", STEPS, g_files[f]);
            snprintf(b, sizeof b, "%s/checkpoints/step_%08d/%s", out, STEPS, g_files[f]);
            CHECK(files_equal(a, b), "seed %llu trial %d (%s; %s; %s): %s differs from %s", (unsigned long long)seed, t,
                  what[0], what[1], what[2], b, a);
        }
        remove_tree(out);
    }
    CHECK(kills >= trials / 2, "only %d of the kills landed (the runs are too short for the delays?)", kills);
    printf("training: %d trials, %d kills, every run resumed to the uninterrupted result\n", trials, kills);
    free(ref);
}

// ---- prepare ----

// Text documents: "old" and "new" inputs differ, so the two shard sets differ.
static void write_corpus(const char *dir, int docs, int salt) {
    mkdir_p(dir);
    for (int d = 0; d < docs; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/doc%03d.txt", dir, d);
        FILE *f = xfopen(path, "w");
        for (int s = 0; s < 40; s++)
            fprintf(f, "Sentence %d of document %d, version %d: the quick brown fox jumps over the lazy dog. ", s, d,
                    salt);
        xfclose(f, path);
    }
}

#define PREPARE(out, in) \
    "./hybrid prepare --quiet --threads 1 --shard-tokens 2000 --val-docs 2 --name t --out " out " " in

// The set in dir/ must be complete: training reads it (the loader checks it against its
// manifest). Returns 1 if so.
static int set_is_complete(const char *dir, char *err, size_t n) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "./hybrid train configs/gpt2-tiny.conf --layers A --d_model 16 --n_head 1 --context_length 8 --seq_len 8 "
             "--batch_size 1 --steps 1 --warmup_steps 0 --val_every 0 --sample_tokens 1 --threads 1 --train_data '%s/t_train_*.bin' "
             "--val_data '%s/t_val_*.bin' --out_dir %s/run --overwrite",
             dir, dir, dir);
    int st = run(cmd);
    snprintf(err, n, "%s", log_text());
    return st == 0;
}

static void prepare_trials(uint64_t seed, int trials) {
    write_corpus(DIR_ "/in-old", 6, 1);
    write_corpus(DIR_ "/in-new", 9, 2);
    CHECK(run(PREPARE(DIR_ "/pref", DIR_ "/in-new")) == 0, "the uninterrupted prepare failed:\n%s", log_text());
    char manifest[256];
    snprintf(manifest, sizeof manifest, DIR_ "/pref/t_manifest.txt");
    char *ref_manifest = read_file(manifest, NULL);
    CHECK(ref_manifest && strstr(ref_manifest, "t_train_000002.bin"), "the reference set has too few shards");
    static const char *const sites[] = {"prepare-shard", "prepare-publish"};
    static const int max_count[] = {8, 6};
    Rng r;
    rng_seed(&r, seed ^ 0x9e3779b97f4a7c15ull);
    int kills = 0;
    for (int t = 0; t < trials; t++) {
        char cmd[1024], prefix[128], what[96], err[16384];
        remove_tree(DIR_ "/p");
        CHECK(run(PREPARE(DIR_ "/p", DIR_ "/in-old")) == 0, "the old set's prepare failed");
        pick_kill(&r, prefix, sizeof prefix, what, sizeof what, sites, max_count, 2, 0.05);
        snprintf(cmd, sizeof cmd, "%s" PREPARE(DIR_ "/p", DIR_ "/in-new"), prefix);
        int st = run(cmd);
        kills += was_killed(st);
        CHECK(was_killed(st) || st == 0, "seed %llu prepare trial %d (%s): status %d:\n%s", (unsigned long long)seed, t,
              what, st, log_text());
        CHECK(set_is_complete(DIR_ "/p", err, sizeof err),
              "seed %llu prepare trial %d (%s): the set after the kill is not whole:\n%s", (unsigned long long)seed, t,
              what, err);
        CHECK(run(PREPARE(DIR_ "/p", DIR_ "/in-new")) == 0, "seed %llu prepare trial %d (%s): prepare after the kill:\n%s",
              (unsigned long long)seed, t, what, log_text());
        char *got = read_file(DIR_ "/p/t_manifest.txt", NULL);
        CHECK(got && ref_manifest && !strcmp(got, ref_manifest), "seed %llu prepare trial %d (%s): the manifest differs",
              (unsigned long long)seed, t, what);
        free(got);
        // every file the manifest lists is the reference's, byte for byte
        for (int s = 0; s < 16; s++)
            for (int split = 0; split < 2; split++) {
                char a[256], b[256];
                snprintf(a, sizeof a, DIR_ "/pref/t_%s_%06d.bin", split ? "val" : "train", s);
                snprintf(b, sizeof b, DIR_ "/p/t_%s_%06d.bin", split ? "val" : "train", s);
                if (file_exists(a) || file_exists(b))
                    CHECK(files_equal(a, b), "seed %llu prepare trial %d (%s): %s differs", (unsigned long long)seed,
                          t, what, b);
            }
    }
    printf("prepare: %d trials, %d kills, the set was whole after each and the next prepare exact\n", trials, kills);
    free(ref_manifest);
}

// 1 if this build can prepare (it has PCRE2); a failure for another reason fails the test.
static int prepare_available(void) {
    write_corpus(DIR_ "/in-probe", 3, 0);
    if (run(PREPARE(DIR_ "/probe", DIR_ "/in-probe")) == 0) return 1;
    const char *out = log_text();
    CHECK(strstr(out, "needs PCRE2"), "prepare failed:\n%s", out);
    return 0;
}

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    const int sanitized = strstr(cli_binary(), "build-san") != NULL;
    const uint64_t seed = getenv("HYBRID_CRASH_SEED") ? strtoull(getenv("HYBRID_CRASH_SEED"), NULL, 10) : 20261201;
    const int trials = getenv("HYBRID_CRASH_TRIALS") ? atoi(getenv("HYBRID_CRASH_TRIALS")) : sanitized ? 6 : 12;
    printf("seed %llu, %d trials of each kind\n", (unsigned long long)seed, trials);
    cli_make_markov_shards(DIR_, 64);
    training_trials(seed, trials, sanitized ? 6.0 : 1.5);
    if (!prepare_available()) {
        remove_tree(DIR_);
        TEST_MAIN_SKIP("the prepare trials (this build has no PCRE2; Debian: libpcre2-dev)");
    }
    prepare_trials(seed, trials);
    remove_tree(DIR_);
    TEST_MAIN_END();
}
