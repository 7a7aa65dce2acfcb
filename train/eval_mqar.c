// `hybrid eval-mqar`: the accuracy of a checkpoint on MQAR's queried positions (docs/mqar.md,
// "Accuracy"), through the model's one forward (model_forward without targets, then the
// logits of the query rows).
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "data/mqar.h"
#include "model/model.h"
#include "train.h"
#include "train/checkpoint_config.h"
#include "base/util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *path;   // a checkpoint folder, or a run's out_dir (its newest checkpoint)
    const char *jsonl;  // append the result line here too
    int pairs;          // --pairs (0: not given)
    long sequences;
} EvalArgs;

static int eval_option(const char *name, const char *value, void *ctx) {
    EvalArgs *a = ctx;
    if (!value) die("command line: --%s needs a value", name);
    if (!strcmp(name, "pairs")) a->pairs = (int)cli_long(name, value, 1, 1 << 30);
    else if (!strcmp(name, "sequences")) a->sequences = cli_long(name, value, 1, 1L << 40);
    else if (!strcmp(name, "jsonl")) a->jsonl = value;
    else return -1;
    return 1;
}

static void eval_positional(const char *arg, void *ctx) {
    EvalArgs *a = ctx;
    if (a->path) die("command line: unexpected argument '%s' (one checkpoint or run folder)", arg);
    a->path = arg;
}

static void eval_help(void) {
    printf("usage: hybrid eval-mqar CHECKPOINT_DIR|RUN_DIR [--pairs N] [--sequences N] [--jsonl FILE]\n"
           "                        [--seq_len T] [--batch_size B] [--mqar_seed S] [--device D] [--threads N]\n\n"
           "Accuracy of a checkpoint on multi-query associative recall (docs/mqar.md): over --sequences\n"
           "generated sequences (default 1000) of the evaluation stream, the share of queried positions\n"
           "where the argmax of the logits is the queried key's value. A run folder means its newest\n"
           "checkpoint. --pairs (or --mqar_pairs), --seq_len and --mqar_seed default to the checkpoint's\n"
           "config, so a model trained on MQAR is evaluated on its own task; give other values to test\n"
           "recall beyond it. Prints the result as one JSON line on stdout (a summary on stderr) and\n"
           "appends that line to --jsonl FILE when given.\n");
}

// s as a JSON string (quotes, backslashes and control characters escaped).
static void json_put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static int given(const char *key) { return strcmp(config_origin(key), "default") != 0; }

// The queries of `sequences` sequences of the eval stream, scored in batches of up to B.
static void score_model(Model *model, const MqarSpec *spec, uint64_t seed, long sequences, int B, MqarScore *score) {
    const int T = spec->seq_len;
    int *inputs = xmalloc(sizeof(int) * (size_t)B * (size_t)T), *targets = xmalloc(sizeof(int) * (size_t)B * (size_t)T);
    float *row = xmalloc(sizeof(float) * (size_t)model->cfg.padded_vocab_size);
    for (long first = 0; first < sequences; first += B) {
        const int rows = sequences - first < B ? (int)(sequences - first) : B;
        for (int b = 0; b < rows; b++)
            mqar_sequence(spec, seed, MQAR_EVAL, (uint64_t)(first + b), inputs + (size_t)b * T, targets + (size_t)b * T);
        model_forward(model, inputs, NULL, rows, T);
        for (int b = 0; b < rows; b++)
            for (int t = 0; t < T; t++) {
                if (targets[(size_t)b * T + t] < 0) continue;
                model_logits_row(model, b, t, row);
                mqar_score_rows(row, 0, model->cfg.vocab_size, targets + (size_t)b * T + t, 1, score);
            }
    }
    free(inputs);
    free(targets);
    free(row);
}

