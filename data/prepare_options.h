// Command-line options of `hybrid prepare` (parsed in prepare_options.c).
#ifndef HYBRID_PREPARE_OPTIONS_H
#define HYBRID_PREPARE_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "data/docs.h"

typedef struct {
    DocFormat format;
    const char *out_dir, *name, *vocab_dir;
    size_t shard_tokens;
    int val_by_count;      // 1: val_docs is given, 0: val_frac
    uint64_t val_docs;
    double val_frac;
    int threads;
    int allow_special;     // text "<|endoftext|>" becomes the EOT token
    int quiet;
    char **inputs;
    int ninputs;
} PrepareOptions;

// Fills o from argv (argv[0] = "prepare"). Prints the help and returns 0 for --help;
// dies on a bad option. Returns 1 when there is work to do.
int prepare_parse_options(PrepareOptions *o, int argc, char **argv);

#endif
