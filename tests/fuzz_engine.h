// The machinery of tests/test_fuzz.c's mutation fuzzer, apart from what it mutates: a trial
// and its seeded generator, files as byte buffers with the mutations every kind uses, running
// ./hybrid under the time limit and judging its outcome (keeping a failing input), and the
// key = value text mutations of configs, config.conf, trainer_state.txt and manifests. Included
// by test_fuzz.c alone (static functions: one translation unit); its settings (seed, trials,
// time limit) are set by test_fuzz.c's main.
#ifndef HYBRID_TESTS_FUZZ_ENGINE_H
#define HYBRID_TESTS_FUZZ_ENGINE_H

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/util.h"
#include "cli_util.h"
#include "testing.h"

#define D "out/test-tmp/fuzz"
#define KEEP "out/test-tmp/fuzz-failures"
#define DEFAULT_TRIALS 100
#define SAN_DIVISOR 4
#define MAX_KEPT 20        // failing inputs kept; later failures are only reported
#define VOCAB "out/vocab"  // GPT-2's encoder.json and vocab.bpe (`make vocab`, a dependency of `make test`)

static uint64_t g_seed = 20240520;
static int g_trials = DEFAULT_TRIALS;
static int g_limit_s = 20;  // per command; a tiny run takes well under a second
static int g_kept;
static int g_verbose;       // HYBRID_FUZZ_VERBOSE=1: one line per run (what it did, how it ended)

// ---- one trial: its generator and what it did ----

typedef struct {
    const char *kind;
    int trial;
    Rng r;
    char what[2048];  // the mutations, for the failure message
    int big_input;    // prepare: a 1 MB input (then no tiny shards: 10^5 files take minutes)
} Trial;

static void trial_begin(Trial *t, const char *kind, int kind_no, int trial) {
    t->kind = kind;
    t->trial = trial;
    rng_seed(&t->r, g_seed * 0x100000001B3ull ^ ((uint64_t)kind_no << 40) ^ (uint64_t)trial);
    t->what[0] = 0;
    t->big_input = 0;
}

static uint64_t below(Trial *t, uint64_t n) { return rng_below(&t->r, n); }
static int chance(Trial *t, int percent) { return (int)below(t, 100) < percent; }

__attribute__((format(printf, 2, 3))) static void note(Trial *t, const char *fmt, ...) {
    size_t n = strlen(t->what);
    if (n && n + 2 < sizeof t->what) n += (size_t)snprintf(t->what + n, sizeof t->what - n, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->what + n, sizeof t->what - n, fmt, ap);
    va_end(ap);
}

// Bytes as a short printable text for notes: escapes, and long runs cut with their length.
static const char *show(const char *s, size_t n) {
    static char buf[4][160];
    static int k;
    char *b = buf[k++ % 4];
    size_t o = 0;
    for (size_t i = 0; i < n && i < 40 && o + 5 < sizeof buf[0] - 24; i++) {
        unsigned char c = (unsigned char)s[i];
        o += (size_t)(c >= 0x20 && c < 0x7f && c != '\'' ? snprintf(b + o, 2, "%c", c) : snprintf(b + o, 5, "\\x%02x", c));
    }
    if (n > 40) snprintf(b + o, sizeof buf[0] - o, "... (%zu bytes)", n);
    else b[o] = 0;
    return b;
}

// ---- files as byte buffers ----

typedef struct {
    char *p;
    size_t n;
} Bytes;

static Bytes bytes_read(const char *path) {
    Bytes b;
    b.p = read_file(path, &b.n);
    if (!b.p) die("%s: cannot read", path);
    return b;
}

static void bytes_write(const char *path, const Bytes *b) {
    FILE *f = xfopen(path, "wb");
    xfwrite(b->p, 1, b->n, f, path);
    xfclose(f, path);
}

static void bytes_insert(Bytes *b, size_t at, const void *s, size_t n) {
    b->p = xrealloc(b->p, b->n + n + 1);
    memmove(b->p + at + n, b->p + at, b->n - at + 1);
    memcpy(b->p + at, s, n);
    b->n += n;
}

static void random_bytes(Trial *t, char *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (char)below(t, 256);
}

