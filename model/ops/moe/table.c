// The CPU reference's MoE sub-table (model/ops/moe/moe.h).
#include "model/ops/moe/moe.h"

#define ENTRY(member) .member = cpu_##member,
static const MoeOps table = {MOE_OPS(ENTRY)};

const MoeOps *cpu_moe_ops(void) { return &table; }
