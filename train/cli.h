// Command-line helpers shared by the subcommands: a config file followed by
// `--key value` overrides, with subcommand-specific options handled by a callback.
#ifndef HYBRID_CLI_H
#define HYBRID_CLI_H

#include "model/backend.h"
#include "train/config.h"

// Called for an option that is not a config key. Return 1 if it took `value`,
// 0 if it is a flag that takes none, -1 if the option is unknown.
typedef int (*CliOption)(const char *name, const char *value, void *ctx);

// argv[0] is the subcommand. Positional arguments: the first that ends in ".conf"
// (or names an existing file) is the config file; others go to `positional` (may be NULL:
// then they are errors). Applies defaults, the file, then the overrides in order.
// Does not finalize.
void cli_parse(int argc, char **argv, Config *c, CliOption option, void *ctx, void (*positional)(const char *, void *));

// The value of option --name, parsed strictly (the whole text, in range, finite); dies
// naming the option otherwise.
long cli_long(const char *name, const char *value, long lo, long hi);
double cli_double(const char *name, const char *value, double lo, double hi);

// The backend for c->device; dies with a clear message if it is not available.
const Backend *cli_backend(const Config *c);

#endif
