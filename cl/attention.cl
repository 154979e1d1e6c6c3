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
   B x Hq work-groups and leave most of a GPU idle; here the keys are split instead. A
   work-group takes ROWS query rows of one kv head (rows i = (query head within the group) x Lq
   + query; every query head of a group reads the same K and V, so each is read once for all
   of them: the traffic is the KV cache's size, which bounds decoding) and a chunk of `chunk`
   keys. It scores the chunk into local memory, takes the chunk's softmax against the chunk's
   own row max, and writes an unnormalised partial output with that max and sum;
   attn_decode_merge rescales the splits into o and lse, in split order (deterministic).
   Causal masks as the forward does (hidden() in attention.h; the host passes Lk for no mask).

   Decoding is bound by reading K and V, so both are read in whole 16-byte pieces (VEC
   elements) by neighbouring work-items, a row by OCTS of them, with several pieces in flight a
   work-item: K through a local tile (the next tile's loads are issued before the current one
   is scored, so that they overlap), V straight into the P V sums.

   Compile-time constants: HEAD_DIM, ROWS (1 to 8), the dtype, DENSE_D when k and v have a
   contiguous head dimension, ALIGNED_KV when every row of them also starts on 16 bytes. */
#define DEC_WG 128
#define DEC_SCORES 4096             /* floats of scores a work-group holds: ROWS x its chunk */
#define PART (HEAD_DIM + 2)         /* a partial result: o (unnormalised), max, sum */
#define PIECE_BYTES 16
#define VEC (PIECE_BYTES / (int)sizeof(elem_t)) /* elements of a 16-byte piece */
#define OCTS (HEAD_DIM / VEC)       /* pieces of a row */
#define SLICES (DEC_WG / OCTS)      /* rows of V read at once by P V */
#define V_LOADS 16                  /* rows of V in flight a work-item */
/* K tile: 16 KB of keys (at most 128), each row padded by one piece so that neighbouring
   keys' rows start in different banks; every work-item loads K_LOADS pieces of it. */
#define KT_KEYS (16384 / (HEAD_DIM * (int)sizeof(elem_t)) < 128 ? 16384 / (HEAD_DIM * (int)sizeof(elem_t)) : 128)
#define KT_LD (HEAD_DIM + VEC)
#define K_LOADS (KT_KEYS * OCTS / DEC_WG)
#define KT_GROUPS (DEC_WG / KT_KEYS) /* work-items that score one key, a share of the rows each */
#define KT_ROWS ((ROWS + KT_GROUPS - 1) / KT_GROUPS)

/* Pieces as raw bits (bits_of) and as floats (floatv), from global or local memory. */
#if defined(DTYPE_F32)
typedef uint bits_of;
typedef uint4 piece_bits;
typedef float4 floatv;
#define DOTV(a, b) dot(a, b)
#define LOCAL_PIECE(p) as_float4(*(__local const uint4 *)(p))
#define ALIGNED_PIECE(p) (*(const __global float4 *)(p))
#define DENSE_PIECE(p) vload4(0, p)
#define RAW_DENSE(p) vload4(0, (const __global uint *)(p))
#define GATHER(t, a, b, c, d, e, f, g, h) (t)(a, b, c, d) /* the first VEC of eight strided loads */
#else
typedef ushort bits_of;
typedef ushort8 piece_bits;
typedef float8 floatv;
#define DOTV(a, b) (dot((a).lo, (b).lo) + dot((a).hi, (b).hi))
#define RAW_DENSE(p) vload8(0, (const __global ushort *)(p))
#define GATHER(t, a, b, c, d, e, f, g, h) (t)(a, b, c, d, e, f, g, h)
#if defined(DTYPE_F16)
#define LOCAL_PIECE(p) vloada_half8(0, (__local const half *)(p))
#define ALIGNED_PIECE(p) vloada_half8(0, p)
#define DENSE_PIECE(p) vload_half8(0, p)
#else
#define LOCAL_PIECE(p) bf16x8_to_f32(*(__local const ushort8 *)(p))
#define ALIGNED_PIECE(p) bf16x8_to_f32(*(const __global ushort8 *)(p))
#define DENSE_PIECE(p) bf16x8_to_f32(vload8(0, p))
#endif
#endif

/* Piece c of a row, raw (for the local tile) and as floats (ds: the head dimension's stride). */
INLINE piece_bits raw_piece(__global const elem_t *row, int c, long ds)
{
#if defined(ALIGNED_KV)
    return *(const __global piece_bits *)(row + c * VEC);
#elif defined(DENSE_D)
    return RAW_DENSE(row + c * VEC);
#else
    __global const bits_of *p = (__global const bits_of *)row + c * VEC * ds;
    return GATHER(piece_bits, p[0], p[ds], p[2 * ds], p[3 * ds], p[4 * ds], p[5 * ds], p[6 * ds], p[7 * ds]);
#endif
}

INLINE floatv float_piece(__global const elem_t *row, int c, long ds)
{
#if defined(ALIGNED_KV)
    return ALIGNED_PIECE(row + c * VEC);
#elif defined(DENSE_D)
    return DENSE_PIECE(row + c * VEC);
#else
    row += c * VEC * ds;
    return GATHER(floatv, LOAD(row, 0), LOAD(row, ds), LOAD(row, 2 * ds), LOAD(row, 3 * ds), LOAD(row, 4 * ds),
                  LOAD(row, 5 * ds), LOAD(row, 6 * ds), LOAD(row, 7 * ds));
#endif
}

/* x[r] = the work-group's max (or sum) of x[r] over its work-items, for every row. */
INLINE void rows_reduce(float *x, __local float (*red)[DEC_WG], int tid, int is_max)
{
    #pragma unroll
    for (int r = 0; r < ROWS; r++) red[r][tid] = x[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = DEC_WG / 2; step > 0; step /= 2) {
        if (tid < step)
            #pragma unroll
            for (int r = 0; r < ROWS; r++)
                red[r][tid] = is_max ? fmax(red[r][tid], red[r][tid + step]) : red[r][tid] + red[r][tid + step];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    #pragma unroll
    for (int r = 0; r < ROWS; r++) x[r] = red[r][0];
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* This work-item's pieces of the K tile at key t0 of the chunk (n keys from k0: rows past the
   chunk repeat its last one, so that no load leaves the tensor; their scores are dropped). */
INLINE void load_k_tile(piece_bits *kr, __global const elem_t *kh, long rs, long ds, int k0, int n,
                        int t0, int tid)
{
    #pragma unroll
    for (int u = 0; u < K_LOADS; u++) {
        int e = tid + u * DEC_WG, j = min(t0 + e / OCTS, n - 1);
        kr[u] = raw_piece(kh + (long)(k0 + j) * rs, e % OCTS, ds);
    }
}

/* Scores of the staged tile's keys t0 .. into sc (scaled to log2 units; hidden ones -inf):
   work-item (key j, group) takes every KT_GROUPS-th row, reading the key's row from the tile
   once for all of them and q (the same for a warp's work-items) by broadcast. */
INLINE void score_k_tile(__local float (*sc)[DEC_SCORES / ROWS], __local const bits_of *kt,
                         __local const floatv (*qf)[OCTS], int k0, int n, int t0, int i0, int rows,
                         int Lq, int diag, int tid)
{
    int j = tid % KT_KEYS, grp = tid / KT_KEYS;
    if (t0 + j >= n) return;
    float s[KT_ROWS];
    #pragma unroll
    for (int i = 0; i < KT_ROWS; i++) s[i] = 0.0f;
    for (int c = 0; c < OCTS; c++) {
        floatv kv = LOCAL_PIECE(kt + j * KT_LD + c * VEC);
        #pragma unroll
        for (int i = 0; i < KT_ROWS; i++)
            if (grp + i * KT_GROUPS < ROWS) s[i] += DOTV(qf[grp + i * KT_GROUPS][c], kv);
    }
    #pragma unroll
    for (int i = 0; i < KT_ROWS; i++) {
        int r = grp + i * KT_GROUPS;
        if (r < ROWS) sc[r][t0 + j] = r < rows && !hidden(k0 + t0 + j, (i0 + r) % Lq, diag) ? s[i] : -INFINITY;
    }
}

/* Every row's scores of the chunk's n keys, a K tile at a time. */
INLINE void decode_scores(__local float (*sc)[DEC_SCORES / ROWS], __local bits_of *kt,
                          __local const floatv (*qf)[OCTS], __global const elem_t *kh, long rs,
                          long ds, int k0, int n, int i0, int rows, int Lq, int diag, int tid)
{
    piece_bits kr[K_LOADS];
    if (n > 0) load_k_tile(kr, kh, rs, ds, k0, n, 0, tid);
    for (int t0 = 0; t0 < n; t0 += KT_KEYS) {
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int u = 0; u < K_LOADS; u++) {
            int e = tid + u * DEC_WG;
            *(__local piece_bits *)(kt + (e / OCTS) * KT_LD + (e % OCTS) * VEC) = kr[u];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t0 + KT_KEYS < n) load_k_tile(kr, kh, rs, ds, k0, n, t0 + KT_KEYS, tid);
        score_k_tile(sc, kt, qf, k0, n, t0, i0, rows, Lq, diag, tid);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* o[r] += P[r][j] V[j] over the chunk's n keys: work-item (piece c, slice) reads piece c of
   V_LOADS rows at a time, every load before the multiplies. */
INLINE void decode_product(floatv *o, __local float (*sc)[DEC_SCORES / ROWS], __global const elem_t *vh,
                           long rs, long ds, int k0, int n, int tid)
{
    int c = tid % OCTS, slice = tid / OCTS;
    for (int j0 = slice; j0 < n; j0 += V_LOADS * SLICES) {
        floatv vv[V_LOADS];
        #pragma unroll
        for (int u = 0; u < V_LOADS; u++)
            vv[u] = float_piece(vh + (long)(k0 + min(j0 + u * SLICES, n - 1)) * rs, c, ds);
        #pragma unroll
        for (int u = 0; u < V_LOADS; u++) {
            int j = j0 + u * SLICES;
            #pragma unroll
            for (int r = 0; r < ROWS; r++) o[r] += (j < n ? sc[r][min(j, n - 1)] : 0.0f) * vv[u];
        }
    }
}

/* The slices' sums of o meet in local memory (the scores' space, which holds RB rows of
   every work-item's piece at a time: RB divides ROWS, a power of two) and go out as the
   split's partial result. */
#define RB (DEC_SCORES / (DEC_WG * VEC) < ROWS ? DEC_SCORES / (DEC_WG * VEC) : ROWS)
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

/* Grid (B x Hkv x row blocks x DEC_WG, splits). part: (B, Hkv, group x Lq, splits, PART). */
__kernel __attribute__((reqd_work_group_size(DEC_WG, 1, 1))) void attn_decode(
    IN(q), IN(k), IN(v), __global float *part, int Hq, int group, int Lq, int Lk, int diag,
    float scale2, int chunk)
{
    __local floatv qf[ROWS][OCTS];
    __local float sc[ROWS][DEC_SCORES / ROWS] __attribute__((aligned(sizeof(floatv))));
    __local bits_of kt[KT_KEYS * KT_LD] __attribute__((aligned(PIECE_BYTES)));
    __local float red[ROWS][DEC_WG];
    int tid = get_local_id(0), Hkv = Hq / group, R = group * Lq, blocks = (R + ROWS - 1) / ROWS;
    int bg = get_group_id(0) / blocks, i0 = get_group_id(0) % blocks * ROWS, b = bg / Hkv, g = bg % Hkv;
    int split = get_group_id(1), splits = get_num_groups(1), rows = min(ROWS, R - i0), qmax = 0;
    for (int r = 0; r < rows; r++) qmax = max(qmax, (i0 + r) % Lq);
    /* Keys past the last one any of the rows sees are skipped. */
    int k0 = split * chunk, k1 = (int)clamp(min((long)k0 + chunk, (long)qmax + diag + 1), (long)k0, (long)Lk);
    int n = k1 - k0;
    for (int e = tid; e < ROWS * HEAD_DIM; e += DEC_WG) {
        int r = e / HEAD_DIM, d = e % HEAD_DIM, i = i0 + min(r, rows - 1), h = g * group + i / Lq;
        __global const elem_t *qp = q + HEAD(q, b, h) + (long)(i % Lq) * q_st.s2;
        ((__local float *)qf)[e] = r < rows ? LOAD(qp, d * q_st.s3) * scale2 : 0.0f;
    }
    decode_scores(sc, kt, qf, k + HEAD(k, b, g), k_st.s2, k_st.s3, k0, n, i0, rows, Lq, diag, tid);

    float m[ROWS], l[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (int j = tid; j < n; j += DEC_WG)
        #pragma unroll
        for (int r = 0; r < ROWS; r++) m[r] = fmax(m[r], sc[r][j]);
    rows_reduce(m, red, tid, 1);
    /* A row that sees no key of the chunk keeps max -inf and sum 0 (subtracting 0 gives P 0). */
    for (int j = tid; j < n; j += DEC_WG)
        #pragma unroll
        for (int r = 0; r < ROWS; r++) {
            float p = exp2(sc[r][j] - (m[r] == -INFINITY ? 0.0f : m[r]));
            sc[r][j] = p;
            l[r] += p;
        }
    rows_reduce(l, red, tid, 0);

    floatv o[ROWS];
    #pragma unroll
    for (int r = 0; r < ROWS; r++) o[r] = (floatv)(0.0f);
    decode_product(o, sc, v + HEAD(v, b, g), v_st.s2, v_st.s3, k0, n, tid);
    __global float *out = part + ((long)bg * R + i0) * splits * PART + (long)split * PART;
    decode_store(out, (long)splits * PART, o, &sc[0][0], rows, tid);
    if (tid == 0)
        #pragma unroll
        for (int r = 0; r < ROWS; r++)
            if (r < rows) out[(long)r * splits * PART + HEAD_DIM] = m[r], out[(long)r * splits * PART + HEAD_DIM + 1] = l[r];
}

/* Grid (B x Hq x Lq x HEAD_DIM): o[b, h, t, d] and lse from the splits' partial results, each
   rescaled from its own max to the common one. A row no split saw a key for gets o = 0 and
   lse = -inf, as the forward gives it. */
__kernel void attn_decode_merge(__global const float *part, int splits, OUT(o), __global float *lse,
                                long lse_off, long4 lse_st, int Hq, int group, int Lq)
{
    long gid = get_global_id(0), row = gid / HEAD_DIM;
    int d = (int)(gid % HEAD_DIM), t = (int)(row % Lq), bh = (int)(row / Lq), b = bh / Hq, h = bh % Hq;
    int Hkv = Hq / group, R = group * Lq, i = (h % group) * Lq + t;
    __global const float *in = part + (((long)b * Hkv + h / group) * R + i) * splits * PART;
    float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
    for (int s = 0; s < splits; s++) mx = fmax(mx, in[s * PART + HEAD_DIM]);
    if (mx != -INFINITY)
        for (int s = 0; s < splits; s++) {
            float w = exp2(in[s * PART + HEAD_DIM] - mx);
            sum += w * in[s * PART + HEAD_DIM + 1];
            acc += w * in[s * PART + d];
        }
    STORE(o, HEAD(o, b, h) + t * o_st.s2 + d * o_st.s3, sum > 0.0f ? acc / sum : 0.0f);
    if (lse && d == 0)
        lse[lse_off + b * lse_st.s0 + h * lse_st.s1 + t * lse_st.s2] = sum > 0.0f ? (mx + log2(sum)) * LN2 : -INFINITY;
}
#endif
