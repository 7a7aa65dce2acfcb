// The CPU reference's MLA sub-table (model/ops/mla/mla.h).
#include "model/ops/mla/mla.h"

#define ENTRY(member) .member = cpu_##member,
static const MlaOps table = {MLA_OPS(ENTRY)};

const MlaOps *cpu_mla_ops(void) { return &table; }
