// The CUDA optimizer sub-table (model/ops/optim/optim.h), filled from OPTIM_OPS, plus the
// multi-tensor AdamW (one launch for every AdamW tensor of a step).
#include "kernels/common.cuh"

extern "C" const OptimOps *cuda_optim_ops(void) {
    static OptimOps t;
#define ENTRY(member) t.member = cuda_##member;
    OPTIM_OPS(ENTRY)
#undef ENTRY
    t.adamw_update_multi = cuda_adamw_update_multi;
    return &t;
}
