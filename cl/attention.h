/* What every attention kernel shares, the portable ones (cl/attention.cl) and each vendor's
   (cl/nv/attention_mma.cl): the tensor arguments, the grid's order of heads and blocks, and
   the backward's delta kernel, which every backward program carries so that the host builds
   it from the program of whichever path runs the backward. */
#ifndef CLKIT_ATTENTION_H
#define CLKIT_ATTENTION_H

#include "common.h"

#if defined(HEAD_DIM)

/* Private arrays passed by pointer must stay in registers: force the helpers inline. */
#define INLINE inline __attribute__((always_inline))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#define IN(t) __global const elem_t *t, long t##_off, long4 t##_st
#define OUT(t) __global elem_t *t, long t##_off, long4 t##_st
/* Element offset of (batch b, head h) in a tensor's view; strides are (b, h, l, d). */
#define HEAD(t, b, h) (t##_off + (long)(b) * t##_st.s0 + (long)(h) * t##_st.s1)

/* The grids are (heads x work-group, row blocks): work-groups start about in the order of
   their linear id, x fastest, so every head's block i starts before any head's block i + 1.
   With causal the heaviest blocks come first across all heads and the grid's tail holds only
   light ones (with blocks in x, each head's heaviest block started after the lighter blocks
   of the heads before it). */
INLINE int grid_head(void) { return get_group_id(0); }
INLINE int grid_block(void) { return get_group_id(1); }

/* The causal mask, one rule for every kernel: key c is hidden from query t when c - t > diag.
   The host passes diag = 0 for top-left alignment, Lk - Lq for bottom-right, and Lk without a
   mask, which hides nothing. */
INLINE int hidden(int key, int query, int diag) { return key - query > diag; }

/* The end of the keys that queries m0 .. m0 + rows - 1 see. */
INLINE int keys_end(int m0, int rows, int Lk, int diag)
{
    return (int)clamp((long)m0 + rows + diag, 0L, (long)Lk);
}

/* lse -> log2 units for P = 2^(s - lse2). A row that saw no key (lse -inf: bottom-right with
   Lq > Lk) gets +inf, so that its P is 0, not NaN. */
INLINE float lse2_of(float lse) { return lse == -INFINITY ? INFINITY : LOG2E * lse; }

#if defined(BLOCK_M)
/* The first row of query block `block` (in launch order) in the forward and dQ kernels: with
   causal (diag < Lk) the last blocks, which see the most keys, come first. */
INLINE int query_block_at(int block, int Lq, int causal)
{
    int blocks = (Lq + BLOCK_M - 1) / BLOCK_M;
    return (causal ? blocks - 1 - block : block) * BLOCK_M;
}

INLINE int query_block_start(int Lq, int causal) { return query_block_at(grid_block(), Lq, causal); }

/* (batch x head, block in launch order) of this work-group in a one-dimensional grid of every
   head's `blocks` blocks, ordered so that the streamed side (K and V for query blocks, q and dO
   for key blocks) is read from memory about once: `section` heads at a time (as many as the
   host finds room for in the last-level cache), all their blocks before the next section's,
   each block across the section's heads. Heads across all blocks, the 2-D grids' order (which
   a section of every head reproduces), rereads every head's streamed rows from memory for
   each of its blocks once the heads in flight outgrow the cache. */
INLINE int2 sectioned_block(int heads, int blocks, int section)
{
    int id = get_group_id(0), first = id / (section * blocks) * section;
    int r = id - first * blocks, n = min(section, heads - first);
    return (int2)(first + r % n, r / n);
}

/* The first block of BLOCK_N queries that sees key m0: dK/dV's walks start there. */
INLINE int queries_start(int m0, int diag) { return (int)max((long)m0 - diag, 0L) / BLOCK_N * BLOCK_N; }
#endif

#if defined(ATTN_BWD)
/* delta = rowsum(dO * O). DELTA_LANES work-items share a row, each summing neighbouring
   elements, so that a warp's load touches a few whole rows instead of one element of each of
   32 rows (which strides every load across 32 lines and leans on L1 to hold them); the lanes'
   sums meet in local memory and are added in lane order. Grid (rows rounded up to the
   work-group's rows, x DELTA_LANES; B x Hq); work-group a multiple of DELTA_LANES, at most
   DELTA_WG. */
#define DELTA_LANES 8
#define DELTA_WG 256
#define DELTA_PER_LANE ((HEAD_DIM + DELTA_LANES - 1) / DELTA_LANES)
__kernel void attn_bwd_delta(IN(o), IN(dout), __global float *delta, int Hq, int Lq)
{
    __local float part[DELTA_WG];
    int lid = get_local_id(0), lane = lid % DELTA_LANES;
    int i = get_global_id(0) / DELTA_LANES, bh = get_global_id(1), b = bh / Hq, h = bh % Hq;
    int d0 = lane * DELTA_PER_LANE, d1 = min(HEAD_DIM, d0 + DELTA_PER_LANE);
    float sum = 0.0f;
    if (i < Lq) {
        o += HEAD(o, b, h) + i * o_st.s2;
        dout += HEAD(dout, b, h) + i * dout_st.s2;
        for (int d = d0; d < d1; d++)
            sum = fma(LOAD(o, d * o_st.s3), LOAD(dout, d * dout_st.s3), sum);
    }
    part[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane || i >= Lq) return;
    for (int l = 1; l < DELTA_LANES; l++) sum += part[lid + l];
    delta[(long)bh * Lq + i] = sum;
}
#endif

