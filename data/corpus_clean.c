// The text side of `hybrid corpus`: OSIS markup -> text, dictd entries -> text, the
// common normal form, and the hash behind de-duplication and the split.
#include <ctype.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "data/corpus.h"

// ---- hash ----
static uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

CorpusHash corpus_hash(const void *data, size_t len, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t a = 0xcbf29ce484222325ull ^ mix64(seed), b = 0x84222325cbf29ce4ull ^ mix64(seed + 1);
    for (size_t i = 0; i < len; i++) {
        a = (a ^ p[i]) * 0x100000001b3ull;
        b = (b ^ p[i]) * 0x100000001b3ull;
        b ^= b >> 29;
    }
    return (CorpusHash){mix64(a ^ len), mix64(b + len)};
}

// ---- a set of hashes (open addressing, doubling at half full) ----
int corpus_set_add(CorpusSet *s, CorpusHash h) {
    if (2 * (s->n + 1) > s->cap) {
        CorpusSet t = {xcalloc(s->cap ? 2 * s->cap : 4096, sizeof(CorpusHash)), s->cap ? 2 * s->cap : 4096, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i].hi || s->keys[i].lo) corpus_set_add(&t, s->keys[i]);
        free(s->keys);
        *s = t;
    }
    if (!h.hi && !h.lo) h.lo = 1;  // (0, 0) marks a free slot
    size_t i = (size_t)(mix64(h.hi ^ h.lo) % s->cap);
    while (s->keys[i].hi || s->keys[i].lo) {
        if (s->keys[i].hi == h.hi && s->keys[i].lo == h.lo) return 0;
        i = (i + 1) % s->cap;
    }
    s->keys[i] = h;
    s->n++;
    return 1;
}

// ---- the normal form ----
// The length of the well-formed UTF-8 character at s (n bytes left), 0 if it is not one.
static size_t utf8_len(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t k = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!k || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (k == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;  // overlong, surrogate
    if (k == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;  // overlong, > U+10FFFF
    return k;
}

void corpus_normalize(const char *text, size_t len, Buf *out) {
    size_t start = out->len;
    int newlines = 0, space = 0;  // pending: line breaks (capped at 2), a space
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\r') {
            if (i + 1 < len && text[i + 1] == '\n') continue;
            c = '\n';
        }
        if (c == '\n') {
            newlines += newlines < 2;
            space = 0;
            continue;
        }
        if (c == ' ' || c == '\t') {
            space = 1;
            continue;
        }
        if (c < 0x20 || c == 0x7f) continue;
        size_t k = utf8_len((const unsigned char *)text + i, len - i);
        if (!k) continue;  // a byte that is not UTF-8 (GCIDE has a few): dropped
        if (out->len > start) {
            if (newlines) buf_append(out, "\n\n", (size_t)newlines);
            else if (space) buf_putc(out, ' ');
        }
        newlines = space = 0;
        buf_append(out, text + i, k);
        i += k - 1;
    }
}

// ---- dictd entries ----
static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// GCIDE's pronunciation spans: \Co*ag"u*late\, \Amt\ (1 to 60 bytes between the
// backslashes, holding * " or `, or else only letters, ' and -)
static size_t pronunciation_end(const char *s, size_t i, size_t n) {
    for (size_t j = i + 1; j < n && j < i + 62; j++)
        if (s[j] == '\\') {
            int marks = 0, word = j > i + 1;
            for (size_t k = i + 1; k < j; k++) {
                char c = s[k];
                marks |= c == '*' || c == '"' || c == '`';
                word &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '\'' || c == '-';
            }
            return marks || word ? j + 1 : 0;
        }
    return 0;
}

void corpus_dictd_entry(const char *entry, size_t len, Buf *out) {
    size_t start = out->len, prev_len = 0;  // prev_len: the last kept line's length, 0 after a break
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && entry[e] != '\n') e++;
        const char *line = entry + i;
        size_t n = e - i;
        i = e + 1;
        if (is_blank(line, n)) {
            prev_len = 0;
            if (out->len > start && out->data[out->len - 1] != '\n') buf_append(out, "\n\n", 2);
            continue;
        }
        while (n > 0 && (line[0] == ' ' || line[0] == '\t')) line++, n--;
        while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) n--;
        if (line[0] == '[' && line[n - 1] == ']' && !memchr(line + 1, ']', n - 2)) continue;  // [1913 Webster]
        if (prev_len) buf_putc(out, prev_len < 40 ? '\n' : ' ');  // a short line ends; a full one was wrapped
        size_t kept = out->len;
        for (size_t k = 0; k < n; k++) {
            char c = line[k];
            size_t end;
            if (c == '\\' && (end = pronunciation_end(line, k, n))) {
                if (out->len > kept && out->data[out->len - 1] == ' ') out->len--;
                k = end - 1;
                continue;
            }
            if (c == '{' || c == '}') continue;
            buf_putc(out, c);
        }
        prev_len = n;
    }
    while (out->len > start && out->data[out->len - 1] == '\n') out->len--;
}

