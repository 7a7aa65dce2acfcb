// The CPU reference's optimizer sub-table (model/ops/optim/optim.h). The CPU has no
// multi-segment AdamW: the optimizer runs one adamw_update per tensor.
#include "model/ops/optim/optim.h"

#define ENTRY(member) .member = cpu_##member,
static const OptimOps table = {OPTIM_OPS(ENTRY)};

const OptimOps *cpu_optim_ops(void) { return &table; }
