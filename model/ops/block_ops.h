// CPU reference ops for the non-KDA hybrid blocks: RMSNorm, SwiGLU / SiTU, the sigmoid
// output gate, causal attention with separate strided q/k/v and d_qk != d_v, RoPE, the MLA
// pieces that are not matmuls (incl. the absorbed decode form), the MoE router / load
// balancing / dropless dispatch / grouped expert FFN / combine, and Block AttnRes.
// Section numbers (§) refer to shared/design/blocks-spec.md.
//
// Contracts (as model/backend.h):
//  - `*_forward` writes its outputs and what its backward needs (named in the signature);
//    no op allocates heap memory (small per-row stack arrays only). Where an op needs a
//    scratch buffer the caller passes it (`work`), with the size documented.
//  - `*_backward` ACCUMULATES (+=) into parameter gradients and WRITES (=) input gradients,
//    unless the comment says otherwise (cpu_attnres_backward accumulates its source
//    gradients; cpu_mla_build_k_backward writes only the k part of `de`).
//  - Tensors are row-major; N = rows (B*T tokens). Weights use PyTorch's (out, in) layout.
//  - Results never depend on the number of OpenMP threads: every output element is
//    produced by one thread, and every reduction runs in a fixed order (no atomics).
//  - Reductions (dot products, softmax sums, RMS statistics) are carried in double in both
//    builds; stored values are `real`.
#ifndef HYBRID_BLOCK_OPS_H
#define HYBRID_BLOCK_OPS_H

#include <stddef.h>

#include "model/attn_layout.h"
#include "base/real.h"

// =====================================================================================
// Small ops
// =====================================================================================

// ---- rmsnorm.c: RMSNorm (§5.1) -------------------------------------------------------
// inp, out (N, C). rstd[i] = (mean_c inp[i,c]^2 + eps)^(-1/2) (saved, N);
// out[i,c] = w[c] * inp[i,c] * rstd[i].
void cpu_rmsnorm_forward(real *out, real *rstd, const real *inp, const real *w, int N, int C, double eps);
// g = dout * w; dinp = rstd*g - (rstd^3 / C) (g . inp) inp  (written);
// dw[c] += sum_i dout[i,c] * inp[i,c] * rstd[i]              (accumulated)
void cpu_rmsnorm_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w,
                          const real *rstd, int N, int C);

// ---- glu.c: gated activations (§5.4 SwiGLU, §3 SiTU) ----------------------------------
// Layout: inp (N, 2H), each row = [gate g (H) | up u (H)] (the output of one GEMM with the
// concatenated weight [W1; W3], W1 = gate_proj rows first); out (N, H). dinp (N, 2H) has
// the same [dg | du] layout. The backward recomputes everything from inp (nothing saved).
//   SwiGLU: h = silu(g) * u, silu(g) = g sigmoid(g)
//   SiTU:   h = a(g) c(u), a(g) = beta tanh(g/beta) sigmoid(g),
//           c(u) = lbeta tanh(u/lbeta) if lbeta > 0, else c(u) = u   (K3: beta 4, lbeta 25)
typedef enum { GLU_SWIGLU = 0, GLU_SITU = 1 } GluKind;
typedef struct {
    GluKind kind;
    double beta;         // SiTU only
    double linear_beta;  // SiTU only; <= 0 means no cap on the up half
} GluAct;
void cpu_swiglu_forward(real *out, const real *inp, int N, int H);
void cpu_swiglu_backward(real *dinp, const real *dout, const real *inp, int N, int H);
void cpu_situ_forward(real *out, const real *inp, int N, int H, double beta, double linear_beta);
void cpu_situ_backward(real *dinp, const real *dout, const real *inp, int N, int H, double beta,
                       double linear_beta);
void cpu_glu_forward(real *out, const real *inp, int N, int H, GluAct act);  // dispatch on act.kind
void cpu_glu_backward(real *dinp, const real *dout, const real *inp, int N, int H, GluAct act);

