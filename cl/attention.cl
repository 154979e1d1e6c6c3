/* Fused attention (FlashAttention-2), the Triton tutorial's forward and backward:
   o = softmax(scale q k^T [+ causal mask]) v for q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D).
   These are the portable kernels, for any OpenCL device; NVIDIA's tensor-core kernels are
   cl/nv/attention_mma.cl, and what both share (arguments, grid order, attn_bwd_delta) is
   cl/attention.h.

   Computed naively, the Lq x Lk score matrix S and the probabilities P go through DRAM (written
   once, read twice), O(L^2) traffic per head against the O(L D) of the inputs and the output.
   Here no score ever leaves the chip: the forward walks the keys in blocks with an online
   softmax (a running row max m and sum l; when m grows, l and the partial output are rescaled
   by 2^(m_old - m_new)), so every input element is read once per block of rows that needs it
   and o is written once. Everything is in base 2: scale * log2(e) is folded into q once, so a
   score costs one exp2; lse is converted to the natural log on the way out.

   The backward recomputes P from the saved lse instead of storing it, as the tutorial does:
   attn_bwd_delta (cl/attention.h) computes delta = rowsum(dO * O) (f32, B x Hq x Lq);
   attn_bwd_dkdv holds a block of keys and values and walks the query blocks that see them
   (every query head of the kv head's group, in a fixed order: grouped-query sums are
   deterministic, no atomics) to accumulate dK and dV; attn_bwd_dq holds a block of queries and
   walks the key blocks they see to accumulate dQ. Causal blocks that are fully masked are
   never visited; only blocks that cross the diagonal or an edge are masked.

   Tiles. A work-group holds BLOCK_M rows (queries in the forward and dQ kernels, keys in the
   dK/dV kernel) on chip, stored transposed in local memory ([d][row], so a work-item's rows are
   adjacent), and streams the other side BLOCK_N rows at a time. Products that reduce over the
   head dimension (q k^T, dO v^T, and their transposes) stream the moving operand in slices of
   SLICE_D dimensions; products that reduce over the streamed rows (P V, dS K, P^T dO, dS^T Q)
   take P or dS from local memory and stream the other operand in slices of SLICE_N rows. Every
   product is register-blocked as in cl/matmul.cl: work-item (tr, tc) of an R_T x C_T grid owns
   THREAD_M rows by THREAD_N columns of the score tile, and the same THREAD_M rows by THREAD_D =
   HEAD_DIM / C_T columns of the output tile, so THREAD_M + THREAD_N local reads feed
   THREAD_M * THREAD_N FMAs. The row max of the score tile is reduced through local memory
   (portable: no sub-group width is assumed); row sums stay per work-item until the end.

   Compile-time constants: HEAD_DIM, BLOCK_M, BLOCK_N, THREAD_M, THREAD_N, SLICE_D, SLICE_N
   (powers of two), the dtype (common.h) and ATTN_FWD or ATTN_BWD, the program's kernels. */
#include "attention.h"

#if defined(THREAD_M)
#define R_T (BLOCK_M / THREAD_M)
#define C_T (BLOCK_N / THREAD_N)
#define WG (R_T * C_T)
#define THREAD_D (HEAD_DIM / C_T)
/* Tiles that are written often (P, dS, slices) pad their rows by 4 floats, spreading
   transposed stores over banks while float4 reads stay 16-byte aligned. */
#define LDM (BLOCK_M + 4)
#define LDN (BLOCK_N + 4)
#define LDD (HEAD_DIM + 4)
/* A work-item's THREAD_M rows come in runs of up to 4 adjacent rows, runs R_T * 4 apart, so
   neighbouring work-items read neighbouring float4s; likewise its columns. */
#define RW (THREAD_M < 4 ? THREAD_M : 4)
#define CW (THREAD_N < 4 ? THREAD_N : 4)
#define DW (THREAD_D < 4 ? THREAD_D : 4)
inline int spread(int t, int i, int w, int threads) { return (i / w) * (threads * w) + t * w + i % w; }
inline int row_of(int tr, int i) { return spread(tr, i, RW, R_T); }
inline int col_of(int tc, int j) { return spread(tc, j, CW, C_T); }
inline int dim_of(int tc, int j) { return spread(tc, j, DW, C_T); }

/* Defines name(p, t, x): x[i] = p[spread(t, i, W, THREADS)] for i < N, with float4 reads
   where runs are 4 long (p is then 16-byte aligned: every tile's leading dimension and offset
   is a multiple of 4 floats). One function per shape keeps every loop bound a constant. */
#define DEFINE_READ(name, N, W, THREADS)                                                        \
    INLINE void name(__local const float *p, int t, float *x)                                  \
    {                                                                                           \
        _Pragma("unroll") for (int c = 0; c < (N) / (W); c++)                                   \
        {                                                                                       \
            __local const float *s = p + c * (THREADS) * (W) + t * (W);                         \
            if ((W) == 4) {                                                                     \
                float4 v = *(__local const float4 *)s;                                          \
                x[4 * c] = v.x, x[4 * c + 1] = v.y, x[4 * c + 2] = v.z, x[4 * c + 3] = v.w;     \
            } else {                                                                            \
                _Pragma("unroll") for (int j = 0; j < (W); j++) x[c * (W) + j] = s[j];          \
            }                                                                                   \
        }                                                                                       \
    }
