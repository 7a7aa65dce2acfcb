// Checkpoints in and out of the Hugging Face ecosystem (docs/architecture.md, "Checkpoints
// in and out of the ecosystem"):
//   export_hf_gpt2  a GPT-2 shaped checkpoint -> a transformers GPT2LMHeadModel folder
//   import_hf_gpt2_* a GPT2LMHeadModel folder  -> our config keys and weights
//   export_fla_kda  a K-layer config           -> an fla KDAForCausalLM folder
// A folder is config.json + model.safetensors. Every refusal names the file (or the config
// key) and the reason; nothing is written before the checks pass.
#ifndef HYBRID_HF_IO_H
#define HYBRID_HF_IO_H

#include "model/model_config.h"
#include "model/params.h"

// Writes a Hugging Face GPT2LMHeadModel folder (config.json + model.safetensors with
// HF names and Conv1D (in, out) layout). Dies if the config is not GPT-2 shaped.
void export_hf_gpt2(const char *dir, const ModelConfig *c, const ParamTable *t, const ModelParams *mp,
                    const float *params);

// What a GPT2LMHeadModel's config.json fixes. Keys it leaves out take GPT2Config's
// defaults, as transformers does.
typedef struct {
    int n_layer, n_embd, n_head, n_positions, vocab_size;
    int n_inner;            // 0: null (4 n_embd)
    int tied;               // tie_word_embeddings
    int eos;                // eos_token_id inside the vocabulary, or -1
    double eps, init_std;   // layer_norm_epsilon, initializer_range
} HfGpt2Config;

// Reads dir/config.json; dies naming the file and the key for anything GPT-2 under our
// graph cannot compute (another model_type or architecture, another activation, scaled or
// cross attention, sizes that do not fit).
void import_hf_gpt2_config(const char *dir, HfGpt2Config *h);

// Reads dir/model.safetensors into a new parameter buffer for the config made from h
// (layers = A x n_layer, layernorm, learned positions, gelu, biases, tie_embeddings =
// h->tied): HF names (with or without the "transformer." prefix) to ours, Conv1D (in, out)
// to (out, in), F16 / BF16 to F32, the padding rows of the embedding zero. Dies naming the
// file and the tensor on a missing or unexpected tensor, a shape that disagrees with
// config.json, or another dtype. The causal-mask buffers older transformers saved
// (h.N.attn.bias, h.N.attn.masked_bias) are skipped. Returns the parameters (t->total
// floats, caller frees), allocated only once every tensor has passed the checks.
float *import_hf_gpt2_weights(const char *dir, const HfGpt2Config *h, const ModelConfig *c, const ParamTable *t);

// Writes an fla KDAForCausalLM folder (fla/models/kda/): config.json with model_type "kda"
// and KDAConfig's keys, model.safetensors with its state dict's names (the SwiGLU [gate | up]
// matrix split into gate_proj and up_proj, the embedding's real vocab_size rows, a tied head
// written as lm_head.weight too). Dies with the reason for a config fla cannot compute: a
// layer other than K (our A has no positions, fla's attention always applies RoPE),
// LayerNorm, positions, GELU or SiTU, biases, MoE, AttnRes, gate_rank != linear_value_dim,
// a key head dim over 256, a value width fla's expand_v cannot give.
void export_fla_kda(const char *dir, const ModelConfig *c, const ParamTable *t, const ModelParams *mp,
                    const float *params);

#endif
