// The constructors of the collectives table (base/comm.h has the interface): MPI on host
// memory (dist/comm_mpi.c), NCCL on the CUDA backend's device memory (dist/comm_nccl.cu),
// and the runtime's group sizes and ranks they report.
#ifndef HYBRID_COMM_H
#define HYBRID_COMM_H

#include <stddef.h>

#include "base/comm.h"
#include "dist.h"

// The MPI implementation on host memory (a world of one: every call is a local no-op).
Comm *comm_mpi_create(size_t real_size);
#ifdef HAVE_CUDA
// NCCL on the CUDA backend's device memory; the communicator is created through MPI.
Comm *comm_nccl_create(void);
#endif

int comm_group_size(CommGroup g);
int comm_group_rank(CommGroup g);
// The same as Comm members (every implementation reports the runtime's groups).
int comm_runtime_group_size(const Comm *c, CommGroup g);
int comm_runtime_group_rank(const Comm *c, CommGroup g);

#endif
