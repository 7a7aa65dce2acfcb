// The delta-rule family (docs/delta-rule.md): KDA, Gated DeltaNet (GDN), DeltaNet and plain
// (ELU+1, normalised) linear attention, the token mixers K, G, D and L. Each core has a
// recurrent and a chunkwise form with hand-derived backward passes and a single-token
// decode step; the layer ops around the cores (short conv + SiLU, L2 norm, the decay gate,
// beta, the gated output RMSNorm) complete the layers of model/mixer_linear*.c.
//
// Files (model/ops/delta_rule/): this header (the backend contract DeltaRuleOps and the
// reference API); entries.c (the backend entries: plain-integer shapes -> LinearDims, kind
// -> KDA / GDN / DeltaNet); chunk_fwd.c, chunk_bwd.c, chunk_common.c (the chunkwise delta
// rule, shared by KDA, GDN and DeltaNet); recurrent.c (the recurrent reference and the
// decode steps); linear_attn.c; short_conv.c; layer_ops.c; checks.c; internal.h; table.c.
// CUDA: kernels/delta_rule/ (docs/delta-rule.md, "CUDA kernels"): q, k, v, g, beta, o and their
// gradients bf16; states (h0, hT, decode states, conv states) and rstd fp32.
//
// ---- Layout (fla's; docs/delta-rule.md, "Notation and tensor layout") --------------
//   q, k           (B, T, H, K)      element (b,t,h,i) at ((b*T+t)*H+h)*K+i
//   g  (KDA)       (B, T, H, K)      per-channel log-decay, g <= 0
//   g  (GDN)       (B, T, H)         per-head scalar log-decay, g <= 0
//   v, o           (B, T, H, V)
//   beta           (B, T, H)         post-sigmoid learning rate
//   h0, hT         (N, H, K, V)      state S[i][j], i = key channel, j = value channel
//                                     (fla's state_v_first=False), o_t = S_t^T (scale q_t)
// One head count H for q/k and v (no GVA: with HV > H the caller repeats q,k per value
// head and sums dq, dk over the group; docs/delta-rule.md, "Notation and tensor layout").
//
// ---- Sequences and document boundaries ----------------------------------------------
// The token axis is flattened to B*T rows. Every sequence is a contiguous row range
// [bos, eos) processed independently with its own initial and final state:
//   offsets == NULL : N = B sequences, sequence b = rows [b*T, b*T+T).
//   offsets != NULL : requires B == 1; N = nseq sequences (documents), sequence s =
//                     rows [offsets[s], offsets[s+1]), offsets[0] = 0,
//                     offsets[nseq] = T, non-decreasing (empty segments allowed).
//                     This is FlashAttention's cu_seqlens convention (docs/delta-rule.md,
//                     "Packed sequences (cu_seqlens offsets)").
// The state resets at every sequence start to h0[s] (or to zero when h0 == NULL), and
// hT[s] / dh0[s] / dhT[s] are per sequence. Chunks never straddle a sequence boundary:
// chunk 0 of each sequence starts at its bos and its last chunk may be partial.
//
// ---- Conventions --------------------------------------------------------------------
// Op contract (model/backend.h): forwards write outputs, backwards WRITE input
// gradients and ACCUMULATE (+=) parameter gradients (only the layer ops have
// parameters: conv weight/bias, A_log, dt_bias, norm weight). Optional tensors may be
// NULL: h0 (zero initial state), hT (not returned), dhT (zero), dh0 (not wanted),
// and where stated. The ops allocate nothing: scratch comes from a caller workspace
// sized by the matching *_workspace_size() (bytes, suitably aligned for double).
// Internally states, cumulative gates and all accumulators are double; inputs and
// outputs are `real`. Parallel (OpenMP) over (sequence, head) or rows/channels; every
// output element is computed in a fixed order, so results do not depend on the number
// of threads. The chunkwise backwards recompute the forward (fla's recompute mode;
// docs/delta-rule.md, "Recomputation in the backward"), so the forwards save nothing
// beyond their outputs.
#ifndef HYBRID_OPS_DELTA_RULE_H
#define HYBRID_OPS_DELTA_RULE_H

