// `hybrid import` and `hybrid export`: checkpoints in and out of the Hugging Face and fla
// ecosystem (checkpoints/hf_io.h; docs/architecture.md, "Checkpoints in and out of the
// ecosystem").
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "checkpoints/hf_io.h"
#include "cli.h"
#include "train.h"
#include "train/checkpoint_config.h"

// ---------------------------------------------------------------------------
// export

typedef struct {
    const char *hf_dir, *fla_dir;
    const char *checkpoint;
} ExportArgs;

static int export_option(const char *name, const char *value, void *ctx) {
    ExportArgs *a = ctx;
    if (!value) die("command line: --%s needs a value", name);
    if (!strcmp(name, "hf")) a->hf_dir = value;
    else if (!strcmp(name, "fla")) a->fla_dir = value;
    else if (!strcmp(name, "checkpoint")) a->checkpoint = value;
    else return -1;
    return 1;
}

static void export_positional(const char *arg, void *ctx) {
    ExportArgs *a = ctx;
    if (a->checkpoint) die("command line: unexpected argument '%s'", arg);
    a->checkpoint = arg;
}

int export_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: hybrid export --hf OUT_DIR CHECKPOINT_DIR\n"
                   "       hybrid export --fla OUT_DIR CHECKPOINT_DIR\n\n"
                   "--hf writes a Hugging Face GPT2LMHeadModel folder (config.json + model.safetensors with HF\n"
                   "tensor names and the Conv1D (in, out) layout) from a GPT-2 shaped checkpoint: every layer A,\n"
                   "layernorm, learned positions, gelu, biases, tied embeddings.\n"
                   "--fla writes an fla KDAForCausalLM folder (model_type \"kda\", fla's tensor names) from a\n"
                   "checkpoint fla can compute: every layer K, rmsnorm, no positions, swiglu, no biases, no MoE,\n"
                   "no AttnRes, gate_rank = linear_value_dim, key head dim <= 256; tied or untied embeddings.\n"
                   "A layers are refused: fla's attention layer always applies RoPE and ours has no positions.\n"
                   "Anything else is refused with the reason; the embedding keeps only the vocab_size real rows.\n");
            return 0;
        }
    ExportArgs a = {0};
    Config dummy;
    cli_parse(argc, argv, &dummy, export_option, &a, export_positional);
    if (!a.hf_dir == !a.fla_dir) die("export: give one of --hf OUT_DIR or --fla OUT_DIR");
    if (!a.checkpoint) die("export: give a checkpoint folder");
    Config c;
    checkpoint_read_config(a.checkpoint, &c);
    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    float *p = params_host_array(&t, 0);
    checkpoint_load(a.checkpoint, &t, p, NULL, NULL, NULL);
    if (a.hf_dir) {
        export_hf_gpt2(a.hf_dir, &c.model, &t, &mp, p);
        printf("exported %s -> %s (GPT2LMHeadModel)\n", a.checkpoint, a.hf_dir);
    } else {
        export_fla_kda(a.fla_dir, &c.model, &t, &mp, p);
        printf("exported %s -> %s (fla KDAForCausalLM)\n", a.checkpoint, a.fla_dir);
        if (c.model.reset_at_eot)
            printf("note: this model restarts its KDA states after every end-of-text token (reset_at_eot, token %d); "
                   "fla restarts them only where cu_seqlens says, so pass the document boundaries as cu_seqlens "
                   "for the same results on packed documents\n", c.model.eot_token);
    }
    free(p);
    params_free(&t, &mp);
    return 0;
}

// ---------------------------------------------------------------------------
// import

typedef struct {
    const char *hf_dir;
    const char *out_dir;
} ImportArgs;

static int import_option(const char *name, const char *value, void *ctx) {
    ImportArgs *a = ctx;
    if (!strcmp(name, "hf")) {
        if (!value) die("command line: --hf needs a folder");
        a->hf_dir = value;
        return 1;
    }
    return -1;
}

static void import_positional(const char *arg, void *ctx) {
    ImportArgs *a = ctx;
    if (a->out_dir) die("command line: unexpected argument '%s'", arg);
    a->out_dir = arg;
}

int import_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: hybrid import --hf HF_DIR OUT_DIR [--key value ...]\n\n"
                   "Makes a checkpoint folder OUT_DIR from a Hugging Face GPT2LMHeadModel folder (config.json +\n"
                   "model.safetensors as transformers' save_pretrained writes it; F32, F16 or BF16 tensors, read\n"
                   "as F32; pickle files are not read). The model keys come from config.json: layers = A x n_layer,\n"
                   "d_model = n_embd, n_head, vocab_size (padded_vocab_size rounded up to 128, zero padding\n"
                   "rows), context_length = n_positions, norm_eps = layer_norm_epsilon, mlp_hidden = n_inner,\n"
                   "init_std = initializer_range, tied or untied embeddings. --key value sets run keys (seq_len,\n"
                   "train_data, lr, ...) in the stored config.conf; model keys are refused. seq_len defaults to\n"
                   "min(1024, n_positions). Other architectures, activations, missing or unexpected tensors and\n"
                   "shapes that disagree with config.json are refused with the file and the tensor or key.\n\n"
                   "OUT_DIR holds config.conf, model.safetensors and trainer_state.txt at step 0, no optimizer\n"
                   "state. `hybrid sample OUT_DIR` samples from it; `hybrid train OUT_DIR/config.conf --resume\n"
                   "OUT_DIR [--key value ...]` trains from its weights: a weights-only checkpoint starts a new\n"
                   "run at step 0 with fresh AdamW moments and the data from the start.\n");
            return 0;
        }
    ImportArgs a = {0};
    Config c;
    cli_parse(argc, argv, &c, import_option, &a, import_positional);
    if (!a.hf_dir) die("import: give --hf HF_DIR (a Hugging Face GPT2LMHeadModel folder)");
    if (!a.out_dir) die("import: give the checkpoint folder to write (OUT_DIR)");
    const char *given = config_model_key_given();
    if (given)
        die("%s: %s is a model key: hybrid import takes the model from %s/config.json (give only run keys such as "
            "--seq_len or --train_data)", config_origin(given), given, a.hf_dir);
    HfGpt2Config h;
    import_hf_gpt2_config(a.hf_dir, &h);
    checkpoint_config_from_hf_gpt2(&c, &h);
    if (!strcmp(config_origin("seq_len"), "default") && c.seq_len > h.n_positions) c.seq_len = h.n_positions;
    config_finalize(&c);

    ParamTable t;
    ModelParams mp;
    params_build(&c.model, &t, &mp);
    float *p = import_hf_gpt2_weights(a.hf_dir, &h, &c.model, &t);
    TrainerState ts = {0};
    ts.world = 1;
    Rng rng;  // the sampling RNG a run with this seed starts from (a resume of it starts anew)
    rng_seed(&rng, (uint64_t)c.seed + 1);
    ts.rng = rng.state;
    char *text = config_to_text(&c);
    checkpoint_save_weights(a.out_dir, text, &t, p, &ts);
    printf("imported %s (GPT2LMHeadModel: %d layers, n_embd %d, %d heads, vocab %d, %s embeddings) -> %s\n"
           "weights only, step 0: `hybrid sample %s`, or `hybrid train %s/config.conf --resume %s --train_data ... "
           "--out_dir ...`\n",
           a.hf_dir, h.n_layer, h.n_embd, h.n_head, h.vocab_size, h.tied ? "tied" : "untied", a.out_dir, a.out_dir,
           a.out_dir, a.out_dir);
    free(text);
    free(p);
    params_free(&t, &mp);
    return 0;
}