// ---- sigmoid_gate.c: sigmoid output gate (§5.7, Gated MLA §1.3 step 5) -----------------
// y = o * sigmoid(z), elementwise over n values (o: attention output, z = x W_g^T).
void cpu_sigmoid_gate_forward(real *y, const real *o, const real *z, size_t n);
// do = dy * sigmoid(z); dz = dy * o * sigmoid(z) (1 - sigmoid(z))   (both written)
void cpu_sigmoid_gate_backward(real *d_o, real *dz, const real *dy, const real *o, const real *z, size_t n);

// ---- block_linear.c: local matmul helper and the dense GLU FFN -------------------------
// (Local stand-in for model/ops/matmul.c, to be deduplicated.) out (N, OC) = inp (N, C) @ w^T,
// w (OC, C). Backward: dinp = dout @ w (written; dinp may be NULL to skip),
// dw += dout^T @ inp (accumulated).
void cpu_block_linear_forward(real *out, const real *inp, const real *w, int N, int C, int OC);
void cpu_block_linear_backward(real *dinp, real *dw, const real *dout, const real *inp, const real *w, int N,
                               int C, int OC);
// Dense GLU MLP (§2.3; the dense layer-0 MLP, the shared experts, one routed expert):
//   h (N, 2M) = x W13^T, W13 (2M, C) = [W1 (gate, M rows); W3 (up, M rows)]
//   a (N, M)  = glu(h)                         (SwiGLU or SiTU, layout as above)
//   out (N, C) = a W2^T, W2 (C, M)
// Saves h and a. Backward: dx written (may be NULL), dw13/dw2 accumulated; dh (N, 2M) and
// da (N, M) are scratch buffers the caller provides (their contents are overwritten).
void cpu_glu_ffn_forward(real *out, real *h, real *a, const real *x, const real *w13, const real *w2, int N,
                         int C, int M, GluAct act);
void cpu_glu_ffn_backward(real *dx, real *dw13, real *dw2, real *dh, real *da, const real *dout, const real *x,
                          const real *h, const real *a, const real *w13, const real *w2, int N, int C, int M,
                          GluAct act);

// =====================================================================================
// Attention (§1.4) and RoPE (§1.6)
// =====================================================================================

// ---- attention_qkv.c: causal softmax attention, separate strided q, k, v --------------
// Layout and strides: AttnLayout (model/attn_layout.h).
//   S_ij = scale q_i . k_j (j <= i, causal), lse_i = log sum_j e^{S_ij}, out_i = sum_j e^{S_ij - lse_i} v_j
void cpu_attn_forward(real *out, real *lse, const real *q, const real *k, const real *v, const AttnLayout *L);
// Flash-style backward (§1.4), probabilities recomputed from lse; D_i = dout_i . out_i.
// dq, dk, dv are WRITTEN with the same strides as q, k, v (only the addressed elements:
// the other columns of a packed gradient buffer are left alone). A head stride of 0 for k
// or v is not allowed here (the shared-key gradient would need a sum over heads: use a
// materialised k, see cpu_mla_build_k_*).
void cpu_attn_backward(real *dq, real *dk, real *dv, const real *dout, const real *q, const real *k, const real *v,
                       const real *out, const real *lse, const AttnLayout *L);

// ---- rope.c: rotary embedding, interleaved pairs (§1.6, DSV3 layout) -------------------
// Rotates x[r*row + h*head + 2i], x[r*row + h*head + 2i+1] (i < d/2, d even) of row
// r = b*T + t by the angle (pos0 + t) * base^(-2i/d):
//   y0 = x0 cos - x1 sin,  y1 = x0 sin + x1 cos.
// out and inp share the layout; out == inp (in place) is allowed. Use NH = 1 for the
// shared MLA rope key. Nothing is saved (the op is linear).
void cpu_rope_forward(real *out, const real *inp, int B, int T, int NH, int d, int row, int head, int pos0,
                      double base);
