// What the two sequential kernels of the tensor-core delta rule share, the forward walk
// (dr_walk_mma_kernel, chunk_fwd_mma.cu) and the reverse walk (dr_bwalk_mma_kernel,
// chunk_bwalk_mma.cu); docs/delta-rule.md, "CUDA kernels": the choice of the V tile, and the
// store of a state tile to the workspace.
//
// The V tile: a walk block carries one (sequence, head, V-tile) through all of its sequence's chunks, so a
// block that waits for a second wave costs a whole sequence again: the grid should fit in one
// wave of resident blocks. Each kernel is built for a few tiles (template instances); at a
// launch the host takes the one with the fewest waves, from the grid size, the SM count and the
// blocks an SM (shared memory and the kernel's launch bounds), and between equals the first
// listed (the narrowest: more blocks, shorter per-chunk work). The columns of the state never
// mix and every column's products and sums are the same operations in the same order for any
// tile, so the choice changes the time only, never a bit (tests/gpu/test_delta_rule.c runs every
// tile and compares the bits). HYBRID_DR_WALK_BV / HYBRID_DR_BWALK_BV = a tile width force it
// (read at each launch; a tile that the shape does not fit is ignored).
#ifndef HYBRID_KERNELS_DELTA_RULE_WALK_CUH
#define HYBRID_KERNELS_DELTA_RULE_WALK_CUH

#include <stdlib.h>
#include <string.h>

#include "kernels/delta_rule/chunk.cuh"

// one buildable tile of a walk kernel: its width, dynamic shared memory, the blocks an SM that
// its launch bounds allow by registers (0: not buildable for this K)
typedef struct {
    int bv;
    size_t smem;
    int reg_blocks;
} DrWalkTile;

#define DR_SMEM_SM (228 * 1024)     // shared memory of an H100 / H200 SM
#define DR_SMEM_BLOCK (227 * 1024)  // the most one block may take
#define DR_SMEM_RESERVED 1024       // taken by the runtime for every resident block

static inline int dr_walk_blocks_per_sm(const DrWalkTile *t) {
    if (t->reg_blocks <= 0 || t->smem > DR_SMEM_BLOCK) return 0;
    const int by_smem = (int)(DR_SMEM_SM / (t->smem + DR_SMEM_RESERVED));
    return by_smem < t->reg_blocks ? by_smem : t->reg_blocks;
}

// Index into tiles[0..n) of the tile to launch for `pairs` (sequence, head) pairs and V columns.
static inline int dr_walk_pick(const DrWalkTile *tiles, int n, size_t pairs, int V, const char *env) {
    const char *e = getenv(env);
    int forced = 0;  // unset, empty or "0": the choice below; else one of the tiles' widths
    if (e && *e && strcmp(e, "0")) {
        bool known = false;
        forced = atoi(e);
        for (int a = 0; a < n; a++) known |= forced == tiles[a].bv;
        if (!known || strspn(e, "0123456789") != strlen(e))  // (a typo must not pass as the default)
            die("%s=%s: expected one of the tile widths %d, %d", env, e, tiles[0].bv, tiles[n - 1].bv);
    }
    int best = -1;
    size_t best_waves = 0;
    for (int a = 0; a < n; a++) {
        const int per_sm = dr_walk_blocks_per_sm(&tiles[a]);
        if (per_sm == 0) continue;
        if (forced == tiles[a].bv) return a;
        const size_t blocks = pairs * (size_t)((V + tiles[a].bv - 1) / tiles[a].bv),
                     slots = (size_t)(g_cuda.sm_count > 0 ? g_cuda.sm_count : 1) * (size_t)per_sm,
                     waves = (blocks + slots - 1) / slots;
        if (best < 0 || waves < best_waves) best = a, best_waves = waves;
    }
    if (best < 0) die("delta_chunk: no walk tile fits the shared memory at this K");
    return best;
}

// The copy passes below give the lanes of a warp whole row segments of 16-byte groups (every
// global store fills its 32-byte sectors), element e (the thread, then + nthreads) at row
// e / w8, group e % w8 of a tile of w8 groups a row. A 16-byte shared access is served a
// quarter warp (8 lanes) at a time: at w8 >= 8 those 8 lanes read one row (128 contiguous
// bytes: conflict-free); at w8 == 4 (32-column tiles, row stride lds = 40 bf16, 20 banks) two
// rows, and rows r, r + 1 overlap in 4 banks, so there a warp's 8 rows go to the quarter warps
// as (0, 4), (1, 5), (2, 6), (3, 7) (rows 4 apart lie 80 words, 16 banks, apart): element e
// (nthreads a multiple of 32) -> row *r, group column *c.
__device__ __forceinline__ void dr_walk_copy_rc4(int e, int *r, int *c) {
    const int l = e & 31;
    *r = (e >> 5) * 8 + ((l >> 2) & 1) * 4 + (l >> 3);
    *c = (l & 3) * 8;
}