#include <stddef.h>

#include "base/real.h"
#include "model/ops/op_table.h"

typedef struct {
    int B, T;            // batch and time: the flattened token axis has B*T rows
    int H, K, V;         // heads, key head dim, value head dim
    const int *offsets;  // NULL, or (B == 1) nseq+1 sequence offsets over the T axis
    int nseq;            // number of sequences when offsets != NULL
} LinearDims;

static inline LinearDims linear_dims(int B, int T, int H, int K, int V) {
    LinearDims d = {B, T, H, K, V, NULL, 0};
    return d;
}
static inline LinearDims linear_dims_varlen(int T, int H, int K, int V, const int *offsets, int nseq) {
    LinearDims d = {1, T, H, K, V, offsets, nseq};
    return d;
}
// N, the number of sequences (and of initial / final states)
static inline int linear_num_seqs(const LinearDims *d) { return d->offsets ? d->nseq : d->B; }

// Which member of the family an entry runs (docs/delta-rule.md, "The four recurrences"): the
// delta rule without a decay (DeltaNet), with a per-head scalar decay g (B,T,H) (GDN), or with
// a per-channel decay g (B,T,H,K) (KDA); or plain ELU+1 linear attention.
typedef enum { LINEAR_DELTANET, LINEAR_GDN, LINEAR_KDA, LINEAR_ATTN } LinearKind;