#if defined(ATTN_DECODE)
/* Flash-decoding's shared parts (cl/attention.cl's attn_decode, cl/nv/attention_mma.cl's
   attn_decode_mma): a work-group takes ROWS query rows of one kv head (row i = (query head
   within the group) x Lq + query) and a chunk of the keys, writes an unnormalised partial
   output with its max and sum (log2 units) to part (B, Hkv, group x Lq, splits, PART), and the
   last split of a row block to finish merges them. Grid (B x Hkv x row blocks x work-group,
   splits). */
#define DEC_MAX_SPLITS 128 /* the host's cap: the merge's weights fit local memory */
#define PART (HEAD_DIM + 2) /* a partial result: o (unnormalised), max, sum */

typedef struct dec_block {
    int b, g, bg, i0, rows, R; /* batch, kv head, their pair, first row, rows, rows a kv head */
    int split, splits, k0, n;   /* this split of the keys: n keys from k0 */
} dec_block;

INLINE dec_block decode_block(int Hq, int group, int Lq, int Lk, int diag, int chunk)
{
    dec_block k;
    int Hkv = Hq / group, blocks;
    k.R = group * Lq, blocks = (k.R + ROWS - 1) / ROWS;
    k.bg = get_group_id(0) / blocks, k.i0 = get_group_id(0) % blocks * ROWS;
    k.b = k.bg / Hkv, k.g = k.bg % Hkv;
    k.split = get_group_id(1), k.splits = get_num_groups(1), k.rows = min(ROWS, k.R - k.i0);
    int qmax = 0;
    for (int r = 0; r < k.rows; r++) qmax = max(qmax, (k.i0 + r) % Lq);
    /* Keys past the last one any of the rows sees are skipped. */
    k.k0 = k.split * chunk;
    int k1 = (int)clamp(min((long)k.k0 + chunk, (long)qmax + diag + 1), (long)k.k0, (long)Lk);
    k.n = k1 - k.k0;
    return k;
}

/* Where this split's partial result of the block's first row goes (rows splits x PART apart). */
INLINE __global float *decode_part(__global float *part, const dec_block *k)
{
    return part + ((long)k->bg * k->R + k->i0) * k->splits * PART + (long)k->split * PART;
}

/* Element offset of the kv head's row i (query head g group + i / Lq, query i % Lq) in a view
   of (B, Hq, Lq, ...) at offset off with strides st: q, o and lse. */
INLINE long decode_row(long off, long4 st, const dec_block *k, int group, int Lq, int i)
{
    return off + k->b * st.s0 + (long)(k->g * group + i / Lq) * st.s1 + (long)(i % Lq) * st.s2;
}

/* The last split's work: the row block's o and lse from every split's partial result (from
   part, at split 0 of the block's first row), each rescaled from its own max to the common
   one, summed in split order. A row no split saw a key for gets o = 0 and lse = -inf, as the
   forward gives it. w: local memory for (2 ROWS DEC_MAX_SPLITS + 2 ROWS) floats. The loops
   count passes per work-group (wg work-items): PoCL 3.1 ran `for (e = tid; e < n; e += wg)`
   past n inside the branch on split_last. */
INLINE void decode_merge(__global const float *in, __global elem_t *o, long o_off, long4 o_st,
                         __global float *lse, long lse_off, long4 lse_st, __local float *w,
                         const dec_block *k, int group, int Lq, int tid, int wg)
{
    __local float *wl = w + ROWS * DEC_MAX_SPLITS, *mx = wl + ROWS * DEC_MAX_SPLITS, *sum = mx + ROWS;
    int rows = k->rows, splits = k->splits;
    long row_st = (long)splits * PART;
    for (int e0 = 0; e0 < rows * splits; e0 += wg) {
        int e = e0 + tid, r = e / splits, s = e % splits;
        if (e < rows * splits) w[r * DEC_MAX_SPLITS + s] = in[r * row_st + s * PART + HEAD_DIM];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid < rows) {
        float m = -INFINITY;
        for (int s = 0; s < splits; s++) m = fmax(m, w[tid * DEC_MAX_SPLITS + s]);
        mx[tid] = m;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e0 = 0; e0 < rows * splits; e0 += wg) {
        int e = e0 + tid, r = e / splits, s = e % splits;
        if (e < rows * splits) {
            float x = mx[r] == -INFINITY ? 0.0f : exp2(w[r * DEC_MAX_SPLITS + s] - mx[r]);
            w[r * DEC_MAX_SPLITS + s] = x;
            wl[r * DEC_MAX_SPLITS + s] = x * in[r * row_st + s * PART + HEAD_DIM + 1];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid < rows) {
        float l = 0.0f;
        for (int s = 0; s < splits; s++) l += wl[tid * DEC_MAX_SPLITS + s];
        sum[tid] = l;
        if (lse)
            lse[decode_row(lse_off, lse_st, k, group, Lq, k->i0 + tid)] =
                l > 0.0f ? (mx[tid] + log2(l)) * LN2 : -INFINITY;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e0 = 0; e0 < rows * HEAD_DIM; e0 += wg) {
        int e = e0 + tid, r = e / HEAD_DIM, d = e % HEAD_DIM;
        if (e >= rows * HEAD_DIM) break;
        __global const float *p = in + r * row_st + d;
        float acc = 0.0f;
        for (int s = 0; s < splits; s++) acc += w[r * DEC_MAX_SPLITS + s] * p[s * PART];
        STORE(o, decode_row(o_off, o_st, k, group, Lq, k->i0 + r) + d * o_st.s3,
              sum[r] > 0.0f ? acc / sum[r] : 0.0f);
    }
}
#endif
#endif

#endif
