/* Matrix multiplication: C = act(alpha * A @ B + beta * C) for A (M, K), B (K, N), C (M, N),
   batched through the second grid dimension (batch stride 0 broadcasts an operand).

   Four kernels, three as the matmul tutorials progress and one for decode-time shapes:
   - matmul_naive: one output element per work-item, operands read straight from global memory;
     every element of A and B is fetched N and M times.
   - matmul_tiled: TILE x TILE tiles staged through local memory; each global element is
     fetched N/TILE and M/TILE times.
   - matmul_blocked: BLOCK_M x BLOCK_N tiles per work-group, THREAD_M x THREAD_N outputs per
     work-item held in registers (a register-blocked micro-kernel: THREAD_M + THREAD_N local
     loads feed THREAD_M * THREAD_N FMAs), double-buffered local memory (the next K slice is
     loaded into registers while the current one is multiplied: one barrier per slice),
     vector loads along the operand's contiguous dimension, and Triton's grouped program
     order (GROUP_M) so concurrently running work-groups share rows of A and columns of B in L2.
   - matmul_skinny: for M of a few rows (a GEMV in all but name), where a tile of BLOCK_M rows
     would idle most of its FMAs and too few work-groups would walk K one after another. B,
     the only large operand, is streamed once: each work-group owns SK_COLS * 4 columns, its
     SK_K lanes split K between them, every lane keeps all SK_M rows of its columns in
     registers, and one local-memory reduction sums the lanes.

   Operand dtypes: -D A_DTYPE=F32|F16|BF16 (likewise B_DTYPE, C_DTYPE); values enter the
   multiply as f32 and accumulate in f32. Edges are masked: any M, N, K >= 1. */
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

#if defined(BLOCK_M)
/* Private arrays passed by pointer must stay in registers: force the helpers inline. */
#define INLINE inline __attribute__((always_inline))

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

/* Element e of the tile in load order -> (row, col) of the (BLOCK_M x BLOCK_K) A tile.
   A_KMAJOR: k is A's contiguous dimension, so consecutive loads walk k. */
inline int2 a_coord(int e)
{
#if A_KMAJOR
    return (int2)(e / BLOCK_K, e % BLOCK_K);
#else
    return (int2)(e % BLOCK_M, e / BLOCK_M);
#endif
}

/* (k, n) of the (BLOCK_K x BLOCK_N) B tile; B_NMAJOR: n is B's contiguous dimension. */
inline int2 b_coord(int e)
{
#if B_NMAJOR
    return (int2)(e / BLOCK_N, e % BLOCK_N);
#else
    return (int2)(e % BLOCK_K, e / BLOCK_K);
#endif
}

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

#if defined(WARPS_M)
/* matmul_mma: NVIDIA tensor cores (sm_80+), f16 or bf16 operands, or f32 operands rounded to
   TF32 when the caller allows it (MMA_TF32), else as 3xTF32 (TF32X3), f32 accumulators.
   WARPS_M x WARPS_N warps share a BLOCK_M x BLOCK_N tile; each warp owns a
   (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N) piece as 16 x 8 mma tiles held in registers.
   K is walked in BLOCK_K slices through a ring of STAGES local buffers filled by cp.async:
   while the warps multiply slice k, the copies of slices k + 1 .. k + STAGES - 1 are in
   flight, so the load latency hides behind the tensor cores with no staging registers, and
   one barrier per slice both publishes a slice and frees the buffer the next copy refills.
   Operands stay in their own layout: the host proves that one dimension is contiguous and
   every 16-byte chunk aligned (A_KMAJOR: k contiguous; B_NMAJOR: n contiguous), and
   ldmatrix.trans turns the other layouts into fragments (TF32 words are 32-bit, which
   ldmatrix cannot transpose: those fragments are read word by word). Edges are zero-filled
   by the copies, so the multiply needs no masks; only the epilogue tests bounds. */
#include "nv_mma.h"

#define MMA_WG (WARPS_M * WARPS_N * 32)
#define WARP_M (BLOCK_M / WARPS_M)
#define WARP_N (BLOCK_N / WARPS_N)
#define FRAG_M (WARP_M / 16)
#define FRAG_N (WARP_N / 8)
/* m16n8k8 TF32 takes the register shapes of m16n8k16 f16 with one 32-bit value a register,
   so everything below is written once in ELEM_BYTES and MMA_K. */
#if defined(MMA_TF32)
#define ELEM_T uint
#define ELEM_BYTES 4
#define MMA_K 8
#define MMA nv_mma_tf32
#elif defined(MMA_BF16)
#define ELEM_T ushort
#define ELEM_BYTES 2
#define MMA_K 16
#define MMA nv_mma_bf16
#else
#define ELEM_T ushort
#define ELEM_BYTES 2
#define MMA_K 16
#define MMA nv_mma_f16
#endif
#define CHUNK (16 / ELEM_BYTES) /* elements a 16-byte chunk */
/* Local tiles are [outer][inner], inner the operand's contiguous dimension, in 16-byte
   chunks. */
#if A_KMAJOR
#define A_ROWS BLOCK_M
#define A_CHUNKS (BLOCK_K / CHUNK)
#else
#define A_ROWS BLOCK_K
#define A_CHUNKS (BLOCK_M / CHUNK)
#endif
#if B_NMAJOR
#define B_ROWS BLOCK_K
#define B_CHUNKS (BLOCK_N / CHUNK)
#else
#define B_ROWS BLOCK_N
#define B_CHUNKS (BLOCK_K / CHUNK)
#endif
#define A_STAGE_BYTES (BLOCK_M * BLOCK_K * ELEM_BYTES)
#define B_STAGE_BYTES (BLOCK_N * BLOCK_K * ELEM_BYTES)

#if defined(WGMMA)
/* wgmma reads its operands with the 128-byte swizzle: a K-major tile (BLOCK_K 64, a 128-byte
   row per m or n) is what nv_swizzle gives rows of 8 chunks; an M- or N-major one is cut into
   panels of 64 columns, each `rows` (BLOCK_K) rows of 128 bytes. */
INLINE int tile_offset(int row, int chunk, int rows, int chunks)
{
    return (chunk / 8) * rows * 128 + nv_swizzle(row, chunk % 8, 8);
}
#else
INLINE int tile_offset(int row, int chunk, int rows, int chunks) { return nv_swizzle(row, chunk, chunks); }
#endif