static void shell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void shell(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) die("fuzz: '%s' failed", cmd);
}

static void copy_tree(const char *from, const char *to) {
    remove_tree(to);
    char parent[512];
    snprintf(parent, sizeof parent, "%s", to);
    *strrchr(parent, '/') = 0;
    mkdir_p(parent);
    shell("cp -a '%s' '%s'", from, to);
}

// Replaces a file by something that is not that file: nothing, an empty file, a folder,
// or a link to a device that never ends.
static void replace_file(Trial *t, const char *path, const char *name) {
    remove_tree(path);
    switch (below(t, 4)) {
    case 0: note(t, "%s deleted", name); break;
    case 1: bytes_write(path, &(Bytes){"", 0}); note(t, "%s replaced by an empty file", name); break;
    case 2: mkdir_p(path); note(t, "%s replaced by a folder", name); break;
    default:
        if (symlink("/dev/zero", path) != 0) die("%s: symlink failed", path);
        note(t, "%s replaced by a link to /dev/zero", name);
    }
}

// Changes bytes in [lo, hi): flipped bits, or set to a byte that parsers care about.
static void mutate_region(Trial *t, Bytes *b, size_t lo, size_t hi, const char *name, const char *region) {
    static const unsigned char special[] = {0x00, 0xFF, '{', '}', '"', ',', ':', '[', '\\', '\n', '0', '9', '-', '='};
    if (hi > b->n) hi = b->n;
    if (lo >= hi) return;
    int count = 1 + (int)below(t, 4);
    for (int i = 0; i < count; i++) {
        size_t at = lo + below(t, hi - lo);
        unsigned char was = (unsigned char)b->p[at], now;
        if (chance(t, 50)) now = was ^ (unsigned char)(1 + below(t, 255));
        else now = special[below(t, sizeof special)];
        b->p[at] = (char)now;
        note(t, "%s %s byte %zu: 0x%02x -> 0x%02x", name, region, at, was, now);
    }
}

static void truncate_or_append(Trial *t, Bytes *b, const char *name) {
    if (chance(t, 60)) {
        size_t n = below(t, b->n + 1);
        note(t, "%s cut to %zu of %zu bytes", name, n, b->n);
        b->n = n;
        b->p[n] = 0;
    } else {
        char junk[256];
        size_t n = 1 + below(t, chance(t, 50) ? 4 : sizeof junk);
        random_bytes(t, junk, n);
        bytes_insert(b, b->n, junk, n);
        note(t, "%s: %zu random bytes appended", name, n);
    }
}

// ---- running ./hybrid ----

// The output of an acceptable run: exit 0, or exit 1 with die()'s prefix; and no report
// of a sanitizer or of a failed allocation. Otherwise returns why not.
static const char *unacceptable(int status, const char *out) {
    static char why[128];
    if (strstr(out, "runtime error") || strstr(out, "AddressSanitizer") || strstr(out, "LeakSanitizer"))
        return "a sanitizer report";
    if (strstr(out, "out of memory")) return "a failed allocation (a size taken from the input unchecked?)";
    if (WIFSIGNALED(status)) {
        snprintf(why, sizeof why, "killed by signal %d", WTERMSIG(status));
        return why;
    }
    int code = WEXITSTATUS(status);
    if (code == 0 || (code == 1 && strstr(out, "hybrid: error:"))) return NULL;
    if (code == 137) snprintf(why, sizeof why, "still running after %d s (a hang?): killed", g_limit_s);
    else if (code > 128) snprintf(why, sizeof why, "killed by signal %d", code - 128);
    else if (code == 1) snprintf(why, sizeof why, "exit status 1 without 'hybrid: error:'");
    else snprintf(why, sizeof why, "exit status %d", code);
    return why;
}

