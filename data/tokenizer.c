// Loading GPT-2's encoder.json and vocab.bpe, and decoding.
//
// Both files spell tokens in GPT-2's "byte alphabet": each byte is shown as one
// printable Unicode character (bytes_to_unicode in OpenAI's encoder.py). Printable
// Latin-1 bytes stand for themselves; the other 68 (controls, space, 0x7F-0xA0,
// 0xAD) become U+0100.. in byte order, so the space 0x20 is shown as U+0120 'Ġ'.
// Tokens are stored here as raw bytes.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/json.h"
#include "data/strmap.h"
#include "data/tokenizer_impl.h"
#include "base/util.h"

#define MAX_VOCAB (1 << 20)

// alpha[cp] = the byte shown by code point cp in the byte alphabet, or -1.
#define ALPHABET_SIZE (256 + 68)
static void alphabet_table(int alpha[ALPHABET_SIZE]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        alpha[b] = printable ? b : -1;
        if (!printable) alpha[256 + n++] = b;
    }
}

// Decodes a string in the byte alphabet (UTF-8) to raw bytes; returns an error or NULL.
static const char *from_alphabet(const int *alpha, const char *s, size_t n, Buf *out) {
    static const char *bad = "a character outside GPT-2's byte alphabet";
    out->len = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        if (c < 0x80) cp = c, i += 1;
        else if ((c & 0xE0) == 0xC0 && i + 1 < n) cp = (uint32_t)(c & 0x1F) << 6 | (s[i + 1] & 0x3F), i += 2;
        else return bad;
        if (cp >= ALPHABET_SIZE || alpha[cp] < 0) return bad;
        buf_putc(out, (char)alpha[cp]);
    }
    return NULL;
}

typedef struct {
    int id;
    uint32_t off, len;
} Entry;

// encoder.json: one JSON object {"token": id, ...}. Fills t->bytes/offset/n_vocab and
// `vocab` (token bytes -> id).
static void load_encoder_json(Tokenizer *t, const char *path, const int *alpha, StrMap *vocab) {
    size_t size;
    char *text = read_file(path, &size);
    if (!text)
        die("%s: cannot open the GPT-2 vocabulary (%s); `make data` or scripts/fetch_vocab.sh downloads it", path,
            strerror(errno));
    const char *p = text, *end = text + size, *err = NULL;
    Buf key = {0}, raw = {0}, all = {0};
    Entry *entries = NULL;
    size_t n = 0, cap = 0;
    int max_id = -1;
    json_skip_ws(&p, end);
    if (p >= end || *p != '{') {
        err = "expected a JSON object {\"token\": id, ...}";
        goto fail;
    }
    p++;
    for (;;) {
        json_skip_ws(&p, end);
        const char *at = p;
        key.len = 0;
        if ((err = json_string(&p, end, &key))) goto fail;
        if ((err = from_alphabet(alpha, key.data, key.len, &raw))) {
            p = at;
            goto fail;
        }
        json_skip_ws(&p, end);
        if (p >= end || *p != ':') {
            err = "expected ':'";
            goto fail;
        }
        p++;
        json_skip_ws(&p, end);
        at = p;
        long long id;
        if ((err = json_int(&p, end, &id))) goto fail;
        if (id < 0 || id >= MAX_VOCAB) {
            p = at;
            err = "token id out of range";
            goto fail;
        }
        uint64_t dup;
        if (strmap_get(vocab, raw.data, raw.len, &dup)) {
            p = at;
            err = "the same token appears twice";
            goto fail;
        }
        strmap_put(vocab, raw.data, raw.len, (uint64_t)id);
        if (n == cap) entries = xrealloc(entries, (cap = cap ? 2 * cap : 65536) * sizeof(Entry));
        entries[n++] = (Entry){(int)id, (uint32_t)all.len, (uint32_t)raw.len};
        buf_append(&all, raw.data, raw.len);
        if (id > max_id) max_id = (int)id;
        json_skip_ws(&p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}') break;
        err = "expected ',' or '}'";
        goto fail;
    }
    if ((size_t)max_id + 1 != n)
        die("%s: corrupt GPT-2 vocabulary: %zu tokens but ids go up to %d (ids must be 0..%zu, each once)", path, n,
            max_id, n - 1);
    t->n_vocab = (int)n;
    t->offset = xmalloc((n + 1) * sizeof(uint32_t));
    t->bytes = xmalloc(all.len + 1);
    int *seen = xcalloc(n, sizeof(int));
    for (size_t i = 0; i < n; i++) seen[entries[i].id]++;
    for (size_t i = 0; i < n; i++)
        if (seen[i] != 1) die("%s: corrupt GPT-2 vocabulary: id %zu is used %d times", path, i, seen[i]);
    // lay tokens out in id order
    uint32_t *len_of = xmalloc(n * sizeof(uint32_t)), *off_of = xmalloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) len_of[entries[i].id] = entries[i].len, off_of[entries[i].id] = entries[i].off;
    uint32_t o = 0;
    for (size_t i = 0; i < n; i++) {
        t->offset[i] = o;
        memcpy(t->bytes + o, all.data + off_of[i], len_of[i]);
        o += len_of[i];
    }
    t->offset[n] = o;
    free(len_of), free(off_of), free(seen), free(entries);
    buf_free(&key), buf_free(&raw), buf_free(&all);
    free(text);
    return;
