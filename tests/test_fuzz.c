// A seeded mutation fuzzer over what the CLI reads from disk, through the real program
// (./hybrid, or $HYBRID): every run must exit 0, or exit 1 with "hybrid: error:"; never a
// signal, a hang (each command runs under `timeout -s KILL`), another exit status, a
// sanitizer report or a failed allocation (a bad input is refused by a check that names
// the problem, not by malloc). Four kinds of input, DEFAULT_TRIALS trials each:
//   config      configs/*.conf (three times as many trials: they are cheap) with lines
//               deleted, duplicated, swapped, a value replaced by a nasty one (limits,
//               non-numbers, odd layer strings, quotes, '#', non-ASCII, control bytes,
//               5000 characters, large sizes), a key mangled, random bytes (NUL too)
//               inserted, the text cut mid-line, no final newline, CRLF; through `inspect`,
//               and every 4th through `train --steps 1` (tiny sizes on the command line; the
//               mutation then gives nasty values only to keys that set no size and no
//               amount of work)
//   checkpoint  a tiny real checkpoint (GPT-2 shape + AdamW, KDA + Muon) with bytes of
//               model/optimizer.safetensors changed (header, length field, data; data values
//               with the checksum fixed), trainer_state.txt or config.conf changed the same
//               ways as configs, any file cut, appended to, deleted or replaced by an empty
//               file, a folder, a link to /dev/zero; through `sample`, `train --resume` and
//               `export`; every 4th trial an exported Hugging Face folder (config.json
//               values, bytes; model.safetensors) through `import --hf` and `sample`
//   shard       one shard of a set with a manifest (`hybrid prepare`) or without one:
//               header fields, token ids past the vocabulary, cut (with the header's count
//               to match, or not), appended to, replaced; for a set with a manifest, the
//               manifest re-signed half the time (so the checks behind it see the change),
//               or mangled, or a stray shard; through `train --steps 2`
//   prepare     random folders of random bytes, invalid UTF-8, NUL bytes, 1 MB lines,
//               whitespace, JSONL valid and broken (types, huge numbers, deep nesting),
//               Brown-like samples, links to /dev/zero and to their own folder, with random
//               options; every 5th trial a damaged copy of the vocabulary (encoder.json,
//               vocab.bpe) instead; through `prepare`
// Every trial draws from its own generator seeded by (seed, kind, trial), so a failure
// names the seed and the trial, and keeps its input (and the command and output) under
// out/test-tmp/fuzz-failures/. For longer runs: HYBRID_FUZZ_SEED, HYBRID_FUZZ_TRIALS
// (per kind), HYBRID_FUZZ_KINDS (e.g. "checkpoint,shard"), HYBRID_FUZZ_VERBOSE=1 (a line per
// run). Measured on 2 busy cores: 30 s with the normal build (session 22). While ./hybrid
// linked the CUDA libraries it was 373-391 s (config 160, checkpoint 113, shard 56, prepare
// 61 s): every start ran libcublasLt's static initializers, ~0.35 s of CPU even for `hybrid
// inspect`; the CUDA backend is a plugin loaded for --device cuda only since (docs/cuda.md,
// "The CUDA plugin"). Under the sanitizer
// build ($HYBRID in out/build-san) a command takes 2x (prepare: 15x) as long, so the default
// trial count is divided by SAN_DIVISOR there (about 60 s) and the time limit is raised.
// The machinery every kind shares (a trial, byte and text mutations, running ./hybrid and
// judging it): tests/fuzz_engine.h.
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32.h"
#include "base/rng.h"
#include "base/util.h"
#include "checkpoints/safetensors.h"
#include "cli_util.h"
#include "data/shard.h"
#include "fuzz_engine.h"
#include "testing.h"

// ---- kind 1: configs ----

#define TINY_SIZES                                                                                           \
    "--d_model 32 --n_head 2 --vocab_size 64 --padded_vocab_size 0 --context_length 32 --eot_token 63 "     \
    "--total_batch_size 0 --warmup_steps 0 --val_batches 1 --sample_tokens 2 --threads 1 "
#define PLAIN_DATA "--train_data '" D "/plain/data/train_*.bin' --val_data '" D "/plain/data/val_*.bin' "

static glob_t g_confs;  // configs/*.conf