// Copies the failing input, the command and its output under KEEP; returns where.
static const char *keep_failure(const Trial *t, const char *input, const char *cmd, const char *out) {
    static char dir[256];
    if (g_kept >= MAX_KEPT) return "(not kept: too many failures)";
    snprintf(dir, sizeof dir, KEEP "/%s-seed%llu-trial%d-%d", t->kind, (unsigned long long)g_seed, t->trial, g_kept++);
    mkdir_p(dir);
    char cp[1024];
    snprintf(cp, sizeof cp, "cp -a '%s' '%s/' 2>/dev/null", input, dir);
    if (system(cp) != 0) {}  // an input the run removed is simply not kept: the failure still counts
    char path[512];
    snprintf(path, sizeof path, "%s/command.txt", dir);
    char text[4096];
    int n = snprintf(text, sizeof text, "%s\n# mutation: %s\n# input was %s\n", cmd, t->what, input);
    write_file_atomic(path, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
    snprintf(path, sizeof path, "%s/output.txt", dir);
    write_file_atomic(path, out, strlen(out));
    return dir;
}

// Runs `./hybrid ARGS` under the time limit and checks the outcome; `input` is the file or
// folder the trial mutated. Returns the exit status (0 or 1), or -1 after a failure.
__attribute__((format(printf, 3, 4))) static int run_hybrid(Trial *t, const char *input, const char *fmt, ...) {
    char args[3000], cmd[3200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    // leaks at die() are not bugs; one thread keeps the runs small on a busy machine
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 timeout -s KILL %d ./hybrid %s", g_limit_s,
             args);
    int status = cli_run(D, cmd);
    char *out = read_file(D "/last.log", NULL);
    if (!out) out = xstrdup("");
    const char *why = unacceptable(status, out);
    if (why) {
        const char *kept = keep_failure(t, input, cmd, out);
        size_t n = strlen(out);
        CHECK(0, "%s trial %d (HYBRID_FUZZ_SEED=%llu): %s\n  mutation: %s\n  command: %s\n  input kept in %s\n"
                 "  output ends: %s",
              t->kind, t->trial, (unsigned long long)g_seed, why, t->what, cmd, kept, out + (n > 600 ? n - 600 : 0));
    } else {
        g_checks_passed++;
    }
    if (g_verbose) {
        const char *err = strstr(out, "hybrid: error:");
        printf("%s %d: exit %d: %s\n  %.*s\n", t->kind, t->trial, WEXITSTATUS(status), t->what,
               err ? (int)strcspn(err, "\n") : 0, err ? err : "");
    }
    free(out);
    return why ? -1 : WEXITSTATUS(status);
}

// ---- key = value text: configs, config.conf, trainer_state.txt, the manifest ----

typedef struct {
    char **s;
    int n;
} Lines;

static Lines lines_split(const char *text) {
    Lines L = {NULL, 0};
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        L.s = xrealloc(L.s, sizeof(char *) * (size_t)(L.n + 1));
        L.s[L.n] = xmalloc(n + 1);
        memcpy(L.s[L.n], p, n);
        L.s[L.n++][n] = 0;
        p += n + (e ? 1 : 0);
    }
    return L;
}

static void lines_free(Lines *L) {
    for (int i = 0; i < L->n; i++) free(L->s[i]);
    free(L->s);
}

static void lines_put(Lines *L, int at, char *line) {
    L->s = xrealloc(L->s, sizeof(char *) * (size_t)(L->n + 1));
    memmove(L->s + at + 1, L->s + at, sizeof(char *) * (size_t)(L->n - at));
    L->s[at] = line;
    L->n++;
}

// The joined text; starts[i] gets the byte offset of line i (an array of L->n + 1).
static Bytes lines_join(const Lines *L, const char *eol, int final_eol, size_t *starts) {
    Bytes b = {xstrdup(""), 0};
    for (int i = 0; i < L->n; i++) {
        if (starts) starts[i] = b.n;
        bytes_insert(&b, b.n, L->s[i], strlen(L->s[i]));
        if (i + 1 < L->n || final_eol) bytes_insert(&b, b.n, eol, strlen(eol));
    }
    if (starts) starts[L->n] = b.n;
    return b;
}

// The key of a "key = value" line, trimmed, in `key`; 0 for other lines.
static int line_key(const char *line, char *key, size_t size) {
    const char *eq = strchr(line, '=');
    const char *hash = strchr(line, '#');
    if (!eq || (hash && hash < eq)) return 0;
    while (*line == ' ' || *line == '\t') line++;
    size_t n = (size_t)(eq - line);
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t')) n--;
    if (!n || n >= size) return 0;
    memcpy(key, line, n);
    key[n] = 0;
    return 1;
}

