// The mixer registry (mixer.h): one line per mixer.
#include "model/mixer.h"

#include <stdio.h>
#include <string.h>

#include "base/util.h"

#define MIXERS(X) X(mixer_softmax_attention) X(mixer_mla) X(mixer_kda) X(mixer_gdn) X(mixer_deltanet) \
    X(mixer_linear_attention)

#define DECLARE(name) extern const MixerOps name;
MIXERS(DECLARE)
#define ENTRY(name) &name,
static const MixerOps *const registry[] = {MIXERS(ENTRY) NULL};

const MixerOps *const *mixer_all(void) { return registry; }

const MixerOps *mixer_find(char letter) {
    for (int i = 0; registry[i]; i++)
        if (registry[i]->letter == letter) return registry[i];
    return NULL;
}

const MixerOps *mixer_of(const ModelConfig *c, int layer) {
    const MixerOps *x = mixer_find(c->layers[layer]);
    if (!x) die("model: layer %d has the unknown mixer '%c'", layer, c->layers[layer]);
    return x;
}

const char *mixer_letters_help(void) {
    static char buf[512];
    if (buf[0]) return buf;
    size_t n = 0;
    for (int i = 0; registry[i] && n < sizeof buf; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%c = %s", i ? ", " : "", registry[i]->letter,
                              registry[i]->name);
    return buf;
}
