// Autoregressive sampling from a model: full forward over the window each token
// (softmax-attention layers have no O(1) decode state; recurrent layers add theirs).
#ifndef HYBRID_GENERATE_H
#define HYBRID_GENERATE_H

#include <stdio.h>

#include "model/model.h"
#include "model/rng.h"

// Appends n_new tokens to tokens[0..n_prompt) (tokens must hold n_prompt + n_new).
// The window is the last model->max_T tokens. temperature 0 = greedy.
void generate(Model *model, int *tokens, int n_prompt, int n_new, double temperature, Rng *rng);

// Prints tokens as text when a tokenizer is available, else as ids.
void print_tokens(FILE *f, const int *tokens, int n);

#endif
