// The backend table (docs/architecture.md, "One graph, two backends"). The model graph
// (model/model.c and the modules it strings together) is written once and calls every op
// through this table; the CPU reference (model/ops/) and CUDA (kernels/) each fill one.
//
// A backend is memory management plus one sub-table per op family (model/ops/<family>/
// <family>.h holds each family's contract; docs/architecture.md, "Op families"). A NULL
// family means the backend lacks it: model_create checks once, when the layout is built,
// that every family the config needs is there, and names the layer that needs a missing one.
//
// Contracts shared by all ops:
//  - `X_forward` writes its outputs and whatever its backward needs (named in the
//    signature); it allocates nothing.
//  - `X_backward` ACCUMULATES (+=) into parameter gradients and WRITES (=) input
//    gradients, unless the comment says otherwise. The named exceptions are optional fused
//    ops that ACCUMULATE an input gradient too, to save the separate add_inplace:
//    layernorm_backward_add, rmsnorm_backward_add (dres += d(norm input)) and
//    matmul_backward_acc (dinp += dout @ w); their plain forms still write.
//  - Pointers are backend memory. The graph never indexes them; it offsets them only
//    through backend_offset() so that a backend may store another element type
//    (the CUDA backend keeps bf16 activations). On the CPU every element is a `real`.
//  - Parameter gradients (m->grads, and every op's gradient of a parameter: dw, db, dA_log,
//    ...) are `grad_size` bytes each: a `real` on the CPU, the CUDA backend's own choice
//    (kernels/backend_cuda.cu). The graph reaches them through model_grad() /
//    backend_grad_offset(); sum_squares and the optimizers read them.
//  - Per-row statistics (norm mean/rstd, attention lse, per-row losses, recurrent states)
//    are `stat_size` bytes each: a `real` on the CPU, fp32 on CUDA (bf16 would lose the
//    precision the backward needs). The graph carves them with carve_stat().
//  - Shapes: N = rows (B*T tokens), C = channels. Weights use PyTorch's (out, in) layout.
//  - Scalars are `real` (the build's precision: float, or double in the double-precision
//    CPU build) or an explicit type; the CUDA backend exists only in the float build.
#ifndef HYBRID_BACKEND_H
#define HYBRID_BACKEND_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/attnres/attnres.h"
#include "model/ops/core/core.h"
#include "model/ops/delta_rule/delta_rule.h"
#include "model/ops/mla/mla.h"
#include "model/ops/moe/moe.h"
#include "model/ops/norm_glu/norm_glu.h"
#include "model/ops/optim/optim.h"

typedef struct Backend {
    const char *name;
    size_t elem_size;  // bytes per activation / parameter element
    size_t stat_size;  // bytes per statistics element (mean, rstd, lse, losses, states)
    size_t grad_size;  // bytes per parameter-gradient element (a multiple of elem_size)
    int keeps_master;  // 1: parameters are a rounded copy; the optimizer keeps fp32 master weights

    // ---- memory ----
    void *(*alloc)(size_t bytes);                      // zero-filled
    void (*free)(void *p);
    void (*zero)(real *p, size_t n);                   // n elements (elem_size each)
    void (*upload)(real *dst, const float *src, size_t n);    // host fp32 -> backend
    void (*download)(float *dst, const real *src, size_t n);  // backend -> host fp32
    void (*upload_tokens)(int *dst, const int *src, size_t n);
    void (*copy_to_host)(void *dst, const void *src, size_t bytes);    // raw bytes, backend -> host
    void (*copy_from_host)(void *dst, const void *src, size_t bytes);  // raw bytes, host -> backend
    void (*synchronize)(void);

    // ---- op families (NULL: this backend lacks the family) ----
    const CoreOps *core;            // GPT-2 core: embedding, LayerNorm, matmul, attention, GELU, loss
    const NormGluOps *norm_glu;     // RMSNorm, SwiGLU / SiTU
    const DeltaRuleOps *delta_rule; // KDA, GDN, DeltaNet, linear attention and their layer ops
    const MlaOps *mla;              // MLA: strided attention, RoPE, latent pieces, output gate
    const MoeOps *moe;              // MoE: router, dispatch, grouped experts, balancing
    const AttnResOps *attnres;      // Block AttnRes
    const OptimOps *optim;          // AdamW, Muon
} Backend;

// The families as bits, for what a layer needs (model_create checks them once).
typedef enum {
    FAMILY_CORE = 1 << 0,
    FAMILY_NORM_GLU = 1 << 1,
    FAMILY_DELTA_RULE = 1 << 2,
    FAMILY_MLA = 1 << 3,
    FAMILY_MOE = 1 << 4,
    FAMILY_ATTNRES = 1 << 5,
    FAMILY_OPTIM = 1 << 6,
} OpFamily;
// Dies unless the backend has every family in `needs`, naming the backend, the first
// missing family and `who` needs it (e.g. "layer 3 (M, MLA)").
void backend_require(const Backend *be, unsigned needs, const char *who);

// ptr advanced by n elements of the backend's element type
static inline real *backend_offset(const Backend *be, const real *ptr, size_t n) {
    return (real *)((char *)ptr + n * be->elem_size);
}

// ptr advanced by n statistics elements (stat_size each: the per-row losses, norm statistics)
static inline real *backend_stat_offset(const Backend *be, const real *ptr, size_t n) {
    return (real *)((char *)ptr + n * be->stat_size);
}

// ptr advanced by n parameter-gradient elements (grad_size each)
static inline real *backend_grad_offset(const Backend *be, const real *ptr, size_t n) {
    return (real *)((char *)ptr + n * be->grad_size);
}

// zeroes n parameter-gradient elements at p (as backend_stat_zero below)
static inline void backend_grad_zero(const Backend *be, real *p, size_t n) {
    be->zero(p, n * be->grad_size / be->elem_size);
}

// n parameter-gradient elements at src (backend memory) -> host fp32: the backend's download
// when gradients have the element type, else (fp32 gradients of a bf16 backend) raw bytes
void backend_grad_download(const Backend *be, float *dst, const real *src, size_t n);

// zeroes n statistics elements at p (be->zero counts elem_size elements; stat_size is a multiple
// of it in every backend, and all-zero bits are 0 in every type): the fp32 states and
// accumulators of the CUDA backend, whose elements are bf16
static inline void backend_stat_zero(const Backend *be, real *p, size_t n) {
    be->zero(p, n * be->stat_size / be->elem_size);
}

// The CPU reference backend (model/ops/cpu_backend.c): every family.
const Backend *backend_cpu(void);

#if (defined(HAVE_CUDA) || defined(HYBRID_CUDA_EMU)) && !defined(REAL_DOUBLE)
// The CUDA backend (kernels/): bf16 parameters and activations, fp32 statistics,
// optimizer state and master weights. Dies if no CUDA device is usable. Only the float
// build has it (the double-precision build is the CPU reference for gradient checks).
// Under the CPU emulator (tests/cuda_emu/) its memory part, with host memory.
const Backend *backend_cuda(void);
#endif

#endif
