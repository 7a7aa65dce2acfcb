// The distributed runtime (docs/distributed.md, "What each step does"): one process per GPU
// (or per CPU worker) under `mpirun`. dist_init finds rank, world size and local rank, splits
// the expert-parallel groups (docs/distributed.md, "Expert parallelism") and installs the
// failure behaviour: an error on any rank aborts every rank (MPI_Abort) instead of leaving the
// others waiting, and a blocking collective that waits longer than `HYBRID_DIST_TIMEOUT`
// seconds (default 600) aborts the job with a message naming the collective.
//
// A process that was not started by a launcher (no OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK in its environment) is a world of one: no MPI call is made at all, so
// single-process runs need neither mpirun nor NCCL.
#ifndef HYBRID_DIST_H
#define HYBRID_DIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int rank, world;                // in the whole job
    int local_rank, local_world;    // on this node (picks the GPU)
    int ep_size, ep_rank;           // expert-parallel group: ep_size consecutive ranks
    int mpi;                        // 1: MPI is initialised (started by a launcher)
    void *world_comm, *ep_comm;     // MPI_Comm handles (opaque outside dist/)
    void *ep_dp_comm;               // the ranks with this ep_rank, one per EP group (MPI_Comm)
} Dist;

// The process-wide runtime, set up by dist_init (a world of one before that).
extern Dist g_dist;

// Initialises MPI when started by a launcher. Dies with a clear message if this build
// has no MPI but the environment says several ranks were launched.
void dist_init(int *argc, char ***argv);
// Splits the expert-parallel groups (and their transposes, the ranks that hold the same
// experts): ep_size must divide the world size.
void dist_set_ep(int ep_size);
void dist_finalize(void);
int dist_is_root(void);             // rank 0 (prints, logs, checkpoints)
int dist_mpi_available(void);       // this build has MPI

// Host-memory collectives over the whole world (no-ops for a world of one). Used for
// scalars, start-up checks and checkpoint gathers; bulk tensors go through Comm.
void dist_barrier(const char *what);
void dist_allreduce_sum_double(double *v, size_t n);
// The same over this rank's expert-parallel group only.
void dist_allreduce_sum_double_ep(double *v, size_t n);
void dist_allreduce_max_int(int *v, size_t n);
void dist_bcast_bytes(void *buf, size_t bytes, int root);
// Sums float buffers of n elements onto rank 0 (ranks fill what they own, zeros elsewhere).
void dist_reduce_sum_float_to_root(float *buf, size_t n);
// Gathers `bytes` from every rank into out (world * bytes) on every rank.
void dist_allgather_bytes(const void *in, void *out, size_t bytes);

// Watchdog bookkeeping around a blocking wait (the communication code calls these).
void dist_wait_begin(const char *what);
void dist_wait_end(void);

// Start-up consistency check: every rank passes the same description of what it is about
// to run (the config text, the data it found); any difference is reported on every rank,
// naming the first rank and line that differ from rank 0, and every rank exits.
void dist_check_same(const char *what, const char *text);

#endif
