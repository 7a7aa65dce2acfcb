// The one generation path (model.h, model_forward_cached) against the full forward, in
// double: for every position t, the logits of the cached forward equal row t of
// model_forward over the same tokens to 1e-12 relative, for one config of every registered
// mixer (A's KV cache, M's absorbed latent cache with and without RoPE / q-LoRA / gate,
// K/G/D/L's recurrent and conv states), mixed patterns, MoE and Block AttnRes, and
// configs/default.conf itself; fed one token at a time and in prefill chunks, with and
// without reset_at_eot (end-of-text tokens inside a chunk and at a chunk's end). Also: the
// state really resets at end-of-text, reset caches repeat themselves bit for bit, cached
// sampling picks the same tokens as full-forward sampling, and misuse dies with a message.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/config.h"
#include "base/util.h"
#include "expect_death.h"
#include "hybrid_test_util.h"
#include "testing.h"
#include "train/generate.h"

#define EOT 7
#define LEN 29

// A tiny model of `layers` (hybrid_test_util.h's tiny hybrid: MLA, MoE, AttnRes keys set;
// pairs of extra overrides end with NULL).
static Config make_config(const char *layers, int reset, ...) {
    Config c = tiny_hybrid("layers", layers, NULL);
    config_set_override(&c, "d_model", "16");
    config_set_override(&c, "vocab_size", "23");
    config_set_override(&c, "padded_vocab_size", "32");
    config_set_override(&c, "context_length", "32");
    config_set_override(&c, "seq_len", "29");
    config_set_override(&c, "linear_heads", "2");
    config_set_override(&c, "linear_head_dim", "6");
    config_set_override(&c, "linear_value_dim", "5");
    config_set_override(&c, "gate_rank", "4");
    config_set_override(&c, "chunk_size", "4");
    config_set_override(&c, "reset_at_eot", reset ? "true" : "false");
    char eot[16];
    snprintf(eot, sizeof eot, "%d", EOT);
    config_set_override(&c, "eot_token", eot);
    va_list ap;
    va_start(ap, reset);
    for (const char *k = va_arg(ap, const char *); k; k = va_arg(ap, const char *))
        config_set_override(&c, k, va_arg(ap, const char *));
    va_end(ap);
    config_finalize(&c);
    return c;
}

static void tokens_with_eot(int *t, int n, int V, unsigned long seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) t[i] = (int)rng_below(&r, (uint64_t)V);
    if (EOT < V) {
        for (int i = 0; i < n; i++)
            if (t[i] == EOT) t[i] = 1;
        // documents [0,5) [5,13) [13,14) [14,...): one EOT inside a chunk, two in a row
        t[4] = EOT;
        t[12] = EOT;
        t[13] = EOT;
    }
}

// the double logits of rows [0, n) of the last forward (CPU backend: host memory)
static void logits_rows(Model *m, int n, double *out) {
    const size_t Vp = (size_t)m->cfg.padded_vocab_size;
    memcpy(out, model_logits(m, 0, n), sizeof(double) * n * Vp);
}

// max over positions and real vocabulary columns |a - b| / max |a|
static double rel_diff(const Model *m, const double *a, const double *b, int n) {
    const int Vp = m->cfg.padded_vocab_size, V = m->cfg.vocab_size;
    double d = 0, s = 0;
    for (int t = 0; t < n; t++)
        for (int v = 0; v < V; v++) {
            double e = fabs(a[(size_t)t * Vp + v] - b[(size_t)t * Vp + v]);
            if (!(e <= d)) d = e;  // NaN sticks
            s = fmax(s, fabs(a[(size_t)t * Vp + v]));
        }
    return s > 0 ? d / s : d;
}

// Feeds tokens through the cached forward in pieces of the sizes in `chunks` (cycled)
// and collects every position's logits.
static void run_cached(Model *m, const int *tokens, int n, const int *chunks, int nchunks, double *out) {
    const size_t Vp = (size_t)m->cfg.padded_vocab_size;
    model_cache_reset(m);
    for (int at = 0, k = 0; at < n; k++) {
        int len = chunks[k % nchunks];
        if (len > n - at) len = n - at;
        model_forward_cached(m, tokens + at, len);
        logits_rows(m, len, out + (size_t)at * Vp);
        at += len;
    }
}

