// Autoregressive sampling from a model through the graph's cached form (model.h,
// model_forward_cached: every mixer's cache of the prefix), or by a full forward over the
// window for every token (the slow reference, and what runs when learned positions would
// run out).
#ifndef HYBRID_GENERATE_H
#define HYBRID_GENERATE_H

#include <stdio.h>

#include "data/tokenizer.h"
#include "model/model.h"
#include "train/config.h"
#include "base/rng.h"

typedef enum {
    GENERATE_CACHED,        // the cached forward (the default)
    GENERATE_FULL_FORWARD,  // a full forward over the last max_T tokens per new token
} GenerateMode;

// Appends n_new tokens to tokens[0..n_prompt) (tokens must hold n_prompt + n_new).
// Cached decoding sees the whole prefix; the full-forward window is the last model->max_T
// tokens. temperature 0 = greedy. Overwrites the model's activations.
void generate(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng, GenerateMode mode);

// The GPT-2 tokenizer for a config whose vocabulary is GPT-2's and whose vocab_dir
// holds the files; NULL otherwise (samples then print as token ids).
Tokenizer *sample_tokenizer(const Config *c);
// Prints tokens as text with a tokenizer, as ids without one.
void print_tokens(FILE *f, const Tokenizer *tok, const int *tokens, int n);

#endif
