#include "checkpoints/trainer_state.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef enum { F_INT, F_U64, F_REAL } FieldKind;

typedef struct {
    const char *key;
    FieldKind kind;
    size_t offset;
    int min;  // F_INT only
} Field;

static const Field FIELDS[] = {
    {"step", F_INT, offsetof(TrainerState, step), 0},
    {"world", F_INT, offsetof(TrainerState, world), 1},
    {"data_epoch", F_U64, offsetof(TrainerState, data.epoch), 0},
    {"data_shard", F_U64, offsetof(TrainerState, data.shard), 0},
    {"data_sample", F_U64, offsetof(TrainerState, data.sample), 0},
    {"rng", F_U64, offsetof(TrainerState, rng), 0},
    {"tokens_seen", F_REAL, offsetof(TrainerState, tokens_seen), 0},
};
#define NFIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

void trainer_state_write(const char *path, const TrainerState *ts) {
    char text[2048];
    size_t n = 0;
    for (int i = 0; i < NFIELDS; i++) {
        const char *field = (const char *)ts + FIELDS[i].offset;
        n += (size_t)snprintf(text + n, sizeof text - n, "%s = ", FIELDS[i].key);
        switch (FIELDS[i].kind) {
        case F_INT: n += (size_t)snprintf(text + n, sizeof text - n, "%d\n", *(const int *)field); break;
        case F_U64: n += (size_t)snprintf(text + n, sizeof text - n, "%" PRIu64 "\n", *(const uint64_t *)field); break;
        case F_REAL: n += (size_t)snprintf(text + n, sizeof text - n, "%.17g\n", *(const double *)field); break;
        }
    }
    write_file_atomic(path, text, n);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static void parse_value(const Field *f, const char *value, char *field, const char *where) {
    char *end;
    errno = 0;
    if (f->kind == F_REAL) {
        double v = strtod(value, &end);
        if (!*value || *end || errno || !isfinite(v) || v < 0)
            die("%s: %s = '%s' is not a finite number >= 0", where, f->key, value);
        *(double *)field = v;
        return;
    }
    if (!isdigit((unsigned char)value[0])) die("%s: %s = '%s' is not a non-negative integer", where, f->key, value);
    unsigned long long v = strtoull(value, &end, 10);
    if (*end || errno) die("%s: %s = '%s' is not a non-negative integer", where, f->key, value);
    if (f->kind == F_U64) {
        *(uint64_t *)field = (uint64_t)v;
    } else {
        if (v > INT_MAX || (int)v < f->min) die("%s: %s = '%s' is out of range", where, f->key, value);
        *(int *)field = (int)v;
    }
}

void trainer_state_read(const char *path, TrainerState *ts) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) die("%s: cannot read (%s)", path, strerror(errno));
    if (strlen(text) != len) die("%s: contains a NUL byte", path);
    int seen[NFIELDS] = {0};
    int lineno = 0;
    for (char *line = text; line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        char *s = trim(line);
        if (*s && *s != '#') {
            char where[600];
            snprintf(where, sizeof where, "%s:%d", path, lineno);
            char *eq = strchr(s, '=');
            if (!eq) die("%s: expected 'key = value', got '%s'", where, s);
            *eq = 0;
            char *key = trim(s), *value = trim(eq + 1);
            int i = 0;
            while (i < NFIELDS && strcmp(FIELDS[i].key, key)) i++;
            if (i == NFIELDS) die("%s: unknown key '%s'", where, key);
            if (seen[i]++) die("%s: key '%s' given twice", where, key);
            parse_value(&FIELDS[i], value, (char *)ts + FIELDS[i].offset, where);
        }
        line = next;
    }
    free(text);
    for (int i = 0; i < NFIELDS; i++)
        if (!seen[i]) die("%s: missing key '%s'", path, FIELDS[i].key);
}
