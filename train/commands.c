// `hybrid sample` and `hybrid inspect` (`import` and `export`: interop.c).
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint_config.h"
#include "cli.h"
#include "generate.h"
#include "model/model.h"
#include "base/util.h"
#include "train.h"

// ---------------------------------------------------------------------------
// sample

typedef struct {
    const char *checkpoint;
    const char *prompt_ids;
    const char *prompt;
    int tokens;
    double temperature;
    long seed;
    int have_temperature;
    int full_forward;
} SampleArgs;

static int sample_option(const char *name, const char *value, void *ctx) {
    SampleArgs *a = ctx;
    if (!strcmp(name, "full-forward") || !strcmp(name, "full_forward")) {
        a->full_forward = 1;
        return 0;
    }
    if (!value) die("command line: --%s needs a value", name);
    if (!strcmp(name, "checkpoint")) a->checkpoint = value;
    else if (!strcmp(name, "prompt-ids") || !strcmp(name, "prompt_ids")) a->prompt_ids = value;
    else if (!strcmp(name, "prompt")) a->prompt = value;
    else if (!strcmp(name, "tokens")) a->tokens = (int)cli_long(name, value, 1, CONFIG_SAMPLE_TOKENS_MAX);
    else if (!strcmp(name, "temp")) {
        a->temperature = cli_double(name, value, 0, 1e6);
        a->have_temperature = 1;
    } else return -1;
    return 1;
}

static void sample_positional(const char *arg, void *ctx) {
    SampleArgs *a = ctx;
    if (a->checkpoint) die("command line: unexpected argument '%s'", arg);
    a->checkpoint = arg;
}

// Parses "1,2,3" into ids; returns the count.
static int parse_ids(const char *text, int *out, int max, int vocab) {
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) die("--prompt-ids: '%s' is not a comma-separated list of token ids", text);
        if (v < 0 || v >= vocab) die("--prompt-ids: token id %ld is outside [0, %d)", v, vocab);
        if (n >= max) die("--prompt-ids: more than %d tokens", max);
        out[n++] = (int)v;
        p = end;
        if (*p == ',') p++;
    }
    if (n == 0) die("--prompt-ids: no token ids given");
    return n;
}

int sample_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: hybrid sample CHECKPOINT_DIR [--prompt TEXT | --prompt-ids 1,2,3] [--tokens N] [--temp T]\n"
                   "                     [--seed S] [--vocab_dir DIR] [--full-forward]\n\n"
                   "Generates from a checkpoint (temperature 0 = greedy). Without a prompt it starts from\n"
                   "end-of-text. Prints text when the model uses GPT-2's vocabulary and vocab_dir has the\n"
                   "tokenizer files, token ids otherwise. Decoding runs the model's cached forward (every\n"
                   "layer keeps a cache of the prefix); --full-forward instead runs a full forward over\n"
                   "the last seq_len tokens for every new token (slow; the same tokens up to rounding).\n");
            return 0;
        }
    SampleArgs a = {0};
    a.tokens = 64;
    a.temperature = 1.0;
    // the checkpoint's own config decides the model; --key overrides are not taken here
    Config dummy;
    cli_parse(argc, argv, &dummy, sample_option, &a, sample_positional);
    if (!a.checkpoint) die("sample: give a checkpoint folder (e.g. out/runs/default/checkpoints/step_00000100)");
    if (a.tokens < 1) die("sample: --tokens must be positive");
    Config c;
    checkpoint_read_config(a.checkpoint, &c);
    c.device = dummy.device;
    snprintf(c.vocab_dir, sizeof c.vocab_dir, "%s", dummy.vocab_dir);
    Tokenizer *tok = sample_tokenizer(&c);
    Model model;
    model_create(&model, &c.model, cli_backend(&c), 1, c.seq_len);
    float *p = params_host_array(&model.table, 0);
    checkpoint_load(a.checkpoint, &model.table, p, NULL, NULL, NULL);
    model_set_params(&model, p);
    free(p);
    int max = c.seq_len + a.tokens;
    int *tokens = xmalloc(sizeof(int) * (size_t)max);
    int n_prompt = 1;
    tokens[0] = c.model.vocab_size > 50256 ? 50256 : 0;
    if (a.prompt_ids && a.prompt) die("sample: give --prompt or --prompt-ids, not both");
    if (a.prompt_ids) n_prompt = parse_ids(a.prompt_ids, tokens, c.seq_len, c.model.vocab_size);
    if (a.prompt) {
        if (!tok) die("sample: --prompt needs the GPT-2 tokenizer files in %s (run `make vocab`) and a model with "
                      "vocab_size 50257 (this one has %d)", c.vocab_dir, c.model.vocab_size);
        size_t n;
        int *ids = tokenizer_encode(tok, a.prompt, strlen(a.prompt), 0, &n);
        if (n == 0) die("sample: --prompt is empty");
        if ((int)n > c.seq_len) die("sample: the prompt has %zu tokens, more than seq_len %d", n, c.seq_len);
        memcpy(tokens, ids, n * sizeof(int));
        n_prompt = (int)n;
        free(ids);
        print_tokens(stdout, tok, tokens, n_prompt);
    }
    Rng rng;
    rng_seed(&rng, (uint64_t)dummy.seed);
    const double t0 = now_seconds();
    generate(&model, tokens, n_prompt, a.tokens, a.have_temperature ? a.temperature : c.temperature, &rng,
             a.full_forward ? GENERATE_FULL_FORWARD : GENERATE_CACHED);
    const double dt = now_seconds() - t0;
    print_tokens(stdout, tok, tokens + n_prompt, a.tokens);
    fprintf(stderr, "sample: %d tokens after a %d-token prompt in %.3f s (%.1f tokens/s, %s)\n", a.tokens, n_prompt,
            dt, a.tokens / (dt > 0 ? dt : 1e-9), a.full_forward ? "a full forward per token" : "cached forward");
    if (tok) tokenizer_free(tok);
    free(tokens);
    model_destroy(&model);
    return 0;
}

// ---------------------------------------------------------------------------
// inspect

typedef struct {
    const char *checkpoint;
} InspectArgs;

static int inspect_option(const char *name, const char *value, void *ctx) {
    InspectArgs *a = ctx;
    if (!strcmp(name, "checkpoint")) {
        if (!value) die("command line: --checkpoint needs a folder");
        a->checkpoint = value;
        return 1;
    }
    return -1;
}

int inspect_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: hybrid inspect [CONFIG.conf] [--key value ...]\n"
                   "       hybrid inspect --checkpoint DIR\n\n"
                   "Prints the parameter table (name, shape, count, offset, optimizer group, init),\n"
                   "the parameter totals and the training FLOPs per token.\n");
            return 0;
        }
    Config c;
    InspectArgs a = {0};
    cli_parse(argc, argv, &c, inspect_option, &a, NULL);
    if (a.checkpoint) checkpoint_read_config(a.checkpoint, &c);
    else config_finalize(&c);
    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    printf("layers: %s (%d)  d_model %d  heads %d  vocab %d (padded %d)  context %d\n\n", c.model.layers_spec, c.model.n_layer,
           c.model.d_model, c.model.n_head, c.model.vocab_size, c.model.padded_vocab_size, c.model.context_length);
    params_print(&c.model, &t, c.seq_len, stdout);
    params_free(&t, &mp);
    return 0;
}
