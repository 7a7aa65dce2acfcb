// The CPU reference's norms-and-GLU sub-table (model/ops/norm_glu/norm_glu.h).
#include "model/ops/norm_glu/norm_glu.h"

#define ENTRY(member) .member = cpu_##member,
static const NormGluOps table = {NORM_GLU_OPS(ENTRY)};

const NormGluOps *cpu_norm_glu_ops(void) { return &table; }