/* One chunk copy: the chunk starts `offset` elements past `base`, `in_row` elements of its
   row remain from there, and the row exists when row_ok; the rest is zero-filled (and an
   absent chunk points at base, which is never read). */
INLINE void copy_chunk(__local uchar *tile, int row, int chunk, int rows, int chunks,
                       __global const ELEM_T *base, long offset, int row_ok, int in_row)
{
    int n = row_ok ? clamp(in_row, 0, CHUNK) : 0;
    nv_cp_async16(tile + tile_offset(row, chunk, rows, chunks), base + (n ? offset : 0),
                  (uint)(n * ELEM_BYTES));
}

/* An operand's slice -> one stage: `rows` rows of `chunks` chunks, row r at
   base + r * row_stride; rows_left rows and inner_left elements of each row remain of the
   operand from the slice's origin. */
INLINE void copy_tile(__local uchar *tile, __global const ELEM_T *base, long row_stride, int rows,
                      int chunks, int rows_left, int inner_left, int tid)
{
    #pragma unroll
    for (int i = 0; i < rows * chunks / MMA_WG; i++) {
        int e = i * MMA_WG + tid, row = e / chunks, chunk = e % chunks;
        copy_chunk(tile, row, chunk, rows, chunks, base, row * row_stride + chunk * CHUNK,
                   row < rows_left, inner_left - chunk * CHUNK);
    }
}

#if defined(MMA_TF32)
/* An f32 operand as the mma takes it: rounded to the nearest TF32, or whole for the split of
   3xTF32 (mma_step). */
#if defined(TF32X3)
#define TF32_IN(x) (x)
#else
#define TF32_IN(x) nv_tf32(x)
#endif

/* The 32-bit word at (row, col) of a tile of `chunks` chunks a row, as an mma operand. */
INLINE uint tile_word(__local const uchar *tile, int row, int col, int chunks)
{
    return TF32_IN(*(__local const uint *)(tile + nv_swizzle(row, col / 4, chunks) + (col % 4) * 4));
}

INLINE void round_tf32(uint *r, int n)
{
    #pragma unroll
    for (int i = 0; i < n; i++) r[i] = TF32_IN(r[i]);
}
#endif

/* The warp's A fragments of rows wm .. wm + WARP_M at k offset kk: four 8 x 8 (b16) matrices
   per tile, (rows 0-7, k lo), (rows 8-15, k lo), (rows 0-7, k hi), (rows 8-15, k hi), the k
   halves one chunk each. */
INLINE void load_a_frags(__local const uchar *tile, int wm, int kk, int lane, uint af[FRAG_M][4])
{
    int q = lane / 8, r = lane % 8;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++) {
        int m = wm + i * 16;
#if A_KMAJOR
        nv_ldmatrix_x4(af[i], tile + nv_swizzle(m + (q % 2) * 8 + r, kk / CHUNK + q / 2, A_CHUNKS));
#if defined(MMA_TF32)
        round_tf32(af[i], 4);
#endif
#elif defined(MMA_TF32)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            af[i][e] = tile_word(tile, kk + lane % 4 + (e / 2) * 4, m + lane / 4 + (e % 2) * 8, A_CHUNKS);
#else
        nv_ldmatrix_x4_trans(af[i], tile + nv_swizzle(kk + (q / 2) * 8 + r, m / 8 + q % 2, A_CHUNKS));
#endif
    }
}

/* B fragments of columns wn .. wn + WARP_N, two 16 x 8 tiles per ldmatrix: matrices
   (n 0-7, k lo), (n 0-7, k hi), (n 8-15, k lo), (n 8-15, k hi). */
INLINE void load_b_frags(__local const uchar *tile, int wn, int kk, int lane, uint bf[FRAG_N][2])
{
    int q = lane / 8, r = lane % 8;
    #pragma unroll
    for (int j = 0; j < FRAG_N; j += 2) {
        int n = wn + j * 8;
#if B_NMAJOR && defined(MMA_TF32)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            bf[j + e / 2][e % 2] = tile_word(tile, kk + lane % 4 + (e % 2) * 4, n + (e / 2) * 8 + lane / 4, B_CHUNKS);
#else
        uint f[4];
#if B_NMAJOR
        nv_ldmatrix_x4_trans(f, tile + nv_swizzle(kk + (q % 2) * 8 + r, n / 8 + q / 2, B_CHUNKS));
#else
        nv_ldmatrix_x4(f, tile + nv_swizzle(n + (q / 2) * 8 + r, kk / CHUNK + q % 2, B_CHUNKS));
#if defined(MMA_TF32)
        round_tf32(f, 4);
#endif
#endif
        bf[j][0] = f[0], bf[j][1] = f[1], bf[j + 1][0] = f[2], bf[j + 1][1] = f[3];
#endif
    }
}

#if defined(TF32X3)
/* f32 without TF32's rounding error: three TF32 products of split operands (nv_tf32_split)
   summed into a fresh tile, which an f32 add then takes into the accumulator. The mma
   truncates the sum it adds into, a bias that grows with every step when that sum is the
   accumulator itself (H100, 4096^3: 2.9e-5 relative error against exact f32's 1.1e-6);
   here it truncates only the step's own eight products, and the accumulator rounds to
   nearest as an FMA loop's does. A row of tiles at a time, the three products of a tile
   apart, so that no mma waits on the one before. */
INLINE void mma_step(const uint af[FRAG_M][4], const uint bf[FRAG_N][2], float acc[FRAG_M][FRAG_N][4])
{
    uint ab[FRAG_M][4], as[FRAG_M][4], bb[FRAG_N][2], bs[FRAG_N][2];
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++) nv_tf32_split(ab[i], as[i], af[i], 4);
    #pragma unroll
    for (int j = 0; j < FRAG_N; j++) nv_tf32_split(bb[j], bs[j], bf[j], 2);
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++) {
        float t[FRAG_N][4];
        #pragma unroll
        for (int j = 0; j < FRAG_N; j++) {
            t[j][0] = t[j][1] = t[j][2] = t[j][3] = 0.0f;
            nv_mma_tf32(t[j], as[i], bb[j]);
        }
        #pragma unroll
        for (int j = 0; j < FRAG_N; j++) nv_mma_tf32(t[j], ab[i], bs[j]);
        #pragma unroll
        for (int j = 0; j < FRAG_N; j++) nv_mma_tf32(t[j], ab[i], bb[j]);
        #pragma unroll
        for (int j = 0; j < FRAG_N; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] += t[j][e];
    }
}
#else
INLINE void mma_step(const uint af[FRAG_M][4], const uint bf[FRAG_N][2], float acc[FRAG_M][FRAG_N][4])
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int j = 0; j < FRAG_N; j++) MMA(acc[i][j], af[i], bf[j]);
}
#endif

