// The CPU emulator's runtime (tests/cuda_emu/cuda_emu.h says what it models and what not):
// the fiber scheduler behind emu_launch, barriers and warp exchanges, the runtime-API subset,
// and what kernels/backend_cuda.cu, kernels/device.cu and the families ask of the CUDA runtime,
// cuBLASLt and CUB. The backend itself (g_cuda, scratch_get, PROFILE, the error hooks,
// backend_cuda()) is kernels/backend_cuda.cu, compiled for the emulator as for the GPU: its
// "device" memory is host memory holding bf16 and fp32 exactly as the GPU's does.
//
// Fibers: makecontext gives each thread slot its own stack once, on its first block; a fiber
// whose thread has returned waits there for the next block (of this launch or a later one)
// and runs that thread from the start of the kernel body, so a block costs no new contexts
// (getcontext and swapcontext are system calls). A fiber that stops at a barrier picks the next
// fiber itself (pick_next: the scheduler's order) and switches straight to it, with GCC's
// __builtin_setjmp / __builtin_longjmp (a block switches at every barrier of every thread).
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/wgmma.cuh"

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace {

const size_t kStack = 256 * 1024;    // per thread: kernels keep small arrays in registers
const size_t kStackGuard = 4096;     // the lowest page of each fiber's kStack: no access
const size_t kMaxSmem = 232448;      // an H200 block's shared memory (227 KiB)
// The shared-window address of the dynamic shared memory's first byte (emu_smem_address): 16-byte
// aligned and no more, as on the GPU (where reserved and static shared memory come first), so a
// kernel that needs 1024-byte alignment (the wgmma swizzle) must align itself here too.
const uint32_t kSmemWindowBase = 0x410;
enum Wait { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, AT_MBARRIER, EXITED };

// The switch between fibers: GCC's __builtin_setjmp / __builtin_longjmp save and restore
// only the frame, stack pointer and resume address (the function that calls
// __builtin_setjmp keeps its other registers in its frame), with no signal mask and none of
// glibc's unwinding checks. (__builtin_longjmp is called apart from the function that did the
// __builtin_setjmp, as GCC asks.) Every function that switches is noipa: GCC must not learn
// from its body which registers it leaves alone (interprocedural register allocation would
// keep a caller's values in them across the call, and the other fibers change them).
typedef void *JumpBuf[5];
#if defined(__clang__)
#define SWITCHES __attribute__((noinline))
#else
#define SWITCHES __attribute__((noinline, noipa))
#endif
[[noreturn]] SWITCHES void jump_to(JumpBuf &to) { __builtin_longjmp(to, 1); }

// A cp.async of 16 bytes not yet landed (emu_cp_async16)
struct AsyncCopy {
    void *dst;
    const void *src;
    bool valid;
};

// A wgmma.mma_async issued and not yet performed (emu_wgmma_issue): this thread's accumulators
// and the instruction's operands
struct WgmmaOp {
    float *d;
    int n;
    uint64_t desc_a, desc_b;
    int scale_d, trans_a, trans_b;
};

// A thread's asynchronous operations of one kind in commit groups (cp.async, wgmma): issued ops
// wait in `open` until a commit closes their group; wait(n, perform) performs the oldest groups
// until at most n are left, as the instructions' wait_group does
template <typename Op>
struct AsyncGroups {
    std::vector<Op> open;
    std::deque<std::vector<Op>> groups;  // committed, oldest first
    void commit() {
        groups.push_back(std::move(open));
        open.clear();
    }
    template <typename F>
    void wait(int n, F perform) {
        while ((int)groups.size() > n) {
            for (const Op &op : groups.front()) perform(op);
            groups.pop_front();
        }
    }
    bool empty() const { return open.empty() && groups.empty(); }
    void clear() { open.clear(), groups.clear(); }
};

struct Fiber {
    ucontext_t start;  // used once, to enter the fiber on its own stack
    JumpBuf jb;        // where the fiber resumes
    int started;       // has a stack and a context: jb resumes it (at a barrier, or waiting for a block)
    Wait wait;
    unsigned tid;      // linear thread index in the block
    uint3 idx;         // its threadIdx
    AsyncGroups<AsyncCopy> copies;  // cp.async
    AsyncGroups<WgmmaOp> wgmma;     // wgmma.mma_async
    size_t wg_issued;               // wgmma issued by this thread in this block
    const void *mbar;               // AT_MBARRIER: the mbarrier waited on, and the parity of the
    unsigned mbar_parity;           // phase that must complete (emu_mbar_wait)
};

// A TMA map as emu_tma_encode writes it into a CUtensorMap's 128 bytes (kernels/tma.cuh)
struct EmuTmaMap {
    uint32_t magic;  // kTmaMagic: a map this emulator encoded
    int rank;
    const unsigned char *base;
    uint64_t dims[3], strides[3];  // strides in bytes, strides[0] = 2 (bf16)
    uint32_t box[3];
};
static_assert(sizeof(EmuTmaMap) <= sizeof(CUtensorMap), "the map fits a CUtensorMap");
const uint32_t kTmaMagic = 0x544d4131;
// A TMA copy issued and not yet landed (emu_tma_load)
struct TmaOp {
    unsigned char *dst;
    EmuTmaMap map;
    int c[3];
};

// An mbarrier (kernels/mbarrier.cuh): arrivals a phase, those still pending, bytes owed, parity;
// the TMA copies that complete against it, not yet landed
struct MBar {
    unsigned expected, pending;
    long tx;
    unsigned phase;
    std::vector<TmaOp> tma;
};

struct Block {
    std::vector<Fiber> fibers;
    char *stacks = nullptr;
    size_t stacks_bytes = 0;
    JumpBuf sched;  // run_block's context (resume_fiber)
    int cur = -1;   // the running fiber
    int round = 0, ran = 0;  // the scheduler's cursor (pick_next): round, whether a fiber ran in it,
    unsigned pos = 0;        // and the next position in the round
    int next = 0;   // for run_block: the fiber to start, or kBlockDone
    unsigned nthreads = 0;
    unsigned live = 0, block_arrived = 0;
    unsigned barrier_gen = 0;       // block barriers released so far (this block)
    int barrier_or[2] = {0, 0};     // __syncthreads_or's predicates, by generation parity
    const char *barrier_file = "";  // where the current generation's first thread arrived
    int barrier_line = 0;
    std::vector<unsigned> warp_live, warp_arrived;
    std::vector<uint64_t> exchange;  // 32 slots per warp
    const std::function<void()> *body = nullptr;
    unsigned char *smem = nullptr;
    size_t smem_cap = 0, smem_size = 0;  // allocated; this launch's
    // per warpgroup, the descriptors of each wgmma its threads issued, in order (the first thread
    // to issue one records it, the others must match: a wgmma is one instruction of 128 threads)
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> wg_issue;
    std::map<const void *, MBar> mbars;  // this block's, by address (mbar_init)
    const char *where = "";
} B;

void emu_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hybrid: error: CUDA emulator: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (block %u,%u,%u of %u,%u,%u; %u threads)\n", blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x,
            gridDim.y, gridDim.z, blockDim.x * blockDim.y * blockDim.z);
    va_end(ap);
    exit(1);
}

