// The CUDA core sub-table (model/ops/core/core.h), filled from CORE_OPS, plus the
// optional fused ops this backend offers. HYBRID_CUDA_NO_FUSE=1 leaves them out, so the
// graph runs the separate ops (a check of the fused ones, and a fallback).
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
    filled = 1;
    return &t;
}