// Keys whose values set no size and no amount of work: the only ones a `train` trial may
// give a nasty value (any other could ask for a huge model or a billion iterations).
static int key_is_safe_for_train(const char *key) {
    static const char *safe[] = {
        "norm", "norm_eps", "position", "mlp", "situ_beta", "situ_linear_beta", "bias", "tie_embeddings",
        "init_std", "mla_rope", "mla_rope_theta", "mla_gate", "moe_renorm", "moe_route_scale",
        "moe_bias_update_rate", "moe_aux_loss_coef", "kda_gate_lower_bound", "reset_at_eot", "optimizer", "lr",
        "lr_schedule", "final_lr_frac", "wsd_decay_frac", "weight_decay", "beta1", "beta2", "adam_eps", "grad_clip",
        "muon_momentum", "muon_nesterov", "muon_scale", "lr_matrix", "lr_embed", "lr_norm", "lr_bias", "lr_router",
        "lr_gate", "wd_matrix", "wd_embed", "wd_norm", "wd_bias", "wd_router", "wd_gate", "seed", "vocab_dir",
        "shuffle", "val_every", "checkpoint_every", "keep_checkpoints", "log_every", "sample_every", "temperature",
        "zero", "expert_parallel", "bucket_mb",
    };
    for (size_t i = 0; i < sizeof safe / sizeof safe[0]; i++)
        if (!strcmp(safe[i], key)) return 1;
    return 0;
}

// A checkpoint's config.conf sizes the model that sample and export build, but the
// weights bound that (train/checkpoint_config.c); seq_len alone sizes sample's window, as
// large as the config asks: any other key may take any value.
static int key_is_not_seq_len(const char *key) { return strcmp(key, "seq_len") != 0; }

// Which keys may take nasty values: all (NULL), or those the function accepts.
typedef int (*KeyFilter)(const char *key);

// A random line: any (key_lines 0), or a "key = value" line whose key passes the filter
// (any line of a text without "=", the manifest, when there is no filter); -1 if none.
static int pick_line(Trial *t, const Lines *L, int key_lines, KeyFilter filter) {
    int idx[512], n = 0, with_eq = 0;
    for (int i = 0; i < L->n; i++) with_eq |= strchr(L->s[i], '=') != NULL;
    if (!filter && !with_eq) key_lines = 0;
    for (int i = 0; i < L->n && n < 512; i++) {
        char key[128];
        if (!key_lines || (line_key(L->s[i], key, sizeof key) && (!filter || filter(key)))) idx[n++] = i;
    }
    return n ? idx[below(t, (uint64_t)n)] : -1;
}

// A value that parsers get wrong: limits, non-numbers, odd layer strings, quotes,
// comments, non-ASCII, control bytes, 5000 characters; or a valid but unusual one.
static char *nasty_value(Trial *t) {
    static const char *values[] = {
        "-1", "0", "1", "2", "65536", "1000000", "1048576", "16777216", "2147483647", "2147483648", "-2147483648",
        "9223372036854775808", "1e308", "1e-320",
        "nan", "inf", "-inf", "", "abc", "0x10", "1e999", "-0", "4 4", "1,5", "KMKA x99999", "A x0", "A x-1", "x3",
        "A x", "AQZ x2", "a x2", "A x2 x2", "A x256", "A x257", "'A x2'", "\"A\"", "\"", "'", "#", "A # x2", "=", "==",
        "é", "\xe2\x80\x8b", "\xff\xfe", "\x01\x02", "\x7f", "\t", "/dev/zero", "/", "/nonexistent/x",
    };
    static const char *unusual[] = {
        "true", "false", "none", "situ", "swiglu", "rmsnorm", "layernorm", "muon", "adamw", "wsd", "constant",
        "keller", "0.5", "1e-3", "3", "-0.5", "yes",
    };
    if (chance(t, 5)) {  // 5000 characters
        const char fill = "9xA"[below(t, 3)];
        char *s = xmalloc(5001);
        memset(s, fill, 5000);
        s[5000] = 0;
        return s;
    }
    if (chance(t, 25)) return xstrdup(unusual[below(t, sizeof unusual / sizeof unusual[0])]);
    if (chance(t, 20)) {  // an ordinary number: divisibility, ranges and their combinations
        char num[32];
        if (chance(t, 50)) snprintf(num, sizeof num, "%d", (int)below(t, 1 << (1 + below(t, 12))));
        else snprintf(num, sizeof num, "%.3g", (rng_uniform(&t->r) - 0.3) * 3);
        return xstrdup(num);
    }
    return xstrdup(values[below(t, sizeof values / sizeof values[0])]);
}

