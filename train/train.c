// `hybrid train`: the training loop. Gradient accumulation to total_batch_size,
// clipping, the LR schedule, validation, checkpoints with bit-exact resume, samples.
#include "train.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "cli.h"
#include "data/loader.h"
#include "generate.h"
#include "metrics.h"
#include "model/model.h"
#include "model/util.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *resume;  // NULL, "auto" or a checkpoint folder
    int save_init;       // --save-init: checkpoint step 0 (the initial weights) before training
} TrainArgs;

static volatile sig_atomic_t g_interrupted = 0;
static void on_signal(int sig) {
    (void)sig;
    g_interrupted = 1;
}

static int train_option(const char *name, const char *value, void *ctx) {
    TrainArgs *a = ctx;
    if (!strcmp(name, "resume")) {
        if (!value) die("command line: --resume needs a checkpoint folder or 'auto'");
        a->resume = value;
        return 1;
    }
    if (!strcmp(name, "save-init")) {  // a flag: takes no value
        a->save_init = 1;
        return 0;
    }
    return -1;
}

static void train_help(void) {
    printf("usage: hybrid train [CONFIG.conf] [--key value ...] [--resume auto|CHECKPOINT_DIR] [--save-init]\n\n"
           "Trains the model the config describes on llm.c-format token shards.\n"
           "--resume auto continues from the newest checkpoint in out_dir; resuming is bit-exact.\n"
           "--save-init writes the initial weights as checkpoint step_00000000 before the first step\n"
           "(on CUDA: the bf16 parameters the fp32 master starts from), e.g. for another trainer to start from.\n"
           "SIGINT/SIGTERM finish the current step, write a checkpoint and stop.\n\n"
           "Config keys (each also a --key override):\n");
    config_print_keys(stdout);
}

static double evaluate(Model *model, Loader *val, int batches, int *inputs, int *targets) {
    loader_reset(val);
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        loader_next(val, inputs, targets);
        sum += model_forward(model, inputs, targets, val->B, val->T);
    }
    return sum / batches;
}

static void save_checkpoint(const Config *c, Model *model, Optimizer *opt, const TrainerState *ts) {
    size_t n = model->table.total;
    float *p = xmalloc(sizeof(float) * n), *m = xmalloc(sizeof(float) * n), *v = xmalloc(sizeof(float) * n);
    optimizer_get_weights(opt, model, p);  // fp32 master weights where the backend keeps them
    optimizer_get_state(opt, model, m, v);
    checkpoint_save(c->out_dir, c, &model->table, p, m, v, ts, c->keep_checkpoints);
    printf("checkpoint: %s/checkpoints/step_%08d\n", c->out_dir, ts->step);
    free(p);
    free(m);
    free(v);
}

static void print_sample(Model *model, const Config *c, const Tokenizer *tok, Rng *rng) {
    int n = c->sample_tokens;
    int *tokens = xmalloc(sizeof(int) * (size_t)(n + 1));
    tokens[0] = c->vocab_size > 50256 ? 50256 : 0;  // start from end-of-text
    generate(model, tokens, 1, n, c->temperature, rng);
    printf("sample: ");
    print_tokens(stdout, tok, tokens + 1, n);
    free(tokens);
}

int train_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            train_help();
            return 0;
        }
    Config c;
    TrainArgs args = {0};
    cli_parse(argc, argv, &c, train_option, &args, NULL);
    config_finalize(&c);
    if (!c.train_data[0]) die("train_data is not set (a glob of shards, e.g. out/data/brown_train_*.bin)");
#ifdef _OPENMP
    if (c.threads > 0) omp_set_num_threads(c.threads);