static void fuzz_config(Trial *t) {
    static const struct {
        const char *conf, *layers;
    } tiny[] = {{"configs/gpt2-tiny.conf", "A x2"}, {"configs/hybrid-tiny.conf", "KM"}, {"configs/kda-tiny.conf", "K x2"}};
    const char *file = D "/config/fuzz.conf";
    int for_train = t->trial % 4 == 0;
    int k = (int)below(t, for_train ? 3 : (uint64_t)g_confs.gl_pathc);
    const char *base = for_train ? tiny[k].conf : g_confs.gl_pathv[k];
    Bytes src = bytes_read(base);
    note(t, "from %s", base);
    Bytes b = mutate_text(t, src.p, "config", for_train ? key_is_safe_for_train : NULL);
    bytes_write(file, &b);
    run_hybrid(t, file, "inspect %s", file);
    if (for_train) {
        remove_tree(D "/config/run");
        run_hybrid(t, file, "train %s --layers '%s' " TINY_SIZES PLAIN_DATA "--seq_len 16 --batch_size 2 --steps 1 "
                   "--out_dir " D "/config/run", file, tiny[k].layers);
    }
    free(src.p);
    free(b.p);
}

// ---- kind 2: checkpoints ----

// Two sources: GPT-2 shape with AdamW (export --hf), KDA with Muon (export --fla).
static const struct {
    const char *name, *keys, *export_flag;
} SOURCES[] = {
    {"gpt2", "configs/gpt2-tiny.conf --layers 'A x2' " TINY_SIZES PLAIN_DATA "--seq_len 32 --batch_size 4 ", "--hf"},
    {"kda", "configs/kda-tiny.conf --layers 'K x2' --optimizer muon " TINY_SIZES PLAIN_DATA
            "--seq_len 32 --batch_size 4 ", "--fla"},
};

static int make_checkpoints(void) {
    Trial t;
    trial_begin(&t, "checkpoint-setup", 9, 0);
    for (int s = 0; s < 2; s++) {
        char ck[256];
        snprintf(ck, sizeof ck, D "/ck-src/%s/checkpoints/step_00000002", SOURCES[s].name);
        if (run_hybrid(&t, D "/plain", "train %s--steps 2 --out_dir " D "/ck-src/%s", SOURCES[s].keys,
                       SOURCES[s].name) != 0 || !dir_exists(ck))
            return 0;
    }
    return run_hybrid(&t, D "/ck-src", "export --hf " D "/ck-src/hf " D "/ck-src/gpt2/checkpoints/step_00000002") == 0;
}

static size_t st_header_end(const Bytes *b) {
    uint64_t n = 0;
    for (int i = 7; i >= 0 && b->n >= 8; i--) n = n << 8 | (unsigned char)b->p[i];
    return b->n < 8 || n > b->n - 8 ? b->n : (size_t)(8 + n);
}

// Puts the CRC-32 of the data section into the header, so that changed data reaches the
// checks behind the checksum (shapes, non-finite values, the model itself).
static void fix_crc(Bytes *b) {
    size_t end = st_header_end(b);
    char *at = strstr(b->p, "\"" ST_CRC_KEY "\":\"");
    if (!at || (size_t)(at - b->p) >= end) return;
    char hex[9];
    snprintf(hex, sizeof hex, "%08x", crc32_update(0, b->p + end, b->n - end));
    memcpy(at + strlen("\"" ST_CRC_KEY "\":\""), hex, 8);
}

static void mutate_safetensors(Trial *t, Bytes *b, const char *name) {
    size_t end = st_header_end(b);
    switch (below(t, 6)) {
    case 0: mutate_region(t, b, 8, end, name, "header"); break;
    case 1: mutate_region(t, b, end, b->n, name, "data"); break;
    case 2: {  // the header length: off by one, zero, past the file, huge
        uint64_t n = end - 8, v[] = {n + 1, n - 1, 0, 2, b->n, (uint64_t)1 << 40, UINT64_MAX};
        uint64_t w = v[below(t, 7)];
        for (int i = 0; i < 8; i++) b->p[i] = (char)(w >> (8 * i));
        note(t, "%s header length %llu -> %llu", name, (unsigned long long)n, (unsigned long long)w);
        break;
    }
    case 3: {  // a float of the data set to an extreme, checksum fixed
        const float v[] = {NAN, INFINITY, -INFINITY, 3.4e38f, -3.4e38f, 1e30f, 1e-45f, 0.0f, -1.0f};
        if (b->n < end + 4) break;
        size_t at = end + 4 * below(t, (b->n - end) / 4);
        float f = v[below(t, sizeof v / sizeof v[0])];
        memcpy(b->p + at, &f, 4);
        fix_crc(b);
        note(t, "%s data byte %zu: float %g (checksum fixed)", name, at, f);
        break;
    }
    default: truncate_or_append(t, b, name);
    }
}

