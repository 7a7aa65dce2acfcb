// `prepare` and its parts: the JSON string reader, JSONL records, the Brown converter,
// and whole runs (shard contents, validation split, thread-count independence, shard
// sizes, stale shards, formats), plus its error messages.
// Needs out/vocab/{encoder.json,vocab.bpe} (scripts/fetch_vocab.sh) or $HYBRID_VOCAB.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/brown.h"
#include "data/json.h"
#include "data/jsonl.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/shardseq.h"
#include "data/tokenizer.h"
#include "base/util.h"
#include "tests/expect_death.h"
#include "tests/testing.h"

static const char *vocab_dir(void) {
    const char *d = getenv("HYBRID_VOCAB");
    return d ? d : TOKENIZER_DEFAULT_DIR;
}

static char tmp[64];

static char *tpath(const char *name) {  // tmp/name (static buffer, rotating)
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ % 4];
    snprintf(b, 256, "%s/%s", tmp, name);
    return b;
}

static void put(const char *name, const char *text, size_t len) {
    char *p = tpath(name), *slash = strrchr(p, '/');
    *slash = 0;
    mkdir_p(p);
    *slash = '/';
    write_file_atomic(p, text, len);
}
#define PUT(name, text) put(name, text, strlen(text))

// ---- JSON ----
static int json_gives(const char *json, const char *want, size_t want_len) {
    Buf out = {0};
    const char *p = json, *err = json_string(&p, json + strlen(json), &out);
    int ok = !err && out.len == want_len && memcmp(out.data, want, want_len) == 0 && *p == 0;
    buf_free(&out);
    return ok;
}

static const char *json_error(const char *json) {
    const char *p = json;
    return json_string(&p, json + strlen(json), NULL);
}

static void test_json(void) {
    CHECK(json_gives("\"plain\"", "plain", 5), "plain");
    CHECK(json_gives("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "a\"b\\c/d\b\f\n\r\t", 12), "simple escapes");
    CHECK(json_gives("\"\\u00e9\\u4e2d\\u0041\"", "\xc3\xa9\xe4\xb8\xad" "A", 6), "\\u escapes to UTF-8");
    CHECK(json_gives("\"\\ud83d\\ude00!\"", "\xf0\x9f\x98\x80!", 5), "surrogate pair to one 4-byte character");
    CHECK(json_gives("\"\\u0000x\"", "\0x", 2), "\\u0000 is a NUL byte");
    CHECK(json_gives("\"caf\xc3\xa9 \xff\"", "caf\xc3\xa9 \xff", 7), "raw bytes copied as they are");
    CHECK(json_error("\"\\ud83d\"") != NULL, "lone high surrogate");
    CHECK(json_error("\"\\ude00\"") != NULL, "lone low surrogate");
    CHECK(json_error("\"\\x41\"") != NULL, "invalid escape");
    CHECK(json_error("\"\\u12\"") != NULL, "short \\u");
    CHECK(json_error("\"a\nb\"") != NULL, "raw newline in a string");
    CHECK(json_error("\"abc") != NULL, "unterminated");
    const char *v = "{\"a\": [1, 2.5e3, -3, {\"b\": null}], \"c\": true, \"d\": \"x\"} rest";
    const char *p = v;
    CHECK(json_skip_value(&p, v + strlen(v)) == NULL && strcmp(p, " rest") == 0, "skip a nested value");
}

static void test_jsonl(void) {
    Buf out = {0};
    size_t col;
    const char *line =
        "{\"id\": 7, \"meta\": {\"text\": \"nested, not this\"}, \"text\": \"hello\\nworld\", \"z\": [1]}";
    CHECK(jsonl_text(line, strlen(line), &out, &col) == NULL && out.len == 11 && !memcmp(out.data, "hello\nworld", 11),
          "top-level text field");
    out.len = 0;
    const char *e1 = jsonl_text("{\"title\": \"x\"}", 14, &out, &col);
    CHECK(e1 && strstr(e1, "no \"text\""), "missing text: %s", e1 ? e1 : "accepted");
    const char *e2 = jsonl_text("{\"text\": 5}", 11, &out, &col);
    CHECK(e2 && strstr(e2, "not a string") && col == 10, "text not a string: %s col %zu", e2 ? e2 : "accepted", col);
    const char *e3 = jsonl_text("{\"text\": \"a\"} x", 15, &out, &col);
    CHECK(e3 != NULL, "trailing garbage");
    const char *e4 = jsonl_text("[\"text\"]", 8, &out, &col);
    CHECK(e4 != NULL, "not an object");
    buf_free(&out);
}

