#include "jsonl.h"

#include "data/json.h"

const char *jsonl_text(const char *line, size_t len, Buf *out, size_t *col) {
    const char *p = line, *end = line + len, *err = NULL;
    Buf key = {0};
    size_t start = out->len;
    int found = 0;
    json_skip_ws(&p, end);
    if (p >= end || *p != '{') {
        err = "expected a JSON object {\"text\": ...}";
        goto done;
    }
    p++;
    json_skip_ws(&p, end);
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            json_skip_ws(&p, end);
            key.len = 0;
            if ((err = json_string(&p, end, &key))) goto done;
            json_skip_ws(&p, end);
            if (p >= end || *p != ':') {
                err = "expected ':'";
                goto done;
            }
            p++;
            json_skip_ws(&p, end);
            if (key.len == 4 && memcmp(key.data, "text", 4) == 0) {
                if (p >= end || *p != '"') {
                    err = "the \"text\" field is not a string";
                    goto done;
                }
                out->len = start;  // a repeated key: the last one wins, as in most parsers
                if ((err = json_string(&p, end, out))) goto done;
                found = 1;
            } else if ((err = json_skip_value(&p, end))) {
                goto done;
            }
            json_skip_ws(&p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            err = "expected ',' or '}'";
            goto done;
        }
    }
    json_skip_ws(&p, end);
    if (p < end) err = "unexpected characters after the JSON object";
    else if (!found) err = "no \"text\" field", p = line;
done:
    buf_free(&key);
    if (err) out->len = start;
    *col = (size_t)(p - line) + 1;
    return err;
}
