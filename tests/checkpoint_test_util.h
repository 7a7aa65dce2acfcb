// What the checkpoint tests share (tests/test_checkpoint.c, tests/test_hf_export.c): a small
// model with arbitrary finite parameters and optimizer moments (CkModel), paths under the
// test's folder, and a call that must die, run in a forked child (tests/expect_death.h).
#ifndef HYBRID_TESTS_CHECKPOINT_TEST_UTIL_H
#define HYBRID_TESTS_CHECKPOINT_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/util.h"
#include "tests/expect_death.h"
#include "tests/testing.h"
#include "train/config.h"

typedef struct {
    Config c;
    ParamTable t;
    ModelParams mp;
    float *p, *m, *v;
} CkModel;

static void model_make(CkModel *M, const char *const *kv) {
    config_defaults(&M->c);
    static const char *const base[] = {"d_model", "64", "n_head", "4", "layers", "A x2", "vocab_size", "100",
                                       "context_length", "32", "seq_len", "16", NULL};
    for (int i = 0; base[i]; i += 2) config_set_override(&M->c, base[i], base[i + 1]);
    for (int i = 0; kv && kv[i]; i += 2) config_set_override(&M->c, kv[i], kv[i + 1]);
    config_finalize(&M->c);
    params_build(&M->c.model, &M->t, &M->mp);
    M->p = xmalloc(sizeof(float) * M->t.total);
    M->m = xmalloc(sizeof(float) * M->t.total);
    M->v = xmalloc(sizeof(float) * M->t.total);
    params_init(&M->t, M->p, 1);
    Rng r;
    rng_seed(&r, 7);
    // arbitrary finite bit patterns (subnormals, -0 and the largest floats included); a checkpoint
    // never holds a non-finite value, which test_non_finite checks
    for (size_t i = 0; i < M->t.total; i++) {
        uint32_t a, b;
        do a = (uint32_t)rng_u64(&r); while ((a & 0x7f800000u) == 0x7f800000u);
        do b = (uint32_t)rng_u64(&r); while ((b & 0x7f800000u) == 0x7f800000u);
        memcpy(&M->m[i], &a, 4);
        memcpy(&M->v[i], &b, 4);
    }
}

static void model_free(CkModel *M) {
    free(M->p);
    free(M->m);
    free(M->v);
    params_free(&M->t, &M->mp);
}

static char *path_of(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = xmalloc(n);
    snprintf(s, n, "%s/%s", a, b);
    return s;
}

// Runs fn(arg) in a child (expect_death: exit status 1, as die() gives); checks that its
// message holds want1 and, if given, want2. The child must die before entering an OpenMP
// region (libgomp's pool does not survive fork).
static void expect_die(const char *what, void (*fn)(void *), void *arg, const char *want1, const char *want2) {
    const int ok = want2 ? expect_death(fn, arg, what, want1, want2) : expect_death(fn, arg, what, want1);
    CHECK(ok, "%s: the call did not die with the expected message (above)", what);
}

#endif
