// Writes our logits for given tokens, from a checkpoint, on the CPU (float) and on CUDA,
// so scripts/check_hf_gpt2.py and scripts/check_fla_kda.py can compare them with
// transformers / fla on the exported (or imported) model.
//   dump_logits CHECKPOINT_DIR TOKENS.i32 B T OUT_PREFIX [cpu|cuda|cpu,cuda]
// TOKENS.i32 holds B rows of T+1 int32 tokens: inputs are [:, :T], targets [:, 1:].
// Writes OUT_PREFIX_<backend>.f32 (B*T rows of padded_vocab_size floats) for each backend
// (both by default; cpu alone for configs the CUDA backend lacks, e.g. K layers) and prints
// {"loss_cpu": .., "loss_cuda": .., "vp": ..} with the losses it computed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint_config.h"
#include "train/config.h"
#include "checkpoints/checkpoint.h"
#include "model/model.h"
#include "base/util.h"

static double run(const Backend *be, const Config *c, const float *w, const int *in, const int *tg, int B, int T,
                  const char *path) {
    Model m;
    model_create(&m, &c->model, be, B, T);
    model_set_params(&m, w);
    double loss = model_forward(&m, in, tg, B, T);
    const size_t Vp = (size_t)c->model.padded_vocab_size, n = (size_t)B * T * Vp;
    float *z = xmalloc(sizeof(float) * n);
    for (int r = 0; r < B * T; r++) model_logits_row(&m, r / T, r % T, z + (size_t)r * Vp);
    FILE *f = xfopen(path, "wb");
    xfwrite(z, sizeof(float), n, f, path);
    xfclose(f, path);
    free(z);
    model_destroy(&m);
    return loss;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) die("usage: dump_logits CHECKPOINT_DIR TOKENS.i32 B T OUT_PREFIX [cpu|cuda|cpu,cuda]");
    const char *which = argc == 7 ? argv[6] : "cpu,cuda";
    const int want_cpu = strstr(which, "cpu") != NULL, want_cuda = strstr(which, "cuda") != NULL;
    if (!want_cpu && !want_cuda) die("dump_logits: backends '%s': give cpu, cuda or cpu,cuda", which);
    int B = atoi(argv[3]), T = atoi(argv[4]);
    Config c;
    checkpoint_read_config(argv[1], &c);
    c.batch_size = B;
    c.seq_len = T;
    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    float *w = xmalloc(sizeof(float) * t.total);
    checkpoint_load(argv[1], &t, w, NULL, NULL, NULL);
    size_t len = 0;
    char *raw = read_file(argv[2], &len);
    if (!raw || len != sizeof(int) * (size_t)B * (T + 1)) die("%s: expected %d x %d int32 tokens", argv[2], B, T + 1);
    const int *seq = (const int *)raw;
    int *in = xmalloc(sizeof(int) * B * T), *tg = xmalloc(sizeof(int) * B * T);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            in[b * T + i] = seq[b * (T + 1) + i];
            tg[b * T + i] = seq[b * (T + 1) + i + 1];
        }
    char path[1024];
    printf("{");
    if (want_cpu) {
        snprintf(path, sizeof path, "%s_cpu.f32", argv[5]);
        printf("\"loss_cpu\": %.9g, ", run(backend_cpu(), &c, w, in, tg, B, T, path));
    }
    if (want_cuda) {
        snprintf(path, sizeof path, "%s_cuda.f32", argv[5]);
        printf("\"loss_cuda\": %.9g, ", run(backend_cuda(), &c, w, in, tg, B, T, path));
    }
    printf("\"vp\": %d}\n", c.model.padded_vocab_size);
    free(w), free(raw), free(in), free(tg);
    params_free(&t, &mp);
    return 0;
}