int eval_mqar_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            eval_help();
            return 0;
        }
    EvalArgs a = {0};
    a.sequences = 1000;
    Config given_cfg;  // the command line's keys; the model comes from the checkpoint
    cli_parse(argc, argv, &given_cfg, eval_option, &a, eval_positional);
    const char *model_key = config_model_key_given();
    if (model_key)
        die("eval-mqar: --%s: the model comes from the checkpoint (its config.conf); only --seq_len, --batch_size, "
            "--mqar_pairs, --mqar_seed, --device and --threads may be given",
            model_key);
    if (a.pairs && given("mqar_pairs")) die("eval-mqar: give --pairs or --mqar_pairs, not both");
    const int g_seq = given("seq_len"), g_batch = given("batch_size"), g_seed = given("mqar_seed"),
              g_pairs = given("mqar_pairs");
    if (!a.path) die("eval-mqar: give a checkpoint folder or a run folder (e.g. out/runs/mqar)");
    char *dir = NULL;
    {
        char conf[CONFIG_STR + 32];
        snprintf(conf, sizeof conf, "%s/config.conf", a.path);
        dir = file_exists(conf) ? xstrdup(a.path) : checkpoint_latest(a.path);
        if (!dir) die("%s: neither a checkpoint (no config.conf) nor a run folder with checkpoints", a.path);
    }
    Config c;
    checkpoint_read_config(dir, &c);
    if (g_seq) c.seq_len = given_cfg.seq_len;
    if (g_batch) c.batch_size = given_cfg.batch_size;
    if (g_seed) c.mqar_seed = given_cfg.mqar_seed;
    if (g_pairs) c.mqar_pairs = given_cfg.mqar_pairs;
    if (a.pairs) c.mqar_pairs = a.pairs;
    c.device = given_cfg.device;
    c.threads = given_cfg.threads;
    if (c.mqar_pairs < 1)
        die("eval-mqar: %s was not trained on MQAR (mqar_pairs = 0 in its config.conf): give --pairs N", dir);
    if (c.seq_len < 1) die("eval-mqar: --seq_len must be positive");
    if (c.batch_size < 1) die("eval-mqar: --batch_size must be positive");
    if (c.model.position == POS_LEARNED && c.seq_len > c.model.context_length)
        die("eval-mqar: seq_len = %d exceeds the model's context_length = %d (learned positions)", c.seq_len,
            c.model.context_length);
    const MqarSpec spec = {c.model.vocab_size, c.seq_len, c.mqar_pairs};
    char why[256];
    if (mqar_check(&spec, why, sizeof why)) die("eval-mqar: %s", why);
#ifdef _OPENMP
    if (c.threads > 0) omp_set_num_threads(c.threads);
#endif
    Model model;
    model_create(&model, &c.model, cli_backend(&c), c.batch_size, c.seq_len);
    float *p = params_host_array(&model.table, 0);
    TrainerState ts = {0};
    checkpoint_load(dir, &model.table, p, NULL, NULL, &ts);
    model_set_params(&model, p);
    free(p);
    MqarScore score = {0, 0};
    const double t0 = now_seconds();
    score_model(&model, &spec, (uint64_t)c.mqar_seed, a.sequences, c.batch_size, &score);
    const double acc = score.queries ? (double)score.correct / (double)score.queries : 0;
    fprintf(stderr, "eval-mqar: %s (step %d): accuracy %.4f (%ld of %ld queries; %ld sequences, %d pairs, seq_len %d) "
            "in %.1f s\n",
            dir, ts.step, acc, score.correct, score.queries, a.sequences, c.mqar_pairs, c.seq_len, now_seconds() - t0);
    for (int k = 0; k < (a.jsonl ? 2 : 1); k++) {
        FILE *f = k == 0 ? stdout : xfopen(a.jsonl, "a");
        fprintf(f, "{\"checkpoint\": ");
        json_put_string(f, dir);
        fprintf(f, ", \"step\": %d, \"layers\": ", ts.step);
        json_put_string(f, c.model.layers_spec);
        fprintf(f, ", \"vocab_size\": %d, \"seq_len\": %d, \"pairs\": %d, \"sequences\": %ld, \"mqar_seed\": %ld, "
                   "\"queries\": %ld, \"correct\": %ld, \"accuracy\": %.9g}\n",
                c.model.vocab_size, c.seq_len, c.mqar_pairs, a.sequences, c.mqar_seed, score.queries, score.correct,
                acc);
        if (k == 0) fflush(stdout);
        else xfclose(f, a.jsonl);
    }
    model_destroy(&model);
    free(dir);
    return 0;
}
