// Dense channel mixer: GELU MLP (GPT-2: up, tanh-GELU, down) or a gated MLP
// (one GEMM to [gate | up], SwiGLU or SiTU, down: the GLU MLP of glu_mlp.h);
// docs/hybrid.md, "GELU (tanh approximation)", "SwiGLU" and "SiTU".
#include "model.h"
#include "model/ops/norm_glu/glu_mlp.h"

static int is_glu(const ModelConfig *c) { return c->mlp != MLP_GELU; }

void mlp_params(const ModelConfig *c, ParamTable *t, int l, MlpParams *p) {
    const int C = c->d_model, H = c->mlp_hidden, up = is_glu(c) ? 2 * H : H;
    p->up_w = params_matrix(t, c->init_std, up, C, "blocks.%d.mlp.up.weight", l);
    if (is_glu(c)) t->items[p->up_w].blocks = 2;  // gate and up are separate matrices (Muon)
    p->up_b = c->bias ? params_vector(t, GROUP_BIAS, INIT_ZERO, up, "blocks.%d.mlp.up.bias", l) : -1;
    p->down_w = params_matrix(t, params_resid_std(c), C, H, "blocks.%d.mlp.down.weight", l);
    p->down_b = c->bias ? params_vector(t, GROUP_BIAS, INIT_ZERO, C, "blocks.%d.mlp.down.bias", l) : -1;
}

// Saved: the input (the norm's output, owned by the block), h = [gate | up] or the GELU's
// input, and act = f(h), the down projection's input. With recompute_mlp, act lives in the
// blocks' shared scratch instead: the forward writes it there for its own down projection
// and the backward recomputes it from h before it needs it (ddown_w = dout^T act). The
// recomputation is the forward's own op on the same h, so the numbers do not change; the
// saving is N x mlp_hidden values a layer (the 3:1 hybrid at B64 T1024: 0.25 GiB a layer).
void mlp_layout(const Model *m, Carver *cv, Carver *scratch, MlpActs *a) {
    const ModelConfig *c = &m->cfg;
    const size_t N = (size_t)m->max_B * m->max_T, H = c->mlp_hidden, up = is_glu(c) ? 2 * H : H;
    a->h = carve(cv, N * up);
    a->act = carve(c->recompute_mlp ? scratch : cv, N * H);
    a->dh = carve(scratch, N * up);
    a->dact = carve(scratch, N * H);
}

void mlp_forward(Model *m, int l, real *out, const real *in, int B, int T) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MlpParams *p = &m->mp.blocks[l].mlp;
    MlpActs *a = &m->acts.blocks[l].mlp;
    const int N = B * T, C = c->d_model, H = c->mlp_hidden;
    const real *up_w = model_tensor(m, m->params, p->up_w), *up_b = model_tensor(m, m->params, p->up_b);
    const real *down_w = model_tensor(m, m->params, p->down_w), *down_b = model_tensor(m, m->params, p->down_b);
    a->in = (real *)in;
    if (is_glu(c)) {
        glu_mlp_forward(be->core, be->norm_glu, out, a->h, a->act, in, up_w, up_b, down_w, down_b, N, C, H,
                        model_glu_act(c));
        return;
    }
    // optional fused op: the GELU in the GEMM epilogue. Not with recompute_mlp: the epilogue
    // takes the GELU of the fp32 accumulator, the backward's recomputation that of the stored
    // bf16 h, so the two acts would differ in rounding; unfused, they are the same op on the same h.
    if (be->core->matmul_gelu_forward && !c->recompute_mlp) {
        be->core->matmul_gelu_forward(a->act, a->h, in, up_w, up_b, N, C, H);
    } else {
        be->core->matmul_forward(a->h, in, up_w, up_b, N, C, H);
        be->core->gelu_forward(a->act, a->h, (size_t)N * H);
    }
    be->core->matmul_forward(out, a->act, down_w, down_b, N, H, C);
}

real *mlp_out_bias_grad(Model *m, int l) { return model_grad(m, m->mp.blocks[l].mlp.down_b); }

void mlp_backward(Model *m, int l, real *din, const real *dout, int B, int T) {
    const Backend *be = m->be;
    const ModelConfig *c = &m->cfg;
    const MlpParams *p = &m->mp.blocks[l].mlp;
    MlpActs *a = &m->acts.blocks[l].mlp;
    const int N = B * T, C = c->d_model, H = c->mlp_hidden;
    const real *up_w = model_tensor(m, m->params, p->up_w), *down_w = model_tensor(m, m->params, p->down_w);
    real *dup_w = model_grad(m, p->up_w), *dup_b = model_grad(m, p->up_b);
    real *ddown_w = model_grad(m, p->down_w);
    real *ddown_b = m->dout_bias_summed ? NULL : model_grad(m, p->down_b);  // NULL: summed already
    if (c->recompute_mlp) {  // act = f(h) again (mlp_layout): the forward's op on the same h
        if (is_glu(c)) be->norm_glu->glu_forward(a->act, a->h, N, H, model_glu_act(c));
        else be->core->gelu_forward(a->act, a->h, (size_t)N * H);
    }
    if (is_glu(c)) {
        glu_mlp_backward(be->core, be->norm_glu, din, dup_w, dup_b, ddown_w, ddown_b, a->dh, a->dact, dout, a->in,
                         a->h, a->act, up_w, down_w, N, C, H, model_glu_act(c));
        return;
    }
    if (be->core->matmul_backward_gelu) {  // optional fused op: dGELU in the GEMM epilogue
        // it also sums dh's columns into the up projection's bias gradient (on CUDA in the
        // same GEMM's epilogue where HYBRID_CUDA_DGELU_BGRAD is set, docs/cuda.md), so the up
        // projection's backward below gets no dbias
        be->core->matmul_backward_gelu(a->dh, ddown_w, ddown_b, dup_b, dout, a->act, down_w, a->h, N, H, C);
        dup_b = NULL;
    } else {
        be->core->matmul_backward(a->dact, ddown_w, ddown_b, dout, a->act, down_w, N, H, C);
        be->core->gelu_backward(a->dh, a->h, a->dact, (size_t)N * H);
    }
    be->core->matmul_backward(din, dup_w, dup_b, a->dh, a->in, up_w, N, C, H);
}
