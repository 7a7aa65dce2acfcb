// The linear-attention backend entries on the CPU: unpack the plain-integer shapes of
// the backend contract into LinearDims and call the reference ops of delta_rule.h
// (chunkwise forms for training, docs/delta-rule.md, "Chunkwise forward" and "Chunkwise
// backward"; the recurrent step for decoding, docs/delta-rule.md, "Decode steps").
#include "model/ops/delta_rule/delta_rule.h"
#include "base/util.h"

static LinearDims dims(int B, int T, int H, int K, int V, const int *offsets, int nseq) {
    return offsets ? linear_dims_varlen(T, H, K, V, offsets, nseq) : linear_dims(B, T, H, K, V);
}

size_t cpu_linear_workspace_size(LinearKind kind, int backward, int B, int T, int H, int K, int V, int nseq, int chunk) {
    // sized through the varlen form: N = nseq sequences over the B*T rows
    int one = 0;  // any non-NULL offsets pointer: only nseq and the row count matter for the size
    LinearDims d = linear_dims_varlen(B * T, H, K, V, &one, nseq);
    if (kind == LINEAR_ATTN)
        return backward ? linear_attn_chunk_bwd_workspace_size(&d, chunk) : linear_attn_chunk_fwd_workspace_size(&d, chunk);
    return backward ? delta_chunk_bwd_workspace_size(&d, chunk) : delta_chunk_fwd_workspace_size(&d, chunk);
}

void cpu_delta_chunk_forward(LinearKind kind, real *o, real *hT, const real *q, const real *k, const real *v,
                             const real *g, const real *beta, const real *h0, real scale, int B, int T, int H, int K,
                             int V, const int *offsets, int nseq, int chunk, void *workspace) {
    LinearDims d = dims(B, T, H, K, V, offsets, nseq);
    switch (kind) {
    case LINEAR_KDA: kda_chunk_forward(o, hT, q, k, v, g, beta, h0, scale, &d, chunk, workspace); break;
    case LINEAR_GDN: gdn_chunk_forward(o, hT, q, k, v, g, beta, h0, scale, &d, chunk, workspace); break;
    case LINEAR_DELTANET: deltanet_chunk_forward(o, hT, q, k, v, beta, h0, scale, &d, chunk, workspace); break;
    default: die("delta_chunk_forward: bad kind %d", kind);
    }
}

void cpu_delta_chunk_backward(LinearKind kind, real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0,
                              const real *dout, const real *dhT, const real *q, const real *k, const real *v,
                              const real *g, const real *beta, const real *h0, real scale, int B, int T, int H,
                              int K, int V, const int *offsets, int nseq, int chunk, void *workspace) {
    LinearDims d = dims(B, T, H, K, V, offsets, nseq);
    switch (kind) {
    case LINEAR_KDA:
        kda_chunk_backward(dq, dk, dv, dg, dbeta, dh0, dout, dhT, q, k, v, g, beta, h0, scale, &d, chunk, workspace);
        break;
    case LINEAR_GDN:
        gdn_chunk_backward(dq, dk, dv, dg, dbeta, dh0, dout, dhT, q, k, v, g, beta, h0, scale, &d, chunk, workspace);
        break;
    case LINEAR_DELTANET:
        deltanet_chunk_backward(dq, dk, dv, dbeta, dh0, dout, dhT, q, k, v, beta, h0, scale, &d, chunk, workspace);
        break;
    default: die("delta_chunk_backward: bad kind %d", kind);
    }
}

void cpu_delta_step(LinearKind kind, real *o, real *state, const real *q, const real *k, const real *v, const real *g,
                    const real *beta, real scale, int N, int H, int K, int V) {
    switch (kind) {
    case LINEAR_KDA: kda_step(o, state, q, k, v, g, beta, scale, N, H, K, V); break;
    case LINEAR_GDN: gdn_step(o, state, q, k, v, g, beta, scale, N, H, K, V); break;
    case LINEAR_DELTANET: deltanet_step(o, state, q, k, v, beta, scale, N, H, K, V); break;
    default: die("delta_step: bad kind %d", kind);
    }
}

void cpu_linear_attn_chunk_forward(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                                   const real *S0, const real *z0, real scale, int normalize, int B, int T, int H,
                                   int K, int V, const int *offsets, int nseq, int chunk, void *workspace) {
    LinearDims d = dims(B, T, H, K, V, offsets, nseq);
    linear_attn_chunk_forward(o, ST, zT, q, k, v, S0, z0, scale, normalize, &d, chunk, workspace);
}

void cpu_linear_attn_chunk_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                    const real *dST, const real *dzT, const real *q, const real *k, const real *v,
                                    const real *S0, const real *z0, real scale, int normalize, int B, int T, int H,
                                    int K, int V, const int *offsets, int nseq, int chunk, void *workspace) {
    LinearDims d = dims(B, T, H, K, V, offsets, nseq);
    linear_attn_chunk_backward(dq, dk, dv, dS0, dz0, dout, dST, dzT, q, k, v, S0, z0, scale, normalize, &d, chunk,
                               workspace);
}