static void mutate_checkpoint_file(Trial *t, const char *dir) {
    static const char *files[] = {"model.safetensors", "optimizer.safetensors", "trainer_state.txt", "config.conf"};
    int f = (int)below(t, 4);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, files[f]);
    if (chance(t, 12)) {
        replace_file(t, path, files[f]);
        return;
    }
    Bytes b = bytes_read(path);
    if (f < 2) {
        mutate_safetensors(t, &b, files[f]);
    } else if (chance(t, 25)) {
        mutate_region(t, &b, 0, b.n, files[f], "text");
    } else if (chance(t, 20)) {
        truncate_or_append(t, &b, files[f]);
    } else {  // nasty values and line changes
        Bytes m = mutate_text(t, b.p, files[f], f == 3 ? key_is_not_seq_len : NULL);
        free(b.p);
        b = m;
    }
    bytes_write(path, &b);
    free(b.p);
}

// Replaces the value of one "key": value pair of a flat JSON object (config.json) by a
// JSON value of another type, a boundary or a number past every limit.
static void mutate_json_value(Trial *t, Bytes *b, const char *name) {
    static const char *values[] = {
        "-1", "0", "1", "2", "65536", "1048576", "16777217", "2147483647", "2147483648", "9223372036854775808",
        "99999999999999999999999", "1e308", "-1e308", "1e-320", "1.5", "-0", "1e999", "NaN", "Infinity", "0x10",
        "null", "true", "false", "\"gpt2\"", "\"\"", "[]", "{}", "[\"GPT2LMHeadModel\"]", "\"gelu\"", "\"\\u0000\"",
    };
    size_t starts[64], n = 0, numbers[64], m = 0;  // (the values, and those that are integers)
    char *from = strstr(b->p + below(t, b->n + 1), "\": ");  // 64 pairs from a random place on
    for (char *p = from ? from : strstr(b->p, "\": "); p && n < 64; p = strstr(p + 3, "\": ")) {
        starts[n++] = (size_t)(p - b->p) + 3;
        if (p[3] >= '0' && p[3] <= '9' && !strchr("e.", p[3 + strspn(p + 3, "0123456789")])) numbers[m++] = starts[n - 1];
    }
    if (!n) return;
    // half the time an integer (a size) gets a number: sizes past what the weights hold
    const int sizes = m && chance(t, 50);
    size_t at = sizes ? numbers[below(t, m)] : starts[below(t, n)], len = strcspn(b->p + at, ",\n}");
    const char *v = values[below(t, sizes ? 11 : sizeof values / sizeof values[0])];
    note(t, "%s: value '%.*s' at byte %zu -> %s", name, (int)(len < 40 ? len : 40), b->p + at, at, v);
    memmove(b->p + at, b->p + at + len, b->n - at - len + 1);
    b->n -= len;
    bytes_insert(b, at, v, strlen(v));
}

static void fuzz_checkpoint(Trial *t) {
    if (t->trial % 4 == 3) {  // a Hugging Face folder through import
        const char *in = D "/ck/hf";
        copy_tree(D "/ck-src/hf", in);
        int json = chance(t, 50);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", in, json ? "config.json" : "model.safetensors");
        if (chance(t, 10)) {
            replace_file(t, path, json ? "config.json" : "model.safetensors");
        } else {
            Bytes b = bytes_read(path);
            if (json && chance(t, 60)) mutate_json_value(t, &b, "config.json");
            else if (json && chance(t, 70)) mutate_region(t, &b, 0, b.n, "config.json", "text");
            else if (json) truncate_or_append(t, &b, "config.json");
            else mutate_safetensors(t, &b, "model.safetensors");
            bytes_write(path, &b);
            free(b.p);
        }
        remove_tree(D "/ck/imported");
        if (run_hybrid(t, in, "import --hf %s " D "/ck/imported", in) == 0)
            run_hybrid(t, in, "sample " D "/ck/imported --tokens 2 --temp 0");
        return;
    }
    int s = (int)below(t, 2);
    char src[256];
    snprintf(src, sizeof src, D "/ck-src/%s/checkpoints/step_00000002", SOURCES[s].name);
    const char *ck = D "/ck/in";
    copy_tree(src, ck);
    note(t, "checkpoint of %s", SOURCES[s].name);
    mutate_checkpoint_file(t, ck);
    run_hybrid(t, ck, "sample %s --tokens 2 --temp 0", ck);
    remove_tree(D "/ck/out");
    run_hybrid(t, ck, "train %s--steps 3 --resume %s --out_dir " D "/ck/out", SOURCES[s].keys, ck);
    remove_tree(D "/ck/export");
    run_hybrid(t, ck, "export %s " D "/ck/export %s", SOURCES[s].export_flag, ck);
}