// The scheduler: rounds over the block's threads, even rounds in index order and odd rounds in
// reverse (see the header), each round resuming every thread that is RUNNING when its turn
// comes; the block is done when no thread is live at the end of a round, and a round in which
// no thread could run is a deadlock. The cursor (round, pos) lives in B, and the fiber that
// stops picks the next one itself and switches to it directly (a fiber not yet started, and the
// end of the block, go through run_block's context).
const int kBlockDone = -1;
int pick_next() {
    for (;;) {
        while (B.pos < B.nthreads) {
            unsigned i = B.pos++;
            unsigned t = B.round % 2 ? B.nthreads - 1 - i : i;
            if (B.fibers[t].wait != RUNNING) continue;
            B.ran = 1;
            return (int)t;
        }
        if (!B.ran)
            emu_die("%s: every live thread waits at a barrier that cannot complete (__syncthreads in "
                    "divergent code, a warp operation with lanes missing, or an mbarrier phase whose "
                    "arrivals never come)",
                    B.where);
        if (B.live == 0) return kBlockDone;
        B.round++, B.pos = 0, B.ran = 0;
    }
}

// from the current fiber (its context saved) to the next one
[[noreturn]] SWITCHES void run_next() {
    int t = pick_next();
    if (t != kBlockDone && B.fibers[t].started) {
        B.cur = t;
        threadIdx = B.fibers[t].idx;
        jump_to(B.fibers[t].jb);
    }
    B.next = t;
    jump_to(B.sched);
}

// the current fiber stops; returns when the scheduler resumes it
SWITCHES void yield_to_scheduler() {
    Fiber &f = B.fibers[B.cur];
    if (!__builtin_setjmp(f.jb)) run_next();
}

void release_block_if_complete() {
    if (B.block_arrived == 0 || B.block_arrived < B.live) return;
    B.block_arrived = 0;
    B.barrier_gen++;
    for (Fiber &f : B.fibers)
        if (f.wait == AT_BLOCK_BARRIER) f.wait = RUNNING;
}

void release_warp_if_complete(unsigned w) {
    if (B.warp_arrived[w] == 0 || B.warp_arrived[w] < B.warp_live[w]) return;
    B.warp_arrived[w] = 0;
    for (unsigned t = w * 32; t < w * 32 + 32 && t < B.nthreads; t++)
        if (B.fibers[t].wait == AT_WARP_BARRIER) B.fibers[t].wait = RUNNING;
}

void warp_barrier() {
    Fiber &f = B.fibers[B.cur];
    unsigned w = f.tid / 32;
    f.wait = AT_WARP_BARRIER;
    B.warp_arrived[w]++;
    release_warp_if_complete(w);
    if (f.wait != RUNNING) yield_to_scheduler();  // the last lane to arrive goes on at once
}

// A fiber's life: the kernel body for one thread of a block, then on to the next fiber; it is
// resumed (at the top of the loop) for the same thread slot of a later block. (Nothing is kept
// in a local across the __builtin_setjmp: B.fibers may have moved by then.)
SWITCHES void fiber_main() {
    for (;;) {
        (*B.body)();
        emu_cp_async_finish();  // (a thread's copies land by the end of the kernel)
        Fiber &f = B.fibers[B.cur];
        if (!f.wgmma.empty())
            emu_die("%s: thread %u ends with wgmma still in flight (no wgmma_wait<0> after its last commit, or "
                    "an uncommitted wgmma)",
                    B.where, f.tid);
        f.wait = EXITED;
        B.live--;
        B.warp_live[f.tid / 32]--;
        release_block_if_complete();  // an exited thread counts as arrived
        release_warp_if_complete(f.tid / 32);
        if (!__builtin_setjmp(B.fibers[B.cur].jb)) run_next();
    }
}

// Runs fiber t, and the fibers it hands on to, until a fiber not yet started is next or the
// block is done (B.next says which). (Apart from run_block, so that no loop variable is live
// across the __builtin_setjmp.)
SWITCHES void resume_fiber(unsigned t) {
    Fiber &f = B.fibers[t];
    B.cur = (int)t;
    threadIdx = f.idx;
    if (__builtin_setjmp(B.sched)) return;
    if (f.started) jump_to(f.jb);
    f.started = 1;
    getcontext(&f.start);
    // (each stack's top is offset by t cache lines within a page, so that the fibers' frames do
    // not all fall into the same cache sets)
    // (its lowest page is the guard below it: run_block's mprotect)
    f.start.uc_stack.ss_sp = B.stacks + (size_t)t * kStack + kStackGuard;
    f.start.uc_stack.ss_size = kStack - kStackGuard - (size_t)(t % 64) * 64;
    f.start.uc_link = nullptr;
    makecontext(&f.start, fiber_main, 0);
    ucontext_t here;
    swapcontext(&here, &f.start);  // never returns here: fibers leave by __builtin_longjmp
}

void run_block(unsigned nthreads) {
    B.nthreads = nthreads;
    B.live = nthreads;
    B.block_arrived = 0;
    B.barrier_gen = 0;
    unsigned nwarps = (nthreads + 31) / 32;
    B.warp_live.assign(nwarps, 32);
    if (nthreads % 32) B.warp_live[nwarps - 1] = nthreads % 32;
    B.warp_arrived.assign(nwarps, 0);
    B.exchange.assign(nwarps * 32, 0);
    for (unsigned t = 0; t < nthreads; t++) {
        Fiber &f = B.fibers[t];
        f.wait = RUNNING;
        f.tid = t;
        f.idx = {t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
        f.wgmma.clear(), f.wg_issued = 0;
        f.mbar = nullptr;
    }
    B.mbars.clear();
    B.wg_issue.assign((nthreads + 127) / 128, {});
    B.round = 0, B.pos = 0, B.ran = 0;
    for (int t = pick_next(); t != kBlockDone; t = B.next) resume_fiber((unsigned)t);
    for (const auto &kv : B.mbars)
        if (!kv.second.tma.empty())
            emu_die("%s: the block ends with %zu TMA copies that nobody waited for (their mbarrier's phase)", B.where,
                    kv.second.tma.size());
}

}  // namespace

