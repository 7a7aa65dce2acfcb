// expect_death(fn, arg, ...): runs fn(arg) in a forked child and checks that it dies the
// way die() does (exit status 1) with every given substring in its stderr. For testing
// error messages, which end the process. Returns 1 if so, else prints why and returns 0.
#ifndef HYBRID_EXPECT_DEATH_H
#define HYBRID_EXPECT_DEATH_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

// Under LeakSanitizer an exit() with live allocations counts as a leak and changes the
// exit status; the child turns leak checking off (a weak symbol: absent without ASan).
void __lsan_disable(void) __attribute__((weak));

static inline int expect_death_impl(void (*fn)(void *), void *arg, const char *what, ...) {
    char path[] = "/tmp/hybrid_death_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) die("expect_death: mkstemp failed");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) die("expect_death: fork failed");
    if (pid == 0) {
        if (__lsan_disable) __lsan_disable();
        dup2(fd, 2);
        fn(arg);
        _exit(0);  // fn returned: it did not die
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(fd);
    size_t len;
    char *err = read_file(path, &len);
    unlink(path);
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    if (!ok) fprintf(stderr, "  %s: expected exit status 1, got status %d; stderr: %s\n", what, status, err);
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
#define expect_death(fn, arg, what, ...) expect_death_impl(fn, arg, what, __VA_ARGS__, (const char *)NULL)

#endif
