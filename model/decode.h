// Token-by-token decoding (sampling) with per-layer caches, so that no token of the
// prefix is ever recomputed: K/G/D/L mixers keep their O(1) recurrent state (the short
// convs' last W-1 inputs and the state matrix S, plus z for L; kda-spec §1.4, §5.1),
// A mixers keep a KV cache (their packed qkv rows). The logits of step t equal those of
// row t of a full model_forward over the same tokens (tests/test_decode.c), including
// reset_at_eot: the K/G/D/L states restart after an end-of-text token.
//
// Each mixer kind has its own cache struct in LayerCache and its own init / reset /
// step functions, dispatched on the layer letter in decode.c: a new mixer (e.g. 'M')
// adds its struct, its functions and one case per switch.
//
// Decoding runs on the model's activation buffers (row 0): it overwrites whatever a
// training forward saved there, so do not decode between a forward and its backward.
#ifndef HYBRID_DECODE_H
#define HYBRID_DECODE_H

#include "model.h"

// 'A': the packed qkv row of every token so far, (max_len, 3C), as attention_forward
// reads them; attention_cached attends the newest row to all of them.
typedef struct {
    real *qkv;
} AttnCache;

// 'K' 'G' 'D' 'L': conv states (D, W-1) of q, k, v (not for L), state S (H, K, V) and,
// for L, the key sum z (H, K); S and z in statistics elements (fp32 on CUDA). All zero
// at the start of a sequence.
typedef struct {
    real *conv_q, *conv_k, *conv_v;
    real *S, *z;
} LinearCache;

typedef struct {
    char mixer;
    AttnCache attn;
    LinearCache lin;
} LayerCache;

typedef struct {
    int pos;            // tokens consumed so far (the position of the next token)
    int max_len;        // tokens the KV caches hold (A layers)
    int bounded;        // max_len is a limit (A layers or learned positions); else unbounded
    LayerCache *layers; // n_layer
    int *token;         // backend memory (1)
} Decoder;

// 1 if every layer of the model has a decode step (A K G D L) on its backend.
int model_decode_supported(const Model *m);
// Caches for up to max_len tokens (the KV caches of A layers are that long; with
// learned positions max_len must not exceed context_length). A model of only K/G/D/L
// layers without learned positions decodes any number of tokens in O(1) memory.
void model_decode_init(Decoder *d, Model *m, int max_len);
// Back to an empty prefix (all caches cleared, position 0).
void model_decode_reset(Decoder *d, Model *m);
// Feeds one token; writes the next-token logits (padded_vocab_size floats) to logits.
void model_decode_step(Decoder *d, Model *m, int token, float *logits);
void model_decode_free(Decoder *d, Model *m);

// Per-mixer caches (mixer_attn_decode.c, mixer_linear_decode.c). out = mixer(in) for
// the token at position pos, on one row.
void attn_cache_init(Model *m, int layer, AttnCache *c, int max_len);
void attn_cache_free(Model *m, AttnCache *c);
void attn_decode_step(Model *m, int layer, AttnCache *c, real *out, const real *in, int pos);
void linear_cache_init(Model *m, int layer, LinearCache *c);
void linear_cache_reset(Model *m, int layer, LinearCache *c);
void linear_cache_free(Model *m, LinearCache *c);
void linear_decode_step(Model *m, int layer, LinearCache *c, real *out, const real *in);

#endif