// ---- OSIS ----
typedef struct {
    CorpusEmit emit;
    void *ctx;
    Buf doc;
    char id[96];
    int has_id;    // a chapter is open: the document gets its osisID
    int nfront;    // documents closed before any chapter of their book
    int pend;      // pending separator: 1 space, 2 line break, 3 paragraph break
    int soft;      // a note was dropped here: a space if the next text starts a word
} Osis;

static void osis_close(Osis *o) {
    if (o->doc.len) {
        char id[96], group[128];
        if (o->has_id) snprintf(id, sizeof id, "%s", o->id);
        else snprintf(id, sizeof id, "front%d", ++o->nfront);
        if (o->has_id) snprintf(group, sizeof group, "bible:%s", o->id);
        else snprintf(group, sizeof group, "front:%s", id);
        o->emit(o->ctx, id, group, o->doc.data, o->doc.len);
    }
    o->doc.len = 0;
    o->has_id = 0;
    o->pend = o->soft = 0;
}

// 1 if the text at s (n bytes) starts a word: a letter, digit, ( or an opening quote
static int starts_word(const unsigned char *s, size_t n) {
    if (isalnum(s[0]) || s[0] == '(') return 1;
    if (s[0] < 0x80) return 0;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80) return s[2] == 0x9c || s[2] == 0x98;  // “ ‘ yes, ” ’ — no
    return 1;
}

static void osis_text(Osis *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            if (o->pend < 1) o->pend = 1;
            continue;
        }
        if (c < 0x80 || c >= 0xc0) {  // the first byte of a character
            if (o->doc.len) {
                if (o->pend == 3) buf_append(&o->doc, "\n\n", 2);
                else if (o->pend == 2) buf_putc(&o->doc, '\n');
                else if (o->pend == 1 || (o->soft && starts_word((const unsigned char *)s + i, n - i)))
                    buf_putc(&o->doc, ' ');
            }
            o->pend = o->soft = 0;
        }
        buf_putc(&o->doc, (char)c);
    }
}

static void put_utf8(Buf *b, unsigned long cp) {
    if (cp < 0x80) buf_putc(b, (char)cp);
    else if (cp < 0x800) buf_putc(b, (char)(0xc0 | cp >> 6)), buf_putc(b, (char)(0x80 | (cp & 0x3f)));
    else if (cp < 0x10000)
        buf_putc(b, (char)(0xe0 | cp >> 12)), buf_putc(b, (char)(0x80 | ((cp >> 6) & 0x3f))),
            buf_putc(b, (char)(0x80 | (cp & 0x3f)));
    else
        buf_putc(b, (char)(0xf0 | cp >> 18)), buf_putc(b, (char)(0x80 | ((cp >> 12) & 0x3f))),
            buf_putc(b, (char)(0x80 | ((cp >> 6) & 0x3f))), buf_putc(b, (char)(0x80 | (cp & 0x3f)));
}

// An entity at s (s[0] == '&'): its bytes into tmp, returns its length (0: not one, keep the '&')
static size_t entity(const char *s, size_t n, Buf *tmp) {
    static const struct { const char *name; const char *text; } named[] = {
        {"amp;", "&"}, {"lt;", "<"}, {"gt;", ">"}, {"quot;", "\""}, {"apos;", "'"}, {"nbsp;", " "}};
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++) {
        size_t m = strlen(named[k].name);
        if (n > m && !memcmp(s + 1, named[k].name, m)) {
            buf_append(tmp, named[k].text, strlen(named[k].text));
            return m + 1;
        }
    }
    if (n > 3 && s[1] == '#') {
        int hex = s[2] == 'x' || s[2] == 'X';
        size_t i = hex ? 3 : 2;
        unsigned long cp = 0;
        size_t digits = 0;
        for (; i < n && i < 12 && s[i] != ';'; i++, digits++) {
            int d = isdigit((unsigned char)s[i]) ? s[i] - '0'
                    : hex && isxdigit((unsigned char)s[i]) ? (tolower((unsigned char)s[i]) - 'a' + 10) : -1;
            if (d < 0) return 0;
            cp = cp * (hex ? 16 : 10) + (unsigned long)d;
        }
        if (i >= n || s[i] != ';' || !digits || cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return 0;
        put_utf8(tmp, cp);
        return i + 1;
    }
    return 0;
}

