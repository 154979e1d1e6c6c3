/* Fused attention (FlashAttention-2) on AMD CDNA matrix cores: attn_fwd_matrix,
   attn_bwd_dkdv_matrix and attn_bwd_dq_matrix compute what cl/attention.cl's kernels compute
   (same arguments, the causal mask, grouped-query heads with deterministic sums, lse), for f16
   and bf16 storage on v_mfma_f32_32x32x8 and f32 on v_mfma_f32_32x32x2, through
   cl/amd/matrix.h. As there, the Lq x Lk scores never leave the chip.

   Each wave holds 32 queries and computes transposed products, so that a query is a column of
   every accumulator and lives in one lane pair (lane and lane ^ 32):
   - S^T = K Q^T: A is a 32-key slice of the streamed K tile (rows of head dim, as stored), B the
     wave's queries, read once into registers; a lane's 16 accumulators are 16 keys of its query.
   - The online softmax runs on those accumulators: a query's maximum is its lane's, then its
     pair's (one exchange a block), and its running sum stays per lane until the end.
   - O^T += V^T P^T: B is P^T, which is the S^T accumulators themselves, rounded to the storage
     dtype (the accumulator layout of the first product is the B layout of the second, taking
     the keys of each k step in the order the accumulators hold them); A is V^T, which the
     work-group stores transposed when it stages V.
   Every K and V element is read from global memory once per work-group and from local memory
   once per wave; each output is written once.

   The backward kernels use the same two moves. dK/dV holds 32 keys a wave (K and V as B
   fragments) and streams query blocks: S = Q K^T and dP = dO V^T put a key in each lane pair's
   column, so P and dS = P (dP - delta) are B operands of dV^T += dO^T P and dK^T += Q^T dS, whose
   A operands come from the staged block stored transposed beside its rows. dQ holds 32 queries
   a wave (q and dO as B fragments) and streams key blocks: S^T = K Q^T and dP^T = V dO^T, then
   dQ^T += K^T dS^T.

   Compile-time constants: HEAD_DIM (a multiple of 32), BLOCK_M (32 x the waves), BLOCK_N (a
   multiple of 32), WAVE (64), MATRIX_MFMA32, the dtype (common.h), ATTN_FWD or ATTN_BWD, and
   AMD_EMULATE on PoCL. */
#include "attention.h"

#if defined(DTYPE_F32)
#define A_DTYPE F32
#elif defined(DTYPE_BF16)
#define A_DTYPE BF16
#else
#define A_DTYPE F16
#endif
#include "amd/matrix.h"

/* MFMA only, for now: on RDNA3's WMMA (wave32), with P's B fragments completed from the pair
   lane (a lane holds every other row), the forward assembles without scratch for gfx1100 but
   the backward kernels spill (docs/amd-matrix-cores.md). */
#if !defined(MATRIX_MFMA32)
#error "attention runs on MFMA"
#endif

/* A wave holds INSN_M rows. */
#define WG (BLOCK_M / INSN_M * WAVE)
#define NB (BLOCK_N / INSN_M)      /* slices of a streamed block, INSN_M rows each */
#define DB (HEAD_DIM / INSN_M)     /* slices of the head dimension */
#define DSTEPS (HEAD_DIM / INSN_K) /* instruction steps over the head dimension */
#define KSTEPS (INSN_M / INSN_K)   /* instruction steps over a slice of rows */
/* Local lines, padded: K's rows of HEAD_DIM, V^T's rows of BLOCK_N keys. */
#define PAD (FRAG_K == 1 ? 1 : 4)
#define LDD (HEAD_DIM + PAD)
#define LDN (BLOCK_N + PAD)

/* A value rounded to the operand dtype, as its bits (16-bit) or itself (f32). */
INLINE operand_t to_operand(float x)
{
#if defined(DTYPE_F32)
    return x;
#elif defined(DTYPE_BF16)
    return f32_to_bf16(x);
#elif defined(AMD_EMULATE)
    ushort bits;
    vstore_half_rte(x, 0, (half *)&bits);
    return bits;
#else
    return as_ushort((half)x); /* cl_khr_fp16, which matrix.h enables on AMD devices */
#endif
}

/* B fragments of row `row` of t (the lane's held row) over the head dimension (t^T[d][row]),
   zero from row `valid` on. */
INLINE void hold_rows(frag_t *f, __global const operand_t *t, long rs, long ds, int row, int valid, int lane)
{
    #pragma unroll
    for (int s = 0; s < DSTEPS; s++) {
        operand_t *e_ = (operand_t *)&f[s];
        #pragma unroll
        for (int e = 0; e < FRAG_K; e++)
            e_[e] = row < valid ? t[row * rs + (s * INSN_K + FRAG_K0(lane) + e) * ds] : 0;
    }
}

