// cuDNN flash attention (HYBRID_ATTN=cudnn): the causal softmax attention of the core and
// MLA families (model/ops/mla/mla.h, AttnLayout: any head widths dqk, dv and row/head
// strides) through cuDNN 9's backend API (cudnn_graph.h), as an alternative to our own
// kernels (kernels/core/attention.cu, kernels/mla/attention.cu). docs/cuda.md, "cuDNN
// attention" has the graphs, the switch and what has been verified.
//
// One operation graph per direction and shape (B, T, NH, dqk, dv, the strides, the scale),
// built once, its execution plan and workspace size cached (as matmul.cu caches cuBLASLt
// plans). bf16 in/out, fp32 compute. The forward's softmax statistics are the logsumexp of
// the scaled, masked scores (natural log) in a (B, NH, T, 1) tensor of strides (NH T, T, 1, 1):
// exactly our lse contract, so cuDNN writes the op's lse buffer and either backward can
// read it. The backward's D = rowsum(dO * O) is a graph output in the backend's scratch,
// with the workspace.
//
// Deterministic backward: the graph computes dQ = dS K straight into dQ (cuDNN then keeps
// dP in its workspace: B NH T^2 bf16, rounded up to 64-row tiles), and engines whose
// numerical notes say NONDETERMINISTIC are skipped. HYBRID_ATTN_CUDNN_BWD=atomic builds the
// other form (dQ accumulated in an fp32 buffer, then copied; cuDNN's atomics) and accepts
// any engine: faster perhaps, not bit-reproducible.
//
// A layout cuDNN refuses (graph or plan not finalizing, unaligned pointers, a zero head
// stride) falls back to our kernel with a one-time message per shape; execution errors die.
// Only the real nvcc build with cuDNN (HAVE_CUDNN) has it; elsewhere (the CPU emulator,
// builds without cuDNN) the entry points say "not here" and the caller runs our kernel.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/common.cuh"
#include "kernels/cuda_backend.h"

static int g_cudnn_force = -1;  // cuda_attention_set_cudnn: -1 follow HYBRID_ATTN
static long g_cudnn_runs;       // calls that ran cuDNN (forward + backward)

void cuda_attention_set_cudnn(int on) { g_cudnn_force = on < 0 ? -1 : !!on; }
long cuda_attention_cudnn_runs(void) { return g_cudnn_runs; }

// HYBRID_ATTN: "cudnn" or "own". cuDNN is the default where the build has it: on the H200 it
// took the GPT-2 124M step from 116.1 to 108.2 ms (BENCHMARKS.md, docs/cuda.md "cuDNN
// attention"); a build without it runs our kernels, and says so only if cuDNN was asked for.
int cudnn_attention_selected(void) {
    static int env = -1, asked;
    if (env < 0) {
        static const char *const names[] = {"cudnn", "own"};
        env = env_choice("HYBRID_ATTN", names, 2) == 0;
        const char *e = getenv("HYBRID_ATTN");
        asked = e && !strcmp(e, "cudnn");
    }
    const int on = g_cudnn_force >= 0 ? g_cudnn_force : env;
    if (on && !cuda_attention_cudnn_built()) {
        static int said;
        if (!said && (asked || g_cudnn_force == 1))
            fprintf(stderr, "hybrid: note: HYBRID_ATTN=cudnn, but this build has no cuDNN%s: using our attention kernels\n",
#ifdef HYBRID_CUDA_EMU
                    " (the CPU emulator)"
#else
                    " (cudnn.h not found at build time)"
#endif
            );
        said = 1;
        return 0;
    }
    return on;
}

#if defined(HAVE_CUDNN) && !defined(HYBRID_CUDA_EMU)
#include <cudnn.h>

#include <vector>

int cuda_attention_cudnn_built(void) { return 1; }
size_t cuda_cudnn_version(void) { return cudnnGetVersion(); }