// ---- kind 3: shards ----

// Random words, as text files: the input of `prepare` for the set with a manifest.
static void write_words(Rng *r, const char *path, int words) {
    static const char *w[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "ran", "far", "away", "from",
                              "dogs", "who", "bark", "loudly", "at", "night", ".", ","};
    FILE *f = xfopen(path, "w");
    for (int i = 0; i < words; i++) fprintf(f, "%s%s", w[rng_below(r, 20)], i % 17 == 16 ? "\n" : " ");
    xfclose(f, path);
}

static int make_shard_sets(void) {
    cli_make_markov_shards(D "/plain", 64);
    Rng r;
    rng_seed(&r, 5);
    mkdir_p(D "/words");
    for (int i = 0; i < 6; i++) {
        char path[256];
        snprintf(path, sizeof path, D "/words/doc%d.txt", i);
        write_words(&r, path, 1500);
    }
    Trial t;
    trial_begin(&t, "shard-setup", 8, 0);
    return run_hybrid(&t, D "/words", "prepare --quiet --threads 1 --val-docs 2 --shard-tokens 2000 --out " D
                      "/man --name fz " D "/words") == 0 &&
           file_exists(D "/man/fz_manifest.txt");
}

// The shard's header: one of magic, version, count set to a boundary or a neighbour.
static void mutate_shard_header(Trial *t, Bytes *b, const char *name) {
    static const char *fields[] = {"magic", "version", "token count"};
    int f = (int)below(t, 3);
    int32_t was, v[] = {0, 1, -1, 2147483647, (int32_t)0x80000000u, SHARD_MAGIC, 2, 0};
    memcpy(&was, b->p + 4 * f, 4);
    v[7] = was + (chance(t, 50) ? 1 : -1);
    int32_t now = v[below(t, 8)];
    memcpy(b->p + 4 * f, &now, 4);
    note(t, "%s %s %d -> %d", name, fields[f], was, now);
}

static void mutate_tokens(Trial *t, Bytes *b, int vocab, const char *name) {
    size_t ntok = (b->n - SHARD_HEADER_BYTES) / 2;
    if (!ntok) return;
    const unsigned ids[] = {0xFFFF, (unsigned)vocab, (unsigned)vocab - 1, 50256, 50257, (unsigned)below(t, 65536)};
    int count = 1 + (int)below(t, 3);
    for (int i = 0; i < count; i++) {
        size_t at = below(t, ntok);
        uint16_t id = (uint16_t)ids[below(t, sizeof ids / sizeof ids[0])];
        memcpy(b->p + SHARD_HEADER_BYTES + 2 * at, &id, 2);
        note(t, "%s token %zu -> %u", name, at, id);
    }
}

// The shard cut to k tokens with its header's count to match: a valid shard with no, one,
// or about one batch of tokens (a batch is 2 x 16 + 1), or a random count.
static void cut_consistently(Trial *t, Bytes *b, const char *name) {
    const size_t ntok = (b->n - SHARD_HEADER_BYTES) / 2, counts[] = {0, 1, 2, 32, 33, 34, below(t, ntok + 1)};
    size_t k = counts[below(t, 7)];
    if (k > ntok) k = ntok;
    const int32_t count = (int32_t)k;
    memcpy(b->p + 8, &count, 4);
    b->n = SHARD_HEADER_BYTES + 2 * k;
    note(t, "%s cut to %zu tokens, the header's count too", name, k);
}

