/* Fused attention (FlashAttention-2) on NVIDIA tensor cores (sm_80+): attn_fwd_mma,
   attn_bwd_dkdv_mma and attn_bwd_dq_mma compute what the portable kernels of cl/attention.cl
   compute, for f16 or bf16 storage with f32 accumulation, and f32 storage through 3xTF32
   (below). As there, no score leaves the chip: the Lq x Lk scores and probabilities, which a
   naive attention writes to DRAM and reads back twice (O(L^2) traffic a head), live only in
   the accumulators of the mma; every input element is read once per block of rows that needs
   it and each output is written once. The host builds this file only for NVIDIA devices;
   the backward's attn_bwd_delta comes with cl/attention.h.

   A work-group of WARPS warps holds BLOCK_M rows (queries in the forward and dQ kernels, keys
   in the dK/dV kernel), each warp 16 * FRAG_M of them as mma A fragments resident in
   registers (with HELD_LOCAL: in local memory, read at every step), and streams the other
   side BLOCK_N rows at a time through local memory by cp.async. Every product is an m16n8k16
   mma (m16n8k8 TF32 for f32) whose operands come from ldmatrix: the held rows times the
   streamed rows transposed (S = q k^T, dP = dO v^T and their transposes) reads the streamed
   rows as they are, and a product over the streamed rows (P V, dS K, P^T dO, dS^T q) reads
   them through ldmatrix.trans (f32: 4-byte reads). Scores never touch local memory: the
   online softmax works on the accumulators (a row lives in the four lanes of a quad, reduced
   by shuffles), and P or dS goes from the accumulators straight into the A fragments of the
   next product, rounded to a 16-bit storage dtype as FlashAttention does (f32 keeps them
   f32). Exponentials use the hardware's ex2.approx (nv_exp2), as FlashAttention's do.

   The forward overlaps its copies as FlashAttention-2 does, with one K and one V buffer: V of
   key block j lands while the warps compute its scores, K of block j + 1 while they compute
   P V. The backward kernels double-buffer both streamed tiles. The host proves that q, k, v
   (and dO) have a contiguous head dimension and 16-byte-aligned strides and offsets.

   On sm_90 (-D WGMMA) the same passes run on warpgroup MMAs instead, fed by the TMA with
   -D TMA: attn_fwd_wgmma, attn_bwd_dkdv_wgmma, attn_bwd_dq_wgmma (the section "Hopper" below).
   Decoding (-D ATTN_DECODE) has its own kernel, attn_decode_mma.

   Compile-time constants: HEAD_DIM, BLOCK_M, BLOCK_N, WARPS, HELD_LOCAL, the dtype
   (common.h), ATTN_FWD, ATTN_BWD or ATTN_DECODE (the program's kernels), WGMMA and TMA. */
#include "attention.h"
#include "nv/mma.h"

#define MMA_WG (WARPS * 32)
#define FRAG_M (BLOCK_M / WARPS / 16)
#if defined(DTYPE_F32)
#define ESIZE 4             /* bytes an element */
#define KSTEP 8             /* head dims an mma step (m16n8k8) */
typedef uint raw_t;
#else
#define ESIZE 2
#define KSTEP 16            /* m16n8k16 */
typedef ushort raw_t;
#endif
#define CHUNK (16 / ESIZE)        /* elements a 16-byte chunk; an mma step covers two */
#define DCH (HEAD_DIM / CHUNK)    /* 16-byte chunks of a row */
#define DK (HEAD_DIM / KSTEP)     /* mma steps over the head dimension */
/* The wgmma backward's accumulators at head dims above 128 are 128 columns wide: dK/dV splits
   its outputs' columns over two work-groups (grid dimension 1), each recomputing the scores
   over the whole head dimension (dK and dV over all 256 would take 256 registers a lane); dQ
   keeps two such accumulators. */
#if defined(ATTN_BWD) && defined(WGMMA) && HEAD_DIM > 128
#define OUT_DIM 128
#else
#define OUT_DIM HEAD_DIM
#endif
#define DF (OUT_DIM / 8)          /* accumulator tiles across the output's columns */
#define NF (BLOCK_N / 8)          /* accumulator tiles across the streamed rows */
#define TILE_BYTES(rows) ((rows) * HEAD_DIM * ESIZE)
#if defined(DTYPE_F32)
/* f32 as 3xTF32 (nv_tf32_split). */
#define split nv_tf32_split
#define MMA3(d, ab, as, bb, bs) (nv_mma_tf32(d, as, bb), nv_mma_tf32(d, ab, bs), nv_mma_tf32(d, ab, bb))
#else
/* 16-bit operands go to the mma as they are: split only copies, and MMA3 is one mma. */
INLINE void split(uint *big, uint *small, const uint *x, int n)
{
    for (int i = 0; i < n; i++) big[i] = x[i], small[i] = 0;
}
#if defined(DTYPE_BF16)
#define MMA nv_mma_bf16
#define PACK nv_pack_bf16x2
#else
#define MMA nv_mma_f16
#define PACK nv_pack_f16x2
#endif
#define MMA3(d, ab, as, bb, bs) MMA(d, ab, bb)
#endif

typedef float held_acc[FRAG_M][DF][4];  /* rows held x head dimension */
typedef float score_acc[FRAG_M][NF][4]; /* rows held x rows streamed */
#if defined(HELD_LOCAL)
/* The held rows stay in their local-memory tile and each step reads their fragments by
   ldmatrix: for f32 at head dim 128, whose held fragments would take half the registers
   (the host sets it where local memory holds the held tiles beside the streamed ones, sm_90).
   held_frags is then a placeholder that nothing reads. */
typedef uint held_frags[1][1][4];
#define HELD_SPACE(bytes) (bytes)
#else
typedef uint held_frags[FRAG_M][DK][4];
#define HELD_SPACE(bytes) 0
#endif
/* Local memory of a kernel whose held tiles take `held` bytes and streamed ones `streamed`:
   the held tiles are read into registers before the streamed ones overwrite them, unless
   HELD_LOCAL keeps them. */
#define LOCAL_WORDS(held, streamed) ((HELD_SPACE(held) + MAX((held) - HELD_SPACE(held), streamed)) / 16)

/* rows x HEAD_DIM elements from src (row r at src + r * row_stride) into a swizzled tile;
   rows from `valid` on are zero-filled without reading. */
INLINE void copy_rows(__local uchar *tile, __global const raw_t *src, long row_stride, int rows,
                      int valid, int tid)
{
    for (int e = tid; e < rows * DCH; e += MMA_WG) {
        int r = e / DCH, c = e % DCH, ok = r < valid;
        nv_cp_async16(tile + nv_swizzle(r, c, DCH), src + (ok ? r * row_stride + c * CHUNK : 0), ok ? 16u : 0u);
    }
}

/* The A fragment of the warp's held rows wm + 16 i .. at mma step kd, from their tile. */
INLINE void held_frag(uint f[4], __local const uchar *tile, int wm, int i, int kd, int lane)
{
    int q = lane / 8, r = lane % 8;
    nv_ldmatrix_x4(f, tile + nv_swizzle(wm + i * 16 + (q % 2) * 8 + r, kd * 2 + q / 2, DCH));
}

/* The warp's held rows wm .. as A fragments over the whole head dimension (HELD_LOCAL: left
   in the tile). Its own loop rather than held_frag's: ptxas schedules the 16-bit kernels
   better so (253 against 255 registers for f16 at D 64). */
INLINE void load_held(held_frags f, __local const uchar *tile, int wm, int lane)
{
#if !defined(HELD_LOCAL)
    int q = lane / 8, r = lane % 8;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int kd = 0; kd < DK; kd++)
            nv_ldmatrix_x4(f[i][kd], tile + nv_swizzle(wm + i * 16 + (q % 2) * 8 + r, kd * 2 + q / 2, DCH));
#endif
}

/* s = held rows x (streamed rows in tile)^T, reducing over the head dimension. An mma step
   is two 16-byte chunks of a row in either dtype, so ldmatrix serves both: a 32-bit lane of
   an 8 x 8 b16 matrix is one f32 element, just where the m16n8k8 fragment wants it. */
INLINE void product_t(score_acc s, const held_frags a, __local const uchar *held, int wm,
                      __local const uchar *tile, int lane)
{
    int q = lane / 8, r = lane % 8;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int j = 0; j < NF; j++) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
    #pragma unroll
    for (int kd = 0; kd < DK; kd++) {
        uint ab[FRAG_M][4], as[FRAG_M][4];
        #pragma unroll
        for (int i = 0; i < FRAG_M; i++) {
#if defined(HELD_LOCAL)
            uint f[4];
            held_frag(f, held, wm, i, kd, lane);
            split(ab[i], as[i], f, 4);
#else
            split(ab[i], as[i], a[i][kd], 4);
#endif
        }
        #pragma unroll
        for (int j = 0; j < NF; j += 2) {
            uint f[4], fb[4], fs[4];
            nv_ldmatrix_x4(f, tile + nv_swizzle(j * 8 + (q / 2) * 8 + r, kd * 2 + q % 2, DCH));
            split(fb, fs, f, 4);
            #pragma unroll
            for (int i = 0; i < FRAG_M; i++) {
                MMA3(s[i][j], ab[i], as[i], fb, fs);
                MMA3(s[i][j + 1], ab[i], as[i], fb + 2, fs + 2);
            }
        }
    }
}

#if defined(DTYPE_F32)
/* acc += p x (streamed rows in tile), reducing over the streamed rows, 8 a step: p's
   accumulator tile kk becomes the A fragment with the step's k order permuted (k t is row
   2t, k t + 4 is row 2t + 1), so no value moves between lanes; the B values, a column of
   the streamed rows that ldmatrix cannot transpose at 32 bits, come by one 4-byte read each
   (rows 2t and 2t + 1 of the swizzled tile fall in distinct banks).
   The block's products go into a fresh tile that an f32 add takes into acc, as matmul's
   3xTF32 does: the mma truncates the sum it adds into, and fed acc itself, across every block
   of a long row, that drifted, the error growing with the row far past f32 attention's
   (bench/journal/2026-11-25.md, "Attention f32: the same drift, fixed").
   The forward's rescaling of acc rides on that add (acc = acc * alpha + sum, one fma). */