// Cached vs full forward for one config: one token at a time, and in prefill chunks.
static void check_config(const char *label, const Config *c, int n) {
    Model m;
    model_create(&m, &c->model, backend_cpu(), 1, n);
    tiny_hybrid_params(&m, 3, 0.3);
    int *tokens = xmalloc(sizeof(int) * n);
    tokens_with_eot(tokens, n, c->model.vocab_size, 5);
    const size_t Vp = (size_t)c->model.padded_vocab_size;
    double *full = xmalloc(sizeof(double) * n * Vp), *steps = xmalloc(sizeof(double) * n * Vp),
           *chunked = xmalloc(sizeof(double) * n * Vp), *again = xmalloc(sizeof(double) * n * Vp);
    model_forward(&m, tokens, NULL, 1, n);
    logits_rows(&m, n, full);
    const double margin = moe_min_margin(&m, n);
    model_cache_init(&m, n);
    const int one[1] = {1}, pieces[4] = {3, 1, 5, 2};  // pieces end at 3, 4, 9, 11, 14, 15, ...
    run_cached(&m, tokens, n, one, 1, steps);
    run_cached(&m, tokens, n, pieces, 4, chunked);
    const double e1 = rel_diff(&m, full, steps, n), e2 = rel_diff(&m, full, chunked, n);
    printf("%-58s cached vs full forward: token by token %.2e, in chunks %.2e\n", label, e1, e2);
    CHECK(margin > 1e-6, "%s: routing near-tie (%g) would make the comparison meaningless", label, margin);
    CHECK(e1 <= 1e-12, "%s: token-by-token logits differ from the full forward by %.3e", label, e1);
    CHECK(e2 <= 1e-12, "%s: chunked logits differ from the full forward by %.3e", label, e2);
    // reset caches repeat themselves bit for bit
    run_cached(&m, tokens, n, one, 1, again);
    CHECK(!memcmp(again, steps, sizeof(double) * n * Vp), "%s: a reset cache gives other logits", label);
    // a full forward after decoding is unaffected by the caches
    model_forward(&m, tokens, NULL, 1, n);
    logits_rows(&m, n, again);
    CHECK(!memcmp(again, full, sizeof(double) * n * Vp), "%s: the forward after decoding changed", label);
    free(full), free(steps), free(chunked), free(again), free(tokens);
    model_destroy(&m);
}

// reset_at_eot: logits after an end-of-text token do not depend on what came before it
// (K/G/D/L layers only, no positions), through the full and the cached forward; without
// it they do.
static void check_reset_semantics(int reset) {
    Config c = make_config("KGDL", reset, "position", "none", "moe_experts", "0", "attn_res_block", "0", NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 1, LEN);
    tiny_hybrid_params(&m, 4, 0.3);
    int a[LEN], b[LEN];
    tokens_with_eot(a, LEN, c.model.vocab_size, 3);
    memcpy(b, a, sizeof a);
    for (int i = 0; i < 12; i++) b[i] = (a[i] + 5) % 23 == EOT ? 2 : (a[i] + 5) % 23;  // a different past
    const size_t Vp = (size_t)c.model.padded_vocab_size;
    double *la = xmalloc(sizeof(double) * LEN * Vp), *lb = xmalloc(sizeof(double) * LEN * Vp);
    const int one[1] = {1};
    model_cache_init(&m, LEN);
    for (int cached = 0; cached < 2; cached++) {
        if (cached) {
            run_cached(&m, a, LEN, one, 1, la);
            run_cached(&m, b, LEN, one, 1, lb);
        } else {
            model_forward(&m, a, NULL, 1, LEN);
            logits_rows(&m, LEN, la);
            model_forward(&m, b, NULL, 1, LEN);
            logits_rows(&m, LEN, lb);
        }
        double after = 0;  // rows 13.. (the tokens after the EOT at 12) should be identical
        for (size_t t = 13; t < LEN; t++)
            for (size_t v = 0; v < Vp; v++) after = fmax(after, fabs(la[t * Vp + v] - lb[t * Vp + v]));
        if (reset) CHECK(after == 0, "reset_at_eot (%s): logits after the EOT changed by %.3e", cached ? "cached" : "full", after);
        else CHECK(after > 1e-6, "without reset_at_eot the past should matter (%s; diff %.3e)", cached ? "cached" : "full", after);
    }
    free(la), free(lb);
    model_destroy(&m);
}