// Makes the manifest's line of `name` describe the file as it is now (size, CRC-32 and token
// count), so that the checks behind the manifest's see the change.
static void resign_manifest(Trial *t, const char *manifest, const char *name, const Bytes *shard) {
    Bytes m = bytes_read(manifest);
    Lines L = lines_split(m.p);
    for (int i = 0; i < L.n; i++) {
        char split[16];
        const char *end = L.s[i] + strlen(L.s[i]) - strlen(name);
        if (end <= L.s[i] || strcmp(end, name) || sscanf(L.s[i], "shard %15s", split) != 1) continue;
        char *line = xmalloc(strlen(name) + 96);
        sprintf(line, "shard %s %zu %zu %08x %s", split, shard->n > SHARD_HEADER_BYTES ? (shard->n - SHARD_HEADER_BYTES) / 2 : 0,
                shard->n, crc32_update(0, shard->p, shard->n), name);
        free(L.s[i]);
        L.s[i] = line;
        note(t, "the manifest agrees");
    }
    Bytes out = lines_join(&L, "\n", 1, NULL);
    bytes_write(manifest, &out);
    free(out.p);
    free(m.p);
    lines_free(&L);
}

static void mutate_shard(Trial *t, const char *shard, int vocab, int manifest) {
    const char *name = strrchr(shard, '/') + 1;
    Bytes b = bytes_read(shard);
    switch (below(t, 5)) {
    case 0: mutate_shard_header(t, &b, name); break;
    case 1: mutate_region(t, &b, 0, SHARD_HEADER_BYTES, name, "header"); break;
    case 2: mutate_tokens(t, &b, vocab, name); break;
    case 3: cut_consistently(t, &b, name); break;
    default: truncate_or_append(t, &b, name);
    }
    bytes_write(shard, &b);
    if (manifest && chance(t, 50)) resign_manifest(t, D "/sh/fz_manifest.txt", name, &b);
    free(b.p);
}

static void fuzz_shard(Trial *t) {
    const int manifest = (int)below(t, 2), vocab = manifest ? 50257 : 64;
    const char *dir = D "/sh", *list = D "/sh/fz_manifest.txt";
    copy_tree(manifest ? D "/man" : D "/plain/data", dir);
    glob_t g;
    glob(D "/sh/*.bin", 0, NULL, &g);
    const char *shard = g.gl_pathv[below(t, g.gl_pathc)];
    note(t, "%s", manifest ? "set with a manifest" : "shards without a manifest");
    if (manifest && chance(t, 20)) {
        Bytes b = bytes_read(list);
        if (chance(t, 50)) {
            Bytes m = mutate_text(t, b.p, "manifest", NULL);
            free(b.p);
            b = m;
        } else {
            mutate_region(t, &b, 0, b.n, "manifest", "text");
        }
        bytes_write(list, &b);
        free(b.p);
    } else if (chance(t, 10)) {
        replace_file(t, shard, strrchr(shard, '/') + 1);
    } else if (manifest && chance(t, 5)) {
        shell("cp '%s' " D "/sh/fz_train_000099.bin", shard);
        note(t, "a copy of %s as fz_train_000099.bin", strrchr(shard, '/') + 1);
    } else {
        mutate_shard(t, shard, vocab, manifest);
    }
    globfree(&g);
    const char *prefix = manifest ? "fz_" : "";
    remove_tree(D "/sh-run");
    run_hybrid(t, dir, "train configs/gpt2-tiny.conf --layers 'A x2' --d_model 32 --n_head 2 --vocab_size %d "
               "--padded_vocab_size 0 --context_length 32 --total_batch_size 0 --warmup_steps 0 --val_batches 1 "
               "--sample_tokens 2 --threads 1 --seq_len 16 --batch_size 2 --steps 2 --train_data '%s/%strain_*.bin' "
               "--val_data '%s/%sval_*.bin' --out_dir " D "/sh-run",
               vocab, dir, prefix, dir, prefix);
}

// ---- kind 4: prepare inputs ----

