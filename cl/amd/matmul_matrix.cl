/* Matrix multiplication on AMD matrix cores: C = act(alpha * A @ B + beta * C) as in
   cl/matmul.cl (same arguments, epilogue, tile order and masked edges), with the products
   done by MFMA on CDNA (f16, bf16 and f32 operands) or WMMA on RDNA3 (f16, bf16) through
   cl/amd/matrix.h.

   A work-group of WAVES_M x WAVES_N waves owns a BLOCK_M x BLOCK_N tile of C; each wave owns a
   (BLOCK_M / WAVES_M) x (BLOCK_N / WAVES_N) piece of it as FRAGS_M x FRAGS_N instruction tiles
   (32 x 32 for MFMA, 16 x 16 for WMMA) whose accumulators stay in registers for the whole K
   loop. K advances BLOCK_K at a time through two local-memory stages: while the waves multiply
   one, the next slice is already in registers on its way to the other, so one barrier a slice
   separates them (as matmul_blocked). Each element of A is read from global memory N / BLOCK_N
   times and each of B M / BLOCK_M times, and from local memory once per wave that needs it.

   Local memory holds both operands k-contiguous (A as rows, B as columns), BLOCK_K values and
   a pad a line, so that a lane's fragment (FRAG_K consecutive k of one row or column) is one
   vector read, whatever the operand's layout in global memory. Global loads are VEC elements
   (16 bytes) along the operand's unit-stride dimension where the host proved that alignment
   (VEC_A / VEC_B > 1), element-wise and masked otherwise and at the edges.

   Host macros: BLOCK_M, BLOCK_N, BLOCK_K, WAVES_M, WAVES_N, GROUP_M, A_KMAJOR, B_NMAJOR,
   VEC_A, VEC_B, WAVE, MATRIX_MFMA32 | MATRIX_WMMA16, the dtypes, and AMD_EMULATE on PoCL. */
#include "matmul.h"

#define WG (WAVES_M * WAVES_N * WAVE)
#include "amd/matrix.h"

#define WAVE_TILE_M (BLOCK_M / WAVES_M)
#define WAVE_TILE_N (BLOCK_N / WAVES_N)
#define FRAGS_M (WAVE_TILE_M / INSN_M)
#define FRAGS_N (WAVE_TILE_N / INSN_N)
/* A local line: BLOCK_K operands and a pad that staggers the lines over the banks (the lanes
   of a wave read one line each) and keeps a 16-bit fragment's 8-byte alignment. */
#if A_DTYPE_IS_F32
#define LDK (BLOCK_K + 1)
#else
#define LDK (BLOCK_K + 4)
#endif
#define STAGE ((BLOCK_M + BLOCK_N) * LDK)
#define A_LOADS (BLOCK_M * BLOCK_K / WG / VEC_A)
#define B_LOADS (BLOCK_N * BLOCK_K / WG / VEC_B)

/* 16 bytes of operands: the vector loads' width where the host allows them (VEC_A, VEC_B). */
#if A_DTYPE_IS_F32
#define VEC 4
typedef float4 vec_t;
#else
#define VEC 8
typedef ushort8 vec_t;
#endif

/* vec operands at p + base into dst: one aligned vector load when vec is VEC and all are
   inside (full), else each that is inside (ok(j)), zero for the rest. */
#define LOAD_RUN(dst, vec, p, base, full, ok)                                                    \
    do {                                                                                         \
        if ((vec) == VEC && (full)) {                                                            \
            vec_t v_ = *(__global const vec_t *)((p) + (base));                                  \
            _Pragma("unroll") for (int j = 0; j < (vec); j++) (dst)[j] = ((const operand_t *)&v_)[j]; \
        } else {                                                                                 \
            _Pragma("unroll") for (int j = 0; j < (vec); j++) (dst)[j] = (ok) ? (p)[(base) + j] : 0; \
        }                                                                                        \
    } while (0)

/* Global -> registers: A's slice (rows m_left, k_left from the slice's corner). With VEC_A > 1
   the unit stride is 1 (the host checked), so a run steps by one element. */
INLINE void load_a(__global const operand_t *a, long a_sm, long a_sk, int m_left, int k_left,
                   int tid, operand_t *ra)
{
    #pragma unroll
    for (int r = 0; r < A_LOADS; r++) {
        int2 mk = a_coord((r * WG + tid) * VEC_A);
#if A_KMAJOR
        long base = mk.x * a_sm + mk.y * (VEC_A > 1 ? 1 : a_sk);
        LOAD_RUN(ra + r * VEC_A, VEC_A, a, base, mk.x < m_left && mk.y + VEC_A <= k_left,
                 mk.x < m_left && mk.y + j < k_left);
#else
        long base = mk.x * (VEC_A > 1 ? 1 : a_sm) + mk.y * a_sk;
        LOAD_RUN(ra + r * VEC_A, VEC_A, a, base, mk.x + VEC_A <= m_left && mk.y < k_left,
                 mk.x + j < m_left && mk.y < k_left);
#endif
    }
}

INLINE void load_b(__global const operand_t *b, long b_sk, long b_sn, int k_left, int n_left,
                   int tid, operand_t *rb)
{
    #pragma unroll
    for (int r = 0; r < B_LOADS; r++) {
        int2 kn = b_coord((r * WG + tid) * VEC_B);
#if B_NMAJOR
        long base = kn.x * b_sk + kn.y * (VEC_B > 1 ? 1 : b_sn);
        LOAD_RUN(rb + r * VEC_B, VEC_B, b, base, kn.x < k_left && kn.y + VEC_B <= n_left,
                 kn.x < k_left && kn.y + j < n_left);
#else
        long base = kn.x * (VEC_B > 1 ? 1 : b_sk) + kn.y * b_sn;
        LOAD_RUN(rb + r * VEC_B, VEC_B, b, base, kn.x + VEC_B <= k_left && kn.y < n_left,
                 kn.x + j < k_left && kn.y < n_left);
#endif
    }
}