// A key a little or very wrong: a letter dropped or doubled, the case changed, '-' for '_'
// (an accepted spelling), garbage, bytes, nothing; or (other_keys) another real key.
static char *mangled_key(Trial *t, const char *key, int other_keys) {
    static const char *others[] = {"layers", "d_model", "n_head", "moe_experts", "steps", "lr", "seq_len", "step",
                                   "rng", "shard", "name"};
    size_t n = strlen(key);
    char *s = xmalloc(n + 40);
    switch (below(t, other_keys ? 9 : 8)) {
    case 0: {  // a letter dropped
        size_t at = n ? below(t, n) : 0;
        snprintf(s, n + 40, "%.*s%s", (int)at, key, n ? key + at + 1 : "");
        break;
    }
    case 1: {  // a letter doubled
        size_t at = n ? below(t, n) : 0;
        snprintf(s, n + 40, "%.*s%s", (int)at + 1, key, n ? key + at : "");
        break;
    }
    case 2:
        for (size_t i = 0; i <= n; i++) s[i] = (char)(key[i] >= 'a' && key[i] <= 'z' ? key[i] - 32 : key[i]);
        break;
    case 3:
        for (size_t i = 0; i <= n; i++) s[i] = key[i] == '_' ? '-' : key[i];
        break;
    case 4: snprintf(s, n + 40, "--%s", key); break;
    case 5: {  // printable garbage
        size_t m = 1 + below(t, 20);
        for (size_t i = 0; i < m; i++) s[i] = (char)(0x21 + below(t, 0x5e));
        s[m] = 0;
        if (strchr(s, '=')) *strchr(s, '=') = '?';
        break;
    }
    case 6: {  // bytes (no NUL, no newline: the line stays one line)
        size_t m = 1 + below(t, 12);
        for (size_t i = 0; i < m; i++) {
            s[i] = (char)(1 + below(t, 255));
            if (s[i] == '\n' || s[i] == '=') s[i] = '\x80';
        }
        s[m] = 0;
        break;
    }
    case 7: s[0] = 0; break;
    default: snprintf(s, n + 40, "%s", others[below(t, sizeof others / sizeof others[0])]);
    }
    return s;
}

// Replaces the value of a "key = value" line, or one word of another line.
static void replace_value(Trial *t, Lines *L, int i, const char *name) {
    static const char *sizes[] = {"65536", "1000000", "1048576", "16777216", "100000000"};
    const char *line = L->s[i];
    const char *eq = strchr(line, '=');
    // a size (a whole number) often gets a large one: sizes past what the rest of the input holds
    const char *value = eq ? eq + 1 + strspn(eq + 1, " ") : "";
    const int size = *value && strspn(value, "0123456789") == strlen(value) && chance(t, 40);
    char *v = size ? xstrdup(sizes[below(t, 5)]) : nasty_value(t);
    size_t keep, skip;
    if (eq) {
        keep = (size_t)(eq - line) + 1;
        skip = strlen(line);
    } else {  // a word: the k-th run of non-spaces
        int words = 0;
        for (const char *p = line; *p; p++) words += *p != ' ' && (p == line || p[-1] == ' ');
        int k = words ? (int)below(t, (uint64_t)words) : 0;
        const char *p = line;
        for (int w = -1; *p; p++)
            if (*p != ' ' && (p == line || p[-1] == ' ') && ++w == k) break;
        keep = (size_t)(p - line);
        skip = keep + strcspn(p, " ");
    }
    char *s = xmalloc(strlen(line) + strlen(v) + 4);
    sprintf(s, "%.*s%s%s%s", (int)keep, line, eq ? " " : "", v, line + skip);
    note(t, "%s line %d: value -> '%s'", name, i + 1, show(v, strlen(v)));
    free(L->s[i]);
    L->s[i] = s;
    free(v);
}

