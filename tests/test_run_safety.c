// The safety net of a training run, through the real CLI (./hybrid, or $HYBRID): one check
// or more for each class of input that used to lose data or train silently wrong
// (docs/robustness.md lists the classes):
//   sizes      derived sizes that overflow or do no work are refused, naming the key
//   out_dir    a new run does not start over another run's checkpoints or metrics
//   non-finite a blow-up stops at the last finite checkpoint and names it
//   kills      a kill during pruning, the metrics rewrite of a resume, a checkpoint write or
//              the sample loses nothing, and the run resumes bit-exactly
//   full disk  a failed metrics write stops the run with the file and the reason
//   resume     a resume under another batch shape, seed, data order or data is refused
//   arguments  strict numbers, temperatures and repeated keys
// The crash-and-fuzz suite (test_crash.c, test_fuzz.c) drives the same paths at random.
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/run-safety"
#define DATA "--train_data '" DIR_ "/data/train_*.bin' --val_data '" DIR_ "/data/val_*.bin' "
#define MODEL                                                                                           \
    "configs/gpt2-tiny.conf --layers 'A x2' --d_model 32 --n_head 2 --vocab_size 64 --padded_vocab_size 0 " \
    "--context_length 32 --warmup_steps 1 --val_every 4 --val_batches 1 --log_every 1 --threads 1 "
// (a key may be given once: RUN leaves the keys that checks change to them, STD gives the
// usual ones: 6 steps of 4 x 32 tokens)
#define RUN "./hybrid train " MODEL DATA
#define STD "--seq_len 32 --steps 6 --lr 1e-2 --sample_tokens 4 --batch_size 4 "

static int run(const char *cmd) { return cli_run(DIR_, cmd); }

static char *log_text(void) {
    char *t = read_file(DIR_ "/last.log", NULL);
    return t ? t : xstrdup("");
}

// The command died the way die() ends a run: exit status 1, "hybrid: error:" and every
// given substring in its output.
static int died_with(int status, const char *want1, const char *want2) {
    char *out = log_text();
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(out, "hybrid: error:") &&
             (!want1 || strstr(out, want1)) && (!want2 || strstr(out, want2));
    if (!ok) fprintf(stderr, "  status %d, output:\n%s\n  (wanted '%s'%s%s)\n", status, out, want1 ? want1 : "",
                     want2 ? " and " : "", want2 ? want2 : "");
    free(out);
    return ok;
}

// The command was killed by SIGKILL (directly, or as the shell reports it: 128 + 9).
static int killed(int status) {
    return (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) || (WIFEXITED(status) && WEXITSTATUS(status) == 137);
}

static int step_dir(const char *run_dir, int step) {
    char p[512];
    snprintf(p, sizeof p, DIR_ "/%s/checkpoints/step_%08d", run_dir, step);
    return dir_exists(p);
}

static char *metrics_of(const char *run_dir) {
    char p[512];
    snprintf(p, sizeof p, DIR_ "/%s/metrics.jsonl", run_dir);
    return cli_stable_lines(p);
}

static char *raw_metrics(const char *run_dir) {
    char p[512];
    snprintf(p, sizeof p, DIR_ "/%s/metrics.jsonl", run_dir);
    char *t = read_file(p, NULL);
    return t ? t : xstrdup("(none)");
}

