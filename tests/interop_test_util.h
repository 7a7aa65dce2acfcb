// Shared by the import / export tests (test_hf_import, test_fla_export, test_interop_cli):
// a model made from config key/value pairs with its parameter table and parameters, and
// paths under a folder.
#ifndef HYBRID_INTEROP_TEST_UTIL_H
#define HYBRID_INTEROP_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"
#include "model/params.h"
#include "train/config.h"

typedef struct {
    Config c;
    ParamTable t;
    ModelParams mp;
    float *p;
} IoModel;

// config_defaults, the NULL-terminated key/value lists base and extra (either may be NULL) in
// that order, finalized; parameters N(0, std) from `seed`, or the table's init rules when std = 0.
static inline void io_model_make(IoModel *M, const char *const *base, const char *const *extra, uint64_t seed,
                                 double std) {
    config_defaults(&M->c);
    for (int i = 0; base && base[i]; i += 2) config_set_override(&M->c, base[i], base[i + 1]);
    for (int i = 0; extra && extra[i]; i += 2) config_set_override(&M->c, extra[i], extra[i + 1]);
    config_finalize(&M->c);
    params_build(&M->c.model, &M->t, &M->mp);
    M->p = xmalloc(sizeof(float) * M->t.total);
    if (std == 0) {
        params_init(&M->t, M->p, (unsigned long)seed);
        return;
    }
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < M->t.total; i++) M->p[i] = (float)(std * rng_normal(&r));
}

static inline void io_model_free(IoModel *M) {
    free(M->p);
    params_free(&M->t, &M->mp);
}

// "a/b", newly allocated
static inline char *io_path(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = xmalloc(n);
    snprintf(s, n, "%s/%s", a, b);
    return s;
}

#endif