fail:
    die("%s: corrupt GPT-2 encoder.json at byte %zu: %s", path, (size_t)(p - text), err);
}

static void merge_insert(Tokenizer *t, int a, int b, int rank, int merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = t->merge_cap - 1, i = merge_hash(key) & mask;
    while (t->merges[i].key != MERGE_EMPTY) i = (i + 1) & mask;
    t->merges[i] = (MergeSlot){key, rank, merged};
}

// vocab.bpe: "#version: 0.2", then one merge "left right" per line, best first.
static void load_vocab_bpe(Tokenizer *t, const char *path, const int *alpha, const StrMap *vocab) {
    size_t size;
    char *text = read_file(path, &size);
    if (!text)
        die("%s: cannot open the GPT-2 merges (%s); `make data` or scripts/fetch_vocab.sh downloads it", path,
            strerror(errno));
    char *end = text + size, *line = text, *nl = memchr(text, '\n', size);
    if (!nl || strncmp(text, "#version", 8) != 0)
        die("%s: corrupt GPT-2 vocab.bpe: line 1 should be \"#version: 0.2\"", path);
    size_t nlines = 0;
    for (char *s = text; s < end; s++) nlines += *s == '\n';
    t->merge_cap = 16;
    while (t->merge_cap < 2 * nlines) t->merge_cap *= 2;
    t->merges = xmalloc(t->merge_cap * sizeof(MergeSlot));
    for (size_t i = 0; i < t->merge_cap; i++) t->merges[i].key = MERGE_EMPTY;
    int *made_by = xmalloc((size_t)t->n_vocab * sizeof(int));  // rank of the merge producing each token
    for (int i = 0; i < t->n_vocab; i++) made_by[i] = t->offset[i + 1] - t->offset[i] == 1 ? -2 : -1;
    Buf raw = {0}, joined = {0};
    int rank = 0;
    size_t lineno = 1;
    for (line = nl + 1; line < end; line = nl + 1, lineno++) {
        nl = memchr(line, '\n', (size_t)(end - line));
        if (!nl) nl = end;
        size_t len = (size_t)(nl - line);
        if (len == 0 && nl + 1 >= end) break;  // the final newline
        char *sp = memchr(line, ' ', len);
        if (!sp || sp == line || sp + 1 == nl || memchr(sp + 1, ' ', (size_t)(nl - sp - 1)))
            die("%s:%zu: corrupt GPT-2 vocab.bpe: expected two tokens separated by one space", path, lineno + 1);
        int ids[2];
        joined.len = 0;
        for (int k = 0; k < 2; k++) {
            const char *s = k ? sp + 1 : line;
            size_t n = k ? (size_t)(nl - sp - 1) : (size_t)(sp - line);
            uint64_t id;
            if (from_alphabet(alpha, s, n, &raw) || !strmap_get(vocab, raw.data, raw.len, &id))
                die("%s:%zu: corrupt GPT-2 vocab.bpe: \"%.*s\" is not a token of encoder.json", path, lineno + 1,
                    (int)n, s);
            ids[k] = (int)id;
            buf_append(&joined, raw.data, raw.len);
            if (made_by[id] == -1)
                die("%s:%zu: corrupt GPT-2 vocab.bpe: \"%.*s\" is used before the line that makes it", path,
                    lineno + 1, (int)n, s);
        }
        uint64_t merged;
        if (!strmap_get(vocab, joined.data, joined.len, &merged))
            die("%s:%zu: corrupt GPT-2 vocab.bpe: the merged token is not in encoder.json", path, lineno + 1);
        if (made_by[merged] != -1)
            die("%s:%zu: corrupt GPT-2 vocab.bpe: the merged token is already made by line %d", path, lineno + 1,
                made_by[merged] + 2);
        made_by[merged] = rank;
        merge_insert(t, ids[0], ids[1], rank++, (int)merged);
        if (nl >= end) break;
    }
    if (rank == 0) die("%s: corrupt GPT-2 vocab.bpe: no merges", path);
    // every token but the bytes and <|endoftext|> comes from a merge (catches a truncated file)
    for (int i = 0; i < t->n_vocab; i++)
        if (made_by[i] == -1 && i != t->eot)
            die("%s: corrupt GPT-2 vocab.bpe: %d merges, and no line makes token %d of encoder.json (file cut short?)",
                path, rank, i);
    t->n_merges = rank;
    free(made_by);
    buf_free(&raw), buf_free(&joined);
    free(text);
}

