// MQAR through the real CLI (docs/mqar.md): `hybrid train` on generated sequences learns a
// recall task that needs the ignored targets and the query targets right (accuracy from chance
// to ~1, in the validation line and from `hybrid eval-mqar`); a run stopped and resumed gives
// the uninterrupted run's losses to the last bit; eval-mqar's JSON line, --jsonl and its
// errors; the config errors through the CLI.
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/mqar-cli"
// One attention layer on V 8, T 8, one pair: the value at position 1 must be copied to the
// query (a key at 2, 4 or 6); chance is 1/4 (values are 4..7).
#define EASY                                                                                                    \
    "./hybrid train --layers A --d_model 32 --n_head 2 --vocab_size 8 --context_length 8 --seq_len 8 "         \
    "--mqar_pairs 1 --mqar_train_sequences 1024 --mqar_val_sequences 64 --batch_size 16 --lr 1e-2 "            \
    "--warmup_steps 10 --log_every 50 --sample_tokens 4 --threads 1 "
// A small run with several pairs and a shuffled order, for the resume check and the errors
// (a file, so that the command line may override any key)
#define SMALL_CONF                                                                                             \
    "layers = A L\nd_model = 16\nn_head = 2\nlinear_heads = 2\nvocab_size = 32\ncontext_length = 16\n"      \
    "seq_len = 16\nmqar_pairs = 3\nmqar_train_sequences = 40\nmqar_val_sequences = 8\nbatch_size = 4\n"      \
    "steps = 14\nval_every = 5\nlr = 3e-3\nsample_tokens = 4\nthreads = 1\n"
#define SMALL "./hybrid train " DIR_ "/small.conf "

static int run(const char *cmd) { return cli_run(DIR_, cmd); }

static char *log_text(void) { return read_file(DIR_ "/last.log", NULL); }

// The number after "key": in text (the first), or -1.
static double json_number_after(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *at = text ? strstr(text, pat) : NULL;
    return at ? atof(at + strlen(pat)) : -1;
}

static void check_death(const char *cmd, const char *want1, const char *want2) {
    CHECK(run(cmd) != 0, "%s: should fail", cmd);
    char *out = log_text();
    CHECK(out && strstr(out, want1) && (!want2 || strstr(out, want2)), "%s: the message lacks '%s' / '%s':\n%s", cmd,
          want1, want2 ? want2 : "", out ? out : "");
    free(out);
}

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    mkdir_p(DIR_);
    write_file_atomic(DIR_ "/small.conf", SMALL_CONF, strlen(SMALL_CONF));

    // learns: the untrained weights (step 0) are near chance, 100 steps later nearly every query is right
    CHECK(run(EASY "--steps 100 --val_every 100 --save-init --out_dir " DIR_ "/easy") == 0, "easy run failed");
    char *out = log_text();
    CHECK(out && strstr(out, "MQAR accuracy"), "no accuracy in the validation line:\n%s", out ? out : "");
    free(out);
    char *metrics = read_file(DIR_ "/easy/metrics.jsonl", NULL);
    CHECK(json_number_after(metrics, "mqar_queries") == 64, "metrics: mqar_queries is not 64 (64 sequences x 1 pair)");
    CHECK(json_number_after(metrics, "mqar_accuracy") > 0.95, "metrics: validation accuracy %.3f after 100 steps",
          json_number_after(metrics, "mqar_accuracy"));
    free(metrics);
    CHECK(run("./hybrid eval-mqar " DIR_ "/easy/checkpoints/step_00000000 --sequences 400 --threads 1 --jsonl " DIR_
              "/init.json") == 0,
          "eval-mqar of the initial weights failed");
    char *init = read_file(DIR_ "/init.json", NULL);
    CHECK(json_number_after(init, "queries") == 400 && json_number_after(init, "accuracy") >= 0 &&
              json_number_after(init, "accuracy") < 0.5,
          "untrained weights: %s", init ? init : "(no output)");
    free(init);
    CHECK(run("./hybrid eval-mqar " DIR_ "/easy --sequences 400 --threads 1 --jsonl " DIR_ "/evals.jsonl") == 0,
          "eval-mqar of the run folder failed");
    char *printed = log_text(), *trained = read_file(DIR_ "/evals.jsonl", NULL);
    CHECK(trained && strstr(trained, "\"checkpoint\": \"" DIR_ "/easy/checkpoints/step_00000100\"") &&
              json_number_after(trained, "step") == 100 && json_number_after(trained, "pairs") == 1 &&
              json_number_after(trained, "queries") == 400 && json_number_after(trained, "accuracy") > 0.95,
          "trained run: %s", trained ? trained : "(no output)");
    CHECK(trained && printed && strstr(printed, trained), "--jsonl holds another line than stdout:\n%s\n%s",
          trained ? trained : "", printed ? printed : "");
    free(trained);
    free(printed);
    // more pairs than it was trained on: every pair's query counts
    CHECK(run("./hybrid eval-mqar " DIR_ "/easy --pairs 2 --sequences 50 --threads 1 --jsonl " DIR_ "/two.json") == 0,
          "eval-mqar --pairs 2 failed");
    char *two = read_file(DIR_ "/two.json", NULL);
    CHECK(json_number_after(two, "queries") == 100 && json_number_after(two, "pairs") == 2, "--pairs 2: %s",
          two ? two : "(no output)");
    free(two);

    // stopped at step 6 and resumed: the losses of the uninterrupted run, to the last bit
    CHECK(run(SMALL "--out_dir " DIR_ "/a") == 0, "uninterrupted run failed");
    CHECK(run(SMALL "--out_dir " DIR_ "/b --stop_at_step 6") == 0, "interrupted run failed");
    CHECK(run(SMALL "--out_dir " DIR_ "/b --resume auto") == 0, "resumed run failed");
    char *a = cli_stable_lines(DIR_ "/a/metrics.jsonl"), *b = cli_stable_lines(DIR_ "/b/metrics.jsonl");
    CHECK(strstr(a, "\"step\": 14") && !strcmp(a, b), "resumed losses differ:\n--- uninterrupted\n%s--- resumed\n%s",
          a, b);
    free(a);
    free(b);
    check_death(SMALL "--out_dir " DIR_ "/b --resume auto --steps 20 --mqar_seed 5",
                "checkpoint has mqar_seed = 0 but the config says 5", NULL);

    // errors
    check_death(SMALL "--mqar_pairs 5 --out_dir " DIR_ "/c", "command line --mqar_pairs",
                "seq_len >= 4 x mqar_pairs = 20");
    check_death(SMALL "--vocab_size 7 --out_dir " DIR_ "/c", "command line --vocab_size", "2 x mqar_pairs + 2 = 8");
    check_death(SMALL "--train_data 'x_*.bin' --out_dir " DIR_ "/c", "train_data is set", "mqar_pairs = 3");
    check_death(SMALL "--mqar_train_sequences 3 --out_dir " DIR_ "/c", "mqar_train_sequences = 3",
                "fewer than one batch");
    check_death("./hybrid eval-mqar " DIR_ "/easy --pairs 3", "mqar_pairs = 3 needs seq_len >= 4 x mqar_pairs = 12",
                NULL);
    check_death("./hybrid eval-mqar " DIR_ "/easy --d_model 8", "--d_model: the model comes from the checkpoint", NULL);
    check_death("./hybrid eval-mqar " DIR_ "/easy --pairs 1 --mqar_pairs 1", "not both", NULL);
    check_death("./hybrid eval-mqar " DIR_ "/nothing", DIR_ "/nothing: neither a checkpoint", NULL);
    TEST_MAIN_END();
}
