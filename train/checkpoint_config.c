// The trainer's side of checkpoints (checkpoint_config.h).
#include "train/checkpoint_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/util.h"
#include "optim/optimizer.h"

void checkpoint_save_run(const Config *c, const ParamTable *t, const float *params, const float *m, const float *v,
                         const TrainerState *ts) {
    char *text = config_to_text(c);
    const MuonMomentumForm form = c->optim.optimizer == OPT_MUON ? muon_momentum_form(optimizer_muon_rule(&c->optim))
                                                                 : MUON_MOMENTUM_SUM;
    checkpoint_save(c->out_dir, text, t, params, m, v, form, ts, c->keep_checkpoints);
    free(text);
}

// sample and export size the model from config.conf and allocate it before they read the
// weights: a config.conf that describes more parameters than model.safetensors holds
// (edited, damaged, or copied from another run) is refused here, naming both files, not by
// an allocation of its sizes. (A checkpoint's data section is every parameter as F32.)
static void check_size_against_weights(const char *dir, const Config *c) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;  // the load names a missing or odd file
    ParamTable t;
    ModelParams mp;
    params_build(&c->model, &t, &mp);
    size_t total = 0;  // the tensors' elements (t.total also counts the alignment gaps between them)
    for (int i = 0; i < t.count; i++) total += t.items[i].numel;
    params_free(&t, &mp);
    if (total > (uint64_t)st.st_size / sizeof(float))
        die("%s/config.conf: describes %zu parameters (%.3g MB as F32) but %s has %lld bytes: the config does not "
            "belong to these weights (edited, damaged or copied from another run)",
            dir, total, (double)total * sizeof(float) / 1e6, path, (long long)st.st_size);
}

void checkpoint_read_config(const char *dir, Config *c) {
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/config.conf", dir);
    config_defaults(c);
    config_load_file(c, path);
    config_finalize(c);
    check_size_against_weights(dir, c);
}

void checkpoint_check_config(const char *dir, const Config *want) {
    Config have;
    checkpoint_read_config(dir, &have);
    const char *key = config_model_mismatch(&have, want);
    if (!key) return;
    char a[CONFIG_STR + 32], b[CONFIG_STR + 32];
    config_value_text(&have, key, a, sizeof a);
    config_value_text(want, key, b, sizeof b);
    die("%s/config.conf: checkpoint has %s = %s but the config says %s", dir, key, a, b);
}

static const char *form_equation(MuonMomentumForm f) {
    return f == MUON_MOMENTUM_EMA ? "M = mu M + (1 - mu) g" : "M = mu M + g";
}

void checkpoint_check_optimizer(const char *dir, const Config *want) {
    Config have;
    checkpoint_read_config(dir, &have);
    if (want->optim.optimizer != OPT_MUON || have.optim.optimizer != OPT_MUON) return;  // no Muon momentum to mix
    const MuonMomentumForm want_form = muon_momentum_form(optimizer_muon_rule(&want->optim));
    MuonMomentumForm form;
    if (!checkpoint_muon_momentum(dir, &form)) return;
    char path[CONFIG_STR + 32];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    const char *have_scale = have.optim.muon_scale == MUON_SCALE_KEY_KELLER ? "keller" : "moonlight";
    const char *want_scale = want->optim.muon_scale == MUON_SCALE_KEY_KELLER ? "keller" : "moonlight";
    if (form != want_form) {
        if (form == MUON_MOMENTUM_SUM && have.optim.muon_scale == MUON_SCALE_KEY_KELLER)
            die("%s: written by a muon_scale = keller run before keller took KellerJordan/Muon's EMA momentum (no %s "
                "= ema metadata): its Muon momentum is in the sum form %s, and this run (muon_scale = %s) keeps the %s "
                "form %s; resuming would mix the two forms (docs/optimizers.md, \"Muon's two momentum forms\"). "
                "Resume it with the build that wrote it, or start a new run",
                path, CHECKPOINT_MUON_MOMENTUM_KEY, form_equation(form), want_scale,
                muon_momentum_form_name(want_form), form_equation(want_form));
        die("%s: its Muon momentum is in the %s form %s (muon_scale = %s) but this run (muon_scale = %s) keeps the %s "
            "form %s; resuming would mix the two forms (docs/optimizers.md, \"Muon's two momentum forms\"). Resume "
            "with muon_scale = %s",
            path, muon_momentum_form_name(form), form_equation(form), have_scale, want_scale,
            muon_momentum_form_name(want_form), form_equation(want_form),
            have_scale);
    }
}


// Sets a model key from the HF config (the origin reads "command line" in messages; the
// checks of import_hf_gpt2_config leave nothing for config_finalize to refuse).
static void set_int(Config *c, const char *key, long v) {
    char text[32];
    snprintf(text, sizeof text, "%ld", v);
    config_set_override(c, key, text);
}

static void set_real(Config *c, const char *key, double v) {
    char text[40];
    snprintf(text, sizeof text, "%.17g", v);
    config_set_override(c, key, text);
}

void checkpoint_config_from_hf_gpt2(Config *c, const HfGpt2Config *h) {
    char layers[32];
    snprintf(layers, sizeof layers, "A x%d", h->n_layer);
    config_set_override(c, "layers", layers);
    set_int(c, "d_model", h->n_embd);
    set_int(c, "n_head", h->n_head);
    set_int(c, "vocab_size", h->vocab_size);
    set_int(c, "padded_vocab_size", 0);
    set_int(c, "context_length", h->n_positions);
    set_int(c, "mlp_hidden", h->n_inner);
    set_real(c, "norm_eps", h->eps);
    set_real(c, "init_std", h->init_std);
    config_set_override(c, "norm", "layernorm");
    config_set_override(c, "position", "learned");
    config_set_override(c, "mlp", "gelu");
    config_set_override(c, "bias", "true");
    config_set_override(c, "tie_embeddings", h->tied ? "true" : "false");
    if (h->eos >= 0) set_int(c, "eot_token", h->eos);
}