// dinp = R(-angle) dout (the transpose rotation); dinp == dout allowed.
void cpu_rope_backward(real *dinp, const real *dout, int B, int T, int NH, int d, int row, int head, int pos0,
                       double base);

// =====================================================================================
// MLA pieces that are not matmuls (§1.2 - §1.5, §1.7)
// =====================================================================================
// Shapes: r = kv_lora_rank, dn = qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim,
// dqk = dn + dr. Decompressed forward (§1.3), in graph order:
//   kv (N, r+dr) = x W_kva^T                 [cpu_block_linear_forward]
//   c (N, r), kr (N, dr) = split(kv)         [cpu_mla_split_kv_forward]
//   (RoPE ablation: kr rotated with NH = 1; q's rope slices rotated per head)
//   chat = RMSNorm(c) (eps 1e-6)             [cpu_rmsnorm_forward]
//   e (N, NH*(dn+dv)) = chat W_kvb^T          [cpu_block_linear_forward], per head [k_nope | v]
//   k (N, NH*dqk) = per head [k_nope,h | kr]  [cpu_mla_build_k_forward]
//   attention with q (N, NH*dqk) (q_row NH*dqk, q_head dqk), k (same strides), and v = e + dn
//   (v_row NH*(dn+dv), v_head dn+dv), scale 1/sqrt(dqk).
// The backward mirrors it: cpu_attn_backward writes dq, dk and dv straight into the v
// columns of de; cpu_mla_build_k_backward writes the k_nope columns of de and dkr (the sum
// over heads, §1.5 step 4); cpu_mla_split_kv_backward assembles dkv = [dc | dkr].

// kv (N, r+dr) = [c | kr] -> c (N, r), kr (N, dr)
void cpu_mla_split_kv_forward(real *c, real *kr, const real *kv, int N, int r, int dr);
// dkv (N, r+dr) = [dc | dkr]  (written)
void cpu_mla_split_kv_backward(real *dkv, const real *dc, const real *dkr, int N, int r, int dr);
// k[n, h, :] = [e[n, h, 0:dn] | kr[n, :]] with e (N, NH, dn+dv), k (N, NH, dn+dr)
void cpu_mla_build_k_forward(real *k, const real *e, const real *kr, int N, int NH, int dn, int dv, int dr);
// de[n, h, 0:dn] = dk[n, h, 0:dn] (written; de[n, h, dn:] is NOT touched: the attention
// backward writes it); dkr[n, :] = sum_h dk[n, h, dn:] (written)
void cpu_mla_build_k_backward(real *de, real *dkr, const real *dk, int N, int NH, int dn, int dv, int dr);

// Absorbed (MQA-style) attention for decoding (§1.7), one sequence. Forward only.
//   cache (Tc, r+dr): row t = [chat_t | kr_t] (kr already rotated for the RoPE variant).
//   q (Nq, NH*dqk): per head [q_nope | q_rope] (q_rope rotated for the RoPE variant); query
//   row i is the token at position Tc - Nq + i and attends cache rows 0 .. Tc - Nq + i.
//   w_kvb (NH*(dn+dv), r): kv_b_proj; rows h*(dn+dv) + [0, dn) are W_UK,h, the next dv rows W_UV,h.
//   qt_h = [W_UK,h^T q_nope,h | q_rope,h] (r+dr); score(i, t) = scale qt_h . cache_t;
//   ctx_h = sum_t p(i, t) chat_t (r); out[i, h*dv:(h+1)*dv] = W_UV,h ctx_h.
// out (Nq, NH*dv), the same layout as cpu_attn_forward's output (then gate and o_proj).
// Equals the decompressed form up to rounding.
void cpu_mla_absorbed_attention(real *out, const real *q, const real *cache, const real *w_kvb, int Nq, int Tc,
                                int NH, int dn, int dr, int dv, int r, double scale);

// =====================================================================================
// MoE (§2)
// =====================================================================================
// Slots: token t's j-th routed copy is slot n = t*K + j (j = rank in the selection order).