// The value of attribute `name` in the tag text t (n bytes), copied into v; 0 if absent.
static int attr(const char *t, size_t n, const char *name, char *v, size_t vsize) {
    size_t m = strlen(name);
    for (size_t i = 1; i + m + 2 < n; i++) {
        if ((t[i - 1] == ' ' || t[i - 1] == '\t' || t[i - 1] == '\n') && !memcmp(t + i, name, m) && t[i + m] == '=' &&
            (t[i + m + 1] == '"' || t[i + m + 1] == '\'')) {
            char q = t[i + m + 1];
            size_t a = i + m + 2, b = a;
            while (b < n && t[b] != q) b++;
            size_t len = b - a < vsize - 1 ? b - a : vsize - 1;
            memcpy(v, t + a, len);
            v[len] = 0;
            return 1;
        }
    }
    return 0;
}

static int tag_is(const char *name, size_t nlen, const char *want) {
    return nlen == strlen(want) && !memcmp(name, want, nlen);
}

void corpus_osis_docs(const char *s, size_t len, CorpusEmit emit, void *ctx) {
    Osis o = {.emit = emit, .ctx = ctx};
    Buf tmp = {0};
    size_t i = 0;
    while (i < len) {
        if (s[i] == '&') {
            tmp.len = 0;
            size_t m = entity(s + i, len - i, &tmp);
            if (m) {
                osis_text(&o, tmp.data, tmp.len);
                i += m;
            } else {
                osis_text(&o, "&", 1);
                i++;
            }
            continue;
        }
        if (s[i] != '<') {
            size_t j = i;
            while (j < len && s[j] != '<' && s[j] != '&') j++;
            osis_text(&o, s + i, j - i);
            i = j;
            continue;
        }
        const char *gt = memchr(s + i, '>', len - i);
        if (!gt) break;  // a cut tag at the very end: dropped
        const char *t = s + i + 1;
        size_t n = (size_t)(gt - t);
        i = (size_t)(gt - s) + 1;
        int closing = n > 0 && t[0] == '/', selfclose = n > 0 && t[n - 1] == '/';
        const char *name = t + closing;
        size_t nlen = 0;
        while (name + nlen < t + n && (isalnum((unsigned char)name[nlen]) || name[nlen] == ':')) nlen++;
        char type[64] = "", val[96];
        attr(t, n, "type", type, sizeof type);
        if (tag_is(name, nlen, "note") && !closing && !selfclose) {  // skip to the matching </note>
            int depth = 1;
            while (depth > 0 && i < len) {
                const char *lt = memchr(s + i, '<', len - i);
                if (!lt) { i = len; break; }
                const char *end = memchr(lt, '>', (size_t)(s + len - lt));
                if (!end) { i = len; break; }
                if (!strncmp(lt, "</note", 6)) depth--;
                else if (!strncmp(lt, "<note", 5) && end[-1] != '/') depth++;
                i = (size_t)(end - s) + 1;
            }
            o.soft = 1;
            continue;
        }
        if (tag_is(name, nlen, "chapter")) {
            if (!closing && attr(t, n, "sID", val, sizeof val)) {
                char id[96];
                if (!attr(t, n, "osisID", id, sizeof id)) snprintf(id, sizeof id, "%s", val);
                if (o.has_id) osis_close(&o);
                snprintf(o.id, sizeof o.id, "%s", id);
                o.has_id = 1;
                if (o.doc.len) o.pend = 3;
            }
            continue;
        }
        if (tag_is(name, nlen, "div")) {
            if (!strcmp(type, "x-milestone")) continue;
            if (!strcmp(type, "book") && !closing && !attr(t, n, "eID", val, sizeof val)) {
                osis_close(&o);
                continue;
            }
            if (o.pend < 3) o.pend = 3;
            continue;
        }
        if (tag_is(name, nlen, "title") || tag_is(name, nlen, "p") || tag_is(name, nlen, "lg") ||
            tag_is(name, nlen, "table") || tag_is(name, nlen, "list")) {
            if (o.pend < 3) o.pend = 3;
        } else if (tag_is(name, nlen, "l") || tag_is(name, nlen, "lb") || tag_is(name, nlen, "row") ||
                   tag_is(name, nlen, "item")) {
            if (o.pend < 2) o.pend = 2;
        } else if (tag_is(name, nlen, "cell")) {
            if (o.pend < 1) o.pend = 1;
        }
        // every other tag (w, hi, reference, transChange, q, divineName, milestone, ...):
        // dropped, its content kept
    }
    osis_close(&o);
    buf_free(&o.doc);
    buf_free(&tmp);
}
