#include "generate.h"

#include <math.h>
#include <stdlib.h>

#include "model/decode.h"
#include "base/util.h"

// Draws from softmax(logits / temperature) over the first V entries.
static int sample_logits(const float *logits, int V, double temperature, Rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((logits[i] - logits[best]) / temperature);
    double u = rng_uniform(rng) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += exp((logits[i] - logits[best]) / temperature);
        if (acc > u) return i;
    }
    return best;
}

// Token by token from per-layer caches (model/decode.h): the prompt is fed one token
// at a time, then every sampled token; no prefix is ever recomputed.
static void generate_cached(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng,
                            float *logits) {
    const int total = n_prompt + n_new;
    Decoder d;
    model_decode_init(&d, model, total);
    for (int i = 0; i < n_prompt; i++) model_decode_step(&d, model, tokens[i], logits);
    for (int n = n_prompt; n < total; n++) {
        tokens[n] = sample_logits(logits, model->cfg.vocab_size, temperature, rng);
        if (n + 1 < total) model_decode_step(&d, model, tokens[n], logits);
    }
    model_decode_free(&d, model);
}

// Fallback: a full forward over the last max_T tokens for every new token.
static void generate_window(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng,
                            float *logits) {
    for (int n = n_prompt; n < n_prompt + n_new; n++) {
        int start = n > model->max_T ? n - model->max_T : 0;
        int len = n - start;
        model_forward(model, tokens + start, NULL, 1, len);
        model_logits_row(model, 0, len - 1, logits);
        tokens[n] = sample_logits(logits, model->cfg.vocab_size, temperature, rng);
    }
}

void generate(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng) {
    float *logits = xmalloc(sizeof(float) * (size_t)model->cfg.padded_vocab_size);
    const Config *c = &model->cfg;
    if (model_decode_supported(model) && (c->position != POS_LEARNED || n_prompt + n_new <= c->context_length))
        generate_cached(model, tokens, n_prompt, n_new, temperature, rng, logits);
    else
        generate_window(model, tokens, n_prompt, n_new, temperature, rng, logits);
    free(logits);
}

Tokenizer *sample_tokenizer(const Config *c) {
    char enc[CONFIG_STR + 32], bpe[CONFIG_STR + 32];
    snprintf(enc, sizeof enc, "%s/encoder.json", c->vocab_dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", c->vocab_dir);
    if (c->vocab_size != 50257 || !file_exists(enc) || !file_exists(bpe)) return NULL;
    return tokenizer_load(enc, bpe);
}

void print_tokens(FILE *f, const Tokenizer *tok, const int *tokens, int n) {
    if (tok) {
        size_t len;
        char *text = tokenizer_decode(tok, tokens, (size_t)n, &len);
        fwrite(text, 1, len, f);
        free(text);
    } else {
        for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? " " : "", tokens[i]);
    }
    fprintf(f, "\n");
}
