// The CPU reference backend table: the ops of model/ops/*.c plus host memory.
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/ops/block_ops.h"
#include "model/ops/cpu_mixer_ops.h"
#include "model/ops/linear_ops.h"
#include "model/ops/ops_cpu.h"
#include "base/util.h"
#include "optim/adamw.h"
#include "optim/muon.h"

static void *cpu_alloc(size_t bytes) { return xcalloc(bytes, 1); }  // zero-filled
static void cpu_free(void *p) { free(p); }
static void cpu_zero(real *p, size_t n) { memset(p, 0, n * sizeof(real)); }

static void cpu_upload(real *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (real)src[i];
}

static void cpu_download(float *dst, const real *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void cpu_upload_tokens(int *dst, const int *src, size_t n) { memcpy(dst, src, n * sizeof(int)); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_synchronize(void) {}

static void cpu_rmsnorm_fwd(real *out, real *rstd, const real *inp, const real *w, int N, int C, real eps) {
    cpu_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
}

static GluAct glu_act(int kind, real beta, real linear_beta) {
    GluAct a = {kind == 1 ? GLU_SITU : GLU_SWIGLU, beta, linear_beta};
    return a;
}
static void cpu_glu_fwd(real *out, const real *inp, int N, int H, int kind, real beta, real linear_beta) {
    cpu_glu_forward(out, inp, N, H, glu_act(kind, beta, linear_beta));
}
static void cpu_glu_bwd(real *dinp, const real *dout, const real *inp, int N, int H, int kind, real beta,
                        real linear_beta) {
    cpu_glu_backward(dinp, dout, inp, N, H, glu_act(kind, beta, linear_beta));
}

// ---- hybrid blocks: adapters from the table's plain integers to the op enums ----
static void cpu_router_fwd(int *sel, real *weights, real *scores, const real *logits, const real *bias, int N, int E,
                           int K, int score_fn, int renorm, double scale) {
    cpu_router_forward(sel, weights, scores, logits, bias, N, E, K, score_fn ? ROUTER_SOFTMAX : ROUTER_SIGMOID, renorm,
                       scale);
}
static void cpu_router_scores_bwd(real *dlogits, const real *dscores, const real *scores, int N, int E, int score_fn) {
    cpu_router_scores_backward(dlogits, dscores, scores, N, E, score_fn ? ROUTER_SOFTMAX : ROUTER_SIGMOID);
}
static void cpu_moe_experts_fwd(real *yp, real *hp, real *ap, const real *xp, const real *w13, const real *w2,
                                const int *offsets, int E, int C, int M, int kind, real beta, real linear_beta) {
    cpu_moe_experts_forward(yp, hp, ap, xp, w13, w2, offsets, E, C, M, glu_act(kind, beta, linear_beta));
}
static void cpu_moe_experts_bwd(real *dxp, real *dw13, real *dw2, real *dhp, real *dap, const real *dyp,
                                const real *xp, const real *hp, const real *ap, const real *w13, const real *w2,
                                const int *offsets, int E, int C, int M, int kind, real beta, real linear_beta) {
    cpu_moe_experts_backward(dxp, dw13, dw2, dhp, dap, dyp, xp, hp, ap, w13, w2, offsets, E, C, M,
                             glu_act(kind, beta, linear_beta));
}
static void cpu_moe_bias_update(real *bias, float *master, const long *counts, int E, double rate) {
    if (!master) {
        cpu_moe_bias_update_sign(bias, counts, E, rate, 1);
        return;
    }
    real b[E];
    for (int e = 0; e < E; e++) b[e] = (real)master[e];
    cpu_moe_bias_update_sign(b, counts, E, rate, 1);
    for (int e = 0; e < E; e++) bias[e] = (real)(master[e] = (float)b[e]);
}

static const Backend cpu_backend = {
    .name = "cpu-" REAL_NAME,
    .elem_size = sizeof(real),
    .stat_size = sizeof(real),
    .keeps_master = 0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .upload = cpu_upload,
    .download = cpu_download,
    .upload_tokens = cpu_upload_tokens,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .synchronize = cpu_synchronize,
    .embed_forward = cpu_embed_forward,
    .embed_backward = cpu_embed_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_fwd,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .glu_forward = cpu_glu_fwd,
    .glu_backward = cpu_glu_bwd,
    .add_forward = cpu_add_forward,
    .add_inplace = cpu_add_inplace,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .attention_qkv_forward = cpu_attn_forward,
    .attention_qkv_backward = cpu_attn_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .mla_split_kv_forward = cpu_mla_split_kv_forward,
    .mla_split_kv_backward = cpu_mla_split_kv_backward,
    .mla_build_k_forward = cpu_mla_build_k_forward,
    .mla_build_k_backward = cpu_mla_build_k_backward,
    .mla_absorbed_attention = cpu_mla_absorbed_attention,
    .sigmoid_gate_forward = cpu_sigmoid_gate_forward,
    .sigmoid_gate_backward = cpu_sigmoid_gate_backward,
    .router_forward = cpu_router_fwd,
    .router_weights_backward = cpu_router_weights_backward,
    .router_scores_backward = cpu_router_scores_bwd,
    .moe_aux_loss_forward = cpu_moe_seq_aux_loss_forward,
    .moe_aux_loss_backward = cpu_moe_seq_aux_loss_backward,
    .moe_dispatch_plan = cpu_moe_dispatch_plan,
    .moe_gather_forward = cpu_moe_gather_forward,
    .moe_gather_backward = cpu_moe_gather_backward,
    .moe_combine_forward = cpu_moe_combine_forward,
    .moe_combine_backward = cpu_moe_combine_backward,
    .moe_experts_forward = cpu_moe_experts_fwd,
    .moe_experts_backward = cpu_moe_experts_bwd,
    .moe_count = cpu_moe_count,
    .moe_bias_update = cpu_moe_bias_update,
    .attnres_forward = cpu_attnres_forward,
    .attnres_backward = cpu_attnres_backward,
    .attention_step = cpu_attention_step,
    // linear-attention mixers (model/ops/cpu_linear.c, linear_ops.h)
    .linear_workspace_size = cpu_linear_workspace_size,
    .delta_chunk_forward = cpu_delta_chunk_forward,
    .delta_chunk_backward = cpu_delta_chunk_backward,
    .delta_step = cpu_delta_step,
    .linear_attn_chunk_forward = cpu_linear_attn_chunk_forward,
    .linear_attn_chunk_backward = cpu_linear_attn_chunk_backward,
    .linear_attn_step = linear_attn_step,
    .short_conv_forward = kda_short_conv_forward,
    .short_conv_backward = kda_short_conv_backward,
    .short_conv_step = kda_short_conv_step,
    .l2norm_forward = kda_l2norm_forward,
    .l2norm_backward = kda_l2norm_backward,
    .decay_gate_forward = kda_gate_forward,
    .decay_gate_backward = kda_gate_backward,
    .beta_forward = kda_beta_forward,
    .beta_backward = kda_beta_backward,
    .gated_rmsnorm_forward = kda_gated_rmsnorm_forward,
    .gated_rmsnorm_backward = kda_gated_rmsnorm_backward,
    .sum = cpu_sum,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .adamw_update = adamw_update_cpu,
    .muon_update = muon_update_cpu,
};

const Backend *backend_cpu(void) { return &cpu_backend; }