// ---- Brown ----
static void test_brown(void) {
    const char *tagged =
        "\n\n\tThe/at jury/nn said/vbd ``/`` deserves/vbz the/at praise/nn ''/'' ,/, Mr./np Jr./np ./.\n"
        "It/pps was/bedz (/( he/pps said/vbd )/) done/vbn ;/. ;/.\n"
        "\n\nMerger/nn-hl proposed/vbn-hl\n"
        "He/pps asked/vbd :/: ``/`` Why/wrb ''/'' ?/. ?/.\n"
        "\n\n\tShe/pps said/vbd '/' no/rb '/' to/in 1-1/2/cd cakes/nns ./.\n";
    Buf out = {0};
    brown_to_text(tagged, strlen(tagged), &out);
    const char *want =
        "The jury said \"deserves the praise,\" Mr. Jr. It was (he said) done;\n\n"
        "Merger proposed\n\n"
        "He asked: \"Why?\"\n\n"
        "She said 'no' to 1-1/2 cakes.";
    CHECK(out.len == strlen(want) && memcmp(out.data, want, out.len) == 0, "brown text:\n%.*s\nwanted:\n%s",
          (int)out.len, out.data, want);
    buf_free(&out);
    CHECK(brown_is_sample_name("ca01") && brown_is_sample_name("cr09") && !brown_is_sample_name("cats.txt") &&
              !brown_is_sample_name("README") && !brown_is_sample_name("cz01"),
          "sample names");
}

// ---- whole runs ----
// prepare_main("prepare", "--vocab", <vocab>, "--quiet", args...) with a NULL-ended args
static int run_prepare(char **args) {
    char *argv[64] = {"prepare", "--vocab", (char *)vocab_dir(), "--quiet"};
    int argc = 4;
    while (*args && argc < 63) argv[argc++] = *args++;
    argv[argc] = NULL;
    return prepare_main(argc, argv);
}
#define PREPARE(...) run_prepare((char *[]){__VA_ARGS__, NULL})

// All tokens of <dir>/<name>_<split>_*.bin in order; *nshards gets the shard count.
static uint16_t *read_split(const char *dir, const char *name, const char *split, size_t *n, int *nshards) {
    ShardSeq s;
    shardseq_init(&s, dir, name, split, 1, NULL);
    uint16_t *all = NULL;
    *n = 0;
    for (*nshards = 0;; (*nshards)++) {
        char *p = shardseq_path(&s, *nshards);
        if (!file_exists(p)) {
            free(p);
            break;
        }
        size_t k = shard_validate(p);
        all = xrealloc(all, (*n + k + 1) * sizeof(uint16_t));
        shard_read(p, 0, k, all + *n);
        *n += k;
        free(p);
    }
    shardseq_finish(&s);
    return all;
}

// [EOT] + encode(doc) for each document, as prepare should write them.
static void expect_docs(Encoder *e, const char **docs, int ndocs, int flags, TokenVec *out) {
    for (int i = 0; i < ndocs; i++) {
        tokenvec_push(out, TOKENIZER_EOT);
        encoder_encode(e, docs[i], strlen(docs[i]), flags, out);
    }
}