#define CUDNN_CHECK(call)                                                                       \
    do {                                                                                        \
        cudnnStatus_t st_ = (call);                                                             \
        if (st_ != CUDNN_STATUS_SUCCESS) cudnn_fail(#call, st_, __FILE__, __LINE__);            \
    } while (0)

[[noreturn]] static void cudnn_fail(const char *what, cudnnStatus_t st, const char *file, int line) {
    char last[512] = "", msg[768];
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(msg, sizeof msg, "%s%s%s", cudnnGetErrorString(st), *last ? ": " : "", last);
    cuda_fail(what, msg, file, line);
}

static cudnnHandle_t g_handle;

static cudnnHandle_t handle(void) {
    if (!g_handle) {
        CUDNN_CHECK(cudnnCreate(&g_handle));
        CUDNN_CHECK(cudnnSetStream(g_handle, g_cuda.stream));
    }
    return g_handle;
}

// ---------------------------------------------------------------------------
// graph building: every call checked; the first failure is kept (operation, status, cuDNN's
// last error message) and makes the rest no-ops, so a refused graph reports why.

// tensor unique ids (the variant pack's keys); virtual tensors count up from UID_VIRTUAL
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_SOFTMAX_SUM, UID_ONE, UID_DQ_ACCUM, UID_VIRTUAL = 100
};

struct Graph {
    std::vector<cudnnBackendDescriptor_t> descs;  // everything created, destroyed together
    std::vector<cudnnBackendDescriptor_t> ops;
    bool ok = true;
    char why[768] = "";
    int64_t next_uid = UID_VIRTUAL;

    bool check(cudnnStatus_t st, const char *what) {
        if (st == CUDNN_STATUS_SUCCESS || !ok) return ok;
        char last[512] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(why, sizeof why, "%s: %s%s%s", what, cudnnGetErrorString(st), *last ? ": " : "", last);
        ok = false;
        return false;
    }
    cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type, const char *what) {
        cudnnBackendDescriptor_t d = NULL;
        if (!ok) return NULL;
        if (!check(cudnnBackendCreateDescriptor(type, &d), what)) return NULL;
        descs.push_back(d);
        return d;
    }
    void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
             int64_t n, const void *v, const char *what) {
        if (ok) check(cudnnBackendSetAttribute(d, name, type, n, v), what);
    }
    void finalize(cudnnBackendDescriptor_t d, const char *what) {
        if (ok) check(cudnnBackendFinalize(d), what);
    }
    void release() {
        for (size_t i = descs.size(); i-- > 0;) cudnnBackendDestroyDescriptor(descs[i]);
        descs.clear();
        ops.clear();
    }

    // a 4-d tensor: bf16/fp32 data, int32 indices or booleans (virtual: inside the graph only)
    cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const int64_t dim[4], const int64_t str[4],
                                    bool is_virtual, bool by_value = false) {
        cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "create tensor");
        const int64_t align = 16;
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
        set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
        set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dimensions");
        set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
        set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor is_virtual");
        if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by_value");
        finalize(t, "finalize tensor");
        return t;
    }
    // a tensor inside the graph only
    cudnnBackendDescriptor_t virt(const int64_t dim[4], const int64_t str[4], cudnnDataType_t type = CUDNN_DATA_FLOAT) {
        return tensor(next_uid++, type, dim, str, true);
    }
    // y = mode(x[, b]) into a new fp32 tensor inside the graph, dimensions dim
    cudnnBackendDescriptor_t pw(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                const int64_t dim[4], const int64_t str[4]) {
        cudnnBackendDescriptor_t y = virt(dim, str);
        pointwise(mode, CUDNN_DATA_FLOAT, x, b, NULL, y);
        return y;
    }
    // y = mode(x[, b[, t]]) elementwise with broadcasting; axis for GEN_INDEX
    void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                   int64_t axis = -1) {
        cudnnBackendDescriptor_t pw = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "create pointwise");
        set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
        if (mode == CUDNN_POINTWISE_GEN_INDEX) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "axis");
        finalize(pw, "finalize pointwise");
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "create pointwise op");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pw desc");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pw x");
        if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pw b");
        if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pw t");
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pw y");
        finalize(op, "finalize pointwise op");
        if (ok) ops.push_back(op);
    }
    // c = a @ b over the last two dimensions, fp32 compute
    void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        cudnnBackendDescriptor_t mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "create matmul");
        set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul compute type");
        finalize(mm, "finalize matmul");
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "create matmul op");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
        set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
        finalize(op, "finalize matmul op");
        if (ok) ops.push_back(op);
    }
    // y = reduce(x) over the dimensions where y has extent 1, fp32 compute
    void reduce(cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        const bool det = false;  // (as cuDNN's own SDPA graphs: a row reduction inside the fused kernel)
        cudnnBackendDescriptor_t rd = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "create reduction");
        set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction compute type");
        set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, "reduction operator");
        set(rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det, "reduction deterministic");
        finalize(rd, "finalize reduction");
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "create reduction op");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction desc");
        finalize(op, "finalize reduction op");
        if (ok) ops.push_back(op);
    }
    // y = x seen through other dimensions/strides (here: transposes)
    void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "create reshape op");
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
        finalize(op, "finalize reshape op");
        if (ok) ops.push_back(op);
    }
};