// ---- the launch log ----
// With HYBRID_EMU_LAUNCH_LOG=FILE, each process appends at exit one line per kernel it launched:
// the executable, the kernel's address in it (as addr2line reads it), the largest block (threads)
// and the largest dynamic shared memory of its launches, tab-separated. tests/check_launch_limits.py
// holds them against the registers and static shared memory that ptxas gave the GPU build of the
// same kernel: a block that the emulator runs but the GPU would refuse (too many registers for its
// threads) fails `make test` instead of a device call.
namespace {
struct LaunchMax { unsigned threads; size_t smem; };
std::map<const void *, LaunchMax> g_launches;
const char *launch_log_path(void) {  // the log's file, or null (no log: launches are not noted)
    static const char *path = getenv("HYBRID_EMU_LAUNCH_LOG");
    return path && *path ? path : nullptr;
}
void write_launch_log(void) {
    const char *path = launch_log_path();
    FILE *f = fopen(path, "a");
    if (!f) { fprintf(stderr, "cuda_emu: HYBRID_EMU_LAUNCH_LOG: cannot open %s\n", path); return; }
    for (const auto &e : g_launches) {
        Dl_info info;
        if (!dladdr(e.first, &info) || !info.dli_fname) continue;
        // one line a write: appends of lines this short from several processes do not interleave
        char line[4096];
        int n = snprintf(line, sizeof line, "%s\t0x%llx\t%u\t%zu\n", info.dli_fname,
                         (unsigned long long)((const char *)e.first - (const char *)info.dli_fbase),
                         e.second.threads, e.second.smem);
        if (n > 0 && n < (int)sizeof line) fputs(line, f), fflush(f);
    }
    fclose(f);
}
void note_launch(const void *kernel, unsigned threads, size_t smem) {
    if (!launch_log_path()) return;
    static bool registered = false;
    if (!registered) registered = true, atexit(write_launch_log);
    LaunchMax &m = g_launches[kernel];
    m.threads = std::max(m.threads, threads);
    m.smem = std::max(m.smem, smem);
}
}  // namespace

void emu_launch(const void *kernel, dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
    gridDim = grid;
    blockDim = block;
    blockIdx = {0, 0, 0};
    unsigned long long nblocks = (unsigned long long)grid.x * grid.y * grid.z;
    unsigned nthreads = block.x * block.y * block.z;
    if (nblocks == 0 || nthreads == 0) emu_die("a launch with an empty grid or block (invalid configuration)");
    if (nthreads > 1024) emu_die("a block of more than 1024 threads");
    if (grid.y > 65535 || grid.z > 65535) emu_die("gridDim.y or .z above 65535");
    if (smem > kMaxSmem) emu_die("%zu bytes of dynamic shared memory (a block has at most %zu)", smem, kMaxSmem);
    note_launch(kernel, nthreads, smem);
    size_t need = (size_t)nthreads * kStack;
    if (need > B.stacks_bytes) {
        if (B.stacks) munmap(B.stacks, B.stacks_bytes);
        void *p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) emu_die("cannot map %zu bytes of fiber stacks", need);
        B.stacks = (char *)p;
        B.stacks_bytes = need;
        // a page below every fiber's stack that faults when touched: a kernel whose frame outgrows
        // its stack stops there (SIGSEGV in the deepest frame) instead of writing over its
        // neighbour's stack or whatever mapping lies below the first
        for (size_t t = 0; t < nthreads; t++)
            if (mprotect(B.stacks + t * kStack, kStackGuard, PROT_NONE))
                emu_die("cannot protect the guard page of fiber stack %zu", t);
        for (Fiber &f : B.fibers) f.started = 0;  // their stacks are gone
    }
    if (B.fibers.size() < nthreads) B.fibers.resize(nthreads);
    if (smem > B.smem_cap) {
        free(B.smem);
        B.smem = (unsigned char *)aligned_alloc(64, (smem + 63) / 64 * 64);
        if (!B.smem) emu_die("out of memory for shared memory");
        B.smem_cap = smem;
    }
    B.smem_size = smem;
    B.body = &body;
    B.where = "kernel";
    // blocks in a fixed pseudo-random order (a stride coprime with the count)
    unsigned long long stride = 1;
    if (nblocks > 2) {
        stride = (nblocks * 5) / 8 + 1;
        while (std::gcd(stride, nblocks) != 1) stride++;
    }
    for (unsigned long long i = 0, b = 0; i < nblocks; i++, b = (b + stride) % nblocks) {
        blockIdx.x = (unsigned)(b % grid.x);
        blockIdx.y = (unsigned)(b / grid.x % grid.y);
        blockIdx.z = (unsigned)(b / ((unsigned long long)grid.x * grid.y));
        if (smem) memset(B.smem, 0xff, smem);  // NaN in fp32 and bf16: reading before writing shows
        run_block(nthreads);
    }
    B.body = nullptr;
}

void *emu_dynamic_smem(void) { return B.smem; }

// Every thread of one barrier generation must arrive from the same __syncthreads (its source
// line tells; the caller's address would not, since the compiler may duplicate one call): a
// count-based barrier would let a divergent one pass silently.
void emu_syncthreads(const char *file, int line) {
    if (B.block_arrived == 0) B.barrier_file = file, B.barrier_line = line;
    else if (line != B.barrier_line || strcmp(file, B.barrier_file) != 0)
        emu_die("%s: threads of one block wait at different __syncthreads (%s:%d and %s:%d: a barrier in "
                "divergent code)",
                B.where, B.barrier_file, B.barrier_line, file, line);
    Fiber &f = B.fibers[B.cur];
    f.wait = AT_BLOCK_BARRIER;
    B.block_arrived++;
    release_block_if_complete();
    if (f.wait != RUNNING) yield_to_scheduler();
}

// A block barrier that also ORs a predicate over the block's threads. The slot of generation g
// (parity g % 2) is cleared by the first thread to arrive at it: the last reads of the slot, after
// barrier g - 2, are done, since every thread has arrived at barrier g - 1 since. (An exited thread
// counts as arrived with a false predicate.)
int emu_syncthreads_or(const char *file, int line, int predicate) {
    const unsigned g = B.barrier_gen;
    if (B.block_arrived == 0) B.barrier_or[g & 1] = 0;
    B.barrier_or[g & 1] |= predicate != 0;
    emu_syncthreads(file, line);
    return B.barrier_or[g & 1];
}

// cp.async (kernels/mma.cuh), as the hardware allows it to behave: the 16 bytes land only at the
// cp_async_wait that covers their group, and until then the destination holds 0xff bytes (a NaN
// in bf16 and fp32). So a read of a tile before the wait for it (a missing or short wait) reads
// NaN, and so does another thread's read of a buffer a copy is refilling before the barrier that
// should have kept them apart: both reach a test's output as NaN instead of passing unseen, as
// they did when the copy landed at once. A barrier does not complete copies (nor does it on the GPU).
static void land(const AsyncCopy &c) {
    if (c.valid) memcpy(c.dst, c.src, 16);
    else memset(c.dst, 0, 16);
}
void emu_cp_async16(void *dst, const void *src, bool valid) {
    memset(dst, 0xff, 16);
    B.fibers[B.cur].copies.open.push_back(AsyncCopy{dst, src, valid});
}
void emu_cp_async_commit(void) { B.fibers[B.cur].copies.commit(); }
void emu_cp_async_wait(int n) { B.fibers[B.cur].copies.wait(n, land); }
void emu_cp_async_finish(void) {
    AsyncGroups<AsyncCopy> &c = B.fibers[B.cur].copies;
    c.commit();  // (copies never committed land too)
    c.wait(0, land);
}

