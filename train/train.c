// `hybrid train`: the training loop. Gradient accumulation to total_batch_size,
// clipping, the LR schedule, validation, checkpoints with bit-exact resume, samples.
#include "train.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/checkpoint_config.h"
#include "cli.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/grad_sync.h"
#include "generate.h"
#include "metrics.h"
#include "model/model.h"
#include "base/kill_point.h"
#include "base/util.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const char *resume;  // NULL, "auto" or a checkpoint folder
    int save_init;       // --save-init: checkpoint step 0 (the initial weights) before training
    int overwrite;       // --overwrite: a new run may replace the run in out_dir
} TrainArgs;

#ifdef HAVE_CUDA
void cuda_memory_stats(size_t *live, size_t *peak, size_t *device_used, size_t *device_total);
int cuda_profile_enabled(void);
void cuda_profile_reset(void);
void cuda_profile_print(FILE *f, int steps);
#endif

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
    if (!strcmp(name, "overwrite")) {  // a flag: takes no value
        a->overwrite = 1;
        return 0;
    }
    return -1;
}

static void train_help(void) {
    printf("usage: hybrid train [CONFIG.conf] [--key value ...] [--resume auto|CHECKPOINT_DIR] [--overwrite] "
           "[--save-init]\n\n"
           "Trains the model the config describes on llm.c-format token shards, or on generated MQAR\n"
           "recall sequences with mqar_pairs > 0 (docs/mqar.md).\n"
           "--resume auto continues from the newest checkpoint in out_dir; resuming is bit-exact.\n"
           "A new run does not start in an out_dir that holds another run (checkpoints or a metrics log):\n"
           "resume it, or pass --overwrite to delete its checkpoints and metrics.jsonl first.\n"
           "--resume DIR of a weights-only checkpoint (`hybrid import`) starts a new run from its weights:\n"
           "step 0, fresh optimizer state, the data from the start.\n"
           "--save-init writes the initial weights as checkpoint step_00000000 before the first step\n"
           "(on CUDA: the bf16 parameters the fp32 master starts from), e.g. for another trainer to start from.\n"
           "SIGINT/SIGTERM finish the current step, write a checkpoint and stop.\n\n"
           "Config keys (each also a --key override):\n");
    config_print_keys(stdout);
}

// Mean validation loss over `batches` global batches: each rank evaluates its slice of
// every batch, the ranks' means are averaged. MQAR data (val->mqar.pairs > 0) also counts
// the queries answered right over all ranks (docs/mqar.md, "Accuracy").
static double evaluate(Model *model, Loader *val, int batches, int *inputs, int *targets, MqarScore *score) {
    loader_reset(val);
    double sum[3] = {0, 0, 0};  // loss, queries, correct
    float *row = val->mqar.pairs > 0 ? xmalloc(sizeof(float) * (size_t)model->cfg.padded_vocab_size) : NULL;
    for (int i = 0; i < batches; i++) {
        loader_next(val, inputs, targets);
        sum[0] += model_forward(model, inputs, targets, val->B, val->T);
        for (int j = 0; row && j < val->B * val->T; j++) {
            if (targets[j] < 0) continue;
            model_logits_row(model, j / val->T, j % val->T, row);
            sum[1] += 1;
            sum[2] += mqar_argmax(row, model->cfg.vocab_size) == targets[j];
        }
    }
    free(row);
    dist_allreduce_sum_double(sum, 3);
    score->queries = (long)sum[1];
    score->correct = (long)sum[2];
    return sum[0] / batches / g_dist.world;
}

