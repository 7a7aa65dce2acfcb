// The CPU reference's core sub-table (model/ops/core/core.h), filled from CORE_OPS.
#include "model/ops/core/core.h"

#define ENTRY(member) .member = cpu_##member,
static const CoreOps table = {CORE_OPS(ENTRY)};

const CoreOps *cpu_core_ops(void) { return &table; }
