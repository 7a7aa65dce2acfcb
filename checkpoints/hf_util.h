// Pieces shared by the Hugging Face folders we write and read (hf_io.h): a list of tensors
// to write as model.safetensors, the Conv1D transpose, JSON text for numbers, and the
// conversion of F16 / BF16 tensors to F32.
#ifndef HYBRID_HF_UTIL_H
#define HYBRID_HF_UTIL_H

#include <stddef.h>

#include "checkpoints/safetensors.h"
#include "model/params.h"

// Tensors to write, each named and pointing at F32 data; copies made on the way (a
// transposed matrix) are owned by the list.
typedef struct {
    StOut *items;
    char (*names)[128];
    int count, max;
    float **owned;
    int n_owned;
} HfTensors;

void hf_tensors_init(HfTensors *e, int max);
void hf_tensors_free(HfTensors *e);
// Adds `numel` floats at data (not copied) as `name` with the given shape.
void hf_tensors_add(HfTensors *e, const char *name, const float *data, int ndim, const int64_t *shape);
// Adds tensor `index` of the table as `name`. rows > 0 keeps only the first `rows` rows
// (the real vocabulary of a padded embedding); conv1d transposes a 2-D (out, in) weight to
// HF Conv1D's (in, out).
void hf_tensors_add_param(HfTensors *e, const ParamTable *t, const float *params, int index, int rows, int conv1d,
                          const char *name);
// Adds `rows` rows starting at row `row0` of 2-D tensor `index` as a (rows, cols) tensor
// (one half of a stacked weight such as [gate | up]).
void hf_tensors_add_rows(HfTensors *e, const ParamTable *t, const float *params, int index, int row0, int rows,
                         const char *name);
// Writes dir/model.safetensors (creating dir).
void hf_tensors_write(const HfTensors *e, const char *dir);

// Writes `text` to dir/name atomically (creating dir).
void hf_write_text(const char *dir, const char *name, const char *text);

// dst (cols, rows) = transpose of src (rows, cols), newly allocated.
float *hf_transpose(const float *src, int rows, int cols);

// The shortest %g text that reads back as the same double (valid JSON for finite values).
void hf_real_text(double x, char *buf, size_t size);

// Copies `n` elements of an F32, F16 or BF16 tensor to float (exact: every F16 and BF16
// value is a float). Returns 0 for any other dtype.
int hf_to_f32(const char *dtype, const void *src, float *dst, size_t n);

#endif