// generate(): cached decoding samples the same greedy tokens as full forwards, and the same
// tokens as GENERATE_FULL_FORWARD
static void check_generate(void) {
    Config c = make_config("GKAM", 1, "position", "learned", NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 1, LEN);
    tiny_hybrid_params(&m, 6, 0.3);
    int cached[LEN], windowed[LEN], manual[LEN];
    tokens_with_eot(cached, 6, c.model.vocab_size, 2);
    memcpy(manual, cached, sizeof(int) * 6);
    memcpy(windowed, cached, sizeof(int) * 6);
    Rng r;
    rng_seed(&r, 1);
    generate(&m, cached, 6, LEN - 6, 0.0, &r, GENERATE_CACHED);
    generate(&m, windowed, 6, LEN - 6, 0.0, &r, GENERATE_FULL_FORWARD);
    float *logits = xmalloc(sizeof(float) * c.model.padded_vocab_size);
    for (int n = 6; n < LEN; n++) {
        model_forward(&m, manual, NULL, 1, n);
        model_logits_row(&m, 0, n - 1, logits);
        int best = 0;
        for (int v = 1; v < c.model.vocab_size; v++)
            if (logits[v] > logits[best]) best = v;
        manual[n] = best;
    }
    CHECK(!memcmp(cached, manual, sizeof cached), "greedy cached generate differs from full forwards");
    CHECK(!memcmp(windowed, manual, sizeof windowed), "greedy full-forward generate differs from full forwards");
    free(logits);
    model_destroy(&m);
}

// misuse dies with a message
static void cached_without_init(void *ctx) {
    (void)ctx;
    Config c = make_config("KA", 0, NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 1, 8);
    int t[1] = {1};
    model_forward_cached(&m, t, 1);
}

static void cached_past_the_cache(void *ctx) {
    (void)ctx;
    Config c = make_config("MA", 0, NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 1, 8);
    model_cache_init(&m, 4);
    int t[5] = {1, 2, 3, 4, 5};
    model_forward_cached(&m, t, 5);  // (no forward runs in the child: OpenMP after fork can hang)
}

static void cache_past_positions(void *ctx) {
    (void)ctx;
    Config c = make_config("A", 0, "position", "learned", NULL);
    Model m;
    model_create(&m, &c.model, backend_cpu(), 1, 8);
    model_cache_init(&m, 33);
}

int main(void) {
    // one config of every registered mixer, then mixes, with and without document resets
    for (const MixerOps *const *mx = mixer_all(); *mx; mx++) {
        char layers[8], label[96];
        snprintf(layers, sizeof layers, "%c x2", (*mx)->letter);
        snprintf(label, sizeof label, "%s x2 (%s)", (*mx)->name, layers);
        Config c = make_config(layers, 1, NULL);
        check_config(label, &c, LEN);
    }
    {
        Config c = make_config("A x2", 0, "position", "learned", "norm", "layernorm", "mlp", "gelu", "bias", "true",
                               "moe_experts", "0", "attn_res_block", "0", NULL);
        check_config("GPT-2 block (A x2, learned positions, LayerNorm, GELU, biases)", &c, LEN);
    }
    {
        Config c = make_config("MMM", 0, "mla_q_rank", "0", "mla_rope", "false", "mla_gate", "false", "moe_latent_dim",
                               "0", "attn_res_block", "0", NULL);
        check_config("NoPE MLA without q-LoRA or gate, MoE A, residuals", &c, LEN);
    }
    {
        Config c = make_config("MM", 0, "position", "learned", "mla_rope", "false", "mla_rope_dim", "0",
                               "attn_res_block", "1", NULL);
        check_config("MLA, learned positions, d_r = 0, AttnRes S = 1", &c, LEN);
    }
    {
        Config c = make_config("GDLA", 1, "position", "learned", "moe_experts", "0", NULL);
        check_config("GDLA, learned positions, reset_at_eot, AttnRes S = 2", &c, LEN);
    }
    {
        Config c = make_config("KKKM", 1, NULL);
        check_config("KKKM, MoE (latent, shared), AttnRes, reset_at_eot", &c, LEN);
    }
    {  // the shipped default model (make train), at a short length
        Config c;
        config_defaults(&c);
        config_load_file(&c, "configs/default.conf");
        config_set_override(&c, "seq_len", "24");
        config_finalize(&c);
        check_config("configs/default.conf (KKKM, MoE, AttnRes, 50304 logits)", &c, 24);
    }
    check_reset_semantics(1);
    check_reset_semantics(0);
    check_generate();
    CHECK(expect_death(cached_without_init, NULL, "cached forward without caches", "call model_cache_init first"),
          "a cached forward without caches should die");
    CHECK(expect_death(cached_past_the_cache, NULL, "cached forward past the cache", "5 more tokens after 0 exceed the 4"),
          "a cached forward past the cache should die");
    CHECK(expect_death(cache_past_positions, NULL, "caches past the learned positions", "exceed context_length"),
          "caches longer than the learned positions should die");
    TEST_MAIN_END();
}