// ---- The backend contract ----------------------------------------------------------
// Tokens are the flattened B*T rows. offsets == NULL: B sequences of T tokens; else B == 1
// and offsets (backend memory, nseq+1 ints) cut the T axis into nseq sequences
// (cu_seqlens). States reset at every sequence start (h0 == NULL: zero state). Decode
// states are statistics elements (stat_size: fp32 on CUDA).
typedef struct DeltaRuleOps {
    // Workspace bytes of the chunkwise forward (backward 0) or backward (1) for up to nseq
    // sequences over B*T tokens.
    size_t (*linear_workspace_size)(LinearKind kind, int backward, int B, int T, int H, int K, int V, int nseq,
                                    int chunk);
    // Chunkwise delta rule (docs/delta-rule.md, "Chunkwise forward" and "Chunkwise
    // backward"), kind LINEAR_DELTANET/GDN/KDA (g ignored for DeltaNet):
    // q, k (B,T,H,K) L2-normalised; v, o (B,T,H,V); beta (B,T,H); h0, hT (N,H,K,V) or NULL.
    void (*delta_chunk_forward)(LinearKind kind, real *o, real *hT, const real *q, const real *k, const real *v,
                                const real *g, const real *beta, const real *h0, real scale, int B, int T, int H,
                                int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
    // dq, dk, dv, dg, dbeta written (dg NULL for DeltaNet); dh0 (may be NULL) written.
    void (*delta_chunk_backward)(LinearKind kind, real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0,
                                 const real *dout, const real *dhT, const real *q, const real *k, const real *v,
                                 const real *g, const real *beta, const real *h0, real scale, int B, int T, int H,
                                 int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
    // One decode token for N sequences: q, k, g (N,H,K) [GDN g (N,H)], v, o (N,H,V),
    // beta (N,H); state (N,H,K,V) updated in place (the recurrence of docs/delta-rule.md,
    // "Kimi Delta Attention (KDA)").
    void (*delta_step)(LinearKind kind, real *o, real *state, const real *q, const real *k, const real *v,
                       const real *g, const real *beta, real scale, int N, int H, int K, int V);
    // Plain ELU+1 linear attention (docs/delta-rule.md, "Linear attention with the ELU+1
    // feature map", "Chunked linear attention", "Chunked linear-attention backward"), q and k
    // raw (feature map inside); state S (N,H,K,V), z (N,H,K); z unused when normalize == 0.
    void (*linear_attn_chunk_forward)(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                                      const real *S0, const real *z0, real scale, int normalize, int B, int T, int H,
                                      int K, int V, const int *offsets, int nseq, int chunk, void *workspace);
    void (*linear_attn_chunk_backward)(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                       const real *dST, const real *dzT, const real *q, const real *k,
                                       const real *v, const real *S0, const real *z0, real scale, int normalize,
                                       int B, int T, int H, int K, int V, const int *offsets, int nseq, int chunk,
                                       void *workspace);
    // Decode: q, k (N,H,K), v, o (N,H,V); S (N,H,K,V) and z (N,H,K) updated in place.
    void (*linear_attn_step)(real *o, real *S, real *z, const real *q, const real *k, const real *v, real scale,
                             int normalize, int N, int H, int K, int V);

    // Causal depthwise short convolution + optional SiLU (docs/delta-rule.md, "Short causal
    // convolution with SiLU"). x, y (B, T, D); weight w (D, W) with W <= 64 (fla: 4),
    // w[c][W-1] multiplies the current token (PyTorch's depthwise Conv1d weight (D, 1, W));
    // bias (D) or NULL. Sequences as above: the window never reaches into the previous
    // sequence.
    //   y[t][c] = act( bias[c] + sum_{j<W} w[c][j] * x[t-(W-1)+j][c] ),  act = SiLU or identity
    // Conv state (N, D, W-1): the W-1 inputs before the sequence, oldest first
    // (state[s][c][m] is the input at local time m-(W-1)). state_in NULL = zeros; state_out
    // (may be NULL) receives the last W-1 inputs of each sequence (taken from state_in where
    // the sequence is shorter than W-1). fla's decode cache is [N, D, W] holding W inputs;
    // ours omits the slot that is shifted out before use. The forward saves nothing (the
    // backward recomputes the pre-activation).
    void (*short_conv_forward)(real *y, real *state_out, const real *x, const real *w, const real *bias,
                               const real *state_in, int B, int T, int D, int W, const int *offsets, int nseq,
                               int silu);
    // dx (B,T,D) and dstate_in (N,D,W-1, may be NULL) written; dw (D,W) and dbias (D, may be
    // NULL) accumulated; dstate_out (N,D,W-1) = gradient of state_out, may be NULL.
    void (*short_conv_backward)(real *dx, real *dw, real *dbias, real *dstate_in, const real *dy,
                                const real *dstate_out, const real *x, const real *w, const real *bias,
                                const real *state_in, int B, int T, int D, int W, const int *offsets, int nseq,
                                int silu);
    // Decode: x, y (N, D) one token; state (N, D, W-1) shifted in place.
    void (*short_conv_step)(real *y, real *state, const real *x, const real *w, const real *bias, int N, int D,
                            int W, int silu);
    // L2 normalisation over the last dim (docs/delta-rule.md, "Input transforms: L2 norm,
    // decay gate and beta"): y = x * rstd, rstd = 1/sqrt(sum_d x_d^2 + eps) (eps on the
    // SUM; fla uses 1e-6). x, y (rows, D), rows = B*T*H; saves rstd (rows, statistics).
    void (*l2norm_forward)(real *y, real *rstd, const real *x, size_t rows, int D, real eps);
    // docs/delta-rule.md, "Gradients of the input transforms": dx = rstd * (dy - (dy.y) y)
    // (written); needs the forward's y and rstd.
    void (*l2norm_backward)(real *dx, const real *dy, const real *y, const real *rstd, size_t rows, int D);
    // Decay gate (docs/delta-rule.md, "Input transforms: L2 norm, decay gate and beta",
    // "Gradients of the input transforms", "KDA layer"): x (N, H, K) raw gate, g (N, H, K)
    // log-decay;
    //   lower_bound == 0: g = -exp(A_log[h]) * softplus(x + dt_bias[h*K+i])
    //   lower_bound <  0: g = lower_bound * sigmoid(exp(A_log[h]) * (x + dt_bias[h*K+i]))
    // A_log (H) or NULL (A = 1); dt_bias (H*K) or NULL. GDN's scalar gate: K = 1.
    void (*decay_gate_forward)(real *g, const real *x, const real *A_log, const real *dt_bias, size_t N, int H,
                               int K, real lower_bound);
    // dx written; dA_log (H), ddt_bias (H*K) accumulated (either may be NULL).
    void (*decay_gate_backward)(real *dx, real *dA_log, real *ddt_bias, const real *dg, const real *x,
                                const real *A_log, const real *dt_bias, size_t N, int H, int K, real lower_bound);
    // beta = c * sigmoid(b), c = 2 if neg_eigval else 1 (docs/delta-rule.md, "Input
    // transforms: L2 norm, decay gate and beta", "Gradients of the input transforms");
    // db written
    void (*beta_forward)(real *beta, const real *b, size_t n, int neg_eigval);
    void (*beta_backward)(real *db, const real *dbeta, const real *beta, size_t n, int neg_eigval);
    // Per-head gated RMSNorm of the output (docs/delta-rule.md, "Gated RMSNorm of the
    // output"): x, z, y (rows, D), rows = B*T*H, D = V;
    // weight w (D) shared by all heads (NULL = 1):
    //   xh = x * r, r = (mean_d x^2 + eps)^-1/2,  y = xh * w * act(z),
    //   act(z) = sigmoid(z) (KDA) or z*sigmoid(z) (swish != 0, GDN's default).
    // Saves rstd (rows, statistics).
    void (*gated_rmsnorm_forward)(real *y, real *rstd, const real *x, const real *z, const real *w, size_t rows,
                                  int D, real eps, int swish);
    // dx, dz written; dw (D) accumulated (may be NULL).
    void (*gated_rmsnorm_backward)(real *dx, real *dz, real *dw, const real *dy, const real *x, const real *z,
                                   const real *w, const real *rstd, size_t rows, int D, int swish);

    // ---- optional fused ops (not in DELTA_RULE_OPS): NULL means the graph runs the separate ops ----
    // short_conv_forward with SiLU (no bias, no states) and then l2norm_forward over heads of K
    // channels, in one op: y (B, T, D) normalised per head, rstd (B*T*D/K, statistics), the
    // bits of the two ops. The convolution's output itself is not kept: l2norm_backward needs
    // only y and rstd, and short_conv_backward the convolution's input (the KDA and GDN
    // layers' q and k; docs/delta-rule.md, "Short causal convolution with SiLU").
    void (*short_conv_l2norm_forward)(real *y, real *rstd, const real *x, const real *w, int B, int T, int D, int W,
                                      const int *offsets, int nseq, int K, real eps);
} DeltaRuleOps;

#define DELTA_RULE_OPS(X)                                                                                \
    X(linear_workspace_size) X(delta_chunk_forward) X(delta_chunk_backward) X(delta_step)                \
    X(linear_attn_chunk_forward) X(linear_attn_chunk_backward) X(linear_attn_step) X(short_conv_forward) \
    X(short_conv_backward) X(short_conv_step) X(l2norm_forward) X(l2norm_backward) X(decay_gate_forward) \
    X(decay_gate_backward) X(beta_forward) X(beta_backward) X(gated_rmsnorm_forward) X(gated_rmsnorm_backward)

#define DELTA_RULE_DECLARE_CPU(member) OP_DECLARE(DeltaRuleOps, cpu_, member)
DELTA_RULE_OPS(DELTA_RULE_DECLARE_CPU)
const DeltaRuleOps *cpu_delta_rule_ops(void);

// ---- The reference API (below): the recurrent and chunkwise forms of each core with
// ---- LinearDims shapes, which the entries above call and the tests check one by one.

// =====================================================================================
// KDA (docs/delta-rule.md, "Kimi Delta Attention (KDA)"): per channel i,
//   S~ = diag(exp g_t) S_{t-1},  d_t = beta_t (v_t - S~^T k_t),
//   S_t = S~ + k_t d_t^T,  o_t = S_t^T (scale q_t).
// GDN = KDA with g broadcast over K (g has shape (B,T,H); its gradient is the sum over K
// of KDA's per-channel gradient). DeltaNet = KDA with g = 0 (no g argument, no dg).
// (docs/delta-rule.md, "Gated DeltaNet", "DeltaNet" and "How the four rules relate".)
// =====================================================================================

// ---- recurrent forms: the reference -------------------------------------------------
// Forward: docs/delta-rule.md, "Kimi Delta Attention (KDA)"; backward: docs/delta-rule.md,
// "Backward of the delta-rule recurrence".
// Workspace bytes for the recurrent forward: one double state per (sequence, head).
size_t delta_recurrent_fwd_workspace_size(const LinearDims *d);
// Workspace bytes for the recurrent backward: all T+1 states of every (sequence, head)
// in double (docs/delta-rule.md, "Memory of the recurrent reference"),
// (B*T + N) * H * K * V doubles, plus a small per-task scratch.
size_t delta_recurrent_bwd_workspace_size(const LinearDims *d);

void kda_recurrent_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                           const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace);
// dq, dk, dg (B,T,H,K); dv (B,T,H,V); dbeta (B,T,H); dh0 (N,H,K,V) or NULL.
void kda_recurrent_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                            const real *dhT, const real *q, const real *k, const real *v, const real *g,
                            const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace);