// ---- mbarriers (kernels/mbarrier.cuh) ----
// The object lives here, keyed by its shared-memory address (which must be in the block's dynamic
// shared memory); the 8 bytes there are not used. A thread waiting for a phase (mbar_wait) stops
// until the arrival that completes it, like a thread at a __syncthreads, so a phase that can never
// complete is the scheduler's deadlock (every live thread waiting) and stops the run, where the
// GPU would hang. More arrivals in a phase than its count, a barrier used before mbar_init or
// initialised twice in a block, stop the run too (undefined on the GPU).
uint32_t emu_smem_address(const void *p);  // (below, with the warpgroup MMA)
namespace {
MBar &mbar_of(const void *bar, const char *what) {
    auto it = B.mbars.find(bar);
    if (it == B.mbars.end()) emu_die("%s: %s on an mbarrier never initialised in this block (mbar_init)", B.where, what);
    return it->second;
}
void mbar_complete_if_done(const void *bar, MBar &m) {
    if (m.pending != 0 || m.tx != 0) return;
    m.phase ^= 1;
    m.pending = m.expected;
    for (Fiber &f : B.fibers)
        if (f.wait == AT_MBARRIER && f.mbar == bar && f.mbar_parity != m.phase) f.wait = RUNNING, f.mbar = nullptr;
}
uint64_t tma_box_bytes(const EmuTmaMap &t) {
    uint64_t n = 2;
    for (int d = 0; d < t.rank; d++) n *= t.box[d];
    return n;
}
// The TMA copies queued on bar land (in issue order), each paying its bytes against the phase.
// The emulator lands them at the first wait on the barrier, or at once when a thread is waiting
// on it already (tma_land_if_waited: at a copy's issue and at each arrival), so that a thread
// that reads the box without waiting reads the 0xff bytes emu_tma_load left there.
// f(r, row) for each row of a box at coordinates c: r its place in shared memory (i2 box[1] + i1:
// 128 bytes each), row the global address of the tensor row's element 0 when the row lies inside
// the tensor's dimensions 1 and 2, else nullptr (read as zeros)
template <typename F>
void tma_each_row(const EmuTmaMap &t, const int *c, F f) {
    const uint32_t b1 = t.box[1], b2 = t.rank > 2 ? t.box[2] : 1;
    for (uint32_t i2 = 0; i2 < b2; i2++)
        for (uint32_t i1 = 0; i1 < b1; i1++) {
            const int64_t g1 = (int64_t)c[1] + i1, g2 = t.rank > 2 ? (int64_t)c[2] + i2 : 0;
            const bool in = g1 >= 0 && (uint64_t)g1 < t.dims[1] && g2 >= 0 && (t.rank < 3 || (uint64_t)g2 < t.dims[2]);
            f(i2 * b1 + i1, in ? t.base + (uint64_t)g1 * t.strides[1] + (uint64_t)g2 * t.strides[2] : nullptr);
        }
}
void tma_land(const void *bar, MBar &m) {
    if (m.tma.empty()) return;
    for (const TmaOp &op : m.tma) {
        const EmuTmaMap &t = op.map;
        tma_each_row(t, op.c, [&](uint32_t r, const unsigned char *row) {
            for (uint32_t i0 = 0; i0 < t.box[0]; i0++) {
                const int64_t g0 = (int64_t)op.c[0] + i0;
                const uint32_t o = r * 128 + i0 * 2, sw = o ^ (((o >> 7) & 7) << 4);  // the 128-byte swizzle
                if (row && g0 >= 0 && (uint64_t)g0 < t.dims[0]) memcpy(op.dst + sw, row + (uint64_t)g0 * 2, 2);
                else memset(op.dst + sw, 0, 2);
            }
        });
        m.tx -= (long)tma_box_bytes(t);
    }
    m.tma.clear();
    mbar_complete_if_done(bar, m);
}
void tma_land_if_waited(const void *bar, MBar &m) {
    for (const Fiber &f : B.fibers)
        if (f.wait == AT_MBARRIER && f.mbar == bar) return tma_land(bar, m);
}
}  // namespace
void emu_mbar_init(uint64_t *bar, unsigned count) {
    (void)emu_smem_address(bar);  // (dies outside the block's dynamic shared memory)
    if (count == 0) emu_die("%s: mbar_init with an arrival count of 0", B.where);
    if (!B.mbars.emplace(bar, MBar{count, count, 0, 0, {}}).second)
        emu_die("%s: mbar_init on an mbarrier already initialised in this block", B.where);
}
void emu_mbar_arrive(uint64_t *bar, unsigned tx_bytes) {
    MBar &m = mbar_of(bar, "an arrival");
    if (m.pending == 0) emu_die("%s: more arrivals on an mbarrier than its count in one phase", B.where);
    m.tx += tx_bytes;
    m.pending--;
    mbar_complete_if_done(bar, m);
    tma_land_if_waited(bar, m);
}
void emu_mbar_wait(uint64_t *bar, unsigned parity) {
    MBar &m = mbar_of(bar, "a wait");
    tma_land(bar, m);
    if (m.phase != (parity & 1)) return;  // that phase has completed
    Fiber &f = B.fibers[B.cur];
    f.wait = AT_MBARRIER, f.mbar = bar, f.mbar_parity = parity & 1;
    yield_to_scheduler();
}
// ---- TMA (kernels/tma.cuh) ----
// The map checked as the driver checks what these kernels use (rank 2 or 3, base 16-byte aligned,
// strides multiples of 16, each box extent 1..256, the box's rows 128 bytes: the 128-byte
// swizzle's), then written into the CUtensorMap; a map that breaks a rule stops the run.
void emu_tma_encode(CUtensorMap *m, const void *base, int rank, const uint64_t *dims, const uint64_t *strides,
                    const uint32_t *box) {
    if (rank < 2 || rank > 3) emu_die("TMA map: rank %d (the emulator models 2 and 3)", rank);
    if ((uintptr_t)base % 16) emu_die("TMA map: base %p is not 16-byte aligned", base);
    EmuTmaMap t = {};
    t.magic = kTmaMagic, t.rank = rank, t.base = (const unsigned char *)base, t.strides[0] = 2;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 0 || box[d] == 0 || box[d] > 256)
            emu_die("TMA map: dimension %d of %llu elements, box %u (each box extent 1..256)", d,
                    (unsigned long long)dims[d], box[d]);
        if (dims[d] > (1ull << 32)) emu_die("TMA map: dimension %d of %llu elements (the driver's limit: 2^32)", d,
                                            (unsigned long long)dims[d]);
        t.dims[d] = dims[d], t.box[d] = box[d];
        if (d > 0) {
            if (strides[d - 1] % 16) emu_die("TMA map: stride %llu bytes of dimension %d is not a multiple of 16",
                                             (unsigned long long)strides[d - 1], d);
            if (strides[d - 1] >= (1ull << 40))
                emu_die("TMA map: stride %llu bytes of dimension %d (the driver's limit: under 2^40)",
                        (unsigned long long)strides[d - 1], d);
            t.strides[d] = strides[d - 1];
        }
    }
    if (box[0] * 2 != 128) emu_die("TMA map: a box row of %u bytes (the 128-byte swizzle's rows are 128)", box[0] * 2);
    memset(m, 0, sizeof *m);
    memcpy(m, &t, sizeof t);
}
namespace {
// The device allocations (cudaMalloc), by address: a TMA box reads only inside the one its map's
// base lies in. The GPU checks a box against the map's dims alone, so a map whose dims reach past
// its buffer (the MoE rows' map bounds rows by 2^31) reads whatever lies there; the emulator
// stops the run instead.
std::map<const unsigned char *, size_t> g_dev_allocs;
// the allocation holding p: its [lo, hi), or lo == hi == nullptr
std::pair<const unsigned char *, const unsigned char *> dev_alloc_of(const unsigned char *p) {
    auto it = g_dev_allocs.upper_bound(p);
    if (it == g_dev_allocs.begin()) return {nullptr, nullptr};
    --it;
    if (p >= it->first + it->second) return {nullptr, nullptr};
    return {it->first, it->first + it->second};
}
// each row of the box inside the tensor (the elements the copy reads) within the allocation of the
// map's base
void tma_check_reads(const EmuTmaMap &t, const int *c) {
    const auto a = dev_alloc_of(t.base);
    if (!a.first) emu_die("%s: a TMA map's base %p is not in a cudaMalloc allocation", B.where, (const void *)t.base);
    const int64_t lo0 = std::max<int64_t>(c[0], 0), hi0 = std::min<int64_t>((int64_t)c[0] + t.box[0], (int64_t)t.dims[0]);
    if (lo0 >= hi0) return;
    tma_each_row(t, c, [&](uint32_t r, const unsigned char *row) {
        if (row && (row + lo0 * 2 < a.first || row + hi0 * 2 > a.second))
            emu_die("%s: a TMA box's row %u reads %p, outside the %zu-byte allocation at %p that its map's base lies "
                    "in", B.where, r, (const void *)(row + lo0 * 2), (size_t)(a.second - a.first), (const void *)a.first);
    });
}
}  // namespace

