// Decoding (model/decode.h) against the full forward, in double: for every position t,
// the logits of decode step t equal row t of model_forward over the same tokens to
// 1e-10 relative (the recurrent steps vs the chunkwise forms, the KV cache vs full
// attention), for A, K, G, D, L and hybrids, with and without reset_at_eot. Also: the
// state really resets at end-of-text (later logits do not see earlier documents), a
// reset decoder repeats itself, and cached sampling matches windowed sampling.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/decode.h"
#include "base/util.h"
#include "testing.h"
#include "train/generate.h"

#define EOT 7
#define LEN 29

typedef struct {
    const char *layers, *position, *norm, *mlp;
    int chunk, reset;
} Case;

static Config make_config(const Case *k) {
    Config c;
    config_defaults(&c);
    config_set_override(&c, "layers", k->layers);
    config_set_override(&c, "position", k->position);
    config_set_override(&c, "norm", k->norm);
    config_set_override(&c, "mlp", k->mlp);
    c.d_model = 16;
    c.n_head = 2;
    c.vocab_size = 23;
    c.padded_vocab_size = 32;
    c.context_length = 32;
    c.seq_len = LEN;
    c.init_std = 0.3;
    c.linear_heads = 2;
    c.linear_head_dim = 6;
    c.linear_value_dim = 5;
    c.gate_rank = 4;
    c.chunk_size = k->chunk;
    c.reset_at_eot = k->reset;
    c.eot_token = EOT;
    config_finalize(&c);
    return c;
}

static void make_model(Model *m, const Config *c) {
    model_create(m, c, backend_cpu(), 1, LEN);
    model_init_params(m, 5);
    size_t n = m->table.total;
    float *p = xmalloc(sizeof(float) * n);
    model_get_params(m, p);
    Rng rng;
    rng_seed(&rng, 9);
    for (int i = 0; i < m->table.count; i++) {  // make gains and biases generic
        const ParamInfo *pi = &m->table.items[i];
        if (pi->init == INIT_ZERO || pi->init == INIT_ONE)
            for (size_t j = 0; j < pi->numel; j++) p[pi->offset + j] += (float)(0.3 * rng_normal(&rng));
    }
    model_set_params(m, p);
    free(p);
}

// max over rows and columns |decode - forward| / max |forward|, read from the double
// logits buffer (model_logits_row would round to float)
static double decode_vs_forward(Model *m, const int *tokens, int n) {
    const int Vp = m->cfg.padded_vocab_size, V = m->cfg.vocab_size;
    double *ref = xmalloc(sizeof(double) * (size_t)n * Vp), *first = xmalloc(sizeof(double) * (size_t)n * Vp);
    float *step = xmalloc(sizeof(float) * Vp);
    model_forward(m, tokens, NULL, 1, n);
    memcpy(ref, m->acts.logits, sizeof(double) * (size_t)n * Vp);
    Decoder d;
    model_decode_init(&d, m, n);
    double maxdiff = 0, maxref = 0;
    int download_ok = 1;
    for (int t = 0; t < n; t++) {
        model_decode_step(&d, m, tokens[t], step);
        const double *row = (const double *)m->acts.logits;  // the step's logits
        memcpy(first + (size_t)t * Vp, row, sizeof(double) * Vp);
        for (int v = 0; v < V; v++) {
            double diff = fabs(row[v] - ref[(size_t)t * Vp + v]);
            if (!(diff <= maxdiff)) maxdiff = diff;
            maxref = fmax(maxref, fabs(ref[(size_t)t * Vp + v]));
            download_ok &= step[v] == (float)row[v];
        }
    }
    CHECK(download_ok, "the logits handed out are not the step's");
    // a reset decoder repeats itself bit for bit
    model_decode_reset(&d, m);
    int same = 1;
    for (int t = 0; t < n; t++) {
        model_decode_step(&d, m, tokens[t], step);
        same &= !memcmp(first + (size_t)t * Vp, m->acts.logits, sizeof(double) * Vp);
    }
    CHECK(same, "a reset decoder gives other logits");
    model_decode_free(&d, m);
    free(ref);
    free(first);
    free(step);
    return maxdiff / (maxref > 0 ? maxref : 1);
}