#if defined(EPI_CE_STATS) || defined(EPI_CE_GRAD)
/* Cross-entropy epilogues for linear + cross-entropy (cl/cross_entropy.cl has the maths):
   the logits z = x W^T of the tile never reach global memory. Column n of the product is
   vocabulary entry v0 + n; tgt holds each row's target (-1: ignored); bias (CE_BIAS) is in
   the operands' storage dtype; z is soft-capped (CE_CAP) as cap tanh(z / cap).
   - EPI_CE_STATS: per row, the tile's max m, sum of exp(z - m) and (label smoothing, when sz
     is not NULL) sum of z go to ms[row * slots + column tile] and sz[...]; the one tile that
     holds the target writes its logit to zt[row]. lce_merge folds the tiles into losses and
     lse. Instead of T x V f32 logits written and read back (8 bytes a logit), T x V /
     BLOCK_N slots of 8 bytes. C is written only with CE_STORE: the logits (bias added,
     capped) in C's 16-bit dtype for lce_zgrad, so that the backward of a token chunk does
     not recompute them; the loss still comes from the f32 accumulators.
   - EPI_CE_GRAD: C = dloss/dz from each row's lse (state[row].x), in C's 16-bit dtype, ready
     for the weight and input GEMMs. It is that of the summed loss: the mean's p / T would
     sink below f16's normal range as T grows, so the host applies 1 / count in f32.
   Where C is written, its rows are the host's scratch: unit columns, a multiple of 8 elements
   a row, from offset 0 (ce_store_row writes column pairs as one 4-byte store). */
#define EPI_CE_DECL                                                                         \
    __global const C_T *bias, long bias_off, long bias_stride, __global const int *tgt,     \
        long v0, float cap, __global float2 *ms, __global float *sz, __global float *zt,    \
        long slots, __global const float4 *state, float smoothing, float z_scale, long v
#define EPI_CE_ARGS                                                                         \
    bias, bias_off, bias_stride, tgt, v0, cap, ms, sz, zt, slots, state, smoothing, z_scale, v
#define EPI_PARAMS , EPI_CE_DECL
#define EPI_ARGS , EPI_CE_ARGS
#if defined(EPI_CE_STATS) && WARPS_N * 16 > STAGES * BLOCK_K * ELEM_BYTES
#error "EPI_CE_STATS reduces in the A ring, which is too small for this tile"
#endif

/* The logit at column n (< N) from its accumulator: bias added, soft-capped (the host sets
   CE_BIAS and CE_CAP only when asked, so the common case carries neither). */
INLINE float ce_logit(float acc, int n, __global const C_T *bias, long bias_off, long bias_stride,
                      long v0, float cap)
{
#if defined(CE_BIAS)
    acc += LOAD_C(bias, bias_off + (v0 + n) * bias_stride);
#endif
#if defined(CE_CAP)
    acc = cap * tanh(acc / cap);
#endif
    return acc;
}

/* exp(x - m) through the special-function unit; 0 where m is -inf (nothing seen yet). */
INLINE float ce_exp(float x, float m) { return m == -INFINITY ? 0.0f : nv_exp2((x - m) * M_LOG2E_F); }

/* (m, s, sz) of b folded into a, the online-softmax merge. */
INLINE float3 ce_merge(float3 a, float3 b)
{
    float m = fmax(a.x, b.x);
    return (float3)(m, a.y * ce_exp(a.x, m) + b.y * ce_exp(b.x, m), a.z + b.z);
}

INLINE float3 ce_shfl_merge(float3 a, int mask)
{
    return ce_merge(a, (float3)(nv_shfl_xor(a.x, mask), nv_shfl_xor(a.y, mask), nv_shfl_xor(a.z, mask)));
}

/* A lane's values of one row, column pairs (n0 + 8 j, + 1) packed in one 4-byte store: C is
   the host's logits or gradient scratch, unit columns and rows of a multiple of 8 elements
   from offset 0. Single 2-byte stores took 10 % longer on an H200 (T 2304, D 384, V 32768). */
#if defined(MMA_BF16)
#define CE_PACK nv_pack_bf16x2
#else
#define CE_PACK nv_pack_f16x2
#endif
INLINE void ce_store_row(__global C_T *crow, int n0, int N, const float *z)
{
    #pragma unroll
    for (int j = 0; j < FRAG_N; j++) {
        int n = n0 + j * 8;
        if (n + 1 < N) *(__global uint *)(crow + n) = CE_PACK(z[j * 2], z[j * 2 + 1]);
        else if (n < N) STORE_C(crow, n, z[j * 2]);
    }
}

#if defined(EPI_CE_STATS)
#define CE_RED_BYTES (WARPS_N * BLOCK_M * 16)
#else
#define CE_RED_BYTES 0
#endif
#define CE_ROW_WORDS (BLOCK_N / 2)
/* TMA_FLOW: the TMA loads of a persistent work-group's next tile start while its epilogue
   runs. Ring slots hold whole slices, so the epilogue gets the two slots no copy is filling
   then (the A part of one for ce_stats' reduction, the B parts of both for half a staged
   tile each), which needs BLOCK_M <= 2 BLOCK_K. */
#if defined(TMA) && CE_RED_BYTES <= A_STAGE_BYTES && BLOCK_M / 2 * CE_ROW_WORDS * 4 <= B_STAGE_BYTES
#define TMA_FLOW 1
#endif
#if defined(CE_STORE) || defined(EPI_CE_GRAD)
/* CE_STORE's logits and CE_GRAD's gradient are staged in the free ring (TMA_FLOW's slots, else
   after ce_stats' reduction space) when they fit, then written as whole 16-byte pieces of
   rows: the lanes' 4-byte pairs went out as partial sectors of eight rows each. A row's
   pieces are XOR-swizzled by the row, so that the eight rows a warp writes at once fall in
   different banks. */
#if defined(TMA_FLOW) || CE_RED_BYTES + BLOCK_M * CE_ROW_WORDS * 4 <= STAGES * (A_STAGE_BYTES + B_STAGE_BYTES)
#define CE_STAGED 1
#endif
#endif

