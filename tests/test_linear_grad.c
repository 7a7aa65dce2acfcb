// Whole-model gradient checks of the K (KDA), G (GDN), D (DeltaNet) and L (linear attention)
// mixers (docs/delta-rule.md, "Layers" and "Verification"): tiny hybrids against central
// finite differences in double, every parameter element, per tensor
// max |fd - analytic| / max |fd| <= 1e-6. Covers several chunks with a partial last one,
// K != V, both KDA gate forms, and reset_at_eot with end-of-text tokens in the batch (more
// sequences than one chunkwise call takes, so the grouped calls run too). Also: the
// gradients are bit-identical on 1 thread and on all threads.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "model/model.h"
#include "base/util.h"
#include "model_fd.h"
#include "testing.h"

#define EOT 3

typedef struct {
    const char *label, *layers, *norm, *mlp;
    int chunk, reset, heads, head_dim, value_dim, rank;
    const char *lower_bound;
} Case;

static Config make_config(const Case *k) {
    Config c;
    config_defaults(&c);
    config_set_override(&c, "layers", k->layers);
    config_set_override(&c, "norm", k->norm);
    config_set_override(&c, "mlp", k->mlp);
    config_set_override(&c, "position", "none");
    c.model.d_model = 8;
    c.model.n_head = 2;
    c.model.vocab_size = 11;
    c.model.padded_vocab_size = 16;
    c.model.context_length = 8;
    c.seq_len = 5;
    c.batch_size = 2;
    c.model.bias = 0;
    c.model.mlp_hidden = 16;  // the channel mixer is not under test here
    c.model.init_std = 0.4;  // large enough that every branch matters
    c.model.linear_heads = k->heads;
    c.model.linear_head_dim = k->head_dim;
    c.model.linear_value_dim = k->value_dim;
    c.model.gate_rank = k->rank;
    c.model.chunk_size = k->chunk;
    c.model.reset_at_eot = k->reset;
    c.model.eot_token = EOT;
    config_set_override(&c, "kda_gate_lower_bound", k->lower_bound);
    config_finalize(&c);
    return c;
}

static void gradcheck(const Case *k) {
    Config c = make_config(k);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 2, 5);
    model_init_params(&m, 42);
    // norm gains, biases start at one/zero: perturb them so their gradients are generic
    // (A_log and dt_bias keep their ranges)
    model_perturb_special(&m, 7, 0.3, 1);
    // EOT (3) inside both rows and as the last token: sequences [0,3) [3,5) [5,8) [8,10)
    int inputs[10] = {1, 5, 3, 9, 0, 10, 2, 3, 7, 3};
    int targets[10] = {5, 3, 9, 0, 10, 2, -1, 7, 4, 6};

    model_zero_grad(&m);
    model_forward(&m, inputs, targets, 2, 5);
    model_backward(&m, 1.0f);
    if (k->reset) CHECK(m.acts.seg.nseq == 4 && m.acts.seg.ngroups >= 1, "%s: nseq %d", k->label, m.acts.seg.nseq);
    real *grads = m.grads;
    const size_t n = m.table.total;
    // thousands of tiny forwards: one thread, so OpenMP barriers do not dominate (the ops
    // are thread-count independent; the analytic gradient above ran on all threads)
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    {  // determinism: the same loss and gradients, bit for bit, on one thread
        real *saved = xmalloc(sizeof(real) * n);
        memcpy(saved, grads, sizeof(real) * n);
        model_zero_grad(&m);
        model_forward(&m, inputs, targets, 2, 5);
        model_backward(&m, 1.0f);
        CHECK(!memcmp(saved, grads, sizeof(real) * n), "%s: gradients differ between %d threads and 1", k->label,
              threads);
        memcpy(grads, saved, sizeof(real) * n);
        free(saved);
    }
    // fourth-order central difference: the h^2 error of the plain one is not negligible
    // at 1e-6 where the L2 and RMS norms see small vectors
    FdBatch batch = {inputs, targets, 2, 5};
    TensorFd *fd = model_fd_compare(&m, model_batch_loss, &batch, 3e-5, 4);
    double worst = 0;
    for (int i = 0; i < m.table.count; i++) {
        const ParamInfo *pi = &m.table.items[i];
        double rel = tensor_fd_rel(&fd[i]);
        if (!(rel <= worst)) worst = rel;
        int padding_rows = (i == m.mp.tok_embed || i == m.mp.lm_head);
        CHECK(fd[i].max_numeric > 0 || padding_rows, "%s: %s: gradient is identically zero", k->label, pi->name);
        CHECK(rel <= 1e-6, "%s: %s: max |fd - analytic| / max |fd| = %.3e", pi->name, k->label, rel);
    }
    free(fd);
    omp_set_num_threads(threads);
    printf("%-52s %5zu params  worst tensor rel err %.2e\n", k->label, m.table.total, worst);
    model_destroy(&m);
}

int main(void) {
    static const Case cases[] = {
        // label                                      layers  norm      mlp    chunk reset H  K  V  R  lb
        {"KA: KDA + attention, chunk 2, K != V", "KA", "rmsnorm", "swiglu", 2, 0, 2, 4, 3, 3, "0"},
        {"GK: GDN + KDA (lower-bound gate), chunk 2", "GK", "rmsnorm", "swiglu", 2, 0, 2, 4, 3, 2, "-3"},
        {"DL: DeltaNet + linear attention, chunk 3", "DL", "layernorm", "gelu", 3, 0, 2, 3, 4, 0, "0"},
        {"KGDL: reset_at_eot, chunk 2", "KGDL", "rmsnorm", "swiglu", 2, 1, 2, 4, 3, 3, "0"},
        {"KGDL: reset_at_eot, chunk 64 (grouped calls)", "KGDL", "rmsnorm", "gelu", 64, 1, 1, 4, 4, 2, "-5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gradcheck(&cases[i]);
    TEST_MAIN_END();
}
