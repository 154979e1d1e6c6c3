/* Matrix multiplication on NVIDIA tensor cores (sm_80+): matmul_mma computes what the portable
   kernels of cl/matmul.cl do, C = act(alpha * A @ B + beta * C), with f16 or bf16 operands, or
   f32 operands rounded to TF32 when the caller allows it (MMA_TF32), else as 3xTF32 (TF32X3),
   and f32 accumulators. The host builds this file only for NVIDIA devices.

   WARPS_M x WARPS_N warps share a BLOCK_M x BLOCK_N tile, so that, as in matmul_blocked, each
   element of A is read from global memory N / BLOCK_N times and each of B M / BLOCK_M times;
   each warp owns a (BLOCK_M / WARPS_M) x (BLOCK_N / WARPS_N) piece as 16 x 8 mma tiles held in
   registers. K is walked in BLOCK_K slices through a ring of STAGES local buffers that the
   copy engines fill with no staging registers: while the warps multiply slice k, the copies
   of the next slices are in flight, so the load latency hides behind the tensor cores, and
   one barrier per slice both publishes a slice and frees the buffer the next copy refills.
   One of three main loops walks the ring, chosen by the host's macros:
   - mma.sync (sm_80+), written in the kernel: cp.async copies, ldmatrix fragments, mma.sync;
     the next step's fragments are loaded while the current step multiplies.
   - mainloop_wgmma (WGMMA, sm_90): each warpgroup of four warps issues wgmma, which reads its
     operands from the ring itself, so fragments never pass through registers.
   - mainloop_tma (WGMMA and TMA, sm_90): one thread has the TMA copy each slice as a few
     boxes; the work-groups are persistent, each walking tiles one grid apart with its ring
     running on from one tile into the next.
   Operands stay in their own layout: the host proves that one dimension is contiguous and
   every 16-byte chunk aligned (A_KMAJOR: k contiguous; B_NMAJOR: n contiguous), and
   ldmatrix.trans or wgmma's transposed operands take the other layouts (TF32 words are
   32-bit, which ldmatrix cannot transpose: those fragments are read word by word). Edges are
   zero-filled by the copies, so the multiply needs no masks; only the epilogue tests bounds.
   The epilogue is matmul's (staged through the ring where the tile fits) or, for linear +
   cross-entropy, one of cl/nv/matmul_ce_epilogue.h's. */
#include "matmul.h"
#include "nv/mma.h"

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
INLINE int tile_offset(int row, int chunk, int rows, int chunks) { return nv_wgmma_offset(row, chunk, rows); }
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
   accumulator itself, until the error is far above exact f32's (bench/journal/2026-11-25.md,
   "Matmul f32 on the tensor cores as 3xTF32"); here it truncates only the step's own eight
   products, and the accumulator rounds to nearest as an FMA loop's does. A row of tiles at a time, the three products of a tile
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
#include "nv/matmul_ce_epilogue.h"
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
INLINE void mainloop_wgmma(__local uchar *as, __local uchar *bs, __global const ELEM_T *a,
                           __global const ELEM_T *b, long a_sm, long a_sk, long b_sk, long b_sn,
                           int slices, int m_left, int n_left, int K, int tid, int g, float *acc)
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
   refill rule is mainloop_wgmma's. `maps`: the context's 256 bytes for the call's two tensor
   maps. */
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
INLINE void mainloop_tma(__local uchar *as, __local uchar *bs, __global const ulong16 *maps,
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
                    (ulong)rs * ELEM_BYTES, (ulong)bs * ELEM_BYTES, (uint)box_rows);
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

#if defined(SPLIT_K)
/* Split-K (-D SPLIT_K; the grid's third dimension is the split, k_chunk rows of K each, a
   multiple of BLOCK_K): the tile's partial sums into its plane of P, as f32 rows staged
   through the ring where they fit (16-byte stores), else straight from the fragments; then
   the tile's last split to finish adds the planes into C (common.h's split_last). */
#define MMA_SPLIT_PARAMS SPLIT_PARAMS

