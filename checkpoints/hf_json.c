// config.json as a flat object (hf_json.h), on the JSON pieces of data/json.h.
#include "checkpoints/hf_json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "data/json.h"

__attribute__((noreturn)) static void syntax(const HfJson *j, const char *at, const char *why) {
    die("%s: not valid JSON: %s (at byte %zu)", j->path, why, (size_t)(at - j->text));
}

// Records one top-level key and the span of its value.
static const char *member(const char *key, size_t key_len, const char **p, const char *end, void *ctx) {
    HfJson *j = ctx;
    if (strlen(key) != key_len) return "a key holds \\u0000";
    for (int i = 0; i < j->count; i++)
        if (!strcmp(j->keys[i], key)) die("%s: key \"%s\" appears twice", j->path, key);
    const char *v = *p, *err = json_skip_value(p, end);
    if (err) return err;
    j->keys = xrealloc(j->keys, sizeof(char *) * (size_t)(j->count + 1));
    j->value = xrealloc(j->value, sizeof(char *) * (size_t)(j->count + 1));
    j->value_end = xrealloc(j->value_end, sizeof(char *) * (size_t)(j->count + 1));
    j->keys[j->count] = xstrdup(key);
    j->value[j->count] = v;
    j->value_end[j->count++] = *p;
    return NULL;
}

void hf_json_load(HfJson *j, const char *path) {
    memset(j, 0, sizeof *j);
    j->path = xstrdup(path);
    size_t len;
    j->text = read_file(path, &len);
    if (!j->text) die("%s: cannot read (%s)", path, strerror(errno));
    const char *p = j->text, *end = j->text + len, *err;
    json_skip_ws(&p, end);
    if ((err = json_object(&p, end, member, j))) syntax(j, p, err);
    json_skip_ws(&p, end);
    if (p != end) syntax(j, p, "text after the closing '}'");
}

void hf_json_free(HfJson *j) {
    for (int i = 0; i < j->count; i++) free(j->keys[i]);
    free(j->keys);
    free(j->value);
    free(j->value_end);
    free(j->text);
    free(j->path);
    memset(j, 0, sizeof *j);
}

// The value of key, or NULL when absent or null; *end gets its end.
static const char *find(const HfJson *j, const char *key, const char **end) {
    for (int i = 0; i < j->count; i++)
        if (!strcmp(j->keys[i], key)) {
            *end = j->value_end[i];
            if (*end - j->value[i] == 4 && !memcmp(j->value[i], "null", 4)) return NULL;
            return j->value[i];
        }
    return NULL;
}

__attribute__((noreturn)) static void wrong(const HfJson *j, const char *key, const char *what) {
    char text[80];
    hf_json_text(j, key, text, sizeof text);
    die("%s: \"%s\" is %s, not %s", j->path, key, text, what);
}

int hf_json_int(const HfJson *j, const char *key, long long *v) {
    const char *end, *p = find(j, key, &end);
    if (!p) return 0;
    if (json_int(&p, end, v) || p != end) wrong(j, key, "an integer");
    return 1;
}

int hf_json_real(const HfJson *j, const char *key, double *v) {
    const char *end, *p = find(j, key, &end);
    if (!p) return 0;
    if (json_number(&p, end, v) || p != end || !isfinite(*v)) wrong(j, key, "a finite number");
    return 1;
}

int hf_json_bool(const HfJson *j, const char *key, int *v) {
    const char *end, *p = find(j, key, &end);
    if (!p) return 0;
    if (end - p == 4 && !memcmp(p, "true", 4)) *v = 1;
    else if (end - p == 5 && !memcmp(p, "false", 5)) *v = 0;
    else wrong(j, key, "true or false");
    return 1;
}

int hf_json_string(const HfJson *j, const char *key, char *buf, size_t size) {
    const char *end, *p = find(j, key, &end);
    if (!p) return 0;
    Buf s = {0};
    if (json_string(&p, end, &s) || p != end) wrong(j, key, "a string");
    snprintf(buf, size, "%.*s", (int)s.len, s.data ? s.data : "");
    buf_free(&s);
    return 1;
}

int hf_json_array_has(const HfJson *j, const char *key, const char *want) {
    const char *end, *p = find(j, key, &end);
    if (!p) return 0;
    if (*p != '[') wrong(j, key, "a list of strings");
    p++;
    int found = 0;
    for (;;) {
        json_skip_ws(&p, end);
        if (p < end && *p == ']') break;
        Buf s = {0};
        if (json_string(&p, end, &s)) wrong(j, key, "a list of strings");
        found |= s.len == strlen(want) && !memcmp(s.data, want, s.len);
        buf_free(&s);
        json_skip_ws(&p, end);
        if (p < end && *p == ',') p++;
    }
    return found;
}

void hf_json_text(const HfJson *j, const char *key, char *buf, size_t size) {
    snprintf(buf, size, "absent");
    for (int i = 0; i < j->count; i++)
        if (!strcmp(j->keys[i], key)) {
            const size_t n = (size_t)(j->value_end[i] - j->value[i]);
            snprintf(buf, size, "%.*s%s", (int)(n < size - 4 ? n : size - 4), j->value[i], n < size - 4 ? "" : "...");
        }
}
