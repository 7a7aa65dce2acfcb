// The CPU reference's delta-rule sub-table (model/ops/delta_rule/delta_rule.h).
#include "model/ops/delta_rule/delta_rule.h"

#define ENTRY(member) .member = cpu_##member,
static const DeltaRuleOps table = {DELTA_RULE_OPS(ENTRY)};

const DeltaRuleOps *cpu_delta_rule_ops(void) { return &table; }
