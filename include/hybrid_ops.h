// C API of hybrid.c's CPU reference ops, for other programs that call the forward and
// backward of an op on their own buffers (C, or Python through ctypes). `make lib`
// builds two shared libraries from model/ops/ (everything but the backend table):
//   out/lib/libhybrid_ops.so       real = float
//   out/lib/libhybrid_ops_f64.so   real = double   (compile against it with -DREAL_DOUBLE)
// and this header declares their functions (compile with -I<repo root>):
//   model/ops/linear_ops.h   KDA / GDN / DeltaNet / linear attention: recurrent and
//                            chunkwise forward + backward, decode steps, short conv,
//                            L2 norm, gates, beta, gated RMSNorm (kda-spec)
//   model/ops/ops_cpu.h      GPT-2 ops: embed, layernorm, matmul, attention, GELU, ...
//   model/ops/block_ops.h    RMSNorm, GLU, MLA, MoE, AttnRes ops (blocks-spec)
// Conventions: row-major `real` buffers owned by the caller; forwards write outputs,
// backwards write input gradients and ACCUMULATE parameter gradients; workspaces
// (where an op takes one) are caller memory of the size its *_workspace_size() says.
// Ops run OpenMP-parallel (OMP_NUM_THREADS) and are deterministic. On invalid shapes an
// op prints "hybrid: error: ..." and exits the process (it never returns an error code).
//
// ctypes sketch (float library, KDA chunkwise forward, B=1 T=8 H=1 K=V=4):
//   lib = ctypes.CDLL("out/lib/libhybrid_ops.so"); assert lib.hybrid_ops_real_bytes() == 4
//   LinearDims is a struct of 5 ints, a pointer and an int (B, T, H, K, V, offsets, nseq);
//   lib.kda_chunk_fwd_workspace_size(byref(d), 64) gives the workspace bytes.
#ifndef HYBRID_OPS_API_H
#define HYBRID_OPS_API_H

#include "model/ops/block_ops.h"
#include "model/ops/linear_ops.h"
#include "model/ops/ops_cpu.h"

// sizeof(real) of the library: 4 (libhybrid_ops.so) or 8 (libhybrid_ops_f64.so)
int hybrid_ops_real_bytes(void);

#endif
