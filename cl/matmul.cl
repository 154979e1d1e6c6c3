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
   - matmul_skinny: for M of a few rows (a GEMV in all but name: inference decode), bound by
     reading B once. A tile of BLOCK_M rows would idle most of its FMAs and too few work-groups
     would walk K one after another; instead each work-group keeps SK_M rows of A's products in
     registers, streams its columns of B in 16-byte loads with SK_LOADS of them in flight a
     lane (along N when N is contiguous, along K for the K-contiguous nn.Linear weight), and
     K is split across work-groups until the device holds several a compute unit: the last
     split of each block to finish adds the splits' f32 partial sums in a fixed order (bitwise
     the same every run) and applies the epilogue (common.h's split_last). B is read once,
     A (a few KiB) from cache, and the partials cost 8 M N bytes a split.

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
/* matmul_skinny: a work-group owns SK_M rows of C (A's rows stay in registers: each lane keeps
   SK_M x SK_VALS sums) and SK_W columns, over one split of K (k_chunk rows: the grid's second
   dimension); its SK_K lanes per column group walk that split, and a local-memory reduction
   sums them in lane order. The layout of B, the one large operand, picks how lanes read it:
   - SK_KMAJOR 0 (N contiguous, or any strides with VEC_B 0): lane (cg, kl) owns the 8 columns
     cg * 8 .. of the block and rows kl * SK_LOADS .. of each SK_K * SK_LOADS step; it issues
     its SK_LOADS rows' 16-byte loads (two float4 for f32) before their FMAs. Lanes of one
     column group are adjacent: a k row of the block is one coalesced SK_W-wide read.
   - SK_KMAJOR 1 (K contiguous: nn.Linear's W^T): lane (cg, kl) owns the SK_LOADS columns
     cg * SK_LOADS .. and the 8-element k chunks kl, kl + SK_K, ...; adjacent lanes read
     adjacent 16-byte chunks of a column, each lane one chunk of each of its columns at once.
   VEC_B: 0 element-wise loads (any strides), 1 vload8 along the unit stride, 2 aligned
   16-byte loads (the host proved every 8-element group 16-byte aligned, 4-element for f32);
   A_UNIT the same for A along K (0: no unit stride).
   With one split the work-group applies the epilogue; with several it stores f32 partial
   sums P[split][batch][m][n], and the block's last split to finish adds them in split order
   (every run gives the same bits). */
#ifndef SK_LOADS
#define SK_LOADS 4 /* configs that predate SK_LOADS */
#endif
#define SK_WG (SK_COLS * SK_K)
#if SK_KMAJOR
#define SK_VALS SK_LOADS
#else
#define SK_VALS 8
#endif
#define SK_W (SK_COLS * SK_VALS)
/* Rows reduced between two barriers: as many as 16 KiB of partial sums hold, at least one
   (host/ops/matmul.c's skinny_local_bytes mirrors this). */
#define SK_FIT (4096 / (SK_WG * SK_VALS))
#if SK_FIT >= SK_M
#define SK_RED SK_M
#elif SK_FIT >= 1
#define SK_RED SK_FIT
#else
#define SK_RED 1
#endif

/* f16 bits loaded as one 16-byte ushort8 (vloada_half8 becomes eight 2-byte loads in some
   compilers, libclc's among them), converted from registers: on NVIDIA by cvt, element by
   element, with no private vector whose address is taken; elsewhere by vload_half8. */
#if defined(CLKIT_NV_SM)
INLINE float f16_bits_to_f32(ushort h)
{
    float f;
    __asm__("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
INLINE float8 f16x8_to_f32(ushort8 b)
{
    return (float8)(f16_bits_to_f32(b.s0), f16_bits_to_f32(b.s1), f16_bits_to_f32(b.s2), f16_bits_to_f32(b.s3),
                    f16_bits_to_f32(b.s4), f16_bits_to_f32(b.s5), f16_bits_to_f32(b.s6), f16_bits_to_f32(b.s7));
}
#else
INLINE float8 f16x8_to_f32(ushort8 b) { return vload_half8(0, (const half *)&b); }
#endif
/* Eight consecutive elements as f32: aligned (LDA8_) or element-aligned (LDU8_). */
#define LDA8_F32(p, i) \
    (float8)(*(const __global float4 *)((p) + (i)), *(const __global float4 *)((p) + (i) + 4))
#define LDA8_F16(p, i) f16x8_to_f32(*(const __global ushort8 *)((p) + (i)))
#define LDA8_BF16(p, i) bf16x8_to_f32(*(const __global ushort8 *)((p) + (i)))
#define LDU8_F32(p, i) vload8(0, (p) + (i))
#define LDU8_F16(p, i) vload_half8(0, (p) + (i))
#define LDU8_BF16(p, i) bf16x8_to_f32(vload8(0, (p) + (i)))
/* B, read once, streams: on NVIDIA its 16-byte loads skip L1 and mark their L2 lines
   evict-first, so that the stream displaces itself rather than what other kernels keep in L2,
   dirty lines above all, whose write-back would share DRAM with it (H200, f16 1 x 4096 x 4096
   after a 256 MiB zero fill as do_bench's: 17.5 against 19.4 us in a GEMV probe). */
#if defined(CLKIT_NV_SM) && CLKIT_NV_SM >= 80
INLINE ulong evict_first(void)
{
    ulong policy;
    __asm__("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
INLINE uint4 stream16(const __global void *p)
{
    uint4 v;
    __asm__ volatile("ld.global.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p), "l"(evict_first()));
    return v;
}
#else
INLINE uint4 stream16(const __global void *p) { return *(const __global uint4 *)p; }
#endif
#define LDS8_F32(p, i) (float8)(as_float4(stream16((p) + (i))), as_float4(stream16((p) + (i) + 4)))
#define LDS8_F16(p, i) f16x8_to_f32(as_ushort8(stream16((p) + (i))))
#define LDS8_BF16(p, i) bf16x8_to_f32(as_ushort8(stream16((p) + (i))))
#if VEC_B == 2
#define LOAD8_B(p) CLKIT_CAT(LDS8_, B_DTYPE)(p, 0)
#else
#define LOAD8_B(p) CLKIT_CAT(LDU8_, B_DTYPE)(p, 0)
#endif
#if A_UNIT == 2
#define LOAD8_A(p) CLKIT_CAT(LDA8_, A_DTYPE)(p, 0)
#else
#define LOAD8_A(p) CLKIT_CAT(LDU8_, A_DTYPE)(p, 0)
#endif

/* load8_b / load8_a: p[0], p[s], ..., p[7 s] of B / A as f32, those from `left` on 0; one
   vector load where the operand's unit stride allows (s is 1 wherever VEC_B / A_UNIT is set). */
#define DEFINE_LOAD8(name, T, vec, load8, load1)                                                  \
    INLINE float8 name(__global const T *p, long s, int left)                                     \
    {                                                                                             \
        if (vec && left >= 8) return load8(p);                                                    \
        float v[8];                                                                               \
        _Pragma("unroll") for (int j = 0; j < 8; j++) v[j] = j < left ? load1(p, j * s) : 0.0f;  \
        return (float8)(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);                         \
    }
DEFINE_LOAD8(load8_b, B_T, VEC_B, LOAD8_B, LOAD_B)
DEFINE_LOAD8(load8_a, A_T, A_UNIT, LOAD8_A, LOAD_A)

/* acc[0..7] += a * b */
INLINE void axpy8(float a, float8 b, float *acc)
{
    acc[0] = fma(a, b.s0, acc[0]), acc[1] = fma(a, b.s1, acc[1]);
    acc[2] = fma(a, b.s2, acc[2]), acc[3] = fma(a, b.s3, acc[3]);
    acc[4] = fma(a, b.s4, acc[4]), acc[5] = fma(a, b.s5, acc[5]);
    acc[6] = fma(a, b.s6, acc[6]), acc[7] = fma(a, b.s7, acc[7]);
}

/* acc + a . b, summed in k order */
INLINE float dot8(float8 a, float8 b, float acc)
{
    acc = fma(a.s0, b.s0, acc), acc = fma(a.s1, b.s1, acc), acc = fma(a.s2, b.s2, acc);
    acc = fma(a.s3, b.s3, acc), acc = fma(a.s4, b.s4, acc), acc = fma(a.s5, b.s5, acc);
    return fma(a.s7, b.s7, fma(a.s6, b.s6, acc));
}

/* 16-bit B: both steps load it in one of two ways, whole 16-byte chunks, SK_LOADS of them back
   to back with no branch between, where the step is full and inside C; else element by
   element, masked. A branch around each load, as load8_b has, let the compiler convert each
   chunk before issuing the next load, one load in flight a lane: on an H200 the f16 GEMV at
   1 x 4096 x 4096 took 0.027 ms so, 0.020 with the loads grouped (M 2 and 4: 0.033 -> 0.027).
   f32 B keeps load8_b's branches: grouped, its loads ran no faster at M 1 and 2 and slower at
   M 4 (0.035 -> 0.040 ms). */
#define GROUPED_F32 0
#define GROUPED_F16 1
#define GROUPED_BF16 1
#define SK_GROUPED (VEC_B && CLKIT_CAT(GROUPED_, B_DTYPE))
#if SK_KMAJOR
/* The 8-element k chunk at A and B (k_left of them inside the split) of the lane's SK_LOADS
   columns (n_left of them inside C): all B loads first, then each A row's chunk meets them. */
INLINE void skinny_step(__global const A_T *A, long a_sm, long a_sk, int m_left,
                        __global const B_T *B, long b_sn, int n_left, int k_left,
                        float acc[SK_M][SK_VALS])
{
    float8 b[SK_LOADS];
    if (SK_GROUPED && n_left >= SK_LOADS && k_left >= 8) {
        #pragma unroll
        for (int c = 0; c < SK_LOADS; c++) b[c] = LOAD8_B(B + c * b_sn);
    } else {
        #pragma unroll
        for (int c = 0; c < SK_LOADS; c++) b[c] = c < n_left ? load8_b(B + c * b_sn, 1, k_left) : (float8)(0.0f);
    }
    #pragma unroll
    for (int i = 0; i < SK_M; i++) {
        float8 a = i < m_left ? load8_a(A + i * a_sm, a_sk, k_left) : (float8)(0.0f);
        #pragma unroll
        for (int c = 0; c < SK_LOADS; c++) acc[i][c] = dot8(a, b[c], acc[i][c]);
    }
}
#else
/* k rows 0 .. SK_LOADS - 1 at A and B (`rows` of them inside the split) of the lane's 8
   columns (n_left of them inside C): the rows' B loads all issue before their FMAs. */
INLINE void skinny_step(__global const A_T *A, long a_sm, long a_sk, int m_left,
                        __global const B_T *B, long b_sk, long b_sn, int n_left, int rows,
                        float acc[SK_M][SK_VALS])
{
    float8 b[SK_LOADS];
    if (SK_GROUPED && n_left >= 8 && rows == SK_LOADS) {
        #pragma unroll
        for (int u = 0; u < SK_LOADS; u++) b[u] = LOAD8_B(B + u * b_sk);
    } else {
        #pragma unroll
        for (int u = 0; u < SK_LOADS; u++) b[u] = u < rows ? load8_b(B + u * b_sk, b_sn, n_left) : (float8)(0.0f);
    }
    /* A row's SK_LOADS values are adjacent where K is A's unit stride: one vector load a row
       (an L1 hit) instead of one a value, which at 16 rows outnumbered B's loads 16 to 1. */
    #pragma unroll
    for (int i = 0; i < SK_M; i++) {
        float a[8];
        vstore8(i < m_left ? load8_a(A + i * a_sm, a_sk, min(rows, SK_LOADS)) : (float8)(0.0f), 0, a);
        #pragma unroll
        for (int u = 0; u < SK_LOADS; u++) axpy8(a[u], b[u], acc[i]);
    }
}
#endif

/* 3-D range: (column blocks x SK_WG, K splits, batch x row blocks); P and tickets: the
   splits' partial sums and counters (common.h's split_last; unused with one split), k_chunk:
   the k rows of a split (a multiple of 64 when there are several, so that 16-byte chunks of
   K-major B stay aligned). */
__kernel __attribute__((reqd_work_group_size(SK_WG, 1, 1))) void matmul_skinny(OPERANDS SPLIT_PARAMS)
{
    __local float partial[SK_RED * SK_K * SK_W];
    __local uint last;
    int tid = get_local_id(0), split = get_group_id(1), splits = get_num_groups(1);
    int row_blocks = (M + SK_M - 1) / SK_M;
    long z = get_group_id(2) / row_blocks, batches = get_num_groups(2) / row_blocks;
    int m0 = (get_group_id(2) % row_blocks) * SK_M, m_left = M - m0;
    int col0 = get_group_id(0) * SK_W;
#if SK_KMAJOR
    int kl = tid % SK_K, cg = tid / SK_K;
#else
    int cg = tid % SK_COLS, kl = tid / SK_COLS;
#endif
    int n0 = col0 + cg * SK_VALS, kb = split * k_chunk, ke = min(K, kb + k_chunk);
    A += a_off + z * a_sb + (long)m0 * a_sm;
    B += b_off + z * b_sb + (long)n0 * b_sn;
    float acc[SK_M][SK_VALS];
    #pragma unroll
    for (int i = 0; i < SK_M; i++)
        #pragma unroll
        for (int j = 0; j < SK_VALS; j++) acc[i][j] = 0.0f;
    if (n0 < N) {
#if SK_KMAJOR
        for (int k = kb + kl * 8; k < ke; k += SK_K * 8)
            skinny_step(A + k * a_sk, a_sm, a_sk, m_left, B + k, b_sn, N - n0, ke - k, acc);
#else
        int k = kb + kl * SK_LOADS;
        for (; k + SK_LOADS <= ke; k += SK_K * SK_LOADS)
            skinny_step(A + k * a_sk, a_sm, a_sk, m_left, B + k * b_sk, b_sk, b_sn, N - n0, SK_LOADS, acc);
        if (k < ke)
            skinny_step(A + k * a_sk, a_sm, a_sk, m_left, B + k * b_sk, b_sk, b_sn, N - n0, ke - k, acc);
#endif
    }
    C += c_off + z * c_sb;
    #pragma unroll
    for (int r0 = 0; r0 < SK_M; r0 += SK_RED) {
        if (r0 >= m_left) break;
        #pragma unroll
        for (int r = 0; r < SK_RED; r++)
            #pragma unroll
            for (int j = 0; j < SK_VALS; j++) partial[(r * SK_K + kl) * SK_W + cg * SK_VALS + j] = acc[r0 + r][j];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int o = tid; o < SK_RED * SK_W; o += SK_WG) {
            int r = o / SK_W, col = o % SK_W, m = m0 + r0 + r, n = col0 + col;
            if (m >= M || n >= N) continue;
            float sum = 0.0f;
            for (int l = 0; l < SK_K; l++) sum += partial[(r * SK_K + l) * SK_W + col];
            if (splits == 1) epilogue(C, m * c_sm + n * c_sn, sum, alpha, beta, act, slope);
            else P[((split * batches + z) * M + m) * N + n] = sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (splits == 1) return;
    long plane = batches * M * N;
    if (split_last(tickets + get_group_id(2) * get_num_groups(0) + get_group_id(0), splits, &last))
        split_finish(P + z * M * N, plane, splits, C, c_sm, c_sn, m0, col0, min(SK_M, m_left),
                     min(SK_W, N - col0), N, tid, SK_WG, alpha, beta, act, slope);
}
#endif