// The shape of one graph: the layout, the direction and the dQ form. Zero-filled, compared whole.
struct Key {
    int backward, atomic;
    int B, T, NH, dqk, dv;
    int q_row, q_head, k_row, k_head, v_row, v_head;
    float scale;
};

struct Plan {
    Key key;
    int ok;                    // 0: cuDNN refused this shape (why), our kernel runs it
    Graph g;                   // every descriptor, kept until evicted
    cudnnBackendDescriptor_t plan;
    int64_t workspace;         // bytes
    int64_t engine;            // the engine's global index
    int nondeterministic;      // the chosen engine's numerical notes say so
    float scale, neg_inf, one; // the by-value scalars (host memory read at each execution)
    char why[768];
    unsigned long last_use;
};

#define PLAN_CACHE 64
static Plan *g_plans[PLAN_CACHE];
static unsigned long g_clock;

// shared pieces of both graphs: scores S = scale * Q K^T with the causal mask (-inf above the
// diagonal); `sub` (the backward's stats) is subtracted before the mask, as cuDNN's own
// backward graph does
struct Dims {
    int64_t s[4], s_str[4], row[4], row_str[4];  // (B, H, T, T) scores and (B, H, T, 1) per-row tensors
};

static Dims dims_of(const Key &k) {
    Dims d;
    const int64_t B = k.B, H = k.NH, T = k.T;
    const int64_t s[4] = {B, H, T, T}, ss[4] = {H * T * T, T * T, T, 1}, r[4] = {B, H, T, 1}, rs[4] = {H * T, T, 1, 1};
    memcpy(d.s, s, sizeof s), memcpy(d.s_str, ss, sizeof ss), memcpy(d.row, r, sizeof r), memcpy(d.row_str, rs, sizeof rs);
    return d;
}

static cudnnBackendDescriptor_t scores(Graph &g, const Dims &d, cudnnBackendDescriptor_t Q, cudnnBackendDescriptor_t KT,
                                       cudnnBackendDescriptor_t scale, cudnnBackendDescriptor_t neg_inf,
                                       cudnnBackendDescriptor_t sub) {
    cudnnBackendDescriptor_t S = g.virt(d.s, d.s_str);
    g.matmul(Q, KT, S);
    S = g.pw(CUDNN_POINTWISE_MUL, S, scale, d.s, d.s_str);
    if (sub) S = g.pw(CUDNN_POINTWISE_SUB, S, sub, d.s, d.s_str);
    cudnnBackendDescriptor_t row = g.virt(d.s, d.s_str, CUDNN_DATA_INT32), col = g.virt(d.s, d.s_str, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, S, NULL, NULL, row, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, S, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = g.virt(d.s, d.s_str, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep);  // query >= key
    cudnnBackendDescriptor_t Sm = g.virt(d.s, d.s_str);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, S, neg_inf, keep, Sm);  // keep ? S : -inf
    return Sm;
}

// The caller's strided bf16 buffers as cuDNN tensors (dimensions (B, H, rows, cols)):
// q-like (B, H, T, width) with a row and a head stride, its transpose (B, H, width, T) for
// K^T and V^T, and out-like (B, H, T, dv) over our (B*T, H*dv) layout.
static cudnnBackendDescriptor_t rows_of(Graph &g, int64_t uid, const Key &k, int width, int row, int head) {
    const int64_t d[4] = {k.B, k.NH, k.T, width}, s[4] = {(int64_t)k.T * row, head, row, 1};
    return g.tensor(uid, CUDNN_DATA_BFLOAT16, d, s, false);
}
static cudnnBackendDescriptor_t cols_of(Graph &g, int64_t uid, const Key &k, int width, int row, int head) {
    const int64_t d[4] = {k.B, k.NH, width, k.T}, s[4] = {(int64_t)k.T * row, head, 1, row};
    return g.tensor(uid, CUDNN_DATA_BFLOAT16, d, s, false);
}
static cudnnBackendDescriptor_t out_of(Graph &g, int64_t uid, const Key &k) {
    return rows_of(g, uid, k, k.dv, k.NH * k.dv, k.dv);
}

