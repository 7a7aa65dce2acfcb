// Minimal test harness: CHECK records a failure with file:line and keeps going;
// TEST_MAIN_END prints "N passed, N failed" for the run_all.sh summary; TEST_MAIN_SKIP ends a
// test that could not run a part here.
#ifndef HYBRID_TESTING_H
#define HYBRID_TESTING_H

#include <math.h>
#include <stdio.h>

static int g_checks_passed, g_checks_failed;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (cond) {                                                           \
            g_checks_passed++;                                                \
        } else {                                                              \
            g_checks_failed++;                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
        }                                                                     \
    } while (0)

// Relative error |a-b| / max(|a|, |b|, floor); NaN in either gives +inf.
static inline double rel_err(double a, double b, double floor) {
    if (isnan(a) || isnan(b)) return INFINITY;
    double d = fabs(a - b), s = fmax(fmax(fabs(a), fabs(b)), floor);
    return d / s;
}

// expect_death(fn, arg, what, "substring", ...): see expect_death.h
#include "expect_death.h"

#define TEST_MAIN_END()                                                                   \
    do {                                                                                  \
        printf("%s: %d checks passed, %d failed\n", __FILE__, g_checks_passed, g_checks_failed); \
        return g_checks_failed ? 1 : 0;                                                   \
    } while (0)

// A test that cannot run a part of itself here (a build without PCRE2 or MPI, no mpirun)
// ends with TEST_MAIN_SKIP("what was not tested (why; the Debian package)"): the summary,
// then a last line "skipped: ..." and exit status 77 (automake's), which tests/run_all.sh
// counts as skipped. A failed check still fails the test.
#define TEST_EXIT_SKIPPED 77
#define TEST_MAIN_SKIP(...)                                                                   \
    do {                                                                                      \
        printf("%s: %d checks passed, %d failed\n", __FILE__, g_checks_passed, g_checks_failed); \
        if (g_checks_failed) return 1;                                                        \
        printf("skipped: ");                                                                  \
        printf(__VA_ARGS__);                                                                  \
        printf("\n");                                                                         \
        return TEST_EXIT_SKIPPED;                                                             \
    } while (0)

#endif
