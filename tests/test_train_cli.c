// End-to-end through the real CLI (./hybrid, the float build): a tiny GPT-2 trains
// on synthetic shards with a falling loss; a run interrupted (stop_at_step) and
// resumed gives losses equal to the last bit to an uninterrupted run (AdamW, Muon
// moonlight and keller; a checkpoint of the other Muon momentum form is refused); checkpoints
// keep the last K; CLI errors are clear.
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "base/rng.h"
#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/train-cli"
// (TINY_TRAIN: all but the validation keys)
#define TINY_TRAIN                                                                                                \
    "./hybrid train configs/gpt2-tiny.conf --layers 'A x2' --d_model 32 --n_head 2 --vocab_size 64 "            \
    "--padded_vocab_size 0 --context_length 32 --seq_len 32 --batch_size 4 --total_batch_size 256 --steps 16 " \
    "--warmup_steps 2 --lr 1e-2 --val_batches 2 --log_every 4 --sample_tokens 8 --threads 2 "                    \
    "--train_data '" DIR_ "/data/train_*.bin' "
#define TINY TINY_TRAIN "--val_every 8 --val_data '" DIR_ "/data/val_*.bin' "

static void make_data(void) { cli_make_markov_shards(DIR_, 64); }

static int run(const char *cmd) { return cli_run(DIR_, cmd); }

static char *log_text(void) { return read_file(DIR_ "/last.log", NULL); }

static char *loss_lines(const char *path) { return cli_stable_lines(path); }

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    make_data();

    // uninterrupted run
    CHECK(run(TINY "--out_dir " DIR_ "/a --checkpoint_every 4 --keep_checkpoints 2") == 0, "training run failed");
    char *out = log_text();
    CHECK(strstr(out, "step    16/16") && strstr(out, "val loss") && strstr(out, "sample:"), "progress output:\n%s", out);
    free(out);
    char *a = loss_lines(DIR_ "/a/metrics.jsonl");
    double first = 0, last = 0;
    sscanf(strstr(a, "\"loss\": ") + 8, "%lf", &first);
    char *p = a, *q;
    while ((q = strstr(p + 1, "\"loss\": "))) p = q;
    sscanf(p + 8, "%lf", &last);
    CHECK(last < 0.75 * first, "loss should fall by a quarter: %.4f -> %.4f", first, last);
    // keep_checkpoints 2: steps 12 and 16 remain
    CHECK(!dir_exists(DIR_ "/a/checkpoints/step_00000008") && dir_exists(DIR_ "/a/checkpoints/step_00000012") &&
              dir_exists(DIR_ "/a/checkpoints/step_00000016"),
          "keep_checkpoints did not keep exactly the last 2");

    // interrupted at step 6, resumed from there
    CHECK(run(TINY "--out_dir " DIR_ "/b --checkpoint_every 4 --stop_at_step 6") == 0, "interrupted run failed");
    CHECK(dir_exists(DIR_ "/b/checkpoints/step_00000006"), "no checkpoint at the stop");
    CHECK(run(TINY "--out_dir " DIR_ "/b --checkpoint_every 4 --resume auto") == 0, "resumed run failed");
    out = log_text();
    CHECK(strstr(out, "resumed from") != NULL, "resume message missing:\n%s", out);
    free(out);
    char *b = loss_lines(DIR_ "/b/metrics.jsonl");
    CHECK(!strcmp(a, b), "resumed losses differ from the uninterrupted run:\n--- uninterrupted\n%s--- resumed\n%s", a, b);
    free(b);

    // --save-init: checkpoint step 0 holds the initial weights and does not change the run;
    // a run resumed from it gives the uninterrupted run's losses to the last bit
    CHECK(run(TINY "--out_dir " DIR_ "/i --save-init") == 0, "--save-init run failed");
    CHECK(dir_exists(DIR_ "/i/checkpoints/step_00000000") && dir_exists(DIR_ "/i/checkpoints/step_00000016"),
          "--save-init wrote no step_00000000 checkpoint");
    char *si = loss_lines(DIR_ "/i/metrics.jsonl");
    CHECK(!strcmp(a, si), "--save-init changed the losses:\n%s---\n%s", a, si);
    free(si);
    CHECK(run(TINY "--out_dir " DIR_ "/j --resume " DIR_ "/i/checkpoints/step_00000000") == 0,
          "run from the step-0 checkpoint failed");
    char *sj = loss_lines(DIR_ "/j/metrics.jsonl");
    CHECK(!strcmp(a, sj), "run from the step-0 checkpoint differs:\n%s---\n%s", a, sj);
    free(sj);
    // a flag before the config file does not hide it
    CHECK(run("./hybrid train --save-init configs/gpt2-tiny.conf --steps 1 --out_dir " DIR_ "/k --train_data '" DIR_
              "/data/train_*.bin' --val_data '" DIR_ "/data/val_*.bin' --d_model 32 --n_head 2 --layers 'A x1' "
              "--vocab_size 64 --padded_vocab_size 0 --context_length 32 --seq_len 32 --batch_size 4 "
              "--total_batch_size 128 --warmup_steps 0 --sample_tokens 4 --threads 2") == 0,
          "--save-init before the config file failed");
    CHECK(dir_exists(DIR_ "/k/checkpoints/step_00000000"), "no step-0 checkpoint with --save-init first");
    free(a);

    // Muon (hidden matrices) + AdamW (the rest): the loss falls, and resume is bit-exact too
    CHECK(run(TINY "--optimizer muon --out_dir " DIR_ "/m --checkpoint_every 0") == 0, "Muon run failed");
    char *mu = loss_lines(DIR_ "/m/metrics.jsonl");
    double mfirst = 0, mlast = 0;
    sscanf(strstr(mu, "\"loss\": ") + 8, "%lf", &mfirst);
    for (p = mu; (q = strstr(p + 1, "\"loss\": ")); p = q) {}
    sscanf(p + 8, "%lf", &mlast);
    CHECK(mlast < 0.75 * mfirst, "Muon: loss should fall by a quarter: %.4f -> %.4f", mfirst, mlast);
    CHECK(run(TINY "--optimizer muon --out_dir " DIR_ "/n --stop_at_step 7") == 0, "interrupted Muon run failed");
    CHECK(run(TINY "--optimizer muon --out_dir " DIR_ "/n --resume auto") == 0, "resumed Muon run failed");
    char *mn = loss_lines(DIR_ "/n/metrics.jsonl");
    CHECK(!strcmp(mu, mn), "Muon: resumed losses differ from the uninterrupted run:\n%s---\n%s", mu, mn);
    free(mu);
    free(mn);

    // muon_scale = keller (KellerJordan/Muon's EMA momentum, recorded in the checkpoint):
    // resume is bit-exact; the moonlight checkpoint above (sum form) is refused to it
