// A small, strict safetensors reader and writer (docs/architecture.md, "File formats").
//
// File layout: 8-byte little-endian header length N, then N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<value>", ...}}
// padded with spaces so the data starts at a multiple of 8, then the data section.
// Offsets are relative to the data section; the tensors cover it exactly, without
// holes or overlaps. Our writer adds the metadata "format": "pt" (what transformers
// expects) and "hybrid.crc32" (CRC-32 of the data section, base/crc32.h), which the reader verifies
// when present. Every error names the file and, where there is one, the tensor.
#ifndef HYBRID_SAFETENSORS_H
#define HYBRID_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_CRC_KEY "hybrid.crc32"

typedef struct {
    char *name;
    char dtype[8];          // "F32", "BF16", ... as in the header
    int elem_size;          // bytes per element
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    size_t begin, end;      // byte offsets into the data section
} StTensor;

typedef struct {
    char *path;
    void *map;              // the whole file, mapped read-only
    size_t map_len;
    const unsigned char *data;  // the data section
    size_t data_len;
    StTensor *tensors;      // in header order
    int count;
    char **meta;            // key, value, key, value, ...
    int n_meta;
} StFile;

// Opens and validates a file: header syntax, dtypes, shapes vs offsets, exact coverage
// of the data section, file size, and the checksum if the header has one. Dies on error.
void st_open(StFile *f, const char *path);
void st_close(StFile *f);
const StTensor *st_find(const StFile *f, const char *name);  // NULL if absent
const char *st_meta(const StFile *f, const char *key);       // NULL if absent
static inline const void *st_data(const StFile *f, const StTensor *t) { return f->data + t->begin; }

// One tensor to write: `data` holds numel * size(dtype) bytes.
typedef struct {
    const char *name;
    const char *dtype;      // "F32" or "BF16" (any dtype the reader knows is accepted)
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} StOut;

// Writes tensors in the given order plus metadata (n_meta key/value pairs, may be 0)
// to a temporary file in the same folder, fsyncs it and renames it over `path`.
// The data is streamed from the callers' buffers (no second copy of the weights).
void st_write(const char *path, const StOut *tensors, int count, const char *const *meta, int n_meta);

// Bytes per element of a safetensors dtype name ("F32" -> 4), 0 if unknown.
int st_dtype_size(const char *dtype);

// Formats a shape as "(768, 2304)" into buf.
void st_shape_str(const int64_t *shape, int ndim, char *buf, size_t size);

#endif
