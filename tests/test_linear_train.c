// End to end through the CLI (the float build): a tiny pure-KDA model ('K x2') and a
// tiny pure-GDN model ('G x2') train with a falling loss, with reset_at_eot on, then
// sample through the recurrent decode path (also from the saved checkpoint). Data: the Brown corpus shards of
// `make data` (out/data/brown_*.bin) when present, else a synthetic noisy Markov chain
// (the output says which; nothing is skipped).
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "base/rng.h"
#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/linear-train"
#define BROWN_TRAIN "out/data/brown_train_000000.bin"
#define BROWN_VAL "out/data/brown_val_000000.bin"

static void make_synthetic(void) {
    mkdir_p(DIR_ "/data");
    Rng r;
    rng_seed(&r, 11);
    for (int s = 0; s < 2; s++) {
        size_t n = s ? 3000 : 20000;
        uint16_t *t = xmalloc(sizeof(uint16_t) * n);
        t[0] = 0;
        for (size_t i = 1; i < n; i++)
            t[i] = (uint16_t)((t[i - 1] * 7 + 3 + (rng_below(&r, 4) == 0 ? rng_below(&r, 64) : 0)) % 64);
        shard_write(s ? DIR_ "/data/val_000000.bin" : DIR_ "/data/train_000000.bin", t, n);
        free(t);
    }
}

static int run(const char *cmd) {
    char full[4096];
    const char *bin = getenv("HYBRID");
    if (bin && !strncmp(cmd, "./hybrid", 8)) snprintf(full, sizeof full, "%s%s > " DIR_ "/last.log 2>&1", bin, cmd + 8);
    else snprintf(full, sizeof full, "%s > " DIR_ "/last.log 2>&1", cmd);
    return system(full);
}

// first and last "loss" of a metrics log (training lines), and the last "val_loss"
static void losses(const char *path, double *first, double *last, double *val) {
    *first = *last = *val = -1;
    char *text = read_file(path, NULL);
    if (!text) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *v = strstr(line, "\"val_loss\": "), *l = strstr(line, "\"loss\": ");
        if (v) sscanf(v + 12, "%lf", val);
        else if (l) {
            sscanf(l + 8, "%lf", last);
            if (*first < 0) *first = *last;
        }
    }
    free(text);
}

static void train(const char *layers, const char *name, int brown) {
    char cmd[3072];
    snprintf(cmd, sizeof cmd,
             "./hybrid train configs/gpt2-tiny.conf --layers '%s' --d_model 32 --n_head 2 --norm rmsnorm --mlp swiglu "
             "--position none --bias false --context_length 32 --seq_len 32 --batch_size 4 --total_batch_size 128 "
             "--steps 16 --warmup_steps 2 --lr 1e-2 --val_every 16 --val_batches 2 --log_every 5 --sample_tokens 12 "
             "--threads 2 --reset_at_eot true --chunk_size 16 --checkpoint_every 0 %s --out_dir " DIR_ "/%s",
             layers,
             brown ? "--train_data '" BROWN_TRAIN "' --val_data '" BROWN_VAL "'"
                   : "--vocab_size 64 --padded_vocab_size 0 --eot_token 0 --train_data '" DIR_
                     "/data/train_*.bin' --val_data '" DIR_ "/data/val_*.bin'",
             name);
    CHECK(run(cmd) == 0, "%s: training run failed", layers);
    char *out = read_file(DIR_ "/last.log", NULL);
    CHECK(out && strstr(out, "step    16/16") && strstr(out, "sample:"), "%s: output:\n%s", layers, out ? out : "");
    free(out);
    char path[256];
    snprintf(path, sizeof path, DIR_ "/%s/metrics.jsonl", name);
    double first, last, val;
    losses(path, &first, &last, &val);
    // Brown starts near ln(50257) = 10.8; the synthetic chain near ln(64) = 4.2
    const double drop = brown ? 1.0 : 0.5;
    CHECK(first > 0 && last < first - drop, "%s: loss should fall by %.1f: %.4f -> %.4f", layers, drop, first, last);
    CHECK(val > 0 && val < first - drop, "%s: val loss %.4f vs first train loss %.4f", layers, val, first);
    // the checkpoint loads back (3-D conv kernels included) and samples through decode
    snprintf(cmd, sizeof cmd, "./hybrid sample " DIR_ "/%s/checkpoints/step_00000016 --tokens 6 --temp 0", name);
    CHECK(run(cmd) == 0, "%s: sample from the checkpoint failed", layers);
    printf("%-6s on %-9s: train loss %.4f -> %.4f, val loss %.4f\n", layers, brown ? "Brown" : "synthetic", first,
           last, val);
}

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    mkdir_p(DIR_);
    const int brown = file_exists(BROWN_TRAIN) && file_exists(BROWN_VAL);
    if (!brown) {
        printf("Brown shards not found (%s; `make data` makes them): training on a synthetic Markov chain\n",
               BROWN_TRAIN);
        make_synthetic();
    }
    train("K x2", "kda", brown);
    train("G x2", "gdn", brown);
    TEST_MAIN_END();
}