INLINE void rescale_product(held_acc acc, const float alpha[FRAG_M][2], const score_acc p,
                            __local const uchar *tile, int lane)
{
    int g = lane / 4, t = lane % 4;
    uint ab[NF][FRAG_M][4], as[NF][FRAG_M][4];
    #pragma unroll
    for (int kk = 0; kk < NF; kk++)
        #pragma unroll
        for (int i = 0; i < FRAG_M; i++) {
            uint a[4] = {as_uint(p[i][kk][0]), as_uint(p[i][kk][2]), as_uint(p[i][kk][1]), as_uint(p[i][kk][3])};
            split(ab[kk][i], as[kk][i], a, 4);
        }
    #pragma unroll
    for (int dj = 0; dj < DF; dj++) {
        int c = dj * 2 + g / 4, w = (g % 4) * 4;
        float sum[FRAG_M][4];
        #pragma unroll
        for (int i = 0; i < FRAG_M; i++) sum[i][0] = sum[i][1] = sum[i][2] = sum[i][3] = 0.0f;
        #pragma unroll
        for (int kk = 0; kk < NF; kk++) {
            uint f[2], fb[2], fs[2];
            f[0] = *(__local const uint *)(tile + nv_swizzle(kk * 8 + 2 * t, c, DCH) + w);
            f[1] = *(__local const uint *)(tile + nv_swizzle(kk * 8 + 2 * t + 1, c, DCH) + w);
            split(fb, fs, f, 2);
            #pragma unroll
            for (int i = 0; i < FRAG_M; i++) MMA3(sum[i], ab[kk][i], as[kk][i], fb, fs);
        }
        #pragma unroll
        for (int i = 0; i < FRAG_M; i++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[i][dj][e] = fma(acc[i][dj][e], alpha[i][e / 2], sum[i][e]);
    }
}
#else
/* acc = acc * alpha (a factor a held row) + p x (streamed rows in tile), reducing over the
   streamed rows: p's accumulators become A fragments (tiles 2kk and 2kk + 1 are the 16
   columns of step kk). */
INLINE void rescale_product(held_acc acc, const float alpha[FRAG_M][2], const score_acc p,
                            __local const uchar *tile, int lane)
{
    int q = lane / 8, r = lane % 8;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int dj = 0; dj < DF; dj++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[i][dj][e] *= alpha[i][e / 2];
    #pragma unroll
    for (int kk = 0; kk < NF / 2; kk++) {
        uint a[FRAG_M][4];
        #pragma unroll
        for (int i = 0; i < FRAG_M; i++) {
            a[i][0] = PACK(p[i][2 * kk][0], p[i][2 * kk][1]);
            a[i][1] = PACK(p[i][2 * kk][2], p[i][2 * kk][3]);
            a[i][2] = PACK(p[i][2 * kk + 1][0], p[i][2 * kk + 1][1]);
            a[i][3] = PACK(p[i][2 * kk + 1][2], p[i][2 * kk + 1][3]);
        }
        #pragma unroll
        for (int dj = 0; dj < DF; dj += 2) {
            uint f[4];
            nv_ldmatrix_x4_trans(f, tile + nv_swizzle(kk * 16 + (q % 2) * 8 + r, dj + q / 2, DCH));
            #pragma unroll
            for (int i = 0; i < FRAG_M; i++) {
                MMA(acc[i][dj], a[i], f);
                MMA(acc[i][dj + 1], a[i], f + 2);
            }
        }
    }
}
#endif

/* acc += p x (streamed rows in tile): the backward's products, whose sums are not rescaled. */
INLINE void product_n(held_acc acc, const score_acc p, __local const uchar *tile, int lane)
{
    float one[FRAG_M][2];
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++) one[i][0] = one[i][1] = 1.0f;
    rescale_product(acc, one, p, tile, lane);
}

/* Accumulator element e of tile (i, j): held row row0 + 16 i + 8 (e / 2), streamed row
   col0 + 8 j + e % 2, where row0 and col0 are the lane's. Sets to -inf the scores at or past
   `limit` across, or of a key hidden from its query (cl/attention.h's hidden). */
INLINE void mask_acc(score_acc s, int row0, int col0, int limit, int diag, int keys_across)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int j = 0; j < NF; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = row0 + i * 16 + (e / 2) * 8, c = col0 + j * 8 + e % 2;
                int masked = keys_across ? hidden(c, r, diag) : hidden(r, c, diag);
                if (c >= limit || masked) s[i][j][e] = -INFINITY;
            }
}

/* Stores acc * mul for held rows from row0 (the lane's) below `rows`, into out (row stride rs,
   column stride ds). */
INLINE void store_held(__global elem_t *out, long rs, long ds, const held_acc acc, int row0,
                       int col0, int rows, float mul)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = row0 + i * 16 + (e / 2) * 8;
            if (r >= rows) continue;
            #pragma unroll
            for (int dj = 0; dj < DF; dj++)
                STORE(out, r * rs + (col0 + dj * 8 + e % 2) * ds, mul * acc[i][dj][e]);
        }
}

INLINE void zero_held(held_acc acc)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int dj = 0; dj < DF; dj++) acc[i][dj][0] = acc[i][dj][1] = acc[i][dj][2] = acc[i][dj][3] = 0.0f;
}

INLINE float quad_max(float x) { x = fmax(x, nv_shfl_xor(x, 1)); return fmax(x, nv_shfl_xor(x, 2)); }
INLINE float quad_sum(float x) { x += nv_shfl_xor(x, 1); return x + nv_shfl_xor(x, 2); }

#if defined(WGMMA)
/* ---- Hopper: the forward and backward on wgmma (-D WGMMA, sm_90; the host retargets the PTX
   to sm_90a) ----

   Each warpgroup (four warps) holds 64 rows of the block (queries in the forward and dQ
   kernels, keys in dK/dV), WARPS / 4 warpgroups in all. Every product is a warpgroup MMA: a
   product with the head dimension reduced (S = q K^T, dP = dO V^T and their transposes) reads
   the held rows and the streamed block from local memory through descriptors, and a product
   over the streamed rows (P V, dS K, P^T dO, dS^T q) takes its A operand from the registers
   (the score accumulators become its fragments, as in the mma.sync kernels) and the streamed
   rows from local memory, so no operand passes through a fragment load. Every tile is
   stored in wgmma's 128-byte swizzle, cut into panels of 64 head dims (128 bytes a row): the
   first product's operands are K-major (the head dimension reduced), the second's streamed
   rows an N-major operand read with the transpose flag. Streamed blocks are double-buffered:
   block j + 1 lands while the warps compute block j. */
#define PANEL_BYTES(rows) ((rows) * 128)
#if defined(DTYPE_BF16)
#define WG_TYPE ".bf16.bf16"
#else
#define WG_TYPE ".f16.f16"
#endif

/* rows x HEAD_DIM elements from src (row r at src + r * row_stride) into a tile of panels;
   rows from `valid` on are zero-filled without reading. Every work-item takes the same number
   of chunks: the tiles cp.async loads (BLOCK_M and BLOCK_N rows; the host's wgmma_bwd_copy in
   the backward) divide into the work-group. */
#if !defined(TMA) && ((BLOCK_M * DCH) % MMA_WG || (BLOCK_N * DCH) % MMA_WG)
#error "copy_panels: a tile's 16-byte chunks must divide into the work-group"
#endif
INLINE void copy_panels(__local uchar *tile, __global const raw_t *src, long row_stride, int rows,
                        int valid, int tid)
{
    #pragma unroll
    for (int i = 0; i < rows * DCH / MMA_WG; i++) {
        int e = i * MMA_WG + tid, r = e / DCH, c = e % DCH, ok = r < valid;
        nv_cp_async16(tile + nv_wgmma_offset(r, c, rows),
                      src + (ok ? r * row_stride + c * CHUNK : 0), ok ? 16u : 0u);
    }
}

/* Keeps the compiler from touching an in-flight wgmma's accumulators (n of them) or A
   fragments (a product's BLOCK_N / 4) before the wait that ends it. */
INLINE void wg_pin(float *acc, int n)
{
    #pragma unroll
    for (int i = 0; i < n; i++) nv_pin(acc + i);
}

INLINE void wg_pin_frags(uint *a)
{
    #pragma unroll
    for (int i = 0; i < BLOCK_N / 4; i++) __asm__ volatile("" : "+r"(a[i]) :: "memory");
}

/* Issues s = (the warpgroup's 64 held rows, at held) x (the streamed block)^T: a 64 x BLOCK_N
   wgmma a 16 head dims, 32 bytes along a panel's rows; committed, not waited for. */
INLINE void wg_scores_issue(float *s, __local const uchar *held, __local const uchar *streamed)
{
    #pragma unroll
    for (int i = 0; i < BLOCK_N / 2; i++) s[i] = 0.0f;
    nv_wgmma_fence();
    #pragma unroll
    for (int kd = 0; kd < HEAD_DIM / 16; kd++) {
        ulong da = nv_wgmma_desc(held + (kd / 4) * PANEL_BYTES(BLOCK_M) + (kd % 4) * 32, 16, 1024);
        ulong db = nv_wgmma_desc(streamed + (kd / 4) * PANEL_BYTES(BLOCK_N) + (kd % 4) * 32, 16, 1024);
        CLKIT_CAT(NV_WGMMA_, BLOCK_N)(s, WG_TYPE, "0", "0", da, db);
    }
    nv_wgmma_commit();
}

INLINE void wg_scores(float *s, __local const uchar *held, __local const uchar *streamed)
{
    wg_scores_issue(s, held, streamed);
    NV_WGMMA_WAIT(0);
    wg_pin(s, BLOCK_N / 2);
}

/* Issues acc += P V: P's accumulator tiles 2kk and 2kk + 1 become (in a) the A fragment of the
   16 streamed rows of step kk; V (at vs, the streamed block) gives 16 rows of its panels a
   step, the panels PANEL_BYTES(BLOCK_N) apart along N. Committed, not waited for: acc and a
   stay untouched until the wait. */
INLINE void wg_product_issue(float *acc, uint *a, const float *p, __local const uchar *vs)
{
    #pragma unroll
    for (int i = 0; i < BLOCK_N / 8; i++) {
        a[2 * i] = PACK(p[4 * i], p[4 * i + 1]);
        a[2 * i + 1] = PACK(p[4 * i + 2], p[4 * i + 3]);
    }
    nv_wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; kk++) {
        ulong db = nv_wgmma_desc(vs + kk * 16 * 128, PANEL_BYTES(BLOCK_N), 1024);
        CLKIT_CAT(NV_WGMMA_RS_, OUT_DIM)(acc, WG_TYPE, "1", (a + 4 * kk), db);
    }
    nv_wgmma_commit();
}

/* acc += P V, waited for. */
INLINE void wg_product(float *acc, const float *p, __local const uchar *vs)
{
    uint a[BLOCK_N / 4];
    wg_product_issue(acc, a, p, vs);
    NV_WGMMA_WAIT(0);
    wg_pin(acc, OUT_DIM / 2);
    wg_pin_frags(a);
}

/* acc = acc * alpha + P V: the forward's step (no multiplies where both of the lane's rows
   keep their max: alpha 1). */
INLINE void wg_rescale_product(float *acc, const float alpha[2], const float *p,
                               __local const uchar *vs)
{
    if (alpha[0] != 1.0f || alpha[1] != 1.0f)
        #pragma unroll
        for (int i = 0; i < HEAD_DIM / 2; i++) acc[i] *= alpha[(i / 2) % 2];
    wg_product(acc, p, vs);
}

/* Held rows' accumulators times mul (rows of them valid) out to `out` (row stride rs) by way
   of local memory, in two steps around a barrier: stage_held puts each lane's element pairs
   into rows of 16-byte chunks swizzled by row (chunk c of row r at c ^ (r % 8): the eight
   rows of a warp's store hit distinct banks), store_rows then moves 16 bytes a work-item,
   whole rows coalesced. Element by element (store_held), the forward's o stores cost as much
   as a fifth of it at L 1024 (H200: 0.034 of 0.214 ms at D 64, 0.075 of 0.343 at D 128) and
   were not overlapped with anything. `tile`: TILE_BYTES(BLOCK_M) no warp reads any more;
   out's rows 16-byte aligned (the host's chunked_rows). */
#define ROWS_A_PASS (MMA_WG / (OUT_DIM / CHUNK))
#if ROWS_A_PASS % 8 || BLOCK_M % ROWS_A_PASS
#error "store_rows: a work-item's rows must be a multiple of 8 apart and cover BLOCK_M"
#endif
INLINE void stage_held(__local uchar *tile, const held_acc acc, float mul, int wm, int lane)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int r = wm + lane / 4 + i * 16 + hh * 8;
            #pragma unroll
            for (int dj = 0; dj < DF; dj++)
                *(__local uint *)(tile + r * (OUT_DIM * ESIZE) + ((dj ^ (r % 8)) * 16) + (lane % 4) * 4) =
                    PACK(mul * acc[i][dj][2 * hh], mul * acc[i][dj][2 * hh + 1]);
        }
}

/* Every warp is done with the held tiles, and no copy still lands in them (a walk of no blocks
   leaves the tiles' own cp.async in flight): their local memory may stage results. */
INLINE void held_tiles_free(void)
{
    NV_CP_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
}

