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
/* The first row of this work-group's query block in the forward and dQ kernels: with causal
   (diag < Lk) the last blocks, which see the most keys, come first. */
INLINE int query_block_start(int Lq, int causal)
{
    int blocks = (Lq + BLOCK_M - 1) / BLOCK_M, block = grid_block();
    return (causal ? blocks - 1 - block : block) * BLOCK_M;
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
#endif

#endif