DEFINE_READ(read_rows, THREAD_M, RW, R_T)
DEFINE_READ(read_cols, THREAD_N, CW, C_T)
DEFINE_READ(read_dims, THREAD_D, DW, C_T)

/* Defines name(a, lda, b, ldb, tr, tc, acc): acc[i][j] += sum over k < DEPTH of
   a[k][row_of(tr, i)] * b[k][column j of work-item tc] for a THREAD_M x N micro-tile, so
   THREAD_M + N local reads feed THREAD_M * N FMAs. */
#define DEFINE_PRODUCT(name, DEPTH, N, read_b)                                                  \
    INLINE void name(__local const float *a, int lda, __local const float *b, int ldb, int tr,  \
                     int tc, float *acc)                                                        \
    {                                                                                           \
        _Pragma("unroll") for (int k = 0; k < (DEPTH); k++)                                     \
        {                                                                                       \
            float x[THREAD_M], y[N];                                                            \
            read_rows(a + k * lda, tr, x);                                                      \
            read_b(b + k * ldb, tc, y);                                                         \
            _Pragma("unroll") for (int i = 0; i < THREAD_M; i++)                                \
                _Pragma("unroll") for (int j = 0; j < (N); j++)                                 \
                    acc[i * (N) + j] = fma(x[i], y[j], acc[i * (N) + j]);                       \
        }                                                                                       \
    }
/* Scores (q k^T and the like): over a slice of the head dimension, into the score tile. */
DEFINE_PRODUCT(product_s, SLICE_D, THREAD_N, read_cols)
/* Outputs (P V and the like): over a slice of the streamed rows, into the output tile. */
DEFINE_PRODUCT(product_o, SLICE_N, THREAD_D, read_dims)

/* dst[d * ld + r] = mul * src[r * rs + d * ds] for r < rows, d < depth: rows of a tensor stored
   transposed for the products. Rows from `valid` on are zero (past the sequence's end).
   Consecutive work-items take consecutive d, the usual unit stride. */
INLINE void stage_t(__local float *dst, int ld, __global const elem_t *src, long rs, long ds,
                    int valid, int rows, int depth, float mul, int tid)
{
    for (int e = tid; e < rows * depth; e += WG) {
        int r = e / depth, d = e % depth;
        dst[d * ld + r] = r < valid ? mul * LOAD(src, r * rs + d * ds) : 0.0f;
    }
}

/* dst[r * LDD + d] = src[r * rs + d * ds] for r < rows, every d; rows from `valid` on zero. */
INLINE void stage_rows(__local float *dst, __global const elem_t *src, long rs, long ds,
                       int valid, int rows, int tid)
{
    for (int e = tid; e < rows * HEAD_DIM; e += WG) {
        int r = e / HEAD_DIM, d = e % HEAD_DIM;
        dst[r * LDD + d] = r < valid ? LOAD(src, r * rs + d * ds) : 0.0f;
    }
}

/* f[r] = src[r * stride] for r < n (zero from `valid` on): per-row statistics; lse in log2
   units (lse2_of) where `lse`. */
INLINE void stage_stat(__local float *f, __global const float *src, long stride, int valid, int n,
                       int lse, int tid)
{
    for (int r = tid; r < n; r += WG) {
        float x = r < valid ? src[r * stride] : 0.0f;
        f[r] = lse ? lse2_of(x) : x;
    }
}

/* Sets to -inf the scores of this work-item's micro-tile that are masked: a streamed row at or
   past `limit`, or a key hidden from its query (diag: cl/attention.h's hidden). Rows of the
   tile are queries (keys_across) or keys. */
INLINE void mask_scores(float *s, int r0, int c0, int limit, int diag, int keys_across, int tr,
                        int tc)
{
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++)
        #pragma unroll
        for (int j = 0; j < THREAD_N; j++) {
            int r = r0 + row_of(tr, i), c = c0 + col_of(tc, j);
            int masked = keys_across ? hidden(c, r, diag) : hidden(r, c, diag);
            if (c >= limit || masked) s[i * THREAD_N + j] = -INFINITY;
        }
}

/* Stores this work-item's THREAD_M x THREAD_D part of an output tile (rows from m0, mul
   applied), skipping rows at or past `rows`. */
INLINE void store_tile(__global elem_t *out, long rs, long ds, const float *acc, int rows,
                       float mul, int tr, int tc)
{
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) {
        int r = row_of(tr, i);
        if (r >= rows) continue;
        #pragma unroll
        for (int j = 0; j < THREAD_D; j++)
            STORE(out, r * rs + dim_of(tc, j) * ds, mul * acc[i * THREAD_D + j]);
    }
}

#if defined(ATTN_FWD)
/* The K slice (SLICE_D x LDN) and the V slice (SLICE_N x LDD) are never live together. */
#define KV_WORDS MAX(SLICE_D * LDN, SLICE_N * LDD)
#define FWD_WORDS (HEAD_DIM * BLOCK_M + BLOCK_N * LDM + KV_WORDS + BLOCK_M * C_T)

/* s += q k^T for this block of keys (log2 units: q is pre-scaled), K streamed through ks. */
INLINE void scores(float *s, __local const float *qt, __local float *ks, __global const elem_t *k,
                   long rs, long ds, int keys, int tid, int tr, int tc)
{
    for (int d0 = 0; d0 < HEAD_DIM; d0 += SLICE_D) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_t(ks, LDN, k + d0 * ds, rs, ds, keys, BLOCK_N, SLICE_D, 1.0f, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        product_s(qt + d0 * BLOCK_M, BLOCK_M, ks, LDN, tr, tc, s);
    }
}

