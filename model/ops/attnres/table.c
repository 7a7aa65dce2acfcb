// The CPU reference's Block AttnRes sub-table (model/ops/attnres/attnres.h).
#include "model/ops/attnres/attnres.h"

#define ENTRY(member) .member = cpu_##member,
static const AttnResOps table = {ATTNRES_OPS(ENTRY)};

const AttnResOps *cpu_attnres_ops(void) { return &table; }
