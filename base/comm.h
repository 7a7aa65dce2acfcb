// The collectives interface (docs/distributed.md, "What each step does"): a table of
// collectives on backend memory.
// The model (MoE expert parallelism) and the trainer call only this table; dist/ fills
// it with MPI on host buffers (dist/comm_mpi.c, the CPU backend) and kernels/ with NCCL
// on device buffers (dist/comm_nccl.cu), so the same code drives both. Every call is
// collective over its group and checked. This header depends on nothing: it sits in the
// base layer so that model/ can hold a Comm without depending on dist/.
#ifndef HYBRID_BASE_COMM_H
#define HYBRID_BASE_COMM_H

#include <stddef.h>

typedef enum {
    DT_REAL,    // the backend's element type (CPU: float or double build; CUDA: bf16)
    DT_FLOAT,
    DT_DOUBLE,
    DT_LONG,
    DT_INT,
} CommType;

// COMM_EP: the expert-parallel group (consecutive ranks); COMM_EP_DP: the ranks that hold
// the same experts (the same EP rank in every EP group), over which the gradients of sharded
// expert weights are summed (docs/distributed.md, "Expert parallelism").
typedef enum { COMM_WORLD, COMM_EP, COMM_EP_DP } CommGroup;

typedef struct Comm Comm;
struct Comm {
    const char *name;   // "mpi" or "nccl"
    size_t real_size;   // bytes of DT_REAL
    void (*allreduce_sum)(Comm *c, void *buf, size_t n, CommType t, CommGroup g);
    // recv (n_each) = the sum over ranks of this rank's slice of send (group size * n_each)
    void (*reduce_scatter_sum)(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g);
    // recv (group size * n_each) = every rank's send (n_each), in rank order; send may be
    // recv + rank * n_each (in place)
    void (*allgather)(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g);
    void (*broadcast)(Comm *c, void *buf, size_t n, CommType t, int root, CommGroup g);
    // counts and displacements in elements, one per rank of the group
    void (*alltoallv)(Comm *c, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                      const size_t *recv_counts, const size_t *recv_displs, CommType t, CommGroup g);
    // Overlap (GPU): allreduce_sum_async queues the reduction behind the compute issued so
    // far, on a communication stream; wait makes later compute wait for all of them. The
    // MPI implementation reduces at once.
    void (*allreduce_sum_async)(Comm *c, void *buf, size_t n, CommType t, CommGroup g);
    void (*wait)(Comm *c);
    void (*destroy)(Comm *c);
    // ranks in group g and this rank's index in it (the runtime's groups, dist/dist.h)
    int (*group_size)(const Comm *c, CommGroup g);
    int (*group_rank)(const Comm *c, CommGroup g);
    void *impl;
};

// Bytes of one element of type t.
static inline size_t comm_type_size(const Comm *c, CommType t) {
    switch (t) {
    case DT_REAL: return c->real_size;
    case DT_FLOAT: return sizeof(float);
    case DT_DOUBLE: return sizeof(double);
    case DT_LONG: return sizeof(long);
    case DT_INT: return sizeof(int);
    }
    return 0;
}

#endif
