// The CPU reference backend table: the ops of model/ops/*.c plus host memory.
#include <stdlib.h>
#include <string.h>

#include "model/backend.h"
#include "model/ops/block_ops.h"
#include "model/ops/cpu_mixer_ops.h"
#include "model/ops/linear_ops.h"
#include "model/ops/ops_cpu.h"
#include "model/util.h"
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
