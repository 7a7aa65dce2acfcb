// How the MoE experts' grouped GEMMs divide their work, shared by the mma.sync kernels
// (kernels/moe/experts.cu) and the wgmma ones (kernels/moe/experts_wg.cu): the row GEMMs' walk over
// (row tile, column tile) pairs, the weight gradients' splits of an expert's rows, and when a
// GEMM's operands suit the 16-byte paths. The experts' rows are sorted (expert e owns rows
// [offsets[e], offsets[e+1])), the counts live on the device only.
#ifndef HYBRID_KERNELS_MOE_GROUPED_WALK_CUH
#define HYBRID_KERNELS_MOE_GROUPED_WALK_CUH

#include "kernels/common.cuh"

// the 16-byte paths' conditions (grouped_gemm.cuh's "VEC"; the wgmma kernels have no other path):
// pointers 16-byte aligned, every
// leading dimension and tile limit along a contiguous dimension a multiple of 8. The configs'
// widths (C, M) all are; a parameter tensor at an offset that is not 16-byte aligned takes the
// element-by-element path (correct, slower).
static inline int gg_vec_ok(const void *a, const void *b, const void *c, int d0, int d1) {
    return is_aligned16(a) && is_aligned16(b) && is_aligned16(c) && d0 % 8 == 0 && d1 % 8 == 0;
}

// The row tiles, expert by expert (BM rows each, an expert's last one partial), numbered from 0.
// A block walks increasing tile numbers and keeps e, the expert of the current row tile, base,
// the tiles of the experts before it, and nt, the tiles of expert e (row_tiles_start sets them
// for tile 0's expert). Every thread of a block computes the same values (the exits are uniform).
template <int BM>
__device__ __forceinline__ void row_tiles_start(const int *offsets, int &e, int &base, int &nt) {
    e = 0, base = 0, nt = (offsets[1] - offsets[0] + BM - 1) / BM;
}
// moves (e, base, nt) to the expert of row tile `tile` (>= the last one asked); false when tile
// is past the last expert's tiles (the walk is over). The tile's rows are then [r0, r0 + m_lim),
// r0 = offsets[e] + (tile - base) BM, m_lim = min(BM, offsets[e + 1] - r0).
template <int BM>
__device__ __forceinline__ bool row_tiles_seek(int tile, const int *offsets, int E, int &e, int &base, int &nt) {
    while (tile >= base + nt) {
        base += nt;
        if (++e == E) return false;
        nt = (offsets[e + 1] - offsets[e] + BM - 1) / BM;
    }
    return true;
}

// The rows of split s of an expert with `rows` rows cut into S splits for its weight gradient:
// [s ch, min(rows, (s + 1) ch)) with ch = ceil(rows / S) rounded up to a multiple of
// MOE_SPLIT_ALIGN rows, whole k-steps of both tiles (so a split is empty iff s ch >= rows; the
// trailing splits of a small expert can be). A split GEMM and the reduction of its partials
// (experts.cu, wgrad_reduce_kernel) cut the same way.
#define MOE_SPLIT_ALIGN 64
__device__ __forceinline__ int wgrad_split_rows(int rows, int S) {
    const int ch = (rows + S - 1) / S;
    return (ch + MOE_SPLIT_ALIGN - 1) / MOE_SPLIT_ALIGN * MOE_SPLIT_ALIGN;
}

// The rows of expert e's split s of S (S == 1: all its rows): [*r0, *r0 + return value), the
// return value <= 0 for an empty expert or split (which then adds or stores nothing)
__device__ __forceinline__ int wgrad_block_rows(const int *offsets, int e, int s, int S, int *r0) {
    int r = offsets[e], rows = offsets[e + 1] - r;
    if (S > 1) {
        const int ch = wgrad_split_rows(rows, S);
        r += s * ch;
        rows = min(ch, rows - s * ch);
    }
    *r0 = r;
    return rows;
}

#endif