static void test_sizes(void) {
    // the example: a step of 2^32 tokens over micro-batches of one token
    int st = run(RUN "--batch_size 1 --seq_len 1 --total_batch_size 4294967296 --steps 2 "
                 "--lr 1e-2 --out_dir " DIR_ "/huge");
    CHECK(died_with(st, "total_batch_size", "accumulation steps"), "a 2^32-token step is refused");
    CHECK(!dir_exists(DIR_ "/huge/checkpoints"), "the refused run wrote a checkpoint");
    st = run(RUN "--batch_size 4 --seq_len 32 --total_batch_size 100 --steps 2 --lr 1e-2 "
             "--out_dir " DIR_ "/small");
    CHECK(died_with(st, "total_batch_size = 100 is less than one micro-batch", NULL), "a step below one micro-batch");
    st = run(RUN "--seq_len 32 --steps 6 --lr 1e-2 --batch_size 4 --sample_tokens 2147483647 --out_dir " DIR_ "/sample");
    CHECK(died_with(st, "sample_tokens = 2147483647 exceeds 65536", NULL), "sample_tokens past the cap");
    CHECK(!dir_exists(DIR_ "/sample/checkpoints"), "the refused run wrote a checkpoint");
    st = run(RUN "--steps 6 --lr 1e-2 --batch_size 65536 --seq_len 65536 --out_dir " DIR_ "/bt");
    CHECK(died_with(st, "batch_size x seq_len", "exceeds"), "a micro-batch past INT_MAX tokens");
    // derived tensor sizes: every one names the key to change, through inspect and train
    const struct {
        const char *conf, *key, *want;
    } keys[] = {
        {"configs/hybrid-tiny.conf", "moe_shared", "moe_shared"},
        {"configs/hybrid-tiny.conf", "moe_shared_hidden", "moe_shared"},
        {"configs/hybrid-tiny.conf", "moe_experts", "moe_experts"},
        {"configs/hybrid-tiny.conf", "moe_hidden", "moe_hidden"},
        {"configs/hybrid-tiny.conf", "moe_latent_dim", "moe_experts"},
        {"configs/hybrid-tiny.conf", "mla_qk_nope_dim", "mla_qk_nope_dim"},
        {"configs/hybrid-tiny.conf", "mla_v_dim", "mla_v_dim"},
        {"configs/hybrid-tiny.conf", "mla_kv_rank", "mla_kv_rank"},
        {"configs/hybrid-tiny.conf", "linear_head_dim", "linear_head_dim"},
        {"configs/hybrid-tiny.conf", "linear_value_dim", "linear_value_dim"},
        {"configs/gpt2-tiny.conf", "d_model", "d_model"},
        {"configs/gpt2-tiny.conf", "mlp_hidden", "mlp_hidden"},
        {"configs/gpt2-tiny.conf", "context_length", "context_length"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "./hybrid inspect %s --%s 2147483647", keys[i].conf, keys[i].key);
        CHECK(died_with(run(cmd), keys[i].want, "exceeds"), "inspect --%s 2147483647", keys[i].key);
    }
    CHECK(died_with(run("./hybrid inspect configs/kda-tiny.conf --chunk_size 2147483647"), "chunk_size must lie in",
                    NULL),
          "a huge chunk_size");
    // and train refuses the example before it allocates anything
    st = run("./hybrid train configs/hybrid-tiny.conf --moe_shared 2147483647 --out_dir " DIR_ "/moe");
    CHECK(died_with(st, "moe_shared", "exceeds"), "train --moe_shared 2147483647");
    // a chunk of 2^31 - 1: its square matrices' workspace size wrapped around 2^64 (found by test_fuzz.c;
    // chunk_size is held to [1, 1024] in the linear mixers' checks)
    st = run("./hybrid train configs/kda-tiny.conf --chunk_size 2147483647 --out_dir " DIR_ "/chunk");
    CHECK(died_with(st, "chunk_size must lie in", NULL), "train --chunk_size 2147483647");
}

static void test_out_dir(void) {
    CHECK(run(RUN STD "--out_dir " DIR_ "/o --checkpoint_every 2") == 0, "first run failed");
    char *before = raw_metrics("o");
    int st = run(RUN "--seq_len 32 --steps 6 --lr 2e-2 --sample_tokens 4 --batch_size 4 --out_dir " DIR_ "/o");
    CHECK(died_with(st, "holds another run", "--overwrite"), "a new run over another run's checkpoints");
    char *after = raw_metrics("o");
    CHECK(!strcmp(before, after), "the refused run changed the earlier run's metrics");
    free(after);
    // --overwrite starts over: the old checkpoints and log are gone, the new run's are there
    CHECK(run(RUN "--seq_len 32 --steps 3 --lr 1e-2 --sample_tokens 4 --batch_size 4 --out_dir " DIR_ "/o --overwrite") == 0,
          "--overwrite run failed");
    CHECK(step_dir("o", 3) && !step_dir("o", 4) && !step_dir("o", 6), "--overwrite kept the old checkpoints");
    after = raw_metrics("o");
    CHECK(strstr(after, "\"step\": 3,") && !strstr(after, "\"step\": 4,"), "--overwrite kept the old metrics:\n%s",
          after);
    free(after);
    free(before);
    // a FIFO where the log goes is refused at once (opening it would block)
    mkdir_p(DIR_ "/fifo");
    CHECK(system("mkfifo " DIR_ "/fifo/metrics.jsonl") == 0, "mkfifo failed");
    st = run("timeout -s KILL 20 " RUN STD "--out_dir " DIR_ "/fifo");
    CHECK(died_with(st, DIR_ "/fifo/metrics.jsonl: exists and is not a regular file", NULL), "a FIFO metrics log");
    // a log alone (a run that wrote no checkpoint yet) is another run too
    remove_tree(DIR_ "/o/checkpoints");
    st = run(RUN STD "--out_dir " DIR_ "/o");
    CHECK(died_with(st, "holds another run", "metrics.jsonl"), "a new run over another run's metrics log");
}