#if defined(CE_STAGED)
/* Row r of the stage: the first BLOCK_M / 2 rows from zs0, the rest from zs1. */
INLINE __local uint *ce_row(__local uint *zs0, __local uint *zs1, int r)
{
    return r < BLOCK_M / 2 ? zs0 + r * CE_ROW_WORDS : zs1 + (r - BLOCK_M / 2) * CE_ROW_WORDS;
}

/* Word w of row r: its 16-byte piece swizzled. */
INLINE int ce_word(int r, int w) { return ((w / 4) ^ (r % 8)) * 4 + w % 4; }

/* A lane's values of one row of the tile (row r, columns c0 + 8 j, + 1) into the stage. */
INLINE void ce_stage_row(__local uint *zs0, __local uint *zs1, int r, int c0, const float *z)
{
    __local uint *row = ce_row(zs0, zs1, r);
    #pragma unroll
    for (int j = 0; j < FRAG_N; j++) row[ce_word(r, (c0 + j * 8) / 2)] = CE_PACK(z[j * 2], z[j * 2 + 1]);
}

/* The staged tile into C's rows: 16 bytes a work-item at a time, element by element only
   where a piece crosses N. */
INLINE void ce_store_tile(__local uint *zs0, __local uint *zs1, __global C_T *C, long c_sm, int2 tile,
                          int M, int N, int tid)
{
    __global ushort *c16 = (__global ushort *)C;
    for (int i = tid; i < BLOCK_M * (BLOCK_N / 8); i += MMA_WG) {
        int r = i / (BLOCK_N / 8), q = i % (BLOCK_N / 8);
        int m = tile.x * BLOCK_M + r, n = tile.y * BLOCK_N + q * 8;
        if (m >= M || n >= N) continue;
        __local const uint *src = ce_row(zs0, zs1, r) + ce_word(r, q * 4);
        __global ushort *dst = c16 + (long)m * c_sm + n;
        if (n + 8 <= N) {
            *(__global uint4 *)dst = *(__local const uint4 *)src;
        } else {
            for (int k = 0; k < N - n; k++) dst[k] = (ushort)(src[k / 2] >> (16 * (k % 2)));
        }
    }
}
#endif

/* Where the target y (vocabulary entry) sits among a lane's values j * 2 + e (column n0 + 8 j
   + e of the tile's N): found once a row, so that each value costs one integer compare, not a
   64-bit one and a branch; -1 when another lane, tile or chunk holds it or the row is
   ignored. */
INLINE int ce_target_slot(int y, long v0, int n0, int N)
{
    long c = (long)y - v0 - n0;
    bool mine = y >= 0 && c >= 0 && c < FRAG_N * 8 && c < N - n0 && c % 8 < 2;
    return mine ? (int)(c / 8 * 2 + c % 8) : -1;
}

/* The tile's (m, s, sz) per row: a lane's own columns, then the four lanes of a row by
   shuffles, then the WARPS_N warps of a row through local memory, in a fixed order. */
INLINE void ce_stats(float acc[FRAG_M][FRAG_N][4], int2 tile, int wm, int wn, int lane, int tid,
                     int M, int N, __local float4 *red, __local uint *zs0, __local uint *zs1,
                     __global C_T *C, long c_sm, EPI_CE_DECL)
{
    int m0 = tile.x * BLOCK_M + wm + lane / 4, n0 = tile.y * BLOCK_N + wn + (lane % 4) * 2;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int m = m0 + i * 16 + h * 8, yk = ce_target_slot(m < M ? tgt[m] : -1, v0, n0, N);
            float z[FRAG_N * 2], mx = -INFINITY, tot = 0.0f, zy = 0.0f;
            #pragma unroll
            for (int j = 0; j < FRAG_N; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    int n = n0 + j * 8 + e, k = j * 2 + e;
                    float zz = n < N ? ce_logit(acc[i][j][h * 2 + e], n, bias, bias_off, bias_stride, v0, cap) : -INFINITY;
                    zy = k == yk ? zz : zy;
                    z[k] = zz, mx = fmax(mx, zz), tot += n < N ? zz : 0.0f;
                }
            if (yk >= 0) zt[m] = zy;
#if defined(CE_STAGED)
            ce_stage_row(zs0, zs1, m - tile.x * BLOCK_M, n0 - tile.y * BLOCK_N, z);
#elif defined(CE_STORE)
            if (m < M) ce_store_row(C + (long)m * c_sm, n0, N, z);
#endif
            /* exp(z - mx) as exp2(z log2e - mx log2e): one fma a value; z = -inf gives 0, and
               so does every value of a row that saw only -inf (mx log2e taken as 0). */
            float se = 0.0f, ml = mx == -INFINITY ? 0.0f : mx * M_LOG2E_F;
            #pragma unroll
            for (int k = 0; k < FRAG_N * 2; k++) se += nv_exp2(fma(z[k], M_LOG2E_F, -ml));
            float3 st = ce_shfl_merge(ce_shfl_merge((float3)(mx, se, tot), 1), 2);
            if (lane % 4 == 0) red[(wn / WARP_N) * BLOCK_M + m - tile.x * BLOCK_M] = (float4)(st, 0.0f);
        }
    barrier(CLK_LOCAL_MEM_FENCE);
#if defined(CE_STAGED)
    ce_store_tile(zs0, zs1, C, c_sm, tile, M, N, tid);
#endif
    long slot = (v0 + tile.y * BLOCK_N) / BLOCK_N;
    for (int r = tid; r < BLOCK_M; r += MMA_WG) {
        int m = tile.x * BLOCK_M + r;
        if (m >= M) break;
        float3 st = red[r].xyz;
        for (int w = 1; w < WARPS_N; w++) st = ce_merge(st, red[w * BLOCK_M + r].xyz);
        ms[m * slots + slot] = st.xy;
        if (sz) sz[m * slots + slot] = st.z;
    }
}

/* dloss/dz of one accumulator row of the warp (h: its upper or lower 8 rows) into C's row m,
   or into row r of the stage at column c0 of the tile. */
