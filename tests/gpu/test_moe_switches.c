// The MoE family's switches and traps, under the CPU emulator only (tests/gpu/test_moe.c is the
// family's parity with the CPU reference, on the GPU and under the emulator). Each case runs in a
// forked child (tests/expect_death.h) that must stop with the message named: the expert GEMMs'
// switches (HYBRID_MOE_*) refusing values they do not know or that another switch rules out; the
// wgmma switch on a GPU that is not compute capability 9.0 (the emulator's capability set per
// child); the cuBLAS path's check that the offsets its kernels read are the host copy its GEMMs
// were sized from. Emulator-only: the capability is the emulator's to set, and a child forked
// after the parent made a CUDA context cannot use the GPU (docs/cuda.md, "The CPU emulator").
#ifndef HYBRID_CUDA_EMU
#error "tests/gpu/test_moe_switches.c runs under the CPU emulator only (the Makefile's EMU_ONLY_TESTS)"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/util.h"
#include "kernels/cuda_backend.h"  // cuda_moe_set_gemm, cuda_moe_wgmma, cuda_emu_set_cc
#include "model/backend.h"
#include "model/ops/moe/moe.h"
#include "tests/expect_death.h"
#include "tests/gpu/harness.h"
#include "tests/testing.h"

const MoeOps *cuda_moe_ops(void);  // kernels/moe/table.cu
static const MoeOps *X;
static const GluAct SWIGLU = {GLU_SWIGLU, 0.0, 0.0};

// The expert GEMMs' switches refuse a value they do not know, naming it (a typo must not run the
// default silently), and a value that another switch's value rules out, naming both. Each child
// clears every switch (a user's values must not leak in), sets the case's others, then the bad
// one, and runs a small forward of the expert op, which reads the switches at its first call (so
// these run before any other expert call of the program: the values are kept once read).
typedef struct {
    const char *name, *value;
    const char *also[4];  // (name, value) pairs set first (NULL: none)
    const char *says;     // the message's other part (NULL: "expected", env_choice's list)
} BadSwitch;
static const char *const moe_switches[] = {"HYBRID_MOE_GEMM",         "HYBRID_MOE_WGMMA", "HYBRID_MOE_WG_BN",
                                           "HYBRID_MOE_WG_GLU_FUSED", "HYBRID_MOE_WG_WS", "HYBRID_MOE_WG_TMA",
                                           "HYBRID_MOE_WG_WS_STORE"};
