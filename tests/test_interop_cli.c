// `hybrid import` and `hybrid export` through the real CLI (./hybrid): a Hugging Face
// GPT2LMHeadModel folder becomes a weights-only checkpoint that `sample` uses and `train
// --resume` starts from (step 0, fresh optimizer state, the data from the start: the same
// losses, to the last bit, as a full step-0 checkpoint of the same weights with zero
// moments); a K-layer checkpoint exports to fla with a note on reset_at_eot; the refusals
// of both commands are clear.
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "checkpoints/checkpoint.h"
#include "checkpoints/hf_io.h"
#include "cli_util.h"
#include "interop_test_util.h"
#include "testing.h"
#include "train/checkpoint_config.h"
#include "train/config.h"

#define DIR_ "out/test-tmp/interop-cli"
#define RUN_KEYS                                                                                              \
    "--seq_len 32 --batch_size 4 --total_batch_size 256 --steps 6 --warmup_steps 1 --lr 1e-3 --val_every 0 " \
    "--val_batches 2 --log_every 1 --sample_tokens 8 --threads 2 --train_data '" DIR_ "/data/train_*.bin' "   \
    "--val_data '" DIR_ "/data/val_*.bin' "

static int run(const char *cmd) { return cli_run(DIR_, cmd); }

static char *log_text(void) { return read_file(DIR_ "/last.log", NULL); }

// The generated tokens `hybrid sample` printed (the log line that is not its timing line).
static char *sampled(void) {
    char *text = log_text(), *out = NULL;
    for (char *line = strtok(text, "\n"); line && !out; line = strtok(NULL, "\n"))
        if (strncmp(line, "sample:", 7)) out = xstrdup(line);
    free(text);
    return out ? out : xstrdup("");
}

// A random GPT-2 shaped model written as a Hugging Face folder.
static void make_hf(const char *dir) {
    const char *kv[] = {"layers", "A x2", "d_model", "32", "n_head", "2", "vocab_size", "64", "context_length", "32",
                        "seq_len", "32", NULL};
    IoModel M;
    io_model_make(&M, kv, NULL, 3, 0);
    export_hf_gpt2(dir, &M.c.model, &M.t, &M.mp, M.p);
    io_model_free(&M);
}

// A random K-layer checkpoint (step 1) that fla can load, restarting at end-of-text.
static void make_kda(const char *out_dir) {
    const char *kv[] = {"layers", "K x2", "d_model", "32", "n_head", "2", "norm", "rmsnorm", "position", "none", "mlp",
                        "swiglu", "bias", "false", "vocab_size", "64", "eot_token", "0", "reset_at_eot", "true",
                        "seq_len", "32", NULL};
    IoModel M;
    io_model_make(&M, kv, NULL, 4, 0);
    TrainerState ts = {1, 1, {0, 0, 0}, 1, 0};
    char *text = config_to_text(&M.c);
    checkpoint_save(out_dir, text, &M.t, M.p, NULL, NULL, MUON_MOMENTUM_SUM, &ts, 1);
    free(text);
    io_model_free(&M);
}

// The imported weights as a full checkpoint at step 0: zero moments, the data at its start,
// the sampling RNG a run with this seed starts from (what --save-init writes).
static void make_full_step0(const char *from, const char *out_dir) {
    Config c;
    checkpoint_read_config(from, &c);
    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    float *p = xmalloc(sizeof(float) * t.total), *z = xcalloc(t.total, sizeof(float));
    checkpoint_load(from, &t, p, NULL, NULL, NULL);
    TrainerState ts = {0};
    ts.world = 1;
    Rng rng;
    rng_seed(&rng, (uint64_t)c.seed + 1);
    ts.rng = rng.state;
    char *text = config_to_text(&c);
    checkpoint_save(out_dir, text, &t, p, z, z, MUON_MOMENTUM_SUM, &ts, 1);
    free(text);
    free(p);
    free(z);
    params_free(&t, &mp);
}