// Mangles the key of a "key = value" line, or the first word of another line.
static void mangle_key(Trial *t, Lines *L, int i, int other_keys, const char *name) {
    char key[128];
    const char *line = L->s[i], *rest = strchr(line, '=');
    if (!rest || !line_key(line, key, sizeof key)) {
        size_t n = strcspn(line, " ");
        snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), line);
        rest = line + n;
    }
    char *k = mangled_key(t, key, other_keys);
    char *s = xmalloc(strlen(k) + strlen(rest) + 2);
    sprintf(s, "%s%s%s", k, *rest == '=' ? " " : "", rest);
    note(t, "%s line %d: key '%s' -> '%s'", name, i + 1, show(key, strlen(key)), show(k, strlen(k)));
    free(L->s[i]);
    L->s[i] = s;
    free(k);
}

// One to three line mutations, then the text's own: inserted bytes, a cut, CRLF, no final
// newline. With a filter, values change (and bytes go) only on the keys it accepts, and no
// key becomes another real key.
static Bytes mutate_text(Trial *t, const char *text, const char *name, KeyFilter values) {
    Lines L = lines_split(text);
    int count = chance(t, 60) ? 1 : chance(t, 75) ? 2 : 3;  // one error ends the parse: mostly one
    for (int m = 0; m < count && L.n; m++) {
        int i = pick_line(t, &L, 0, NULL), j = (int)below(t, (uint64_t)L.n);
        switch (below(t, 10)) {  // values most often: they reach the checks behind the parser
        case 0:
            note(t, "%s line %d deleted", name, i + 1);
            free(L.s[i]);
            memmove(L.s + i, L.s + i + 1, sizeof(char *) * (size_t)(L.n - i - 1));
            L.n--;
            break;
        case 1:
            note(t, "%s line %d copied before line %d", name, i + 1, j + 1);
            lines_put(&L, j, xstrdup(L.s[i]));
            break;
        case 2: {
            note(t, "%s lines %d and %d swapped", name, i + 1, j + 1);
            char *x = L.s[i];
            L.s[i] = L.s[j];
            L.s[j] = x;
            break;
        }
        case 3: case 4: case 5: case 6: case 7:
            i = pick_line(t, &L, 1, values);
            if (i >= 0) replace_value(t, &L, i, name);
            break;
        default:
            i = pick_line(t, &L, 1, NULL);
            if (i >= 0) mangle_key(t, &L, i, !values, name);
        }
    }
    int crlf = chance(t, 10), final_eol = !chance(t, 10);
    size_t *starts = xmalloc(sizeof(size_t) * (size_t)(L.n + 1));
    Bytes b = lines_join(&L, crlf ? "\r\n" : "\n", final_eol, starts);
    if (crlf) note(t, "%s: CRLF line ends", name);
    if (!final_eol) note(t, "%s: no final newline", name);
    if (chance(t, 20)) {  // random bytes, NUL included, inside a line (with a filter: a key line it accepts)
        int i = values ? pick_line(t, &L, 1, values) : pick_line(t, &L, 0, NULL);
        if (i >= 0) {
            char junk[8];
            size_t n = 1 + below(t, sizeof junk);
            random_bytes(t, junk, n);
            size_t at = starts[i] + below(t, starts[i + 1] - starts[i] + 1);
            bytes_insert(&b, at, junk, n);
            note(t, "%s: bytes '%s' inserted at byte %zu (line %d)", name, show(junk, n), at, i + 1);
        }
    }
    if (chance(t, 10)) {  // a cut only drops lines or shortens a value: never a bigger size
        size_t n = below(t, b.n + 1);
        note(t, "%s cut to %zu of %zu bytes", name, n, b.n);
        b.n = n;
        b.p[n] = 0;
    }
    free(starts);
    lines_free(&L);
    return b;
}

#endif
