#include "generate.h"

#include <math.h>
#include <stdlib.h>

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

// The cached forward (model.h): the prompt in pieces of at most max_T tokens, then one
// token at a time; no token of the prefix is ever recomputed.
static void generate_cached(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng,
                            float *logits) {
    const int total = n_prompt + n_new;
    model_cache_init(model, total);
    for (int i = 0; i < n_prompt;) {
        const int n = n_prompt - i < model->max_T ? n_prompt - i : model->max_T;
        model_forward_cached(model, tokens + i, n);
        i += n;
        if (i == n_prompt) model_logits_row(model, 0, n - 1, logits);
    }
    for (int n = n_prompt; n < total; n++) {
        tokens[n] = sample_logits(logits, model->cfg.vocab_size, temperature, rng);
        if (n + 1 < total) {
            model_forward_cached(model, tokens + n, 1);
            model_logits_row(model, 0, 0, logits);
        }
    }
    model_cache_free(model);
}

// A full forward over the last max_T tokens for every new token: the reference the cached
// path is checked against (and what runs once learned positions would run out).
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

void generate(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng, GenerateMode mode) {
    float *logits = xmalloc(sizeof(float) * (size_t)model->cfg.padded_vocab_size);
    const ModelConfig *c = &model->cfg;
    const int positions_left = c->position != POS_LEARNED || n_prompt + n_new <= c->context_length;
    if (mode == GENERATE_CACHED && positions_left)
        generate_cached(model, tokens, n_prompt, n_new, temperature, rng, logits);
    else
        generate_window(model, tokens, n_prompt, n_new, temperature, rng, logits);
    free(logits);
}

Tokenizer *sample_tokenizer(const Config *c) {
    char enc[CONFIG_STR + 32], bpe[CONFIG_STR + 32];
    snprintf(enc, sizeof enc, "%s/encoder.json", c->vocab_dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", c->vocab_dir);
    if (c->model.vocab_size != 50257 || !file_exists(enc) || !file_exists(bpe)) return NULL;
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
