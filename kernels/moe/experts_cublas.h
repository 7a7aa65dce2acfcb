// The grouped expert GEMMs of kernels/moe/experts.cu on cuBLAS's grouped batched GEMM
// (cublasGemmGroupedBatchedEx; kernels/moe/experts_cublas.cu), the alternative to our grouped
// tensor-core kernels (grouped_gemm.cuh) that HYBRID_MOE_GEMM=cublas selects for all six GEMMs
// (the forward's two, the backward's two data gradients and two weight gradients) and
// HYBRID_MOE_GEMM=mixed for the backward's by experts.cu's rule (docs/hybrid.md, "Dropless
// permutation and grouped expert FFN"; docs/cuda.md's switch list). Same operands, layouts and contract as experts.cu's
// rows_gemm: bf16 in and out, fp32 compute; an expert with no rows is left out of the call
// (nothing written).
// The weight gradients are parameter gradients, fp32 (docs/cuda.md, "Precision"), and the type
// combinations cuBLAS documents for cublasGemmGroupedBatchedEx pair bf16 A and B with a bf16 C
// only (with CUBLAS_COMPUTE_32F); cuBLAS 13.1 on an H200 answers CUBLAS_STATUS_NOT_SUPPORTED to
// an fp32 C there (session 34). A bf16 product added to the fp32 gradient would round every
// call's gradient to bf16, which the fp32 gradients exist to avoid. cublasGemmEx's list has bf16
// A and B with an fp32 C: so on this path a weight gradient is one cublasGemmEx per expert with
// rows (moe_cublas_wgrad), and where experts.cu's rule does not send it here it runs our kernels.
//
// cuBLAS takes the per-expert sizes on the host, and the row counts live on the device
// (offsets, written by moe_dispatch_plan). So the forward copies offsets to the host once per
// forward and keeps the copy under the offsets pointer; the backward of the same layer reuses
// it. HYBRID_MOE_GEMM=cublas: the copy is synchronous (moe_cublas_offsets with forward = 1: one
// cudaMemcpyAsync + one stream synchronization per forward), since the forward's GEMMs need it.
// HYBRID_MOE_GEMM=mixed (the forward's two GEMMs on our kernels, the backward's data gradients
// on cuBLAS by experts.cu's per-kind rule): the forward only issues the copy (moe_cublas_offsets_async:
// cudaMemcpyAsync into pinned host memory, then an event), and the backward waits for that
// event when it first needs the counts (moe_cublas_offsets with forward = 0), long after the
// copy landed. Every grouped call checks on the device that the offsets it reads are the host
// copy it was sized from (a mismatch traps: see experts_cublas.cu).
#ifndef HYBRID_KERNELS_MOE_EXPERTS_CUBLAS_H
#define HYBRID_KERNELS_MOE_EXPERTS_CUBLAS_H

#include "kernels/common.cuh"

// At most this many experts per call on the cuBLAS path (more: the own kernels run): the host
// offsets travel to the device as a kernel parameter (4 KiB of parameters at most).
#define MOE_CUBLAS_MAX_E 512

// The expert GEMMs' mode for a call of E experts: HYBRID_MOE_GEMM=own|cublas|mixed (or the tests'
// cuda_moe_set_gemm(0|1|2)); MOE_GEMM_OWN whatever the switch says unless 1 <= E <= MOE_CUBLAS_MAX_E.
enum { MOE_GEMM_OWN = 0, MOE_GEMM_CUBLAS = 1, MOE_GEMM_MIXED = 2 };
int moe_gemm_mode(int E);

// The host copy of offsets (E + 1 ints, device memory). forward = 1: copies them now (one
// cudaMemcpyAsync and a stream synchronization), checks that they do not decrease, keeps the copy
// under (offsets, E) and returns it. forward = 0 (the backward): the copy the last forward at
// this pointer made (when that forward only issued it, moe_cublas_offsets_async: one
// cudaEventSynchronize on the copy's event, then the check), or a new copy (one more
// synchronization) where there is none (a table of the last 128 pointers: one per MoE layer; an
// entry goes when the backend frees the buffer holding its pointer, moe_cublas_forget). The
// backward's offsets must be the ones its forward saw (they are part of the forward's saved
// state, as hp and ap are); the GEMMs trap where they are not. Valid until the next call.
const int *moe_cublas_offsets(const int *offsets, int E, int forward);

// The mixed mode's forward: issues the copy of offsets into the entry of (offsets, E) (pinned
// host memory, so the copy is asynchronous) and records an event after it; nothing waits. The
// backward's moe_cublas_offsets(offsets, E, 0) waits for the event.
void moe_cublas_offsets_async(const int *offsets, int E);

// Forgets the host copies of offsets inside the device buffer [p, p + bytes) (kernels/
// backend_cuda.cu, as it frees the buffer): an address that a new buffer reuses never meets
// a copy of the old buffer's offsets.
void moe_cublas_forget(const void *p, size_t bytes);

// 1 when the operands suit cuBLAS (every pointer 16-byte aligned, d0 and d1 multiples of 8):
// what moe_cublas_rows checks before running.
int moe_cublas_suits(const void *a, const void *b, const void *c, int d0, int d1);

// Y (rows, n_out) = X (rows, kd) W_e^T per expert (W_e stored (n_out, kd), or (kd, n_out) with
// w_t), as experts.cu's rows_gemm. hoff: moe_cublas_offsets' copy of offsets. Returns 0 and does
// nothing when the operands do not suit cuBLAS (a pointer not 16-byte aligned, or n_out or kd
// not a multiple of 8): the caller then runs its own kernel.
int moe_cublas_rows(bf16 *Y, const bf16 *X, const bf16 *W, const int *hoff, const int *offsets, int E, int n_out,
                    int kd, int w_t);

// dW_e (P, Q) += G_e^T X_e per expert with rows (G (rows, P), X (rows, Q), as experts.cu's wgrad;
// dW fp32): one cublasGemmEx per expert (bf16 A and B, fp32 C; the grouped call has no fp32 C).
// Returns 0 and does nothing when the operands do not suit cuBLAS (moe_cublas_suits: P, Q
// multiples of 8, 16-byte aligned pointers): the caller then runs its own kernel.
int moe_cublas_wgrad(float *dW, const bf16 *G, const bf16 *X, const int *hoff, const int *offsets, int E, int P,
                     int Q);


// (the switch itself and its counters for the tests: kernels/cuda_backend.h, cuda_moe_*)

#endif
