// linear_workspace_size of the CUDA delta-rule family: the bytes each core's chunkwise
// forward or backward needs (kernels/delta_rule/workspace.cuh), by kind.
#include "kernels/common.cuh"
#include "kernels/delta_rule/workspace.cuh"

extern "C" size_t cuda_linear_workspace_size(LinearKind kind, int backward, int B, int T, int H, int K, int V,
                                             int nseq, int chunk) {
    if (kind == LINEAR_ATTN) return linear_attn_workspace_bytes(backward, B, T, H, K, V, nseq, chunk);
    return delta_chunk_workspace_bytes(kind, backward, B, T, H, K, V, nseq, chunk);
}
