/* Matrix multiplication, the portable kernels: C = act(alpha * A @ B + beta * C) for A (M, K),
   B (K, N), C (M, N), batched through the second grid dimension (batch stride 0 broadcasts an
   operand). They run on any OpenCL device; the tensor-core kernel of NVIDIA GPUs is
   cl/nv/matmul_mma.cl, and what all of them share (dtypes, arguments, epilogue, tile order) is
   cl/matmul.h.

   Read straight from global memory, a product fetches every element of A N times and every
   element of B M times, 2MNK loads for 2MNK flops. Three kernels cut that as the matmul
   tutorials progress, and a fourth serves decode-time shapes:
   - matmul_naive: one output element per work-item, operands read straight from global memory;
     the baseline, every element of A and B fetched N and M times.
   - matmul_tiled: TILE x TILE tiles staged through local memory; each global element is
     fetched N/TILE and M/TILE times.
   - matmul_blocked: BLOCK_M x BLOCK_N tiles per work-group (each global element fetched
     N/BLOCK_N and M/BLOCK_M times), THREAD_M x THREAD_N outputs per work-item held in
     registers (a register-blocked micro-kernel: THREAD_M + THREAD_N local loads feed
     THREAD_M * THREAD_N FMAs), double-buffered local memory (the next K slice is loaded into
     registers while the current one is multiplied: one barrier per slice), vector loads along
     the operand's contiguous dimension, and Triton's grouped program order (GROUP_M) so
     concurrently running work-groups share rows of A and columns of B in L2.
   - matmul_skinny: for M of a few rows (a GEMV in all but name), where a tile of BLOCK_M rows
     would idle most of its FMAs and too few work-groups would walk K one after another. B,
     the only large operand, is streamed once: each work-group owns SK_COLS * 4 columns, its
     SK_K lanes split K between them, every lane keeps all SK_M rows of its columns in
     registers, and one local-memory reduction sums the lanes.

   Edges are masked: any M, N, K >= 1. */
#include "matmul.h"

/* naive and tiled run on a 3-D range (n, m, batch). */
#define BATCH_OFFSETS()                                                                          \
    long batch = get_global_id(2);                                                               \
    A += a_off + batch * a_sb;                                                                   \
    B += b_off + batch * b_sb;                                                                   \
    C += c_off + batch * c_sb

#if defined(TILE)
/* 2-D work-groups of TILE x TILE, dims (n, m, batch). */
__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void matmul_naive(OPERANDS)
{
    BATCH_OFFSETS();
    int n = get_global_id(0), m = get_global_id(1);
    if (m >= M || n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc = fma(LOAD_A(A, m * a_sm + k * a_sk), LOAD_B(B, k * b_sk + n * b_sn), acc);
    epilogue(C, m * c_sm + n * c_sn, acc, alpha, beta, act, slope);
}

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void matmul_tiled(OPERANDS)
{
    __local float As[TILE][TILE + 1], Bs[TILE][TILE + 1];
    BATCH_OFFSETS();
    int tx = get_local_id(0), ty = get_local_id(1);
    int n = get_global_id(0), m = get_global_id(1);
    /* Loads of a tile row use the same (tx, ty) roles for A and B, so both coalesce when
       the operand's k (A) or n (B) stride is 1. */
    int am = get_group_id(1) * TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ty][tx] = (am < M && k0 + tx < K) ? LOAD_A(A, am * a_sm + (k0 + tx) * a_sk) : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && n < N) ? LOAD_B(B, (k0 + ty) * b_sk + n * b_sn) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TILE; k++) acc = fma(As[ty][k], Bs[k][tx], acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (m < M && n < N) epilogue(C, m * c_sm + n * c_sn, acc, alpha, beta, act, slope);
}
#endif

#if defined(THREAD_M)
#define WG ((BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N))
#define TN_THREADS (BLOCK_N / THREAD_N)
/* Local rows are padded by 4 floats: transposed stores spread over banks and float4 reads
   stay 16-byte aligned. */
