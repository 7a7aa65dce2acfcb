// Minimal test harness: CHECK records a failure with file:line and keeps going;
// TEST_MAIN_END prints "N passed, N failed" for the run_all.sh summary.
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

// Runs fn(ctx) in a child process and checks that it exits non-zero (die) with a
// message on stderr that contains `expect`. Returns 1 if so.
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static inline int expect_death(void (*fn)(void *), void *ctx, const char *expect) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(ctx);
        _exit(0);  // fn returned: it did not die
    }
    close(fds[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t got;
    while ((got = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)got;
    buf[len] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int died = WIFEXITED(status) && WEXITSTATUS(status) != 0;
    int ok = died && strstr(buf, expect) != NULL;
    if (!ok) fprintf(stderr, "  expected death with \"%s\", got status %d and stderr: %s\n", expect, status, buf);
    return ok;
}

#define TEST_MAIN_END()                                                                   \
    do {                                                                                  \
        printf("%s: %d checks passed, %d failed\n", __FILE__, g_checks_passed, g_checks_failed); \
        return g_checks_failed ? 1 : 0;                                                   \
    } while (0)

#endif
