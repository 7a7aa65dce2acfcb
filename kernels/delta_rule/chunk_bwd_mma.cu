// Chunkwise backward of KDA / GDN / DeltaNet on tensor cores (the table's backward,
// cuda_delta_chunk_backward): the forward's tensor-core prep and walk recompute the chunk
// states (chunk_fwd_mma.cu, with T kept for this pass), a reverse walk on tensor cores carries
// the state gradient (chunk_bwalk_mma.cu), and chunk-parallel kernels form the per-chunk
// gradients: the grad1 / grad2 pair (chunk_grad1_mma.cu, chunk_grad2_mma.cu), or under
// HYBRID_DR_GRAD_REF=1 the single reference kernel (chunk_grad_ref_mma.cu). docs/delta-rule.md,
// "Chunkwise backward" and "CUDA kernels". The decomposition and the workspace layout (DrWsMma): chunk.cuh.
#include "kernels/delta_rule/chunk.cuh"

// HYBRID_DR_GRAD_REF=1: the single gradient kernel (read at each call, so a test can switch)
static int dr_grad_ref(void) { return env_flag("HYBRID_DR_GRAD_REF"); }

extern "C" void cuda_delta_chunk_backward(LinearKind kind, real *dq, real *dk, real *dv, real *dg, real *dbeta,
                                          real *dh0, const real *dout, const real *dhT, const real *q, const real *k,
                                          const real *v, const real *g, const real *beta, const real *h0, real scale,
                                          int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
                                          void *workspace) {
    PROFILE("delta_chunk_bwd");
    dr_check_args("delta_chunk_backward", kind, B, T, H, K, V, offsets, nseq, chunk);
    const int N = offsets ? nseq : B, gate = dr_gate_of(kind);
    if (N == 0) return;
    const size_t slots = dr_num_slots(B, T, N);
    DrWsMma ws;
    dr_ws_mma_bind(&ws, workspace, 1, slots * H, K, V);
    // one MMA a product (the default; chunk.cuh, dr_mma3x) in the recomputation, the reverse walk
    // and grad1, or the split products under HYBRID_DR_BF16=0 (grad2's products are one MMA in
    // both); the single reference kernel runs the split arithmetic only
    ws.lo = dr_arith_lo();
    if (!ws.lo && dr_grad_ref())
        die("delta_chunk_backward: HYBRID_DR_GRAD_REF=1 (the single gradient kernel) runs the split arithmetic "
            "only; set HYBRID_DR_BF16=0 with it");
    dr_forward_mma(gate, NULL, NULL, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)g,
                   (const bf16 *)beta, (const float *)h0, scale, B, T, H, K, V, offsets, N, &ws);
    {
        PROFILE("delta_chunk/bwalk");
        dr_bwalk_launch(&ws, (float *)dh0, (const float *)dhT, (const bf16 *)dout, scale, T, H, K, V, offsets, N);
    }
    {
        PROFILE("delta_chunk/grad");
        if (slots > 0 && dr_grad_ref())
            dr_grad_ref_launch(&ws, slots, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (bf16 *)dg, (bf16 *)dbeta,
                               (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, (const bf16 *)g,
                               (const bf16 *)beta, gate, scale, T, H, K, V, offsets, N);
        else if (slots > 0) {
            dr_grad1_launch(&ws, slots, (bf16 *)dv, (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k,
                            (const bf16 *)v, (const bf16 *)g, (const bf16 *)beta, gate, scale, T, H, K, V, offsets, N);
            dr_grad2_launch(&ws, slots, (bf16 *)dq, (bf16 *)dk, (bf16 *)dg, (bf16 *)dbeta, (const bf16 *)q,
                            (const bf16 *)k, (const bf16 *)g, (const bf16 *)beta, gate, T, H, K, offsets, N);
        }
    }
}