/* One step of the online softmax: the new row max m over this block (partial maxima meet in
   red), the running sums l (each work-item sums its own columns) and the output rows rescaled
   by 2^(m_old - m_new); P = 2^(s - m) goes to pt for the P V product. */
INLINE void softmax_step(const float *s, float *m, float *l, float *acc, __local float *pt,
                         __local float *red, int tr, int tc)
{
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) {
        float mx = -INFINITY;
        #pragma unroll
        for (int j = 0; j < THREAD_N; j++) mx = fmax(mx, s[i * THREAD_N + j]);
        red[row_of(tr, i) * C_T + tc] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) {
        int r = row_of(tr, i);
        float m_new = m[i];
        for (int t = 0; t < C_T; t++) m_new = fmax(m_new, red[r * C_T + t]);
        /* A row with no visible key yet keeps m = -inf: subtracting 0 makes exp2 give 0, not NaN. */
        float base = m_new == -INFINITY ? 0.0f : m_new, alpha = exp2(m[i] - base);
        m[i] = m_new;
        l[i] *= alpha;
        #pragma unroll
        for (int j = 0; j < THREAD_D; j++) acc[i * THREAD_D + j] *= alpha;
        #pragma unroll
        for (int j = 0; j < THREAD_N; j++) {
            float p = exp2(s[i * THREAD_N + j] - base);
            l[i] += p;
            pt[col_of(tc, j) * LDM + r] = p;
        }
    }
}

/* acc += P V for this block's keys, V streamed through vs. */
INLINE void add_pv(float *acc, __local const float *pt, __local float *vs, __global const elem_t *v,
                   long rs, long ds, int keys, int tid, int tr, int tc)
{
    for (int n = 0; n < keys; n += SLICE_N) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_rows(vs, v + n * rs, rs, ds, keys - n, SLICE_N, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        product_o(pt + n * LDM, LDM, vs, LDD, tr, tc, acc);
    }
}

/* Grid (B x Hq x WG, query blocks), ordered by query_block_start. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_fwd(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, int Hq,
    int group, int Lq, int Lk, int diag, float scale2)
{
    __local float4 words[FWD_WORDS / 4];
    __local float *qt = (__local float *)words, *pt = qt + HEAD_DIM * BLOCK_M;
    __local float *kv = pt + BLOCK_N * LDM, *red = kv + KV_WORDS;
    int tid = get_local_id(0), tr = tid / C_T, tc = tid % C_T;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    q += HEAD(q, b, h) + m0 * q_st.s2;
    k += HEAD(k, b, h / group);
    v += HEAD(v, b, h / group);
    stage_t(qt, BLOCK_M, q, q_st.s2, q_st.s3, rows, BLOCK_M, HEAD_DIM, scale2, tid);

    float m[THREAD_M], l[THREAD_M] = {0.0f}, acc[THREAD_M * THREAD_D] = {0.0f};
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) m[i] = -INFINITY;
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        int keys = min(BLOCK_N, Lk - n0);
        float s[THREAD_M * THREAD_N] = {0.0f};
        scores(s, qt, kv, k + n0 * k_st.s2, k_st.s2, k_st.s3, keys, tid, tr, tc);
        if (keys < BLOCK_N || hidden(n0 + BLOCK_N - 1, m0, diag))
            mask_scores(s, m0, n0, Lk, diag, 1, tr, tc);
        softmax_step(s, m, l, acc, pt, red, tr, tc);
        add_pv(acc, pt, kv, v + n0 * v_st.s2, v_st.s2, v_st.s3, keys, tid, tr, tc);
    }

    /* Each work-item summed its own columns of P: combine the partial sums of each row. Rows
       with no key at all (Lk = 0) get o = 0 and lse = -inf, as an empty softmax would. */
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) red[row_of(tr, i) * C_T + tc] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int i = 0; i < THREAD_M; i++) {
        int r = row_of(tr, i);
        float sum = 0.0f;
        for (int t = 0; t < C_T; t++) sum += red[r * C_T + t];
        l[i] = sum > 0.0f ? 1.0f / sum : 0.0f;
        if (lse && tc == 0 && r < rows)
            lse[lse_off + b * lse_st.s0 + h * lse_st.s1 + (m0 + r) * lse_st.s2] =
                sum > 0.0f ? (m[i] + log2(sum)) * LN2 : -INFINITY;
        #pragma unroll
        for (int j = 0; j < THREAD_D; j++) acc[i * THREAD_D + j] *= l[i];
    }
    store_tile(o + HEAD(o, b, h) + m0 * o_st.s2, o_st.s2, o_st.s3, acc, rows, 1.0f, tr, tc);
}
#endif

#if defined(ATTN_BWD)
/* s += held rows x (streamed rows)^T and dp likewise for a second pair, over the head
   dimension: both products of a block share the slice loop. a1/a2 are the held tiles
   ([d][row]); the streamed rows b1/b2 go through the slices s1/s2. */
