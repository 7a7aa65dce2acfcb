// GPT-2 124M training throughput on the CUDA backend (`make bench`): B x T random
// tokens (no data files needed), bf16, full steps (zero grads, forward, backward,
// global norm, AdamW with clipping), timed with the host clock after a device
// synchronize at the end of each step.
//   bench_gpt2 [B] [T] [steps] [--json FILE] [--set KEY VALUE]...
// --set overrides a key of configs/gpt2-124m.conf as `hybrid train --set` does (e.g.
// `--set classifier_chunk 8192`: the classifier's rows a chunk, for A/B runs in one call).
// Prints ms/step (median), tokens/s, MFU (llm.c FLOPs/token convention against
// 989.4 TFLOP/s dense bf16) and memory; then Muon's optimizer-step time against
// AdamW's. With HYBRID_CUDA_PROFILE=1 it also prints the time per op family.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "kernels/cuda_backend.h"
#include "model/model.h"
#include "base/rng.h"
#include "base/util.h"
#include "optim/optimizer.h"

#define PEAK_BF16 989.4e12

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill(Rng *r, int *in, int *tg, size_t n, int V) {
    for (size_t i = 0; i < n; i++) {
        in[i] = (int)rng_below(r, (uint64_t)V);
        tg[i] = (int)rng_below(r, (uint64_t)V);
    }
}

// median ms of `steps` optimizer steps alone (gradients from one backward), with the
// optimizer config oc switched to `kind`
static double time_optimizer(Model *m, OptimConfig oc, OptimizerKind kind, int steps) {
    oc.optimizer = kind;
    Optimizer o;
    optimizer_create(&o, m, &oc);
    double *t = xmalloc(sizeof(double) * (size_t)steps);
    for (int s = -2; s < steps; s++) {
        m->be->synchronize();
        double t0 = now_seconds();
        optimizer_step(&o, m, oc.lr, 1.0);
        m->be->synchronize();
        if (s >= 0) t[s] = (now_seconds() - t0) * 1e3;
    }
    double med = median(t, steps);
    free(t);
    optimizer_destroy(&o, m);
    return med;
}

int main(int argc, char **argv) {
    int B = 64, T = 1024, steps = 20;
    const char *json = NULL;
    int pos = 0;
    Config c;
    config_defaults(&c);
    config_load_file(&c, "configs/gpt2-124m.conf");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else if (!strcmp(argv[i], "--set") && i + 2 < argc) {
            printf("bench_gpt2: --set %s %s\n", argv[i + 1], argv[i + 2]);
            config_set_override(&c, argv[i + 1], argv[i + 2]);
            i += 2;
        }
        else if (pos == 0) B = atoi(argv[i]), pos++;
        else if (pos == 1) T = atoi(argv[i]), pos++;
        else if (pos == 2) steps = atoi(argv[i]), pos++;
    }
    if (cuda_device_count() < 1) die("bench_gpt2: no CUDA device");
    const Backend *be = backend_cuda();
    c.batch_size = B;
    c.seq_len = T;
    config_finalize(&c);
    Model m;
    model_create(&m, &c.model, be, B, T);
    model_init_params(&m, 1);
    Optimizer opt;
    optimizer_create(&opt, &m, &c.optim);
    size_t N = (size_t)B * T;
    int *in = xmalloc(sizeof(int) * N), *tg = xmalloc(sizeof(int) * N);
    Rng r;
    rng_seed(&r, 1);
    const int warmup = 3;
    double *ms = xmalloc(sizeof(double) * (size_t)steps), loss = 0;
    for (int s = -warmup; s < steps; s++) {
        if (s == 0 && cuda_profile_enabled()) cuda_profile_reset();
        fill(&r, in, tg, N, c.model.vocab_size);
        be->synchronize();
        double t0 = now_seconds();
        model_zero_grad(&m);
        loss = model_forward_train(&m, in, tg, B, T, 1.0f);
        model_backward(&m, 1.0f);
        double norm = grad_global_norm(&m);
        optimizer_step(&opt, &m, c.optim.lr, norm);
        be->synchronize();
        if (s >= 0) ms[s] = (now_seconds() - t0) * 1e3;
    }
    double mean = 0;
    for (int s = 0; s < steps; s++) mean += ms[s] / steps;
    double med = median(ms, steps);
    double tps = (double)N / (med / 1e3);
    double fpt = params_flops_per_token(&c.model, &m.table, c.seq_len);
    double mfu = fpt * tps / PEAK_BF16;
    size_t live, peak, used, total;
    cuda_memory_stats(&live, &peak, &used, &total);
    printf("hybrid.c GPT-2 124M  B=%d T=%d bf16 AdamW, random tokens, %d timed steps after %d warm-up\n", B, T, steps,
           warmup);
    printf("  ms/step median %.2f (mean %.2f) | %.1fk tok/s | MFU %.1f%% (%.1f MFLOP/token, peak %.1f TFLOP/s)\n", med,
           mean, tps / 1e3, 100 * mfu, fpt / 1e6, PEAK_BF16 / 1e12);
    printf("  memory: backend peak %.2f GiB; device in use %.2f of %.2f GiB (context and libraries included)\n",
           peak / 1073741824.0, used / 1073741824.0, total / 1073741824.0);
    printf("  last loss %.4f | classifier chunks of %d rows\n", loss, m.logits_rows);
    const int bgrad = cuda_matmul_dgelu_bgrad_path();  // HYBRID_CUDA_DGELU_BGRAD: which path ran
    printf("  MLP up-projection bias gradient: %s\n", bgrad == 1   ? "DGELU_BGRAD epilogue (fp32 sums)"
                                                     : bgrad == 0 ? "column-sum kernel"
                                                                  : "not computed by matmul_backward_gelu");
    if (cuda_profile_enabled()) {
        printf("time per op family (CUDA events around each op; ms per step):\n");
        cuda_profile_print(stdout, steps);
    }
    // optimizer steps alone: AdamW everywhere vs Muon on the hidden matrices
    double adam_ms = time_optimizer(&m, c.optim, OPT_ADAMW, 10), muon_ms = time_optimizer(&m, c.optim, OPT_MUON, 10);
    printf("  optimizer step alone: AdamW %.2f ms, Muon (+AdamW on the rest) %.2f ms: Muon overhead %.2f ms/step\n",
           adam_ms, muon_ms, muon_ms - adam_ms);
    if (json) {
        FILE *f = xfopen(json, "w");
        fprintf(f,
                "{\"impl\": \"hybrid.c\", \"B\": %d, \"T\": %d, \"ms_per_step\": %.3f, \"tok_per_s\": %.1f, "
                "\"mfu\": %.4f, \"peak_mem_gib\": %.3f, \"device_used_gib\": %.3f, \"adamw_step_ms\": %.3f, "
                "\"muon_step_ms\": %.3f}\n",
                B, T, med, tps, mfu, peak / 1073741824.0, used / 1073741824.0, adam_ms, muon_ms);
        xfclose(f, json);
    }
    optimizer_destroy(&opt, &m);
    model_destroy(&m);
    free(in), free(tg), free(ms);
    return 0;
}