Tokenizer *tokenizer_load(const char *encoder_json_path, const char *vocab_bpe_path) {
    Tokenizer *t = xcalloc(1, sizeof(Tokenizer));
    int alpha[ALPHABET_SIZE];
    alphabet_table(alpha);
    StrMap vocab;
    strmap_init(&vocab, 65536);
    load_encoder_json(t, encoder_json_path, alpha, &vocab);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        uint64_t id;
        if (!strmap_get(&vocab, &c, 1, &id))
            die("%s: corrupt GPT-2 vocabulary: no token for the single byte 0x%02X", encoder_json_path, b);
        t->byte_token[b] = (int)id;
    }
    uint64_t eot;
    if (!strmap_get(&vocab, "<|endoftext|>", 13, &eot))
        die("%s: corrupt GPT-2 vocabulary: no <|endoftext|> token", encoder_json_path);
    t->eot = (int)eot;
    load_vocab_bpe(t, vocab_bpe_path, alpha, &vocab);
    strmap_free(&vocab);
    return t;
}

Tokenizer *tokenizer_load_dir(const char *dir) {
    size_t n = strlen(dir) + 32;
    char *enc = xmalloc(n), *bpe = xmalloc(n);
    snprintf(enc, n, "%s/encoder.json", dir);
    snprintf(bpe, n, "%s/vocab.bpe", dir);
    Tokenizer *t = tokenizer_load(enc, bpe);
    free(enc), free(bpe);
    return t;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->bytes), free(t->offset), free(t->merges);
    free(t);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->n_vocab; }
int tokenizer_eot(const Tokenizer *t) { return t->eot; }

const char *tokenizer_token_bytes(const Tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->offset[id + 1] - t->offset[id];
    return t->bytes + t->offset[id];
}

size_t tokenizer_decode_to(const Tokenizer *t, const int *ids, size_t n, char *out, size_t cap) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *b = tokenizer_token_bytes(t, ids[i], &len);
        if (!b) die("decode: token id %d is outside the vocabulary (0..%d)", ids[i], t->n_vocab - 1);
        if (total < cap) memcpy(out + total, b, len < cap - total ? len : cap - total);
        total += len;
    }
    return total;
}

char *tokenizer_decode(const Tokenizer *t, const int *ids, size_t n, size_t *len) {
    size_t total = tokenizer_decode_to(t, ids, n, NULL, 0);
    char *s = xmalloc(total + 1);
    tokenizer_decode_to(t, ids, n, s, total);
    s[total] = 0;
    if (len) *len = total;
    return s;
}

void tokenvec_push(TokenVec *v, int id) {
    if (v->n == v->cap) v->ids = xrealloc(v->ids, (v->cap = v->cap ? 2 * v->cap : 256) * sizeof(int));
    v->ids[v->n++] = id;
}

void tokenvec_append(TokenVec *v, const int *ids, size_t n) {
    if (v->n + n > v->cap) {
        while (v->n + n > v->cap) v->cap = v->cap ? 2 * v->cap : 256;
        v->ids = xrealloc(v->ids, v->cap * sizeof(int));
    }
    memcpy(v->ids + v->n, ids, n * sizeof(int));
    v->n += n;
}

void tokenvec_free(TokenVec *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}