static int same_tokens(const uint16_t *got, size_t n, const TokenVec *want) {
    if (n != want->n) {
        fprintf(stderr, "  %zu tokens, expected %zu\n", n, want->n);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (got[i] != want->ids[i]) {
            fprintf(stderr, "  token %zu is %d, expected %d\n", i, got[i], want->ids[i]);
            return 0;
        }
    return 1;
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return eq;
}

static void prepare_child(void *args);
static int expect_killed(void (*fn)(void *), void *arg);

static void test_text_folder(Encoder *e) {
    // read order: names sorted at every level, hidden files skipped
    PUT("txt/b.txt", "Second document, with caf\xc3\xa9 and \xe4\xb8\xad\xe6\x96\x87.\n");
    PUT("txt/a.txt", "First document.\n\nTwo paragraphs <|endoftext|> here.");
    PUT("txt/sub/c.txt", "Third, in a sub-folder \xf0\x9f\x98\x80");
    PUT("txt/empty.txt", "");
    PUT("txt/.hidden", "never read");
    PUT("txt/d.md", "Fourth \xff\xfe invalid bytes stay bytes.");
    const char *docs[] = {"First document.\n\nTwo paragraphs <|endoftext|> here.",
                          "Second document, with caf\xc3\xa9 and \xe4\xb8\xad\xe6\x96\x87.\n",
                          "Fourth \xff\xfe invalid bytes stay bytes.", "Third, in a sub-folder \xf0\x9f\x98\x80"};
    CHECK(PREPARE("--out", tpath("out"), "--name", "t", "--val-docs", "1", "--threads", "1", tpath("txt")) == 0, "run");
    TokenVec train = {0}, val = {0};
    expect_docs(e, docs, 3, 0, &train);
    expect_docs(e, docs + 3, 1, 0, &val);  // 1 of 4 spread evenly: the last document
    size_t n;
    int ns;
    uint16_t *got = read_split(tpath("out"), "t", "train", &n, &ns);
    CHECK(ns == 1 && same_tokens(got, n, &train), "train shard = [EOT]+doc for docs a, b, d");
    free(got);
    got = read_split(tpath("out"), "t", "val", &n, &ns);
    CHECK(ns == 1 && same_tokens(got, n, &val), "val shard = [EOT]+doc for sub/c");
    free(got);

    // the same with 3 threads: identical files
    CHECK(PREPARE("--out", tpath("out"), "--name", "t3", "--val-docs", "1", "--threads", "3", tpath("txt")) == 0,
          "run");
    CHECK(files_equal(tpath("out/t_train_000000.bin"), tpath("out/t3_train_000000.bin")) &&
              files_equal(tpath("out/t_val_000000.bin"), tpath("out/t3_val_000000.bin")),
          "3 threads write the same shards as 1");

    // small shards: every one but the last holds exactly --shard-tokens
    CHECK(PREPARE("--out", tpath("out"), "--name", "t", "--val-docs", "1", "--shard-tokens", "7", tpath("txt")) == 0,
          "run");
    got = read_split(tpath("out"), "t", "train", &n, &ns);
    CHECK(ns == (int)((train.n + 6) / 7) && same_tokens(got, n, &train), "train split into %d shards of 7", ns);
    CHECK(shard_validate(tpath("out/t_train_000000.bin")) == 7, "full shard size");
    free(got);
    // the manifest lists every shard with its size and CRC-32
    int nv;
    free(read_split(tpath("out"), "t", "val", &n, &nv));
    Manifest m;
    CHECK(manifest_read(&m, tpath("out/t_manifest.txt")) && m.n == ns + nv && m.vocab_size == 50257 && m.eot == 50256,
          "manifest of %d train + %d val shards", ns, nv);
    for (int i = 0; i < m.n; i++) {
        ShardScan sc;
        char *p = xmalloc(strlen(tpath("out")) + strlen(m.e[i].file) + 2);
        sprintf(p, "%s/%s", tpath("out"), m.e[i].file);
        shard_scan(p, 50257, &sc);
        CHECK(sc.crc == m.e[i].crc && sc.bytes == m.e[i].bytes && sc.tokens == m.e[i].tokens, "manifest entry %s",
              m.e[i].file);
        free(p);
    }
    manifest_free(&m);
    // a run killed after 2 of its shards leaves the earlier set as it was (one thread: OpenMP's
    // pool does not survive fork) ...
    char *old = read_file(tpath("out/t_train_000001.bin"), NULL);
    setenv("HYBRID_KILL_AT", "prepare-shard:2", 1);
    CHECK(expect_killed(prepare_child, (char *[]){"--out", tpath("out"), "--name", "t", "--val-docs", "1", "--threads",
                                                  "1", "--shard-tokens", "5", tpath("txt"), NULL}), "killed run");
    unsetenv("HYBRID_KILL_AT");
    char *now = read_file(tpath("out/t_train_000001.bin"), NULL);
    CHECK(old && now && !strcmp(old, now) && file_exists(tpath("out/t_train_000003.bin")) &&
              dir_exists(tpath("out/.t.prepare-tmp")),
          "a killed prepare leaves the earlier shards");
    free(old), free(now);
    // ... and the next run with bigger shards replaces it: the small ones are gone, and so is the leftover
    CHECK(PREPARE("--out", tpath("out"), "--name", "t", "--val-docs", "1", tpath("txt")) == 0, "run");
    CHECK(!file_exists(tpath("out/t_train_000001.bin")) && file_exists(tpath("out/t_train_000000.bin")) &&
              !dir_exists(tpath("out/.t.prepare-tmp")),
          "stale shards and the killed run's leftover removed");

    // --allow-special: the text <|endoftext|> becomes token 50256
    CHECK(PREPARE("--out", tpath("out"), "--name", "s", "--val-docs", "0", "--allow-special", tpath("txt")) == 0,
          "run");
    TokenVec special = {0};
    expect_docs(e, docs, 4, TOKENIZER_ALLOW_EOT, &special);
    got = read_split(tpath("out"), "s", "train", &n, &ns);
    CHECK(same_tokens(got, n, &special), "--allow-special");
    CHECK(!file_exists(tpath("out/s_val_000000.bin")), "--val-docs 0 writes no val shard");
    free(got);
    tokenvec_free(&train), tokenvec_free(&val), tokenvec_free(&special);
}

static void test_jsonl_run(Encoder *e) {
    const char *jsonl =
        "{\"text\": \"one \\\"quoted\\\" \\u00e9\\ud83d\\ude00\", \"id\": 1}\n"
        "\n"
        "{\"id\": 2, \"text\": \"\"}\n"  // empty: skipped
        "  {\"text\": \"two\\nlines\", \"meta\": {\"text\": \"not this\"}}\r\n"
        "{\"text\": \"three\"}";  // no final newline
    PUT("j/data.jsonl", jsonl);
    const char *docs[] = {"one \"quoted\" \xc3\xa9\xf0\x9f\x98\x80", "two\nlines", "three"};
    CHECK(PREPARE("--out", tpath("out"), "--name", "j", "--val-frac", "0", tpath("j")) == 0, "run");
    TokenVec want = {0};
    expect_docs(e, docs, 3, 0, &want);
    size_t n;
    int ns;
    uint16_t *got = read_split(tpath("out"), "j", "train", &n, &ns);
    CHECK(same_tokens(got, n, &want), "JSONL documents");
    free(got);
    tokenvec_free(&want);
}

// A document over 1 MiB is cut into pieces that are encoded in parallel.
static void test_big_document(Encoder *e) {
    Buf b = {0};
    const char *words[] = {"alpha",  " beta", "\n", "  gamma.", "\n\n", " \xce\xb4\xce\xad\xce\xbb\xcf\x84\xce\xb1",
                           "!", "\n "};
    for (uint64_t x = 1; b.len < (5u << 19); x = x * 6364136223846793005ull + 1442695040888963407ull)
        buf_append(&b, words[(x >> 33) % 8], strlen(words[(x >> 33) % 8]));
    put("big/doc.txt", b.data, b.len);
    CHECK(PREPARE("--out", tpath("out"), "--name", "big", "--val-docs", "0", "--threads", "2", tpath("big")) == 0,
          "run");
    TokenVec want = {0};
    tokenvec_push(&want, TOKENIZER_EOT);
    encoder_encode(e, b.data, b.len, 0, &want);
    size_t n;
    int ns;
    uint16_t *got = read_split(tpath("out"), "big", "train", &n, &ns);
    CHECK(same_tokens(got, n, &want), "a 2.5 MB document cut into pieces encodes like one piece");
    free(got);
    tokenvec_free(&want);
    buf_free(&b);
}

static void test_brown_run(void) {
    PUT("brown/ca01", "\tThe/at jury/nn said/vbd ./.\n");
    PUT("brown/cb02", "\tIt/pps rained/vbd ./.\n");
    PUT("brown/README", "not a sample");
    PUT("brown/cats.txt", "ca01 news");
    CHECK(PREPARE("--out", tpath("out"), "--name", "b", "--format", "brown", "--val-docs", "1", tpath("brown")) == 0,
          "run");
    size_t n;
    int ns;
    uint16_t *got = read_split(tpath("out"), "b", "train", &n, &ns);
    // [EOT] The jury said .
    CHECK(n == 5 && got[0] == TOKENIZER_EOT && got[1] == 464 && got[4] == 13, "brown train: %zu tokens", n);
    free(got);
    got = read_split(tpath("out"), "b", "val", &n, &ns);
    CHECK(n == 5, "brown val: the second sample (%zu tokens)", n);
    free(got);
}

// ---- errors ----
static void prepare_child(void *args) { run_prepare(args); }

static int expect_killed(void (*fn)(void *), void *arg) {
    char *err;
    int status = run_forked(fn, arg, 60, &err);
    int ok = status != RUN_FORKED_TIMED_OUT && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!ok) fprintf(stderr, "  expected SIGKILL, got status %d: %s\n", status, err);
    free(err);
    return ok;
}