// One thread's copy of a box into dst: dst's bytes read 0xff until the copy lands (tma_land, at the
// first wait on bar); dst must be a 1024-byte aligned place in the block's dynamic shared memory
// with the whole box inside it, bar an initialised mbarrier, and the elements the box reads inside
// the device allocation of the map's base (tma_check_reads).
void emu_tma_load(void *dst, const CUtensorMap *m, const int *coords, int rank, uint64_t *bar) {
    EmuTmaMap t;
    memcpy(&t, m, sizeof t);
    if (t.magic != kTmaMagic) emu_die("%s: a TMA copy through a map that emu_tma_encode did not write", B.where);
    if (t.rank != rank) emu_die("%s: a rank-%d TMA copy through a rank-%d map", B.where, rank, t.rank);
    tma_check_reads(t, coords);
    if (emu_smem_address(dst) % 1024) emu_die("%s: a TMA copy (128-byte swizzle) to a shared address not 1024-byte aligned", B.where);
    const uint64_t bytes = tma_box_bytes(t);
    if ((unsigned char *)dst + bytes > B.smem + B.smem_size)
        emu_die("%s: a TMA box of %llu bytes runs past the block's dynamic shared memory", B.where,
                (unsigned long long)bytes);
    MBar &mb = mbar_of(bar, "a TMA copy");
    memset(dst, 0xff, bytes);
    TmaOp op = {(unsigned char *)dst, t, {coords[0], coords[1], rank > 2 ? coords[2] : 0}};
    mb.tma.push_back(op);
    tma_land_if_waited(bar, mb);
}

// the thread's cp.async so far land now (the earliest the GPU may land them), then its arrival
void emu_cp_async_mbar_arrive(uint64_t *bar) {
    emu_cp_async_finish();
    emu_mbar_arrive(bar, 0);
}

void __syncwarp(unsigned) { warp_barrier(); }
void __threadfence(void) {}
void __threadfence_block(void) {}

uint64_t emu_shuffle(unsigned mask, uint64_t value, int mode, int arg, int width) {
    if (mask != 0xffffffffu) emu_die("a warp operation with a partial mask (0x%x): not emulated", mask);
    if (width < 1 || width > 32 || (width & (width - 1))) emu_die("a shuffle of width %d", width);
    unsigned tid = B.fibers[B.cur].tid, lane = tid % 32, w = tid / 32;
    uint64_t *slot = &B.exchange[w * 32];
    slot[lane] = value;
    warp_barrier();  // every lane has written its value
    int base = (int)lane & ~(width - 1), src = (int)lane;
    switch (mode) {
    case 0: src = base + (arg & (width - 1)); break;
    case 1: src = (int)lane ^ arg; if (src < base || src >= base + width) src = (int)lane; break;
    case 2: src = (int)lane + arg; if (src >= base + width) src = (int)lane; break;
    default: src = (int)lane - arg; if (src < base) src = (int)lane; break;
    }
    uint64_t r = slot[src];
    warp_barrier();  // every lane has read before the slots are written again
    return r;
}

unsigned emu_ballot(unsigned mask, int predicate) {
    if (mask != 0xffffffffu) emu_die("a warp vote with a partial mask (0x%x): not emulated", mask);
    unsigned tid = B.fibers[B.cur].tid, lane = tid % 32, w = tid / 32;
    uint64_t *slot = &B.exchange[w * 32];
    slot[lane] = predicate != 0;
    warp_barrier();
    unsigned bits = 0;
    for (unsigned l = 0; l < 32 && w * 32 + l < B.nthreads; l++)
        if (B.fibers[w * 32 + l].wait != EXITED && slot[l]) bits |= 1u << l;
    warp_barrier();
    return bits;
}

// ---- the tensor-core instructions of kernels/mma.cuh, from their fragment layouts ----

namespace {
// every lane gives a 64-bit value; got[i] = lane first + i's, i < count (two warp barriers:
// all written, then all read)
void warp_gather(uint64_t value, int first, int count, uint64_t *got) {
    unsigned tid = B.fibers[B.cur].tid, w = tid / 32;
    uint64_t *slot = &B.exchange[w * 32];
    slot[tid % 32] = value;
    warp_barrier();
    for (int i = 0; i < count; i++) got[i] = slot[first + i];
    warp_barrier();
}
float bf16_lo(uint32_t u) { __nv_bfloat16 h; h.x = (uint16_t)(u & 0xffff); return (float)h; }
float bf16_hi(uint32_t u) { __nv_bfloat16 h; h.x = (uint16_t)(u >> 16); return (float)h; }
}  // namespace