// Text that tokenizers and JSON readers get wrong.
static Bytes nasty_text(Trial *t) {
    static const char *utf8[] = {"\xC0\x80", "\xFF", "\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82",
                                 "hello ", "\xC3\xA9", "\xF0\x9F\x98\x80", "\n", " ", "<|endoftext|>", "\r"};
    static const char *jsonl[] = {
        "{\"text\": \"a small document\"}", "{\"text\": \"abc", "{\"text\": 5}", "{\"text\": null}",
        "{\"text\": [\"a\"]}", "{\"text\": {\"a\": 1}}", "{\"text\": true}", "{\"n\": 1e999999, \"text\": \"x\"}",
        "{\"n\": -123456789012345678901234567890, \"text\": \"x\"}", "{\"text\": \"\\ud800\"}",
        "{\"text\": \"\\u0000\"}", "{\"text\": \"\\uZZZZ\"}", "{\"text\": \"a\", \"text\": \"b\"}", "",
        "   ", "[]", "\"text\"", "\xEF\xBB\xBF{\"text\": \"bom\"}", "{\"text\": \"a\",}", "{\"text\": \"a\"} x",
        "{\"text\": \"\"}", "{\"other\": \"no text\"}", "{\"text\": \"\\\"quoted\\\" \\n\\t\"}", "{",
        "{\"text\": \"<|endoftext|>\"}",
    };
    static const char *valid_jsonl[] = {
        "{\"text\": \"a small document\"}", "{\"text\": \"caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\\\ \\/ \\b\\f\\n\\r\\t\"}",
        "{\"id\": 3, \"text\": \"other fields\", \"meta\": {\"a\": [1, 2.5e3, -0, null, true, false, {}]}}",
        "  {\"text\":\"spaces around\"}  ", "{\"text\": \"<|endoftext|> as text\"}", "{\"text\": \"\xC3\xA9t\xC3\xA9\"}",
    };
    static const char *brown[] = {"The/at Fulton/np-tl County/nn-tl", "word/", "/tag", "//", "\tThe/at", "a/b/c",
                                  "", "x/nn-tl-hl-fw", "\xff/\xfe"};
    Bytes b = {xstrdup(""), 0};
    char buf[2048];
    switch (below(t, 9)) {
    case 0: {
        size_t n = below(t, sizeof buf);
        random_bytes(t, buf, n);
        bytes_insert(&b, 0, buf, n);
        note(t, "%zu random bytes", n);
        break;
    }
    case 1:
        for (int i = (int)below(t, 200); i > 0; i--) {
            const char *s = utf8[below(t, sizeof utf8 / sizeof utf8[0])];
            bytes_insert(&b, b.n, s, strlen(s));
        }
        note(t, "UTF-8, valid and not");
        break;
    case 2:
        for (int i = (int)below(t, 100); i > 0; i--) {
            int nul = chance(t, 20);
            bytes_insert(&b, b.n, nul ? "\0" : "text ", nul ? 1 : 5);
        }
        note(t, "text with NUL bytes");
        break;
    case 3:
        if (chance(t, 25)) {  // a 1 MB line (seldom: it takes a while to tokenize)
            b.p = xrealloc(b.p, (1 << 20) + 1);
            const char *unit = chance(t, 50) ? "a" : "ab ";
            for (size_t i = 0; i < 1 << 20; i++) b.p[i] = unit[i % strlen(unit)];
            b.n = 1 << 20;
            b.p[b.n] = 0;
            note(t, "a 1 MB line of '%s'", unit);
            t->big_input = 1;
        } else {
            note(t, "empty");
        }
        break;
    case 4: note(t, "empty"); break;
    case 5:
        for (int i = (int)below(t, 60); i > 0; i--) {
            const char *ws[] = {" ", "\t", "\n", "\r\n", "\v", "\f", "\xC2\xA0", "\xE3\x80\x80"};
            const char *s = ws[below(t, 8)];
            bytes_insert(&b, b.n, s, strlen(s));
        }
        note(t, "whitespace only");
        break;
    case 6: case 7:  // valid lines and, now and then, a broken one
        for (int i = (int)below(t, 12); i >= 0; i--) {
            const char *s = chance(t, 70) ? valid_jsonl[below(t, sizeof valid_jsonl / sizeof valid_jsonl[0])]
                                          : jsonl[below(t, sizeof jsonl / sizeof jsonl[0])];
            bytes_insert(&b, b.n, s, strlen(s));
            const char *eol = chance(t, 10) ? "\r\n" : "\n";
            bytes_insert(&b, b.n, eol, strlen(eol));
        }
        if (chance(t, 15)) {  // nested deeper than any reader should recurse
            size_t depth = 100 + below(t, 100000);
            for (size_t i = 0; i < depth; i++) bytes_insert(&b, b.n, "[", 1);
        }
        note(t, "JSONL lines, most broken");
        break;
    default:
        for (int i = (int)below(t, 30); i > 0; i--) {
            const char *s = brown[below(t, sizeof brown / sizeof brown[0])];
            bytes_insert(&b, b.n, s, strlen(s));
            const char *sep = chance(t, 30) ? "\n\n" : " ";
            bytes_insert(&b, b.n, sep, strlen(sep));
        }
        note(t, "Brown-like samples");
    }
    return b;
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

// A folder of 1 to 3 entries (a name may come twice: the first one stays): files of
// nasty text, folders (3 deep at most), links, an empty folder.
static void make_input(Trial *t, const char *dir, int depth) {
    static const char *names[] = {"a.txt", "b.jsonl", "c", "ca01", "cb12", ".hidden", "d.JSONL", "e.json", "f g.txt",
                                  "\xC3\xA9.txt"};
    mkdir_p(dir);
    for (int i = 1 + (int)below(t, 3); i > 0; i--) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[below(t, sizeof names / sizeof names[0])]);
        int what = (int)below(t, 40);
        if (exists(path)) continue;
        if (what < 30 || depth >= 3) {
            note(t, "%s:", path + strlen(D "/pr/"));
            Bytes b = nasty_text(t);
            bytes_write(path, &b);
            free(b.p);
        } else if (what < 36) {
            make_input(t, path, depth + 1);
        } else if (what < 38) {
            const char *to = what == 36 ? "/dev/zero" : ".";
            if (symlink(to, path) != 0) die("%s: symlink failed", path);
            note(t, "a link to %s", to);
        } else {
            mkdir_p(path);
            note(t, "an empty folder");
        }
    }
}

