// The shared harness of the GPU parity tests (docs/cuda.md, "Tests: `make test-gpu`
// (tests/gpu/)").
// Each tests/gpu/test_<name>.c is one program with its own main(): the parity checks of
// one op family (CUDA kernel against the float CPU reference, model/ops/<family>/), or the
// whole-model checks (test_model.c). `make test-gpu` builds every test_*.c, links it with
// this harness, runs it and prints one line per program; a new family is one new file.
//
// Method (every program): inputs are random and rounded to bf16 first, so both backends
// see the same numbers and the error is the op's own; outputs are poisoned with NaN before
// every run, and NaN never passes; parameter-gradient outputs run twice from zero, so
// "+=" (not "=") is checked. Error = ||got - ref|| / ||ref|| (RMS relative), against the
// tolerances below; none may be loosened to make a kernel pass.
//
// A program includes tests/testing.h, then this header, and calls gpu_test_init first:
//     int main(void) {
//         gpu_test_init("test_foo");
//         ... tests ...
//         gpu_test_summary();
//         TEST_MAIN_END();
//     }
// testing.h's check counters are static to each program, so the functions that count
// checks (expect, cmp_bf16, cmp_f32) are inline here and count in the program that calls
// them; harness.c (which defines GPU_HARNESS_NO_CHECKS) holds everything else.
#ifndef HYBRID_GPU_HARNESS_H
#define HYBRID_GPU_HARNESS_H

#include <stddef.h>
#include <stdio.h>

#include "base/rng.h"
#include "model/backend.h"

#define TOL_OUT 5e-3    // bf16 outputs
#define TOL_GRAD 8e-3   // bf16 gradients (of activations and inputs)
#define TOL_F32 1e-4    // fp32 paths: statistics, losses, parameter gradients, optimizer state, master weights
#define TOL_MODEL 2e-2  // whole model (12 layers of bf16 activations; docs/cuda.md)

extern const Backend *G;  // the CUDA backend, set by gpu_test_init
extern Rng g_rng;         // the inputs' random numbers, seeded by gpu_test_init

// Exits 1 with a message if no CUDA device is visible; else sets G and seeds g_rng (the
// same seed in every program) and starts the clock. `name` is the program's name.
void gpu_test_init(const char *name);
double gpu_test_elapsed(void);  // seconds since gpu_test_init
// "total N s; backend peak allocation N GiB" (the program's last line before TEST_MAIN_END)
void gpu_test_summary(void);

// ---- host tensors (fp32 holding bf16-representable values) ----
float bf16_round(float f);  // round to nearest even (base/bf16.h); a NaN stays a NaN
// n values uniform in [-scale, scale) + shift, rounded to bf16
float *host_rand(size_t n, float scale, float shift);
// the same draws (the same stream) not rounded: fp32 values (parameter gradients)
float *host_rand_f32(size_t n, float scale, float shift);
float *host_dup(const float *x, size_t n);
// n token ids below V; hot: half of them below 64 (many repeats, for the scatter-adds)
int *rand_tokens(size_t n, int V, int hot);

// ---- device buffers (G's memory) ----
void *dev_bf16(const float *h, size_t n);  // n bf16 elements, uploaded from h if non-NULL
float *dev_f32(const float *h, size_t n);  // n fp32 elements, copied from h if non-NULL
int *dev_tokens(const int *h, size_t n);
void *dev_bytes(const void *h, size_t bytes);  // raw bytes, copied from h if non-NULL
void *get_bytes(const void *p, size_t bytes);  // raw bytes, downloaded to a new host array
void poison_bytes(void *p, size_t bytes);      // all-ones bytes
void poison_bf16(void *p, size_t n);   // all-ones bits: NaN in bf16
void poison_f32(float *p, size_t n);   // and in fp32
float *get_bf16(const void *p, size_t n);  // downloaded to a new host array
float *get_f32(const float *p, size_t n);
void *dev_clone_bf16(const void *p, size_t n);               // a new device copy of n bf16 elements
int same_bf16(const void *a, const void *b, size_t n);       // two device tensors hold the same bits
float *dev_clone_f32(const float *p, size_t n);             // the same for fp32 (parameter gradients)
int same_f32(const float *a, const float *b, size_t n);

// ---- comparison ----
// ||got - ref|| / ||ref|| (||got - ref|| if ref is 0); +inf if got holds a non-finite value
double rel_rms(const float *got, const float *ref, size_t n);
double err_bf16(const void *dev, const float *ref, size_t n);  // rel_rms of a device tensor
double err_f32(const float *dev, const float *ref, size_t n);
// an accumulator (+=): the device tensor started as base (host) and the op added its result;
// rel_rms of the part added, (got - base) against (ref - base)
double err_bf16_added(const void *dev, const float *base, const float *ref, size_t n);
double err_f32_added(const float *dev, const float *base, const float *ref, size_t n);  // (fp32 gradients)
// prints "  what  err  (tol)  ok|FAIL"; returns err <= tol (false for NaN)
int report(const char *what, double err, double tol);

#ifndef GPU_HARNESS_NO_CHECKS
#include "tests/testing.h"

// one check: err within tol
static inline void expect(const char *what, double err, double tol) {
    CHECK(report(what, err, tol), "%s: error %.3e above %.0e", what, err, tol);
}
static inline void cmp_bf16(const char *what, const void *dev, const float *ref, size_t n, double tol) {
    expect(what, err_bf16(dev, ref, n), tol);
}
static inline void cmp_f32(const char *what, const float *dev, const float *ref, size_t n, double tol) {
    expect(what, err_f32(dev, ref, n), tol);
}
#endif

#endif