// The state tile (rows [0, nrows), columns [0, ncols) of a bf16 shared-memory tile of
// `width` columns, row stride lds) to the workspace at dst (row stride ldg), by the block's
// nthreads threads after the barrier that completes the tile: 16-byte copies where vec (the
// tile's columns all valid, ldg a multiple of 8 and dst 16-byte aligned; lds a multiple of 8),
// else one element at a time. Both walks stored their state from the fragments in registers
// before, one 2-byte store an element and part: a warp's store then touched 8 rows, 8 of 32
// bytes of each sector (Nsight Compute on the H200: 10.7 of 32 bytes a store sector used in the
// forward walk, 9.6 in the backward's recompute, which also stores h's lo part), and the
// compiler kept the addresses and predicates across the chunk loop (the 16-warp reverse walk
// spilled 232 bytes at its 128 registers).
__device__ __forceinline__ void dr_walk_store_tile(bf16 *dst, size_t ldg, const bf16 *s, int lds, int nrows,
                                                   int ncols, int width, int tid, int nthreads) {
    const bool vec = ncols == width && ldg % 8 == 0 && ((uintptr_t)dst & 15) == 0;
    if (vec) {
        const int w8 = width / 8, total = w8 == 4 ? (nrows + 7) / 8 * 32 : nrows * w8;
        for (int e = tid; e < total; e += nthreads) {
            int r = e / w8, c = (e % w8) * 8;
            if (w8 == 4) dr_walk_copy_rc4(e, &r, &c);
            if (w8 != 4 || r < nrows)  // (at w8 == 4 a warp's 8 rows may pass nrows)
                *reinterpret_cast<uint4 *>(dst + (size_t)r * ldg + c) =
                    *reinterpret_cast<const uint4 *>(s + r * lds + c);
        }
    } else {
        for (int e = tid; e < nrows * ncols; e += nthreads) {
            const int r = e / ncols, c = e % ncols;
            dst[(size_t)r * ldg + c] = s[r * lds + c];
        }
    }
}

// The same for a split block (Delta / dDelta as hi + lo pairs, chunk.cuh's the Delta pair layout
// layout: a row of 2 V bf16, each group of 8 columns g8.. its w = min(8, V - g8) hi values
// then its w lo values): the tile's hi and lo (sh, sl: [64][lds], columns j0.. of the block)
// rows [0, n) and columns [0, ncols) into row block P; two 16-byte stores a whole group where
// V % 4 == 0 (16-byte aligned rows), else one element at a time. (The forward walk stored
// Delta from the fragments before: two 4-byte stores a lane and column pair, 8 rows a store.)
// !LO: the hi halves alone (one MMA a product, chunk.cuh's dr_mma3x: nothing reads the lo
// halves; sl unused).
template <bool LO = true>
__device__ __forceinline__ void dr_walk_store_split_tile(bf16 *P, int V, int j0, const bf16 *sh, const bf16 *sl,
                                                         int lds, int n, int ncols, int width, int tid,
                                                         int nthreads) {
    const bool vec = V % 4 == 0 && ((uintptr_t)P & 15) == 0;
    const int w8 = width / 8, total = w8 == 4 ? (n + 7) / 8 * 32 : n * w8;
    for (int e = tid; e < total; e += nthreads) {
        int r = e / w8, c = (e % w8) * 8;
        if (w8 == 4) dr_walk_copy_rc4(e, &r, &c);
        const int g8 = j0 + c, w = V - g8 < 8 ? V - g8 : 8;
        if ((w8 == 4 && r >= n) || c >= ncols) continue;  // (at w8 == 4 a warp's 8 rows may pass n)
        bf16 *ph = P + (size_t)r * 2 * V + 2 * g8, *pl = ph + w;
        if (vec && w == 8) {
            *reinterpret_cast<uint4 *>(ph) = *reinterpret_cast<const uint4 *>(sh + r * lds + c);
            if constexpr (LO) *reinterpret_cast<uint4 *>(pl) = *reinterpret_cast<const uint4 *>(sl + r * lds + c);
        } else {
            for (int u = 0; u < w; u++) {
                ph[u] = sh[r * lds + c + u];
                if constexpr (LO) pl[u] = sl[r * lds + c + u];
            }
        }
    }
}

// Fragment values x0, x1 (columns jj, jj + 1) of operand op split hi + lo into the bf16 tiles
// Xh, Xl at offset o (4-byte aligned: an even column of a tile with an even row stride), a
// 4-byte store each: one 2-byte store an element took twice the store instructions (Nsight
// Compute on the H200 also counted 1.5 wavefronts a request on those 2-byte stores, though no
// two lanes of one store share a bank). !LO: x0, x1 as one bf16 each into Xh alone (one MMA a
// product, chunk.cuh's dr_mma3x; Xl untouched).
template <bool LO>
__device__ __forceinline__ void dr_walk_put2(DrSplitOperand op, float x0, float x1, bf16 *Xh, bf16 *Xl, int o) {
    if constexpr (LO) {
        uint32_t hi, lo;
        dr_split_pair(op, x0, x1, hi, lo);
        *reinterpret_cast<uint32_t *>(Xh + o) = hi;
        *reinterpret_cast<uint32_t *>(Xl + o) = lo;
    } else {
        *reinterpret_cast<uint32_t *>(Xh + o) = pack_bf16(x0, x1);
    }
}

#endif
