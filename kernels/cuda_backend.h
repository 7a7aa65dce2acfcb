// C-callable extras of the CUDA backend (beyond the Backend table of model/backend.h):
// per-op timing and memory counts, for tests/gpu and the benchmark.
#ifndef HYBRID_CUDA_BACKEND_H
#define HYBRID_CUDA_BACKEND_H

#include <stddef.h>
#include <stdio.h>

#include "model/ops/mla/mla.h"

#ifdef __cplusplus
extern "C" {
#endif

int cuda_device_count(void);  // 0 when there is no usable device (kernels/device.cu)
// One GPU per rank of a distributed run: local rank r of local_world takes device r, and dies if
// the node has fewer visible devices than ranks (device.cu).
void cuda_select_device(int local_rank, int local_world);

// HYBRID_CUDA_PROFILE=1 in the environment times every op with CUDA events.
int cuda_profile_enabled(void);
void cuda_profile_reset(void);
// Per-op table (ms per step over `steps` steps), largest first. Synchronizes.
void cuda_profile_print(FILE *f, int steps);
// Turns the timing on or off from the program (overriding HYBRID_CUDA_PROFILE; a benchmark times
// its repetitions without it, then profiles a few more).
void cuda_profile_set(int on);
// The totals since the last reset (synchronizes): up to max ops and parts that ran, each its
// name (a static string; a '/' marks a part of an op, already inside the op's time), its ms
// and its calls. Returns how many were written.
int cuda_profile_read(const char **names, double *ms, long *calls, int max);

// Bytes held by backend allocations now and at most so far; bytes in use on the
// device (all users, the CUDA context included) and its total.
void cuda_memory_stats(size_t *live, size_t *peak, size_t *device_used, size_t *device_total);

// CUDA events on the backend's stream (kernels/timer.cu; not in the CPU emulator):
// cuda_timer_start records the start; cuda_timer_stop_ms records the stop, waits for it and
// returns the milliseconds between the two (the device time of the work queued in between).
void cuda_timer_start(void);
double cuda_timer_stop_ms(void);

// cuDNN attention (kernels/core/attention_cudnn.cu): whether this build has it (0 in the CPU
// emulator and in builds without cudnn.h), cuDNN's version (cudnnGetVersion, 0 without), the
// implementation switch (1 cuDNN, 0 ours, -1 follow HYBRID_ATTN), how many attention calls
// ran cuDNN so far, and a probe: builds (or finds) the plan of layout L, forward or backward,
// without running it; 1 if it finalized, with the engine in msg, else 0 and cuDNN's reason.
int cuda_attention_cudnn_built(void);
size_t cuda_cudnn_version(void);
void cuda_attention_set_cudnn(int on);
long cuda_attention_cudnn_runs(void);
int cuda_attention_cudnn_probe(const AttnLayout *L, int backward, char *msg, size_t n);

// crossentropy_forward_backward: 1 the fused kernel, 0 the separate ones, -1 as the environment
// says (HYBRID_CUDA_FUSED_CE; kernels/core/crossentropy.cu)
void cuda_crossentropy_set_fused(int on);

// matmul_backward_gelu's dpre_bias (the GELU MLP's up-projection bias gradient): 1 from cuBLASLt's
// DGELU_BGRAD epilogue, 0 the column-sum kernel, -1 as the environment says
// (HYBRID_CUDA_DGELU_BGRAD; kernels/core/matmul.cu); and the path the last call with a dpre_bias
// took: 0 the column-sum kernel, 1 the epilogue (its fp32 sum), -1 no such call yet
void cuda_matmul_set_dgelu_bgrad(int on);
int cuda_matmul_dgelu_bgrad_path(void);

// The MoE expert GEMMs (kernels/moe/experts.cu): mode 0 our grouped kernels, 1 cuBLAS (the four
// row GEMMs on its grouped batched GEMM, the two fp32 weight gradients as one cublasGemmEx per
// expert: kernels/moe/experts_cublas.cu), 2 mixed (each GEMM on ours or on cuBLAS by
// experts.cu's rule, which depends on the shape and on whether ours run on wgmma), -1 as
// HYBRID_MOE_GEMM says (the default; unset = mixed). cuda_moe_gemm_name: "own", "cublas" or
// "mixed", what a call of 1 to 512 experts runs now. cuda_moe_gemm_on_cublas: 1 when GEMM g
// (0 fwd13, 1 fwd2, 2 dgrad2, 3 wgrad2, 4 dgrad13, 5 wgrad13) of shape (E, C, M) goes to cuBLAS
// in the current mode (operands that do not suit cuBLAS aside: those run ours).
// cuda_moe_set_mixed_wgrad (tests): the mixed mode's weight gradients by the rule (-1, the
// default), all on ours (0) or all on cuBLAS (1). The counters (since the start): GEMM calls that
// ran on cuBLAS (a weight gradient's per-expert calls count one); the copies of the offsets to
// the host (cublas: one stream synchronization each; mixed: issued asynchronously by the
// forward); and the backward's waits for such an asynchronous copy (one event synchronization).
void cuda_moe_set_gemm(int mode);
const char *cuda_moe_gemm_name(void);
int cuda_moe_gemm_on_cublas(int g, int E, int C, int M);
void cuda_moe_set_mixed_wgrad(int mode);
long cuda_moe_cublas_calls(void);
long cuda_moe_offsets_copies(void);
long cuda_moe_offsets_waits(void);
// The MoE gather and combine (kernels/moe/dispatch.cu): 1 (the default) runs the vector kernels
// where the width and the pointers allow them, 0 always the scalar ones (tests compare the two
// bit for bit); the counter: calls that ran a vector kernel (since the start).
void cuda_moe_set_dispatch_vec(int on);
long cuda_moe_dispatch_vec_launches(void);
// The expert GLU passes (kernels/moe/experts.cu) likewise: 1 (the default) the vector kernels
// where M % 8 == 0 and the buffers are 16-byte aligned, 0 always the scalar ones; the counter:
// calls that ran a vector kernel.
void cuda_moe_set_glu_vec(int on);
long cuda_moe_glu_vec_launches(void);
// The expert GEMMs that run ours (the mixed mode: the four row GEMMs and the weight gradients
// its rule keeps off cuBLAS; the own mode: all six) on Hopper's warpgroup MMA
// (kernels/moe/experts_wg.cu): 1 on, 0 off, -1 as HYBRID_MOE_WGMMA says (the default; unset =
// auto: on where the GPU is compute capability 9.0); the counter: GEMM calls that ran a wgmma
// kernel (since the start).
void cuda_moe_set_wgmma(int on);  // (1 on a GPU other than compute capability 9.0 stops the run)
int cuda_moe_wgmma_supported(void);  // 1 on compute capability 9.0 (and under the emulator)
int cuda_moe_wgmma(void);  // 1 when our expert GEMMs run on wgmma now
long cuda_moe_wgmma_launches(void);
// their tile width: 128 or 256 forces it, -1 as HYBRID_MOE_WG_BN says (unset: 256)
void cuda_moe_set_wg_bn(int bn);
// the experts' GLU fused into the wgmma GEMMs around it: 0 off (the separate passes, the default;
// tests' bit comparison), 1 on, -1 as HYBRID_MOE_WG_GLU_FUSED says (unset: off)
void cuda_moe_set_wg_glu(int on);
// the warp-specialized wgmma GEMMs (kernels/moe/grouped_gemm_ws.cuh; at tile width 256 only): 0 off,
// 1 the row GEMMs, 2 those and our weight gradients, 3 auto (every row GEMM with the plain store,
// weights and whole tiles' rows by TMA, stored staged; every weight gradient, its whole k-steps by
// TMA), -1 as HYBRID_MOE_WG_WS says (auto, 0, rows,
// all; unset: auto); the counter: GEMM calls that ran a warp-specialized kernel
void cuda_moe_set_wg_ws(int level);
int cuda_moe_wg_ws(void);  // the level now (reads the switch)
long cuda_moe_wg_ws_launches(void);
// their copies by TMA (kernels/tma.cuh) at levels 1 and 2: 1 the row GEMMs' expert weights, 2 those
// and whole tiles' rows, and at level 2 the weight gradients' whole k-steps (both their operands
// are rows), 0 none, -1 as HYBRID_MOE_WG_TMA says (unset: none; auto chooses its own); the
// counters: row GEMM calls that ran TMA, those with the rows by TMA, and weight gradients by TMA
void cuda_moe_set_wg_tma(int level);
int cuda_moe_wg_tma(void);  // the level now (reads the switch)
long cuda_moe_wg_tma_launches(void);
long cuda_moe_wg_tma_rows_launches(void);
long cuda_moe_wg_tma_wgrad_launches(void);
// their row GEMMs' plain store through shared memory (16-byte row segments) at levels 1 and 2: 1
// staged, 0 from registers, -1 as HYBRID_MOE_WG_WS_STORE says (direct or staged; unset: direct;
// auto chooses staged itself); the counter: row GEMM calls that ran it
void cuda_moe_set_wg_ws_staged(int on);
int cuda_moe_wg_ws_staged(void);  // 1 when it is on now (reads the switch)
long cuda_moe_wg_ws_staged_launches(void);

#ifdef HYBRID_CUDA_EMU
// The CPU emulator's GPU as another compute capability (major * 10 + minor; the emulator
// reports 9.0): the tests of what a switch does on another GPU (HYBRID_MOE_WGMMA's auto and its
// refusal). Call before the first use of the switch.
void cuda_emu_set_cc(int cc);
#endif

#ifdef __cplusplus
}
#endif

#endif
