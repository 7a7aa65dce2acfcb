// The CUDA norms-and-GLU sub-table (model/ops/norm_glu/norm_glu.h), filled from NORM_GLU_OPS,
// plus the optional fused ops this backend offers (left out under HYBRID_CUDA_NO_FUSE=1, as
// kernels/core/table.cu's).
#include "kernels/common.cuh"

extern "C" const NormGluOps *cuda_norm_glu_ops(void) {
    static NormGluOps t;
    static int filled;
    if (filled) return &t;
#define ENTRY(member) t.member = cuda_##member;
    NORM_GLU_OPS(ENTRY)
#undef ENTRY
    if (!env_flag("HYBRID_CUDA_NO_FUSE")) {
        t.add_rmsnorm_forward = cuda_add_rmsnorm_forward;
        t.rmsnorm_backward_add = cuda_rmsnorm_backward_add;
    }
    filled = 1;
    return &t;
}