INLINE void store_rows(__global elem_t *out, long rs, __local const uchar *tile, int rows, int tid)
{
    /* A work-item keeps one chunk column: its rows are ROWS_A_PASS apart, a multiple of 8,
       so the swizzle is the same in each and both addresses only step on. */
    int r = tid / (OUT_DIM / CHUNK), ch = tid % (OUT_DIM / CHUNK);
    __local const uchar *src = tile + r * (OUT_DIM * ESIZE) + ((ch ^ (r % 8)) * 16);
    __global elem_t *dst = out + r * rs + ch * CHUNK;
    #pragma unroll
    for (int i = 0; i < BLOCK_M / ROWS_A_PASS; i++, r += ROWS_A_PASS) {
        if (r < rows) *(__global uint4 *)dst = *(__local const uint4 *)src;
        src += ROWS_A_PASS * OUT_DIM * ESIZE, dst += ROWS_A_PASS * rs;
    }
}

#if defined(TMA)
/* ---- Loads by the TMA (-D TMA) ----

   Thread 0 issues each tile as boxes of 64 head dims (a panel) by up to BLOCK_N rows, in the
   layout copy_panels writes (the copy unit zero-fills rows past L as copy_panels does), and
   the warps wait on the tile's mbarrier instead of on copies of their own: no warp spends
   issue slots on the copies (16 a thread a key block at head dim 128 in the forward's
   cp.async loop). The tensor maps are built once a call by attn_tma_maps, one work-item a map,
   a kernel the host enqueues first, so that no work-group pays for building them. */
#define TMA_PARAMS , __global const ulong16 *maps
#if defined(ATTN_BWD)
#define TMA_MAPS 4   /* q, K, V, dO */
/* One set of maps serves both backward kernels, whose tiles differ (dK/dV streams 128 queries
   at D 64, dQ 64 keys): q's and dO's boxes are dK/dV's streamed rows, K's and V's dQ's (the
   host sets Q_BOX and KV_BOX, its bwd_boxes); alone, the smaller side of the tile. */
#if !defined(Q_BOX)
#define Q_BOX (BLOCK_M < BLOCK_N ? BLOCK_M : BLOCK_N)
#define KV_BOX Q_BOX
#endif
#else
#define TMA_MAPS 3   /* q, K, V */
#define Q_BOX BLOCK_M
#define KV_BOX BLOCK_N
#endif

/* The map of a [B, H, L, HEAD_DIM] view (offset and strides in elements): boxes of 64 head
   dims x `rows` positions of one head. A size-1 dimension's stride, 0 in the view, stands in
   as the dense one. */
INLINE void head_map(__global ulong16 *slot, __local ulong16 *stage, __global const elem_t *t, long off,
                     long4 st, int B, int H, int L, int rows)
{
    long sl = st.s2 ? st.s2 : HEAD_DIM, sh = st.s1 ? st.s1 : L * sl, sb = st.s0 ? st.s0 : H * sh;
    nv_tmap_fill(stage, t + off, 4, HEAD_DIM, (uint)max(L, 1), (uint)max(H, 1), (uint)max(B, 1),
                 (ulong)sl * ESIZE, (ulong)sh * ESIZE, (ulong)sb * ESIZE, (uint)rows);
    nv_tmap_store(slot, stage);
}

/* One work-item a map: q (boxes of Q_BOX rows), K and V (KV_BOX), and in the backward dO
   (Q_BOX; `dout` is q in the forward, whose program has no fourth map). */
__kernel __attribute__((reqd_work_group_size(TMA_MAPS, 1, 1))) void attn_tma_maps(
    IN(q), IN(k), IN(v), IN(dout), __global ulong16 *maps, int B, int Hq, int Hkv, int Lq, int Lk)
{
    __local ulong16 stage[TMA_MAPS];
    int i = get_local_id(0);
    if (i == 0) head_map(maps, stage, q, q_off, q_st, B, Hq, Lq, Q_BOX);
    if (i == 1) head_map(maps + 1, stage + 1, k, k_off, k_st, B, Hkv, Lk, KV_BOX);
    if (i == 2) head_map(maps + 2, stage + 2, v, v_off, v_st, B, Hkv, Lk, KV_BOX);
    if (i == 3) head_map(maps + 3, stage + 3, dout, dout_off, dout_st, B, Hq, Lq, Q_BOX);
}

/* Thread 0's start: n mbarriers, each completed by `tiles` tma_rows and their bytes, the maps
   acquired. */
INLINE void tma_init(__local ulong *bars, int n, int tiles, __global const ulong16 *maps)
{
    for (int i = 0; i < n; i++) nv_mbar_init(bars + i, (uint)tiles);
    nv_fence_proxy_async();
    for (int i = 0; i < TMA_MAPS; i++) nv_tmap_acquire(maps + i);
}

/* `rows` rows from `row` of head (h, b) of map's tensor (boxes of `box` rows), every panel,
   into tile; one of bar's arrivals. */
INLINE void tma_rows(__local uchar *tile, __global const ulong16 *map, int rows, int box, int row, int h,
                     int b, __local ulong *bar)
{
    nv_mbar_expect(bar, TILE_BYTES(rows));
    #pragma unroll
    for (int p = 0; p < HEAD_DIM / 64; p++)
        #pragma unroll
        for (int r = 0; r < rows; r += box)
            nv_tma_load4(tile + p * PANEL_BYTES(rows) + r * 128, map, 64 * p, row + r, h, b, bar);
}
#else
#define TMA_PARAMS
#endif
#endif

#if defined(ATTN_FWD) || defined(ATTN_DECODE)
/* The wgmma forward keeps a row's m until a block's max passes it by more than RESCALE_SLACK
   (log2 units, as FlashAttention-4 does): P is then at most 2^8, which f16, bf16 and the f32
   sums hold as precisely as values below 1, and most blocks after the first few leave o_scale at 1, so that
   wg_rescale_product skips the output's multiplies. o and lse are the same either way: l and
   o carry the same m. H200, ms, one call: f16 D 128 L 1k / 2k / 4k / causal 4k 0.263 / 0.478 /
   0.915 / 0.487 -> 0.253 / 0.457 / 0.875 / 0.467, bf16 causal 0.489 -> 0.472; D 64 (32
   output registers a lane against 64) unchanged. */
#if defined(WGMMA) && defined(ATTN_FWD)
#define RESCALE_SLACK 8.0f
#else
#define RESCALE_SLACK 0.0f
#endif

/* One step of the online softmax on the accumulators: s (raw scores) becomes
   P = 2^(s scale2 - m) with m the new row max (or the old one, within RESCALE_SLACK); the
   lane's partial row sums l are rescaled by 2^(m_old - m_new), and o_scale receives that
   factor for the output rows, which rescale_product applies as it adds P V. Half h of a
   tile's elements is row 8 h. */
INLINE void softmax_acc(score_acc s, float m[FRAG_M][2], float l[FRAG_M][2], float o_scale[FRAG_M][2],
                        float scale2)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
            #pragma unroll
            for (int j = 0; j < NF; j++) mx = fmax(mx, fmax(s[i][j][2 * h], s[i][j][2 * h + 1]));
            float m_new = fmax(m[i][h], quad_max(mx) * scale2);
            if (m_new <= m[i][h] + RESCALE_SLACK) m_new = m[i][h];
            /* A row with no visible key yet keeps m = -inf: subtracting 0 makes exp2 give 0. */
            float base = m_new == -INFINITY ? 0.0f : m_new, alpha = exp2(m[i][h] - base);
            m[i][h] = m_new;
            l[i][h] *= alpha;
            o_scale[i][h] = alpha;
            #pragma unroll
            for (int j = 0; j < NF; j++)
                #pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; e++) {
                    s[i][j][e] = nv_exp2(fma(s[i][j][e], scale2, -base));
                    l[i][h] += s[i][j][e];
                }
        }
}

/* The forward's statistics: acc becomes o = acc / l, and lse = (m + log2 l) ln 2 is written
   for held rows below Lq. Rows with no key at all (Lk = 0) get o = 0 and lse = -inf, as an
   empty softmax would. */
INLINE void finish_stats(__global float *lse, long lse_head, long lse_row, held_acc acc,
                         const float m[FRAG_M][2], const float l[FRAG_M][2], int row0, int Lq, int lane)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float sum = quad_sum(l[i][hh]), inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            int r = row0 + i * 16 + hh * 8;
            if (lse && lane % 4 == 0 && r < Lq)
                lse[lse_head + r * lse_row] = sum > 0.0f ? (m[i][hh] + log2(sum)) * LN2 : -INFINITY;
            #pragma unroll
            for (int dj = 0; dj < DF; dj++) acc[i][dj][2 * hh] *= inv, acc[i][dj][2 * hh + 1] *= inv;
        }
}

/* The forward's end: its statistics, then o stored element by element. */
INLINE void finish_rows(__global elem_t *out, long4 out_st, __global float *lse, long lse_head,
                        long lse_row, held_acc acc, const float m[FRAG_M][2], const float l[FRAG_M][2],
                        int row0, int col_lane, int Lq, int lane)
{
    finish_stats(lse, lse_head, lse_row, acc, m, l, row0, Lq, lane);
    store_held(out, out_st.s2, out_st.s3, acc, row0, col_lane, Lq, 1.0f);
}

#if defined(ATTN_FWD) && !defined(WGMMA)
/* Grid (B x Hq x MMA_WG, query blocks). q's tile is read into registers once; its local
   memory then holds K and V (HELD_LOCAL: q stays, K and V go after it). */
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_fwd_mma(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, int Hq,
    int group, int Lq, int Lk, int diag, float scale2)
{
    __local uint4 words[LOCAL_WORDS(TILE_BYTES(BLOCK_M), 2 * TILE_BYTES(BLOCK_N))];
    __local uchar *qs = (__local uchar *)words, *ks = qs + HELD_SPACE(TILE_BYTES(BLOCK_M));
    __local uchar *vs = ks + TILE_BYTES(BLOCK_N);
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16 * FRAG_M;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    int row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4);
    __global const raw_t *kg = (__global const raw_t *)(k + HEAD(k, b, h / group));
    __global const raw_t *vg = (__global const raw_t *)(v + HEAD(v, b, h / group));
    copy_rows(qs, (__global const raw_t *)(q + HEAD(q, b, h) + m0 * q_st.s2), q_st.s2, BLOCK_M, rows, tid);
    nv_cp_async_commit();
    NV_CP_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    held_frags qf;
    load_held(qf, qs, wm, lane);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (n_end > 0) copy_rows(ks, kg, k_st.s2, BLOCK_N, min(BLOCK_N, Lk), tid);
    nv_cp_async_commit();

    float m[FRAG_M][2], l[FRAG_M][2];
    held_acc acc;
    zero_held(acc);
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++) m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.0f;
    for (int n0 = 0; n0 < n_end; n0 += BLOCK_N) {
        int keys = min(BLOCK_N, Lk - n0), next = n0 + BLOCK_N;
        copy_rows(vs, vg + n0 * v_st.s2, v_st.s2, BLOCK_N, keys, tid);
        nv_cp_async_commit();
        NV_CP_ASYNC_WAIT(1);
        barrier(CLK_LOCAL_MEM_FENCE);
        score_acc s;
        product_t(s, qf, qs, wm, ks, lane);
        if (keys < BLOCK_N || hidden(n0 + BLOCK_N - 1, m0, diag))
            mask_acc(s, row0, n0 + col_lane, Lk, diag, 1);
        float o_scale[FRAG_M][2];
        softmax_acc(s, m, l, o_scale, scale2);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < n_end) copy_rows(ks, kg + next * k_st.s2, k_st.s2, BLOCK_N, min(BLOCK_N, Lk - next), tid);
        nv_cp_async_commit();
        NV_CP_ASYNC_WAIT(1);
        barrier(CLK_LOCAL_MEM_FENCE);
        rescale_product(acc, o_scale, s, vs, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    finish_rows(o + HEAD(o, b, h), o_st, lse, lse_off + b * lse_st.s0 + h * lse_st.s1, lse_st.s2,
                acc, m, l, row0, col_lane, Lq, lane);
}
#endif

#if defined(ATTN_FWD) && defined(WGMMA)
#if defined(TMA)
/* mbarriers: q's, then K's and V's of each buffer. */
#define BAR_Q 0
#define BAR_K(j) (1 + (j) % 2)
#define BAR_V(j) (3 + (j) % 2)
#define BARS 5