INLINE void store_partial(float acc[FRAG_M][FRAG_N][4], int2 tile, int wm, int wn, int lane, int tid,
                          __local uchar *as, __global float *p, int M, int N)
{
    int m0 = tile.x * BLOCK_M, n0 = tile.y * BLOCK_N;
#if defined(C_STAGED)
    __local const float *st = (__local const float *)as;
    barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the ring, which takes the tile */
    stage_acc((__local float *)as, acc, wm + lane / 4, wn + (lane % 4) * 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = tid; i < BLOCK_M * (BLOCK_N / 4); i += MMA_WG) {
        int r = i / (BLOCK_N / 4), q = (i % (BLOCK_N / 4)) * 4, m = m0 + r, n = n0 + q;
        if (m >= M || n >= N) continue;
        if (N % 4 == 0) {
            *(__global float4 *)(p + (long)m * N + n) = vload4(0, st + r * C_ROW + q);
            continue;
        }
        for (int k = 0; k < 4 && n + k < N; k++) p[(long)m * N + n + k] = st[r * C_ROW + q + k];
    }
#else
    m0 += wm + lane / 4, n0 += wn + (lane % 4) * 2;
    #pragma unroll
    for (int i = 0; i < FRAG_M; i++)
        #pragma unroll
        for (int h = 0; h < 2; h++)
            #pragma unroll
            for (int j = 0; j < FRAG_N; j++)
                #pragma unroll
                for (int e = 0; e < 2; e++) {
                    int m = m0 + i * 16 + h * 8, n = n0 + j * 8 + e;
                    if (m < M && n < N) p[(long)m * N + n] = acc[i][j][h * 2 + e];
                }
#endif
}

#if defined(C_STAGED) && defined(WGMMA)
/* The tile's sum in split order, into its staging: the last split adds the other splits'
   planes to its own staged partial, 16 bytes a piece, two planes and FIN_CHUNK pieces a
   work-item at a time, every load of a batch in flight at once; C is then stored as the
   unsplit tiles store it. split_finish does the same from the planes alone, with two
   divisions a piece and C written element by element: one work-group doing that after the
   rest of the grid had finished took 2-4 us on an H200; the wgmma tiles' split GEMMs gain
   1.3-2.4 us from this (docs/nvidia-wgmma.md#split-k). The mma.sync tiles keep
   split_finish: 3xTF32's 64 x 64 x 32 split ran 16-25 % slower with this at 32 x 4096 x 4096.
   Each work-item reads and rewrites its own pieces. */
#define SPLIT_STAGED 1
#define FIN_ITEMS (BLOCK_M * (BLOCK_N / 4) / MMA_WG)
#define FIN_CHUNK (FIN_ITEMS < 8 ? FIN_ITEMS : 8)
#if FIN_ITEMS * MMA_WG != BLOCK_M * (BLOCK_N / 4) || FIN_ITEMS % FIN_CHUNK
#error "a split tile's pieces of 4 columns must fall evenly on its work-items"
#endif
INLINE float4 fin_piece(__local const float *st, __global const float *p, bool own, bool vec, int cols)
{
    if (own) return *(__local const float4 *)st;
    if (vec) return *(__global const float4 *)p;
    return (float4)(p[0], cols > 1 ? p[1] : 0.0f, cols > 2 ? p[2] : 0.0f, cols > 3 ? p[3] : 0.0f);
}

