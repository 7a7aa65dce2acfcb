// The delta-rule audit masks of the host programs (tests/gpu/audit_delta_rule_precision.c,
// tests/gpu/hash_delta_rule.c): the tags of kernels/delta_rule/split_operand.h as strings and
// a mask parsed from them. Needs base/util.h (xstrdup).
#ifndef HYBRID_TESTS_GPU_SPLIT_OPERAND_MASK_H
#define HYBRID_TESTS_GPU_SPLIT_OPERAND_MASK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/delta_rule/split_operand.h"

static const char *const OP_TAG[DRS_COUNT] = {
#define OP_TAG_(tag, name, where) #tag,
    DR_SPLIT_OPERANDS(OP_TAG_)
#undef OP_TAG_
};
#define ALL_OPS ((1u << DRS_COUNT) - 1)

// a mask from "TAG,TAG,.." (split_operand.h's tags), "all" or a number; an unknown tag exits 2
// with a message that names prog
static inline unsigned parse_mask(const char *s, const char *prog) {
    if (!strcmp(s, "all")) return ALL_OPS;
    char *end;
    const unsigned long v = strtoul(s, &end, 0);
    if (!*end) return (unsigned)v & ALL_OPS;
    unsigned m = 0;
    char *buf = xstrdup(s);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int o = 0;
        while (o < DRS_COUNT && strcmp(t, OP_TAG[o])) o++;
        if (o == DRS_COUNT) {
            fprintf(stderr, "%s: no operand '%s' in kernels/delta_rule/split_operand.h (see --help)\n", prog, t);
            exit(2);
        }
        m |= 1u << o;
    }
    free(buf);
    return m;
}

#endif
