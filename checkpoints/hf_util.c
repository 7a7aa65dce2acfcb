// Shared pieces of the Hugging Face folders (hf_util.h).
#include "checkpoints/hf_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/util.h"

void hf_tensors_init(HfTensors *e, int max) {
    memset(e, 0, sizeof *e);
    e->max = max;
    e->items = xcalloc((size_t)max, sizeof(StOut));
    e->names = xcalloc((size_t)max, sizeof e->names[0]);
    e->owned = xcalloc((size_t)max, sizeof(float *));
}

void hf_tensors_free(HfTensors *e) {
    for (int i = 0; i < e->n_owned; i++) free(e->owned[i]);
    free(e->owned);
    free(e->names);
    free(e->items);
    memset(e, 0, sizeof *e);
}

void hf_tensors_add(HfTensors *e, const char *name, const float *data, int ndim, const int64_t *shape) {
    if (e->count == e->max) die("hf_tensors_add: more than %d tensors", e->max);
    StOut *o = &e->items[e->count];
    snprintf(e->names[e->count], sizeof e->names[0], "%s", name);
    o->name = e->names[e->count++];
    o->dtype = "F32";
    o->ndim = ndim;
    for (int d = 0; d < ndim; d++) o->shape[d] = shape[d];
    o->data = data;
}

void hf_tensors_add_param(HfTensors *e, const ParamTable *t, const float *params, int index, int rows, int conv1d,
                          const char *name) {
    const ParamInfo *p = &t->items[index];
    int64_t shape[PARAM_MAX_DIMS];
    for (int d = 0; d < p->ndim; d++) shape[d] = p->shape[d];
    if (rows) shape[0] = rows;
    const float *data = params + p->offset;
    if (conv1d) {
        float *tr = hf_transpose(data, p->shape[0], p->shape[1]);
        e->owned[e->n_owned++] = tr;
        data = tr;
        shape[0] = p->shape[1];
        shape[1] = p->shape[0];
    }
    hf_tensors_add(e, name, data, p->ndim, shape);
}

void hf_tensors_add_rows(HfTensors *e, const ParamTable *t, const float *params, int index, int row0, int rows,
                         const char *name) {
    const ParamInfo *p = &t->items[index];
    if (p->ndim != 2 || row0 + rows > p->shape[0]) die("hf_tensors_add_rows: %s has no rows %d..%d", p->name, row0, row0 + rows);
    const int64_t shape[2] = {rows, p->shape[1]};
    hf_tensors_add(e, name, params + p->offset + (size_t)row0 * p->shape[1], 2, shape);
}

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = xmalloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    return path;
}

void hf_tensors_write(const HfTensors *e, const char *dir) {
    mkdir_p(dir);
    char *path = path_in(dir, "model.safetensors");
    st_write(path, e->items, e->count, NULL, 0);
    free(path);
}

void hf_write_text(const char *dir, const char *name, const char *text) {
    mkdir_p(dir);
    char *path = path_in(dir, name);
    write_file_atomic(path, text, strlen(text));
    free(path);
}

float *hf_transpose(const float *src, int rows, int cols) {
    float *dst = xmalloc(sizeof(float) * (size_t)rows * (size_t)cols);
    enum { TILE = 32 };  // cache-sized tiles
#pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < rows; r0 += TILE)
        for (int c0 = 0; c0 < cols; c0 += TILE)
            for (int r = r0; r < r0 + TILE && r < rows; r++)
                for (int c = c0; c < c0 + TILE && c < cols; c++)
                    dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
    return dst;
}

void hf_real_text(double x, char *buf, size_t size) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

// IEEE binary16 to float: every half is a float, subnormals and NaN payloads included.
static float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t bits;
    if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
        float f = ldexpf((float)m, -24);
        memcpy(&bits, &f, 4);
        bits |= sign;
    } else if (e == 31) {
        bits = sign | 0x7f800000u | m << 13;
    } else {
        bits = sign | (e - 15 + 127) << 23 | m << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int hf_to_f32(const char *dtype, const void *src, float *dst, size_t n) {
    const unsigned char *s = src;
    if (!strcmp(dtype, "F32")) {
        memcpy(dst, src, n * sizeof(float));
    } else if (!strcmp(dtype, "BF16")) {
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
    } else if (!strcmp(dtype, "F16")) {
        for (size_t i = 0; i < n; i++) dst[i] = half_to_float((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
    } else {
        return 0;
    }
    return 1;
}