// ---- moe_router.c: router (§2.2, §2.5 steps 5-8) ---------------------------------------
// logits (N, E) = x W_r^T (computed by the caller with cpu_block_linear_forward).
//   scores s (N, E) = sigmoid(logits) or softmax_E(logits)          (saved)
//   selection key a = s + bias (bias (E) may be NULL; it only affects the selection)
//   sel (N, K): the K experts with the largest a, in decreasing a; ties: lower index wins
//   weights (N, K): w_j = s[sel_j]; if renorm && K > 1: w_j /= (sum_j s[sel_j] + 1e-20);
//                   then w_j *= scale (routed_scaling_factor)
// No group-limited routing (Kimi configs use 1 group).
typedef enum { ROUTER_SIGMOID = 0, ROUTER_SOFTMAX = 1 } RouterScoreFn;
void cpu_router_forward(int *sel, real *weights, real *scores, const real *logits, const real *bias, int N, int E,
                        int K, RouterScoreFn fn, int renorm, double scale);
// dweights (N, K) -> dscores (N, E) (written; zero outside the selected experts), with the
// selection held fixed (§2.5 step 5): S = sum_j s[sel_j] + 1e-20,
//   renorm: ds[sel_j] = scale/S (dw_j - sum_i dw_i s[sel_i] / S);  else ds[sel_j] = scale dw_j.
void cpu_router_weights_backward(real *dscores, const real *dweights, const real *scores, const int *sel, int N,
                                 int E, int K, int renorm, double scale);
// dscores (N, E) -> dlogits (N, E) (written), §2.5 step 6:
//   sigmoid: du = ds s (1 - s);   softmax: du = s (ds - sum_e ds_e s_e).
// An auxiliary loss adds its dscores before this step. The bias never gets a gradient.
void cpu_router_scores_backward(real *dlogits, const real *dscores, const real *scores, int N, int E,
                                RouterScoreFn fn);

// ---- moe_balance.c: load balancing (§2.6) and load statistics ---------------------------
// counts[e] += number of slots routed to e (accumulate over micro-batches; zero it first).
void cpu_moe_count(long *counts, const int *sel, int N, int K, int E);
typedef struct {
    long min, max;
    double mean;  // = total slots / E
    double cv;    // coefficient of variation: population std / mean (0 if mean == 0)
    double max_violation;  // max / mean - 1 (0 if mean == 0)
} MoeLoadStats;
MoeLoadStats moe_load_stats(const long *counts, int E);
// §2.6 A (aux-loss-free, DSV3): b_e += gamma sign(mean_c - c_e); if center, subtract the
// mean of the update so that sum_e b_e is unchanged. Outside autograd.
void cpu_moe_bias_update_sign(real *bias, const long *counts, int E, double gamma, int center);
// §2.6 B (Quantile Balancing, K3), exact order statistic: with a = s + bias and c_t = the
// (K+1)-th largest a_t (K < E), q_{t,e} = c_t - s_{t,e}; new b_e = the n*-th smallest
// q_{.,e}, n* = round(N K / E) clamped to [1, N]; then centred (b -= mean b). REPLACES bias.
// scores (N, E) are the (sigmoid) scores of the whole batch; work: 2*N reals.
void cpu_moe_bias_update_quantile(real *bias, const real *scores, int N, int E, int K, real *work);
// §2.6 C, DSV3 complementary sequence-wise loss for a sigmoid router: sequences of L
// tokens (N % L == 0), per sequence s' = s / sum_e s, f_e = E/(K L) * #{t: e in sel_t},
// P_e = mean_t s'_{t,e}, loss_seq = alpha sum_e f_e P_e; returns the mean over sequences.
// (L = N gives the batch-wise loss.) f is a constant. Backward ACCUMULATES dloss * dL/ds
// into dscores (N, E) (it reaches all E scores), to be followed by cpu_router_scores_backward.
double cpu_moe_seq_aux_loss_forward(const real *scores, const int *sel, int N, int E, int K, int L, double alpha);
void cpu_moe_seq_aux_loss_backward(real *dscores, const real *scores, const int *sel, int N, int E, int K, int L,
                                   double alpha, double dloss);