static void test_non_finite(void) {
    // lr 1e308: the first update makes the weights inf; the run stops at step 0's checkpoint
    int st = run(RUN "--seq_len 32 --steps 6 --sample_tokens 4 --batch_size 4 --lr 1e308 --save-init "
                     "--checkpoint_every 1 --out_dir " DIR_ "/inf");
    CHECK(died_with(st, "The last good checkpoint is " DIR_ "/inf/checkpoints/step_00000000", NULL),
          "a blow-up names the last finite checkpoint");
    CHECK(step_dir("inf", 0) && !step_dir("inf", 1) && !step_dir("inf", 2), "a non-finite checkpoint was written");
    CHECK(run("./hybrid sample " DIR_ "/inf/checkpoints/step_00000000 --tokens 3 --temp 0") == 0,
          "the last good checkpoint does not sample");
}

// A run resumed until it ends must match the uninterrupted run "full" line for line.
static void expect_resumes_to(const char *run_dir, const char *full, const char *what) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, RUN STD "--checkpoint_every 1 --keep_checkpoints 2 --out_dir " DIR_
             "/%s --resume auto", run_dir);
    CHECK(run(cmd) == 0, "%s: the resume failed", what);
    char *a = metrics_of(full), *b = metrics_of(run_dir);
    CHECK(!strcmp(a, b), "%s: the resumed run differs:\n%s---\n%s", what, a, b);
    free(a);
    free(b);
}

static void test_kills(void) {
    const char *opts = STD "--checkpoint_every 1 --keep_checkpoints 2 ";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, RUN "%s--out_dir " DIR_ "/full", opts);
    CHECK(run(cmd) == 0, "uninterrupted run failed");

    // pruning: step 1 is renamed away when step 3 is saved, and the kill comes before the delete
    snprintf(cmd, sizeof cmd, "HYBRID_KILL_AT=checkpoint-prune:1 " RUN "%s--out_dir " DIR_ "/prune", opts);
    CHECK(killed(run(cmd)), "no kill during the prune");
    CHECK(!step_dir("prune", 1) && step_dir("prune", 2) && step_dir("prune", 3) &&
              dir_exists(DIR_ "/prune/checkpoints/.step_00000001.del"),
          "after a kill in the prune: step 1 hidden as .del, steps 2 and 3 whole");
    expect_resumes_to("prune", "full", "kill during the prune");
    CHECK(!dir_exists(DIR_ "/prune/checkpoints/.step_00000001.del"), "the .del leftover was not removed");

    // a checkpoint written but not published: the run resumes from the one before
    snprintf(cmd, sizeof cmd, "HYBRID_KILL_AT=checkpoint-write:3 " RUN "%s--out_dir " DIR_ "/write", opts);
    CHECK(killed(run(cmd)), "no kill during the checkpoint write");
    CHECK(step_dir("write", 2) && !step_dir("write", 3), "an unpublished checkpoint is visible");
    expect_resumes_to("write", "full", "kill during a checkpoint write");

    // the metrics rewrite of a resume: the log is intact, whole or replaced
    snprintf(cmd, sizeof cmd, RUN "%s--stop_at_step 4 --out_dir " DIR_ "/log", opts);
    CHECK(run(cmd) == 0, "run to step 4 failed");
    remove_tree(DIR_ "/log/checkpoints/step_00000004");  // the resume starts at step 3: it drops a line
    char *before = raw_metrics("log");
    snprintf(cmd, sizeof cmd, "HYBRID_KILL_AT=atomic-replace:1 " RUN "%s--out_dir " DIR_ "/log --resume auto", opts);
    CHECK(killed(run(cmd)), "no kill during the metrics rewrite");
    char *after = raw_metrics("log");
    CHECK(!strcmp(before, after), "a kill during the resume changed metrics.jsonl:\n%s---\n%s", before, after);
    free(before);
    free(after);
    expect_resumes_to("log", "full", "kill during the metrics rewrite");

    // the end-of-run sample comes after the final checkpoint
    snprintf(cmd, sizeof cmd, "HYBRID_KILL_AT=sample:1 " RUN "%s--out_dir " DIR_ "/samplekill", opts);
    CHECK(killed(run(cmd)), "no kill at the sample");
    CHECK(step_dir("samplekill", 6), "the final checkpoint was not written before the sample");
}