// The training and validation data: shards, or generated MQAR sequences (mqar_pairs > 0;
// docs/mqar.md, "Training on MQAR"). Returns the validation batches per pass (0: none).
static int open_data(const Config *c, Loader *train, Loader *val, int rank, int world) {
    size_t avail = 0;
    if (c->mqar_pairs > 0) {
        const MqarSpec spec = {c->model.vocab_size, c->seq_len, c->mqar_pairs};
        loader_open_mqar(train, &spec, (uint64_t)c->mqar_seed, MQAR_TRAIN, (uint64_t)c->mqar_train_sequences,
                         "mqar_train_sequences", c->batch_size, rank, world, c->shuffle, (uint64_t)c->seed);
        if (c->mqar_val_sequences > 0) {
            loader_open_mqar(val, &spec, (uint64_t)c->mqar_seed, MQAR_VAL, (uint64_t)c->mqar_val_sequences,
                             "mqar_val_sequences", c->batch_size, rank, world, 0, 0);
            avail = loader_samples_per_epoch(val);
        }
    } else {
        loader_open(train, c->train_data, c->batch_size, c->seq_len, rank, world, c->model.vocab_size, c->shuffle,
                    (uint64_t)c->seed);
        if (c->val_data[0]) {
            // a split smaller than one training batch validates with smaller batches
            const int vb = loader_open_fit(val, c->val_data, c->batch_size, c->seq_len, rank, world,
                                           c->model.vocab_size);
            if (vb < c->batch_size && rank == 0)
                printf("data: note: %s holds less than one batch of %d rank(s) x %d x %d + 1 tokens: validating with "
                       "batches of %d sequences\n",
                       c->val_data, world, c->batch_size, c->seq_len, vb);
            avail = loader_samples_per_epoch(val);
        }
    }
    return c->val_batches && (size_t)c->val_batches < avail ? c->val_batches : (int)avail;
}

// Collective: every rank contributes what it owns (optimizer.h), rank 0 writes it once.
static void save_checkpoint(const Config *c, Model *model, Optimizer *opt, const TrainerState *ts) {
    size_t n = model->table.total;
    float *p = params_host_array(&model->table, 0), *m = params_host_array(&model->table, 0),
          *v = params_host_array(&model->table, 0);
    optimizer_get_weights(opt, model, p);  // fp32 master weights where the backend keeps them
    optimizer_get_state(opt, model, m, v);
    dist_reduce_sum_float_to_root(p, n);
    dist_reduce_sum_float_to_root(m, n);
    dist_reduce_sum_float_to_root(v, n);
    if (dist_is_root()) {
        checkpoint_save_run(c, &model->table, p, m, v, ts);
        printf("checkpoint: %s/checkpoints/step_%08d\n", c->out_dir, ts->step);
    }
    dist_barrier("the checkpoint write");
    free(p);
    free(m);
    free(v);
}

// A new run (not a resume) in an out_dir that holds another run's checkpoints or metrics log
// would mix two runs (and a later --resume auto would pick up the other run): refused unless
// --overwrite, which moves them aside (atomically) and deletes them. Rank 0 decides; its die
// ends every rank.
static void claim_out_dir(const Config *c, int overwrite) {
    char ckdir[CONFIG_STR + 32], metrics[CONFIG_STR + 32], aside[CONFIG_STR + 48];
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", c->out_dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", c->out_dir);
    char *newest = checkpoint_latest(c->out_dir);
    const int has_log = file_exists(metrics);
    if (!newest && !has_log) return;
    if (!overwrite)
        die("out_dir %s holds another run (%s%s%s): resume it with --resume auto, start over with --overwrite (deletes "
            "its checkpoints and metrics.jsonl), or set another out_dir",
            c->out_dir, newest ? "its newest checkpoint is " : "", newest ? newest : "",
            has_log ? (newest ? ", and a metrics.jsonl" : "a metrics.jsonl") : "");
    printf("--overwrite: deleting the earlier run in %s\n", c->out_dir);
    if (dir_exists(ckdir)) {
        snprintf(aside, sizeof aside, "%s/.checkpoints.del", c->out_dir);
        if (dir_exists(aside)) remove_tree(aside);
        if (rename(ckdir, aside) != 0) die("%s: cannot move aside to %s (%s)", ckdir, aside, strerror(errno));
        remove_tree(aside);
    }
    if (has_log && unlink(metrics) != 0) die("%s: cannot delete (%s)", metrics, strerror(errno));
    free(newest);
}

