/* What every matmul kernel shares, the portable ones (cl/matmul.cl) and each vendor's
   (cl/nv/matmul_mma.cl): the operand dtypes, the kernel arguments, the epilogue that scales,
   accumulates into and activates C, and the order in which work-groups take their tiles.

   Operand dtypes: -D A_DTYPE=F32|F16|BF16 (likewise B_DTYPE, C_DTYPE); values enter the
   multiply as f32 and accumulate in f32. */
#ifndef CLKIT_MATMUL_H
#define CLKIT_MATMUL_H

#include "common.h"

#define A_T CLKIT_CAT(ty_, A_DTYPE)
#define B_T CLKIT_CAT(ty_, B_DTYPE)
#define C_T CLKIT_CAT(ty_, C_DTYPE)
#define LOAD_A(p, i) CLKIT_CAT(LD_, A_DTYPE)(p, i)
#define LOAD_B(p, i) CLKIT_CAT(LD_, B_DTYPE)(p, i)
#define LOAD_C(p, i) CLKIT_CAT(LD_, C_DTYPE)(p, i)
#define STORE_C(p, i, v) CLKIT_CAT(ST_, C_DTYPE)(p, i, v)
#define LOAD4_A(p, i) CLKIT_CAT(LDA4_, A_DTYPE)(p, i)
#define LOAD4_B(p, i) CLKIT_CAT(LDA4_, B_DTYPE)(p, i)

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_LEAKY_RELU 2

/* alpha * acc + beta * C, then the activation; beta == 0 never reads C (it may hold NaN). */
inline void epilogue(__global C_T *C, long idx, float acc, float alpha, float beta, int act,
                     float slope)
{
    float v = alpha * acc;
    if (beta != 0.0f) v = fma(beta, LOAD_C(C, idx), v);
    if (act == ACT_RELU) v = fmax(v, 0.0f);
    else if (act == ACT_LEAKY_RELU) v = v >= 0.0f ? v : v * slope;
    STORE_C(C, idx, v);
}

#define OPERANDS                                                                                \
    __global const A_T *A, long a_off, long a_sb, long a_sm, long a_sk, __global const B_T *B,   \
        long b_off, long b_sb, long b_sk, long b_sn, __global C_T *C, long c_off, long c_sb,     \
        long c_sm, long c_sn, int M, int N, int K, float alpha, float beta, int act, float slope

/* Private arrays passed by pointer must stay in registers: force the helpers inline. */
#define INLINE inline __attribute__((always_inline))

/* Split-K in one launch: each of a tile's `splits` work-groups stores its f32 partial sums in
   P[split][batch][m][n] and takes a ticket from the tile's counter; the one that draws the last
   ticket adds the partials in split order (the same bits whichever split ends last), runs the
   epilogue and puts the counter back to 0 for the next call. A second kernel would cost a
   launch and its gap, as long as the split itself at M = 1. `tickets`: the context's counters,
   zeroed once (clkit_tickets). */
#define SPLIT_PARAMS , __global float *P, volatile __global uint *tickets, int k_chunk

/* A piece of a partial-sum row: 4 floats, or 1 where vec is 1 (the rest 0). */
INLINE float4 split_piece(__global const float *p, int vec)
{
    return vec == 4 ? vload4(0, p) : (float4)(p[0], 0.0f, 0.0f, 0.0f);
}

/* rows x cols of C from (m0, n0): their partial sums in split order (P at the batch's first
   plane, planes `plane` floats apart, rows N floats long), through the epilogue; work-item
   tid of wg. A work-item takes FINISH_ITEMS pieces of 4 columns (1 where N is not a multiple
   of 4) at a time and has four splits' loads of them in flight: one load at a time, each a
   round trip to L2, took longer than the split's own k loop. The pass counter is the
   work-group's own: PoCL 3.1 ran `for (i = tid; i < n; i += wg)` past n here, inside the
   branch on split_last. */
#define FINISH_ITEMS 4
INLINE void split_finish(__global const float *P, long plane, int splits, __global C_T *C, long c_sm,
                         long c_sn, int m0, int n0, int rows, int cols, int N, int tid, int wg,
                         float alpha, float beta, int act, float slope)
{
    int vec = N % 4 == 0 && n0 % 4 == 0 ? 4 : 1, pieces = (cols + vec - 1) / vec, total = rows * pieces;
    for (int i0 = 0; i0 < total; i0 += wg * FINISH_ITEMS) {
        float4 sum[FINISH_ITEMS];
        long at[FINISH_ITEMS];
        #pragma unroll
        for (int u = 0; u < FINISH_ITEMS; u++) {
            int i = min(i0 + u * wg + tid, total - 1);
            at[u] = (long)(m0 + i / pieces) * N + n0 + i % pieces * vec;
            sum[u] = (float4)(0.0f);
        }
        int s = 0;
        for (; s + 4 <= splits; s += 4) {
            float4 x[4][FINISH_ITEMS];
            #pragma unroll
            for (int t = 0; t < 4; t++)
                #pragma unroll
                for (int u = 0; u < FINISH_ITEMS; u++) x[t][u] = split_piece(P + (s + t) * plane + at[u], vec);
            #pragma unroll
            for (int t = 0; t < 4; t++)
                #pragma unroll
                for (int u = 0; u < FINISH_ITEMS; u++) sum[u] += x[t][u];
        }
        for (; s < splits; s++)
            #pragma unroll
            for (int u = 0; u < FINISH_ITEMS; u++) sum[u] += split_piece(P + s * plane + at[u], vec);
        #pragma unroll
        for (int u = 0; u < FINISH_ITEMS; u++) {
            int i = i0 + u * wg + tid, m = m0 + i / pieces, n = n0 + i % pieces * vec;
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = e == 0 ? sum[u].x : e == 1 ? sum[u].y : e == 2 ? sum[u].z : sum[u].w;
                if (i < total && e < vec && n + e < n0 + cols)
                    epilogue(C, (long)m * c_sm + (long)(n + e) * c_sn, v, alpha, beta, act, slope);
            }
        }
    }
}

#if defined(BLOCK_M)
/* Triton's grouped ordering: GROUP_M rows of tiles are swept column by column, so the
   work-groups in flight reuse the same A rows and B columns from L2. */
inline int2 tile_coords(int pid, int M, int N)
{
    int num_m = (M + BLOCK_M - 1) / BLOCK_M, num_n = (N + BLOCK_N - 1) / BLOCK_N;
    int in_group = GROUP_M * num_n;
    int first_m = (pid / in_group) * GROUP_M;
    int size_m = min(num_m - first_m, GROUP_M);
    return (int2)(first_m + (pid % in_group) % size_m, (pid % in_group) / size_m);
}
#endif

#if defined(THREAD_M) || defined(WAVES_M)
/* Element e of a tile in load order -> (m, k) of A's BLOCK_M x BLOCK_K slice, (k, n) of B's
   BLOCK_K x BLOCK_N, for kernels that stage tiles through registers (matmul_blocked,
   matmul_matrix): consecutive loads walk the operand's unit-stride dimension (A_KMAJOR: k is
   A's; B_NMAJOR: n is B's). */
inline int2 a_coord(int e)
{
#if A_KMAJOR
    return (int2)(e / BLOCK_K, e % BLOCK_K);
#else
    return (int2)(e % BLOCK_M, e / BLOCK_M);
#endif
}

inline int2 b_coord(int e)
{
#if B_NMAJOR
    return (int2)(e / BLOCK_N, e % BLOCK_N);
#else
    return (int2)(e % BLOCK_K, e / BLOCK_K);
#endif
}
#endif

#endif
