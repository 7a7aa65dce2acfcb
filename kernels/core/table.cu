// The CUDA core sub-table (model/ops/core/core.h), filled from CORE_OPS, plus the
// optional fused ops this backend offers. HYBRID_CUDA_NO_FUSE=1 leaves them out, so the
// graph runs the separate ops (a check of the fused ones, and a fallback); and the optional
// matmul_backward_dw_wide (the classifier's fp32 dW accumulation), which
// HYBRID_CUDA_DW_BF16=1 leaves out.
#include "kernels/common.cuh"

extern "C" const CoreOps *cuda_core_ops(void) {
    static CoreOps t;
    static int filled;
    if (filled) return &t;
#define ENTRY(member) t.member = cuda_##member;
    CORE_OPS(ENTRY)
#undef ENTRY
    if (!env_flag("HYBRID_CUDA_NO_FUSE")) {
        t.matmul_gelu_forward = cuda_matmul_gelu_forward;
        t.matmul_backward_gelu = cuda_matmul_backward_gelu;
        t.add_layernorm_forward = cuda_add_layernorm_forward;
        t.layernorm_backward_add = cuda_layernorm_backward_add;
        t.matmul_backward_acc = cuda_matmul_backward_acc;
    }
    // not a fusion but a precision fix (the classifier's lm_head gradient rounded to bf16 once,
    // not once per chunk): kept under HYBRID_CUDA_NO_FUSE; HYBRID_CUDA_DW_BF16=1 leaves it out
    // (every chunk's dW added into the bf16 gradient, as before: to measure what it costs)
    if (!env_flag("HYBRID_CUDA_DW_BF16")) t.matmul_backward_dw_wide = cuda_matmul_backward_dw_wide;
    filled = 1;
    return &t;
}
