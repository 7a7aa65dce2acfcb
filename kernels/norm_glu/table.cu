// The CUDA norms-and-GLU sub-table (model/ops/norm_glu/norm_glu.h), filled from NORM_GLU_OPS.
#include "kernels/common.cuh"

extern "C" const NormGluOps *cuda_norm_glu_ops(void) {
    static NormGluOps t;
#define ENTRY(member) t.member = cuda_##member;
    NORM_GLU_OPS(ENTRY)
#undef ENTRY
    return &t;
}
