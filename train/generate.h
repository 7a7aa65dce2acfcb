// Autoregressive sampling from a model: token by token from per-layer caches
// (model/decode.h: recurrent states for K/G/D/L, KV caches for A) when every layer can
// decode and the length fits the learned positions; else a full forward over the
// window each token.
#ifndef HYBRID_GENERATE_H
#define HYBRID_GENERATE_H

#include <stdio.h>

#include "data/tokenizer.h"
#include "model/model.h"
#include "base/rng.h"

// Appends n_new tokens to tokens[0..n_prompt) (tokens must hold n_prompt + n_new).
// Cached decoding sees the whole prefix; the fallback window is the last model->max_T
// tokens. temperature 0 = greedy. Overwrites the model's activations.
void generate(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng);

// The GPT-2 tokenizer for a config whose vocabulary is GPT-2's and whose vocab_dir
// holds the files; NULL otherwise (samples then print as token ids).
Tokenizer *sample_tokenizer(const Config *c);
// Prints tokens as text with a tokenizer, as ids without one.
void print_tokens(FILE *f, const Tokenizer *tok, const int *tokens, int n);

#endif