// Random options: each one sensible (the first entries) or, one time in five, not.
static const char *option_value(Trial *t, const char *const *values, int n, int sensible) {
    return values[chance(t, 80) ? below(t, (uint64_t)sensible) : below(t, (uint64_t)n)];
}

static void prepare_options(Trial *t, char *out, size_t size) {
    static const char *formats[] = {"auto", "text", "jsonl", "brown", "bogus", ""};
    static const char *counts[] = {"0", "1", "2", "5", "-1", "99999999999", "abc", "1e3", ""};
    static const char *fracs[] = {"0.05", "0", "0.5", "0.999", "1", "1.5", "nan", "-0.1", "1e-320", "inf"};
    static const char *shard_tokens[] = {"17", "1000", "100000", "1", "2", "0", "-1", "2147483648", "1e3",
                                         "99999999999999999999"};
    static const char *names[] = {"fz", "a.b", "_", "", "a/b", "x y", "-n", "\xC3\xA9", ".hidden"};
    size_t n = (size_t)snprintf(out, size, "--quiet --threads %d ", 1 + (int)below(t, 2));
    if (chance(t, 40)) n += (size_t)snprintf(out + n, size - n, "--format '%s' ", option_value(t, formats, 6, 4));
    if (chance(t, 30)) n += (size_t)snprintf(out + n, size - n, "--val-docs '%s' ", option_value(t, counts, 9, 4));
    if (chance(t, 30)) n += (size_t)snprintf(out + n, size - n, "--val-frac '%s' ", option_value(t, fracs, 10, 4));
    if (chance(t, 40) && !t->big_input)
        n += (size_t)snprintf(out + n, size - n, "--shard-tokens '%s' ", option_value(t, shard_tokens, 10, 3));
    if (chance(t, 20)) n += (size_t)snprintf(out + n, size - n, "--allow-special ");
    snprintf(out + n, size - n, "--name '%s' --out " D "/pr/out ", option_value(t, names, 9, 3));
}

// A copy of the GPT-2 vocabulary with one file changed: encoder.json (a value, bytes, a
// cut or garbage at the end) or vocab.bpe (lines and words, bytes, a cut), or either one
// replaced; prepared from plain text.
static void fuzz_vocab(Trial *t) {
    const char *dir = D "/pr/vocab";
    copy_tree(VOCAB, dir);
    const int json = chance(t, 50);
    const char *name = json ? "encoder.json" : "vocab.bpe";
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (chance(t, 5)) {
        replace_file(t, path, name);
    } else {
        Bytes b = bytes_read(path);
        if (json && chance(t, 50)) {
            mutate_json_value(t, &b, name);
        } else if (!json && chance(t, 50)) {
            Bytes m = mutate_text(t, b.p, name, NULL);
            free(b.p);
            b = m;
        } else if (chance(t, 60)) {
            mutate_region(t, &b, 0, b.n, name, "text");
        } else {
            truncate_or_append(t, &b, name);
        }
        bytes_write(path, &b);
        free(b.p);
    }
    run_hybrid(t, dir, "prepare --quiet --threads 1 --vocab %s --out " D "/pr/out --name fz " D "/words", dir);
}