void gdn_recurrent_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                           const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace);
// dg (B,T,H)
void gdn_recurrent_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                            const real *dhT, const real *q, const real *k, const real *v, const real *g,
                            const real *beta, const real *h0, real scale, const LinearDims *d, void *workspace);

void deltanet_recurrent_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *beta,
                                const real *h0, real scale, const LinearDims *d, void *workspace);
void deltanet_recurrent_backward(real *dq, real *dk, real *dv, real *dbeta, real *dh0, const real *dout,
                                 const real *dhT, const real *q, const real *k, const real *v, const real *beta,
                                 const real *h0, real scale, const LinearDims *d, void *workspace);

// ---- chunkwise forms (docs/delta-rule.md, "Chunkwise forward" and "Chunkwise backward")
// Chunk size `chunk` >= 1 (fla: 64); T need not be a multiple of it. Per chunk: the
// in-chunk cumulative log-decay Gamma, Aqk and L with the decay evaluated in the
// relative form exp(Gamma_r - Gamma_c), c <= r, masked before exponentiating so every
// exponent is <= 0 (the "token-parallel" path: no reference-row factorisation, nothing
// can overflow), T = (I+L)^-1 by forward substitution, the WY/UT representation W, U and
// the inter-chunk state recurrence (docs/delta-rule.md, "Per-chunk quantities", "Stable
// decay exponents", "Triangular inverse by forward substitution", "Exactness of the chunk
// form: the WY representation", "The chunkwise forward algorithm").
// The backward recomputes the chunk states h[n] (docs/delta-rule.md, "Recomputation in the
// backward"), then runs stages B1-B6 per chunk in reverse: dA and local dDelta (B1), the
// state gradient (B2), inter-chunk and WY terms (B3), the gradient of the triangular
// inverse (docs/delta-rule.md, "Gradient of the triangular inverse"), the intra-chunk
// pairwise decay terms (B4) and the reverse in-chunk cumsum of dGamma (B6).
#define DELTA_DEFAULT_CHUNK 64  // fla's chunk size