/* Registers -> local: A as rows of k (As[m * LDK + k]), B as columns of k (Bs[n * LDK + k]). */
INLINE void store_a(__local operand_t *As, const operand_t *ra, int tid)
{
    #pragma unroll
    for (int r = 0; r < A_LOADS; r++) {
        int2 mk = a_coord((r * WG + tid) * VEC_A);
        #pragma unroll
        for (int j = 0; j < VEC_A; j++)
#if A_KMAJOR
            As[mk.x * LDK + mk.y + j] = ra[r * VEC_A + j];
#else
            As[(mk.x + j) * LDK + mk.y] = ra[r * VEC_A + j];
#endif
    }
}

INLINE void store_b(__local operand_t *Bs, const operand_t *rb, int tid)
{
    #pragma unroll
    for (int r = 0; r < B_LOADS; r++) {
        int2 kn = b_coord((r * WG + tid) * VEC_B);
        #pragma unroll
        for (int j = 0; j < VEC_B; j++)
#if B_NMAJOR
            Bs[(kn.y + j) * LDK + kn.x] = rb[r * VEC_B + j];
#else
            Bs[kn.y * LDK + kn.x + j] = rb[r * VEC_B + j];
#endif
    }
}

/* 2-D range: (tiles x WG, batch). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void matmul_matrix(OPERANDS)
{
    __local operand_t tiles[2 * STAGE];
    MATRIX_SCRATCH;
    long batch = get_group_id(1);
    int2 tile = tile_coords(get_group_id(0), M, N);
    int tid = get_local_id(0), lane = tid % WAVE, wave = tid / WAVE;
    int wm = (wave / WAVES_N) * WAVE_TILE_M, wn = (wave % WAVES_N) * WAVE_TILE_N;
    __global const operand_t *a = (__global const operand_t *)A + a_off + batch * a_sb + (long)tile.x * BLOCK_M * a_sm;
    __global const operand_t *b = (__global const operand_t *)B + b_off + batch * b_sb + (long)tile.y * BLOCK_N * b_sn;
    int m_left = M - tile.x * BLOCK_M, n_left = N - tile.y * BLOCK_N;

    acc_t acc[FRAGS_M][FRAGS_N];
    #pragma unroll
    for (int i = 0; i < FRAGS_M; i++)
        #pragma unroll
        for (int j = 0; j < FRAGS_N; j++) acc[i][j] = 0.0f;
    operand_t ra[A_LOADS * VEC_A], rb[B_LOADS * VEC_B];
    load_a(a, a_sm, a_sk, m_left, K, tid, ra);
    load_b(b, b_sk, b_sn, K, n_left, tid, rb);
    store_a(tiles, ra, tid);
    store_b(tiles + BLOCK_M * LDK, rb, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
    int cur = 0;
    for (int k0 = 0; k0 < K; k0 += BLOCK_K) {
        int more = k0 + BLOCK_K < K;
        if (more) {
            load_a(a + (long)(k0 + BLOCK_K) * a_sk, a_sm, a_sk, m_left, K - k0 - BLOCK_K, tid, ra);
            load_b(b + (long)(k0 + BLOCK_K) * b_sk, b_sk, b_sn, K - k0 - BLOCK_K, n_left, tid, rb);
        }
        __local const operand_t *As = tiles + cur * STAGE + (wm + FRAG_ROW(lane)) * LDK + FRAG_K0(lane);
        __local const operand_t *Bs = tiles + cur * STAGE + (BLOCK_M + wn + FRAG_ROW(lane)) * LDK + FRAG_K0(lane);
        #pragma unroll
        for (int kk = 0; kk < BLOCK_K; kk += INSN_K) {
            frag_t af[FRAGS_M], bf[FRAGS_N];
            #pragma unroll
            for (int i = 0; i < FRAGS_M; i++) af[i] = LOAD_FRAG(As + i * INSN_M * LDK + kk);
            #pragma unroll
            for (int j = 0; j < FRAGS_N; j++) bf[j] = LOAD_FRAG(Bs + j * INSN_N * LDK + kk);
            #pragma unroll
            for (int i = 0; i < FRAGS_M; i++)
                #pragma unroll
                for (int j = 0; j < FRAGS_N; j++) MATRIX_MMA(af[i], bf[j], acc[i][j]);
        }
        if (more) {
            store_a(tiles + (cur ^ 1) * STAGE, ra, tid);
            store_b(tiles + (cur ^ 1) * STAGE + BLOCK_M * LDK, rb, tid);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }

    C += c_off + batch * c_sb;
    int m0 = tile.x * BLOCK_M + wm, n0 = tile.y * BLOCK_N + wn + ACC_COL(lane);
    #pragma unroll
    for (int i = 0; i < FRAGS_M; i++)
        #pragma unroll
        for (int j = 0; j < FRAGS_N; j++) {
            const float *v = (const float *)&acc[i][j];
            int n = n0 + j * INSN_N;
            #pragma unroll
            for (int r = 0; r < ACC_N; r++) {
                int m = m0 + i * INSN_M + ACC_ROW(lane, r);
                if (m < M && n < N) epilogue(C, m * c_sm + n * c_sn, v[r], alpha, beta, act, slope);
            }
        }
}
