// The CUDA delta-rule sub-table (model/ops/delta_rule/delta_rule.h), filled from
// DELTA_RULE_OPS: the chunkwise cores (chunk_fwd.cu, chunk_bwd.cu, linear_attn*.cu), the decode
// steps (step.cu, short_conv.cu, linear_attn.cu) and the layer ops (short_conv.cu,
// layer_ops.cu, gated_rmsnorm.cu); workspace sizes by kind (workspace.cu); plus the optional
// fused op short_conv_l2norm_forward (short_conv.cu; left out under HYBRID_CUDA_NO_FUSE=1, as
// kernels/core/table.cu's).
#include "kernels/common.cuh"

extern "C" const DeltaRuleOps *cuda_delta_rule_ops(void) {
    static DeltaRuleOps t;
    static int filled;
    if (filled) return &t;
#define ENTRY(member) t.member = cuda_##member;
    DELTA_RULE_OPS(ENTRY)
#undef ENTRY
    if (!env_flag("HYBRID_CUDA_NO_FUSE")) t.short_conv_l2norm_forward = cuda_short_conv_l2norm_forward;
    filled = 1;
    return &t;
}