// a small forward of the expert op (two experts, widths 16: every path suits it)
enum { SMALL_E = 2, SMALL_C = 16, SMALL_M = 16, SMALL_ROWS = 8 };
typedef struct {
    void *x, *y, *h, *a, *w13, *w2;
    int *offsets;  // {0, 5, 8}
} SmallExperts;
static SmallExperts experts_small_forward(void) {
    const int E = SMALL_E, C = SMALL_C, M = SMALL_M, rows = SMALL_ROWS, off[3] = {0, 5, 8};
    SmallExperts s = {dev_bf16(NULL, (size_t)rows * C), dev_bf16(NULL, (size_t)rows * C),
                      dev_bf16(NULL, (size_t)rows * 2 * M), dev_bf16(NULL, (size_t)rows * M),
                      dev_bf16(NULL, (size_t)E * 2 * M * C), dev_bf16(NULL, (size_t)E * C * M),
                      dev_bytes(off, sizeof off)};
    X->moe_experts_forward(s.y, s.h, s.a, s.x, s.w13, s.w2, s.offsets, E, C, M, SWIGLU);
    return s;
}
static void experts_with_env(void *arg) {
    const BadSwitch *b = arg;
    for (size_t i = 0; i < sizeof moe_switches / sizeof *moe_switches; i++) unsetenv(moe_switches[i]);
    for (int i = 0; i < 4 && b->also[i]; i += 2) setenv(b->also[i], b->also[i + 1], 1);
    setenv(b->name, b->value, 1);
    experts_small_forward();
}
// HYBRID_MOE_WGMMA on another GPU than compute capability 9.0 (the emulator's cc set to 8.0):
// =1 stops the run naming the switch and the GPU; auto (unset) keeps our mma.sync kernels. Each
// child reports what its forward ran by dying with it (wgmma on or off, wgmma launches), so the
// same fork-and-read harness checks it; on 9.0, auto runs the forward's two GEMMs on wgmma.
typedef struct {
    int cc;
    const char *value;  // HYBRID_MOE_WGMMA's (NULL: unset, auto)
} WgmmaGpu;
static void experts_on_gpu(void *arg) {
    const WgmmaGpu *w = arg;
    cuda_emu_set_cc(w->cc);
    if (w->value) setenv("HYBRID_MOE_WGMMA", w->value, 1);
    else unsetenv("HYBRID_MOE_WGMMA");
    unsetenv("HYBRID_MOE_GEMM");  // (the default mode: the forward's two GEMMs ours)
    experts_small_forward();
    die("ran: wgmma %d, %ld wgmma launches", cuda_moe_wgmma(), cuda_moe_wgmma_launches());
}
static void test_wgmma_gpu(void) {
    static const WgmmaGpu on80 = {80, "1"}, auto80 = {80, NULL}, auto90 = {90, NULL}, off90 = {90, "0"};
    CHECK(expect_death(experts_on_gpu, (void *)&on80, "HYBRID_MOE_WGMMA=1 on cc 8.0", "HYBRID_MOE_WGMMA=1",
                       "compute capability 8.0"),
          "HYBRID_MOE_WGMMA=1 on a GPU of compute capability 8.0 is refused");
    CHECK(expect_death(experts_on_gpu, (void *)&auto80, "auto on cc 8.0", "ran: wgmma 0, 0 wgmma launches"),
          "HYBRID_MOE_WGMMA unset (auto) on compute capability 8.0: mma.sync");
    CHECK(expect_death(experts_on_gpu, (void *)&auto90, "auto on cc 9.0", "ran: wgmma 1, 2 wgmma launches"),
          "HYBRID_MOE_WGMMA unset (auto) on compute capability 9.0: wgmma");
    CHECK(expect_death(experts_on_gpu, (void *)&off90, "0 on cc 9.0", "ran: wgmma 0, 0 wgmma launches"),
          "HYBRID_MOE_WGMMA=0 on compute capability 9.0: mma.sync");
}
// The cuBLAS path sizes its GEMMs on the host, from the forward's copy of the offsets (the
// backward reuses it: no second synchronization), and checks on the device that the offsets its
// kernels read are still those (experts_cublas.cu, moe_cublas_check_offset): offsets rewritten in
// place between a forward and its backward stop the run naming the entry, instead of GEMMs of the
// wrong sizes. Two children: cublas (the grouped calls' pointer kernel checks) and mixed with its
// weight gradients forced onto cuBLAS (the per-expert calls' check kernel; the row GEMMs ours).
typedef struct {
    int mode, mixed_wgrad;  // cuda_moe_set_gemm's, cuda_moe_set_mixed_wgrad's
} OffsetsRewritten;
static void experts_offsets_rewritten(void *arg) {
    const OffsetsRewritten *o = arg;
    fflush(stdout);
    dup2(2, 1);  // (the kernel's message is a device printf: stdout; the harness reads stderr)
    cuda_moe_set_gemm(o->mode);
    cuda_moe_set_mixed_wgrad(o->mixed_wgrad);
    const int E = SMALL_E, C = SMALL_C, M = SMALL_M, rows = SMALL_ROWS, moved[3] = {0, 3, 8};
    if (o->mode == 2 && (cuda_moe_gemm_on_cublas(2, E, C, M) || cuda_moe_gemm_on_cublas(4, E, C, M)))
        die("mixed: the row GEMMs on cuBLAS (wgmma off?): this case is for the per-expert calls' check");
    const SmallExperts s = experts_small_forward();
    G->upload_tokens(s.offsets, moved, 3);  // (valid offsets, other sizes: expert 0 now has 3 rows, not 5)
    void *dy = dev_bf16(NULL, (size_t)rows * C), *dx = dev_bf16(NULL, (size_t)rows * C),
         *dh = dev_bf16(NULL, (size_t)rows * 2 * M), *da = dev_bf16(NULL, (size_t)rows * M),
         *dw13 = dev_f32(NULL, (size_t)E * 2 * M * C), *dw2 = dev_f32(NULL, (size_t)E * C * M);
    X->moe_experts_backward(dx, dw13, dw2, dh, da, dy, s.x, s.h, s.a, s.w13, s.w2, s.offsets, E, C, M, SWIGLU);
    int back[3];
    G->copy_to_host(back, s.offsets, sizeof back);  // (waits for the backward's kernels)
    die("ran: the backward finished on offsets the forward had not seen");
}
static void test_offsets_rewritten(void) {
    static const OffsetsRewritten cublas = {1, -1}, mixed = {2, 1};
    CHECK(expect_death(experts_offsets_rewritten, (void *)&cublas, "cublas, offsets rewritten",
                       "offsets[1] is 3 on the device but 5 in the host copy", "__trap()"),
          "cublas: offsets rewritten between the forward and the backward stop the run, naming offsets[1]");
    CHECK(expect_death(experts_offsets_rewritten, (void *)&mixed, "mixed, offsets rewritten",
                       "offsets[1] is 3 on the device but 5 in the host copy", "__trap()"),
          "mixed, weight gradients on cuBLAS: offsets rewritten between the forward and the backward "
          "stop the run, naming offsets[1]");
}
static void test_switch_errors(void) {
#define WG1 "HYBRID_MOE_WGMMA", "1"
    static const BadSwitch bad[] = {
        {"HYBRID_MOE_GEMM", "owned", {NULL}, NULL},
        {"HYBRID_MOE_WGMMA", "on", {NULL}, NULL},
        {"HYBRID_MOE_WG_BN", "64", {WG1}, NULL},
        {"HYBRID_MOE_WG_GLU_FUSED", "yes", {WG1}, NULL},
        {"HYBRID_MOE_WG_WS", "1", {WG1}, NULL},
        {"HYBRID_MOE_WG_TMA", "yes", {WG1}, NULL},
        // the warp-specialized kernels at the 128-wide tile they do not have
        {"HYBRID_MOE_WG_WS", "rows", {WG1, "HYBRID_MOE_WG_BN", "128"}, "HYBRID_MOE_WG_BN=128"},
        // TMA without the warp-specialized kernels it belongs to (unset: auto, which chooses
        // TMA itself; auto named; 0)
        {"HYBRID_MOE_WG_TMA", "1", {WG1}, "HYBRID_MOE_WG_WS=rows"},
        {"HYBRID_MOE_WG_TMA", "1", {WG1, "HYBRID_MOE_WG_WS", "auto"}, "auto, the default, chooses its own kernels"},
        {"HYBRID_MOE_WG_TMA", "1", {WG1, "HYBRID_MOE_WG_WS", "0"}, "HYBRID_MOE_WG_WS=rows"},
        {"HYBRID_MOE_WG_TMA", "2", {WG1}, "HYBRID_MOE_WG_WS=rows"},
        {"HYBRID_MOE_WG_WS_STORE", "rows", {WG1}, NULL},
        // the staged store without the warp-specialized kernels (unset: auto)
        {"HYBRID_MOE_WG_WS_STORE", "staged", {WG1}, "HYBRID_MOE_WG_WS=rows"}};
#undef WG1
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "%s=%s", bad[i].name, bad[i].value);
        const char *says = bad[i].says ? bad[i].says : "expected";
        CHECK(expect_death(experts_with_env, (void *)&bad[i], want, want, says), "%s is refused, the message naming "
              "it and '%s'", want, says);
    }
}

int main(void) {
    gpu_test_init("test_moe_switches");
    X = cuda_moe_ops();
    test_switch_errors();  // (first: the switches are read once a process, the parent's too)
    test_wgmma_gpu();
    test_offsets_rewritten();
    gpu_test_summary();
    TEST_MAIN_END();
}