// (each lane builds only what its four outputs read: rows g and g + 8 of A, which lanes 4g..4g+3
// hold, and columns 2t and 2t + 1 of B, which lanes 8t..8t+7 hold; the sums run in k order)
void emu_mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    unsigned lane = B.fibers[B.cur].tid % 32;
    int g = (int)lane / 4, t = (int)lane % 4;
    uint64_t A01[4], A23[4], Bf[8];  // lane 4g + q's a[0], a[1] and a[2], a[3]; lane 8t + q's b0, b1
    warp_gather((uint64_t)a[0] | (uint64_t)a[1] << 32, 4 * g, 4, A01);
    warp_gather((uint64_t)a[2] | (uint64_t)a[3] << 32, 4 * g, 4, A23);
    warp_gather((uint64_t)b0 | (uint64_t)b1 << 32, 8 * t, 8, Bf);
    float Arow[2][16], Bcol[2][16];  // A's rows g, g + 8; B's columns 2t, 2t + 1
    for (int q = 0; q < 4; q++) {
        const uint64_t x = A01[q], y = A23[q];
        const uint32_t a0 = (uint32_t)x, a1 = (uint32_t)(x >> 32), a2 = (uint32_t)y, a3 = (uint32_t)(y >> 32);
        Arow[0][2 * q] = bf16_lo(a0), Arow[0][2 * q + 1] = bf16_hi(a0);
        Arow[1][2 * q] = bf16_lo(a1), Arow[1][2 * q + 1] = bf16_hi(a1);
        Arow[0][2 * q + 8] = bf16_lo(a2), Arow[0][2 * q + 9] = bf16_hi(a2);
        Arow[1][2 * q + 8] = bf16_lo(a3), Arow[1][2 * q + 9] = bf16_hi(a3);
        for (int j = 0; j < 2; j++) {
            const uint64_t b = Bf[4 * j + q];
            const uint32_t lb0 = (uint32_t)b, lb1 = (uint32_t)(b >> 32);
            Bcol[j][2 * q] = bf16_lo(lb0), Bcol[j][2 * q + 1] = bf16_hi(lb0);
            Bcol[j][2 * q + 8] = bf16_lo(lb1), Bcol[j][2 * q + 9] = bf16_hi(lb1);
        }
    }
    for (int i = 0; i < 4; i++) {  // c[i]: row g (g + 8 for i >= 2), column 2t + (i & 1)
        const float *ar = Arow[i >> 1], *bc = Bcol[i & 1];
        float acc = c[i];
        for (int k = 0; k < 16; k++) acc += ar[k] * bc[k];
        c[i] = acc;
    }
}

void emu_ldmatrix_x4(uint32_t r[4], const void *row_address, int trans) {
    uint64_t rows[32];
    warp_gather((uint64_t)(uintptr_t)row_address, 0, 32, rows);
    unsigned lane = B.fibers[B.cur].tid % 32;
    for (int m = 0; m < 4; m++) {
        const uint16_t *p0, *p1;
        int c0, c1;
        if (!trans) {  // row lane/4 of matrix m, columns 2(lane%4), +1
            p0 = p1 = (const uint16_t *)(uintptr_t)rows[8 * m + lane / 4];
            c0 = 2 * (lane % 4), c1 = c0 + 1;
        } else {  // rows 2(lane%4), +1 of matrix m, column lane/4
            p0 = (const uint16_t *)(uintptr_t)rows[8 * m + 2 * (lane % 4)];
            p1 = (const uint16_t *)(uintptr_t)rows[8 * m + 2 * (lane % 4) + 1];
            c0 = c1 = (int)lane / 4;
        }
        r[m] = (uint32_t)p0[c0] | (uint32_t)p1[c1] << 16;
    }
}

// ---- Hopper's warpgroup MMA (kernels/wgmma.cuh) ----
// A wgmma is performed at the wgmma_wait that covers its commit group, per thread: each thread
// computes its own 128 (n / 2) accumulators from the shared memory as it is at that moment,
// through the instruction's descriptors. So, as the GPU allows: accumulators read before the
// wait hold their old values, and operand tiles overwritten between the issue and the wait
// change the result; both reach a test's output instead of passing unseen. The descriptors
// are decoded as wgmma.cuh describes (128-byte swizzle only: any other mode or a nonzero base
// offset stops the run, as does an operand outside the block's dynamic shared memory); the
// 128 threads of a warpgroup must issue the same descriptors (one instruction).

uint32_t emu_smem_address(const void *p) {
    const unsigned char *c = (const unsigned char *)p;
    if (c < B.smem || c > B.smem + B.smem_size)
        emu_die("%s: a shared-memory address of a pointer outside the block's dynamic shared memory", B.where);
    return kSmemWindowBase + (uint32_t)(c - B.smem);
}

namespace {
// row mn (an m of A, an n of B) of a wgmma operand, its 16 k values (mn_major: trans = 1, the
// MN-major layout), decoded once a row: the fields, the checks, and for a K-major row its two
// 16-byte chunks (8 k each, contiguous after the swizzle)
void wg_operand_row(uint64_t desc, int mn, int mn_major, float out[16]) {
    const int mode = (int)(desc >> 62), base = (int)(desc >> 49) & 7;
    if (mode != 1 || base != 0)
        emu_die("%s: a wgmma descriptor with swizzle mode %d, base offset %d: only the 128-byte swizzle (mode 1) "
                "at base offset 0 is emulated",
                B.where, mode, base);
    const uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4,
                   sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4;
    auto at = [&](uint32_t L, int bytes) {  // the 128-byte swizzle: chunk bits 4-6 ^= row bits 7-9
        const uint32_t P = L ^ (((L >> 7) & 7u) << 4);
        if (P < kSmemWindowBase || P + bytes > kSmemWindowBase + B.smem_size)
            emu_die("%s: a wgmma operand element at shared address 0x%x, outside the block's dynamic shared memory "
                    "[0x%x, 0x%zx)",
                    B.where, P, kSmemWindowBase, kSmemWindowBase + B.smem_size);
        return B.smem + (P - kSmemWindowBase);
    };
    __nv_bfloat16 h[8];
    if (!mn_major) {
        const uint32_t row = start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128;
        for (int c = 0; c < 2; c++) {  // (16-byte aligned: start is, and the chunk does not cross a swizzle row)
            memcpy(h, at(row + 16 * c, 16), 16);
            for (int i = 0; i < 8; i++) out[8 * c + i] = (float)h[i];
        }
    } else {
        const uint32_t col = start + (uint32_t)(mn / 64) * lbo + (uint32_t)(mn % 64) * 2;
        for (int k = 0; k < 16; k++) {
            memcpy(&h[0].x, at(col + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128, 2), 2);
            out[k] = (float)h[0];
        }
    }
}

void wgmma_perform(const WgmmaOp &op, unsigned tid) {
    const int w = (int)(tid / 32) % 4, lane = (int)(tid % 32), g = lane / 4, t = lane % 4;
    float a[2][16];  // A's rows 16 w + g and + 8
    for (int h = 0; h < 2; h++) wg_operand_row(op.desc_a, 16 * w + g + 8 * h, op.trans_a, a[h]);
    for (int j = 0; j < op.n / 8; j++)
        for (int c = 0; c < 2; c++) {
            float b[16];  // B's row (column of the product) 8 j + 2 t + c
            wg_operand_row(op.desc_b, 8 * j + 2 * t + c, op.trans_b, b);
            for (int h = 0; h < 2; h++) {
                float &d = op.d[4 * j + 2 * h + c];
                float acc = op.scale_d ? d : 0.f;
                for (int k = 0; k < 16; k++) acc += a[h][k] * b[k];
                d = acc;
            }
        }
}
}  // namespace