INLINE void ce_grad_row(float acc[FRAG_N][4], int h, __global C_T *C, long c_sm, __local uint *zs0,
                        __local uint *zs1, int r, int m, int n0, int c0, int N, EPI_CE_DECL)
{
    int y = tgt[m], yk = ce_target_slot(y, v0, n0, N);
    float lse = state[m].x, g[FRAG_N * 2];
    float p = 1.0f + 2.0f * z_scale * lse, base = smoothing / (float)v;
    float hit = 1.0f - smoothing, ll = lse * M_LOG2E_F;
    #pragma unroll
    for (int j = 0; j < FRAG_N; j++)
        #pragma unroll
        for (int e = 0; e < 2; e++) {
            int n = n0 + j * 8 + e, k = j * 2 + e;
            g[k] = 0.0f;
            if (y >= 0 && n < N) { /* an ignored row's lse was never written */
                float z = ce_logit(acc[j][h * 2 + e], n, bias, bias_off, bias_stride, v0, cap);
                g[k] = p * nv_exp2(fma(z, M_LOG2E_F, -ll)) - base - (k == yk ? hit : 0.0f);
#if defined(CE_CAP)
                g[k] *= 1.0f - (z / cap) * (z / cap);
#endif
            }
        }
#if defined(CE_STAGED)
    ce_stage_row(zs0, zs1, r, c0, g);
#else
    ce_store_row(C + (long)m * c_sm, n0, N, g);
#endif
}
#else
#define EPI_PARAMS
#define EPI_ARGS
#endif

#if !defined(EPI_CE_STATS) && !defined(EPI_CE_GRAD)
/* The plain epilogue goes through the free ring when the tile fits it as f32 rows (padded by
   8 words, so that the four rows of a half-warp's 8-byte stores fall in distinct banks): then
   each work-item finishes 16 bytes of a row of C at a time, with vector loads and stores
   where C's rows are unit-stride and 16-byte aligned, element by element at N's edge or
   otherwise. Written straight from the fragments, each warp instruction touched parts of
   eight rows. */
#define C_ROW (BLOCK_N + 8)
#if BLOCK_M * C_ROW * 4 <= STAGES * (A_STAGE_BYTES + B_STAGE_BYTES)
#define C_STAGED 1
#endif
#endif

#if defined(C_STAGED)
#define C_VEC (16 / (int)sizeof(C_T))
#define PACK2_F32(a, b) 0u /* f32 C never packs: sizeof(C_T) == 4 takes the float4 store */
#define PACK2_F16(a, b) nv_pack_f16x2(a, b)
#define PACK2_BF16(a, b) nv_pack_bf16x2(a, b)
#define PACK2_C(a, b) CLKIT_CAT(PACK2_, C_DTYPE)(a, b)

INLINE void stage_acc(__local float *st, float acc[FRAG_M][FRAG_N][4], int r0, int c0)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++)
            #pragma unroll
            for (int j = 0; j < FRAG_N; j++)
                *(__local float2 *)(st + (r0 + i * 16 + h * 8) * C_ROW + c0 + j * 8) =
                    (float2)(acc[i][j][h * 2], acc[i][j][h * 2 + 1]);
}

/* C_VEC elements of a row of C (16 bytes, aligned) from their staged accumulators: what
   epilogue() does to each, with one load and one store. */
INLINE void finish_piece(__global C_T *c, __local const float *s, float alpha, float beta, int act,
                         float slope)
{
    float v[C_VEC];
    #pragma unroll
    for (int k = 0; k < C_VEC; k++) v[k] = alpha * s[k];
    if (beta != 0.0f) {
        if (sizeof(C_T) == 4) {
            float4 o = *(__global const float4 *)c;
            v[0] = fma(beta, o.x, v[0]), v[1] = fma(beta, o.y, v[1]);
            v[2] = fma(beta, o.z, v[2]), v[3] = fma(beta, o.w, v[3]);
        } else {
            #pragma unroll
            for (int k = 0; k < C_VEC; k++) v[k] = fma(beta, LOAD_C(c, k), v[k]);
        }
    }
    #pragma unroll
    for (int k = 0; k < C_VEC; k++) {
        if (act == ACT_RELU) v[k] = fmax(v[k], 0.0f);
        else if (act == ACT_LEAKY_RELU) v[k] = v[k] >= 0.0f ? v[k] : v[k] * slope;
    }
    if (sizeof(C_T) == 4)
        *(__global float4 *)c = (float4)(v[0], v[1], v[2], v[3]);
    else
        *(__global uint4 *)c = (uint4)(PACK2_C(v[0], v[1]), PACK2_C(v[2 % C_VEC], v[3 % C_VEC]),
                                       PACK2_C(v[4 % C_VEC], v[5 % C_VEC]), PACK2_C(v[6 % C_VEC], v[7 % C_VEC]));
}

INLINE void store_staged(__local const float *st, __global C_T *C, long c_sm, long c_sn, int2 tile,
                         int M, int N, int tid, float alpha, float beta, int act, float slope)
{
    bool vec = c_sn == 1 && c_sm % C_VEC == 0 && (size_t)C % 16 == 0;
    for (int i = tid; i < BLOCK_M * (BLOCK_N / C_VEC); i += MMA_WG) {
        int r = i / (BLOCK_N / C_VEC), q = i % (BLOCK_N / C_VEC);
        int m = tile.x * BLOCK_M + r, n = tile.y * BLOCK_N + q * C_VEC;
        if (m >= M || n >= N) continue;
        __local const float *s = st + r * C_ROW + q * C_VEC;
        if (vec && n + C_VEC <= N) {
            finish_piece(C + (long)m * c_sm + n, s, alpha, beta, act, slope);
        } else {
            for (int k = 0; k < C_VEC && n + k < N; k++)
                epilogue(C, (long)m * c_sm + (long)(n + k) * c_sn, s[k], alpha, beta, act, slope);
        }
    }
}
#endif

#if defined(WGMMA)
/* One BLOCK_K slice on the warpgroup's 64 rows: BLOCK_K / 16 wgmma of 64 x BLOCK_N x 16, each
   operand's descriptor stepping 16 k along its tile (32 bytes along a K-major row, 16 rows of
   an M- or N-major panel); committed as one group. */
#if defined(MMA_BF16)
#define WG_TYPE ".bf16.bf16"
#else
#define WG_TYPE ".f16.f16"
#endif
#if A_KMAJOR
#define WG_TA "0"
#define A_WG_BASE(g) ((g) * 64 * 128)
#define A_K_STEP 32
#define A_LEAD 16
#else
#define WG_TA "1"
#define A_WG_BASE(g) ((g) * BLOCK_K * 128)
#define A_K_STEP (16 * 128)
#define A_LEAD (BLOCK_K * 128)
#endif
#if B_NMAJOR
#define WG_TB "1"
#define B_K_STEP (16 * 128)
#define B_LEAD (BLOCK_K * 128)
#else
#define WG_TB "0"
#define B_K_STEP 32
#define B_LEAD 16
#endif
INLINE void wg_slice(__local const uchar *as, __local const uchar *bs, int g, float *acc)
{
    nv_wgmma_fence();
    #pragma unroll
    for (int s = 0; s < BLOCK_K / 16; s++) {
        ulong da = nv_wgmma_desc(as + A_WG_BASE(g) + s * A_K_STEP, A_LEAD, 1024);
        ulong db = nv_wgmma_desc(bs + s * B_K_STEP, B_LEAD, 1024);
        CLKIT_CAT(NV_WGMMA_, BLOCK_N)(acc, WG_TYPE, WG_TA, WG_TB, da, db);
    }
    nv_wgmma_commit();
}
#endif

