// GPT2LMHeadModel's tensors and ours, one to one: export_hf.c writes them, import_hf.c reads
// them back (docs/architecture.md, "File formats").
#ifndef HYBRID_HF_GPT2_H
#define HYBRID_HF_GPT2_H

#include "model/params.h"

typedef struct {
    char hf[96];                // the name under GPT2LMHeadModel (save_pretrained: "transformer.")
    char ours[PARAM_NAME_MAX];  // the parameter table's name
    int conv1d;                 // HF keeps it as Conv1D (in, out): ours (out, in) transposed
    int vocab_rows;             // the embedding: HF has vocab_size rows, ours padded_vocab_size
} HfGpt2Name;

#define HF_GPT2_TENSORS(n_layer) (4 + 12 * (n_layer))

// Fills out[HF_GPT2_TENSORS(n_layer)] in state-dict order (wte, wpe, h.0 ... h.{L-1}, ln_f);
// the tied lm_head.weight is left out, as save_pretrained leaves it out. Returns the count.
int hf_gpt2_names(int n_layer, HfGpt2Name *out);

#endif
