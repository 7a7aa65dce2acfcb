// Shapes shared by the K/G/D/L mixer files (mixer_linear_params.c, mixer_linear.c,
// mixer_linear_decode.c, linear_segments.c). Not a public header: layers.h has the
// module API, decode.h the decoding one.
#ifndef HYBRID_MIXER_LINEAR_H
#define HYBRID_MIXER_LINEAR_H

#include <math.h>

#include "backend.h"
#include "config.h"
#include "layers.h"

#define LINEAR_L2NORM_EPS 1e-6  // fla's eps on the sum of squares of q and k (kda-spec §1.4)

typedef struct {
    int kind;          // LinearKind
    int H, K, V, R, W; // heads, key / value head dims, gate rank, conv window
    int HK, HV;        // H*K, H*V
    int conv;          // K G D: short convs + SiLU, L2-normalised q and k, beta (§5.2-§5.4)
    int gate_dim;      // log-decay entries per head: K (KDA), 1 (GDN), 0 (D, L)
    real scale;        // K^-1/2 on q (§0.1)
    real lower_bound;  // KDA gate form (0 = softplus), §1.4
} LinShape;

static inline LinShape lin_shape(const Config *c, char letter) {
    LinShape s;
    s.kind = letter == 'K' ? LINEAR_KDA : letter == 'G' ? LINEAR_GDN : letter == 'D' ? LINEAR_DELTANET : LINEAR_ATTN;
    s.H = c->linear_heads;
    s.K = c->linear_head_dim;
    s.V = c->linear_value_dim;
    s.R = c->gate_rank;
    s.W = c->conv_size;
    s.HK = s.H * s.K;
    s.HV = s.H * s.V;
    s.conv = s.kind != LINEAR_ATTN;
    s.gate_dim = s.kind == LINEAR_KDA ? s.K : s.kind == LINEAR_GDN ? 1 : 0;
    s.scale = (real)(1.0 / sqrt((double)s.K));
    s.lower_bound = s.kind == LINEAR_KDA ? (real)c->kda_gate_lower_bound : 0;
    return s;
}

// Most sequences one chunkwise call handles (the workspaces are sized for it): every
// batch row, or one per chunk of the whole micro-batch if that is more.
static inline int lin_segment_cap(int max_B, int max_T, int chunk) {
    const long n = (long)max_B * max_T, per_chunk = (n + chunk - 1) / chunk;
    return per_chunk > max_B ? (int)per_chunk : max_B;
}

// Pieces of the layer shared by the training forward (mixer_linear.c) and the decode
// step (mixer_linear_decode.c), on N rows of the activations in `a`:
// projections, decay gate and beta (writes qp kp vp [fa] graw g braw beta) ...
void linear_mixer_inputs(struct Model *m, int layer, LinearActs *a, const real *in, int N);
// ... q = L2Norm(qc), k = L2Norm(kc) ...
void linear_mixer_qk_norm(struct Model *m, int layer, LinearActs *a, int N);
// ... and out = W_o (norm(o) [gated]) (writes [ga] [z] o_rstd y, then out).
void linear_mixer_output(struct Model *m, int layer, LinearActs *a, real *out, const real *in, int N);

#endif