#define LDA (BLOCK_M + 4)
#define LDB (BLOCK_N + 4)
#define A_LOADS (BLOCK_M * BLOCK_K / WG / VEC_A)
#define B_LOADS (BLOCK_K * BLOCK_N / WG / VEC_B)
/* A thread's THREAD_M rows: chunks of up to 4 adjacent rows, spaced so that neighbouring
   threads read neighbouring float4s (conflict-free 128-bit local loads). */
#define AW (THREAD_M < 4 ? THREAD_M : 4)
#define BW (THREAD_N < 4 ? THREAD_N : 4)
#define A_CHUNK (BLOCK_M / (THREAD_M / AW))
#define B_CHUNK (BLOCK_N / (THREAD_N / BW))

/* Global -> registers: the A slice at k0. Vector loads only where the host proved the
   contiguous stride is 1 and offsets are aligned (VEC_A = 4); edges load element-wise. */
INLINE void load_a(__global const A_T *A, long a_sm, long a_sk, int m_left, int k_left, int tid,
                   float *ra)
{
    #pragma unroll
    for (int r = 0; r < A_LOADS; r++) {
        int2 mk = a_coord((r * WG + tid) * VEC_A);
#if VEC_A == 4
        int full = mk.x < m_left && mk.y + 3 < k_left;
#if A_KMAJOR
        long base = mk.x * a_sm + mk.y;
#else
        long base = mk.x + mk.y * a_sk;
#endif
        if (full) {
            float4 v = LOAD4_A(A, base);
            ra[4 * r] = v.x, ra[4 * r + 1] = v.y, ra[4 * r + 2] = v.z, ra[4 * r + 3] = v.w;
            continue;
        }
        #pragma unroll
        for (int j = 0; j < 4; j++) {
#if A_KMAJOR
            int ok = mk.x < m_left && mk.y + j < k_left;
#else
            int ok = mk.x + j < m_left && mk.y < k_left;
#endif
            ra[4 * r + j] = ok ? LOAD_A(A, base + j) : 0.0f;
        }
#else
        ra[r] = (mk.x < m_left && mk.y < k_left) ? LOAD_A(A, mk.x * a_sm + mk.y * a_sk) : 0.0f;
#endif
    }
}

INLINE void load_b(__global const B_T *B, long b_sk, long b_sn, int k_left, int n_left, int tid,
                   float *rb)
{
    #pragma unroll
    for (int r = 0; r < B_LOADS; r++) {
        int2 kn = b_coord((r * WG + tid) * VEC_B);
#if VEC_B == 4
#if B_NMAJOR
        int full = kn.x < k_left && kn.y + 3 < n_left;
        long base = kn.x * b_sk + kn.y;
#else
        int full = kn.x + 3 < k_left && kn.y < n_left;
        long base = kn.x + kn.y * b_sn;
#endif
        if (full) {
            float4 v = LOAD4_B(B, base);
            rb[4 * r] = v.x, rb[4 * r + 1] = v.y, rb[4 * r + 2] = v.z, rb[4 * r + 3] = v.w;
            continue;
        }
        #pragma unroll
        for (int j = 0; j < 4; j++) {
#if B_NMAJOR
            int ok = kn.x < k_left && kn.y + j < n_left;
#else
            int ok = kn.x + j < k_left && kn.y < n_left;
#endif
            rb[4 * r + j] = ok ? LOAD_B(B, base + j) : 0.0f;
        }
#else
        rb[r] = (kn.x < k_left && kn.y < n_left) ? LOAD_B(B, kn.x * b_sk + kn.y * b_sn) : 0.0f;
#endif
    }
}

/* Registers -> local: A stored k-major (As[k][m]) so the multiply reads rows of m. */
INLINE void store_a(__local float *As, const float *ra, int tid)
{
    #pragma unroll
    for (int r = 0; r < A_LOADS; r++) {
        int2 mk = a_coord((r * WG + tid) * VEC_A);
        #pragma unroll
        for (int j = 0; j < VEC_A; j++) {
#if A_KMAJOR
            As[(mk.y + j) * LDA + mk.x] = ra[VEC_A * r + j];
#else
            As[mk.y * LDA + mk.x + j] = ra[VEC_A * r + j];
#endif
        }
    }
}