INLINE void two_scores(float *s, float *dp, __local const float *a1, __local const float *a2,
                       __local float *s1, __local float *s2, __global const elem_t *b1, long rs1,
                       long ds1, __global const elem_t *b2, long rs2, long ds2, int valid,
                       int tid, int tr, int tc)
{
    for (int d0 = 0; d0 < HEAD_DIM; d0 += SLICE_D) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_t(s1, LDN, b1 + d0 * ds1, rs1, ds1, valid, BLOCK_N, SLICE_D, 1.0f, tid);
        stage_t(s2, LDN, b2 + d0 * ds2, rs2, ds2, valid, BLOCK_N, SLICE_D, 1.0f, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        product_s(a1 + d0 * BLOCK_M, BLOCK_M, s1, LDN, tr, tc, s);
        product_s(a2 + d0 * BLOCK_M, BLOCK_M, s2, LDN, tr, tc, dp);
    }
}

#define DQ_WORDS (2 * HEAD_DIM * BLOCK_M + BLOCK_N * LDM + MAX(2 * SLICE_D * LDN, SLICE_N * LDD) + 2 * BLOCK_M)

/* Grid (B x Hq x WG, query blocks). A block of queries with its dO, lse and delta stays on
   chip; for each key block it recomputes P = 2^(q k^T - lse), dP = dO v^T and
   dS = P (dP - delta), then dQ += dS K. dQ = scale * sum. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_bwd_dq(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dq), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale)
{
    __local float4 words[DQ_WORDS / 4];
    __local float *qt = (__local float *)words, *dot = qt + HEAD_DIM * BLOCK_M;
    __local float *dst = dot + HEAD_DIM * BLOCK_M, *kv = dst + BLOCK_N * LDM;
    __local float *lse2 = kv + MAX(2 * SLICE_D * LDN, SLICE_N * LDD), *dlt = lse2 + BLOCK_M;
    int tid = get_local_id(0), tr = tid / C_T, tc = tid % C_T;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    q += HEAD(q, b, h) + m0 * q_st.s2;
    dout += HEAD(dout, b, h) + m0 * dout_st.s2;
    k += HEAD(k, b, h / group);
    v += HEAD(v, b, h / group);
    stage_t(qt, BLOCK_M, q, q_st.s2, q_st.s3, rows, BLOCK_M, HEAD_DIM, scale2, tid);
    stage_t(dot, BLOCK_M, dout, dout_st.s2, dout_st.s3, rows, BLOCK_M, HEAD_DIM, 1.0f, tid);
    stage_stat(lse2, lse + lse_off + b * lse_st.s0 + h * lse_st.s1 + m0 * lse_st.s2, lse_st.s2,
               rows, BLOCK_M, 1, tid);
    stage_stat(dlt, delta + (long)bh * Lq + m0, 1, rows, BLOCK_M, 0, tid);

    float acc[THREAD_M * THREAD_D] = {0.0f};
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        int keys = min(BLOCK_N, Lk - n0);
        float s[THREAD_M * THREAD_N] = {0.0f}, dp[THREAD_M * THREAD_N] = {0.0f};
        two_scores(s, dp, qt, dot, kv, kv + SLICE_D * LDN, k + n0 * k_st.s2, k_st.s2, k_st.s3,
                   v + n0 * v_st.s2, v_st.s2, v_st.s3, keys, tid, tr, tc);
        if (keys < BLOCK_N || hidden(n0 + BLOCK_N - 1, m0, diag))
            mask_scores(s, m0, n0, Lk, diag, 1, tr, tc);
        #pragma unroll
        for (int i = 0; i < THREAD_M; i++) {
            int r = row_of(tr, i);
            #pragma unroll
            for (int j = 0; j < THREAD_N; j++) {
                float p = exp2(s[i * THREAD_N + j] - lse2[r]);
                dst[col_of(tc, j) * LDM + r] = p * (dp[i * THREAD_N + j] - dlt[r]);
            }
        }
        for (int n = 0; n < keys; n += SLICE_N) {
            barrier(CLK_LOCAL_MEM_FENCE);
            stage_rows(kv, k + (n0 + n) * k_st.s2, k_st.s2, k_st.s3, keys - n, SLICE_N, tid);
            barrier(CLK_LOCAL_MEM_FENCE);
            product_o(dst + n * LDM, LDM, kv, LDD, tr, tc, acc);
        }
    }
    store_tile(dq + HEAD(dq, b, h) + m0 * dq_st.s2, dq_st.s2, dq_st.s3, acc, rows, scale, tr, tc);
}

#define DKDV_WORDS                                                                               \
    (2 * HEAD_DIM * BLOCK_M + 2 * BLOCK_N * LDM + MAX(2 * SLICE_D * LDN, 2 * SLICE_N * LDD) +     \
     2 * BLOCK_N)

/* Grid (B x Hkv x WG, key blocks). A block of keys and values stays on chip; for each query
   head of the group and each query block that sees these keys it recomputes P^T and
   dS^T = P^T (dP^T - delta), then dV += P^T dO and dK += dS^T Q. dK = scale * sum. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_bwd_dkdv(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dk), OUT(dv), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale)
{
    __local float4 words[DKDV_WORDS / 4];
    __local float *kt = (__local float *)words, *vt = kt + HEAD_DIM * BLOCK_M;
    __local float *pt = vt + HEAD_DIM * BLOCK_M, *dst = pt + BLOCK_N * LDM;
    __local float *s1 = dst + BLOCK_N * LDM, *s2 = s1 + SLICE_N * LDD;
    __local float *lse2 = s1 + MAX(2 * SLICE_D * LDN, 2 * SLICE_N * LDD), *dlt = lse2 + BLOCK_N;
    int tid = get_local_id(0), tr = tid / C_T, tc = tid % C_T;
    int Hkv = Hq / group, bg = grid_head(), b = bg / Hkv, g = bg % Hkv;
    int m0 = grid_block() * BLOCK_M, rows = min(BLOCK_M, Lk - m0);
    k += HEAD(k, b, g) + m0 * k_st.s2;
    v += HEAD(v, b, g) + m0 * v_st.s2;
    stage_t(kt, BLOCK_M, k, k_st.s2, k_st.s3, rows, BLOCK_M, HEAD_DIM, scale2, tid);
    stage_t(vt, BLOCK_M, v, v_st.s2, v_st.s3, rows, BLOCK_M, HEAD_DIM, 1.0f, tid);

    float dk_acc[THREAD_M * THREAD_D] = {0.0f}, dv_acc[THREAD_M * THREAD_D] = {0.0f};
    /* Queries before the first that sees key m0 see none of the block. */
    int n_start = queries_start(m0, diag);
    for (int h = g * group; h < (g + 1) * group; h++) {
        __global const elem_t *qh = q + HEAD(q, b, h), *dh = dout + HEAD(dout, b, h);
        __global const float *lh = lse + lse_off + b * lse_st.s0 + h * lse_st.s1;
        __global const float *delh = delta + ((long)b * Hq + h) * Lq;
        for (int n0 = n_start; n0 < Lq; n0 += BLOCK_N) {
            int queries = min(BLOCK_N, Lq - n0);
            stage_stat(lse2, lh + n0 * lse_st.s2, lse_st.s2, queries, BLOCK_N, 1, tid);
            stage_stat(dlt, delh + n0, 1, queries, BLOCK_N, 0, tid);
            float s[THREAD_M * THREAD_N] = {0.0f}, dp[THREAD_M * THREAD_N] = {0.0f};
            two_scores(s, dp, kt, vt, s1, s1 + SLICE_D * LDN, qh + n0 * q_st.s2, q_st.s2, q_st.s3,
                       dh + n0 * dout_st.s2, dout_st.s2, dout_st.s3, queries, tid, tr, tc);
            if (queries < BLOCK_N || hidden(m0 + BLOCK_M - 1, n0, diag))
                mask_scores(s, m0, n0, Lq, diag, 0, tr, tc);
            #pragma unroll
            for (int i = 0; i < THREAD_M; i++) {
                int r = row_of(tr, i);
                #pragma unroll
                for (int j = 0; j < THREAD_N; j++) {
                    int c = col_of(tc, j);
                    float p = exp2(s[i * THREAD_N + j] - lse2[c]);
                    pt[c * LDM + r] = p;
                    dst[c * LDM + r] = p * (dp[i * THREAD_N + j] - dlt[c]);
                }
            }
            for (int n = 0; n < queries; n += SLICE_N) {
                barrier(CLK_LOCAL_MEM_FENCE);
                stage_rows(s1, dh + (n0 + n) * dout_st.s2, dout_st.s2, dout_st.s3, queries - n,
                           SLICE_N, tid);
                stage_rows(s2, qh + (n0 + n) * q_st.s2, q_st.s2, q_st.s3, queries - n, SLICE_N, tid);
                barrier(CLK_LOCAL_MEM_FENCE);
                product_o(pt + n * LDM, LDM, s1, LDD, tr, tc, dv_acc);
                product_o(dst + n * LDM, LDM, s2, LDD, tr, tc, dk_acc);
            }
        }
    }
    store_tile(dv + HEAD(dv, b, g) + m0 * dv_st.s2, dv_st.s2, dv_st.s3, dv_acc, rows, 1.0f, tr, tc);
    store_tile(dk + HEAD(dk, b, g) + m0 * dk_st.s2, dk_st.s2, dk_st.s3, dk_acc, rows, scale, tr, tc);
}
#endif
#endif