static void fuzz_prepare(Trial *t) {
    const char *in = D "/pr/in";
    remove_tree(D "/pr");
    if (t->trial % 5 == 4 && dir_exists(VOCAB)) {
        fuzz_vocab(t);
        return;
    }
    make_input(t, in, 0);
    char opts[512], inputs[1024] = "";
    prepare_options(t, opts, sizeof opts);
    if (chance(t, 60)) {
        snprintf(inputs, sizeof inputs, "%s", in);
    } else {  // the entries one by one (a missing one too, at times)
        glob_t g;
        glob(D "/pr/in/*", 0, NULL, &g);
        size_t n = 0;
        for (size_t i = 0; i < g.gl_pathc && n + 300 < sizeof inputs; i++)
            n += (size_t)snprintf(inputs + n, sizeof inputs - n, "'%s' ", g.gl_pathv[i]);
        if (chance(t, 10) || !g.gl_pathc) snprintf(inputs + n, sizeof inputs - n, D "/pr/missing");
        globfree(&g);
    }
    note(t, "options %s", opts);
    run_hybrid(t, in, "prepare %s%s", opts, inputs);
}

// ---- main ----

static const char *g_kinds;  // HYBRID_FUZZ_KINDS: the kinds to run, comma-separated (default all)

static void read_settings(void) {
    const char *seed = getenv("HYBRID_FUZZ_SEED"), *trials = getenv("HYBRID_FUZZ_TRIALS");
    const char *bin = getenv("HYBRID");
    int sanitized = bin && strstr(bin, "build-san");
    if (sanitized) {
        g_trials = DEFAULT_TRIALS / SAN_DIVISOR;
        g_limit_s = 60;
    }
    if (seed) g_seed = strtoull(seed, NULL, 10);
    if (trials) g_trials = atoi(trials);
    g_verbose = getenv("HYBRID_FUZZ_VERBOSE") && atoi(getenv("HYBRID_FUZZ_VERBOSE"));
    g_kinds = getenv("HYBRID_FUZZ_KINDS");
    printf("fuzz: seed %llu, %d trials per kind (HYBRID_FUZZ_SEED, HYBRID_FUZZ_TRIALS)%s\n",
           (unsigned long long)g_seed, g_trials, sanitized ? ", sanitizer build" : "");
}

static int kind_selected(const char *kind) {
    if (!g_kinds) return 1;
    size_t n = strlen(kind);
    for (const char *p = g_kinds; (p = strstr(p, kind)); p += n)
        if ((p == g_kinds || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

int main(void) {
    CLI_TEST_BEGIN(D);
    read_settings();
    remove_tree(KEEP);
    mkdir_p(D "/config");
    mkdir_p(D "/ck");
    CHECK(glob("configs/*.conf", 0, NULL, &g_confs) == 0 && g_confs.gl_pathc > 0, "no configs/*.conf");
    const int shards_ok = make_shard_sets();
    CHECK(shards_ok, "the shard sets could not be made");
    const int checkpoints_ok = shards_ok && make_checkpoints();
    CHECK(checkpoints_ok, "the checkpoints could not be made");
    const struct {
        const char *name;
        void (*fuzz)(Trial *);
        int trials, ready;
    } kinds[] = {
        {"config", fuzz_config, 3 * g_trials, shards_ok},  // (cheap: mostly one `inspect`)
        {"checkpoint", fuzz_checkpoint, g_trials, checkpoints_ok},
        {"shard", fuzz_shard, g_trials, shards_ok},
        {"prepare", fuzz_prepare, g_trials, 1},
    };
    for (int k = 0; k < 4; k++) {
        if (!kinds[k].ready || !kind_selected(kinds[k].name)) continue;
        const double start = now_seconds();
        for (int i = 0; i < kinds[k].trials; i++) {
            Trial t;
            trial_begin(&t, kinds[k].name, k + 1, i);
            kinds[k].fuzz(&t);
        }
        printf("fuzz: %d %s trials in %.0f s\n", kinds[k].trials, kinds[k].name, now_seconds() - start);
    }
    globfree(&g_confs);
    if (!g_checks_failed) remove_tree(D);
    TEST_MAIN_END();
}
