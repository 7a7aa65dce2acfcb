// The CUDA delta-rule sub-table (model/ops/delta_rule/delta_rule.h), filled from
// DELTA_RULE_OPS.
//
// WHILE THE FAMILY IS BEING PORTED: every member is declared weak here, so a member whose
// kernel does not exist yet links as NULL (and the table is not yet handed to the backend:
// backend_cuda leaves delta_rule NULL, so model_create still refuses K/G/D/L layers on
// --device cuda). The parity tests take the table from cuda_delta_rule_ops() and test the
// members that are there. When every member exists, the weak declarations go.
#include "kernels/common.cuh"

#define WEAK_DECLARE(member) extern "C" __typeof__(*((DeltaRuleOps *)0)->member) cuda_##member __attribute__((weak));
DELTA_RULE_OPS(WEAK_DECLARE)
#undef WEAK_DECLARE

extern "C" const DeltaRuleOps *cuda_delta_rule_ops(void) {
    static DeltaRuleOps t;
#define ENTRY(member) t.member = cuda_##member;
    DELTA_RULE_OPS(ENTRY)
#undef ENTRY
    return &t;
}