// The data position (epoch, shard, sample) of a checkpoint means the same only under the
// same global micro-batch and the same data order: checked on every resume, whatever the
// ranks. The start of the data (a step-0 checkpoint) is the start under any of them.
static void check_data_position(const char *dir, const Config *c, const TrainerState *ts) {
    if (!ts->data.epoch && !ts->data.shard && !ts->data.sample) return;
    Config had;
    checkpoint_read_config(dir, &had);
    if ((long)had.batch_size * ts->world != (long)c->batch_size * g_dist.world || had.seq_len != c->seq_len)
        die("%s: checkpoint was written by %d rank(s) x batch_size %d x seq_len %d; this run has %d rank(s) x "
            "batch_size %d x seq_len %d. Resume with the same global micro-batch (ranks x batch_size = %ld, "
            "seq_len %d) so the data position carries over",
            dir, ts->world, had.batch_size, had.seq_len, g_dist.world, c->batch_size, c->seq_len,
            (long)had.batch_size * ts->world, had.seq_len);
    const struct {
        const char *key;
        int same;
    } data_keys[] = {{"train_data", !strcmp(had.train_data, c->train_data)},
                     {"shuffle", had.shuffle == c->shuffle},
                     {"seed", had.seed == c->seed},
                     {"mqar_pairs", had.mqar_pairs == c->mqar_pairs},
                     {"mqar_train_sequences", had.mqar_train_sequences == c->mqar_train_sequences},
                     {"mqar_seed", had.mqar_seed == c->mqar_seed}};
    for (size_t i = 0; i < sizeof data_keys / sizeof data_keys[0]; i++)
        if (!data_keys[i].same) {
            char a[CONFIG_STR + 32], b[CONFIG_STR + 32];
            config_value_text(&had, data_keys[i].key, a, sizeof a);
            config_value_text(c, data_keys[i].key, b, sizeof b);
            die("%s/config.conf: checkpoint has %s = %s but the config says %s: the data position would point "
                "into another order of the data. Resume with the checkpoint's value",
                dir, data_keys[i].key, a, b);
        }
}

// True if `path` is `dir` or lies under it (both resolved; a missing dir holds nothing).
static int path_is_under(const char *path, const char *dir) {
    char *p = realpath(path, NULL), *d = realpath(dir, NULL);
    const size_t n = d ? strlen(d) : 0;
    const int under = p && d && !strncmp(p, d, n) && (p[n] == '/' || p[n] == 0);
    free(p);
    free(d);
    return under;
}

// Rank 0 reads and checks the checkpoint, every rank gets its contents. A different
// number of ranks is fine when the global micro-batch (ranks x batch_size) is the same,
// so the data position carries over. A weights-only checkpoint (no optimizer.safetensors:
// `hybrid import`) starts a new run from its weights: step 0, fresh AdamW moments (and Muon
// momentum), the data from the start, the sampling RNG from the seed; its trainer_state
// is not used. Returns 1 for a weights-only checkpoint.
static int resume_from(const char *dir, const Config *c, Model *model, Optimizer *opt, Loader *train, TrainerState *ts,
                        Rng *rng) {
    size_t n = model->table.total;
    float *p = params_host_array(&model->table, 0), *m = params_host_array(&model->table, 0),
          *v = params_host_array(&model->table, 0);
    int weights_only = 0;
    if (dist_is_root()) {
        checkpoint_check_config(dir, c);
        weights_only = !checkpoint_has_optimizer(dir);
        if (weights_only) {
            checkpoint_load(dir, &model->table, p, NULL, NULL, NULL);
        } else {
            checkpoint_check_optimizer(dir, c);
            checkpoint_load(dir, &model->table, p, m, v, ts);
            check_data_position(dir, c, ts);
        }
        if (!weights_only && ts->world != g_dist.world)
            printf("resuming a %d-rank checkpoint on %d rank(s) (same global micro-batch)\n", ts->world, g_dist.world);
    }
    dist_bcast_bytes(&weights_only, sizeof weights_only, 0);
    dist_bcast_bytes(p, sizeof(float) * n, 0);
    optimizer_set_weights(opt, model, p);
    if (weights_only) {
        if (dist_is_root())
            printf("starting from the weights of %s (a weights-only checkpoint: step 0, fresh optimizer state, the "
                   "data from the start)\n", dir);
    } else {
        dist_bcast_bytes(m, sizeof(float) * n, 0);
        dist_bcast_bytes(v, sizeof(float) * n, 0);
        dist_bcast_bytes(ts, sizeof *ts, 0);
        ts->world = g_dist.world;
        optimizer_set_state(opt, model, m, v, ts->step);
        loader_seek(train, ts->data);
        rng->state = ts->rng;
        if (dist_is_root()) printf("resumed from %s at step %d\n", dir, ts->step);
    }
    free(p);
    free(m);
    free(v);
    return weights_only;
}

