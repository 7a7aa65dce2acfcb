// A Hugging Face config.json read as one flat object: each top-level key with the text of
// its value, and typed getters that name the file and the key in every error.
#ifndef HYBRID_HF_JSON_H
#define HYBRID_HF_JSON_H

#include <stddef.h>

typedef struct {
    char *path;
    char *text;
    int count;
    char **keys;
    const char **value, **value_end;  // the raw JSON text of each key's value
} HfJson;

// Reads and parses `path` (a JSON object, each key once); dies naming the file and the
// byte where the syntax breaks.
void hf_json_load(HfJson *j, const char *path);
void hf_json_free(HfJson *j);

// Each getter returns 0 when the key is absent or null, 1 with the value; a value of another
// type dies with "<path>: "key" is <value>, not <what>".
int hf_json_int(const HfJson *j, const char *key, long long *v);
int hf_json_real(const HfJson *j, const char *key, double *v);  // finite numbers only
int hf_json_bool(const HfJson *j, const char *key, int *v);
int hf_json_string(const HfJson *j, const char *key, char *buf, size_t size);
// 1 if the key is an array of strings holding `s`; dies if it is present and not such an array.
int hf_json_array_has(const HfJson *j, const char *key, const char *s);
// The value's JSON text (at most size - 1 bytes), "absent" when there is none.
void hf_json_text(const HfJson *j, const char *key, char *buf, size_t size);

#endif