#endif
    const int world = 1, rank = 0;
    const long micro_tokens = (long)c.batch_size * c.seq_len * world;
    long total = c.total_batch_size ? c.total_batch_size : micro_tokens;
    if (total % micro_tokens)
        die("total_batch_size = %ld is not a multiple of batch_size * seq_len * ranks = %ld", total, micro_tokens);
    const int accum = (int)(total / micro_tokens);
    const Backend *be = cli_backend(&c);

    Model model;
    model_create(&model, &c, be, c.batch_size, c.seq_len);
    Optimizer opt;
    optimizer_create(&opt, &model);
    Loader train, val;
    loader_open(&train, c.train_data, c.batch_size, c.seq_len, rank, world, c.vocab_size, c.shuffle, (uint64_t)c.seed);
    int val_batches = 0;
    if (c.val_data[0]) {
        loader_open(&val, c.val_data, c.batch_size, c.seq_len, rank, world, c.vocab_size, 0, 0);
        size_t avail = loader_samples_per_epoch(&val);
        val_batches = c.val_batches && (size_t)c.val_batches < avail ? c.val_batches : (int)avail;
    }

    TrainerState ts = {0};
    ts.world = world;
    Rng rng;
    rng_seed(&rng, (uint64_t)c.seed + 1);
    char *resume_dir = NULL;
    if (args.resume) {
        resume_dir = !strcmp(args.resume, "auto") ? checkpoint_latest(c.out_dir) : xstrdup(args.resume);
        if (!resume_dir && strcmp(args.resume, "auto")) die("%s: no such checkpoint", args.resume);
    }
    if (resume_dir) {
        checkpoint_check_config(resume_dir, &c);
        size_t n = model.table.total;
        float *p = xmalloc(sizeof(float) * n), *m = xmalloc(sizeof(float) * n), *v = xmalloc(sizeof(float) * n);
        checkpoint_load(resume_dir, &model.table, p, m, v, &ts);
        if (ts.world != world) die("%s: checkpoint was written by %d rank(s), this run has %d", resume_dir, ts.world, world);
        optimizer_set_weights(&opt, &model, p);
        optimizer_set_state(&opt, &model, m, v, ts.step);
        loader_seek(&train, ts.data);
        rng.state = ts.rng;
        free(p);
        free(m);
        free(v);
        printf("resumed from %s at step %d\n", resume_dir, ts.step);
    } else {
        model_init_params(&model, (unsigned long)c.seed);
        if (args.resume) printf("no checkpoint in %s: starting from scratch\n", c.out_dir);
    }
    free(resume_dir);

    mkdir_p(c.out_dir);
    MetricsLog log;
    metrics_open(&log, c.out_dir, ts.step > 0 ? ts.step : -1);
    printf("model: %s | %d layers (%s), d_model %d, %d heads | %.2fM parameters | backend %s\n", c.layers_spec,
           c.n_layer, c.layers, c.d_model, c.n_head, (double)params_count(&model.table) / 1e6, be->name);
    if (model_has_moe(&model))
        printf("moe: %d experts, top-%d, %.2fM active parameters per token\n", c.moe_experts, c.moe_top_k,
               params_count_active(&c, &model.table, 0) / 1e6);
    printf("batch: %d x %d tokens x %d accumulation step(s) x %d rank(s) = %ld tokens per step\n", c.batch_size,
           c.seq_len, accum, world, total);

    if (args.save_init && ts.step == 0) {
        ts.rng = rng.state;
        ts.data = train.pos;
        save_checkpoint(&c, &model, &opt, &ts);
    }
    Tokenizer *tok = sample_tokenizer(&c);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int *inputs = xmalloc(sizeof(int) * (size_t)micro_tokens), *targets = xmalloc(sizeof(int) * (size_t)micro_tokens);
    const int end_step = c.stop_at_step ? c.stop_at_step : c.steps;
    double run_start = now_seconds(), run_tokens = 0;
    while (ts.step < end_step) {
        const int step = ts.step;
        double t0 = now_seconds();
        double lr = lr_at_step(&c, step);
        model_zero_grad(&model);
        double loss = 0, aux_loss = 0;
        for (int micro = 0; micro < accum; micro++) {
            loader_next(&train, inputs, targets);
            double l = model_forward(&model, inputs, targets, c.batch_size, c.seq_len);
            if (!isfinite(l))
                die("step %d: the training loss is %f (not finite); lower lr or check the data. The last good checkpoint "
                    "is under %s/checkpoints",
                    step + 1, l, c.out_dir);
            model_backward(&model, 1.0f / (float)accum);
            loss += l / accum;
            aux_loss += model.moe_aux_loss / accum;
        }
        double norm = grad_global_norm(&model);
        if (!isfinite(norm)) die("step %d: the gradient norm is not finite", step + 1);
        optimizer_step(&opt, &model, lr, norm);
        // MoE: the step's expert loads, then the aux-loss-free bias update (blocks-spec §2.6)
        char moe_json[256] = "", moe_text[64] = "";
        if (model_has_moe(&model)) {
            MoeStepStats ms;
            model_moe_step(&model, opt.master, &ms);
            int n = snprintf(moe_json, sizeof moe_json,
                             "\"moe_load_min\": %ld, \"moe_load_max\": %ld, \"moe_load_cv\": %.6g, "
                             "\"moe_load_cv_max\": %.6g",
                             ms.min, ms.max, ms.cv_mean, ms.cv_max);
            if (c.moe_aux_loss_coef > 0 && n > 0 && (size_t)n < sizeof moe_json)
                snprintf(moe_json + n, sizeof moe_json - (size_t)n, ", \"moe_aux_loss\": %.9g", aux_loss);
            snprintf(moe_text, sizeof moe_text, " | moe cv %.2f", ms.cv_mean);
        }
        be->synchronize();
        ts.step = step + 1;
        ts.data = train.pos;
        ts.tokens_seen += (double)total;
        run_tokens += (double)total;
        double dt = now_seconds() - t0, elapsed = now_seconds() - run_start;
        double tps = run_tokens / elapsed;
        metrics_train(&log, ts.step, loss, lr, norm, moe_json, ts.tokens_seen, (double)total / dt, elapsed);
        if (ts.step % c.log_every == 0 || ts.step == end_step) {
            char eta[32];
            format_duration(eta, sizeof eta, (double)(c.steps - ts.step) * (double)total / tps);
            printf("step %5d/%d | loss %.4f | lr %.3e | norm %.4f%s | %.0f tok/s | ETA %s\n", ts.step, c.steps, loss, lr,
                   norm, moe_text, (double)total / dt, eta);
            fflush(stdout);
        }
        int last = ts.step == c.steps;
        if (val_batches && ((c.val_every && ts.step % c.val_every == 0) || last)) {
            double last_val = evaluate(&model, &val, val_batches, inputs, targets);
            metrics_val(&log, ts.step, last_val);
            printf("step %5d/%d | val loss %.4f (%d batches)\n", ts.step, c.steps, last_val, val_batches);
        }
        if ((c.sample_every && ts.step % c.sample_every == 0) || last) print_sample(&model, &c, tok, &rng);
        ts.rng = rng.state;
        int stop = g_interrupted || ts.step == end_step;
        if ((c.checkpoint_every && ts.step % c.checkpoint_every == 0) || stop) save_checkpoint(&c, &model, &opt, &ts);
        if (g_interrupted) {
            printf("interrupted after step %d: resume with --resume auto\n", ts.step);
            break;
        }
    }
    if (ts.step < c.steps && !g_interrupted)
        printf("stopped at step %d of %d (stop_at_step): resume with --resume auto\n", ts.step, c.steps);
    metrics_close(&log);
    if (tok) tokenizer_free(tok);
    free(inputs);
    free(targets);
    loader_close(&train);
    if (c.val_data[0]) loader_close(&val);
    optimizer_destroy(&opt, &model);
    model_destroy(&model);
    return 0;
}