// What every rank must agree on before the first step: the config and the data it found.
static void check_ranks_agree(const Config *c, const Loader *train) {
    if (g_dist.world == 1) return;
    char *text = config_to_text(c);
    dist_check_same("the config", text);
    free(text);
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("open_memstream failed");
    for (int i = 0; i < train->nshards; i++) fprintf(f, "%s: %zu tokens\n", train->paths[i], train->ntok[i]);
    fclose(f);
    dist_check_same("the training data", text);
    free(text);
}

// A non-finite loss or gradient norm stops the run; it names the last checkpoint, which
// holds finite weights (checkpoint_save never writes others).
static void stop_not_finite(const Config *c, int step, const char *what, double value) {
    char *last = dist_is_root() ? checkpoint_latest(c->out_dir) : NULL;
    die("step %d: %s is %f (not finite); lower lr or check the data. The last good checkpoint is %s", step, what, value,
        last ? last : "none (no checkpoint of this run was written yet)");
}

static void print_sample(Model *model, const Config *c, const Tokenizer *tok, Rng *rng) {
    int n = c->sample_tokens;
    int *tokens = xmalloc(sizeof(int) * (size_t)(n + 1));
    tokens[0] = c->model.vocab_size > 50256 ? 50256 : 0;  // start from end-of-text
    generate(model, tokens, 1, n, c->temperature, rng, GENERATE_CACHED);
    printf("sample: ");
    print_tokens(stdout, tok, tokens + 1, n);
    free(tokens);
}

// The sample runs on rank 0 alone. With the experts sharded (docs/distributed.md, "Expert
// parallelism") rank 0 lacks the other ranks' experts: every rank contributes its weights as
// for a checkpoint (collective) and rank 0 samples from an unsharded copy of the model, built
// for this sample (one sequence) and freed after it. Otherwise rank 0 runs its own model with
// every expert local (the weights are replicated).
static void sample_step(Model *model, Optimizer *opt, const Config *c, const Tokenizer *tok, Rng *rng, int root) {
    if (!params_sharded(&model->table)) {
        if (!root) return;
        int ep = model->ep_size;
        model->ep_size = 1;
        print_sample(model, c, tok, rng);
        model->ep_size = ep;
        return;
    }
    const size_t n = model->table.total;
    float *p = params_host_array(&model->table, 0);
    optimizer_get_weights(opt, model, p);
    dist_reduce_sum_float_to_root(p, n);
    if (root) {
        Model whole;
        model_create(&whole, &c->model, model->be, 1, c->seq_len);
        model_set_params(&whole, p);
        print_sample(&whole, c, tok, rng);
        model_destroy(&whole);
    }
    free(p);
}