INLINE void store_b(__local float *Bs, const float *rb, int tid)
{
    #pragma unroll
    for (int r = 0; r < B_LOADS; r++) {
        int2 kn = b_coord((r * WG + tid) * VEC_B);
        #pragma unroll
        for (int j = 0; j < VEC_B; j++) {
#if B_NMAJOR
            Bs[kn.x * LDB + kn.y + j] = rb[VEC_B * r + j];
#else
            Bs[(kn.x + j) * LDB + kn.y] = rb[VEC_B * r + j];
#endif
        }
    }
}

/* Rows of the C tile this thread owns: chunk c, lane j. */
inline int thread_row(int tm, int i) { return (i / AW) * A_CHUNK + tm * AW + i % AW; }
inline int thread_col(int tn, int j) { return (j / BW) * B_CHUNK + tn * BW + j % BW; }

/* acc += As[0:BLOCK_K, rows] x Bs[0:BLOCK_K, cols] for this thread's micro-tile. */
INLINE void multiply(__local const float *As, __local const float *Bs, int tm, int tn,
                     float acc[THREAD_M][THREAD_N])
{
    #pragma unroll
    for (int k = 0; k < BLOCK_K; k++) {
        float a[THREAD_M], b[THREAD_N];
        #pragma unroll
        for (int c = 0; c < THREAD_M / AW; c++) {
#if AW == 4
            float4 v = *(__local const float4 *)(As + k * LDA + c * A_CHUNK + tm * 4);
            a[4 * c] = v.x, a[4 * c + 1] = v.y, a[4 * c + 2] = v.z, a[4 * c + 3] = v.w;
#else
            #pragma unroll
            for (int j = 0; j < AW; j++) a[c * AW + j] = As[k * LDA + c * A_CHUNK + tm * AW + j];
#endif
        }
        #pragma unroll
        for (int c = 0; c < THREAD_N / BW; c++) {
#if BW == 4
            float4 v = *(__local const float4 *)(Bs + k * LDB + c * B_CHUNK + tn * 4);
            b[4 * c] = v.x, b[4 * c + 1] = v.y, b[4 * c + 2] = v.z, b[4 * c + 3] = v.w;
#else
            #pragma unroll
            for (int j = 0; j < BW; j++) b[c * BW + j] = Bs[k * LDB + c * B_CHUNK + tn * BW + j];
#endif
        }
        #pragma unroll
        for (int i = 0; i < THREAD_M; i++)
            #pragma unroll
            for (int j = 0; j < THREAD_N; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void matmul_blocked(OPERANDS)
{
    /* float4-typed so the float4 reads in multiply() are aligned. */
    __local float4 a_tiles[2 * BLOCK_K * LDA / 4], b_tiles[2 * BLOCK_K * LDB / 4];
    __local float *As = (__local float *)a_tiles, *Bs = (__local float *)b_tiles;
    long batch = get_group_id(1);
    int2 tile = tile_coords(get_group_id(0), M, N);
    int tid = get_local_id(0), tm = tid / TN_THREADS, tn = tid % TN_THREADS;
    A += a_off + batch * a_sb + (long)tile.x * BLOCK_M * a_sm;
    B += b_off + batch * b_sb + (long)tile.y * BLOCK_N * b_sn;
    int m_left = M - tile.x * BLOCK_M, n_left = N - tile.y * BLOCK_N;

    float acc[THREAD_M][THREAD_N];
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++)
        #pragma unroll
        for (int j = 0; j < THREAD_N; j++) acc[i][j] = 0.0f;
    float ra[A_LOADS * VEC_A], rb[B_LOADS * VEC_B];
    load_a(A, a_sm, a_sk, m_left, K, tid, ra);
    load_b(B, b_sk, b_sn, K, n_left, tid, rb);
    store_a(As, ra, tid);
    store_b(Bs, rb, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
    int cur = 0;
    for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
        int more = k0 + BLOCK_K < K;
        if (more) {
            load_a(A + (long)(k0 + BLOCK_K) * a_sk, a_sm, a_sk, m_left, K - k0 - BLOCK_K, tid, ra);
            load_b(B + (long)(k0 + BLOCK_K) * b_sk, b_sk, b_sn, K - k0 - BLOCK_K, n_left, tid, rb);
        }
        multiply(As + cur * BLOCK_K * LDA, Bs + cur * BLOCK_K * LDB, tm, tn, acc);
        if (more) {
            store_a(As + (cur ^ 1) * BLOCK_K * LDA, ra, tid);
            store_b(Bs + (cur ^ 1) * BLOCK_K * LDB, rb, tid);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }

    C += c_off + batch * c_sb;
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) {
        int m = tile.x * BLOCK_M + thread_row(tm, i);
        if (m >= M) continue;
        #pragma unroll
        for (int j = 0; j < THREAD_N; j++) {
            int n = tile.y * BLOCK_N + thread_col(tn, j);
            if (n < N) epilogue(C, m * c_sm + n * c_sn, acc[i][j], alpha, beta, act, slope);
        }
    }
}
#endif

#if defined(SK_COLS)
#define SK_WG (SK_COLS * SK_K)
#define SK_W (SK_COLS * 4)

/* 3-D range: (column blocks x SK_WG, row blocks, batch). */
__kernel __attribute__((reqd_work_group_size(SK_WG, 1, 1))) void matmul_skinny(OPERANDS)
{
    __local float partial[SK_K * SK_M * SK_W];
    long batch = get_global_id(2);
    int tid = get_local_id(0), tx = tid % SK_COLS, ty = tid / SK_COLS;
    int m0 = get_group_id(1) * SK_M, n0 = get_group_id(0) * SK_W + tx * 4;
    A += a_off + batch * a_sb + (long)m0 * a_sm;
    B += b_off + batch * b_sb;
    int m_left = M - m0;
    float acc[SK_M][4];
#pragma unroll
    for (int i = 0; i < SK_M; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    /* Lanes of one k row read adjacent float4s: each k row of the block is one coalesced
       SK_W-wide read. */
    for (int k = ty; k < K; k += SK_K) {
        float4 b;
#if VEC_B == 4
        if (n0 + 3 < N) {
            b = LOAD4_B(B, k * b_sk + n0);
        } else
#endif
        {
            b.x = n0 < N ? LOAD_B(B, k * b_sk + n0 * b_sn) : 0.0f;
            b.y = n0 + 1 < N ? LOAD_B(B, k * b_sk + (n0 + 1) * b_sn) : 0.0f;
            b.z = n0 + 2 < N ? LOAD_B(B, k * b_sk + (n0 + 2) * b_sn) : 0.0f;
            b.w = n0 + 3 < N ? LOAD_B(B, k * b_sk + (n0 + 3) * b_sn) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < SK_M; i++) {
            float a = i < m_left ? LOAD_A(A, i * a_sm + k * a_sk) : 0.0f;
            acc[i][0] = fma(a, b.x, acc[i][0]);
            acc[i][1] = fma(a, b.y, acc[i][1]);
            acc[i][2] = fma(a, b.z, acc[i][2]);
            acc[i][3] = fma(a, b.w, acc[i][3]);
        }
    }
#pragma unroll
    for (int i = 0; i < SK_M; i++)
        for (int j = 0; j < 4; j++) partial[(ty * SK_M + i) * SK_W + tx * 4 + j] = acc[i][j];
    barrier(CLK_LOCAL_MEM_FENCE);
    C += c_off + batch * c_sb;
    for (int o = tid; o < SK_M * SK_W; o += SK_WG) {
        int i = o / SK_W, col = o % SK_W, m = m0 + i, n = get_group_id(0) * SK_W + col;
        if (m >= M || n >= N) continue;
        float sum = 0.0f;
        for (int l = 0; l < SK_K; l++) sum += partial[(l * SK_M + i) * SK_W + col];
        epilogue(C, m * c_sm + n * c_sn, sum, alpha, beta, act, slope);
    }
}
#endif
