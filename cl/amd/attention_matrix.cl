/* Fused attention forward (FlashAttention-2) on AMD CDNA matrix cores: attn_fwd_matrix computes
   what attn_fwd of cl/attention.cl computes (same arguments, causal top-left, grouped-query
   heads, lse), for f16 and bf16 storage on v_mfma_f32_32x32x8 and f32 on v_mfma_f32_32x32x2,
   through cl/amd/matrix.h. As there, the Lq x Lk scores never leave the chip.

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

   Compile-time constants: HEAD_DIM (a multiple of 32), BLOCK_M (32 x the waves), BLOCK_N (a
   multiple of 32), WAVE (64), MATRIX_MFMA32, the dtype (common.h), ATTN_FWD, and AMD_EMULATE
   on PoCL. */
#include "attention.h"

#if defined(DTYPE_F32)
#define A_DTYPE F32
#elif defined(DTYPE_BF16)
#define A_DTYPE BF16
#else
#define A_DTYPE F16
#endif
#define WG (BLOCK_M / 32 * WAVE)
#include "amd/matrix.h"

#if !defined(MATRIX_MFMA32)
#error "attn_fwd_matrix runs on MFMA"
#endif

#define NB (BLOCK_N / 32)          /* 32-key slices of a streamed block */
#define DB (HEAD_DIM / 32)         /* 32-dim slices of the head dimension */
#define DSTEPS (HEAD_DIM / INSN_K) /* instruction steps over the head dimension */
#define KSTEPS (32 / INSN_K)       /* instruction steps over a 32-key slice */
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

/* The keys n0 .. n0 + keys of K (rows) and V (transposed) into local memory; rows past keys
   zero-filled. */
INLINE void stage_kv(__local operand_t *ks, __local operand_t *vt, __global const operand_t *kg,
                     long k_rs, long k_ds, __global const operand_t *vg, long v_rs, long v_ds,
                     int keys, int tid)
{
    for (int e = tid; e < BLOCK_N * HEAD_DIM; e += WG) {
        int r = e / HEAD_DIM, d = e % HEAD_DIM, ok = r < keys;
        ks[r * LDD + d] = ok ? kg[r * k_rs + d * k_ds] : 0;
        vt[d * LDN + r] = ok ? vg[r * v_rs + d * v_ds] : 0;
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void attn_fwd_matrix(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, int Hq,
    int group, int Lq, int Lk, int causal, float scale2)
{
    __local operand_t ks[BLOCK_N * LDD], vt[HEAD_DIM * LDN];
    MATRIX_SCRATCH;
    int tid = get_local_id(0), lane = tid % WAVE, col = lane % 32;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, causal);
    int rows = min(BLOCK_M, Lq - m0), n_end = causal ? min(Lk, m0 + rows) : Lk;
    int query = m0 + tid / WAVE * 32 + col;
    __global const operand_t *kg = (__global const operand_t *)k + HEAD(k, b, h / group);
    __global const operand_t *vg = (__global const operand_t *)v + HEAD(v, b, h / group);

    /* B fragments of the wave's queries over the head dimension: Q^T[d][query]. */
    frag_t qf[DSTEPS];
    {
        __global const operand_t *qg = (__global const operand_t *)q + HEAD(q, b, h) + (long)query * q_st.s2;
        #pragma unroll
        for (int s = 0; s < DSTEPS; s++) {
            operand_t *f = (operand_t *)&qf[s];
            #pragma unroll
            for (int e = 0; e < FRAG_K; e++)
                f[e] = query < Lq ? qg[(s * INSN_K + FRAG_K0(lane) + e) * q_st.s3] : 0;
        }
    }

    acc_t acc[DB];
    #pragma unroll
    for (int i = 0; i < DB; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_kv(ks, vt, kg + (long)n0 * k_st.s2, k_st.s2, k_st.s3, vg + (long)n0 * v_st.s2, v_st.s2,
                 v_st.s3, min(BLOCK_N, Lk - n0), tid);
        barrier(CLK_LOCAL_MEM_FENCE);

        acc_t s[NB];
        float mx = -INFINITY;
        #pragma unroll
        for (int j = 0; j < NB; j++) {
            s[j] = 0.0f;
            __local const operand_t *kr = ks + (j * 32 + FRAG_ROW(lane)) * LDD + FRAG_K0(lane);
            #pragma unroll
            for (int st = 0; st < DSTEPS; st++) {
                frag_t kf = LOAD_FRAG(kr + st * INSN_K);
                MATRIX_MMA(kf, qf[st], s[j]);
            }
            float *sv = (float *)&s[j];
            #pragma unroll
            for (int r = 0; r < ACC_N; r++) {
                int key = n0 + j * 32 + ACC_ROW(lane, r);
                sv[r] = key < Lk && !(causal && key > query) ? sv[r] * scale2 : -INFINITY;
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
            for (int t = 0; t < KSTEPS; t++) {
                frag_t pf;
                operand_t *pe = (operand_t *)&pf;
                #pragma unroll
                for (int e = 0; e < FRAG_K; e++) {
                    float p = exp2(sv[t * FRAG_K + e] - base);
                    l += p;
                    pe[e] = to_operand(p);
                }
                /* The keys of this step, in the order the lane's accumulators hold them. */
                __local const operand_t *vr = vt + FRAG_ROW(lane) * LDN + j * 32 + ACC_ROW(lane, t * FRAG_K);
                #pragma unroll
                for (int i = 0; i < DB; i++) {
                    frag_t vf = LOAD_FRAG(vr + i * 32 * LDN);
                    MATRIX_MMA(vf, pf, acc[i]);
                }
            }
        }
    }

    /* Queries with no key at all (Lk = 0) get o = 0 and lse = -inf, as an empty softmax would. */
    float sum = l + MATRIX_PAIR(l), inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (query >= Lq) return;
    if (lse && lane < 32)
        lse[lse_off + b * lse_st.s0 + h * lse_st.s1 + query * lse_st.s2] = sum > 0.0f ? (m + log2(sum)) * LN2 : -INFINITY;
    __global elem_t *out = o + HEAD(o, b, h) + (long)query * o_st.s2;
    #pragma unroll
    for (int i = 0; i < DB; i++) {
        const float *av = (const float *)&acc[i];
        #pragma unroll
        for (int r = 0; r < ACC_N; r++) STORE(out, (i * 32 + ACC_ROW(lane, r)) * o_st.s3, av[r] * inv);
    }
}
