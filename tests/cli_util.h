// Helpers of the tests that drive the real CLI (./hybrid): synthetic shards, running a
// command with its output in a log, and the metrics lines without timing fields.
#ifndef HYBRID_CLI_UTIL_H
#define HYBRID_CLI_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/shard.h"
#include "base/rng.h"
#include "base/util.h"

// Text-like synthetic data, a noisy Markov chain over `vocab` tokens (so the loss can
// fall): dir/data/train_000000.bin, train_000001.bin (20000 tokens each) and
// val_000002.bin (3000).
static inline void cli_make_markov_shards(const char *dir, int vocab) {
    char path[512];
    snprintf(path, sizeof path, "%s/data", dir);
    mkdir_p(path);
    Rng r;
    rng_seed(&r, 11);
    for (int s = 0; s < 3; s++) {
        size_t n = s == 2 ? 3000 : 20000;
        uint16_t *t = xmalloc(sizeof(uint16_t) * n);
        t[0] = 0;
        for (size_t i = 1; i < n; i++)
            t[i] = (uint16_t)((t[i - 1] * 7 + 3 + (rng_below(&r, 4) == 0 ? rng_below(&r, (uint64_t)vocab) : 0)) %
                              (unsigned)vocab);
        snprintf(path, sizeof path, s == 2 ? "%s/data/val_%06d.bin" : "%s/data/train_%06d.bin", dir, s);
        shard_write(path, t, n);
        free(t);
    }
}

// The binary under test: $HYBRID (the sanitizer build's, under `make test SANITIZE=1`) or ./hybrid.
static inline const char *cli_binary(void) { return getenv("HYBRID") ? getenv("HYBRID") : "./hybrid"; }

// When the binary under test is not built: one failed check naming it (testing.h's CHECK),
// then `otherwise` (a statement: TEST_MAIN_END() to end the test, `return` to skip a part)
#define CLI_REQUIRE_BINARY(otherwise)                                                                    \
    do {                                                                                                 \
        if (!file_exists(cli_binary())) {                                                                \
            CHECK(0, "%s is not built (run from the repository root after make)", cli_binary());        \
            otherwise;                                                                                   \
        }                                                                                                \
    } while (0)

// The start of a CLI test's main (testing.h's CHECK and TEST_MAIN_END): the test fails at once
// if the binary is not built; otherwise its folder starts empty.
#define CLI_TEST_BEGIN(dir)                                                                              \
    do {                                                                                                 \
        CLI_REQUIRE_BINARY(TEST_MAIN_END());                                                             \
        remove_tree(dir);                                                                                \
    } while (0)

// Runs a command line whose program is "./hybrid" (at the start, or after VAR=value
// settings), output to dir/last.log; $HYBRID (the sanitizer build's binary under
// `make test SANITIZE=1`) replaces that path when set.
static inline int cli_run(const char *dir, const char *cmd) {
    char full[4096];
    const char *bin = getenv("HYBRID");
    const char *at = strstr(cmd, "./hybrid");
    if (bin && at && (at == cmd || at[-1] == ' '))
        snprintf(full, sizeof full, "%.*s%s%s > %s/last.log 2>&1", (int)(at - cmd), cmd, bin, at + 8, dir);
    else snprintf(full, sizeof full, "%s > %s/last.log 2>&1", cmd, dir);
    return system(full);
}

// The lines of a metrics log without the timing fields (", \"tokens\"" and after).
static inline char *cli_stable_lines(const char *path) {
    char *text = read_file(path, NULL);
    if (!text) return xstrdup("");
    char *out = xcalloc(1, strlen(text) + 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *cut = strstr(line, ", \"tokens\"");
        if (cut) *cut = 0;
        strcat(out, line);
        strcat(out, "\n");
    }
    free(text);
    return out;
}

#endif