static cudnnBackendDescriptor_t scalar(Graph &g, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return g.tensor(uid, CUDNN_DATA_FLOAT, one, one, false, true);
}

// forward: S -> mask -> softmax with stats (max, sub, exp, sum, log, add) -> O = P V
static void build_forward(Graph &g, const Key &k) {
    const Dims d = dims_of(k);
    cudnnBackendDescriptor_t Q = rows_of(g, UID_Q, k, k.dqk, k.q_row, k.q_head);
    cudnnBackendDescriptor_t KT = cols_of(g, UID_K, k, k.dqk, k.k_row, k.k_head);
    cudnnBackendDescriptor_t V = rows_of(g, UID_V, k, k.dv, k.v_row, k.v_head), O = out_of(g, UID_O, k);
    cudnnBackendDescriptor_t stats = g.tensor(UID_STATS, CUDNN_DATA_FLOAT, d.row, d.row_str, false);
    cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE), neg_inf = scalar(g, UID_NEG_INF);
    cudnnBackendDescriptor_t S = scores(g, d, Q, KT, scale, neg_inf, NULL);
    cudnnBackendDescriptor_t M = g.virt(d.row, d.row_str), sum = g.virt(d.row, d.row_str);
    g.reduce(CUDNN_REDUCE_TENSOR_MAX, S, M);
    cudnnBackendDescriptor_t E = g.pw(CUDNN_POINTWISE_EXP, g.pw(CUDNN_POINTWISE_SUB, S, M, d.s, d.s_str), NULL, d.s, d.s_str);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, E, sum);
    cudnnBackendDescriptor_t logsum = g.pw(CUDNN_POINTWISE_LOG, sum, NULL, d.row, d.row_str);
    g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, M, logsum, NULL, stats);  // lse = max + log sum
    cudnnBackendDescriptor_t P = g.virt(d.s, d.s_str, CUDNN_DATA_BFLOAT16);
    g.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, E, sum, NULL, P);
    g.matmul(P, V, O);
}

