// The MoE experts' grouped row GEMMs on Hopper's warpgroup MMA (kernels/moe/experts_wg.cu), the
// alternative to experts.cu's mma.sync row GEMMs that HYBRID_MOE_WGMMA=1 selects.
#ifndef HYBRID_KERNELS_MOE_EXPERTS_WG_H
#define HYBRID_KERNELS_MOE_EXPERTS_WG_H

#include "kernels/common.cuh"

// 1 when the switch is on (HYBRID_MOE_WGMMA=1, strict 0/1; the tests' cuda_moe_set_wgmma). On,
// with a GPU other than compute capability 9.0, stops the run naming the switch.
int moe_wgmma_on(void);

// Y (rows, n_out) = X (rows, kd) W_e^T per expert, W_e stored (n_out, kd) (w_t = 0) or
// (kd, n_out) (w_t = 1), as experts.cu's rows_gemm. Returns 0 and does nothing when the switch is
// off or the operands do not suit the kernel (a pointer not 16-byte aligned, n_out or kd not a
// multiple of 8): the caller then runs its own.
int moe_wg_rows(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd, int w_t);

#endif
