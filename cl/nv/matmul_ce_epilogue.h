/* Cross-entropy epilogues of the tensor-core matmul for linear + cross-entropy
   (cl/cross_entropy.cl has the maths): cl/nv/matmul_mma.cl includes this where its tile
   macros are defined, when the host builds it with EPI_CE_STATS or EPI_CE_GRAD. The logits
   z = x W^T of the tile never reach global memory. Column n of the product is vocabulary
   entry v0 + n; tgt holds each row's target (-1: ignored); bias (CE_BIAS) is in the operands'
   storage dtype; z is soft-capped (CE_CAP) as cap tanh(z / cap).
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
#ifndef CLKIT_NV_MATMUL_CE_EPILOGUE_H
#define CLKIT_NV_MATMUL_CE_EPILOGUE_H

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
   from offset 0. Single 2-byte stores would be twice the store instructions, in the epilogue
   that bounds the logits GEMM on short K (bench/journal/2026-11-25.md, eighth session, "What
   changed"). */
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

#endif