// backward: D = rowsum(dO * O) (an output: softmax_sum); P = exp(mask(scale S - lse));
// dV = P^T dO; dS = scale P (dO V^T - D); dK = dS^T Q; dQ = dS K (atomic: through an fp32
// buffer that cuDNN accumulates into, then copied)
static void build_backward(Graph &g, const Key &k) {
    const Dims d = dims_of(k);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT, bf = CUDNN_DATA_BFLOAT16;
    const int64_t B = k.B, H = k.NH, T = k.T, dq = k.dqk, dv = k.dv;
    cudnnBackendDescriptor_t Q = rows_of(g, UID_Q, k, k.dqk, k.q_row, k.q_head);
    cudnnBackendDescriptor_t KT = cols_of(g, UID_K, k, k.dqk, k.k_row, k.k_head);
    cudnnBackendDescriptor_t VT = cols_of(g, UID_V, k, k.dv, k.v_row, k.v_head), O = out_of(g, UID_O, k);
    // the gradients have the strides of q, k and v; dO those of out
    cudnnBackendDescriptor_t dQ = rows_of(g, UID_DQ, k, k.dqk, k.q_row, k.q_head);
    cudnnBackendDescriptor_t dK = rows_of(g, UID_DK, k, k.dqk, k.k_row, k.k_head);
    cudnnBackendDescriptor_t dV = rows_of(g, UID_DV, k, k.dv, k.v_row, k.v_head), dO = out_of(g, UID_DO, k);
    cudnnBackendDescriptor_t stats = g.tensor(UID_STATS, f32, d.row, d.row_str, false);
    cudnnBackendDescriptor_t scale = scalar(g, UID_SCALE), neg_inf = scalar(g, UID_NEG_INF), one = scalar(g, UID_ONE);

    // D = rowsum(dO * O), the product seen as (B, H, T, dv) in the (B, T, H, dv) layout
    const int64_t pd[4] = {B, H, T, dv}, ps[4] = {H * T * dv, T * dv, H * dv, 1};
    cudnnBackendDescriptor_t rs = g.virt(d.row, d.row_str);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, g.pw(CUDNN_POINTWISE_MUL, dO, O, pd, ps), rs);
    cudnnBackendDescriptor_t D = g.tensor(UID_SOFTMAX_SUM, f32, d.row, d.row_str, false);
    g.pointwise(CUDNN_POINTWISE_MUL, f32, rs, one, NULL, D);

    cudnnBackendDescriptor_t P = g.pw(CUDNN_POINTWISE_EXP, scores(g, d, Q, KT, scale, neg_inf, stats), NULL, d.s, d.s_str);
    const int64_t tstr[4] = {H * T * T, T * T, 1, T};  // (B, H, key, query) over the same scores
    cudnnBackendDescriptor_t PT = g.virt(d.s, tstr, bf);
    g.reshape(P, PT);
    g.matmul(PT, dO, dV);

    cudnnBackendDescriptor_t dP = g.virt(d.s, d.s_str);
    g.matmul(dO, VT, dP);
    cudnnBackendDescriptor_t dS = g.pw(CUDNN_POINTWISE_SUB, dP, D, d.s, d.s_str);
    dS = g.pw(CUDNN_POINTWISE_MUL, dS, P, d.s, d.s_str);
    dS = g.pw(CUDNN_POINTWISE_MUL, dS, scale, d.s, d.s_str);
    cudnnBackendDescriptor_t dST = g.virt(d.s, tstr, bf);
    g.reshape(dS, dST);
    g.matmul(dST, Q, dK);

    // K (B, H, T, dqk) as a view of K^T (the view stays fp32-typed, as in cuDNN's own graphs)
    const int64_t knd[4] = {B, H, T, dq}, kns[4] = {T * k.k_row, k.k_head, k.k_row, 1};
    cudnnBackendDescriptor_t Kn = g.virt(knd, kns);
    g.reshape(KT, Kn);
    if (k.atomic) {
        const int64_t as[4] = {H * T * dq, T * dq, dq, 1};
        cudnnBackendDescriptor_t acc = g.tensor(UID_DQ_ACCUM, f32, knd, as, false);
        g.matmul(dS, Kn, acc);
        g.pointwise(CUDNN_POINTWISE_IDENTITY, f32, acc, NULL, NULL, dQ);
    } else {
        g.matmul(dS, Kn, dQ);
    }
}

// engine configs from the heuristics (mode A, then the fallback list), first that finalizes;
// deterministic_only skips engines noted NONDETERMINISTIC
static void choose_plan(Plan *p, cudnnBackendDescriptor_t graph, bool deterministic_only) {
    Graph &g = p->g;
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    char tried[256] = "";
    size_t used = 0;
    for (int m = 0; m < 2 && g.ok && !p->plan; m++) {
        cudnnBackendDescriptor_t heur = g.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "create heuristics");
        g.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heur graph");
        g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m], "heur mode");
        g.finalize(heur, m ? "finalize heuristics (fallback mode)" : "finalize heuristics (mode A)");
        int64_t n = 0;
        if (g.ok) g.check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                   0, &n, NULL), "heuristics result count");
        if (!g.ok || n <= 0) continue;
        std::vector<cudnnBackendDescriptor_t> cfgs((size_t)n);
        for (int64_t i = 0; i < n; i++) cfgs[i] = g.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "create engine config");
        int64_t got = 0;
        g.check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                         cfgs.data()), "heuristics results");
        for (int64_t i = 0; i < got && g.ok && !p->plan; i++) {
            cudnnBackendDescriptor_t eng = g.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "create engine");
            int64_t c = 0, index = -1;
            g.check(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
                                             &eng), "engine of config");
            g.check(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &c, &index),
                    "engine index");
            cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
            int64_t nn = 0;
            g.check(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                             CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes), "engine numerical notes");
            if (!g.ok) break;
            int nondet = 0;
            for (int64_t j = 0; j < nn; j++) nondet |= notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
            if (used + 32 < sizeof tried)
                used += (size_t)snprintf(tried + used, sizeof tried - used, "%s%lld%s", used ? "," : "",
                                         (long long)index, nondet ? "(nondet)" : "");
            if (nondet && deterministic_only) continue;
            cudnnBackendDescriptor_t plan;
            if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
                continue;
            cudnnHandle_t h = handle();
            if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
                cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &cfgs[i]) ||
                cudnnBackendFinalize(plan) ||
                cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &c,
                                         &p->workspace)) {
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            g.descs.push_back(plan);
            p->plan = plan;
            p->engine = index;
            p->nondeterministic = nondet;
        }
    }
    if (g.ok && !p->plan)
        snprintf(g.why, sizeof g.why, "no engine config finalized an execution plan%s (engines offered: %s)",
                 deterministic_only ? " among the deterministic ones" : "", *tried ? tried : "none");
}