static void test_full_disk(void) {
    // a file-size limit makes every write past 2 KiB fail (EFBIG, SIGXFSZ ignored) as a full
    // disk would; the output goes through a pipe, which the limit does not cover
    const char *bin = cli_binary();
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "(trap '' XFSZ; ulimit -f 4; exec %s train " MODEL DATA
             "--seq_len 32 --steps 40 --lr 1e-2 --sample_tokens 4 --batch_size 4 --checkpoint_every 0 --out_dir " DIR_
             "/disk; ) 2>&1 | cat > " DIR_ "/last.log",
             bin);
    remove_tree(DIR_ "/disk");
    int st = system(cmd);
    (void)st;  // the pipe's status is cat's; the log says what happened
    char *out = log_text();
    CHECK(strstr(out, DIR_ "/disk/metrics.jsonl: cannot write the metrics log") && strstr(out, "hybrid: error:"),
          "a failed metrics write should stop the run:\n%s", out);
    CHECK(!strstr(out, "step    40/40"), "the run went on after a failed metrics write:\n%s", out);
    free(out);
}

static void test_resume_changes(void) {
    char cmd[1024];
    CHECK(run(RUN STD "--stop_at_step 2 --out_dir " DIR_ "/r") == 0, "run to step 2 failed");
    const struct {
        const char *opts, *want;
    } cases[] = {
        {"--batch_size 2", "same global micro-batch"},
        {"--batch_size 4 --seq_len 16 --total_batch_size 128", "same global micro-batch"},
        {"--batch_size 4 --seed 8", "seed = 1337"},  // (the config's default seed)
        {"--batch_size 4 --shuffle false", "shuffle"},
        {"--batch_size 4 --train_data '" DIR_ "/data/train_000000.bin'", "train_data"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "./hybrid train " MODEL "--val_data '" DIR_ "/data/val_*.bin' --seq_len 32 "
                 "--steps 6 --lr 1e-2 --sample_tokens 4 --out_dir " DIR_ "/r --resume auto %s%s",
                 cases[i].opts, strstr(cases[i].opts, "train_data") ? "" : " --train_data '" DIR_ "/data/train_*.bin'");
        if (strstr(cases[i].opts, "seq_len")) {  // seq_len is given here, not by the prefix
            snprintf(cmd, sizeof cmd, "./hybrid train " MODEL DATA "--steps 6 --lr 1e-2 --sample_tokens 4 --out_dir "
                     DIR_ "/r --resume auto %s", cases[i].opts);
        }
        CHECK(died_with(run(cmd), cases[i].want, NULL), "resume with %s is refused", cases[i].opts);
    }
}

static void test_arguments(void) {
    CHECK(run(RUN "--seq_len 32 --steps 2 --lr 1e-2 --sample_tokens 4 --batch_size 4 --out_dir " DIR_ "/s") == 0,
          "run for sampling failed");
    const char *ck = DIR_ "/s/checkpoints/step_00000002";
    const struct {
        const char *args, *want;
    } bad[] = {
        {"--temp nan", "--temp: 'nan' is not a number"},   {"--temp -1", "--temp: -1 must lie in [0, 1e+06]"},
        {"--temp abc", "--temp: 'abc' is not a number"},    {"--temp 1e999", "--temp: '1e999' is not a number"},
        {"--tokens 0", "--tokens: 0 must lie in [1, 65536]"}, {"--tokens 4x", "--tokens: '4x' is not an integer"},
        {"--tokens 99999999999999999999", "is not an integer"}, {"--temp 1 --temp 0", "--temp is given twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "./hybrid sample %s %s", ck, bad[i].args);
        CHECK(died_with(run(cmd), bad[i].want, NULL), "sample %s", bad[i].args);
    }
    // a key twice on the command line, and twice in one file
    CHECK(died_with(run(RUN STD "--lr 2e-2 --out_dir " DIR_ "/twice"), "--lr is given twice", NULL),
          "a repeated --lr");
    FILE *f = xfopen(DIR_ "/twice.conf", "w");
    fprintf(f, "d_model = 32\n# a comment\nlr = 1e-2\nd_model = 64\n");
    xfclose(f, DIR_ "/twice.conf");
    CHECK(died_with(run("./hybrid inspect " DIR_ "/twice.conf"), DIR_ "/twice.conf:4: d_model is given twice",
                    "first at " DIR_ "/twice.conf:1"),
          "a key twice in a file");
    // the file's value overridden once on the command line is the normal case
    CHECK(run("./hybrid inspect configs/gpt2-tiny.conf --d_model 64") == 0, "an override of a file key failed");
}

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    cli_make_markov_shards(DIR_, 64);
    test_sizes();
    test_out_dir();
    test_non_finite();
    test_kills();
    test_full_disk();
    test_resume_changes();
    test_arguments();
    remove_tree(DIR_);
    TEST_MAIN_END();
}
