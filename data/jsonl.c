#include "jsonl.h"

#include "data/json.h"

typedef struct {
    Buf *out;
    size_t start;
    int found;
} TextField;

static const char *text_member(const char *key, size_t key_len, const char **p, const char *end, void *ctx) {
    TextField *t = ctx;
    if (key_len != 4 || memcmp(key, "text", 4)) return json_skip_value(p, end);
    if (*p >= end || **p != '"') return "the \"text\" field is not a string";
    t->out->len = t->start;  // a repeated key: the last one wins, as in most parsers
    t->found = 1;
    return json_string(p, end, t->out);
}

const char *jsonl_text(const char *line, size_t len, Buf *out, size_t *col) {
    const char *p = line, *end = line + len, *err = NULL;
    TextField t = {out, out->len, 0};
    json_skip_ws(&p, end);
    if (p >= end || *p != '{') err = "expected a JSON object {\"text\": ...}";
    else err = json_object(&p, end, text_member, &t);
    if (!err) {
        json_skip_ws(&p, end);
        if (p < end) err = "unexpected characters after the JSON object";
        else if (!t.found) err = "no \"text\" field", p = line;
    }
    if (err) out->len = t.start;
    *col = (size_t)(p - line) + 1;
    return err;
}
