// Expert-parallel token exchange for the MoE layer (docs/hybrid.md, "Expert-parallel
// exchange"; model/moe.c uses it).
//
// An EP group is the Comm's COMM_EP group of P = m->ep_size consecutive ranks. Expert e
// is owned by EP rank e / El, El = E / P (contiguous ranges). Each rank routes its own
// tokens; the rows of its expert-sorted slot buffer xp (grouped by expert, offsets[E+1])
// that belong to EP rank q are the contiguous range offsets[q*El] .. offsets[(q+1)*El].
//
//   ep_plan      count exchange: every rank sends each peer the El counts of the peer's
//                experts (an alltoallv of ints); from them the row counts and
//                displacements of both directions, the owner's expert-major offsets and
//                the source-major <-> expert-major row permutations
//   ep_dispatch  sender layout (xp order) -> alltoallv -> owner, source-major
//                (q0: e0 e1 ..)(q1: e0 e1 ..) -> reorder -> expert-major (e0: q0 q1 ..)(e1: ..)
//   ep_combine   the reverse: owner expert-major -> source-major -> alltoallv (counts
//                swapped) -> sender layout
// The forward dispatches x and combines y; the backward dispatches dy and combines dx
// (the transpose of a dispatch is a combine). The only communication is Comm.alltoallv,
// so a CUDA Comm (grouped ncclSend/ncclRecv) plugs into the same code; the reorders are the
// backend's row gather (moe_gather_forward with K = 1).
//
// The expert weights are sharded (model_set_expert_parallel; docs/hybrid.md, "Expert
// parallelism"): a rank's w13/w2 hold only its El experts, and it accumulates their
// gradients from every source's rows; dist/grad_sync.c sums them over the ranks that hold
// the same experts (COMM_EP_DP).
#ifndef HYBRID_MOE_DISPATCH_EP_H
#define HYBRID_MOE_DISPATCH_EP_H

#include <stddef.h>

#include "base/real.h"

struct Model;

typedef struct MoeEp {
    int P, rank, El;                 // EP group size, this rank in it, experts per rank
    int rows_max;                    // capacity of the owner-side buffers (rows)
    // host bookkeeping of the last plan (kept for the backward), counts in rows
    size_t *send_rows, *send_displs, *recv_rows, *recv_displs;  // P each
    size_t *elems;                   // 4P: the same in elements of the current width
    int *cin;                        // (P, El): rows source q sent for local expert e
    int *host_offsets;               // El+1: expert-major row ranges of the local experts
    int *to_expert, *to_source;      // rows_max each, host copies of the two permutations
    int recv_total;
    // backend memory
    int *dev_counts, *dev_cin;       // E ints each: the count exchange
    int *offsets;                    // El+1: host_offsets
    int *perm_e, *perm_s;            // rows_max: expert-major row i = source-major row
                                     // perm_e[i]; source-major row j = expert-major perm_s[j]
    real *xe, *he, *ae;              // saved: local experts' rows (rows_max, De), (.., 2M), (.., M)
    real *work, *ye, *dxe, *dhe, *dae;  // scratch shared by the layers
} MoeEp;

// Plans the exchange for the rows of the last dispatch plan (offsets: backend memory,
// E+1 ints). Collective over COMM_EP.
void ep_plan(const struct Model *m, MoeEp *ep, const int *offsets, int E);
// dst (expert-major, owner side) <- src (sender layout, rows `width` wide). Collective.
void ep_dispatch(const struct Model *m, MoeEp *ep, real *dst, const real *src, int width);
// dst (sender layout) <- src (expert-major, owner side). Collective.
void ep_combine(const struct Model *m, MoeEp *ep, real *dst, const real *src, int width);

#endif
