// The CUDA delta-rule sub-table (model/ops/delta_rule/delta_rule.h), filled from
// DELTA_RULE_OPS: the chunkwise cores (chunk_fwd.cu, chunk_bwd.cu, linear_attn*.cu), the decode
// steps (step.cu, short_conv.cu, linear_attn.cu) and the layer ops (short_conv.cu,
// layer_ops.cu, gated_rmsnorm.cu); workspace sizes by kind (workspace.cu).
#include "kernels/common.cuh"

extern "C" const DeltaRuleOps *cuda_delta_rule_ops(void) {
    static DeltaRuleOps t;
#define ENTRY(member) t.member = cuda_##member;
    DELTA_RULE_OPS(ENTRY)
#undef ENTRY
    return &t;
}
