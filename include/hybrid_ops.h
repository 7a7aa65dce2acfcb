// C API of hybrid.c's CPU reference ops, for other programs that call the forward and
// backward of an op on their own buffers (C, or Python through ctypes). `make lib`
// builds two shared libraries from model/ops/ (everything but the backend table):
//   out/lib/libhybrid_ops.so       real = float
//   out/lib/libhybrid_ops_f64.so   real = double   (compile against it with -DREAL_DOUBLE)
// and this header declares their functions (compile with -I<repo root>), one header per
// op family (docs/architecture.md, "Op families"): each declares the family's backend
// contract (the <Family>Ops struct), its CPU reference cpu_<member> and any reference
// functions beyond the table:
//   model/ops/core/core.h              GPT-2 ops: embed, layernorm, matmul, attention, GELU, ...
//   model/ops/norm_glu/norm_glu.h      RMSNorm, SwiGLU / SiTU
//   model/ops/norm_glu/glu_mlp.h       the GLU MLP (matmul, SwiGLU / SiTU, matmul) on op
//                                      tables: pass cpu_core_ops(), cpu_norm_glu_ops()
//   model/ops/delta_rule/delta_rule.h  KDA / GDN / DeltaNet / linear attention: recurrent and
//                                      chunkwise forward + backward, decode steps, short conv,
//                                      L2 norm, gates, beta, gated RMSNorm
//   model/ops/mla/mla.h                MLA pieces, strided attention, RoPE, sigmoid gate
//   model/ops/moe/moe.h                MoE router, balancing, dispatch, experts
//   model/ops/attnres/attnres.h        Block AttnRes
//   model/ops/optim/optim.h, muon.h    AdamW, Muon
// Conventions: row-major `real` buffers owned by the caller; forwards write outputs,
// backwards write input gradients and ACCUMULATE parameter gradients; workspaces
// (where an op takes one) are caller memory of the size its *_workspace_size() says.
// Ops run OpenMP-parallel (OMP_NUM_THREADS) and are deterministic. On invalid shapes an
// op prints "hybrid: error: ..." and exits the process (it never returns an error code).
//
// ctypes sketch (float library, KDA chunkwise forward, B=1 T=8 H=1 K=V=4):
//   lib = ctypes.CDLL("out/lib/libhybrid_ops.so"); assert lib.hybrid_ops_real_bytes() == 4
//   LinearDims is a struct of 5 ints, a pointer and an int (B, T, H, K, V, offsets, nseq);
//   lib.delta_chunk_fwd_workspace_size(byref(d), 64) gives the workspace bytes.
#ifndef HYBRID_OPS_API_H
#define HYBRID_OPS_API_H

#include "model/ops/attnres/attnres.h"
#include "model/ops/core/core.h"
#include "model/ops/delta_rule/delta_rule.h"
#include "model/ops/mla/mla.h"
#include "model/ops/moe/moe.h"
#include "model/ops/norm_glu/glu_mlp.h"
#include "model/ops/norm_glu/norm_glu.h"
#include "model/ops/optim/muon.h"
#include "model/ops/optim/optim.h"

// sizeof(real) of the library: 4 (libhybrid_ops.so) or 8 (libhybrid_ops_f64.so)
int hybrid_ops_real_bytes(void);

#endif
