// The operands that the tensor-core delta-rule kernels split hi + lo (kernels/delta_rule/chunk.cuh,
// dr_split and its variants), one tag each, named after docs/delta-rule.md's symbols; C and CUDA.
// Every split site passes its operand's tag to dr_lo (chunk.cuh), which returns the lo part
// unchanged in a normal build and zero, under -DHYBRID_DR_PRECISION_AUDIT, when the operand's bit
// (1 << DRS_x) is set in the mask of cuda_delta_precision_audit_mask. A zero lo drops exactly
// the MMAs that multiply it (lo * hi of a three-MMA product, the lo MMA of a two-MMA one), in
// every product the operand enters, and zeroes the lo arrays stored in the workspace for later
// kernels. docs/delta-rule.md, "Accuracy: the per-operand audit"; the program:
// tests/gpu/audit_delta_rule_precision.c.
// Thirteen operands. The audit's first version had 21; eight of the eleven it found droppable
// for every kind, those of the gradient kernels (grad1's T^T, dW, K_b; grad2's dA, dL and B4's
// K_c, Q_r, beta K_r), are one bf16 each since branch dr-fewer-mma, in the normal build and the
// audit build alike, so their tags (TT, DW, KBD, DA, DL, B4KC, B4QR, B4KR) are gone. The
// prep's Q_r, K_r, K_c stay split for KDA only (without their lo parts the parity test's KDA
// cases at K <= 32 put hT and dh0 past 1e-4); for GDN and DeltaNet they are one bf16, so their
// bits mask nothing there (docs/delta-rule.md, "Fewer MMAs: the audit's droppable operands").
//
// X(tag, name, where it is split: the products it enters)
#ifndef HYBRID_KERNELS_DELTA_RULE_SPLIT_OPERAND_H
#define HYBRID_KERNELS_DELTA_RULE_SPLIT_OPERAND_H

#define DR_SPLIT_OPERANDS(X)                                                                                  \
    /* forward (and the backward's recomputation): prep, walk */                                          \
    X(QR, "Qr", "prep step 2 (KDA): q_r e^(G_r - G_ref), the A of Aqk below the diagonal blocks")           \
    X(KR, "Kr", "prep step 2 (KDA): k_r e^(G_r - G_ref), the A of L below the diagonal blocks")             \
    X(KC, "Kc", "prep step 2 (KDA): k_c e^(G_ref - G_c), the B of Aqk and L")                               \
    X(AQK, "Aqk", "prep -> ws Aqkl: output Aqk Delta, reverse walk Aqk^T dO")                               \
    X(QG, "Qg", "prep -> ws Qgl: output Qg h[n], reverse walk Qg^T dO")                                     \
    X(KE, "Ke", "prep -> ws Kel: walk Ke^T Delta, reverse walk Ke dH'")                                     \
    X(TB, "T diag(b)", "prep step 4: the A of W and U")                                                     \
    X(KB, "Kb", "prep step 4: k e^G, the B of W")                                                           \
    X(W, "W", "prep -> ws Wl: walk W h[n], reverse walk W^T dDelta")                                        \
    X(H, "h", "walk: W h[n]; -> ws hl: grad1 h dO (dq), dDelta h^T (dW), <h, dH'>")                         \
    X(DELTA, "Delta", "walk: Ke^T Delta; -> ws pairs: output Aqk Delta, grad1 dO Delta^T, Delta dH'^T")     \
    /* backward: reverse walk, grad1 */                                                                    \
    X(DH, "dH'", "reverse walk: Ke dH'; -> ws dhl: grad1 Delta dH'^T (dKe), <h, dH'>")                      \
    X(DDELTA, "dDelta", "reverse walk: W^T dDelta; -> ws pairs: grad1 dDelta V^T, dDelta h^T, T^T dDelta")

enum DrSplitOperand {
#define DRS_ENUM_(tag, name, where) DRS_##tag,
    DR_SPLIT_OPERANDS(DRS_ENUM_)
#undef DRS_ENUM_
        DRS_COUNT
};

#endif
