// The CUDA MoE sub-table (model/ops/moe/moe.h), filled from MOE_OPS: the router
// (router.cu), the balancing (balance.cu), the dispatch plan, gather and combine
// (dispatch.cu) and the grouped expert GLU MLP (experts.cu on grouped_gemm.cuh).
#include "kernels/common.cuh"

extern "C" const MoeOps *cuda_moe_ops(void) {
    static MoeOps t;
#define ENTRY(member) t.member = cuda_##member;
    MOE_OPS(ENTRY)
#undef ENTRY
    return &t;
}