#if defined(ATTN_DECODE)
/* Flash-decoding: a few query rows against many keys (decoding a token against a long KV
   cache). The forward's grid, a work-group per query block, would give a decode step only
   B x Hq work-groups and leave most of a GPU idle; here the keys are split instead (the
   blocks, partial results and merge are attention.h's decode_block and decode_merge, shared
   with NVIDIA's tensor-core kernel, cl/nv/attention_mma.cl's attn_decode_mma, which the host
   takes where it can). A work-group takes ROWS query rows of one kv head (every query head of a
   group reads the same K and V, so each is read once for all of them: the traffic is the KV
   cache's size, which bounds decoding) and a chunk of keys, which it walks a tile at a time
   with the forward's online softmax. The tile's K and V go through local memory; the next
   tile's loads are issued before the current tile is scored, so every work-group always has a
   tile of both in flight. Causal masks as the forward does (hidden() in attention.h; the host
   passes Lk for no mask).

   A row's running max is the work-group's: a score above it raises the row's entry in rmax
   (ordered bits, local atomic max), which after the first tile happens rarely; probabilities
   are taken once per score, by the work-item that scored it.

   Compile-time constants: HEAD_DIM, ROWS (1, 2, 4 or 8), the dtype, DEC_LOCAL, DENSE_D when k
   and v have a contiguous head dimension, ALIGNED_KV when every row of them also starts on 16
   bytes. */