/* s[j] = A B over the head dimension for the slices j of a staged tile (rows of head dim)
   times the wave's held B fragments: the streamed rows are each accumulator's rows. */
#define PRODUCT(s, tile, held, lane)                                                             \
    _Pragma("unroll") for (int j_ = 0; j_ < NB; j_++) {                                          \
        (s)[j_] = 0.0f;                                                                          \
        __local const operand_t *r_ = (tile) + (j_ * INSN_M + FRAG_ROW(lane)) * LDD + FRAG_K0(lane); \
        _Pragma("unroll") for (int st_ = 0; st_ < DSTEPS; st_++) {                              \
            frag_t a_ = LOAD_FRAG(r_ + st_ * INSN_K);                                            \
            MATRIX_MMA(a_, (held)[st_], (s)[j_]);                                                \
        }                                                                                        \
    }

/* B fragment k step t of a slice's accumulators sv, rounded to the operand dtype, and the
   first of its rows: the lane's own accumulators, the rows taken in the order they hold them. */
#define B_ROW0(lane, t) ACC_ROW(lane, (t) * FRAG_K)
#define ACC_TO_B(b, sv, t, lane)                                                                 \
    _Pragma("unroll") for (int e_ = 0; e_ < FRAG_K; e_++)                                        \
        ((operand_t *)&(b))[e_] = to_operand((sv)[(t) * FRAG_K + e_])

/* acc[i] += (tile^T slice i) B for B the accumulators s of the streamed rows (ACC_TO_B). tile
   is stored transposed (HEAD_DIM lines of BLOCK_N rows). */
#define PRODUCT_T(acc, tile, s, lane)                                                            \
    _Pragma("unroll") for (int j_ = 0; j_ < NB; j_++) {                                          \
        const float *sv_ = (const float *)&(s)[j_];                                              \
        _Pragma("unroll") for (int t_ = 0; t_ < KSTEPS; t_++) {                                  \
            frag_t b_;                                                                           \
            ACC_TO_B(b_, sv_, t_, lane);                                                         \
            __local const operand_t *r_ = (tile) + FRAG_ROW(lane) * LDN + j_ * INSN_M + B_ROW0(lane, t_); \
            _Pragma("unroll") for (int i_ = 0; i_ < DB; i_++) {                                  \
                frag_t a_ = LOAD_FRAG(r_ + i_ * INSN_M * LDN);                                   \
                MATRIX_MMA(a_, b_, (acc)[i_]);                                                   \
            }                                                                                    \
        }                                                                                        \
    }

/* Stores acc^T * mul (the wave's held rows are the accumulators' columns) as rows of out. */
INLINE void store_rows(__global elem_t *out, long ds, const acc_t *acc, int lane, float mul)
{
    #pragma unroll
    for (int i = 0; i < DB; i++) {
        const float *av = (const float *)&acc[i];
        #pragma unroll
        for (int r = 0; r < ACC_N; r++) STORE(out, (i * INSN_M + ACC_ROW(lane, r)) * ds, av[r] * mul);
    }
}

/* BLOCK_N rows of src (row stride rs, head-dim stride ds), `valid` of them, into local memory
   as rows (LDD lines) where rows_out is not NULL and transposed (LDN lines) where t_out is not;
   rows past valid are zero. */
INLINE void stage(__local operand_t *rows_out, __local operand_t *t_out, __global const operand_t *src,
                  long rs, long ds, int valid, int tid)
{
    for (int e = tid; e < BLOCK_N * HEAD_DIM; e += WG) {
        int r = e / HEAD_DIM, d = e % HEAD_DIM;
        operand_t x = r < valid ? src[r * rs + d * ds] : 0;
        if (rows_out) rows_out[r * LDD + d] = x;
        if (t_out) t_out[d * LDN + r] = x;
    }
}

#define ROW_TILE (BLOCK_N * LDD)
#define T_TILE (HEAD_DIM * LDN)

