// The CUDA MLA sub-table (model/ops/mla/mla.h), filled from MLA_OPS: the attention
// (attention.cu with attention_mma.cu / attention_simt.cu), RoPE (rope.cu), the latent pieces
// (latent.cu), the absorbed decode step (absorbed.cu) and the output gate (sigmoid_gate.cu).
// Not handed to the backend yet (kernels/backend_cuda.cu leaves b.mla NULL until the parity
// test tests/gpu/test_mla.c has passed on a GPU); the test takes the table from here.
#include "kernels/common.cuh"

extern "C" const MlaOps *cuda_mla_ops(void) {
    static MlaOps t;
#define ENTRY(member) t.member = cuda_##member;
    MLA_OPS(ENTRY)
#undef ENTRY
    return &t;
}