int main(void) {
    CLI_TEST_BEGIN(DIR_);
    cli_make_markov_shards(DIR_, 64);
    make_hf(DIR_ "/hf");

    CHECK(run("./hybrid import --hf " DIR_ "/hf " DIR_ "/ck") == 0, "import failed");
    char *out = log_text();
    CHECK(strstr(out, "imported " DIR_ "/hf (GPT2LMHeadModel: 2 layers, n_embd 32, 2 heads, vocab 64, tied") != NULL,
          "import output:\n%s", out);
    free(out);
    CHECK(file_exists(DIR_ "/ck/config.conf") && file_exists(DIR_ "/ck/model.safetensors") &&
              file_exists(DIR_ "/ck/trainer_state.txt") && !file_exists(DIR_ "/ck/optimizer.safetensors"),
          "the import is not a weights-only checkpoint");
    char *conf = read_file(DIR_ "/ck/config.conf", NULL);
    CHECK(conf && strstr(conf, "layers = A x2\n") && strstr(conf, "padded_vocab_size = 128\n") &&
              strstr(conf, "seq_len = 32\n") && strstr(conf, "context_length = 32\n"),
          "config.conf:\n%s", conf ? conf : "(none)");
    free(conf);
    char *state = read_file(DIR_ "/ck/trainer_state.txt", NULL);
    CHECK(state && strstr(state, "step = 0\n"), "trainer_state.txt:\n%s", state ? state : "(none)");
    free(state);

    // sample: cached and full-forward decoding agree on the imported weights
    CHECK(run("./hybrid sample " DIR_ "/ck --prompt-ids 1,2,3 --tokens 8 --temp 0") == 0, "sample failed");
    char *cached = sampled();
    CHECK(run("./hybrid sample " DIR_ "/ck --prompt-ids 1,2,3 --tokens 8 --temp 0 --full-forward") == 0,
          "sample --full-forward failed");
    char *full = sampled();
    CHECK(*cached && !strcmp(cached, full), "cached sample '%s' vs full '%s'", cached, full);
    free(cached);
    free(full);

    // train --resume from the weights-only checkpoint: a new run from its weights, the same
    // losses as from a full step-0 checkpoint of those weights
    CHECK(run("./hybrid train " DIR_ "/ck/config.conf --resume " DIR_ "/ck " RUN_KEYS "--out_dir " DIR_ "/a") == 0,
          "train --resume from the import failed");
    out = log_text();
    CHECK(strstr(out, "starting from the weights of " DIR_ "/ck (a weights-only checkpoint: step 0") &&
              strstr(out, "step     6/6") && strstr(out, "sample:"),
          "train output:\n%s", out);
    free(out);
    make_full_step0(DIR_ "/ck", DIR_ "/full");
    CHECK(run("./hybrid train " DIR_ "/ck/config.conf --resume " DIR_ "/full/checkpoints/step_00000000 " RUN_KEYS
              "--out_dir " DIR_ "/b") == 0,
          "train --resume from the full step-0 checkpoint failed");
    char *la = cli_stable_lines(DIR_ "/a/metrics.jsonl"), *lb = cli_stable_lines(DIR_ "/b/metrics.jsonl");
    CHECK(strstr(la, "\"step\": 6") && !strcmp(la, lb),
          "weights-only resume differs from a full step-0 checkpoint:\n%s---\n%s", la, lb);
    free(la);
    free(lb);
    // the run's own checkpoint continues as usual
    CHECK(dir_exists(DIR_ "/a/checkpoints/step_00000006") &&
              file_exists(DIR_ "/a/checkpoints/step_00000006/optimizer.safetensors"),
          "the run from the import wrote no full checkpoint");

    // refusals
    CHECK(run("./hybrid import --hf " DIR_ "/hf " DIR_ "/ck") != 0, "import over an existing folder accepted");
    out = log_text();
    CHECK(strstr(out, DIR_ "/ck: already exists; give a new folder") != NULL, "%s", out);
    free(out);
    CHECK(run("./hybrid import --hf " DIR_ "/hf " DIR_ "/ck2 --d_model 64") != 0, "a model key accepted");
    out = log_text();
    CHECK(strstr(out, "command line --d_model: d_model is a model key: hybrid import takes the model from " DIR_
                      "/hf/config.json") != NULL,
          "%s", out);
    free(out);
    CHECK(!dir_exists(DIR_ "/ck2"), "a refused import left a folder");
    CHECK(run("./hybrid import " DIR_ "/ck2") != 0, "import without --hf accepted");
    out = log_text();
    CHECK(strstr(out, "import: give --hf HF_DIR") != NULL, "%s", out);
    free(out);
    CHECK(run("./hybrid export --hf " DIR_ "/x --fla " DIR_ "/y " DIR_ "/ck") != 0, "export --hf --fla accepted");
    out = log_text();
    CHECK(strstr(out, "export: give one of --hf OUT_DIR or --fla OUT_DIR") != NULL, "%s", out);
    free(out);
    CHECK(run("./hybrid import --help") == 0 && run("./hybrid export --help") == 0, "--help failed");

    // export --fla: a K-layer checkpoint, with the note on reset_at_eot; the GPT-2 import is refused
    make_kda(DIR_ "/kda");
    CHECK(run("./hybrid export --fla " DIR_ "/fla " DIR_ "/kda/checkpoints/step_00000001") == 0, "export --fla failed");
    out = log_text();
    CHECK(strstr(out, "-> " DIR_ "/fla (fla KDAForCausalLM)") &&
              strstr(out, "note: this model restarts its KDA states after every end-of-text token"),
          "export --fla output:\n%s", out);
    free(out);
    CHECK(file_exists(DIR_ "/fla/config.json") && file_exists(DIR_ "/fla/model.safetensors"), "no fla folder");
    CHECK(run("./hybrid export --fla " DIR_ "/fla2 " DIR_ "/ck") != 0, "export --fla of a GPT-2 model accepted");
    out = log_text();
    CHECK(strstr(out, DIR_ "/fla2: cannot export as fla KDAForCausalLM: layer 0 is 'A': fla's attention layer") != NULL,
          "%s", out);
    free(out);

    // export -> import -> export gives the same file
    CHECK(run("./hybrid export --hf " DIR_ "/hf2 " DIR_ "/ck") == 0, "export of the import failed");
    size_t n1, n2;
    char *f1 = read_file(DIR_ "/hf/model.safetensors", &n1), *f2 = read_file(DIR_ "/hf2/model.safetensors", &n2);
    CHECK(f1 && f2 && n1 == n2 && !memcmp(f1, f2, n1), "export -> import -> export changed model.safetensors");
    free(f1);
    free(f2);
    remove_tree(DIR_);
    TEST_MAIN_END();
}
