// The operands that the tensor-core delta-rule kernels split hi + lo (kernels/delta_rule/chunk.cuh,
// dr_split and its variants), one tag each, named after docs/delta-rule.md's symbols; C and CUDA.
// Every split site passes its operand's tag to dr_lo (chunk.cuh), which returns the lo part
// unchanged in a normal build and zero, under -DHYBRID_DR_PRECISION_AUDIT, when the operand's bit
// (1 << DRS_x) is set in the mask of cuda_delta_precision_audit_mask. A zero lo drops exactly
// the MMAs that multiply it (lo * hi of a three-MMA product, the lo MMA of a two-MMA one), in
// every product the operand enters, and zeroes the lo arrays stored in the workspace for later
// kernels. docs/delta-rule.md, "Accuracy: the per-operand audit"; the program:
// tests/gpu/audit_delta_rule_precision.c.
//
// X(tag, name, where it is split: the products it enters)
#ifndef HYBRID_KERNELS_DELTA_RULE_SPLIT_OPERAND_H
#define HYBRID_KERNELS_DELTA_RULE_SPLIT_OPERAND_H

#define DR_SPLIT_OPERANDS(X)                                                                                  \
    /* forward (and the backward's recomputation): prep, walk */                                          \
    X(QR, "Qr", "prep step 2: q_r e^(G_r - G_ref), the A of Aqk below the diagonal blocks")                 \
    X(KR, "Kr", "prep step 2: k_r e^(G_r - G_ref), the A of L below the diagonal blocks")                   \
    X(KC, "Kc", "prep step 2: k_c e^(G_ref - G_c), the B of Aqk and L")                                     \
    X(AQK, "Aqk", "prep -> ws Aqkl: output Aqk Delta, reverse walk Aqk^T dO")                               \
    X(QG, "Qg", "prep -> ws Qgl: output Qg h[n], reverse walk Qg^T dO")                                     \
    X(KE, "Ke", "prep -> ws Kel: walk Ke^T Delta, reverse walk Ke dH'")                                     \
    X(TB, "T diag(b)", "prep step 4: the A of W and U")                                                     \
    X(KB, "Kb", "prep step 4: k e^G, the B of W")                                                           \
    X(W, "W", "prep -> ws Wl: walk W h[n], reverse walk W^T dDelta")                                        \
    X(H, "h", "walk: W h[n]; -> ws hl: grad1 h dO (dq), dDelta h^T (dW), <h, dH'>")                         \
    X(DELTA, "Delta", "walk: Ke^T Delta; -> ws pairs: output Aqk Delta, grad1 dO Delta^T, Delta dH'^T")     \
    /* backward: reverse walk, grad1, grad2 */                                                            \
    X(DH, "dH'", "reverse walk: Ke dH'; -> ws dhl: grad1 Delta dH'^T (dKe), <h, dH'>")                      \
    X(DDELTA, "dDelta", "reverse walk: W^T dDelta; -> ws pairs: grad1 dDelta V^T, dDelta h^T, T^T dDelta") \
    X(TT, "T^T", "grad1 steps 5, 6: Wbar = T^T dW, Ubar = T^T dDelta")                                      \
    X(DW, "dW", "grad1 step 5: dW Kb^T (dT), T^T dW")                                                       \
    X(KBD, "Kb (dT)", "grad1 step 5: k e^G, the B of dW Kb^T")                                              \
    X(DA, "dA", "grad2 (B4): the A of both terms")                                                          \
    X(DL, "dL", "grad2 (B4): the A of both terms")                                                          \
    X(B4KC, "Kc (B4)", "grad2 row terms: k_c e^(G_ref - G_c), the B of dA, dL")                              \
    X(B4QR, "Qr (B4)", "grad2 column terms: q_r e^(G_r - G_ref), the B of dA^T")                            \
    X(B4KR, "bKr (B4)", "grad2 column terms: b_r k_r e^(G_r - G_ref), the B of dL^T")

enum DrSplitOperand {
#define DRS_ENUM_(tag, name, where) DRS_##tag,
    DR_SPLIT_OPERANDS(DRS_ENUM_)
#undef DRS_ENUM_
        DRS_COUNT
};

#endif