#define KELLER TINY "--optimizer muon --muon_scale keller --lr_matrix 0.02 "
    CHECK(run(KELLER "--out_dir " DIR_ "/q --checkpoint_every 0") == 0, "keller run failed");
    CHECK(run(KELLER "--out_dir " DIR_ "/r --stop_at_step 7") == 0, "interrupted keller run failed");
    CHECK(run(KELLER "--out_dir " DIR_ "/r --resume auto") == 0, "resumed keller run failed");
    char *kq = loss_lines(DIR_ "/q/metrics.jsonl"), *kr = loss_lines(DIR_ "/r/metrics.jsonl");
    CHECK(!strcmp(kq, kr), "keller: resumed losses differ from the uninterrupted run:\n%s---\n%s", kq, kr);
    free(kq);
    free(kr);
    CHECK(run(KELLER "--out_dir " DIR_ "/n --resume auto") != 0, "a moonlight checkpoint resumed by keller was accepted");
    out = log_text();
    CHECK(strstr(out, "/optimizer.safetensors: its Muon momentum is in the sum form") &&
              strstr(out, "this run (muon_scale = keller) keeps the ema form"),
          "momentum form refusal:\n%s", out);
    free(out);
#undef KELLER

    // a validation split smaller than one batch (4 x 32 + 1 tokens) validates with smaller
    // batches (100 tokens: 3 sequences of 32 + 1); one smaller than one sequence is refused,
    // naming the shard
    {
        uint16_t t[100];
        for (int i = 0; i < 100; i++) t[i] = (uint16_t)(i * 7 % 64);
        mkdir_p(DIR_ "/small");
        mkdir_p(DIR_ "/tiny");
        shard_write(DIR_ "/small/val_000000.bin", t, 100);
        shard_write(DIR_ "/tiny/val_000000.bin", t, 20);
    }
    CHECK(run(TINY_TRAIN "--out_dir " DIR_ "/v --stop_at_step 2 --val_every 1 --val_data '" DIR_ "/small/val_*.bin'") == 0,
          "a run with a small validation split failed");
    out = log_text();
    CHECK(strstr(out, "validating with batches of 3 sequences") && strstr(out, "val loss"),
          "small validation split:\n%s", out);
    free(out);
    CHECK(run(TINY_TRAIN "--out_dir " DIR_ "/w --stop_at_step 2 --val_data '" DIR_ "/tiny/val_*.bin'") != 0,
          "a validation split below one sequence was accepted");
    out = log_text();
    CHECK(strstr(out, DIR_ "/tiny/val_000000.bin: 20 tokens is too small"), "tiny validation split:\n%s", out);
    free(out);

    // resuming into a different model is refused, naming the key
    CHECK(run(TINY "--out_dir " DIR_ "/b --d_model 64 --resume auto") != 0, "config mismatch accepted");
    out = log_text();
    CHECK(strstr(out, "d_model") != NULL, "mismatch message should name d_model:\n%s", out);
    free(out);

    // CLI errors
    CHECK(run("./hybrid train configs/gpt2-tiny.conf --no_such_key 3") != 0, "unknown key accepted");
    out = log_text();
    CHECK(strstr(out, "unknown option --no_such_key") != NULL, "%s", out);
    free(out);
    CHECK(run("./hybrid train configs/gpt2-tiny.conf --train_data '" DIR_ "/none_*.bin'") != 0, "missing data accepted");
    out = log_text();
    CHECK(strstr(out, "none_*.bin: no shard files match") != NULL, "%s", out);
    free(out);
    CHECK(run("./hybrid frobnicate") != 0, "unknown command accepted");
    CHECK(run("./hybrid train --help") == 0, "--help failed");

    // inspect: GPT-2 124M has 124,475,904 parameters with the padded vocab
    CHECK(run("./hybrid inspect configs/gpt2-124m.conf") == 0, "inspect failed");
    out = log_text();
    CHECK(strstr(out, "parameters: 124475904 total") != NULL, "inspect output:\n%s", out);
    free(out);

    // sample from the checkpoint
    CHECK(run("./hybrid sample " DIR_ "/a/checkpoints/step_00000016 --tokens 5 --temp 0") == 0, "sample failed");
    TEST_MAIN_END();
}
