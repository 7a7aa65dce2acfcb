// Workspace sizes of the CUDA delta-rule family (kernels/delta_rule/): each core states the
// bytes its chunkwise forward (backward = 0) or backward (1) needs for up to nseq sequences
// over B*T tokens; linear_workspace_size (workspace.cu) answers for the table by kind.
#ifndef HYBRID_KERNELS_DELTA_RULE_WORKSPACE_CUH
#define HYBRID_KERNELS_DELTA_RULE_WORKSPACE_CUH

#include <stddef.h>

#include "model/ops/delta_rule/delta_rule.h"

// the delta rule (kind LINEAR_DELTANET, LINEAR_GDN or LINEAR_KDA): chunk_fwd.cu / chunk_bwd.cu
size_t delta_chunk_workspace_bytes(LinearKind kind, int backward, int B, int T, int H, int K, int V, int nseq,
                                   int chunk);
// ELU+1 linear attention (kind LINEAR_ATTN): linear_attn.cu
size_t linear_attn_workspace_bytes(int backward, int B, int T, int H, int K, int V, int nseq, int chunk);

#endif