void emu_wgmma_issue(float *d, int n, uint64_t desc_a, uint64_t desc_b, int scale_d, int trans_a, int trans_b) {
    Fiber &f = B.fibers[B.cur];
    if (B.nthreads % 128) emu_die("%s: wgmma in a block of %u threads (not whole warpgroups of 128)", B.where, B.nthreads);
    auto &issued = B.wg_issue[f.tid / 128];
    const auto descs = std::make_pair(desc_a, desc_b);
    if (f.wg_issued == issued.size()) issued.push_back(descs);
    else if (issued[f.wg_issued] != descs)
        emu_die("%s: thread %u issues wgmma number %zu with other descriptors than its warpgroup's first thread "
                "(a = 0x%llx, b = 0x%llx against 0x%llx, 0x%llx)",
                B.where, f.tid, f.wg_issued, (unsigned long long)desc_a, (unsigned long long)desc_b,
                (unsigned long long)issued[f.wg_issued].first, (unsigned long long)issued[f.wg_issued].second);
    f.wg_issued++;
    f.wgmma.open.push_back(WgmmaOp{d, n, desc_a, desc_b, scale_d, trans_a, trans_b});
}
void emu_wgmma_commit(void) { B.fibers[B.cur].wgmma.commit(); }
void emu_wgmma_wait(int n) {
    Fiber &f = B.fibers[B.cur];
    f.wgmma.wait(n, [&](const WgmmaOp &op) { wgmma_perform(op, f.tid); });
}

// ---- the runtime API subset: device memory is host memory ----

const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorInvalidValue;
    memset(*p, 0xff, bytes);
    g_dev_allocs[(const unsigned char *)*p] = bytes ? bytes : 1;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    g_dev_allocs.erase((const unsigned char *)p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) {
    memmove(dst, src, bytes);
    return cudaSuccess;
}
// Pinned host memory and the copies into it that have not landed yet (cuda_emu.h, "Pinned host
// memory"): each pending copy holds the source bytes as they were when it was issued and its
// sequence number; an event records the last number issued before it.
namespace {
struct PinnedBlock {
    char *p;
    size_t bytes;
};
struct PendingCopy {
    char *dst;
    std::vector<char> data;
    unsigned long long seq;
};
std::vector<PinnedBlock> g_pinned;
std::vector<PendingCopy> g_pending;
unsigned long long g_copy_seq;

bool in_pinned(const void *p, size_t bytes) {
    const char *c = (const char *)p;
    for (const PinnedBlock &b : g_pinned)
        if (c >= b.p && c + bytes <= b.p + b.bytes) return true;
    return false;
}
// writes the pending copies numbered <= upto into host memory, in issue order
void land_copies(unsigned long long upto) {
    size_t kept = 0;
    for (size_t i = 0; i < g_pending.size(); i++) {
        if (g_pending[i].seq <= upto) memcpy(g_pending[i].dst, g_pending[i].data.data(), g_pending[i].data.size());
        else g_pending[kept++] = std::move(g_pending[i]);
    }
    g_pending.resize(kept);
}
}  // namespace

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorInvalidValue;
    memset(*p, 0xff, bytes);
    g_pinned.push_back(PinnedBlock{(char *)*p, bytes});
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    for (size_t i = 0; i < g_pinned.size(); i++)
        if (g_pinned[i].p == (char *)p) {
            land_copies(g_copy_seq);  // (the real call synchronizes the device first)
            g_pinned.erase(g_pinned.begin() + (long)i);
            free(p);
            return cudaSuccess;
        }
    return cudaErrorInvalidValue;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
    if (in_pinned(dst, bytes) && !in_pinned(src, bytes)) {  // device -> pinned host: lands at a sync
        const char *s = (const char *)src;
        g_pending.push_back(PendingCopy{(char *)dst, std::vector<char>(s, s + bytes), ++g_copy_seq});
        memset(dst, 0xff, bytes);  // (until it lands the host must not read it: a read sees 0xff bytes)
        return cudaSuccess;
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t) {
    memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
    land_copies(g_copy_seq);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    land_copies(g_copy_seq);
    return cudaSuccess;
}

// One device, or HYBRID_EMU_DEVICES of them (1..64) for processes of a multi-rank run through
// the emulated plugin, each rank on "its" device (all of them host memory)
cudaError_t cudaGetDeviceCount(int *n) {
    const char *e = getenv("HYBRID_EMU_DEVICES");
    *n = 1;
    if (e && *e) {
        char *end;
        const long v = strtol(e, &end, 10);
        if (*end || v < 1 || v > 64) emu_die("HYBRID_EMU_DEVICES=%s: want a count of devices from 1 to 64", e);
        *n = (int)v;
    }
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
    int n;
    cudaGetDeviceCount(&n);
    return d >= 0 && d < n ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulator of an H200");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 132;  // an H200's: grid_for sizes grids as it would there
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    static char token;
    *s = (cudaStream_t)(void *)&token;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = (size_t)141 << 30;  // (host memory: nothing to report)
    return cudaSuccess;
}
struct EmuEvent {
    double t;
    unsigned long long copies;  // the pending copies issued before it was recorded (g_copy_seq)
};
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new EmuEvent{0, 0};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->t = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
    e->copies = g_copy_seq;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    land_copies(e->copies);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t stop) {
    *ms = (float)(stop->t - start->t);
    return cudaSuccess;
}

void emu_trap(void) {
    emu_die("__trap() in a kernel");
    abort();  // (emu_die exits)
}

// ---- cuBLAS's grouped batched GEMM (cuda_emu.h says what it checks and computes) ----

