// The MoE experts' grouped GEMMs on Hopper's warpgroup MMA (kernels/moe/experts_wg.cu), the
// alternative to experts.cu's mma.sync kernels, on by default on compute capability 9.0
// (HYBRID_MOE_WGMMA).
#ifndef HYBRID_KERNELS_MOE_EXPERTS_WG_H
#define HYBRID_KERNELS_MOE_EXPERTS_WG_H

#include "kernels/common.cuh"

// 1 when the wgmma kernels run: HYBRID_MOE_WGMMA=auto (the default) on a GPU of compute
// capability 9.0, or =1 (the tests: cuda_moe_set_wgmma). =1 with another GPU stops the run naming
// the switch; =0 is off.
int moe_wgmma_on(void);

// Y (rows, n_out) = X (rows, kd) W_e^T per expert, W_e stored (n_out, kd) (w_t = 0) or
// (kd, n_out) (w_t = 1), as experts.cu's rows_gemm. Returns 0 and does nothing when the switch is
// off or the operands do not suit the kernel (a pointer not 16-byte aligned, n_out or kd not a
// multiple of 8): the caller then runs its own.
int moe_wg_rows(bf16 *Y, const bf16 *X, const bf16 *W, const int *offsets, int E, int n_out, int kd, int w_t);

// dW_e (P, Q) += G_e^T X_e over each expert's rows (G (rows, P), X (rows, Q); dW fp32, a parameter
// gradient), as experts.cu's wgrad. Returns 0 and does nothing where moe_wg_rows would (P, Q for n_out, kd); else the split
// count S (force_splits > 0: that many, the tests' cuda_moe_set_wgrad_split; else the kernel's own
// shape rule): S == 1, dW holds the result; S > 1, *ws (the backend's scratch) holds the splits'
// fp32 partials (E, S, P, Q), which the caller reduces into dW in split order (experts.cu's
// wgrad_reduce_kernel, the splits cut by grouped_walk.cuh's wgrad_split_rows).
int moe_wg_wgrad(float *dW, float **ws, const bf16 *G, const bf16 *X, const int *offsets, int E, int P, int Q,
                 int force_splits);

// The GLU fused into the GEMMs around it (experts_wg.cu, "the GLU fused"): hp = xp W13_e^T with
// ap = glu(hp) (the forward's fwd13 and GLU pass), and dhp = glu'(hp) (dyp W2_e) (the backward's
// dgrad2 and GLU pass; dap not written). kind, beta, lbeta: the GLU's (glu.cuh). Return 0 and do
// nothing where the wgmma kernels are off, the fusion is off (the default: HYBRID_MOE_WG_GLU_FUSED
// unset; the tests force it), the shape does not suit
// (forward: M a multiple of half the tile width; both: C, M multiples of 8) or a pointer is not
// 16-byte aligned: the caller then runs the GEMM and the GLU pass apart.
int moe_wg_rows_glu(bf16 *hp, bf16 *ap, const bf16 *xp, const bf16 *w13, const int *offsets, int E, int C, int M,
                    int kind, float beta, float lbeta);
int moe_wg_rows_dglu(bf16 *dhp, const bf16 *dyp, const bf16 *w2, const bf16 *hp, const int *offsets, int E, int C,
                     int M, int kind, float beta, float lbeta);

#endif
