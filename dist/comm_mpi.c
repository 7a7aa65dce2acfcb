// Comm over MPI on host memory: the CPU backend's collectives (comm.h), and those of the CUDA
// emulator's plugin, whose "device" memory is host memory too (bf16 elements: kernels/plugin.cu).
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "base/bf16.h"
#include "base/real.h"
#include "base/util.h"

#ifdef HAVE_MPI
#include <mpi.h>
#endif

int comm_group_size(CommGroup g) {
    return g == COMM_EP ? g_dist.ep_size : g == COMM_EP_DP ? g_dist.world / g_dist.ep_size : g_dist.world;
}
int comm_group_rank(CommGroup g) {
    return g == COMM_EP ? g_dist.ep_rank : g == COMM_EP_DP ? g_dist.rank / g_dist.ep_size : g_dist.rank;
}

int comm_runtime_group_size(const Comm *c, CommGroup g) {
    (void)c;
    return comm_group_size(g);
}
int comm_runtime_group_rank(const Comm *c, CommGroup g) {
    (void)c;
    return comm_group_rank(g);
}

#ifdef HAVE_MPI
static MPI_Comm group_comm(CommGroup g) {
    void *h = g == COMM_EP ? g_dist.ep_comm : g == COMM_EP_DP ? g_dist.ep_dp_comm : g_dist.world_comm;
    return h ? *(MPI_Comm *)h : MPI_COMM_SELF;
}

static MPI_Datatype mpi_type(const Comm *c, CommType t) {
    switch (t) {
    case DT_REAL:
        // 2 bytes: bf16 (the CUDA backend's element, when this Comm stands in for NCCL on the
        // CUDA emulator's host memory), moved as 16-bit words and summed by bf16_sum_op
        return c->real_size == 2 ? MPI_UINT16_T : c->real_size == sizeof(double) ? MPI_DOUBLE : MPI_FLOAT;
    case DT_FLOAT: return MPI_FLOAT;
    case DT_DOUBLE: return MPI_DOUBLE;
    case DT_LONG: return MPI_LONG;
    case DT_INT: return MPI_INT;
    }
    return MPI_DATATYPE_NULL;
}

#define MPI_CHECK(call, what)                                                         \
    do {                                                                              \
        dist_wait_begin(what);                                                        \
        int mpi_rc_ = (call);                                                         \
        dist_wait_end();                                                              \
        if (mpi_rc_ != MPI_SUCCESS) {                                                 \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                      \
            int mpi_len_ = 0;                                                         \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                           \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, what, mpi_msg_);          \
        }                                                                             \
    } while (0)

// MPI counts are int: cut large buffers into pieces of at most this many elements
#define PIECE ((size_t)1 << 28)

// The sum of bf16 elements: each pair added in fp32 and rounded to nearest even, as NCCL's bf16
// reductions do a step at a time (the order of the steps is MPI's)
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = bf16_from_float(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}
static MPI_Op sum_op(const Comm *c, CommType t) {
    static MPI_Op bf16_op = MPI_OP_NULL;
    if (t != DT_REAL || c->real_size != 2) return MPI_SUM;
    if (bf16_op == MPI_OP_NULL) MPI_CHECK(MPI_Op_create(bf16_sum, 1, &bf16_op), "MPI_Op_create (bf16 sum)");
    return bf16_op;
}

static int trivial(CommGroup g) { return !g_dist.mpi || comm_group_size(g) == 1; }

static void mpi_allreduce(Comm *c, void *buf, size_t n, CommType t, CommGroup g) {
    if (trivial(g)) return;
    size_t es = comm_type_size(c, t);
    for (size_t off = 0; off < n; off += PIECE) {
        size_t len = n - off < PIECE ? n - off : PIECE;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * es, (int)len, mpi_type(c, t), sum_op(c, t), group_comm(g)),
                  "MPI_Allreduce (gradients)");
    }
}

static void mpi_reduce_scatter(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g) {
    size_t es = comm_type_size(c, t);
    if (trivial(g)) {
        if (recv != send) memmove(recv, send, n_each * es);
        return;
    }
    if (n_each > PIECE) die("reduce-scatter of %zu elements per rank is larger than this build supports", n_each);
    MPI_CHECK(MPI_Reduce_scatter_block(send, recv, (int)n_each, mpi_type(c, t), sum_op(c, t), group_comm(g)),
              "MPI_Reduce_scatter_block (ZeRO-1 gradients)");
}