struct EmuCublas {
    int token;
};
cublasStatus_t cublasCreate(cublasHandle_t *h) {
    static EmuCublas one;
    *h = &one;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t, cublasAtomicsMode_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetPointerMode(cublasHandle_t, cublasPointerMode_t mode) {
    return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

// One problem's sizes, operations and leading dimensions as cuBLAS documents them (the stored
// rows of op(A) (m x k), op(B) (k x n), C (m x n), column-major): 1 when valid
static bool gemm_args_ok(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldc) {
    const auto op_ok = [](cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; };
    return m >= 0 && n >= 0 && k >= 0 && op_ok(ta) && op_ok(tb) && lda >= std::max(1, ta == CUBLAS_OP_N ? m : k) &&
           ldb >= std::max(1, tb == CUBLAS_OP_N ? k : n) && ldc >= std::max(1, m);
}

cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void *alpha_array,
                                          const void *const Aarray[], cudaDataType_t Atype, const int lda_array[],
                                          const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
                                          const void *beta_array, void *const Carray[], cudaDataType_t Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t computeType) {
    if (!h || !transa_array || !transb_array || !m_array || !n_array || !k_array || !alpha_array || !lda_array ||
        !ldb_array || !beta_array || !ldc_array || !group_size || group_count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (Atype != CUDA_R_16BF || Btype != CUDA_R_16BF || Ctype != CUDA_R_16BF || computeType != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    long problems = 0;
    for (int i = 0; i < group_count; i++) {
        if (group_size[i] < 0 || !gemm_args_ok(transa_array[i], transb_array[i], m_array[i], n_array[i], k_array[i],
                                               lda_array[i], ldb_array[i], ldc_array[i]))
            return CUBLAS_STATUS_INVALID_VALUE;
        problems += group_size[i];
    }
    if (problems > 0 && (!Aarray || !Barray || !Carray)) return CUBLAS_STATUS_INVALID_VALUE;
    // the documented alignment of bf16 operands: 16 bytes where k * 2 is a multiple of 16, else 4
    // bytes where it is a multiple of 4 (on the GPU: a misaligned-address fault)
    long idx = 0;
    for (int i = 0; i < group_count; i++)
        for (int j = 0; j < group_size[i]; j++, idx++) {
            const int k2 = k_array[i] * 2, need = k2 % 16 == 0 ? 16 : k2 % 4 == 0 ? 4 : 2;
            const void *p[3] = {Aarray[idx], Barray[idx], Carray[idx]};
            for (int q = 0; q < 3; q++)
                if ((uintptr_t)p[q] % (uintptr_t)need)
                    emu_die("cublasGemmGroupedBatchedEx: problem %ld's %c pointer is not %d-byte aligned", idx,
                            "ABC"[q], need);
        }
    const float *alpha = (const float *)alpha_array, *beta = (const float *)beta_array;
    idx = 0;
    for (int i = 0; i < group_count; i++)
        for (int j = 0; j < group_size[i]; j++, idx++)
            emu_lt_matmul(transa_array[i] != CUBLAS_OP_N, transb_array[i] != CUBLAS_OP_N, m_array[i], n_array[i],
                          k_array[i], alpha[i], (const bf16 *)Aarray[idx], lda_array[i], 0, (const bf16 *)Barray[idx],
                          ldb_array[i], 0, beta[i], Carray[idx], Carray[idx], 0, ldc_array[i], 0, 1, EMU_EPI_NONE,
                          nullptr, nullptr);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    if (!h || !alpha || !beta || !gemm_args_ok(transa, transb, m, n, k, lda, ldb, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (Atype != CUDA_R_16BF || Btype != CUDA_R_16BF || (Ctype != CUDA_R_16BF && Ctype != CUDA_R_32F) ||
        computeType != CUBLAS_COMPUTE_32F || algo != CUBLAS_GEMM_DEFAULT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!A || !B || !C) return CUBLAS_STATUS_INVALID_VALUE;
    emu_lt_matmul(transa != CUBLAS_OP_N, transb != CUBLAS_OP_N, m, n, k, *(const float *)alpha, (const bf16 *)A, lda, 0,
                  (const bf16 *)B, ldb, 0, *(const float *)beta, C, C, Ctype == CUDA_R_32F, ldc, 0, 1, EMU_EPI_NONE,
                  nullptr, nullptr);
    return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt's GEMM (cuda_emu.h says what it computes) ----

namespace {
const float kGeluK = 0.7978845608028654f, kGeluA = 0.044715f;  // tanh GELU, as model/ops/core/gelu.c
float gelu(float x) { return 0.5f * x * (1.f + tanhf(kGeluK * (x + kGeluA * x * x * x))); }
float gelu_grad(float x) {
    float t = tanhf(kGeluK * (x + kGeluA * x * x * x));
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluK * (1.f + 3.f * kGeluA * x * x);
}
}  // namespace

void emu_lt_matmul(int transa, int transb, int m, int n, int k, float alpha, const bf16 *A, int lda, long long strideA,
                   const bf16 *B, int ldb, long long strideB, float beta, const void *C, void *D, int cd_f32, int ldc,
                   long long strideC, int batch, int epi, void *bias, bf16 *aux) {
    if (batch < 1) batch = 1;
    if (batch > 1 && (epi != EMU_EPI_NONE || bias)) emu_die("a batched GEMM with an epilogue: not emulated");
    // fp32 C/D: no epilogue, or BGRADB with its fp32 bias gradient (cuBLASLt: the bias gradient
    // has the output's type; the fp32 weight gradients' dW GEMM, kernels/core/matmul.cu)
    if (cd_f32 && !(epi == EMU_EPI_NONE && !bias) && epi != EMU_EPI_BGRADB_F32)
        emu_die("an fp32-output GEMM with an epilogue other than BGRADB (fp32 bias): not emulated");
    std::vector<float> a((size_t)m * k), b((size_t)k * n);  // op(A) row-major (m, k); op(B) column by column (n, k)
    const int dgelu = epi == EMU_EPI_DGELU || epi == EMU_EPI_DGELU_BGRAD_F32;
    const int dgelu_bgrad = epi == EMU_EPI_DGELU_BGRAD_F32;
    std::vector<float> rowsum(dgelu_bgrad ? (size_t)m : 0, 0.f);  // DGELU_BGRAD: sum_j of row i
    for (int bi = 0; bi < batch; bi++) {
        const bf16 *Ab = A + bi * strideA, *Bb = B + bi * strideB;
        const bf16 *Cb = C && !cd_f32 ? (const bf16 *)C + bi * strideC : nullptr;
        const float *Cf = C && cd_f32 ? (const float *)C + bi * strideC : nullptr;
        bf16 *Db = cd_f32 ? nullptr : (bf16 *)D + bi * strideC;
        float *Df = cd_f32 ? (float *)D + bi * strideC : nullptr;
        for (int i = 0; i < m; i++)
            for (int p = 0; p < k; p++)
                a[(size_t)i * k + p] = (float)(transa ? Ab[p + (size_t)i * lda] : Ab[i + (size_t)p * lda]);
        for (int j = 0; j < n; j++)
            for (int p = 0; p < k; p++)
                b[(size_t)j * k + p] = (float)(transb ? Bb[j + (size_t)p * ldb] : Bb[p + (size_t)j * ldb]);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                const float *ar = &a[(size_t)i * k], *bc = &b[(size_t)j * k];
                float acc = 0.f;
                for (int p = 0; p < k; p++) acc += ar[p] * bc[p];
                size_t at = i + (size_t)j * ldc;
                float x = alpha * acc;
                if (beta != 0.f) x += beta * (cd_f32 ? Cf[at] : (float)Cb[at]);  // (read before D is written: C may be D)
                if (cd_f32) {
                    Df[at] = x;
                    continue;
                }
                if (bias && (epi == EMU_EPI_NONE || epi == EMU_EPI_GELU_AUX)) x += (float)((const bf16 *)bias)[i];
                if (epi == EMU_EPI_GELU_AUX) {
                    aux[at] = bf16(x);
                    x = gelu(x);
                } else if (dgelu) {
                    x *= gelu_grad((float)aux[at]);
                    if (dgelu_bgrad) rowsum[i] += x;
                }
                Db[at] = bf16(x);
            }
        if (dgelu_bgrad)
            for (int i = 0; i < m; i++) ((float *)bias)[i] = rowsum[i];
        if (epi == EMU_EPI_BGRADB_F32)
            for (int j = 0; j < n; j++) {
                float s = 0.f;
                for (int p = 0; p < k; p++) s += b[(size_t)j * k + p];
                ((float *)bias)[j] = s;
            }
    }
}