INLINE void copy_slice(__local uchar *as, __local uchar *bs, __global const ELEM_T *a,
                       __global const ELEM_T *b, long a_sm, long a_sk, long b_sk, long b_sn,
                       int slice, int m_left, int n_left, int K, int tid)
{
    int k0 = slice * BLOCK_K, slot = slice % STAGES;
    as += slot * A_STAGE_BYTES, bs += slot * B_STAGE_BYTES, a += k0 * a_sk, b += k0 * b_sk;
#if A_KMAJOR
    copy_tile(as, a, a_sm, A_ROWS, A_CHUNKS, m_left, K - k0, tid);
#else
    copy_tile(as, a, a_sk, A_ROWS, A_CHUNKS, K - k0, m_left, tid);
#endif
#if B_NMAJOR
    copy_tile(bs, b, b_sk, B_ROWS, B_CHUNKS, K - k0, n_left, tid);
#else
    copy_tile(bs, b, b_sn, B_ROWS, B_CHUNKS, n_left, K - k0, tid);
#endif
}

#if defined(WGMMA)
/* The k loop on wgmma. A slot is refilled only when the wgmma that read it are known complete:
   each warpgroup waits for all but its last group before the next slice's barrier, so after
   the barrier of slice kt the slot of slice kt - 2 is free, and STAGES - 2 slices are in
   flight ahead of the one multiplied. */
INLINE void wg_loop(__local uchar *as, __local uchar *bs, __global const ELEM_T *a,
                    __global const ELEM_T *b, long a_sm, long a_sk, long b_sk, long b_sn, int slices,
                    int m_left, int n_left, int K, int tid, int g, float *acc)
{
    #pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < slices) copy_slice(as, bs, a, b, a_sm, a_sk, b_sk, b_sn, s, m_left, n_left, K, tid);
        nv_cp_async_commit();
    }
    for (int kt = 0; kt < slices; kt++) {
        NV_CP_ASYNC_WAIT(STAGES - 3);
        nv_fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kt + STAGES - 2 < slices)
            copy_slice(as, bs, a, b, a_sm, a_sk, b_sk, b_sn, kt + STAGES - 2, m_left, n_left, K, tid);
        nv_cp_async_commit();
        int cur = kt % STAGES;
        wg_slice(as + cur * A_STAGE_BYTES, bs + cur * B_STAGE_BYTES, g, acc);
        NV_WGMMA_WAIT(1);
    }
    NV_WGMMA_WAIT(0);
    #pragma unroll
    for (int i = 0; i < BLOCK_N / 2; i++) nv_pin(acc + i);
}
#endif

#if defined(TMA)
/* The k loop fed by the TMA (-D TMA, set by the host for wgmma tiles where the TMA can read
   both operands): one thread issues each slice as a few boxes in the layout copy_slice
   writes, and every warp waits on the slot's mbarrier instead of on its own copies; the
   refill rule is wg_loop's. `maps`: the context's 256 bytes for the call's two tensor maps. */
#define TMA_PARAMS , __global ulong16 *maps

/* One operand's slice: a K-major tile is one box of its rows, an M- or N-major one a box per
   64-column panel. */
INLINE void tma_operand(__local uchar *dst, __global const ulong16 *map, int kmajor, int row0,
                        int k0, int panels, int z, __local ulong *bar)
{
    if (kmajor) {
        nv_tma_load(dst, map, k0, row0, z, bar);
        return;
    }
    for (int p = 0; p < panels; p++) nv_tma_load(dst + p * BLOCK_K * 128, map, row0 + p * 64, k0, z, bar);
}

/* Both operands' slice kt into slot n % STAGES (n: slices this work-group issued before);
   the slot's mbarrier completes when every byte, the zeros past the edges included, has
   landed. */
INLINE void tma_slice(__local uchar *as, __local uchar *bs, __global const ulong16 *maps,
                      __local ulong *bars, uint n, int kt, int m0, int n0, int za, int zb)
{
    int slot = n % STAGES, k0 = kt * BLOCK_K;
    nv_mbar_expect(bars + slot, A_STAGE_BYTES + B_STAGE_BYTES);
    tma_operand(as + slot * A_STAGE_BYTES, maps, A_KMAJOR, m0, k0, BLOCK_M / 64, za, bars + slot);
    tma_operand(bs + slot * B_STAGE_BYTES, maps + 1, !B_NMAJOR, n0, k0, BLOCK_N / 64, zb, bars + slot);
}

/* A persistent work-group's walk: its tiles one grid apart from tile `first`, `slices` slices
   each. The cursor (thread 0's alone) is where its next copy goes: slice kt of tile t, whose
   corner is (m0, n0), and slice n of the walk, which picks the slot. */
typedef struct tma_walk {
    int first, tiles, slices, za, zb, M, N;
} tma_walk;

typedef struct tma_cursor {
    uint n;
    int t, kt, m0, n0;
} tma_cursor;

INLINE void tma_seek(tma_cursor *c, const tma_walk *w, int t)
{
    c->t = t, c->kt = 0;
    if (t >= w->tiles) return;
    int2 tile = tile_coords(t, w->M, w->N);
    c->m0 = tile.x * BLOCK_M, c->n0 = tile.y * BLOCK_N;
}

/* The cursor's slice into its slot, then the cursor on; nothing past the last tile. */
INLINE void tma_next(__local uchar *as, __local uchar *bs, __global const ulong16 *maps,
                     __local ulong *bars, const tma_walk *w, tma_cursor *c)
{
    if (c->t >= w->tiles) return;
    tma_slice(as, bs, maps, bars, c->n, c->kt, c->m0, c->n0, w->za, w->zb);
    c->n++;
    if (++c->kt == w->slices) tma_seek(c, w, c->t + (int)get_num_groups(0));
}