size_t delta_chunk_fwd_workspace_size(const LinearDims *d, int chunk);
size_t delta_chunk_bwd_workspace_size(const LinearDims *d, int chunk);

void kda_chunk_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                       const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                       void *workspace);
void kda_chunk_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                        const real *dhT, const real *q, const real *k, const real *v, const real *g,
                        const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                        void *workspace);

// GDN and DeltaNet use the same workspace sizes (delta_chunk_*_workspace_size).

void gdn_chunk_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *g,
                       const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                       void *workspace);
void gdn_chunk_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dh0, const real *dout,
                        const real *dhT, const real *q, const real *k, const real *v, const real *g,
                        const real *beta, const real *h0, real scale, const LinearDims *d, int chunk,
                        void *workspace);
void deltanet_chunk_forward(real *o, real *hT, const real *q, const real *k, const real *v, const real *beta,
                            const real *h0, real scale, const LinearDims *d, int chunk, void *workspace);
void deltanet_chunk_backward(real *dq, real *dk, real *dv, real *dbeta, real *dh0, const real *dout,
                             const real *dhT, const real *q, const real *k, const real *v, const real *beta,
                             const real *h0, real scale, const LinearDims *d, int chunk, void *workspace);

// ---- single-token decode steps --------------------------------------------------------
// The index form of docs/delta-rule.md, "Kimi Delta Attention (KDA)"; decode uses the
// recurrence (docs/delta-rule.md, "Decode steps").
// One token for each of N sequences: q, k, g (N,H,K) [GDN: g (N,H)], v, o (N,H,V),
// beta (N,H); state (N,H,K,V) is read and overwritten with the new state.
void kda_step(real *o, real *state, const real *q, const real *k, const real *v, const real *g, const real *beta,
              real scale, int N, int H, int K, int V);