INLINE void sum_staged(__local float *st, __global const float *P, long plane, int splits, int own, int m0,
                       int n0, int M, int N, int tid)
{
    bool vec = N % 4 == 0;
    for (int c = 0; c < FIN_ITEMS; c += FIN_CHUNK) {
        float4 sum[FIN_CHUNK];
        #pragma unroll
        for (int u = 0; u < FIN_CHUNK; u++) sum[u] = (float4)(0.0f);
        for (int s = 0; s < splits; s += 2) {
            float4 x[2][FIN_CHUNK];
            #pragma unroll
            for (int t = 0; t < 2; t++)
                #pragma unroll
                for (int u = 0; u < FIN_CHUNK; u++) {
                    int i = tid + (c + u) * MMA_WG, r = i / (BLOCK_N / 4), q = (i % (BLOCK_N / 4)) * 4;
                    int m = m0 + r, n = n0 + q;
                    x[t][u] = s + t < splits && m < M && n < N
                                  ? fin_piece(st + r * C_ROW + q, P + (s + t) * plane + (long)m * N + n,
                                              s + t == own, vec, N - n)
                                  : (float4)(0.0f);
                }
            #pragma unroll
            for (int t = 0; t < 2; t++)
                #pragma unroll
                for (int u = 0; u < FIN_CHUNK; u++) sum[u] += x[t][u];
        }
        #pragma unroll
        for (int u = 0; u < FIN_CHUNK; u++) {
            int i = tid + (c + u) * MMA_WG;
            *(__local float4 *)(st + (i / (BLOCK_N / 4)) * C_ROW + (i % (BLOCK_N / 4)) * 4) = sum[u];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif

INLINE void split_epilogue(float acc[FRAG_M][FRAG_N][4], int2 tile, int wm, int wn, int lane, int tid,
                           __local uchar *as, __global float *P, volatile __global uint *tickets,
                           __global C_T *C, long c_sm, long c_sn, int M, int N, float alpha, float beta,
                           int act, float slope)
{
    long batch = get_group_id(1), plane = get_num_groups(1) * (long)M * N;
    int splits = get_num_groups(2), m0 = tile.x * BLOCK_M, n0 = tile.y * BLOCK_N;
    P += batch * M * N;
    store_partial(acc, tile, wm, wn, lane, tid, as, P + get_group_id(2) * plane, M, N);
#if defined(SPLIT_STAGED)
    /* split_last's flag: a word of the staged tile's first row padding, which nothing reads */
    __local float *st = (__local float *)as;
    if (!split_last(tickets + batch * get_num_groups(0) + get_group_id(0), splits, (__local uint *)(st + BLOCK_N)))
        return;
    sum_staged(st, P, plane, splits, get_group_id(2), m0, n0, M, N, tid);
    store_staged(st, C, c_sm, c_sn, tile, M, N, tid, alpha, beta, act, slope);
#else
    /* split_last's flag takes the ring's first word, free by then: a variable of its own would
       push rings of exactly sm_80's 48 KiB past it. */
    if (split_last(tickets + batch * get_num_groups(0) + get_group_id(0), splits, (__local uint *)as))
        split_finish(P, plane, splits, C, c_sm, c_sn, m0, n0, min(BLOCK_M, M - m0), min(BLOCK_N, N - n0), N,
                     tid, MMA_WG, alpha, beta, act, slope);
#endif
}
#else
#define MMA_SPLIT_PARAMS
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

__kernel __attribute__((reqd_work_group_size(MMA_WG, 1, 1))) void matmul_mma(OPERANDS TMA_PARAMS EPI_PARAMS MMA_SPLIT_PARAMS)
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
        mainloop_tma(as, bs, maps, bars, &w, &c, done, tid, warp / 4, &acc[0][0][0]);
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
#if defined(SPLIT_K)
    /* From here on K is the split's: its copies zero-fill past it as past the operand's end. */
    int kb = get_group_id(2) * k_chunk;
    a += kb * a_sk, b += kb * b_sk, K = min(K - kb, k_chunk);
    slices = (K + BLOCK_K - 1) / BLOCK_K;
#endif
    zero_acc(acc);
#if defined(WGMMA)
    mainloop_wgmma(as, bs, a, b, a_sm, a_sk, b_sk, b_sn, slices, m_left, n_left, K, tid, warp / 4, &acc[0][0][0]);
#else
    /* The k loop on mma.sync, written here rather than as a function of its own: inlined from
       one, its blocks come out in another order, ptxas allocates registers differently, and
       tiles at the register limit spill more (tests/compile_nvptx.sh shows each tile's).
       Every iteration commits one group, empty past the last slice, so that waiting for "at
       most STAGES - 2 in flight" always means the next slice has landed. */
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
#if defined(SPLIT_K)
    split_epilogue(acc, tile, wm, wn, lane, tid, as, P, tickets, C, c_sm, c_sn, M, N, alpha, beta, act, slope);
#else
    mma_epilogue(acc, tile, wm, wn, lane, tid, as, bs, 0, 0, C, c_sm, c_sn, M, N, alpha, beta, act, slope EPI_ARGS);
#endif
#endif
}