/* The k loop of the tile whose first slice is slice `done` of the walk. Without TMA_FLOW it
   issues its own first STAGES - 2 slices and refills only within the tile; with it the
   refills run on into the next tile's slices, which the epilogue's slots leave alone. */
INLINE void tma_loop(__local uchar *as, __local uchar *bs, __global const ulong16 *maps,
                     __local ulong *bars, const tma_walk *w, tma_cursor *c, uint done, int tid, int g,
                     float *acc)
{
    int slices = w->slices;
#if !defined(TMA_FLOW)
    if (tid == 0)
        for (int s = 0; s < STAGES - 2 && s < slices; s++) tma_next(as, bs, maps, bars, w, c);
#endif
    for (int kt = 0; kt < slices; kt++) {
        uint n = done + kt;
        int cur = n % STAGES;
        nv_mbar_wait(bars + cur, (n / STAGES) & 1);
        barrier(CLK_LOCAL_MEM_FENCE);
#if defined(TMA_FLOW)
        if (tid == 0) tma_next(as, bs, maps, bars, w, c);
#else
        if (tid == 0 && kt + STAGES - 2 < slices) tma_next(as, bs, maps, bars, w, c);
#endif
        wg_slice(as + cur * A_STAGE_BYTES, bs + cur * B_STAGE_BYTES, g, acc);
        NV_WGMMA_WAIT(1);
    }
    NV_WGMMA_WAIT(0);
    #pragma unroll
    for (int i = 0; i < BLOCK_N / 2; i++) nv_pin(acc + i);
}

/* One operand's tensor map: rows of `inner` contiguous elements (batches of them where
   batch_stride is not 0), strides in elements; a size-1 dimension's stride, 0 here, stands in
   as the dense one. */
INLINE void tma_map(__global ulong16 *slot, __local ulong16 *stage, __global const void *base, int inner,
                    int rows, long row_stride, long batch_stride, int box_rows)
{
    long rs = row_stride ? row_stride : (inner + CHUNK - 1) / CHUNK * CHUNK;
    long bs = batch_stride ? batch_stride : rows * rs;
    nv_tmap_publish(slot, stage, base, (uint)inner, (uint)rows, batch_stride ? (uint)get_num_groups(1) : 1u,
                    (ulong)rs * ELEM_BYTES, (ulong)bs * ELEM_BYTES, 64, (uint)box_rows);
}

/* Thread 0 builds the call's maps (tma_operand's boxes) in the context's slot and readies one
   mbarrier a stage. */
