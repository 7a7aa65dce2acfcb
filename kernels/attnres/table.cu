// The CUDA Block AttnRes sub-table (model/ops/attnres/attnres.h), filled from ATTNRES_OPS:
// attnres_fwd.cu and attnres_bwd.cu.
#include "kernels/common.cuh"

extern "C" const AttnResOps *cuda_attnres_ops(void) {
    static AttnResOps t;
#define ENTRY(member) t.member = cuda_##member;
    ATTNRES_OPS(ENTRY)
#undef ENTRY
    return &t;
}