/* The forward's loads: thread 0 issues q once and each key block's K and V, which land on
   separate mbarriers, so that the scores wait for K alone. Thread 0's start: the mbarriers,
   the maps acquired, q and key block 0 issued. */
INLINE void tma_start(__local uchar *qs, __local uchar *ks, __local uchar *vs, __global const ulong16 *maps,
                      __local ulong *bars, int m0, int h, int hk, int b, int n_end)
{
    tma_init(bars, BARS, 1, maps);
    tma_rows(qs, maps, BLOCK_M, Q_BOX, m0, h, b, bars + BAR_Q);
    if (n_end > 0) {
        tma_rows(ks, maps + 1, BLOCK_N, BLOCK_N, 0, hk, b, bars + BAR_K(0));
        tma_rows(vs, maps + 2, BLOCK_N, BLOCK_N, 0, hk, b, bars + BAR_V(0));
    }
}
#endif

/* Grid (B x Hq x query blocks x MMA_WG), in sectioned_block's order. Each product is waited for
   before the next: a version that overlapped the softmax with P V inside each warpgroup, as
   FlashAttention-3 does (the scores of block j + 1 issued before P_j V_j, P double-buffered),
   ran 3 % slower on an H200 (docs/attention.md): the two warpgroups already take turns on the
   tensor cores, and its extra registers cost more than the overlap gave. */
/* The forward's two work-groups a compute unit start together and, equal in work, would run
   their blocks in step: softmax beside softmax, products beside products. The host sets
   STAGGER_FROM and STAGGER_TO around the first wave's second work-group on each unit (groups
   CUs .. 2 CUs - 1: NVIDIA's scheduler places a grid's first groups one a unit, then a second
   round), which waits STAGGER_NS before it starts, so that one's softmax meets the other's
   products, as FlashAttention-3's ping-pong between warpgroups; each later work-group takes
   over the phase of the one it replaces. H200, f16, ms (L 1k / 2k / 4k at D 128, D 64 L 1k / 4k,
   causal D 64 / D 128): 0.2677 / 0.4896 / 0.9342, 0.1734 / 0.5922, 0.6260 / 0.4944 in step;
   0.2637 / 0.4798 / 0.9142, 0.1724 / 0.5872, 0.6213 / 0.4867 with 1.5 us; 3 us gained as much,
   6 us less (bench/results/2026-11-28-twentyseventh.md). */