static void test_errors(void) {
    PUT("empty/nothing.txt", "");
    PUT("emptyjsonl/x.jsonl", "\n{\"text\": \"\"}\n\n");
    mkdir_p(tpath("nofiles/sub"));
    PUT("bad/x.jsonl", "{\"text\": \"fine\"}\n{\"title\": \"no text here\"}\n");
    PUT("badesc/x.jsonl", "{\"text\": \"a\\qb\"}\n");
    PUT("one/a.txt", "only document");
    char *o = tpath("out");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, tpath("empty"), NULL}, "empty", "no text"),
          "prepare on an empty file");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, tpath("emptyjsonl"), NULL}, "empty jsonl", "no text"),
          "prepare on JSONL without any text");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, tpath("nofiles"), NULL}, "no files", "nofiles",
                       "no input files"), "prepare on a folder without files");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, tpath("missing"), NULL}, "missing", "missing",
                       "No such file"), "prepare on a missing path");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, tpath("bad"), NULL}, "no text field", "bad/x.jsonl:2:",
                       "no \"text\" field"), "JSONL line without text names file:line");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, tpath("badesc"), NULL}, "bad escape", "badesc/x.jsonl:1:",
                       "invalid escape"), "JSONL with a bad escape");
    CHECK(expect_death(prepare_child, (char *[]){"--out", o, "--val-docs", "1", tpath("one"), NULL}, "all val",
                       "none of the 1"), "validation taking every document");
    CHECK(expect_death(prepare_child, (char *[]){"--bogus", NULL}, "bad option", "unknown option --bogus"),
          "unknown option");
    CHECK(expect_death(prepare_child, (char *[]){"--name", ".x", tpath("one"), NULL}, "hidden name",
                       "--name must be a plain file name prefix"), "a --name that would be hidden");
    CHECK(expect_death(prepare_child, (char *[]){"--threads", "0", tpath("one"), NULL}, "threads 0", "--threads"),
          "--threads 0");
    CHECK(expect_death(prepare_child, (char *[]){"--vocab", tpath("novocab"), tpath("one"), NULL}, "no vocab",
                       "novocab/encoder.json"), "missing vocabulary");
    CHECK(expect_death(prepare_child, (char *[]){NULL}, "no input", "no INPUT"), "no input at all");
}

