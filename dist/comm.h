// Collectives on backend memory (ARCHITECTURE §6): the MPI implementation works on host
// buffers (the CPU backend), the NCCL one on device buffers (kernels/comm_nccl.cu). The
// trainer, the gradient reduction and the MoE dispatch call only this table, so the same
// code drives both. Every call is collective over its group and checked.
#ifndef HYBRID_COMM_H
#define HYBRID_COMM_H

#include <stddef.h>

#include "dist.h"

typedef enum {
    DT_REAL,    // the backend's element type (CPU: float or double build; CUDA: bf16)
    DT_FLOAT,
    DT_DOUBLE,
    DT_LONG,
    DT_INT,
} CommType;

typedef enum { COMM_WORLD, COMM_EP } CommGroup;

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
    void *impl;
};

// The MPI implementation on host memory (a world of one: every call is a local no-op).
Comm *comm_mpi_create(size_t real_size);
#ifdef HAVE_CUDA
// NCCL on the CUDA backend's device memory; the communicator is created through MPI.
Comm *comm_nccl_create(void);
#endif

size_t comm_type_size(const Comm *c, CommType t);
int comm_group_size(CommGroup g);
int comm_group_rank(CommGroup g);

#endif
