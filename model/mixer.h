// Token mixers are registered, not switched (docs/architecture.md, "Add a mixer"). Each
// mixer letter of `layers` is one MixerOps table, defined in the mixer's own file and
// listed once in model/mixer.c. The config, the parameter table, the graph (model.c) and
// generation reach a mixer only through its table, so a new mixer is one new file, one
// registry line and its tests.
//
// A mixer keeps its private state in three structs whose sizes it declares, allocated
// zeroed by the graph, one per layer of that letter:
//   params  the indices of its tensors in the parameter table (params_build; every int
//           is -1 before `params` fills it), at m->mp.blocks[l].mixer
//   acts    the backend pointers its layout carves (saved activations, scratch), at
//           m->acts.blocks[l].mixer
//   cache   its generation cache (model_cache_init), at m->acts.blocks[l].cache
#ifndef HYBRID_MIXER_H
#define HYBRID_MIXER_H

#include <stddef.h>

#include "base/carve.h"
#include "base/real.h"
#include "model/model_config.h"
#include "model/params.h"

struct Model;

typedef struct MixerOps {
    char letter;            // its letter in `layers`
    const char *name;       // for messages: "KDA", "MLA", ...
    int variant;            // a mixer file serving several letters tells them apart by this
    unsigned families;      // the op families it calls (model/backend.h OpFamily bits)
    int resets_at_eot;      // 1: with reset_at_eot its state restarts after every end-of-text
                            // token, and the graph builds the document boundaries (doc_segments.h)
    size_t params_size, acts_size, cache_size;

    // Derives this mixer's config defaults and checks its keys (used: some layer has this
    // letter; derivations run either way, so every config is written out the same). Returns
    // NULL, or a message and in *key the config key to blame (origin: where a key was set).
    const char *(*config)(ModelConfig *c, int used, ConfigOriginFn origin, const char **key);
    // Adds layer `layer`'s tensors to the table, filling its params struct.
    void (*params)(const ModelConfig *c, ParamTable *t, int layer, void *params);
    // Carves its saved activations (cv) and backward scratch (scratch, shared by all layers)
    // for up to max_B x max_T rows into its acts struct. Runs twice (model.c: count, carve).
    void (*layout)(const struct Model *m, int layer, Carver *cv, Carver *scratch);
    // out (N, C) = mixer(in) over B sequences of T tokens (out written); saves what the
    // backward needs. in is the normalised residual stream, kept until the backward.
    void (*forward)(struct Model *m, int layer, real *out, const real *in, int B, int T);
    // din written, parameter gradients accumulated
    void (*backward)(struct Model *m, int layer, real *din, const real *dout, int B, int T);
    // Optional (NULL: none): the gradient of the bias added last to out (out = ... + b, so
    // its gradient is the column sums of dout), or NULL. The graph may sum it where dout is
    // made; then it sets m->dout_bias_summed for the backward, which must leave it alone.
    real *(*out_bias_grad)(struct Model *m, int layer);
    // Training FLOPs per token of the mixing that is not a parameter matmul (forward +
    // backward) for sequences of T tokens (inspect, MFU).
    double (*flops)(const ModelConfig *c, int T);

    // ---- the cached form (generation; model.h, "cached forward") ----
    // Allocates its cache (backend memory) for a sequence of up to max_len tokens.
    void (*cache_init)(struct Model *m, int layer, int max_len);
    void (*cache_free)(struct Model *m, int layer);
    // Back to an empty prefix.
    void (*cache_reset)(struct Model *m, int layer);
    // out (n, C) = the rows pos0 .. pos0+n-1 of forward() over the whole sequence, from
    // the cache of the pos0 tokens before them (which it then extends). One sequence.
    void (*forward_cached)(struct Model *m, int layer, real *out, const real *in, int n, int pos0);
} MixerOps;

// The mixer of letter `letter`, or NULL.
const MixerOps *mixer_find(char letter);
// The mixer of layer l of a validated config.
const MixerOps *mixer_of(const ModelConfig *c, int layer);
// Every registered mixer in order, NULL-terminated.
const MixerOps *const *mixer_all(void);
// "A = softmax attention, M = MLA, ..." (for messages and --help)
const char *mixer_letters_help(void);

#endif