#define DEC_WG 128
#define PIECE_BYTES 16
#if defined(DTYPE_F32)
#define ES 4 /* bytes an element */
#else
#define ES 2
#endif
#define VEC (PIECE_BYTES / ES) /* elements of a 16-byte piece */
#define OCTS (HEAD_DIM / VEC)       /* pieces of a row */
#define SLICES (DEC_WG / OCTS)      /* keys P V takes at once */
/* A tile: TILE_BYTES of keys (at most 128) and their values, through local memory; K's rows
   padded by one piece so that neighbouring keys' rows start in different banks. A work-item
   holds its TILE_LOADS pieces of each of the next tile in registers while the current one is
   used, scores one key for a share of the rows, and multiplies TILE_LOADS values. The tile is
   16 KB where the kernel's local memory then fits DEC_LOCAL (the host's: the device's bytes),
   else 8 or 4 KB (oclgrind's device has 32 KB). The tile also holds the merge's weights. */
#define KEYS_OF(tile) ((tile) / (HEAD_DIM * ES) < 128 ? (tile) / (HEAD_DIM * ES) : 128)
#define DEC_BYTES(tile) \
    (ROWS * HEAD_DIM * 4 + ROWS * KEYS_OF(tile) * 4 + KEYS_OF(tile) * (2 * HEAD_DIM + VEC) * ES + ROWS * 8 + 64)
#if DEC_BYTES(16384) <= DEC_LOCAL
#define TILE_BYTES 16384
#elif DEC_BYTES(8192) <= DEC_LOCAL
#define TILE_BYTES 8192
#elif DEC_BYTES(4096) <= DEC_LOCAL
#define TILE_BYTES 4096
#else
#error "the decoding kernel's local memory exceeds the device's"
#endif
#define ROW_BYTES (HEAD_DIM * ES)
#define T_KEYS KEYS_OF(TILE_BYTES)
#define KT_LD (HEAD_DIM + VEC)
#define KT_BYTES (T_KEYS * KT_LD * ES)
#define STAGE_BYTES (KT_BYTES + T_KEYS * ROW_BYTES)
#if (2 * ROWS * DEC_MAX_SPLITS + 2 * ROWS) * 4 > STAGE_BYTES
#error "the merge's weights do not fit the tile"
#endif
#define TILE_LOADS (T_KEYS * OCTS / DEC_WG)
#define KT_GROUPS (DEC_WG / T_KEYS) /* work-items that score one key, a share of the rows each */
#define KT_ROWS ((ROWS + KT_GROUPS - 1) / KT_GROUPS)

/* Pieces travel as uint4 (a ushort8 would take eight registers); elements are bits_of, and
   floatv from local memory. */
#if defined(DTYPE_F32)
typedef uint bits_of;
typedef float4 floatv;
#define DOTV(a, b) dot(a, b)
#define LOCAL_PIECE(p) as_float4(*(__local const uint4 *)(p))
#define RAW_DENSE(p) vload4(0, (const __global uint *)(p))
#define GATHER(a, b, c, d, e, f, g, h) (uint4)(a, b, c, d) /* the first VEC of eight strided loads */
#else
typedef ushort bits_of;
typedef float8 floatv;
#define DOTV(a, b) (dot((a).lo, (b).lo) + dot((a).hi, (b).hi))
#define RAW_DENSE(p) as_uint4(vload8(0, (const __global ushort *)(p)))
#define GATHER(a, b, c, d, e, f, g, h) as_uint4((ushort8)(a, b, c, d, e, f, g, h))
#if defined(DTYPE_F16)
#define LOCAL_PIECE(p) vloada_half8(0, (__local const half *)(p))
#else
#define LOCAL_PIECE(p) bf16x8_to_f32(*(__local const ushort8 *)(p))
#endif
#endif

/* Piece c of a row, raw (ds: the head dimension's stride). */
INLINE uint4 raw_piece(__global const elem_t *row, int c, long ds)
{
#if defined(ALIGNED_KV)
    return *(const __global uint4 *)(row + c * VEC);
#elif defined(DENSE_D)
    return RAW_DENSE(row + c * VEC);
#else
    __global const bits_of *p = (__global const bits_of *)row + c * VEC * ds;
    return GATHER(p[0], p[ds], p[2 * ds], p[3 * ds], p[4 * ds], p[5 * ds], p[6 * ds], p[7 * ds]);
#endif
}

/* Floats as ints in the same order, for atomic_max (the map is its own inverse). */
INLINE int ordered_bits(float f)
{
    int i = as_int(f);
    return i >= 0 ? i : i ^ 0x7fffffff;
}

INLINE float ordered_float(int i) { return as_float(i >= 0 ? i : i ^ 0x7fffffff); }