// §2.6 C, Switch/GShard loss (softmax router): f_e = c_e / (N K) (constant),
// P_e = mean_t s_{t,e}, loss = alpha E sum_e f_e P_e. Backward accumulates into dscores.
double cpu_moe_switch_aux_loss_forward(const real *scores, const int *sel, int N, int E, int K, double alpha);
void cpu_moe_switch_aux_loss_backward(real *dscores, const int *sel, int N, int E, int K, double alpha,
                                      double dloss);

// ---- moe_dispatch.c: dropless permutation, gather, combine (§2.7) ----------------------
// Stable counting sort of the N*K slots by expert: offsets (E+1): expert e owns sorted rows
// [offsets[e], offsets[e+1]); perm (N*K): perm[p] = slot at sorted row p (slots of one expert
// in increasing slot order); pos (N*K): pos[n] = sorted row of slot n (inverse of perm).
// Serial and deterministic. Dies if a sel entry is outside [0, E).
void cpu_moe_dispatch_plan(int *perm, int *pos, int *offsets, const int *sel, int N, int K, int E);
// xp (N*K, C): xp[p] = x[perm[p] / K]
void cpu_moe_gather_forward(real *xp, const real *x, const int *perm, int N, int K, int C);
// dx[t] = sum_{j<K} dxp[pos[t*K + j]] in j order (written)
void cpu_moe_gather_backward(real *dx, const real *dxp, const int *pos, int N, int K, int C);
// out[t] = sum_{j<K} weights[t*K+j] yp[pos[t*K+j]] in j order (written), out (N, C)
void cpu_moe_combine_forward(real *out, const real *yp, const real *weights, const int *pos, int N, int K, int C);
// dyp[pos[n]] = weights[n] dout[t]; dweights[n] = dout[t] . yp[pos[n]]  (n = t*K+j; both written)
void cpu_moe_combine_backward(real *dyp, real *dweights, const real *dout, const real *yp, const real *weights,
                              const int *pos, int N, int K, int C);

// ---- moe_experts.c: grouped expert FFN over the sorted rows (§2.3, §2.7 steps 4, 7) -----
// For each expert e, rows [offsets[e], offsets[e+1]) of xp (Nr, C) go through the GLU FFN
// (cpu_glu_ffn_*) with w13 + e*2M*C ((2M, C) = [W1_e; W3_e]) and w2 + e*C*M ((C, M)).
// Saves hp (Nr, 2M) and ap (Nr, M); yp (Nr, C). Nr = offsets[E] (= N*K).
// Backward: dxp written; dw13 (E, 2M, C), dw2 (E, C, M) accumulated (an expert with no
// rows gets exactly nothing added); dhp (Nr, 2M), dap (Nr, M) are caller scratch.
void cpu_moe_experts_forward(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                             const int *offsets, int E, int C, int M, GluAct act);
void cpu_moe_experts_backward(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                              const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                              const int *offsets, int E, int C, int M, GluAct act);
// Whole MoE layer (graph order; variant A §2.1a; latent variant B §2.1b needs no extra op):
//   logits = x W_r^T; router -> sel, weights, scores; plan -> perm, pos, offsets
//   [B: z = x W_down^T (N, l); the routed path below runs on z, width l]
//   xp = gather(x or z); experts -> yp; r = combine(yp, weights)
//   [B: n = RMSNorm_{gamma_lat, 1e-5}(r); routed = n W_up^T]   (A: routed = r)
//   out = routed + shared FFN(x) (cpu_glu_ffn_*, full width).
// Backward: combine_backward -> dyp, dweights; experts_backward -> dxp; gather_backward ->
// dx (or dz); router_weights_backward -> dscores [+ aux loss]; router_scores_backward ->
// dlogits; linear backward of W_r; then sum the dx contributions.

