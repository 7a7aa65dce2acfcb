// End to end through ./hybrid (the float build) with a tiny hybrid: configs/hybrid-tiny.conf
// with its `layers` line replaced (exactly what scripts/ablate_ratio.sh does; MLA only until
// KDA lands) and shrunk by overrides. It trains on synthetic shards with a falling loss,
// logs the MoE load statistics, samples, and a run interrupted at step 6 and resumed gives
// every metrics line (MoE statistics included, timing excluded) equal to the last bit. inspect
// prints the totals of KL-S (docs/hybrid.md, "The KL-S and KL-XS family").
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "base/rng.h"
#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define DIR_ "out/test-tmp/hybrid-cli"
#define TINY                                                                                                       \
    "./hybrid train " DIR_ "/tiny.conf --d_model 32 --n_head 2 --vocab_size 512 --padded_vocab_size 0 "           \
    "--context_length 32 --seq_len 32 --batch_size 4 --total_batch_size 256 --steps 40 --warmup_steps 2 --lr 1e-2 " \
    "--mlp_hidden 64 --mla_kv_rank 16 --mla_qk_nope_dim 8 --mla_rope_dim 8 --mla_v_dim 8 --moe_experts 4 "          \
    "--moe_hidden 16 --moe_shared_hidden 32 --moe_aux_loss_coef 0.01 --val_every 8 --val_batches 2 --log_every 8 "   \
    "--sample_tokens 8 --threads 1 --train_data '" DIR_ "/data/train_*.bin' --val_data '" DIR_ "/data/val_*.bin' "

static void make_data(void) { cli_make_markov_shards(DIR_, 512); }

// configs/hybrid-tiny.conf with `layers = <layers>`
static void make_config(const char *layers) {
    char *text = read_file("configs/hybrid-tiny.conf", NULL);
    if (!text) die("configs/hybrid-tiny.conf: cannot read");
    char *out = xcalloc(1, strlen(text) + 64);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "layers ", 7) || !strncmp(line, "layers=", 7)) {
            strcat(out, "layers = ");
            strcat(out, layers);
        } else {
            strcat(out, line);
        }
        strcat(out, "\n");
    }
    write_file_atomic(DIR_ "/tiny.conf", out, strlen(out));
    free(text);
    free(out);
}

static int run(const char *cmd) { return cli_run(DIR_, cmd); }

static char *log_text(void) { return read_file(DIR_ "/last.log", NULL); }

static char *stable_lines(const char *path) { return cli_stable_lines(path); }

// substring search in binary data (the safetensors header follows 8 length bytes)
static int contains(const char *buf, size_t n, const char *what) {
    size_t k = strlen(what);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(buf + i, what, k)) return 1;
    return 0;
}

static double field(const char *line, const char *key) {
    const char *p = strstr(line, key);
    return p ? atof(p + strlen(key)) : -1;
}

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    make_data();
    make_config("KKKM");

    // uninterrupted run: falling loss, MoE statistics, validation, a sample
    CHECK(run(TINY "--out_dir " DIR_ "/a --checkpoint_every 4") == 0, "training run failed");
    char *out = log_text();
    CHECK(strstr(out, "step    40/40") && strstr(out, "val loss") && strstr(out, "sample:") && strstr(out, "moe cv"),
          "progress output:\n%s", out);
    free(out);
    char *a = stable_lines(DIR_ "/a/metrics.jsonl");
    double first = field(a, "\"loss\": ");
    char *p = a, *q;
    while ((q = strstr(p + 1, "\"loss\": "))) p = q;
    double last = field(p, "\"loss\": ");
    CHECK(last < first - 1.0, "loss should fall: %.4f -> %.4f", first, last);
    double lmin = field(a, "\"moe_load_min\": "), lmax = field(a, "\"moe_load_max\": ");
    double cv = field(a, "\"moe_load_cv\": "), aux = field(a, "\"moe_aux_loss\": ");
    // 256 tokens x top-2 over 4 experts: 128 slots per expert on average
    CHECK(lmin >= 0 && lmax >= 128 && lmin <= 128 && cv >= 0 && aux > 0,
          "MoE fields of the first line: min %g max %g cv %g aux %g\n%s", lmin, lmax, cv, aux, a);
    printf("tiny M+MoE hybrid: loss %.4f -> %.4f in 40 steps; step 1 loads %g..%g (cv %.3f)\n", first, last, lmin, lmax,
           cv);

    // interrupted at step 6, resumed: identical metrics (bias state and all)
    CHECK(run(TINY "--out_dir " DIR_ "/b --checkpoint_every 4 --stop_at_step 6") == 0, "interrupted run failed");
    CHECK(run(TINY "--out_dir " DIR_ "/b --checkpoint_every 4 --resume auto") == 0, "resumed run failed");
    out = log_text();
    CHECK(strstr(out, "resumed from") != NULL, "resume message missing:\n%s", out);
    free(out);
    char *b = stable_lines(DIR_ "/b/metrics.jsonl");
    CHECK(!strcmp(a, b), "resumed metrics differ from the uninterrupted run:\n--- uninterrupted\n%s--- resumed\n%s", a,
          b);
    free(a);
    free(b);
    // the selection bias is in the checkpoint, and it has moved
    size_t st_len = 0;
    char *st = read_file(DIR_ "/a/checkpoints/step_00000040/model.safetensors", &st_len);
    CHECK(st && contains(st, st_len, "\"blocks.1.moe.router.bias\""), "the MoE bias is not in the checkpoint");
    free(st);

    // sample from the checkpoint
    CHECK(run("./hybrid sample " DIR_ "/a/checkpoints/step_00000040 --tokens 5 --temp 0") == 0, "sample failed");

    // inspect: KL-S 0:1 totals (docs/hybrid.md, "The KL-S and KL-XS family": 248.5M total,
    // 86.0M active, 842 MFLOP/token)
    CHECK(run("./hybrid inspect configs/kl-s-0-1.conf") == 0, "inspect failed");
    out = log_text();
    CHECK(strstr(out, "parameters: 248488704 total") && strstr(out, "85992192 non-embedding (85.99M)") &&
              strstr(out, "(842.1 MFLOP)"),
          "inspect output:\n%s", out + (strlen(out) > 600 ? strlen(out) - 600 : 0));
    free(out);

    // a clear error for MoE with a non-gated MLP
    CHECK(run(TINY "--out_dir " DIR_ "/c --mlp gelu") != 0, "moe with gelu accepted");
    out = log_text();
    CHECK(strstr(out, "set mlp = swiglu or situ") != NULL, "%s", out);
    free(out);

    // --device cuda with a CUDA backend that cannot be loaded (docs/cuda.md, "The CUDA plugin"):
    // an error naming the library, whether or not a GPU is visible; a build without CUDA says so
    CHECK(run("HYBRID_CUDA_PLUGIN=" DIR_ "/no-such-plugin.so " TINY "--out_dir " DIR_ "/d --device cuda") != 0,
          "--device cuda with a missing plugin was accepted");
    out = log_text();
    CHECK(strstr(out, "hybrid: error: --device cuda: cannot load the CUDA backend " DIR_ "/no-such-plugin.so") ||
              strstr(out, "hybrid: error: --device cuda: this build has no CUDA"),
          "%s", out);
    free(out);
    TEST_MAIN_END();
}