#if defined(STAGGER_FROM)
#define STAGGER_NS 1500
INLINE void stagger(int tid)
{
    int group = (int)get_group_id(0);
    if (group < STAGGER_FROM || group >= STAGGER_TO) return;
    if (tid == 0) {
        ulong t0, t;
        __asm__ volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do __asm__ volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        while (t - t0 < STAGGER_NS);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#else
INLINE void stagger(int tid) { (void)tid; }
#endif

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_fwd_wgmma(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, int Hq,
    int group, int Lq, int Lk, int diag, float scale2, int B, int section, int o_chunks TMA_PARAMS)
{
    /* wgmma's swizzle is a function of the address: every tile starts on 1024 bytes. */
    __local uint4 words[(TILE_BYTES(BLOCK_M) + 4 * TILE_BYTES(BLOCK_N) + 1024) / 16];
    __local uchar *qs = (__local uchar *)words + (1024 - nv_shared(words) % 1024) % 1024;
    __local uchar *ks = qs + TILE_BYTES(BLOCK_M), *vs = ks + 2 * TILE_BYTES(BLOCK_N);
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16, g = tid / 128;
    int2 hb = sectioned_block(B * Hq, (Lq + BLOCK_M - 1) / BLOCK_M, section);
    int bh = hb.x, b = bh / Hq, h = bh % Hq, m0 = query_block_at(hb.y, Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    int row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4);
#if HEAD_DIM == 64
    /* Two work-groups a compute unit: the staged stores' 130 registers capped at 128 (8 bytes
       spilled) ran 4-15 % faster than both their uncapped build and store_held's (H100, L 1024
       to 8192, causal 9 %; docs/attention.md). */
    NV_MAXNREG(128);
#endif
    stagger(tid);
#if defined(TMA)
    __local ulong bars[BARS];
    if (tid == 0) tma_start(qs, ks, vs, maps, bars, m0, h, h / group, b, n_end);
    barrier(CLK_LOCAL_MEM_FENCE);
    nv_mbar_wait(bars + BAR_Q, 0);
#else
    __global const raw_t *kg = (__global const raw_t *)(k + HEAD(k, b, h / group));
    __global const raw_t *vg = (__global const raw_t *)(v + HEAD(v, b, h / group));
    copy_panels(qs, (__global const raw_t *)(q + HEAD(q, b, h) + m0 * q_st.s2), q_st.s2, BLOCK_M, rows, tid);
    if (n_end > 0) {
        copy_panels(ks, kg, k_st.s2, BLOCK_N, min(BLOCK_N, Lk), tid);
        copy_panels(vs, vg, v_st.s2, BLOCK_N, min(BLOCK_N, Lk), tid);
    }
    nv_cp_async_commit();
#endif

    float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
    held_acc acc;
    zero_held(acc);
    for (int n0 = 0, j = 0; n0 < n_end; n0 += BLOCK_N, j++) {
        int keys = min(BLOCK_N, Lk - n0), next = n0 + BLOCK_N;
        __local uchar *kc = ks + (j % 2) * TILE_BYTES(BLOCK_N), *vc = vs + (j % 2) * TILE_BYTES(BLOCK_N);
        /* Block j has landed (with the TMA: its K), and every warpgroup is done with block
           j - 1, whose buffers block j + 1 takes. */
#if defined(TMA)
        nv_mbar_wait(bars + BAR_K(j), (j / 2) & 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid == 0 && next < n_end) {
            int o2 = ((j + 1) % 2) * TILE_BYTES(BLOCK_N);
            tma_rows(ks + o2, maps + 1, BLOCK_N, BLOCK_N, next, h / group, b, bars + BAR_K(j + 1));
            tma_rows(vs + o2, maps + 2, BLOCK_N, BLOCK_N, next, h / group, b, bars + BAR_V(j + 1));
        }
#else
        NV_CP_ASYNC_WAIT(0);
        nv_fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (next < n_end) {
            int o2 = ((j + 1) % 2) * TILE_BYTES(BLOCK_N), keys2 = min(BLOCK_N, Lk - next);
            copy_panels(ks + o2, kg + next * k_st.s2, k_st.s2, BLOCK_N, keys2, tid);
            copy_panels(vs + o2, vg + next * v_st.s2, v_st.s2, BLOCK_N, keys2, tid);
        }
        nv_cp_async_commit();
#endif
        score_acc s;
        wg_scores(&s[0][0][0], qs + g * PANEL_BYTES(64), kc);
        if (keys < BLOCK_N || hidden(n0 + BLOCK_N - 1, m0, diag))
            mask_acc(s, row0, n0 + col_lane, Lk, diag, 1);
        float o_scale[1][2];
        softmax_acc(s, m, l, o_scale, scale2);
#if defined(TMA)
        nv_mbar_wait(bars + BAR_V(j), (j / 2) & 1);
#endif
        wg_rescale_product(&acc[0][0][0], o_scale[0], &s[0][0][0], vc);
    }
    finish_stats(lse, lse_off + b * lse_st.s0 + h * lse_st.s1, lse_st.s2, acc, m, l, row0, Lq, lane);
    if (o_chunks) {
        held_tiles_free();
        stage_held(qs, acc, 1.0f, wm, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        store_rows(o + HEAD(o, b, h) + m0 * o_st.s2, o_st.s2, qs, rows, tid);
        return;
    }
    store_held(o + HEAD(o, b, h), o_st.s2, o_st.s3, acc, row0, col_lane, Lq, 1.0f);
}
#endif

#if defined(ATTN_DECODE)
/* ---- Decoding on the tensor cores (attn_decode_mma) ----
   Flash-decoding split as cl/attention.cl's attn_decode splits it (attention.h's decode_block,
   partial results and merge), with a split's work on mma.sync: that kernel's f32 FMAs (a
   conversion and ROWS FMAs an element of K and of V) keep too few warps too busy to stream the
   cache at the bandwidth, where an m16n8k16 does 2048 of them. The block's ROWS = 16 query rows
   (rows past the block zero) are every warp's A fragments; warp w walks key blocks w, w +
   WARPS, ... of the chunk, BLOCK_N keys each, through its own slot of local memory (K then V,
   swizzled as copy_rows lays them out). With DEC_REGS the warp's plain 16-byte loads bring the
   next block into registers while it computes one from its slot: on Hopper they stream the
   cache faster than cp.async (host/ops/attention.c, plan_decode_mma). Otherwise (head dim 256,
   whose next block the registers cannot hold) the warp has a ring of DEC_STAGES slots that
   cp.async fills DEC_STAGES - 1 blocks ahead. A warp waits only on its own loads
   (bar.warp.sync), never on the others, and keeps the forward's online softmax on its
   accumulators; at the end the warps' results meet in local memory and leave as the split's
   partial result. */
#define SLOT_BYTES (2 * TILE_BYTES(BLOCK_N))
#if defined(DEC_REGS)
#define RING_BYTES SLOT_BYTES
#else
#define RING_BYTES (DEC_STAGES * SLOT_BYTES)
#endif
#define RED_BYTES (WARPS * ROWS * (HEAD_DIM + 2) * 4)
#define MERGE_BYTES ((2 * ROWS * DEC_MAX_SPLITS + 2 * ROWS) * 4)
/* q's tile first (kept there with HELD_LOCAL), the warps' rings after it; then the warps'
   results and the merge's weights. */
#define DEC_MMA_LOCAL \
    MAX(MAX(HELD_SPACE(TILE_BYTES(ROWS)) + WARPS * RING_BYTES, RED_BYTES), MAX(MERGE_BYTES, TILE_BYTES(ROWS)))

/* The block's query rows (row i: query head g group + i / Lq, query i % Lq) into a swizzled
   tile; rows past the block are zero-filled without reading. */
INLINE void copy_queries(__local uchar *tile, __global const elem_t *q, long q_off, long4 q_st,
                         const dec_block *k, int group, int Lq, int tid)
{
    for (int e = tid; e < ROWS * DCH; e += MMA_WG) {
        int r = e / DCH, c = e % DCH, ok = r < k->rows;
        long at = decode_row(q_off, q_st, k, group, Lq, k->i0 + min(r, k->rows - 1));
        nv_cp_async16(tile + nv_swizzle(r, c, DCH), (__global const raw_t *)q + (ok ? at + c * CHUNK : 0),
                      ok ? 16u : 0u);
    }
}

#if defined(DEC_REGS)
/* K's and V's 16-byte chunks of a block, a lane's share. */
typedef uint4 dec_regs[2][BLOCK_N * DCH / 32];

/* A warp's plain loads of the chunk's keys j0 .. j0 + valid - 1 into registers; rows from
   `valid` on repeat the last valid key, whose scores mask_decode hides. */
INLINE void warp_load(dec_regs x, __global const raw_t *kg, long k_rs, __global const raw_t *vg, long v_rs, int j0,
                      int valid, int lane)
{
    #pragma unroll
    for (int u = 0; u < BLOCK_N * DCH / 32; u++) {
        int e = lane + u * 32, r = j0 + min(e / DCH, valid - 1), c = e % DCH;
        x[0][u] = *(__global const uint4 *)(kg + r * k_rs + c * CHUNK);
        x[1][u] = *(__global const uint4 *)(vg + r * v_rs + c * CHUNK);
    }
}

/* The registers into the warp's slot, swizzled as copy_rows lays a tile out. */
INLINE void warp_store(__local uchar *slot, const dec_regs x, int lane)
{
    #pragma unroll
    for (int u = 0; u < BLOCK_N * DCH / 32; u++) {
        int e = lane + u * 32, at = nv_swizzle(e / DCH, e % DCH, DCH);
        *(__local uint4 *)(slot + at) = x[0][u];
        *(__local uint4 *)(slot + TILE_BYTES(BLOCK_N) + at) = x[1][u];
    }
}
#else
/* A warp's copy of the chunk's keys j0 .. j0 + valid - 1 (K and V from kg and vg, the chunk's
   first key) into its slot; rows from `valid` on are zero-filled without reading. */
INLINE void warp_copy(__local uchar *slot, __global const raw_t *kg, long k_rs, __global const raw_t *vg,
                      long v_rs, int j0, int valid, int lane)
{
    #pragma unroll
    for (int u = 0; u < BLOCK_N * DCH / 32; u++) {
        int e = lane + u * 32, r = e / DCH, c = e % DCH, ok = r < valid;
        int at = nv_swizzle(r, c, DCH);
        nv_cp_async16_stream(slot + at, kg + (ok ? (j0 + r) * k_rs + c * CHUNK : 0), ok ? 16u : 0u);
        nv_cp_async16_stream(slot + TILE_BYTES(BLOCK_N) + at, vg + (ok ? (j0 + r) * v_rs + c * CHUNK : 0),
                             ok ? 16u : 0u);
    }
}
#endif

/* Scores of keys past `valid` in the block, or hidden from their query ((i0 + row) % Lq, whose
   key is key0 + column), become -inf. */
INLINE void mask_decode(score_acc s, int key0, int valid, int i0, int Lq, int diag, int lane)
{
    #pragma unroll
    for (int j = 0; j < NF; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = lane / 4 + (e / 2) * 8, c = 2 * (lane % 4) + j * 8 + e % 2;
            if (c >= valid || hidden(key0 + c, (i0 + r) % Lq, diag)) s[0][j][e] = -INFINITY;
        }
}

/* The warps' results (each against its own maxima) into one partial result per row, against
   the largest: red holds every warp's o, then its maxima and sums. */
INLINE void warps_meet(__local float *red, const held_acc acc, const float m[1][2], const float l[1][2], int w,
                       int lane)
{
    __local float *mw = red + WARPS * ROWS * HEAD_DIM, *lw = mw + WARPS * ROWS;
    #pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        int r = lane / 4 + hh * 8;
        float sum = quad_sum(l[0][hh]);
        if (lane % 4 == 0) mw[w * ROWS + r] = m[0][hh], lw[w * ROWS + r] = sum;
        #pragma unroll
        for (int dj = 0; dj < DF; dj++)
            #pragma unroll
            for (int e = 2 * hh; e < 2 * hh + 2; e++)
                red[(w * ROWS + r) * HEAD_DIM + 2 * (lane % 4) + dj * 8 + e % 2] = acc[0][dj][e];
    }
}

INLINE void store_partial(__global float *out, long row_st, __local const float *red, int rows, int tid)
{
    __local const float *mw = red + WARPS * ROWS * HEAD_DIM, *lw = mw + WARPS * ROWS;
    for (int e = tid; e < rows * HEAD_DIM; e += MMA_WG) {
        int r = e / HEAD_DIM, d = e % HEAD_DIM;
        float mx = -INFINITY, o = 0.0f, l = 0.0f;
        for (int w = 0; w < WARPS; w++) mx = fmax(mx, mw[w * ROWS + r]);
        for (int w = 0; w < WARPS; w++) {
            float x = mx == -INFINITY ? 0.0f : exp2(mw[w * ROWS + r] - mx);
            o += x * red[(w * ROWS + r) * HEAD_DIM + d];
            l += x * lw[w * ROWS + r];
        }
        out[r * row_st + d] = o;
        if (d == 0) out[r * row_st + HEAD_DIM] = mx, out[r * row_st + HEAD_DIM + 1] = l;
    }
}

/* Arguments and grid as attn_decode's (work-groups of MMA_WG). */
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_decode_mma(
    IN(q), IN(k), IN(v), OUT(o), __global float *lse, long lse_off, long4 lse_st, __global float *part,
    volatile __global uint *tickets, int Hq, int group, int Lq, int Lk, int diag, float scale2, int chunk)
{
    __local uint4 words[DEC_MMA_LOCAL / 16];
    __local uint last;
    __local uchar *base = (__local uchar *)words;
    int tid = get_local_id(0), lane = tid % 32, w = tid / 32;
    dec_block blk = decode_block(Hq, group, Lq, Lk, diag, chunk);
    copy_queries(base, q, q_off, q_st, &blk, group, Lq, tid);
    nv_cp_async_commit();
    NV_CP_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    held_frags qf;
    load_held(qf, base, 0, lane);
    barrier(CLK_LOCAL_MEM_FENCE);

    __global const raw_t *kg = (__global const raw_t *)(k + HEAD(k, blk.b, blk.g)) + (long)blk.k0 * k_st.s2;
    __global const raw_t *vg = (__global const raw_t *)(v + HEAD(v, blk.b, blk.g)) + (long)blk.k0 * v_st.s2;
    __local uchar *ring = base + HELD_SPACE(TILE_BYTES(ROWS)) + w * RING_BYTES;
    int n = blk.n, blocks = (n + BLOCK_N - 1) / BLOCK_N, mine = blocks > w ? (blocks - w + WARPS - 1) / WARPS : 0;
    int masked = diag < Lk;
    float m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
    held_acc acc;
    zero_held(acc);
#if defined(DEC_REGS)
    dec_regs x;
    if (mine > 0) warp_load(x, kg, k_st.s2, vg, v_st.s2, w * BLOCK_N, min(BLOCK_N, n - w * BLOCK_N), lane);
    for (int t = 0; t < mine; t++) {
        int j0 = (w + t * WARPS) * BLOCK_N, valid = min(BLOCK_N, n - j0), ja = j0 + WARPS * BLOCK_N;
        nv_syncwarp();
        warp_store(ring, x, lane);
        nv_syncwarp();
        if (t + 1 < mine) warp_load(x, kg, k_st.s2, vg, v_st.s2, ja, min(BLOCK_N, n - ja), lane);
        __local const uchar *slot = ring;
#else
    #pragma unroll
    for (int t = 0; t < DEC_STAGES - 1; t++) {
        int j0 = (w + t * WARPS) * BLOCK_N;
        if (t < mine) warp_copy(ring + t * SLOT_BYTES, kg, k_st.s2, vg, v_st.s2, j0, min(BLOCK_N, n - j0), lane);
        nv_cp_async_commit();
    }
    for (int t = 0; t < mine; t++) {
        NV_CP_ASYNC_WAIT(DEC_STAGES - 2);
        nv_syncwarp();
        int ahead = t + DEC_STAGES - 1, ja = (w + ahead * WARPS) * BLOCK_N;
        if (ahead < mine)
            warp_copy(ring + ahead % DEC_STAGES * SLOT_BYTES, kg, k_st.s2, vg, v_st.s2, ja, min(BLOCK_N, n - ja), lane);
        nv_cp_async_commit();
        __local const uchar *slot = ring + t % DEC_STAGES * SLOT_BYTES;
        int j0 = (w + t * WARPS) * BLOCK_N, valid = min(BLOCK_N, n - j0);
#endif
        score_acc s;
        product_t(s, qf, base, 0, slot, lane);
        if (valid < BLOCK_N || masked) mask_decode(s, blk.k0 + j0, valid, blk.i0, Lq, diag, lane);
        float o_scale[1][2];
        softmax_acc(s, m, l, o_scale, scale2);
        rescale_product(acc, o_scale, s, slot + TILE_BYTES(BLOCK_N), lane);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __local float *red = (__local float *)words;
    warps_meet(red, acc, m, l, w, lane);
    barrier(CLK_LOCAL_MEM_FENCE);
    __global float *out = decode_part(part, &blk);
    store_partial(out, (long)blk.splits * PART, red, blk.rows, tid);
    if (split_last(tickets + get_group_id(0), blk.splits, &last))
        decode_merge(out - (long)blk.split * PART, o, o_off, o_st, lse, lse_off, lse_st, red, &blk, group, Lq,
                     tid, MMA_WG);
}
#endif
#endif

#if defined(ATTN_BWD)
/* One score's step: s (raw) becomes P = 2^(s scale2 - lse2), dp becomes dS = P (dP - delta). */
INLINE void grad_step(float *s, float *dp, float scale2, float lse2, float delta)
{
    float p = nv_exp2(fma(*s, scale2, -lse2));
    *s = p;
    *dp = p * (*dp - delta);
}

/* dS in place of dp and P in place of the raw scores s. lse2 and delta belong to the held row
   (dQ: rl, rd) or to the streamed column (dK/dV: cl, cd); the other pair is zero. */
INLINE void probabilities(score_acc s, score_acc dp, float scale2, const float rl[FRAG_M][2],
                          const float rd[FRAG_M][2], const float cl[NF][2], const float cd[NF][2])
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int j = 0; j < NF; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                grad_step(&s[i][j][e], &dp[i][j][e], scale2, rl[i][e / 2] + cl[j][e % 2], rd[i][e / 2] + cd[j][e % 2]);
}

/* The lane's two columns of accumulator tile j from the local statistics (copy_stats): lse as
   lse2 into cl, delta into cd. */
INLINE void col_pair(float cl[2], float cd[2], __local const float *stats, int col_lane, int j)
{
    float2 l2 = vload2(0, stats + col_lane + j * 8), d2 = vload2(0, stats + BLOCK_N + col_lane + j * 8);
    cl[0] = lse2_of(l2.x), cl[1] = lse2_of(l2.y), cd[0] = d2.x, cd[1] = d2.y;
}

/* probabilities for the wgmma dK/dV kernel, each column's lse and delta read from their local
   copy at stats where they are used: held for the whole block beside the two accumulators, s
   and dP (col_stats), they took 4 NF registers a lane, and with them the driver's build of the
   D 64 kernel 177 registers (168 without; H200, 0.1-1.1 % faster, and clang's D 128 build
   stopped spilling). */
INLINE void probabilities_cols(score_acc s, score_acc dp, float scale2, __local const float *stats, int col_lane)
{
    #pragma unroll
    for (int j = 0; j < NF; j++) {
        float cl[2], cd[2];
        col_pair(cl, cd, stats, col_lane, j);
        #pragma unroll
        for (int i = 0; i < FRAG_M; i++)
            #pragma unroll
            for (int e = 0; e < 4; e++) grad_step(&s[i][j][e], &dp[i][j][e], scale2, cl[e % 2], cd[e % 2]);
    }
}

/* The dQ kernels' per-row statistics: lse2 and delta of the lane's held rows from row0 (zero
   past Lq), and zero column statistics (cz) for probabilities. */
INLINE void row_stats(float rl[FRAG_M][2], float rd[FRAG_M][2], float cz[NF][2], __global const float *lse,
                      long lse_row, __global const float *delta, int row0, int Lq)
{
    #pragma unroll
    for (int j = 0; j < NF; j++) cz[j][0] = cz[j][1] = 0.0f;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            int r = row0 + i * 16 + hh * 8, ok = r < Lq;
            rl[i][hh] = ok ? lse2_of(lse[r * lse_row]) : 0.0f;
            rd[i][hh] = ok ? delta[r] : 0.0f;
        }
}

/* The dK/dV kernels' per-column statistics: lse and delta of the streamed queries n0 .. n0 +
   `queries` into stats (lse, then delta, BLOCK_N each; zero past them) by cp.async ... */
INLINE void copy_stats(__local float *stats, __global const float *lse, __global const float *delta,
                       long lse_row, int n0, int queries, int tid)
{
    for (int c = tid; c < 2 * BLOCK_N; c += MMA_WG) {
        int r = c % BLOCK_N, ok = r < queries;
        __global const float *src = c < BLOCK_N ? lse + (n0 + r) * lse_row : delta + n0 + r;
        nv_cp_async4(stats + c, ok ? src : lse, ok ? 4u : 0u);
    }
}

/* ... and from there the lane's columns, lse as lse2. */
INLINE void col_stats(float cl[NF][2], float cd[NF][2], __local const float *stats, int col_lane)
{
    #pragma unroll
    for (int j = 0; j < NF; j++) col_pair(cl[j], cd[j], stats, col_lane, j);
}

#if !defined(WGMMA)
/* The backward's two held tiles (BLOCK_M rows of a and of b, rows from `rows` on zero) into
   fragments, through local memory at base, which is free again on return (HELD_LOCAL: where
   they stay). */
INLINE void hold_pair(held_frags fa, held_frags fb, __local uchar *base, __global const raw_t *a,
                      long a_rs, __global const raw_t *b, long b_rs, int rows, int tid, int wm,
                      int lane)
{
    copy_rows(base, a, a_rs, BLOCK_M, rows, tid);
    copy_rows(base + TILE_BYTES(BLOCK_M), b, b_rs, BLOCK_M, rows, tid);
    nv_cp_async_commit();
    NV_CP_ASYNC_WAIT(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    load_held(fa, base, wm, lane);
    load_held(fb, base + TILE_BYTES(BLOCK_M), wm, lane);
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Grid (B x Hq x MMA_WG, query blocks). A block of queries and its dO stay in registers; for
   each key block (double-buffered K and V) the kernel recomputes P and dS and adds dS K to
   dQ. dQ = scale * sum. */
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_bwd_dq_mma(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dq), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale)
{
    __local uint4 words[LOCAL_WORDS(2 * TILE_BYTES(BLOCK_M), 4 * TILE_BYTES(BLOCK_N))];
    __local uchar *base = (__local uchar *)words, *stages = base + HELD_SPACE(2 * TILE_BYTES(BLOCK_M));
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16 * FRAG_M;
    int bh = grid_head(), b = bh / Hq, h = bh % Hq, m0 = query_block_start(Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    int row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4);
    __global const raw_t *kg = (__global const raw_t *)(k + HEAD(k, b, h / group));
    __global const raw_t *vg = (__global const raw_t *)(v + HEAD(v, b, h / group));
    float rl[FRAG_M][2], rd[FRAG_M][2], cz[NF][2];
    row_stats(rl, rd, cz, lse + lse_off + b * lse_st.s0 + h * lse_st.s1, lse_st.s2, delta + (long)bh * Lq, row0, Lq);
    held_frags qf, df;
    hold_pair(qf, df, base, (__global const raw_t *)(q + HEAD(q, b, h) + m0 * q_st.s2), q_st.s2,
              (__global const raw_t *)(dout + HEAD(dout, b, h) + m0 * dout_st.s2), dout_st.s2, rows,
              tid, wm, lane);

    held_acc acc;
    zero_held(acc);
    int steps = (n_end + BLOCK_N - 1) / BLOCK_N;
    for (int t = 0; t <= steps; t++) {
        /* Step t copies key block t into stage t % 2 and computes block t - 1. */
        if (t < steps) {
            __local uchar *ks = stages + (t % 2) * 2 * TILE_BYTES(BLOCK_N);
            int n0 = t * BLOCK_N, keys = min(BLOCK_N, Lk - n0);
            copy_rows(ks, kg + n0 * k_st.s2, k_st.s2, BLOCK_N, keys, tid);
            copy_rows(ks + TILE_BYTES(BLOCK_N), vg + n0 * v_st.s2, v_st.s2, BLOCK_N, keys, tid);
        }
        nv_cp_async_commit();
        if (t == 0) continue;
        NV_CP_ASYNC_WAIT(1);
        barrier(CLK_LOCAL_MEM_FENCE);
        __local uchar *ks = stages + ((t - 1) % 2) * 2 * TILE_BYTES(BLOCK_N);
        int n0 = (t - 1) * BLOCK_N;
        score_acc s, dp;
        product_t(s, qf, base, wm, ks, lane);
        product_t(dp, df, base + TILE_BYTES(BLOCK_M), wm, ks + TILE_BYTES(BLOCK_N), lane);
        if (n0 + BLOCK_N > Lk || hidden(n0 + BLOCK_N - 1, m0, diag))
            mask_acc(s, row0, n0 + col_lane, Lk, diag, 1);
        probabilities(s, dp, scale2, rl, rd, cz, cz);
        product_n(acc, dp, ks, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    store_held(dq + HEAD(dq, b, h), dq_st.s2, dq_st.s3, acc, row0, col_lane, Lq, scale);
}

/* Grid (B x Hkv x MMA_WG, key blocks). A block of keys and values stays in registers; the
   kernel walks every (query head of the group, query block that sees the keys) pair in a
   fixed order (grouped-query sums are deterministic), double-buffering q, dO and their rows'
   lse and delta, recomputes P^T and dS^T, and adds P^T dO to dV and dS^T q to dK.
   dK = scale * sum. Query rows past Lq are zero-filled with zero statistics: their P^T is 1
   but both products they feed take their zero dO or q rows, so they add nothing. */
#define STAGE_BYTES (2 * TILE_BYTES(BLOCK_N) + 8 * BLOCK_N)

/* Stage `slot`: q and dO rows n0 .. of head h, lse and delta of those rows after them. */
INLINE void copy_query_block(__local uchar *slot, __global const elem_t *q, long q_off, long4 q_st,
                             __global const elem_t *dout, long dout_off, long4 dout_st,
                             __global const float *lse, __global const float *delta, long lse_row,
                             int b, int h, int n0, int Lq, int tid)
{
    int queries = min(BLOCK_N, Lq - n0);
    copy_rows(slot, (__global const raw_t *)(q + HEAD(q, b, h) + n0 * q_st.s2), q_st.s2, BLOCK_N,
              queries, tid);
    copy_rows(slot + TILE_BYTES(BLOCK_N), (__global const raw_t *)(dout + HEAD(dout, b, h) + n0 * dout_st.s2),
              dout_st.s2, BLOCK_N, queries, tid);
    copy_stats((__local float *)(slot + 2 * TILE_BYTES(BLOCK_N)), lse, delta, lse_row, n0, queries, tid);
}

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_bwd_dkdv_mma(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dk), OUT(dv), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale)
{
    __local uint4 words[LOCAL_WORDS(2 * TILE_BYTES(BLOCK_M), 2 * STAGE_BYTES)];
    __local uchar *base = (__local uchar *)words, *stages = base + HELD_SPACE(2 * TILE_BYTES(BLOCK_M));
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16 * FRAG_M;
    int Hkv = Hq / group, bg = grid_head(), b = bg / Hkv, g = bg % Hkv;
    int m0 = grid_block() * BLOCK_M, rows = min(BLOCK_M, Lk - m0);
    int row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4);
    held_frags kf, vf;
    hold_pair(kf, vf, base, (__global const raw_t *)(k + HEAD(k, b, g) + m0 * k_st.s2), k_st.s2,
              (__global const raw_t *)(v + HEAD(v, b, g) + m0 * v_st.s2), v_st.s2, rows, tid, wm, lane);

    /* Queries before the first that sees key m0 see none of the block. */
    int n_start = queries_start(m0, diag);
    int per_head = Lq > n_start ? (Lq - n_start + BLOCK_N - 1) / BLOCK_N : 0, steps = group * per_head;
    float rz[FRAG_M][2];
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++) rz[i][0] = rz[i][1] = 0.0f;
    held_acc dk_acc, dv_acc;
    zero_held(dk_acc);
    zero_held(dv_acc);
    for (int t = 0; t <= steps; t++) {
        /* Step t copies (head, query block) t into stage t % 2 and computes t - 1. */
        if (t < steps) {
            int h = g * group + t / per_head;
            copy_query_block(stages + (t % 2) * STAGE_BYTES, q, q_off, q_st, dout, dout_off, dout_st,
                             lse + lse_off + b * lse_st.s0 + h * lse_st.s1, delta + ((long)b * Hq + h) * Lq,
                             lse_st.s2, b, h, n_start + (t % per_head) * BLOCK_N, Lq, tid);
        }
        nv_cp_async_commit();
        if (t == 0) continue;
        NV_CP_ASYNC_WAIT(1);
        barrier(CLK_LOCAL_MEM_FENCE);
        __local uchar *qs = stages + ((t - 1) % 2) * STAGE_BYTES;
        __local const float *stats = (__local const float *)(qs + 2 * TILE_BYTES(BLOCK_N));
        int n0 = n_start + ((t - 1) % per_head) * BLOCK_N;
        float cl[NF][2], cd[NF][2];
        col_stats(cl, cd, stats, col_lane);
        score_acc s, dp;
        product_t(s, kf, base, wm, qs, lane);
        product_t(dp, vf, base + TILE_BYTES(BLOCK_M), wm, qs + TILE_BYTES(BLOCK_N), lane);
        if (hidden(m0 + BLOCK_M - 1, n0, diag)) mask_acc(s, row0, n0 + col_lane, Lq, diag, 0);
        probabilities(s, dp, scale2, rz, rz, cl, cd);
        product_n(dv_acc, s, qs + TILE_BYTES(BLOCK_N), lane);
        product_n(dk_acc, dp, qs, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    store_held(dv + HEAD(dv, b, g), dv_st.s2, dv_st.s3, dv_acc, row0, col_lane, Lk, 1.0f);
    store_held(dk + HEAD(dk, b, g), dk_st.s2, dk_st.s3, dk_acc, row0, col_lane, Lk, scale);
}
#else
/* ---- The backward on wgmma: the kernels above, with their held rows in local memory (each
   warpgroup's wgmma reads its 64 from there) and every product a warpgroup MMA. ---- */

/* The first of the dK/dV work-group's output columns (OUT_DIM of them); where column `col`
   starts in a streamed tile of `rows` rows (panels of 64 head dims); the bytes an OUT_DIM-wide
   accumulator takes staged (stage_held). */
#if OUT_DIM < HEAD_DIM
INLINE int out_col0(void) { return get_group_id(1) * OUT_DIM; }
#else
INLINE int out_col0(void) { return 0; }
#endif
#define COL_PANELS(col, rows) ((col) / 64 * PANEL_BYTES(rows))
#define STAGED_BYTES (BLOCK_M * OUT_DIM * ESIZE)

/* s = (held rows a) x (streamed block sa)^T and dp = (held rows b) x (streamed block sb)^T,
   both in flight at once, one wait. */
INLINE void wg_score_pair(score_acc s, score_acc dp, __local const uchar *a, __local const uchar *b,
                          __local const uchar *sa, __local const uchar *sb)
{
    wg_scores_issue(&s[0][0][0], a, sa);
    wg_scores_issue(&dp[0][0][0], b, sb);
    NV_WGMMA_WAIT(0);
    wg_pin(&s[0][0][0], BLOCK_N / 2);
    wg_pin(&dp[0][0][0], BLOCK_N / 2);
}

#if defined(DS_TILES)
/* dS through memory (-D DS_TILES; the host sets it for 16-bit head dim 128 on the TMA): the
   dK/dV kernel has every dS block that dQ needs in its registers as the A fragments
   of dK += dS^T q. Recomputing them in the dQ kernel costs two of the backward's seven
   products (S and dP again; FlashAttention-3 does five and adds dQ by atomics, which clkit's
   deterministic gradients rule out). Instead dK/dV writes each warpgroup's dS^T, 64 keys x 64
   queries, as one 8 KiB tile laid out as local memory wants it for wgmma (8 x 8 core matrices
   without swizzle, store_ds: a transposed A operand), and attn_bwd_dq_ds_wgmma
   streams those tiles with K, one product a block: 2 bytes a score written and read once
   (DRAM, overlapped with the dK/dV products) for two products recomputed. Tiles are
   [query head][query block][key block] of a scratch that holds the query heads of ds_count kv
   heads from ds_g0 on, counted across batches (b x Hkv + kv): the host runs both kernels a
   chunk of kv heads at a time where all would not fit its scratch, their grids over the
   chunk's heads. */
#define DS_PARAMS , __global uchar *ds_tiles, int ds_g0, int ds_count
#define DS_G0 ds_g0
#define DS_HEADS(all) ds_count
#define DS_TILE (64 * 64 * ESIZE)
#if BLOCK_N != 64 || OUT_DIM != HEAD_DIM || BLOCK_M % 64 || ESIZE != 2 || !defined(TMA) || KV_BOX != 64
#error "DS_TILES: 64 x 64 tiles of 16-bit dS, head dims up to 128, loaded by the TMA"
#endif
INLINE __global uchar *ds_tile(__global uchar *tiles, int bh, int qb, int kb, int Lq, int Lk)
{
    long nq = (Lq + 63) / 64, nk = (Lk + 63) / 64;
    return tiles + (((long)bh * nq + qb) * nk + kb) * DS_TILE;
}
#else
#define DS_PARAMS
#define DS_G0 0
#define DS_HEADS(all) (all)
#endif

/* Grid (B x Hq x query blocks x MMA_WG), in sectioned_block's order; otherwise as
   attn_bwd_dq_mma. Key block t goes to stage t % 2 while the warps compute block t - 1. dQ
   keeps every column, as DQ_PARTS accumulators of OUT_DIM: its scores are computed once
   (at D 256, 128 accumulator registers a lane, where dK/dV would need 256). */
#define DQ_STAGE (2 * TILE_BYTES(BLOCK_N))
#define DQ_PARTS (HEAD_DIM / OUT_DIM)
#if HEAD_DIM % OUT_DIM || DQ_PARTS * STAGED_BYTES > 2 * TILE_BYTES(BLOCK_M)
#error "attn_bwd_dq_wgmma: dQ's parts must cover the head dimension and stage in q's and dO's tiles"
#endif

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_bwd_dq_wgmma(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dq), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale, int B, int section, int dq_chunks TMA_PARAMS)
{
    __local uint4 words[(2 * TILE_BYTES(BLOCK_M) + 2 * DQ_STAGE + 1024) / 16];
    __local uchar *qs = (__local uchar *)words + (1024 - nv_shared(words) % 1024) % 1024;
    __local uchar *dos = qs + TILE_BYTES(BLOCK_M), *stages = dos + TILE_BYTES(BLOCK_M);
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16, g = tid / 128;
    int2 hb = sectioned_block(B * Hq, (Lq + BLOCK_M - 1) / BLOCK_M, section);
    int bh = hb.x, b = bh / Hq, h = bh % Hq, m0 = query_block_at(hb.y, Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), n_end = keys_end(m0, rows, Lk, diag);
    int row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4), steps = (n_end + BLOCK_N - 1) / BLOCK_N;
    float rl[1][2], rd[1][2], cz[NF][2];
    row_stats(rl, rd, cz, lse + lse_off + b * lse_st.s0 + h * lse_st.s1, lse_st.s2, delta + (long)bh * Lq, row0, Lq);
#if defined(TMA)
    /* mbarriers: q and dO's, then each stage's K and V. */
    __local ulong bars[3];
    if (tid == 0) {
        tma_init(bars, 3, 2, maps);
        tma_rows(qs, maps, BLOCK_M, Q_BOX, m0, h, b, bars);
        tma_rows(dos, maps + 3, BLOCK_M, Q_BOX, m0, h, b, bars);
        if (steps > 0) {
            tma_rows(stages, maps + 1, BLOCK_N, KV_BOX, 0, h / group, b, bars + 1);
            tma_rows(stages + TILE_BYTES(BLOCK_N), maps + 2, BLOCK_N, KV_BOX, 0, h / group, b, bars + 1);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    nv_mbar_wait(bars, 0);
#else
    __global const raw_t *kg = (__global const raw_t *)(k + HEAD(k, b, h / group));
    __global const raw_t *vg = (__global const raw_t *)(v + HEAD(v, b, h / group));
    copy_panels(qs, (__global const raw_t *)(q + HEAD(q, b, h) + m0 * q_st.s2), q_st.s2, BLOCK_M, rows, tid);
    copy_panels(dos, (__global const raw_t *)(dout + HEAD(dout, b, h) + m0 * dout_st.s2), dout_st.s2,
                BLOCK_M, rows, tid);
    if (steps > 0) {
        copy_panels(stages, kg, k_st.s2, BLOCK_N, min(BLOCK_N, Lk), tid);
        copy_panels(stages + TILE_BYTES(BLOCK_N), vg, v_st.s2, BLOCK_N, min(BLOCK_N, Lk), tid);
    }
    nv_cp_async_commit();
#endif
    held_acc acc[DQ_PARTS];
    #pragma unroll
    for (int p = 0; p < DQ_PARTS; p++) zero_held(acc[p]);
    for (int t = 0; t < steps; t++) {
        /* Block t has landed, and every warpgroup is done with block t - 1, whose stage block
           t + 1 takes. */
        __local uchar *ks = stages + (t % 2) * DQ_STAGE, *next = stages + ((t + 1) % 2) * DQ_STAGE;
        int n0 = t * BLOCK_N, n1 = n0 + BLOCK_N;
#if defined(TMA)
        nv_mbar_wait(bars + 1 + t % 2, (t / 2) & 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid == 0 && t + 1 < steps) {
            tma_rows(next, maps + 1, BLOCK_N, KV_BOX, n1, h / group, b, bars + 1 + (t + 1) % 2);
            tma_rows(next + TILE_BYTES(BLOCK_N), maps + 2, BLOCK_N, KV_BOX, n1, h / group, b, bars + 1 + (t + 1) % 2);
        }
#else
        NV_CP_ASYNC_WAIT(0);
        nv_fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t + 1 < steps) {
            copy_panels(next, kg + n1 * k_st.s2, k_st.s2, BLOCK_N, min(BLOCK_N, Lk - n1), tid);
            copy_panels(next + TILE_BYTES(BLOCK_N), vg + n1 * v_st.s2, v_st.s2, BLOCK_N, min(BLOCK_N, Lk - n1), tid);
        }
        nv_cp_async_commit();
#endif
        score_acc s, dp;
        wg_score_pair(s, dp, qs + g * PANEL_BYTES(64), dos + g * PANEL_BYTES(64), ks, ks + TILE_BYTES(BLOCK_N));
        if (n1 > Lk || hidden(n1 - 1, m0, diag)) mask_acc(s, row0, n0 + col_lane, Lk, diag, 1);
        probabilities(s, dp, scale2, rl, rd, cz, cz);
        uint a[DQ_PARTS][BLOCK_N / 4];
        #pragma unroll
        for (int p = 0; p < DQ_PARTS; p++)
            wg_product_issue(&acc[p][0][0][0], a[p], &dp[0][0][0], ks + COL_PANELS(p * OUT_DIM, BLOCK_N));
        NV_WGMMA_WAIT(0);
        #pragma unroll
        for (int p = 0; p < DQ_PARTS; p++) {
            wg_pin(&acc[p][0][0][0], OUT_DIM / 2);
            wg_pin_frags(a[p]);
        }
    }
    if (dq_chunks) {
        held_tiles_free();
        #pragma unroll
        for (int p = 0; p < DQ_PARTS; p++) stage_held(qs + p * STAGED_BYTES, acc[p], scale, wm, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        #pragma unroll
        for (int p = 0; p < DQ_PARTS; p++)
            store_rows(dq + HEAD(dq, b, h) + m0 * dq_st.s2 + p * OUT_DIM, dq_st.s2, qs + p * STAGED_BYTES, rows, tid);
        return;
    }
    #pragma unroll
    for (int p = 0; p < DQ_PARTS; p++)
        store_held(dq + HEAD(dq, b, h) + p * OUT_DIM * dq_st.s3, dq_st.s2, dq_st.s3, acc[p], row0, col_lane, Lq, scale);
}

/* Grid (B x Hkv x key blocks x MMA_WG), in sectioned_block's order; otherwise as
   attn_bwd_dkdv_mma: the same walk over (query head, query block) pairs in a fixed order; step t's q and dO go to stage t % 2 (their statistics
   by cp.async beside them) while the warps compute step t - 1. */
#define KV_STAGE (2 * TILE_BYTES(BLOCK_N))

#if defined(DS_TILES)
/* Keys from Lk on out of the scores (dK/dV's rows): their zero-filled K rows would give P =
   2^-lse2, which overflows for a row of very negative scores, and dQ would multiply the
   resulting inf by a zero K row. */
INLINE void mask_rows(score_acc s, int row0, int Lk)
{
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int e = 0; e < 4; e++)
            if (row0 + i * 16 + (e / 2) * 8 >= Lk)
                #pragma unroll
                for (int j = 0; j < NF; j++) s[i][j][e] = -INFINITY;
}

/* The warpgroup's dS^T fragments (da, as wg_product_issue packed them) into its tile: a warp's
   register holds one 8 x 8 block (8 keys, 8 queries: lane pair (row lane / 4, queries
   2 (lane % 4), +1)), which goes out as one 128-byte line, the block's rows 16 bytes apart:
   wgmma's core matrix without swizzle. Block (key group kg, query group qg) at (kg * 8 + qg) *
   128. (16 bytes in each of 8 rows a store, the swizzled layout, cost the dK/dV kernel
   45-90 % more time: eight lines a warp's store.) */
INLINE void store_ds(__global uchar *tile, const uint *da, int wm, int lane)
{
    #pragma unroll
    for (int j = 0; j < BLOCK_N / 8; j++)
        #pragma unroll
        for (int hh = 0; hh < 2; hh++)
            *(__global uint *)(tile + ((wm % 64 / 8 + hh) * 8 + j) * 128 + lane * 4) = da[2 * j + hh];
}
#endif

/* Step t's (query head, first query) of the walk. */
INLINE int2 dkdv_step(int t, int kv, int group, int n_start, int per_head)
{
    return (int2)(kv * group + t / per_head, n_start + (t % per_head) * BLOCK_N);
}

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_bwd_dkdv_wgmma(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dk), OUT(dv), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale, int B, int section, int dkdv_chunks TMA_PARAMS DS_PARAMS)
{
    __local uint4 words[(2 * TILE_BYTES(BLOCK_M) + 2 * KV_STAGE + 16 * BLOCK_N + 1024) / 16];
    __local uchar *ks = (__local uchar *)words + (1024 - nv_shared(words) % 1024) % 1024;
    __local uchar *vs = ks + TILE_BYTES(BLOCK_M), *stages = vs + TILE_BYTES(BLOCK_M);
    __local float *stats = (__local float *)(stages + 2 * KV_STAGE);
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16, g = tid / 128;
    int Hkv = Hq / group;
    int2 hb = sectioned_block(DS_HEADS(B * Hkv), (Lk + BLOCK_M - 1) / BLOCK_M, section);
    int bg = DS_G0 + hb.x, b = bg / Hkv, kv = bg % Hkv;
    int m0 = hb.y * BLOCK_M, rows = min(BLOCK_M, Lk - m0);
    int row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4);
    int n_start = queries_start(m0, diag);
    int per_head = Lq > n_start ? (Lq - n_start + BLOCK_N - 1) / BLOCK_N : 0, steps = group * per_head;
    long lse_b = lse_off + b * lse_st.s0, delta_b = (long)b * Hq * Lq;
#if defined(TMA)
    /* mbarriers: K and V's, then each stage's q and dO. */
    __local ulong bars[3];
    if (tid == 0) {
        tma_init(bars, 3, 2, maps);
        tma_rows(ks, maps + 1, BLOCK_M, KV_BOX, m0, kv, b, bars);
        tma_rows(vs, maps + 2, BLOCK_M, KV_BOX, m0, kv, b, bars);
        if (steps > 0) {
            int2 hn = dkdv_step(0, kv, group, n_start, per_head);
            tma_rows(stages, maps, BLOCK_N, Q_BOX, hn.y, hn.x, b, bars + 1);
            tma_rows(stages + TILE_BYTES(BLOCK_N), maps + 3, BLOCK_N, Q_BOX, hn.y, hn.x, b, bars + 1);
        }
    }
#else
    copy_panels(ks, (__global const raw_t *)(k + HEAD(k, b, kv) + m0 * k_st.s2), k_st.s2, BLOCK_M, rows, tid);
    copy_panels(vs, (__global const raw_t *)(v + HEAD(v, b, kv) + m0 * v_st.s2), v_st.s2, BLOCK_M, rows, tid);
#endif
    if (steps > 0) {
        int2 hn = dkdv_step(0, kv, group, n_start, per_head);
        int queries = min(BLOCK_N, Lq - hn.y);
#if !defined(TMA)
        copy_panels(stages, (__global const raw_t *)(q + HEAD(q, b, hn.x) + hn.y * q_st.s2), q_st.s2, BLOCK_N,
                    queries, tid);
        copy_panels(stages + TILE_BYTES(BLOCK_N), (__global const raw_t *)(dout + HEAD(dout, b, hn.x) + hn.y * dout_st.s2),
                    dout_st.s2, BLOCK_N, queries, tid);
#endif
        copy_stats(stats, lse + lse_b + hn.x * lse_st.s1, delta + delta_b + (long)hn.x * Lq, lse_st.s2, hn.y,
                   queries, tid);
    }
    nv_cp_async_commit();
#if defined(TMA)
    barrier(CLK_LOCAL_MEM_FENCE);
    nv_mbar_wait(bars, 0);
#endif
    held_acc dk_acc, dv_acc;
    zero_held(dk_acc);
    zero_held(dv_acc);
    for (int t = 0; t < steps; t++) {
        /* Step t has landed, and every warpgroup is done with step t - 1, whose stage step
           t + 1 takes. */
        __local uchar *slot = stages + (t % 2) * KV_STAGE, *next = stages + ((t + 1) % 2) * KV_STAGE;
#if defined(TMA)
        nv_mbar_wait(bars + 1 + t % 2, (t / 2) & 1);
#endif
        NV_CP_ASYNC_WAIT(0);
        nv_fence_proxy_async();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t + 1 < steps) {
            int2 hn = dkdv_step(t + 1, kv, group, n_start, per_head);
            int queries = min(BLOCK_N, Lq - hn.y);
#if defined(TMA)
            if (tid == 0) {
                tma_rows(next, maps, BLOCK_N, Q_BOX, hn.y, hn.x, b, bars + 1 + (t + 1) % 2);
                tma_rows(next + TILE_BYTES(BLOCK_N), maps + 3, BLOCK_N, Q_BOX, hn.y, hn.x, b, bars + 1 + (t + 1) % 2);
            }
#else
            copy_panels(next, (__global const raw_t *)(q + HEAD(q, b, hn.x) + hn.y * q_st.s2), q_st.s2, BLOCK_N,
                        queries, tid);
            copy_panels(next + TILE_BYTES(BLOCK_N), (__global const raw_t *)(dout + HEAD(dout, b, hn.x) + hn.y * dout_st.s2),
                        dout_st.s2, BLOCK_N, queries, tid);
#endif
            copy_stats(stats + ((t + 1) % 2) * 2 * BLOCK_N, lse + lse_b + hn.x * lse_st.s1,
                       delta + delta_b + (long)hn.x * Lq, lse_st.s2, hn.y, queries, tid);
        }
        nv_cp_async_commit();
        int2 step = dkdv_step(t, kv, group, n_start, per_head);
        int n0 = step.y;
        score_acc s, dp;
        wg_score_pair(s, dp, ks + g * PANEL_BYTES(64), vs + g * PANEL_BYTES(64), slot, slot + TILE_BYTES(BLOCK_N));
        if (hidden(m0 + BLOCK_M - 1, n0, diag)) mask_acc(s, row0, n0 + col_lane, Lq, diag, 0);
#if defined(DS_TILES)
        if (m0 + BLOCK_M > Lk) mask_rows(s, row0, Lk);
#endif
        probabilities_cols(s, dp, scale2, stats + (t % 2) * 2 * BLOCK_N, col_lane);
        /* Both products in flight at once, one wait. */
        uint pa[BLOCK_N / 4], da[BLOCK_N / 4];
        wg_product_issue(&dv_acc[0][0][0], pa, &s[0][0][0], slot + TILE_BYTES(BLOCK_N) + COL_PANELS(out_col0(), BLOCK_N));
        wg_product_issue(&dk_acc[0][0][0], da, &dp[0][0][0], slot + COL_PANELS(out_col0(), BLOCK_N));
        NV_WGMMA_WAIT(0);
        wg_pin(&dv_acc[0][0][0], OUT_DIM / 2);
        wg_pin(&dk_acc[0][0][0], OUT_DIM / 2);
        wg_pin_frags(pa);
        wg_pin_frags(da);
#if defined(DS_TILES)
        store_ds(ds_tile(ds_tiles, b * Hq + step.x - DS_G0 * group, n0 / 64, m0 / 64 + g, Lq, Lk), da, wm, lane);
#endif
    }
    if (dkdv_chunks) {
        held_tiles_free();
        stage_held(vs, dv_acc, 1.0f, wm, lane);
        stage_held(ks, dk_acc, scale, wm, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        store_rows(dv + HEAD(dv, b, kv) + m0 * dv_st.s2 + out_col0(), dv_st.s2, vs, rows, tid);
        store_rows(dk + HEAD(dk, b, kv) + m0 * dk_st.s2 + out_col0(), dk_st.s2, ks, rows, tid);
        return;
    }
    store_held(dv + HEAD(dv, b, kv) + out_col0() * dv_st.s3, dv_st.s2, dv_st.s3, dv_acc, row0, col_lane, Lk, 1.0f);
    store_held(dk + HEAD(dk, b, kv) + out_col0() * dk_st.s3, dk_st.s2, dk_st.s3, dk_acc, row0, col_lane, Lk, scale);
}

#if defined(DS_TILES)
/* dQ += dS K for the warpgroup's 64 queries, dS its stored tile (a transposed A: core
   matrices 128 bytes apart along the queries, 1024 along the keys), K the streamed block's
   panels; committed, not waited for. */
INLINE void wg_ds_product_issue(float *acc, __local const uchar *ds, __local const uchar *ks)
{
    nv_wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; kk++) {
        ulong da = nv_wgmma_desc_plain(ds + kk * 2048, 1024, 128);
        ulong db = nv_wgmma_desc(ks + kk * 16 * 128, PANEL_BYTES(BLOCK_N), 1024);
        CLKIT_CAT(NV_WGMMA_, OUT_DIM)(acc, WG_TYPE, "1", "1", da, db);
    }
    nv_wgmma_commit();
}

