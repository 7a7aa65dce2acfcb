// How an op family ties its contract to its implementations (docs/architecture.md,
// "Op families").
//
// A family (model/ops/<family>/<family>.h) has
//   - a struct <Family>Ops: one function-pointer member per op, each with its contract;
//   - a list macro <FAMILY>_OPS(X) naming every required member once, X(member);
//   - a CPU reference cpu_<member> for every member (model/ops/<family>/*.c), and, where
//     the CUDA backend has the family, a kernel cuda_<member> (kernels/<family>/*.cu).
// OP_DECLARE declares cpu_<member> / cuda_<member> with exactly the member's type, so a
// signature is written once (in the struct) and a mismatch is a compile error. The tables
// (model/ops/<family>/table.c, kernels/<family>/table.cu) are filled from the list with
// OP_TABLE_ENTRY, so adding an op to a family touches its header, its CPU .c, its .cu and
// its test, and nothing else. Optional members (fused ops a backend may offer) are not in
// the list: a backend sets them by hand, and NULL means "run the separate ops".
#ifndef HYBRID_OP_TABLE_H
#define HYBRID_OP_TABLE_H

// extern <type of Family.member> prefix##member;  (a function declaration)
#define OP_DECLARE(Family, prefix, member) extern __typeof__(*((Family *)0)->member) prefix##member;

#endif
