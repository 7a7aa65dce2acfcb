#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "dist/dist.h"

void cli_parse(int argc, char **argv, Config *c, CliOption option, void *ctx, void (*positional)(const char *, void *)) {
    config_defaults(c);
    // the config file comes first so that overrides win wherever they are written
    int config_index = -1;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1] == '-') {
            if (config_is_key(argv[i] + 2)) i++;  // skip the key's value (commands' own options are checked below)
            continue;
        }
        size_t n = strlen(argv[i]);
        if (n > 5 && !strcmp(argv[i] + n - 5, ".conf")) {
            if (config_index >= 0) die("%s: only one config file may be given (also got %s)", argv[i], argv[config_index]);
            config_index = i;
        }
    }
    if (config_index >= 0) config_load_file(c, argv[config_index]);
    int *seen = xcalloc((size_t)argc, sizeof *seen), nseen = 0;  // argv indices of the options read so far
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i == config_index) continue;
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2;
            const char *value = i + 1 < argc ? argv[i + 1] : NULL;
            // the command line overrides the file, but an option given twice there is a mistake: which one was meant?
            for (int j = 0; j < nseen; j++)
                if (!strcmp(argv[seen[j]], a)) die("command line: --%s is given twice", name);
            seen[nseen++] = i;
            if (config_is_key(name)) {
                if (!value) die("command line: --%s needs a value", name);
                config_set_override(c, name, value);
                i++;
                continue;
            }
            int took = option ? option(name, value, ctx) : -1;
            if (took < 0) die("command line: unknown option --%s (see `hybrid %s --help`)", name, argv[0]);
            i += took;
            continue;
        }
        if (!positional) die("command line: unexpected argument '%s'", a);
        positional(a, ctx);
    }
    free(seen);
}

long cli_long(const char *name, const char *value, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (!*value || *end || errno) die("command line: --%s: '%s' is not an integer", name, value);
    if (v < lo || v > hi) die("command line: --%s: %ld must lie in [%ld, %ld]", name, v, lo, hi);
    return v;
}

double cli_double(const char *name, const char *value, double lo, double hi) {
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (!*value || *end || errno || !isfinite(v)) die("command line: --%s: '%s' is not a number", name, value);
    if (v < lo || v > hi) die("command line: --%s: %g must lie in [%g, %g]", name, v, lo, hi);
    return v;
}

#ifdef HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

const Backend *cli_backend(const Config *c) {
    if (c->device == DEVICE_CPU) return backend_cpu();
#ifdef HAVE_CUDA
    if (cuda_device_count() < 1)
        die("--device cuda: no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it); "
            "use --device cpu");
    if (g_dist.mpi) cuda_select_device(g_dist.local_rank, g_dist.local_world);  // one GPU per rank
    return backend_cuda();
#elif defined(REAL_DOUBLE)
    die("--device cuda: this is the double-precision CPU reference build, which has no CUDA; use ./hybrid");
#else
    die("--device cuda: this build has no CUDA (nvcc was not found at build time); use --device cpu");
#endif
}