static Plan *build(const Key &k) {
    Plan *p = new Plan();
    p->key = k;
    p->scale = k.scale, p->neg_inf = -INFINITY, p->one = 1.f;
    Graph &g = p->g;
    if (k.backward) build_backward(g, k);
    else build_forward(g, k);
    cudnnBackendDescriptor_t graph = g.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "create operation graph");
    cudnnHandle_t h = handle();
    g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    if (g.ok) g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)g.ops.size(),
                    g.ops.data(), "graph ops");
    g.finalize(graph, "finalize operation graph");
    choose_plan(p, graph, !k.atomic);
    p->ok = g.ok && p->plan;
    memcpy(p->why, g.why, sizeof p->why);
    if (!p->ok) g.release();
    return p;
}

static Plan *find_plan(const Key &k) {
    int free_slot = -1, oldest = -1;
    for (int i = 0; i < PLAN_CACHE; i++) {
        if (!g_plans[i]) {
            if (free_slot < 0) free_slot = i;
            continue;
        }
        if (!memcmp(&g_plans[i]->key, &k, sizeof k)) {
            g_plans[i]->last_use = ++g_clock;
            return g_plans[i];
        }
        if (oldest < 0 || g_plans[i]->last_use < g_plans[oldest]->last_use) oldest = i;
    }
    int slot = free_slot;
    if (slot < 0) {  // evict the least recently used (its plan may still be queued: wait)
        CUDA_CHECK(cudaStreamSynchronize(g_cuda.stream));
        slot = oldest;
        g_plans[slot]->g.release();
        delete g_plans[slot];
    }
    Plan *p = build(k);
    p->last_use = ++g_clock;
    g_plans[slot] = p;
    if (!p->ok)
        fprintf(stderr,
                "hybrid: note: cuDNN attention %s (B=%d T=%d NH=%d dqk=%d dv=%d) not available, using our kernel "
                "for this shape: %s\n",
                k.backward ? "backward" : "forward", k.B, k.T, k.NH, k.dqk, k.dv, p->why);
    return p;
}

static int bwd_atomic(void) {
    static int v = -1;
    if (v < 0) {
        static const char *const names[] = {"det", "atomic"};
        v = env_choice("HYBRID_ATTN_CUDNN_BWD", names, 2);
    }
    return v;
}

static Key key_of(const AttnLayout *L, int backward) {
    Key k;
    memset(&k, 0, sizeof k);
    k.backward = backward, k.atomic = backward && bwd_atomic();
    k.B = L->B, k.T = L->T, k.NH = L->NH, k.dqk = L->dqk, k.dv = L->dv;
    k.q_row = L->q_row, k.q_head = L->q_head, k.k_row = L->k_row, k.k_head = L->k_head;
    k.v_row = L->v_row, k.v_head = L->v_head;
    k.scale = (float)L->scale;
    return k;
}

// what cuDNN cannot be handed at all (before asking it): the caller's kernel runs these
static const char *unsupported(const AttnLayout *L, const void *const *ptrs, int n) {
    if (L->B <= 0 || L->T <= 0 || L->NH <= 0 || L->dqk <= 0 || L->dv <= 0) return "empty shape";
    if (L->NH > 1 && (L->q_head == 0 || L->k_head == 0 || L->v_head == 0)) return "a head stride of 0";
    if (L->dqk % 8 || L->dv % 8 || L->q_row % 8 || L->k_row % 8 || L->v_row % 8 || L->q_head % 8 ||
        L->k_head % 8 || L->v_head % 8)
        return "head widths or strides not multiples of 8 elements";
    for (int i = 0; i < n; i++)
        if (!is_aligned16(ptrs[i])) return "a buffer not 16-byte aligned";
    return NULL;
}

