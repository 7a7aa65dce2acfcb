#include "brown.h"

#include <string.h>

int brown_is_sample_name(const char *name) {
    return strlen(name) == 4 && name[0] == 'c' && name[1] >= 'a' && name[1] <= 'r' && name[2] >= '0' &&
           name[2] <= '9' && name[3] >= '0' && name[3] <= '9';
}

typedef struct {
    const char *s;
    size_t n;
    int headline;  // tag ends in -hl
} Word;

static int is(const Word *w, const char *text) { return w->n == strlen(text) && memcmp(w->s, text, w->n) == 0; }

// A one-character word that is one of `set`.
static int one_of(const Word *w, const char *set) { return w->n == 1 && w->s[0] && strchr(set, w->s[0]); }

static int attaches_left(const Word *w) {  // no space before
    return one_of(w, ",.;:!?)]}") || is(w, "''");
}

static int attaches_right(const Word *w) {  // no space after
    return one_of(w, "([{") || is(w, "``");
}

// Splits one line into words (tags removed) in *words (grown as needed). Returns the count.
static size_t split_line(const char *s, const char *end, Word **words, size_t *cap) {
    size_t n = 0;
    while (s < end) {
        while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
        const char *start = s;
        while (s < end && *s != ' ' && *s != '\t' && *s != '\r') s++;
        if (s == start) break;
        const char *slash = NULL;
        for (const char *p = start; p < s; p++)
            if (*p == '/') slash = p;
        Word w = {start, (size_t)(s - start), 0};
        if (slash && slash > start) {
            w.n = (size_t)(slash - start);
            w.headline = s - slash >= 4 && memcmp(s - 3, "-hl", 3) == 0;
        }
        if (n == *cap) *words = xrealloc(*words, (*cap = *cap ? 2 * *cap : 256) * sizeof(Word));
        (*words)[n++] = w;
    }
    return n;
}

typedef struct {
    Buf *out;
    int para_open;       // something was written in the current paragraph
    int glue_next;       // the last token attaches to the right
    int single_open;     // a ' quote is open
} Writer;

static void end_paragraph(Writer *wr) {
    wr->para_open = 0;
    wr->glue_next = 0;
    wr->single_open = 0;
}

static void emit(Writer *wr, const Word *w) {
    const char *text = w->s;
    size_t n = w->n;
    int left = attaches_left(w), right = attaches_right(w);
    if (is(w, "``") || is(w, "''")) text = "\"", n = 1;
    if (is(w, "'")) {
        right = !wr->single_open;
        left = wr->single_open;
        wr->single_open = !wr->single_open;
    }
    if (!wr->para_open) {
        if (wr->out->len > 0) buf_append(wr->out, "\n\n", 2);
    } else if (!wr->glue_next && !left) {
        buf_putc(wr->out, ' ');
    }
    buf_append(wr->out, text, n);
    wr->para_open = 1;
    wr->glue_next = right;
}

static void convert_line(Writer *wr, Word *w, size_t n) {
    // the corpus doubles a sentence-final ; ? ! ("fuller ; ;")
    if (n >= 2 && one_of(&w[n - 1], ";?!") && w[n - 2].n == 1 && w[n - 2].s[0] == w[n - 1].s[0])
        n--;
    // ''  ,  ->  ,''   (punctuation inside the closing quote)
    for (size_t k = 0; k + 1 < n; k++) {
        if (is(&w[k], "''") && one_of(&w[k + 1], ",.?!")) {
            Word tmp = w[k];
            w[k] = w[k + 1];
            w[k + 1] = tmp;
            k++;
        }
    }
    int headline = n > 0;
    for (size_t k = 0; k < n; k++) headline &= w[k].headline;
    if (headline) end_paragraph(wr);
    for (size_t k = 0; k < n; k++) {
        // "Jr. ." ends a sentence with an abbreviation: print one period
        if (k > 0 && one_of(&w[k], ".") && w[k - 1].n > 1 && w[k - 1].s[w[k - 1].n - 1] == '.') continue;
        emit(wr, &w[k]);
    }
    if (headline) end_paragraph(wr);
}

void brown_to_text(const char *tagged, size_t len, Buf *out) {
    Word *w = NULL;
    size_t cap = 0;
    Writer wr = {out, 0, 0, 0};
    const char *s = tagged, *end = tagged + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) nl = end;
        size_t n = split_line(s, nl, &w, &cap);
        if (n == 0) end_paragraph(&wr);
        else convert_line(&wr, w, n);
        s = nl + 1;
    }
    free(w);
}