// =====================================================================================
// Block AttnRes (§4)
// =====================================================================================

// ---- attnres.c: one AttnRes op (§4.4, §4.5) --------------------------------------------
// Sources srcs[0..n) each (N, C) (blocks b_0.. then the partial, as attnres_plan says),
// pseudo-query w (C) (zero-initialised), norm weight gamma (C) (one-initialised):
//   q = w * gamma; rho_i = (mean_c V_i^2 + eps)^(-1/2); z_i = rho_i (V_i . q);
//   p = softmax_i(z); out = sum_i p_i V_i.
// Saves probs, logits (= z) and rstd (= rho), each (N, n), row-major by token.
void cpu_attnres_forward(real *out, real *probs, real *logits, real *rstd, const real *const *srcs, int n,
                         const real *w, const real *gamma, int N, int C, double eps);
// pi_i = dout . V_i; dz_i = p_i (pi_i - sum_j p_j pi_j);
// dV_i = p_i dout + dz_i rho_i q - (dz_i z_i rho_i^2 / C) V_i   -> ACCUMULATED into dsrcs[i]
//   (a NULL entry skips that source);
// dq = sum_tokens sum_i dz_i rho_i V_i; dw += dq * gamma; dgamma += dq * w  (accumulated).
// work: N*n reals of scratch.
void cpu_attnres_backward(real *const *dsrcs, real *dw, real *dgamma, real *work, const real *dout,
                          const real *const *srcs, int n, const real *w, const real *gamma, const real *probs,
                          const real *logits, const real *rstd, int N, int C);

// Bookkeeping of the K3 layer algorithm (§4.3), block size S in decoder layers, 0-indexed
// layer l. State: sealed blocks b_0, b_1, ... and the running partial P (starts as the
// embedding E). For each layer:
//   attention op: sources = b_0 .. b_{n_blocks-1}, then P (has_partial). If `identity`
//     (l = 0), the op is not applied: x_a = E. If `seal`, P is pushed as block b_{n_blocks}
//     AFTER the op reads it, and P becomes empty (the next P is just the mixer output).
//   ffn op: sources = b_0 .. b_{n_blocks-1}, then P (= P before the mixer + mixer output).
//   out op (after the last layer; `layer` ignored): all sealed blocks, then the final P.
// Every version of P that is a source must stay alive until the backward (P_mid and P_out
// of every layer; they are new buffers, not in-place sums).
// Backward (§4.6): keep dP and one accumulator dB_j per block, all zeroed; the out op's
// backward seeds them. Per layer in reverse: FFN backward -> ffn AttnRes backward with
// dsrcs = {dB_0.., dP_mid} where dP_mid starts as a copy of dP_out; mixer backward ->
//   identity (l = 0):  dE = dx_a + dB_0;
//   seal (l % S == 0): attention AttnRes backward with dsrcs = {dB_0 .. dB_{m-1}, dB_m}
//                      (m = n_blocks; the partial it read IS b_m); then dP_in = dB_m;
//   otherwise:         dsrcs = {dB_0 .., dP_in} with dP_in starting as a copy of dP_mid.
// Source counts: attention 1 + l/S at a boundary, else 2 + floor(l/S); ffn 2 + floor(l/S).
typedef enum { ATTNRES_ATTN = 0, ATTNRES_FFN = 1, ATTNRES_OUT = 2 } AttnResSite;
typedef struct {
    int n_blocks;     // sealed blocks b_0 .. b_{n_blocks-1} that are sources
    int has_partial;  // 1: the partial P is the last source
    int n_sources;    // n_blocks + has_partial
    int seal;         // attention site only: after the op, P becomes block b_{n_blocks}
    int identity;     // attention site of layer 0: x_a = E, the op is not run
} AttnResPlan;
AttnResPlan attnres_plan(AttnResSite site, int layer, int block_size, int n_layer);
// Number of blocks sealed over the whole stack: floor((n_layer - 1) / S) + 1.
int attnres_num_blocks(int n_layer, int block_size);

#endif