INLINE void tma_setup(__global ulong16 *maps, __local ulong16 *stage, __global const A_T *A, long a_off,
                      long a_sb, long a_sm, long a_sk, __global const B_T *B, long b_off, long b_sb,
                      long b_sk, long b_sn, int M, int N, int K, __local ulong *bars, int tid)
{
    if (tid == 0) {
#if A_KMAJOR
        tma_map(maps, stage, A + a_off, K, M, a_sm, a_sb, BLOCK_M);
#else
        tma_map(maps, stage, A + a_off, M, K, a_sk, a_sb, BLOCK_K);
#endif
#if B_NMAJOR
        tma_map(maps + 1, stage + 1, B + b_off, N, K, b_sk, b_sb, BLOCK_K);
#else
        tma_map(maps + 1, stage + 1, B + b_off, K, N, b_sn, b_sb, BLOCK_N);
#endif
        for (int s = 0; s < STAGES; s++) nv_mbar_init(bars + s, 1);
        nv_fence_proxy_async();
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#else
#define TMA_PARAMS
#endif

INLINE void zero_acc(float acc[FRAG_M][FRAG_N][4])
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int j = 0; j < FRAG_N; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
}

/* The tile's accumulators through the epilogue the program was built with (its staging
   reuses the ring, which every warp has finished reading at the first barrier; with
   TMA_FLOW only slots f0 and f1). */
INLINE void mma_epilogue(float acc[FRAG_M][FRAG_N][4], int2 tile, int wm, int wn, int lane, int tid,
                         __local uchar *as, __local uchar *bs, int f0, int f1, __global C_T *C,
                         long c_sm, long c_sn, int M, int N, float alpha, float beta, int act,
                         float slope EPI_PARAMS)
{
#if defined(TMA_FLOW)
    __local float4 *red = (__local float4 *)(as + f0 * A_STAGE_BYTES);
    __local uint *zs0 = (__local uint *)(bs + f0 * B_STAGE_BYTES), *zs1 = (__local uint *)(bs + f1 * B_STAGE_BYTES);
#elif defined(EPI_CE_STATS) || defined(EPI_CE_GRAD)
    __local float4 *red = (__local float4 *)as;
    __local uint *zs0 = (__local uint *)(as + CE_RED_BYTES), *zs1 = zs0 + BLOCK_M / 2 * CE_ROW_WORDS;
#endif
#if defined(EPI_CE_STATS)
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the ring, which ce_stats reuses */
    ce_stats(acc, tile, wm, wn, lane, tid, M, N, red, zs0, zs1, C, c_sm, EPI_CE_ARGS);
#elif defined(C_STAGED)
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the ring, which takes the tile */
    stage_acc((__local float *)as, acc, wm + lane / 4, wn + (lane % 4) * 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    store_staged((__local const float *)as, C, c_sm, c_sn, tile, M, N, tid, alpha, beta, act, slope);
#else
#if defined(EPI_CE_GRAD) && defined(CE_STAGED)
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the ring, which takes the tile */
#endif
    int m0 = tile.x * BLOCK_M + wm + lane / 4, n0 = tile.y * BLOCK_N + wn + (lane % 4) * 2;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int m = m0 + i * 16 + h * 8;
            if (m >= M) continue;
#if defined(EPI_CE_GRAD)
            ce_grad_row(acc[i], h, C, c_sm, zs0, zs1, m - tile.x * BLOCK_M, m, n0, n0 - tile.y * BLOCK_N,
                        N, EPI_CE_ARGS);
#else
            #pragma unroll
            for (int j = 0; j < FRAG_N; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    int n = n0 + j * 8 + e;
                    if (n < N) epilogue(C, (long)m * c_sm + (long)n * c_sn, acc[i][j][h * 2 + e], alpha, beta, act, slope);
                }
#endif
        }
#if defined(EPI_CE_GRAD) && defined(CE_STAGED)
    barrier(CLK_LOCAL_MEM_FENCE);
    ce_store_tile(zs0, zs1, C, c_sm, tile, M, N, tid);
#endif
#endif
}

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void matmul_mma(OPERANDS TMA_PARAMS EPI_PARAMS)
{
#if defined(WGMMA)
    /* wgmma's swizzle is a function of the address: each stage starts on 1024 bytes */
    __local uint4 ring[(STAGES * (A_STAGE_BYTES + B_STAGE_BYTES) + 1024) / 16];
    __local uchar *as = (__local uchar *)ring + (1024 - nv_shared(ring) % 1024) % 1024;
#else
    __local uint4 ring[STAGES * (A_STAGE_BYTES + B_STAGE_BYTES) / 16];
    __local uchar *as = (__local uchar *)ring;
#endif
    __local uchar *bs = as + STAGES * A_STAGE_BYTES;
    long batch = get_group_id(1);
    int tid = get_local_id(0), lane = tid % 32, warp = tid / 32;
    int wm = (warp / WARPS_N) * WARP_M, wn = (warp % WARPS_N) * WARP_N;
    int slices = (K + BLOCK_K - 1) / BLOCK_K;
    C += c_off + batch * c_sb;
    float acc[FRAG_M][FRAG_N][4];

#if defined(TMA)
    /* Persistent: the host launches about a wave of work-groups and each walks the tiles
       tile_coords orders, one grid apart, so the tensor maps and mbarriers are set up once a
       work-group and no tile waits for a work-group to start. The ring and the mbarriers'
       phases run on across tiles. */
    __local ulong bars[STAGES];
    __local ulong16 map_stage[2];
    tma_setup(maps, map_stage, A, a_off, a_sb, a_sm, a_sk, B, b_off, b_sb, b_sk, b_sn, M, N, K, bars, tid);
    tma_walk w = {get_group_id(0), ((M + BLOCK_M - 1) / BLOCK_M) * ((N + BLOCK_N - 1) / BLOCK_N), slices,
                  a_sb ? (int)batch : 0, b_sb ? (int)batch : 0, M, N};
    tma_cursor c = {0};
    tma_seek(&c, &w, w.first);
#if defined(TMA_FLOW)
    if (tid == 0)
        for (int s = 0; s < STAGES - 2; s++) tma_next(as, bs, maps, bars, &w, &c);
#endif
    uint done = 0;
    for (int t = w.first; t < w.tiles; t += get_num_groups(0), done += slices) {
        int2 tile = tile_coords(t, M, N);
        zero_acc(acc);
        tma_loop(as, bs, maps, bars, &w, &c, done, tid, warp / 4, &acc[0][0][0]);
        /* The slots of the tile's last two slices: no copy fills them until the next tile's
           first barrier. */
        uint last = done + slices - 1;
        mma_epilogue(acc, tile, wm, wn, lane, tid, as, bs, last % STAGES, (last + STAGES - 1) % STAGES, C,
                     c_sm, c_sn, M, N, alpha, beta, act, slope EPI_ARGS);
        /* Copies will overwrite what the epilogue staged: its writes are ordered before the
           TMA's (another proxy), and (without TMA_FLOW, whose next barrier does it) every warp
           is done with it. */
        nv_fence_proxy_async();
#if !defined(TMA_FLOW)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }
#else
    int2 tile = tile_coords(get_group_id(0), M, N);
    __global const ELEM_T *a = (__global const ELEM_T *)(A + a_off + batch * a_sb) + (long)tile.x * BLOCK_M * a_sm;
    __global const ELEM_T *b = (__global const ELEM_T *)(B + b_off + batch * b_sb) + (long)tile.y * BLOCK_N * b_sn;
    int m_left = M - tile.x * BLOCK_M, n_left = N - tile.y * BLOCK_N;
    zero_acc(acc);
#if defined(WGMMA)
    wg_loop(as, bs, a, b, a_sm, a_sk, b_sk, b_sn, slices, m_left, n_left, K, tid, warp / 4, &acc[0][0][0]);
#else
    /* Every iteration commits one group, empty past the last slice, so that waiting for
       "at most STAGES - 2 in flight" always means the next slice has landed. */
    #pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < slices) copy_slice(as, bs, a, b, a_sm, a_sk, b_sk, b_sn, s, m_left, n_left, K, tid);
        nv_cp_async_commit();
    }
    NV_CP_ASYNC_WAIT(STAGES - 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* Fragments are double-buffered in registers: each MMA_K-deep step loads the next step's
       fragments (the first of the next slice, after its barrier, on the last step) before
       its own mma, so ldmatrix latency and the barrier hide behind tensor-core work. */
    uint af[FRAG_M][4], bf[FRAG_N][2];
    load_a_frags(as, wm, 0, lane, af);
    load_b_frags(bs, wn, 0, lane, bf);
    for (int kt = 0; kt < slices; kt++) {
        /* The slot refilled here held slice kt - 1, which every warp finished reading
           before the last barrier. */
        if (kt + STAGES - 1 < slices)
            copy_slice(as, bs, a, b, a_sm, a_sk, b_sk, b_sn, kt + STAGES - 1, m_left, n_left, K, tid);
        nv_cp_async_commit();
        int cur = kt % STAGES;
        #pragma unroll
        for (int step = 0; step < BLOCK_K / MMA_K; step++) {
            uint an[FRAG_M][4], bn[FRAG_N][2];
            if (step == BLOCK_K / MMA_K - 1) {
                NV_CP_ASYNC_WAIT(STAGES - 2);
                barrier(CLK_LOCAL_MEM_FENCE);
                int nxt = (kt + 1) % STAGES;
                load_a_frags(as + nxt * A_STAGE_BYTES, wm, 0, lane, an);
                load_b_frags(bs + nxt * B_STAGE_BYTES, wn, 0, lane, bn);
            } else {
                load_a_frags(as + cur * A_STAGE_BYTES, wm, (step + 1) * MMA_K, lane, an);
                load_b_frags(bs + cur * B_STAGE_BYTES, wn, (step + 1) * MMA_K, lane, bn);
            }
            mma_step(af, bf, acc);
            #pragma unroll
            for (int i = 0; i < FRAG_M; i++)
                af[i][0] = an[i][0], af[i][1] = an[i][1], af[i][2] = an[i][2], af[i][3] = an[i][3];
            #pragma unroll
            for (int j = 0; j < FRAG_N; j++) bf[j][0] = bn[j][0], bf[j][1] = bn[j][1];
        }
    }
#endif
    mma_epilogue(acc, tile, wm, wn, lane, tid, as, bs, 0, 0, C, c_sm, c_sn, M, N, alpha, beta, act, slope EPI_ARGS);
#endif
}
#endif