/* Key blocks of 64 that queries q0 .. q0 + 63 (those below Lq) see: the dS tiles dK/dV wrote
   for them. */
INLINE int ds_steps(int q0, int Lq, int Lk, int diag)
{
    int rows = min(64, Lq - q0);
    return rows > 0 ? (keys_end(q0, rows, Lk, diag) + 63) / 64 : 0;
}

/* Step t's K block and the dS tiles of the warpgroups that see it into stage, on one
   mbarrier: thread 0's. */
INLINE void ds_stage_load(__local uchar *stage, __global const ulong16 *maps, __global const uchar *tiles,
                          int bh, int b, int kv, int m0, int t, int Lq, int Lk, int diag, __local ulong *bar)
{
    int n = 0;
    for (int w = 0; w < BLOCK_M / 64; w++) n += t < ds_steps(m0 + 64 * w, Lq, Lk, diag);
    nv_mbar_expect(bar, TILE_BYTES(BLOCK_N) + n * DS_TILE);
    #pragma unroll
    for (int p = 0; p < HEAD_DIM / 64; p++)
        nv_tma_load4(stage + p * PANEL_BYTES(BLOCK_N), maps + 1, 64 * p, t * 64, kv, b, bar);
    for (int w = 0; w < BLOCK_M / 64; w++)
        if (t < ds_steps(m0 + 64 * w, Lq, Lk, diag))
            nv_bulk_load(stage + TILE_BYTES(BLOCK_N) + w * DS_TILE,
                         ds_tile((__global uchar *)tiles, bh, m0 / 64 + w, t, Lq, Lk), DS_TILE, bar);
}