static void tokens_with_eot(int *t, int n, unsigned long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int)rng_below(&r, 23);
    t[4] = EOT;  // documents [0,5) [5,13) [13,14) [14,...)
    t[12] = EOT;
    t[13] = EOT;
    for (int i = 14; i < n; i++)
        if (t[i] == EOT) t[i] = 1;
}

static void check_case(const Case *k) {
    Config c = make_config(k);
    Model m;
    make_model(&m, &c);
    int tokens[LEN];
    tokens_with_eot(tokens, LEN, 3);
    double rel = decode_vs_forward(&m, tokens, LEN);
    CHECK(rel <= 1e-10, "layers %s chunk %d reset %d: decode vs forward rel err %.3e", k->layers, k->chunk, k->reset,
          rel);
    printf("layers %-8s position %-7s chunk %2d reset_at_eot %d: max |decode - forward| / max |forward| = %.2e\n",
           k->layers, k->position, k->chunk, k->reset, rel);
    model_destroy(&m);
}

// reset_at_eot: logits after an end-of-text token do not depend on what came before it
// (pure K/G/D/L model, no positions); without it they do.
static void check_reset_semantics(int reset) {
    Case k = {"KGDL", "none", "rmsnorm", "swiglu", 4, reset};
    Config c = make_config(&k);
    Model m;
    make_model(&m, &c);
    int a[LEN], b[LEN];
    tokens_with_eot(a, LEN, 3);
    memcpy(b, a, sizeof a);
    for (int i = 0; i < 12; i++) b[i] = (a[i] + 5) % 23 == EOT ? 2 : (a[i] + 5) % 23;  // a different past
    const int Vp = c.padded_vocab_size;
    double *la = xmalloc(sizeof(double) * LEN * Vp);
    model_forward(&m, a, NULL, 1, LEN);
    memcpy(la, m.acts.logits, sizeof(double) * LEN * Vp);
    model_forward(&m, b, NULL, 1, LEN);
    const double *lb = (const double *)m.acts.logits;
    double after = 0;  // rows 13.. (the tokens after the EOT at 12) should be identical
    for (int t = 13; t < LEN; t++)
        for (int v = 0; v < Vp; v++) after = fmax(after, fabs(la[t * Vp + v] - lb[t * Vp + v]));
    if (reset) CHECK(after == 0, "reset_at_eot: logits after the EOT changed by %.3e", after);
    else CHECK(after > 1e-6, "without reset_at_eot the past should matter (diff %.3e)", after);
    free(la);
    model_destroy(&m);
}

// generate(): cached decoding samples the same greedy tokens as full forwards
static void check_generate(void) {
    Case k = {"GKAL", "learned", "layernorm", "gelu", 4, 1};
    Config c = make_config(&k);
    Model m;
    make_model(&m, &c);
    int cached[LEN], manual[LEN];
    tokens_with_eot(cached, 6, 2);
    memcpy(manual, cached, sizeof(int) * 6);
    Rng r;
    rng_seed(&r, 1);
    generate(&m, cached, 6, LEN - 6, 0.0, &r);
    float *logits = xmalloc(sizeof(float) * c.padded_vocab_size);
    for (int n = 6; n < LEN; n++) {
        model_forward(&m, manual, NULL, 1, n);
        model_logits_row(&m, 0, n - 1, logits);
        int best = 0;
        for (int v = 1; v < c.vocab_size; v++)
            if (logits[v] > logits[best]) best = v;
        manual[n] = best;
    }
    CHECK(!memcmp(cached, manual, sizeof cached), "greedy generate differs from full forwards");
    free(logits);
    model_destroy(&m);
}

int main(void) {
    static const Case cases[] = {
        {"A x2", "learned", "layernorm", "gelu", 64, 0},  // GPT-2: KV cache only
        {"KA", "learned", "layernorm", "gelu", 4, 0},
        {"K x2", "none", "rmsnorm", "swiglu", 64, 0},
        {"G x2", "none", "rmsnorm", "swiglu", 5, 0},
        {"DL", "none", "rmsnorm", "swiglu", 3, 0},
        {"GDLA", "learned", "rmsnorm", "swiglu", 4, 0},
        {"KGDL", "none", "rmsnorm", "swiglu", 4, 1},
        {"KAGA", "learned", "rmsnorm", "swiglu", 64, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
    check_reset_semantics(1);
    check_reset_semantics(0);
    check_generate();
    TEST_MAIN_END();
}