static void mpi_allgather(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g) {
    size_t es = comm_type_size(c, t);
    int r = comm_group_rank(g);
    const int in_place = send == (const char *)recv + (size_t)r * n_each * es;
    if (trivial(g)) {
        if (!in_place) memmove(recv, send, n_each * es);
        return;
    }
    if (n_each > PIECE) die("allgather of %zu elements per rank is larger than this build supports", n_each);
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)n_each, mpi_type(c, t), recv, (int)n_each,
                            mpi_type(c, t), group_comm(g)),
              "MPI_Allgather (parameters)");
}

static void mpi_broadcast(Comm *c, void *buf, size_t n, CommType t, int root, CommGroup g) {
    if (trivial(g)) return;
    size_t es = comm_type_size(c, t);
    for (size_t off = 0; off < n; off += PIECE) {
        size_t len = n - off < PIECE ? n - off : PIECE;
        MPI_CHECK(MPI_Bcast((char *)buf + off * es, (int)len, mpi_type(c, t), root, group_comm(g)), "MPI_Bcast");
    }
}

static void mpi_alltoallv(Comm *c, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                          const size_t *recv_counts, const size_t *recv_displs, CommType t, CommGroup g) {
    int P = comm_group_size(g);
    size_t es = comm_type_size(c, t);
    if (trivial(g)) {
        if (recv_counts[0] != send_counts[0]) die("alltoallv in a group of one: sending %zu, receiving %zu elements", send_counts[0], recv_counts[0]);
        memmove((char *)recv + recv_displs[0] * es, (const char *)send + send_displs[0] * es, send_counts[0] * es);
        return;
    }
    int *sc = xmalloc(sizeof(int) * 4 * (size_t)P), *sd = sc + P, *rc = sc + 2 * P, *rd = sc + 3 * P;
    for (int i = 0; i < P; i++) {
        if (send_displs[i] + send_counts[i] > PIECE || recv_displs[i] + recv_counts[i] > PIECE)
            die("alltoallv of more than %zu elements is larger than this build supports", PIECE);
        sc[i] = (int)send_counts[i];
        sd[i] = (int)send_displs[i];
        rc[i] = (int)recv_counts[i];
        rd[i] = (int)recv_displs[i];
    }
    MPI_CHECK(MPI_Alltoallv(send, sc, sd, mpi_type(c, t), recv, rc, rd, mpi_type(c, t), group_comm(g)),
              "MPI_Alltoallv (MoE dispatch)");
    free(sc);
}
#else
// A build without MPI has only worlds of one: every collective is a local copy or nothing.
static int trivial(CommGroup g) {
    if (comm_group_size(g) > 1) die("a collective over %d ranks in a build without MPI", comm_group_size(g));
    return 1;
}
static void mpi_allreduce(Comm *c, void *buf, size_t n, CommType t, CommGroup g) {
    (void)c, (void)buf, (void)n, (void)t, (void)trivial(g);
}
static void mpi_reduce_scatter(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g) {
    (void)trivial(g);
    if (recv != send) memmove(recv, send, n_each * comm_type_size(c, t));
}
static void mpi_allgather(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g) {
    (void)trivial(g);
    if (recv != send) memmove(recv, send, n_each * comm_type_size(c, t));
}
static void mpi_broadcast(Comm *c, void *buf, size_t n, CommType t, int root, CommGroup g) {
    (void)c, (void)buf, (void)n, (void)t, (void)root, (void)trivial(g);
}
static void mpi_alltoallv(Comm *c, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                          const size_t *recv_counts, const size_t *recv_displs, CommType t, CommGroup g) {
    (void)trivial(g);
    (void)recv_counts;
    size_t es = comm_type_size(c, t);
    memmove((char *)recv + recv_displs[0] * es, (const char *)send + send_displs[0] * es, send_counts[0] * es);
}
#endif

static void mpi_wait(Comm *c) { (void)c; }
static void mpi_destroy(Comm *c) { free(c); }

Comm *comm_mpi_create(size_t real_size) {
    Comm *c = xcalloc(1, sizeof *c);
    c->name = "mpi";
    c->real_size = real_size;
    c->allreduce_sum = mpi_allreduce;
    c->reduce_scatter_sum = mpi_reduce_scatter;
    c->allgather = mpi_allgather;
    c->broadcast = mpi_broadcast;
    c->alltoallv = mpi_alltoallv;
    c->allreduce_sum_async = mpi_allreduce;
    c->wait = mpi_wait;
    c->destroy = mpi_destroy;
    c->group_size = comm_runtime_group_size;
    c->group_rank = comm_runtime_group_rank;
    return c;
}
