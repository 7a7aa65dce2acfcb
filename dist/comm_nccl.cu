// Comm over NCCL on the CUDA backend's device memory (base/comm.h). The communicator is
// created through MPI (rank 0's ncclUniqueId is broadcast), the expert-parallel group is
// split from it. Synchronous collectives run on the backend's stream, ordered with the
// compute; allreduce_sum_async runs on a second stream behind an event, so the bucketed
// gradient all-reduce overlaps the rest of the backward, and wait() makes the compute
// stream wait for it. NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 unless set.
#ifdef HAVE_NCCL
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common.cuh"

extern "C" {
#include "dist/comm.h"
}

#define NCCL_CHECK(call)                                                                            \
    do {                                                                                            \
        ncclResult_t r_ = (call);                                                                   \
        if (r_ != ncclSuccess) cuda_fail(#call, ncclGetErrorString(r_), __FILE__, __LINE__);       \
    } while (0)

typedef struct {
    ncclComm_t world, ep, ep_dp;  // ep_dp: the ranks holding the same experts (NULL: the world)
    cudaStream_t comm_stream;
    cudaEvent_t compute_done, comm_done;
    int pending;  // async reductions queued since the last wait
} NcclImpl;

static NcclImpl *impl_of(Comm *c) { return (NcclImpl *)c->impl; }

static ncclComm_t group_comm(Comm *c, CommGroup g) {
    NcclImpl *im = impl_of(c);
    if (g == COMM_EP) {
        if (!im->ep) die("NCCL: the expert-parallel communicator was not created (expert_parallel = 1)");
        return im->ep;
    }
    if (g == COMM_EP_DP) return im->ep_dp ? im->ep_dp : im->world;
    return im->world;
}

static ncclDataType_t nccl_type(CommType t) {
    switch (t) {
    case DT_REAL: return ncclBfloat16;
    case DT_FLOAT: return ncclFloat32;
    case DT_DOUBLE: return ncclFloat64;
    case DT_LONG: return ncclInt64;
    case DT_INT: return ncclInt32;
    }
    return ncclFloat32;
}

static void nc_allreduce(Comm *c, void *buf, size_t n, CommType t, CommGroup g) {
    if (!n) return;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, group_comm(c, g), g_cuda.stream));
}

static void nc_allreduce_async(Comm *c, void *buf, size_t n, CommType t, CommGroup g) {
    if (!n) return;
    NcclImpl *im = impl_of(c);
    CUDA_CHECK(cudaEventRecord(im->compute_done, g_cuda.stream));
    CUDA_CHECK(cudaStreamWaitEvent(im->comm_stream, im->compute_done, 0));
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, group_comm(c, g), im->comm_stream));
    im->pending++;
}

static void nc_wait(Comm *c) {
    NcclImpl *im = impl_of(c);
    if (!im->pending) return;
    CUDA_CHECK(cudaEventRecord(im->comm_done, im->comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(g_cuda.stream, im->comm_done, 0));
    im->pending = 0;
}

static void nc_reduce_scatter(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g) {
    NCCL_CHECK(ncclReduceScatter(send, recv, n_each, nccl_type(t), ncclSum, group_comm(c, g), g_cuda.stream));
}

static void nc_allgather(Comm *c, const void *send, void *recv, size_t n_each, CommType t, CommGroup g) {
    NCCL_CHECK(ncclAllGather(send, recv, n_each, nccl_type(t), group_comm(c, g), g_cuda.stream));
}

static void nc_broadcast(Comm *c, void *buf, size_t n, CommType t, int root, CommGroup g) {
    NCCL_CHECK(ncclBroadcast(buf, buf, n, nccl_type(t), root, group_comm(c, g), g_cuda.stream));
}

// all-to-all-v as grouped point-to-point sends and receives (the MoE dispatch)
static void nc_alltoallv(Comm *c, const void *send, const size_t *send_counts, const size_t *send_displs, void *recv,
                         const size_t *recv_counts, const size_t *recv_displs, CommType t, CommGroup g) {
    PROFILE("nccl_alltoallv");  // (on the compute stream, as the exchange itself: its time under HYBRID_CUDA_PROFILE=1)
    ncclComm_t comm = group_comm(c, g);
    size_t es = comm_type_size(c, t);
    int P = comm_group_size(g);
    NCCL_CHECK(ncclGroupStart());
    for (int p = 0; p < P; p++) {
        if (send_counts[p])
            NCCL_CHECK(ncclSend((const char *)send + send_displs[p] * es, send_counts[p], nccl_type(t), p, comm,
                                g_cuda.stream));
        if (recv_counts[p])
            NCCL_CHECK(ncclRecv((char *)recv + recv_displs[p] * es, recv_counts[p], nccl_type(t), p, comm,
                                g_cuda.stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}

static void nc_destroy(Comm *c) {
    NcclImpl *im = impl_of(c);
    CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
    CUDA_CHECK(cudaStreamSynchronize(im->comm_stream));
    if (im->ep) NCCL_CHECK(ncclCommDestroy(im->ep));
    if (im->ep_dp) NCCL_CHECK(ncclCommDestroy(im->ep_dp));
    NCCL_CHECK(ncclCommDestroy(im->world));
    CUDA_CHECK(cudaEventDestroy(im->compute_done));
    CUDA_CHECK(cudaEventDestroy(im->comm_done));
    CUDA_CHECK(cudaStreamDestroy(im->comm_stream));
    free(im);
    free(c);
}

extern "C" Comm *comm_nccl_create(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);  // never NVLink multicast (see docs/distributed.md)
    backend_cuda();                      // the device and its stream exist first
    NcclImpl *im = (NcclImpl *)xcalloc(1, sizeof *im);
    ncclUniqueId id;
    if (g_dist.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    dist_bcast_bytes(&id, sizeof id, 0);
    dist_wait_begin("ncclCommInitRank");
    NCCL_CHECK(ncclCommInitRank(&im->world, g_dist.world, id, g_dist.rank));
    dist_wait_end();
    if (g_dist.ep_size > 1) {
        NCCL_CHECK(ncclCommSplit(im->world, g_dist.rank / g_dist.ep_size, g_dist.ep_rank, &im->ep, NULL));
        // the same experts in every EP group (grad_sync sums the sharded expert gradients over it)
        NCCL_CHECK(ncclCommSplit(im->world, g_dist.ep_rank, g_dist.rank / g_dist.ep_size, &im->ep_dp, NULL));
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&im->comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&im->compute_done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&im->comm_done, cudaEventDisableTiming));
    Comm *c = (Comm *)xcalloc(1, sizeof *c);
    c->name = "nccl";
    c->real_size = sizeof(bf16);
    c->allreduce_sum = nc_allreduce;
    c->reduce_scatter_sum = nc_reduce_scatter;
    c->allgather = nc_allgather;
    c->broadcast = nc_broadcast;
    c->alltoallv = nc_alltoallv;
    c->allreduce_sum_async = nc_allreduce_async;
    c->wait = nc_wait;
    c->destroy = nc_destroy;
    c->group_size = comm_runtime_group_size;
    c->group_rank = comm_runtime_group_rank;
    c->impl = im;
    return c;
}
#endif