void gdn_step(real *o, real *state, const real *q, const real *k, const real *v, const real *g, const real *beta,
              real scale, int N, int H, int K, int V);
void deltanet_step(real *o, real *state, const real *q, const real *k, const real *v, const real *beta, real scale,
                   int N, int H, int K, int V);

// =====================================================================================
// Plain linear attention (docs/delta-rule.md, "Linear attention with the ELU+1 feature
// map"): phi(x) = elu(x)+1, q^ = scale*phi(q), k^ = phi(k),
//   S_t = S_{t-1} + k^_t v_t^T,  z_t = z_{t-1} + k^_t,
//   normalize: o_t = S_t^T q^_t / (q^_t . z_t + 1e-10);  else o_t = S_t^T q^_t.
// The carried state is the pair (S (N,H,K,V), z (N,H,K)); z arguments are ignored
// (may be NULL) when normalize == 0. q, k are raw (the feature map is applied inside).
// =====================================================================================
#define LINEAR_ATTN_EPS 1e-10

size_t linear_attn_recurrent_fwd_workspace_size(const LinearDims *d);
size_t linear_attn_recurrent_bwd_workspace_size(const LinearDims *d);
void linear_attn_recurrent_forward(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                                   const real *S0, const real *z0, real scale, int normalize, const LinearDims *d,
                                   void *workspace);
// docs/delta-rule.md, "Backward of linear attention". dq, dk (B,T,H,K); dv (B,T,H,V);
// dS0 (N,H,K,V), dz0 (N,H,K) or NULL.
void linear_attn_recurrent_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                    const real *dST, const real *dzT, const real *q, const real *k, const real *v,
                                    const real *S0, const real *z0, real scale, int normalize,
                                    const LinearDims *d, void *workspace);

// Forward: docs/delta-rule.md, "Chunked linear attention"; backward: docs/delta-rule.md,
// "Chunked linear-attention backward".
size_t linear_attn_chunk_fwd_workspace_size(const LinearDims *d, int chunk);
size_t linear_attn_chunk_bwd_workspace_size(const LinearDims *d, int chunk);
void linear_attn_chunk_forward(real *o, real *ST, real *zT, const real *q, const real *k, const real *v,
                               const real *S0, const real *z0, real scale, int normalize, const LinearDims *d,
                               int chunk, void *workspace);
void linear_attn_chunk_backward(real *dq, real *dk, real *dv, real *dS0, real *dz0, const real *dout,
                                const real *dST, const real *dzT, const real *q, const real *k, const real *v,
                                const real *S0, const real *z0, real scale, int normalize, const LinearDims *d,
                                int chunk, void *workspace);


#endif
