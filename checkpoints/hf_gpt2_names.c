// The GPT-2 name map (hf_gpt2.h).
#include <stdio.h>

#include "checkpoints/hf_gpt2.h"

static int put(HfGpt2Name *o, const char *hf, const char *ours, int conv1d, int vocab_rows) {
    snprintf(o->hf, sizeof o->hf, "%s", hf);
    snprintf(o->ours, sizeof o->ours, "%s", ours);
    o->conv1d = conv1d;
    o->vocab_rows = vocab_rows;
    return 1;
}

int hf_gpt2_names(int n_layer, HfGpt2Name *out) {
    static const struct { const char *hf, *ours; int conv1d; } layer[] = {
        {"ln_1.weight", "norm1.weight", 0},       {"ln_1.bias", "norm1.bias", 0},
        {"attn.c_attn.weight", "attn.qkv.weight", 1}, {"attn.c_attn.bias", "attn.qkv.bias", 0},
        {"attn.c_proj.weight", "attn.out.weight", 1}, {"attn.c_proj.bias", "attn.out.bias", 0},
        {"ln_2.weight", "norm2.weight", 0},       {"ln_2.bias", "norm2.bias", 0},
        {"mlp.c_fc.weight", "mlp.up.weight", 1},  {"mlp.c_fc.bias", "mlp.up.bias", 0},
        {"mlp.c_proj.weight", "mlp.down.weight", 1}, {"mlp.c_proj.bias", "mlp.down.bias", 0},
    };
    int n = 0;
    n += put(&out[n], "transformer.wte.weight", "embed.tok.weight", 0, 1);
    n += put(&out[n], "transformer.wpe.weight", "embed.pos.weight", 0, 0);
    for (int l = 0; l < n_layer; l++)
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
            char hf[96], ours[PARAM_NAME_MAX];
            snprintf(hf, sizeof hf, "transformer.h.%d.%s", l, layer[i].hf);
            snprintf(ours, sizeof ours, "blocks.%d.%s", l, layer[i].ours);
            n += put(&out[n], hf, ours, layer[i].conv1d, 0);
        }
    n += put(&out[n], "transformer.ln_f.weight", "norm_f.weight", 0, 0);
    n += put(&out[n], "transformer.ln_f.bias", "norm_f.bias", 0, 0);
    return n;
}