// Where the routed experts live: with expert_parallel > 1 each rank holds E / P experts of
// every MoE layer, with their gradients and optimizer state.
static void print_expert_memory(const Model *model, const Config *c) {
    if (!params_sharded(&model->table)) return;
    size_t full = 0;
    for (int i = 0; i < model->table.count; i++)
        if (model->table.items[i].routed) full += model->table.items[i].numel;
    printf("experts: sharded over expert_parallel %d: each rank holds %d of %d experts per MoE layer, %zu of %zu "
           "routed-expert parameters (parameter buffer %zu of %zu elements)\n",
           model->table.ep_size, c->model.moe_experts / model->table.ep_size, c->model.moe_experts,
           params_local_routed(&model->table), full, model->table.local_total, model->table.total);
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
    if (!c.train_data[0] && c.mqar_pairs < 1)
        die("train_data is not set (a glob of shards, e.g. out/data/brown_train_*.bin; or mqar_pairs > 0 for "
            "generated MQAR sequences, docs/mqar.md)");
#ifdef _OPENMP
    if (c.threads > 0) omp_set_num_threads(c.threads);
#endif
    const int world = g_dist.world, rank = g_dist.rank, root = dist_is_root();
    const long micro_tokens = (long)c.batch_size * c.seq_len * world;
    long total = c.total_batch_size ? c.total_batch_size : micro_tokens;
    if (total % micro_tokens)
        die("total_batch_size = %ld is not a multiple of batch_size * seq_len * ranks = %ld", total, micro_tokens);
    if (total / micro_tokens < 1 || total / micro_tokens > CONFIG_ACCUM_MAX)
        die("total_batch_size = %ld makes %ld accumulation steps of batch_size * seq_len * ranks = %ld tokens; "
            "a step takes 1 to %d",
            total, total / micro_tokens, micro_tokens, CONFIG_ACCUM_MAX);
    const int accum = (int)(total / micro_tokens);
    if (c.expert_parallel > 1 || world > 1) dist_set_ep(c.expert_parallel);
    const Backend *be = cli_backend(&c);

    Model model;
    model_create_padded(&model, &c.model, be, c.batch_size, c.seq_len, c.zero ? (size_t)world * 64 : 1);
    if (c.zero && world > 1 && be->keeps_master && model_has_moe(&model))
        die("zero = true with MoE on --device %s is not supported yet (the MoE selection bias's master weight may "
            "straddle two ranks' windows)",
            be->name);
    Comm *comm = NULL;  // collectives exist when a launcher started us, even as a world of one
    if (g_dist.mpi) {
#if defined(HAVE_CUDA) && defined(HAVE_NCCL)
        comm = c.device == DEVICE_CUDA ? comm_nccl_create() : comm_mpi_create(be->elem_size);
#else
        if (c.device == DEVICE_CUDA && world > 1)
            die("--device cuda with %d ranks needs NCCL, which this build does not have (rebuild where nccl.h and mpicc "
                "are found)",
                world);
        if (c.device != DEVICE_CUDA) comm = comm_mpi_create(be->elem_size);
#endif
    }
    model.comm = comm;
    if (c.expert_parallel > 1) model_set_expert_parallel(&model, comm, c.expert_parallel);
    Optimizer opt;
    optimizer_create_sharded(&opt, &model, &c.optim, rank, world, c.zero);
    GradSync sync;
    grad_sync_create(&sync, &model, &opt, comm, c.bucket_mb);
    Loader train, val;
    const int val_batches = open_data(&c, &train, &val, rank, world);
    check_ranks_agree(&c, &train);

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
        // a run from imported weights is a new run: out_dir must not hold another one, unless
        // the weights themselves lie in it
        if (resume_from(resume_dir, &c, &model, &opt, &train, &ts, &rng) && root && !path_is_under(resume_dir, c.out_dir))
            claim_out_dir(&c, args.overwrite);
    } else {
        model_init_params(&model, (unsigned long)c.seed);  // the same seed on every rank: the same weights
        if (args.resume && root)
            printf("no checkpoint in %s: starting from scratch (a metrics log of an earlier run that wrote no "
                   "checkpoint is replaced)\n",
                   c.out_dir);
        if (!args.resume && root) claim_out_dir(&c, args.overwrite);
    }
    free(resume_dir);

    MetricsLog log = {0};
    if (root) {
        mkdir_p(c.out_dir);
        // a resume keeps the lines through the checkpoint's step (none at step 0)
        metrics_open(&log, c.out_dir, args.resume ? ts.step : -1);
        printf("model: %s | %d layers (%s), d_model %d, %d heads | %.2fM parameters | backend %s\n", c.model.layers_spec,
               c.model.n_layer, c.model.layers, c.model.d_model, c.model.n_head, (double)params_count(&model.table) / 1e6, be->name);
        if (model_has_moe(&model))
            printf("moe: %d experts, top-%d, %.2fM active parameters per token\n", c.model.moe_experts, c.model.moe_top_k,
                   params_count_active(&c.model, &model.table, 0) / 1e6);
        print_expert_memory(&model, &c);
        printf("batch: %d x %d tokens x %d accumulation step(s) x %d rank(s) = %ld tokens per step\n", c.batch_size,
               c.seq_len, accum, world, total);
        if (world > 1 || comm)
            printf("distributed: %d rank(s) over %s | %s | expert_parallel %d | bucket %.0f MB\n", world,
                   comm ? comm->name : "-",
                   c.zero ? "ZeRO-1 (AdamW state sharded)"
                          : c.optim.optimizer == OPT_MUON ? "Muon matrices split by owner" : "replicated optimizer",
                   c.expert_parallel, c.bucket_mb);
    }

    if (args.save_init && ts.step == 0) {  // collective, like every checkpoint
        ts.rng = rng.state;
        ts.data = train.pos;
        save_checkpoint(&c, &model, &opt, &ts);
    }
    Tokenizer *tok = root ? sample_tokenizer(&c) : NULL;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const long local_tokens = (long)c.batch_size * c.seq_len;
    int *inputs = xmalloc(sizeof(int) * (size_t)local_tokens), *targets = xmalloc(sizeof(int) * (size_t)local_tokens);
    const int end_step = c.stop_at_step ? c.stop_at_step : c.optim.steps;
    // fault injection for the tests: this rank stops answering before its second step, so
    // the others must time out (HYBRID_DIST_TIMEOUT) instead of waiting forever
    const char *hang = getenv("HYBRID_FAULT_HANG_RANK");
    const int hang_here = hang && world > 1 && atoi(hang) == rank;
    double run_start = now_seconds(), run_tokens = 0;
    if (root && ts.step >= end_step)
        printf("the run in %s is at step %d already (%s = %d): nothing to train. Raise --steps to go on, or start "
               "over with --overwrite (without --resume)\n",
               c.out_dir, ts.step, c.stop_at_step ? "stop_at_step" : "steps", end_step);
    const int first_step = ts.step;  // (HYBRID_CUDA_PROFILE below)
    (void)first_step;
    while (ts.step < end_step) {
        const int step = ts.step;
#ifdef HAVE_CUDA
        // HYBRID_CUDA_PROFILE=1: the GPU time of each op over this process's steps after its first
        // (validation between steps included, when it runs), printed after the last step's work
        if (c.device == DEVICE_CUDA && step == first_step + 1 && cuda_profile_enabled()) cuda_profile_reset();
#endif
        if (hang_here && step == 1)
            for (;;) sleep(1);
        double t0 = now_seconds();
        double lr = lr_at_step(&c.optim, step);
        model_zero_grad(&model);
        double loss = 0, aux_loss = 0;
        for (int micro = 0; micro < accum; micro++) {
            loader_next(&train, inputs, targets);
            // sum over ranks of these gradients = the global batch's mean-loss gradient; the
            // forward already turns the logits into their gradient (model_forward_train)
            const float loss_scale = 1.0f / ((float)accum * (float)world);
            double l = model_forward_train(&model, inputs, targets, c.batch_size, c.seq_len, loss_scale);
            if (!isfinite(l)) stop_not_finite(&c, step + 1, "the training loss", l);
            if (micro == accum - 1) grad_sync_arm(&sync);  // reduce buckets as this backward finishes them
            model_backward(&model, loss_scale);
            loss += l / accum;
            aux_loss += model.moe_aux_loss / accum;
        }
        // the ranks' mean losses, and whether any rank was asked to stop (all stop together)
        double shared[3] = {loss, aux_loss, (double)g_interrupted};
        dist_allreduce_sum_double(shared, 3);
        loss = shared[0] / world;
        aux_loss = shared[1] / world;
        const int interrupted = shared[2] > 0;
        grad_sync_finish(&sync);
        double norm = grad_sync_norm(&sync);
        if (!isfinite(norm)) stop_not_finite(&c, step + 1, "the gradient norm", norm);
        optimizer_step(&opt, &model, lr, norm);
        // MoE: the step's expert loads over all ranks, then the aux-loss-free bias update
        // (docs/hybrid.md, "Aux-loss-free bias balancing")
        char moe_json[256] = "", moe_text[64] = "";
        if (model_has_moe(&model)) {
            MoeStepStats ms;
            grad_sync_moe_counts(&sync);
            model_moe_step(&model, opt.master, &ms);
            int n = snprintf(moe_json, sizeof moe_json,
                             "\"moe_load_min\": %ld, \"moe_load_max\": %ld, \"moe_load_cv\": %.6g, "
                             "\"moe_load_cv_max\": %.6g",
                             ms.min, ms.max, ms.cv_mean, ms.cv_max);
            if (c.model.moe_aux_loss_coef > 0 && n > 0 && (size_t)n < sizeof moe_json)
                snprintf(moe_json + n, sizeof moe_json - (size_t)n, ", \"moe_aux_loss\": %.9g", aux_loss);
            snprintf(moe_text, sizeof moe_text, " | moe cv %.2f", ms.cv_mean);
        }
        grad_sync_params(&sync);
        dist_wait_begin("the step's GPU work (NCCL collectives)");  // the watchdog also covers a hung GPU collective
        be->synchronize();
        dist_wait_end();
        ts.step = step + 1;
#ifdef HAVE_CUDA
        if (root && c.device == DEVICE_CUDA && ts.step == end_step && ts.step - first_step > 1 &&
            cuda_profile_enabled()) {
            printf("GPU time per step, steps %d..%d (HYBRID_CUDA_PROFILE):\n", first_step + 2, end_step);
            cuda_profile_print(stdout, end_step - first_step - 1);
        }
#endif
        ts.data = train.pos;
        ts.tokens_seen += (double)total;
        run_tokens += (double)total;
        double dt = now_seconds() - t0, elapsed = now_seconds() - run_start;
        double tps = run_tokens / elapsed;
        if (root) metrics_train(&log, ts.step, loss, lr, norm, moe_json, ts.tokens_seen, (double)total / dt, elapsed);
        if (root && (ts.step % c.log_every == 0 || ts.step == end_step)) {
            char eta[32];
            format_duration(eta, sizeof eta, (double)(c.optim.steps - ts.step) * (double)total / tps);
            printf("step %5d/%d | loss %.4f | lr %.3e | norm %.4f%s | %.0f tok/s | ETA %s\n", ts.step, c.optim.steps, loss, lr,
                   norm, moe_text, (double)total / dt, eta);
            fflush(stdout);
        }
        int last = ts.step == c.optim.steps;
        if (val_batches && ((c.val_every && ts.step % c.val_every == 0) || last)) {
            MqarScore acc;
            double last_val = evaluate(&model, &val, val_batches, inputs, targets, &acc);
            if (root) {
                char json[96] = "", text[64] = "";
                if (acc.queries) {
                    const double a = (double)acc.correct / (double)acc.queries;
                    snprintf(json, sizeof json, "\"mqar_accuracy\": %.9g, \"mqar_queries\": %ld", a, acc.queries);
                    snprintf(text, sizeof text, " | MQAR accuracy %.4f of %ld queries", a, acc.queries);
                }
                metrics_val(&log, ts.step, last_val, json);
                printf("step %5d/%d | val loss %.4f (%d batches)%s\n", ts.step, c.optim.steps, last_val, val_batches,
                       text);
            }
        }
        // The sample is optional work: it runs after the step's checkpoint, so a sample that
        // fails can lose nothing. It draws from its own generator, seeded by one draw of the
        // trainer's RNG whatever the sample's length: the checkpoint (written before the
        // sample) holds the state that follows that draw, and a resumed run samples the same
        // tokens as an uninterrupted one.
        const int sample_due = (c.sample_every && ts.step % c.sample_every == 0) || last;  // on every rank
        const int sample_now = root && sample_due;
        Rng sample_rng;
        if (sample_now) rng_seed(&sample_rng, rng_u64(&rng));
        ts.rng = rng.state;
        int stop = interrupted || ts.step == end_step;
        kill_point("train-step");
        if ((c.checkpoint_every && ts.step % c.checkpoint_every == 0) || stop) save_checkpoint(&c, &model, &opt, &ts);
        if (sample_due) {
            if (sample_now) kill_point("sample");
            sample_step(&model, &opt, &c, tok, &sample_rng, root);
        }
        if (interrupted) {
            if (root) printf("interrupted after step %d: resume with --resume auto\n", ts.step);
            g_interrupted = 1;
            break;
        }
    }
    if (root && ts.step < c.optim.steps && !g_interrupted)
        printf("stopped at step %d of %d (stop_at_step): resume with --resume auto\n", ts.step, c.optim.steps);
#ifdef HAVE_CUDA
    if (root && c.device == DEVICE_CUDA) {  // per GPU (rank 0's; every rank holds the same buffers)
        size_t live, peak, used, dev_total;
        cuda_memory_stats(&live, &peak, &used, &dev_total);
        printf("memory per GPU: backend peak %.2f GiB; device in use %.2f of %.2f GiB\n", peak / 1073741824.0,
               used / 1073741824.0, dev_total / 1073741824.0);
    }
#endif
    if (root) metrics_close(&log);
    if (tok) tokenizer_free(tok);
    free(inputs);
    free(targets);
    loader_close(&train);
    if (val_batches) loader_close(&val);
    grad_sync_destroy(&sync);
    optimizer_destroy(&opt, &model);
    if (comm) comm->destroy(comm);
    model_destroy(&model);
    return 0;
}