/* attn_bwd_dq_wgmma's grid and arguments (q, v, dO, lse, delta and scale2 unused), dS read
   from the tiles instead of recomputed: a DS_STAGES-deep ring of K blocks and dS tiles, each
   warpgroup's product over the blocks its queries see. */
#define DS_STAGE (TILE_BYTES(BLOCK_N) + BLOCK_M / 64 * DS_TILE)
/* 4 stages at D 128 (the only head dim that takes this kernel: 40 KiB a stage, one
   work-group a unit with 3 or 4): H200, 0.663 ms at 4x16x4096x128 against 0.679 with 3 and
   0.929 with 2. */
#define DS_STAGES 4
__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void attn_bwd_dq_ds_wgmma(
    IN(q), IN(k), IN(v), IN(dout), __global const float *lse, long lse_off, long4 lse_st,
    __global const float *delta, OUT(dq), int Hq, int group, int Lq, int Lk, int diag,
    float scale2, float scale, int B, int section, int dq_chunks TMA_PARAMS DS_PARAMS)
{
    __local uint4 words[(DS_STAGES * DS_STAGE + 1024) / 16];
    __local uchar *stages = (__local uchar *)words + (1024 - nv_shared(words) % 1024) % 1024;
    __local ulong bars[DS_STAGES];
    int tid = get_local_id(0), lane = tid % 32, wm = tid / 32 * 16, g = tid / 128;
    int2 hb = sectioned_block(ds_count * group, (Lq + BLOCK_M - 1) / BLOCK_M, section);
    int bh = hb.x, b = (ds_g0 * group + bh) / Hq, h = (ds_g0 * group + bh) % Hq;
    int m0 = query_block_at(hb.y, Lq, diag < Lk);
    int rows = min(BLOCK_M, Lq - m0), row0 = m0 + wm + lane / 4, col_lane = 2 * (lane % 4);
    int mine = ds_steps(m0 + 64 * g, Lq, Lk, diag), steps = 0;
    for (int w = 0; w < BLOCK_M / 64; w++) steps = max(steps, ds_steps(m0 + 64 * w, Lq, Lk, diag));
    if (tid == 0) {
        tma_init(bars, DS_STAGES, 1, maps);
        for (int t = 0; t < DS_STAGES - 1 && t < steps; t++)
            ds_stage_load(stages + t * DS_STAGE, maps, ds_tiles, bh, b, h / group, m0, t, Lq, Lk, diag, bars + t);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    held_acc acc;
    zero_held(acc);
    for (int t = 0; t < steps; t++) {
        /* Step t has landed, and every warpgroup is done with step t - 1, whose stage step
           t + DS_STAGES - 1 takes. */
        __local uchar *stage = stages + (t % DS_STAGES) * DS_STAGE;
        nv_mbar_wait(bars + t % DS_STAGES, (t / DS_STAGES) & 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        int ahead = t + DS_STAGES - 1;
        if (tid == 0 && ahead < steps)
            ds_stage_load(stages + (ahead % DS_STAGES) * DS_STAGE, maps, ds_tiles, bh, b, h / group, m0, ahead,
                          Lq, Lk, diag, bars + ahead % DS_STAGES);
        if (t < mine) {
            wg_ds_product_issue(&acc[0][0][0], stage + TILE_BYTES(BLOCK_N) + g * DS_TILE, stage);
            NV_WGMMA_WAIT(0);
            wg_pin(&acc[0][0][0], OUT_DIM / 2);
        }
    }
    if (dq_chunks) {
        barrier(CLK_LOCAL_MEM_FENCE);
        stage_held(stages, acc, scale, wm, lane);
        barrier(CLK_LOCAL_MEM_FENCE);
        store_rows(dq + HEAD(dq, b, h) + m0 * dq_st.s2, dq_st.s2, stages, rows, tid);
        return;
    }
    store_held(dq + HEAD(dq, b, h), dq_st.s2, dq_st.s3, acc, row0, col_lane, Lq, scale);
}
#endif
#endif
#endif