/* x[r] = the sum of x[r] over the work-group's work-items, for every row. */
INLINE void rows_sum(float *x, __local float (*red)[DEC_WG], int tid)
{
    #pragma unroll
    for (int r = 0; r < ROWS; r++) red[r][tid] = x[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = DEC_WG / 2; step > 0; step /= 2) {
        if (tid < step)
            #pragma unroll
            for (int r = 0; r < ROWS; r++) red[r][tid] += red[r][tid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    #pragma unroll
    for (int r = 0; r < ROWS; r++) x[r] = red[r][0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* This work-item's pieces of the tile at key t0 of the chunk (n keys from k0: rows past the
   chunk repeat its last one, so that no load leaves the tensor; they are never used). */
INLINE void load_tile(uint4 *kr, uint4 *vr, __global const elem_t *kh, long k_rs, long k_ds,
                      __global const elem_t *vh, long v_rs, long v_ds, int k0, int n, int t0, int tid)
{
    #pragma unroll
    for (int u = 0; u < TILE_LOADS; u++) {
        int e = tid + u * DEC_WG, j = k0 + min(t0 + e / OCTS, n - 1);
        kr[u] = raw_piece(kh + (long)j * k_rs, e % OCTS, k_ds);
        vr[u] = raw_piece(vh + (long)j * v_rs, e % OCTS, v_ds);
    }
}

INLINE void stage_tile(__local uchar *slot, const uint4 *kr, const uint4 *vr, int tid)
{
    __local bits_of *kt = (__local bits_of *)slot, *vt = (__local bits_of *)(slot + KT_BYTES);
    #pragma unroll
    for (int u = 0; u < TILE_LOADS; u++) {
        int e = tid + u * DEC_WG;
        *(__local uint4 *)(kt + (e / OCTS) * KT_LD + (e % OCTS) * VEC) = kr[u];
        *(__local uint4 *)(vt + e * VEC) = vr[u];
    }
}

/* Scores of the staged tile's keys t0 .. into s (log2 units; hidden ones and keys past the
   chunk -inf) and sc: work-item (key j, group) takes every KT_GROUPS-th row, reading the key's
   row once for all of them and q (the same for a warp's work-items) by broadcast. A score
   above the row's running max mrun raises rmax. */
INLINE void score_tile(float *s, __local float (*sc)[T_KEYS], __local const uchar *tile,
                       __local const floatv (*qf)[OCTS], volatile __local int *rmax,
                       __local const float *mrun, int k0, int n, int t0, int i0, int rows, int Lq,
                       int diag, int tid)
{
    int j = tid % T_KEYS, grp = tid / T_KEYS;
    __local const bits_of *kt = (__local const bits_of *)tile + j * KT_LD;
    #pragma unroll
    for (int i = 0; i < KT_ROWS; i++) s[i] = 0.0f;
    #pragma unroll 2
    for (int c = 0; c < OCTS; c++) {
        floatv kv = LOCAL_PIECE(kt + c * VEC);
        #pragma unroll
        for (int i = 0; i < KT_ROWS; i++)
            if (grp + i * KT_GROUPS < ROWS) s[i] += DOTV(qf[grp + i * KT_GROUPS][c], kv);
    }
    #pragma unroll
    for (int i = 0; i < KT_ROWS; i++) {
        int r = grp + i * KT_GROUPS;
        if (r >= ROWS) continue;
        if (t0 + j >= n || r >= rows || hidden(k0 + t0 + j, (i0 + r) % Lq, diag)) s[i] = -INFINITY;
        sc[r][j] = s[i];
        if (s[i] > mrun[r]) atomic_max(&rmax[r], ordered_bits(s[i]));
    }
}

/* The scores in sc become probabilities against the rows' new maxima (rmax), and this
   work-item's share of each row's sum is rescaled to them (lsum: its rows, as in score_tile). */
INLINE void tile_probs(const float *s, float *lsum, __local float (*sc)[T_KEYS], volatile __local int *rmax,
                       __local const float *mrun, int tid)
{
    int j = tid % T_KEYS, grp = tid / T_KEYS;
    #pragma unroll
    for (int i = 0; i < KT_ROWS; i++) {
        int r = grp + i * KT_GROUPS;
        if (r >= ROWS) continue;
        float mn = ordered_float(rmax[r]), p = s[i] == -INFINITY ? 0.0f : exp2(s[i] - mn);
        lsum[i] = (mn == -INFINITY ? lsum[i] : lsum[i] * exp2(mrun[r] - mn)) + p;
        sc[r][j] = p;
    }
}

/* o[r] = o[r] rescaled to the new max + P[r][j] V[j] over the tile's keys: work-item (piece
   c, slice) takes piece c of every SLICES-th key. */
INLINE void tile_product(floatv *o, float *m, __local float (*sc)[T_KEYS], __local const uchar *tile,
                         volatile __local int *rmax, int n, int t0, int tid)
{
    int c = tid % OCTS, slice = tid / OCTS;
    __local const bits_of *vt = (__local const bits_of *)(tile + KT_BYTES) + c * VEC;
    #pragma unroll
    for (int r = 0; r < ROWS; r++) {
        float mn = ordered_float(rmax[r]);
        o[r] *= mn == -INFINITY ? 1.0f : exp2(m[r] - mn);
        m[r] = mn;
    }
    #pragma unroll
    for (int u = 0; u < TILE_LOADS; u++) {
        int j = slice + u * SLICES;
        if (t0 + j >= n) break;
        floatv vv = LOCAL_PIECE(vt + j * HEAD_DIM);
        #pragma unroll
        for (int r = 0; r < ROWS; r++) o[r] += sc[r][j] * vv;
    }
}

/* The online softmax over one staged tile (keys t0 .. of the chunk). */
typedef struct dec_state {
    floatv o[ROWS];   /* P V so far, against the running maxima m */
    float m[ROWS], s[KT_ROWS], lsum[KT_ROWS]; /* s, lsum: this work-item's scores and share of the sums */
} dec_state;

INLINE void tile_step(dec_state *st, __local float (*sc)[T_KEYS], __local const uchar *tile,
                      __local const floatv (*qf)[OCTS], volatile __local int *rmax, __local float *mrun,
                      int k0, int n, int t0, int i0, int rows, int Lq, int diag, int tid)
{
    score_tile(st->s, sc, tile, qf, rmax, mrun, k0, n, t0, i0, rows, Lq, diag, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
    tile_probs(st->s, st->lsum, sc, rmax, mrun, tid);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid < ROWS) mrun[tid] = ordered_float(rmax[tid]);
    tile_product(st->o, st->m, sc, tile, rmax, n, t0, tid);
}

/* The slices' sums of o meet in local memory (the stage, which holds RB rows of every
   work-item's piece at a time: RB divides ROWS) and go out as the split's partial result. */
#define RB_MAX (STAGE_BYTES / (DEC_WG * VEC * 4))
#define RB (ROWS <= RB_MAX ? ROWS : ROWS / 2 <= RB_MAX ? ROWS / 2 : ROWS / 4 <= RB_MAX ? ROWS / 4 : 1)
INLINE void decode_store(__global float *out, long row_st, const floatv *o, __local float *po, int rows,
                         int tid)
{
    int c = tid % OCTS, slice = tid / OCTS;
    #pragma unroll
    for (int r0 = 0; r0 < ROWS; r0 += RB) {
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int r = 0; r < RB; r++)
            *(__local floatv *)(po + ((slice * RB + r) * OCTS + c) * VEC) = o[r0 + r];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = tid; e < RB * HEAD_DIM; e += DEC_WG) {
            int r = e / HEAD_DIM, d = e % HEAD_DIM;
            float t = 0.0f;
            for (int sl = 0; sl < SLICES; sl++) t += po[(sl * RB + r) * HEAD_DIM + d];
            if (r0 + r < rows) out[(r0 + r) * row_st + d] = t;
        }
    }
}

/* part, tickets: attention.h's decode_block; a counter a row block. */
__kernel __attribute__((reqd_work_group_size(DEC_WG, 1, 1))) void attn_decode(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, __global float *part,
    volatile __global uint *tickets, int Hq, int group, int Lq, int Lk, int diag, float scale2, int chunk)
{
    __local floatv qf[ROWS][OCTS];
    __local float sc[ROWS][T_KEYS];
    __local uchar stage[STAGE_BYTES] __attribute__((aligned(PIECE_BYTES)));
    __local int rmax[ROWS];
    __local float mrun[ROWS];
    __local uint last;
    int tid = get_local_id(0);
    dec_block blk = decode_block(Hq, group, Lq, Lk, diag, chunk);
    int k0 = blk.k0, n = blk.n, i0 = blk.i0, rows = blk.rows;
    for (int e = tid; e < ROWS * HEAD_DIM; e += DEC_WG) {
        int r = e / HEAD_DIM, d = e % HEAD_DIM;
        __global const elem_t *qp = q + decode_row(q_off, q_st, &blk, group, Lq, i0 + min(r, rows - 1));
        ((__local float *)qf)[e] = r < rows ? LOAD(qp, d * q_st.s3) * scale2 : 0.0f;
    }
    if (tid < ROWS) rmax[tid] = ordered_bits(-INFINITY), mrun[tid] = -INFINITY;

    __global const elem_t *kh = k + HEAD(k, blk.b, blk.g), *vh = v + HEAD(v, blk.b, blk.g);
    dec_state st;
    #pragma unroll
    for (int r = 0; r < ROWS; r++) st.m[r] = -INFINITY, st.o[r] = (floatv)(0.0f);
    #pragma unroll
    for (int i = 0; i < KT_ROWS; i++) st.lsum[i] = 0.0f;
    uint4 kr[TILE_LOADS], vr[TILE_LOADS];
    if (n > 0) load_tile(kr, vr, kh, k_st.s2, k_st.s3, vh, v_st.s2, v_st.s3, k0, n, 0, tid);
    for (int t0 = 0; t0 < n; t0 += T_KEYS) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_tile(stage, kr, vr, tid);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t0 + T_KEYS < n) load_tile(kr, vr, kh, k_st.s2, k_st.s3, vh, v_st.s2, v_st.s3, k0, n, t0 + T_KEYS, tid);
        tile_step(&st, sc, stage, qf, rmax, mrun, k0, n, t0, i0, rows, Lq, diag, tid);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float l[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; r++) {
        l[r] = 0.0f;
        #pragma unroll
        for (int i = 0; i < KT_ROWS; i++)
            if (tid / T_KEYS + i * KT_GROUPS == r) l[r] += st.lsum[i];
    }
    rows_sum(l, (__local float (*)[DEC_WG])stage, tid);
    __global float *out = decode_part(part, &blk);
    long row_st = (long)blk.splits * PART;
    decode_store(out, row_st, st.o, (__local float *)stage, rows, tid);
    if (tid == 0)
        #pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (r < rows) out[r * row_st + HEAD_DIM] = st.m[r], out[r * row_st + HEAD_DIM + 1] = l[r];
    if (split_last(tickets + get_group_id(0), blk.splits, &last))
        decode_merge(out - (long)blk.split * PART, o, o_off, o_st, lse, lse_off, lse_st, (__local float *)stage,
                     &blk, group, Lq, tid, DEC_WG);
}
#endif