int main(void) {
    test_json();
    test_jsonl();
    test_brown();
    char enc_path[256];
    snprintf(enc_path, sizeof(enc_path), "%s/encoder.json", vocab_dir());
    if (!file_exists(enc_path)) {
        fprintf(stderr, "%s missing: run scripts/fetch_vocab.sh (make test does)\n", enc_path);
        return 1;
    }
    strcpy(tmp, "/tmp/hybrid_prep_XXXXXX");
    CHECK(mkdtemp(tmp) != NULL, "mkdtemp");
    Tokenizer *t = tokenizer_load_dir(vocab_dir());
    if (!tokenizer_can_encode()) {  // a build without PCRE2: prepare must say what is missing
        PUT("one/a.txt", "only document");
        CHECK(expect_death(prepare_child, (char *[]){"--out", tpath("out"), tpath("one"), NULL}, "no PCRE2",
                           "needs PCRE2"), "prepare without PCRE2");
        tokenizer_free(t);
        remove_tree(tmp);
        TEST_MAIN_SKIP("prepare's encoding runs: this build has no PCRE2, only its error message was tested "
                       "(Debian: libpcre2-dev)");
    }
    Encoder *e = encoder_new(t);
    test_text_folder(e);
    test_jsonl_run(e);
    test_big_document(e);
    test_brown_run();
    test_errors();
    encoder_free(e);
    tokenizer_free(t);
    remove_tree(tmp);
    TEST_MAIN_END();
}
