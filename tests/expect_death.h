// expect_death(fn, arg, ...): runs fn(arg) in a forked child and checks that it dies the
// way die() does (exit status 1) with every given substring in its stderr. For testing
// error messages, which end the process. Returns 1 if so, else prints why and returns 0.
// expect_death_within(seconds, ...) is the same with a time limit: a child that blocks
// (a FIFO read, say) is killed and the check fails instead of hanging the suite.
// run_forked(fn, arg, seconds, &stderr_text) is the runner under both.
#ifndef HYBRID_EXPECT_DEATH_H
#define HYBRID_EXPECT_DEATH_H

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

// Under LeakSanitizer an exit() with live allocations counts as a leak and changes the
// exit status; the child turns leak checking off (a weak symbol: absent without ASan).
void __lsan_disable(void) __attribute__((weak));

#define RUN_FORKED_TIMED_OUT (-1)

// Runs fn(arg) in a child (stderr to a file, returned in *err, never NULL); returns its
// wait status, or RUN_FORKED_TIMED_OUT after killing it at the time limit.
static inline int run_forked(void (*fn)(void *), void *arg, double seconds, char **err) {
    char path[] = "/tmp/hybrid_death_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) die("run_forked: mkstemp failed");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) die("run_forked: fork failed");
    if (pid == 0) {
        if (__lsan_disable) __lsan_disable();
        dup2(fd, 2);
        fn(arg);
        _exit(0);  // fn returned: it did not die
    }
    int status = 0;
    double deadline = now_seconds() + seconds;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_seconds() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            status = RUN_FORKED_TIMED_OUT;
            break;
        }
        struct timespec nap = {0, 2000000};  // (no compound literal: C++ includes this too)
        nanosleep(&nap, NULL);
    }
    close(fd);
    *err = read_file(path, NULL);
    unlink(path);
    if (!*err) *err = xstrdup("");
    return status;
}

static inline int expect_death_impl(double seconds, void (*fn)(void *), void *arg, const char *what, ...) {
    char *err;
    int status = run_forked(fn, arg, seconds, &err);
    int ok = status != RUN_FORKED_TIMED_OUT && WIFEXITED(status) && WEXITSTATUS(status) == 1;
    if (status == RUN_FORKED_TIMED_OUT)
        fprintf(stderr, "  %s: still running after %.0f s (blocked?), killed; stderr: %s\n", what, seconds, err);
    else if (!ok)
        fprintf(stderr, "  %s: expected exit status 1, got status %d; stderr: %s\n", what, status, err);
    va_list ap;
    va_start(ap, what);
    for (const char *s; (s = va_arg(ap, const char *));) {
        if (!strstr(err, s)) {
            fprintf(stderr, "  %s: stderr lacks \"%s\": %s\n", what, s, err);
            ok = 0;
        }
    }
    va_end(ap);
    free(err);
    return ok;
}
// The substrings end with a NULL, added by the macro.
#define expect_death(fn, arg, what, ...) expect_death_impl(600, fn, arg, what, __VA_ARGS__, (const char *)NULL)
#define expect_death_within(seconds, fn, arg, what, ...) \
    expect_death_impl(seconds, fn, arg, what, __VA_ARGS__, (const char *)NULL)

#endif