static Plan *plan_for(const AttnLayout *L, int backward, const void *const *ptrs, int n) {
    const char *why = unsupported(L, ptrs, n);
    if (why) {
        static int said;
        if (!said++)
            fprintf(stderr, "hybrid: note: cuDNN attention not used for B=%d T=%d NH=%d dqk=%d dv=%d (%s): our kernel "
                            "runs it (said once)\n", L->B, L->T, L->NH, L->dqk, L->dv, why);
        return NULL;
    }
    Plan *p = find_plan(key_of(L, backward));
    return p->ok ? p : NULL;
}

static void execute(Plan *p, const int64_t *uids, void *const *ptrs, int n, void *workspace) {
    cudnnBackendDescriptor_t pack;
    CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
    CUDNN_CHECK(cudnnBackendFinalize(pack));
    CUDNN_CHECK(cudnnBackendExecute(handle(), p->plan, pack));
    CUDNN_CHECK(cudnnBackendDestroyDescriptor(pack));
    LAUNCH_CHECK();
    g_cudnn_runs++;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

int cudnn_attention_forward(real *out, real *lse, const real *q, const real *k, const real *v, const AttnLayout *L) {
    const void *ptrs[5] = {out, lse, q, k, v};
    Plan *p = plan_for(L, 0, ptrs, 5);
    if (!p) return 0;
    void *ws = p->workspace ? scratch_get((size_t)p->workspace) : NULL;
    const int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
    void *data[7] = {(void *)q, (void *)k, (void *)v, out, lse, &p->scale, &p->neg_inf};
    execute(p, uids, data, 7, ws);
    return 1;
}

int cudnn_attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *q, const real *k,
                             const real *v, const real *out, const real *lse, const AttnLayout *L) {
    const void *ptrs[9] = {dq, dk, dv, dout, q, k, v, out, lse};
    Plan *p = plan_for(L, 1, ptrs, 9);
    if (!p) return 0;
    // scratch: D (B, NH, T) fp32 | (atomic) the fp32 dQ accumulator | cuDNN's workspace
    const size_t rows = (size_t)L->B * L->NH * L->T;
    const size_t off_acc = align256(rows * sizeof(float));
    const size_t off_ws = off_acc + (p->key.atomic ? align256(rows * L->dqk * sizeof(float)) : 0);
    char *s = (char *)scratch_get(off_ws + (size_t)p->workspace);
    const int64_t uids[14] = {UID_Q,     UID_K,  UID_V,           UID_O,   UID_STATS, UID_SCALE, UID_NEG_INF,
                              UID_ONE,   UID_DO, UID_SOFTMAX_SUM, UID_DQ,  UID_DK,    UID_DV,    UID_DQ_ACCUM};
    void *data[14] = {(void *)q, (void *)k, (void *)v, (void *)out, (void *)lse, &p->scale, &p->neg_inf, &p->one,
                      (void *)dout, s, dq, dk, dv, s + off_acc};
    execute(p, uids, data, p->key.atomic ? 14 : 13, s + off_ws);
    return 1;
}

int cuda_attention_cudnn_probe(const AttnLayout *L, int backward, char *msg, size_t n) {
    Plan *p = find_plan(key_of(L, backward));
    if (p->ok)
        snprintf(msg, n, "engine %lld, workspace %.1f MiB, %s", (long long)p->engine, p->workspace / 1048576.0,
                 p->nondeterministic ? "NONDETERMINISTIC" : "deterministic (no NONDETERMINISTIC note)");
    else
        snprintf(msg, n, "%s", p->why);
    return p->ok;
}

#else  // no cuDNN in this build: the callers run our kernels

int cuda_attention_cudnn_built(void) { return 0; }
size_t cuda_cudnn_version(void) { return 0; }

int cudnn_attention_forward(real *, real *, const real *, const real *, const real *, const AttnLayout *) { return 0; }
int cudnn_attention_backward(real *, real *, real *, const real *, const real *, const real *, const real *,
                             const real *, const real *, const AttnLayout *) {
    return 0;
}
int cuda_attention_cudnn_probe(const AttnLayout *, int, char *msg, size_t n) {
    snprintf(msg, n, "this build has no cuDNN");
    return 0;
}

#endif