#if defined(ATTN_FWD)
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_fwd_matrix(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, int Hq,
    int group, int Lq, int Lk, int diag, float scale2)
{
    __local operand_t ks[ROW_TILE], vt[T_TILE];
    MATRIX_SCRATCH;
    int tid = get_local_id(0), lane = tid % WAVE;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    int query = m0 + tid / WAVE * INSN_M + FRAG_ROW(lane);
    __global const operand_t *kg = (__global const operand_t *)k + HEAD(k, b, h / group);
    __global const operand_t *vg = (__global const operand_t *)v + HEAD(v, b, h / group);
    frag_t qf[DSTEPS];
    hold_rows(qf, (__global const operand_t *)q + HEAD(q, b, h), q_st.s2, q_st.s3, query, Lq, lane);

    acc_t acc[DB];
    #pragma unroll
    for (int i = 0; i < DB; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        int keys = min(BLOCK_N, Lk - n0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage(ks, NULL, kg + (long)n0 * k_st.s2, k_st.s2, k_st.s3, keys, tid);
        stage(NULL, vt, vg + (long)n0 * v_st.s2, v_st.s2, v_st.s3, keys, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        acc_t s[NB];
        PRODUCT(s, ks, qf, lane);
        float mx = -INFINITY;
        #pragma unroll
        for (int j = 0; j < NB; j++) {
            float *sv = (float *)&s[j];
            #pragma unroll
            for (int r = 0; r < ACC_N; r++) {
                int key = n0 + j * INSN_M + ACC_ROW(lane, r);
                sv[r] = key < Lk && !hidden(key, query, diag) ? sv[r] * scale2 : -INFINITY;
                mx = fmax(mx, sv[r]);
            }
        }
        /* A query with no visible key yet keeps m = -inf: subtracting 0 makes exp2 give 0. */
        float m_new = fmax(m, fmax(mx, MATRIX_PAIR(mx)));
        float base = m_new == -INFINITY ? 0.0f : m_new, alpha = exp2(m - base);
        m = m_new;
        l *= alpha;
        #pragma unroll
        for (int i = 0; i < DB; i++) acc[i] *= alpha;
        #pragma unroll
        for (int j = 0; j < NB; j++) {
            float *sv = (float *)&s[j];
            #pragma unroll
            for (int r = 0; r < ACC_N; r++) l += sv[r] = exp2(sv[r] - base);
        }
        PRODUCT_T(acc, vt, s, lane);
    }

    /* Queries with no key at all (Lk = 0) get o = 0 and lse = -inf, as an empty softmax would. */
    float sum = l + MATRIX_PAIR(l), inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (query >= Lq) return;
    if (lse && lane < PAIR)
        lse[lse_off + b * lse_st.s0 + h * lse_st.s1 + query * lse_st.s2] = sum > 0.0f ? (m + log2(sum)) * LN2 : -INFINITY;
    store_rows(o + HEAD(o, b, h) + (long)query * o_st.s2, o_st.s3, acc, lane, inv);
}
#endif

#if defined(ATTN_BWD)
/* dS = P (dP - delta) into dp, P = 2^(s scale2 - lse2) into s, for the accumulators' rows
   (rows of a lane's registers: key_rows, their statistics from rl / rd) or columns (the
   lane's: cl, cd), whichever the kernel holds; masked entries (a key past Lk, or hidden from
   its query) get P = 0. */
#define PROBABILITIES(s, dp, n0, col, row_is_key, rl, rd, cl, cd)                                \
    _Pragma("unroll") for (int j_ = 0; j_ < NB; j_++) {                                          \
        float *sv_ = (float *)&(s)[j_], *dv_ = (float *)&(dp)[j_];                               \
        _Pragma("unroll") for (int r_ = 0; r_ < ACC_N; r_++) {                                   \
            int row_ = (n0) + j_ * INSN_M + ACC_ROW(lane, r_);                                   \
            int key_ = (row_is_key) ? row_ : (col), qry_ = (row_is_key) ? (col) : row_;          \
            float p_ = key_ < Lk && !hidden(key_, qry_, diag)                                   \
                           ? exp2(fma(sv_[r_], scale2, -((rl)[j_ * INSN_M + ACC_ROW(lane, r_)] + (cl)))) \
                           : 0.0f;                                                               \
            sv_[r_] = p_;                                                                        \
            dv_[r_] = p_ * (dv_[r_] - ((rd)[j_ * INSN_M + ACC_ROW(lane, r_)] + (cd)));          \
        }                                                                                        \
    }

/* Grid (B x Hq x WG, query blocks): a wave's 32 queries and their dO stay in registers as B
   fragments; for each key block the kernel recomputes P^T and dS^T and adds K^T dS^T to
   dQ^T. dQ = scale * sum. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_bwd_dq_matrix(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dq), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale)
{
    __local operand_t ks[ROW_TILE], kt[T_TILE], vs[ROW_TILE];
    __local float zero[BLOCK_N];
    MATRIX_SCRATCH;
    int tid = get_local_id(0), lane = tid % WAVE;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    int query = m0 + tid / WAVE * INSN_M + FRAG_ROW(lane), ok = query < Lq;
    __global const operand_t *kg = (__global const operand_t *)k + HEAD(k, b, h / group);
    __global const operand_t *vg = (__global const operand_t *)v + HEAD(v, b, h / group);
    float ql = ok ? lse2_of(lse[lse_off + b * lse_st.s0 + h * lse_st.s1 + query * lse_st.s2]) : 0.0f;
    float qd = ok ? delta[(long)bh * Lq + query] : 0.0f;
    frag_t qf[DSTEPS], df[DSTEPS];
    hold_rows(qf, (__global const operand_t *)q + HEAD(q, b, h), q_st.s2, q_st.s3, query, Lq, lane);
    hold_rows(df, (__global const operand_t *)dout + HEAD(dout, b, h), dout_st.s2, dout_st.s3, query, Lq, lane);
    for (int i = tid; i < BLOCK_N; i += WG) zero[i] = 0.0f;

    acc_t acc[DB];
    #pragma unroll
    for (int i = 0; i < DB; i++) acc[i] = 0.0f;
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        int keys = min(BLOCK_N, Lk - n0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage(ks, kt, kg + (long)n0 * k_st.s2, k_st.s2, k_st.s3, keys, tid);
        stage(vs, NULL, vg + (long)n0 * v_st.s2, v_st.s2, v_st.s3, keys, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        acc_t s[NB], dp[NB];
        PRODUCT(s, ks, qf, lane);
        PRODUCT(dp, vs, df, lane);
        PROBABILITIES(s, dp, n0, query, 1, zero, zero, ql, qd);
        PRODUCT_T(acc, kt, dp, lane);
    }
    if (ok) store_rows(dq + HEAD(dq, b, h) + (long)query * dq_st.s2, dq_st.s3, acc, lane, scale);
}

/* Grid (B x Hkv x WG, key blocks): a wave's 32 keys and their values stay in registers as B
   fragments; the kernel walks every (query head of the group, query block that sees the keys)
   pair in a fixed order (grouped-query sums are deterministic), stages q, dO (rows and
   transposed) and their rows' lse and delta, recomputes P and dS, and adds dO^T P to dV^T and
   q^T dS to dK^T. dK = scale * sum. Query rows past Lq are zero with zero statistics: their P
   is 1 but both products they feed take their zero dO or q, so they add nothing. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_bwd_dkdv_matrix(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dk), OUT(dv), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale)
{
    __local operand_t qs[ROW_TILE], qt[T_TILE], ds_[ROW_TILE], dt[T_TILE];
    __local float stats[2 * BLOCK_N];
    MATRIX_SCRATCH;
    int tid = get_local_id(0), lane = tid % WAVE;
    int Hkv = Hq / group, bg = grid_head(), b = bg / Hkv, g = bg % Hkv;
    int m0 = grid_block() * BLOCK_M, key = m0 + tid / WAVE * INSN_M + FRAG_ROW(lane);
    frag_t kf[DSTEPS], vf[DSTEPS];
    hold_rows(kf, (__global const operand_t *)k + HEAD(k, b, g), k_st.s2, k_st.s3, key, Lk, lane);
    hold_rows(vf, (__global const operand_t *)v + HEAD(v, b, g), v_st.s2, v_st.s3, key, Lk, lane);

    /* Queries before the first that sees key m0 see none of the block. */
    int n_start = queries_start(m0, diag);
    int per_head = Lq > n_start ? (Lq - n_start + BLOCK_N - 1) / BLOCK_N : 0, steps = group * per_head;
    acc_t dk_acc[DB], dv_acc[DB];
    #pragma unroll
    for (int i = 0; i < DB; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    for (int t = 0; t < steps; t++) {
        int h = g * group + t / per_head, n0 = n_start + (t % per_head) * BLOCK_N;
        int queries = min(BLOCK_N, Lq - n0);
        barrier(CLK_LOCAL_MEM_FENCE);
        stage(qs, qt, (__global const operand_t *)q + HEAD(q, b, h) + (long)n0 * q_st.s2, q_st.s2,
              q_st.s3, queries, tid);
        stage(ds_, dt, (__global const operand_t *)dout + HEAD(dout, b, h) + (long)n0 * dout_st.s2,
              dout_st.s2, dout_st.s3, queries, tid);
        for (int c = tid; c < 2 * BLOCK_N; c += WG) {
            int r = c % BLOCK_N, in = r < queries;
            float x = 0.0f;
            if (in && c < BLOCK_N) x = lse2_of(lse[lse_off + b * lse_st.s0 + h * lse_st.s1 + (n0 + r) * lse_st.s2]);
            if (in && c >= BLOCK_N) x = delta[((long)b * Hq + h) * Lq + n0 + r];
            stats[c] = x;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        acc_t s[NB], dp[NB];
        PRODUCT(s, qs, kf, lane);
        PRODUCT(dp, ds_, vf, lane);
        PROBABILITIES(s, dp, n0, key, 0, stats, stats + BLOCK_N, 0.0f, 0.0f);
        PRODUCT_T(dv_acc, dt, s, lane);
        PRODUCT_T(dk_acc, qt, dp, lane);
    }
    if (key >= Lk) return;
    store_rows(dv + HEAD(dv, b, g) + (long)key * dv_st.s2, dv_st.s3, dv_acc, lane, 1.0f);
    store_rows(dk + HEAD(dk, b, g) + (long)key * dk_st.s2, dk_st.s3, dk_acc, lane, scale);
}
#endif
