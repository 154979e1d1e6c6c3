/* Layer norm, the Triton tutorial (05-layer-norm): y = (x - mean) * rstd * w + b over each row of
   (M, N), with rstd = 1 / sqrt(var + eps), and its backward.

   Forward. Written as separate steps (mean, variance, normalise, affine) a layer norm reads
   x three or four times and writes intermediates; here a team of work-items loads its row
   into registers once, takes the mean and then the sum of squared deviations from those
   registers (the two-pass variance, which unlike E[x^2] - E[x]^2 does not cancel when the
   mean is large against the spread) and writes y once: MN elements read and MN written. The
   grid is persistent and a lane holds the same columns in every row, so each work-group loads
   its weight and bias values once and keeps them in registers, or (WB_LOCAL, large groups)
   in local memory, where they leave the registers to the rows.

   Backward (as in the tutorial): with xhat = (x - mean) * rstd and wdy = w * dy,
   dx = (wdy - (xhat * c1 + c2)) * rstd, where c1 and c2 are the row means of xhat * wdy and
   wdy; dw = sum over rows of dy * xhat and db = sum of dy. A team loads x and dy once, reduces
   c1 and c2 together and writes dx, reading 2MN and writing MN elements. The column sums need
   no atomics: the grid is persistent and a work-group's rows are fixed (block, block + G, ...),
   so each lane keeps running dw and db sums of the columns it holds, in registers, across all
   of its rows, and at the end writes them as one f32 partial row per team into a (P, N)
   scratch buffer; layernorm_dwdb then sums the P partials of each column in a fixed order. The
   same inputs give bitwise the same gradients on every run, and the partials cost 2PN f32
   writes and reads, with P about the number of resident teams rather than M.

   Long rows (more than a team holds on chip) loop over the row in steps of SPAN positions.
   The forward keeps a running count, mean and sum of squared deviations per lane (each
   step's chunk is taken two-pass in registers, then merged, Chan et al. 1979), combines the
   lanes as sum(M2_l + n_l (mean_l - mean)^2), and rereads the row to write y: two reads, of
   which the second comes from L2 on a GPU while the rows in flight fit there. The backward
   rereads x and dy after reducing c1 and c2, and accumulates its partial dw and db rows in the
   scratch buffer itself, each lane updating only the columns it owns.

   Layout and reductions follow cl/softmax.cl: TEAM work-items share a row, ROWS rows per
   work-group, lane `l` holds positions (c * TEAM + l) * VEC + k; 16-byte loads (VEC elements)
   for unit-stride rows whose start is a fixed `a` elements past an aligned address (positions
   count from that address, the first `a` masked), scalar loads otherwise. Weight and bias use
   vector loads when their start has the same phase (WB_VEC). Team sums go through local
   memory, or on NVIDIA (sm_70+) through shfl.sync butterflies with one exchange between warps.

   Compile-time constants: TEAM, ROWS, ITEMS, VEC, LOOP (long-row kernels), BACKWARD, WB_LOCAL,
   the dtype (common.h), CLKIT_WARP and, on NVIDIA, CLKIT_NV_SM; LN_PORTABLE forces the
   local-memory reductions. REDUCE=1 with RCOLS and RSLICES builds layernorm_dwdb alone. */
#include "common.h"

/* Kernel flags (the host's LN_* twins in host/ops/layernorm.c). */
#define HAS_W 1
#define HAS_B 2
#define WANT_MEAN 4
#define WANT_RSTD 8
#define WB_VEC 16
#define WANT_DWDB 32
#define WANT_DW 64
#define WANT_DB 128

#if !REDUCE

#define WG (TEAM * ROWS)
#define CHUNKS (ITEMS / VEC)
#define SPAN (TEAM * ITEMS) /* positions a team covers in one step */

/* Inline PTX only where the host says the device is NVIDIA, and not in the fallback build. */
#if defined(CLKIT_NV_SM) && !defined(LN_PORTABLE)
#define NV_PTX 1
#if CLKIT_NV_SM >= 70 && CLKIT_WARP == 32 && WG % 32 == 0
#define NV_SHUFFLE 1
#endif
#endif

/* Local float2 words per reduction: one per warp (NVIDIA), or one per lane plus RED_P per row. */
#if defined(NV_SHUFFLE)
#define RED_WORDS (TEAM > 32 ? ROWS * (TEAM / 32) : 1)
#elif TEAM > 32
#define RED_P (TEAM >= 512 ? 32 : TEAM >= 128 ? 16 : 8)
#define RED_WORDS (WG + ROWS * RED_P)
#else
#define RED_WORDS WG
#endif

#if defined(NV_SHUFFLE)
#include "nv/shuffle.h"

/* Butterfly over aligned groups of `width` lanes; partners add the same two operands, so every
   lane ends with the same sum. */
static inline float2 warp_sum(float2 v, int width)
{
    for (int m = 1; m < width; m <<= 1)
        v += (float2)(nv_shfl_xor(v.x, m), nv_shfl_xor(v.y, m));
    return v;
}

/* Sums v over the TEAM lanes of each row; every lane gets the result. */
static inline float2 team_sum(float2 v, __local float2 *red)
{
#if TEAM <= 32
    (void)red;
    return warp_sum(v, TEAM);
#else
    const int lid = get_local_id(0), warp = lid / 32, w = TEAM / 32;
    v = warp_sum(v, 32);
    if (lid % 32 == 0) red[warp] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return warp_sum(red[warp - warp % w + lid % w], w);
#endif
}
#else
/* Up to 32 lanes: one barrier, then every lane adds the team's partials in the same order, so
   all lanes agree bit for bit. Longer teams: RED_P lanes first add TEAM / RED_P partials each,
   then every lane adds those RED_P: two barriers. */
static inline float2 team_sum(float2 v, __local float2 *red)
{
#if TEAM == 1
    (void)red;
    return v;
#else
    const int lid = get_local_id(0), lane = lid % TEAM, first = lid - lane;
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
#if TEAM <= 32
    const __local float2 *part = red + first;
    const int parts = TEAM;
#else
    __local float2 *part = red + WG + lid / TEAM * RED_P;
    const int parts = RED_P;
    if (lane < RED_P) {
        float2 acc = red[first + lane];
        for (int j = 1; j < TEAM / RED_P; j++) acc += red[first + lane + j * RED_P];
        part[lane] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    float2 acc = part[0];
    for (int j = 1; j < parts; j++) acc += part[j];
    return acc;
#endif
}
#endif

/* f16 bits to and from f32 without cl_khr_fp16: one cvt instruction on NVIDIA (not volatile: a
   volatile one stays where it is written, so a prefetched row would be waited for at its
   load); elsewhere
   vload_half/vstore_half through a private copy, which compilers reduce to the same. */
#if defined(DTYPE_F16) && defined(NV_PTX)
static inline float half_to_f32(ushort b)
{
    float f;
    __asm__("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
}

static inline ushort f32_to_half(float f)
{
    ushort b;
    __asm__("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}
#elif defined(DTYPE_F16)
static inline float half_to_f32(ushort b) { return vload_half(0, (const __private half *)&b); }

static inline ushort f32_to_half(float f)
{
    ushort b;
    vstore_half_rte(f, 0, (__private half *)&b);
    return b;
}
#endif

#if defined(DTYPE_BF16)
/* Two values rounded to bf16 (nearest even) in one little-endian word, lo first: on NVIDIA
   sm_80+ one cvt for the pair, where the portable rounding costs five integer operations an
   element, enough to hold the bf16 forward below f16's bandwidth (bench/journal/2026-11-25.md,
   "Layer norm forward, 16-bit rows"). */
static inline uint bf16_pair(float lo, float hi)
{
#if defined(NV_PTX) && CLKIT_NV_SM >= 80
    uint r;
    __asm__("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (uint)f32_to_bf16(lo) | (uint)f32_to_bf16(hi) << 16;
#endif
}
#endif

/* One 16-byte access of VEC elements, moved to and from the private array one component at a
   time so that v[] stays in registers. */
#if VEC == 4
#define SPLIT(v, t) ((v)[0] = (t).s0, (v)[1] = (t).s1, (v)[2] = (t).s2, (v)[3] = (t).s3)
#define JOIN(v) ((float4)((v)[0], (v)[1], (v)[2], (v)[3]))
#elif VEC == 8
#define SPLIT(v, t)                                                                            \
    ((v)[0] = (t).s0, (v)[1] = (t).s1, (v)[2] = (t).s2, (v)[3] = (t).s3, (v)[4] = (t).s4,     \
     (v)[5] = (t).s5, (v)[6] = (t).s6, (v)[7] = (t).s7)
#define JOIN(v) ((float8)((v)[0], (v)[1], (v)[2], (v)[3], (v)[4], (v)[5], (v)[6], (v)[7]))
#endif

#if VEC > 1
/* A 16-byte chunk as loaded (four words) to its VEC values; 16-bit elements come in pairs, the
   lower one in the low half of the word (little-endian). */
static inline void unpack_vec(uint4 w, __private float *v)
{
#if defined(DTYPE_F32)
    float4 t = as_float4(w);
#elif defined(DTYPE_F16)
    float8 t = (float8)(half_to_f32((ushort)w.s0), half_to_f32((ushort)(w.s0 >> 16)),
                        half_to_f32((ushort)w.s1), half_to_f32((ushort)(w.s1 >> 16)),
                        half_to_f32((ushort)w.s2), half_to_f32((ushort)(w.s2 >> 16)),
                        half_to_f32((ushort)w.s3), half_to_f32((ushort)(w.s3 >> 16)));
#elif defined(DTYPE_BF16)
    float8 t = (float8)(as_float(w.s0 << 16), as_float(w.s0 & 0xffff0000u), as_float(w.s1 << 16),
                        as_float(w.s1 & 0xffff0000u), as_float(w.s2 << 16), as_float(w.s2 & 0xffff0000u),
                        as_float(w.s3 << 16), as_float(w.s3 & 0xffff0000u));
#endif
    SPLIT(v, t);
}

/* p is aligned to VEC elements. */
static inline void load_vec(__global const elem_t *p, __private float *v)
{
    unpack_vec(*(__global const uint4 *)p, v);
}

static inline void store_vec(__global elem_t *p, const __private float *v)
{
#if defined(DTYPE_F32)
    *(__global float4 *)p = JOIN(v);
#elif defined(DTYPE_F16)
    *(__global ushort8 *)p = (ushort8)(f32_to_half(v[0]), f32_to_half(v[1]), f32_to_half(v[2]),
                                       f32_to_half(v[3]), f32_to_half(v[4]), f32_to_half(v[5]),
                                       f32_to_half(v[6]), f32_to_half(v[7]));
#elif defined(DTYPE_BF16)
    *(__global uint4 *)p = (uint4)(bf16_pair(v[0], v[1]), bf16_pair(v[2], v[3]), bf16_pair(v[4], v[5]),
                                   bf16_pair(v[6], v[7]));
#endif
}

/* Whether the chunk at pos holds some but not all of the positions [lo, hi). */
static inline bool straddles(int pos, int lo, int hi)
{
    return (pos < lo && pos + VEC > lo) || (pos < hi && pos + VEC > hi);
}
#endif

static inline int chunk_pos(int c, int lane) { return (c * TEAM + lane) * VEC; }

static inline bool inside(int pos, int lo, int hi) { return pos >= lo && pos < hi; }

#if VEC > 1
/* The positions in [lo, hi) of the at most two chunks that straddle an end, one value at a
   time (unit stride): the vector pass leaves them out. */
static inline void load_straddling(__global const elem_t *p, int a, int lane, int lo, int hi,
                                   __private float *v)
{
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        if (straddles(pos, lo, hi)) {
            #pragma unroll
            for (int k = 0; k < VEC; k++)
                if (inside(pos + k, lo, hi)) v[c * VEC + k] = LOAD(p, pos + k - a);
        }
    }
}
#endif

/* The lane's values at positions [lo, hi) of a row whose position pos is p[(pos - a) * cs];
   positions outside read as 0. With vec (cs is then 1 and p - a aligned), chunks wholly inside
   move as one vector and the at most two that straddle an end are finished in a second pass,
   which keeps compilers from splitting the vector loads; without it every value is a scalar
   load (VEC is 1, so a is 0, or a weight row of another phase). */
static inline void load_span(__global const elem_t *p, long cs, int a, int lane, int lo, int hi,
                             bool vec, __private float *v)
{
#if VEC > 1
    if (vec) {
        #pragma unroll
        for (int c = 0; c < CHUNKS; c++) {
            const int pos = chunk_pos(c, lane);
            if (pos >= lo && pos + VEC <= hi) {
                load_vec(p + (pos - a), v + c * VEC);
            } else {
                #pragma unroll
                for (int k = 0; k < VEC; k++) v[c * VEC + k] = 0.0f;
            }
        }
        load_straddling(p, a, lane, lo, hi, v);
        return;
    }
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        #pragma unroll
        for (int k = 0; k < VEC; k++)
            v[c * VEC + k] = inside(pos + k, lo, hi) ? LOAD(p, (pos + k - a) * cs) : 0.0f;
    }
#else
    (void)a, (void)vec;
    /* Stepping a pointer, rather than indexing with pos * cs, keeps compilers from holding one
       64-bit offset per chunk in registers. */
    p += lane * cs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++, p += TEAM * cs)
        v[c] = inside(chunk_pos(c, lane), lo, hi) ? LOAD(p, 0) : 0.0f;
#endif
}

/* Stores the lane's values at positions [lo, hi), laid out as for load_span with vec (the
   host gives outputs vector access whenever their inputs have it). */
static inline void store_span(__global elem_t *p, long cs, int a, int lane, int lo, int hi,
                              const __private float *v)
{
#if VEC > 1
    (void)cs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        if (pos >= lo && pos + VEC <= hi) {
            store_vec(p + (pos - a), v + c * VEC);
        } else if (straddles(pos, lo, hi)) {
            #pragma unroll
            for (int k = 0; k < VEC; k++)
                if (inside(pos + k, lo, hi)) STORE(p, pos + k - a, v[c * VEC + k]);
        }
    }
#else
    (void)a;
    p += lane * cs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++, p += TEAM * cs)
        if (inside(chunk_pos(c, lane), lo, hi)) STORE(p, 0, v[c]);
#endif
}

/* The lane's weight and bias values at positions [lo, hi): ones and zeros where absent. */
static inline void load_affine(__global const elem_t *w, long w_cs, __global const elem_t *b,
                               long b_cs, int a, int lane, int lo, int hi, int flags,
                               __private float *wv, __private float *bv)
{
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) wv[i] = 1.0f, bv[i] = 0.0f;
    if (flags & HAS_W) load_span(w, w_cs, a, lane, lo, hi, flags & WB_VEC, wv);
    if (flags & HAS_B) load_span(b, b_cs, a, lane, lo, hi, flags & WB_VEC, bv);
}

/* How many of the lane's positions lie in [lo, hi). */
static inline int count_inside(int lane, int lo, int hi)
{
    int count = 0;
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) count += inside(chunk_pos(i / VEC, lane) + i % VEC, lo, hi);
    return count;
}

static inline float sum_items(const __private float *v)
{
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) s += v[i];
    return s;
}

/* 1 at positions in [lo, hi), else 0, by arithmetic rather than comparisons. PoCL 3.1
   (loopvec) keeps a vector of comparisons that lives across a barrier in an i1 array which it
   writes packed and reads unpacked: compared masks here were reused by store_span after the
   next barrier, and 16-bit stores went missing. */
static inline float in_span(int pos, int lo, int hi)
{
    return fmin(fmin(fmax((float)(pos - lo + 1), 0.0f), fmax((float)(hi - pos), 0.0f)), 1.0f);
}

/* Sum of squared deviations from mu over the lane's positions in [lo, hi); leaves v[i] - mu
   (0 outside) in v. */
static inline float center(float mu, int lane, int lo, int hi, __private float *v)
{
    float sq = 0.0f;
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) {
        v[i] = (v[i] - mu) * in_span(chunk_pos(i / VEC, lane) + i % VEC, lo, hi);
        sq += v[i] * v[i];
    }
    return sq;
}

static inline void store_stats(__global float *mean, long mean_off, long mean_s,
                               __global float *rstd, long rstd_off, long rstd_s, long row,
                               float mu, float rs, int flags)
{
    if (flags & WANT_MEAN) mean[mean_off + row * mean_s] = mu;
    if (flags & WANT_RSTD) rstd[rstd_off + row * rstd_s] = rs;
}

#if !BACKWARD && !LOOP
/* Prefetch where a second row fits in registers beside the first, weight and bias: the next
   row's loads are in flight while this one is reduced. f32 rows are held as values; 16-bit
   rows as the words loaded, half the registers, for a conversion at the prefetch would wait
   for the load right there and lose more than the prefetch gains. Where a second row does not
   fit (16 f32 values a lane, or two chunks a lane of 16-bit rows past 8192) the prefetch
   spills, which costs more than it hides, so those rows go without (bench/journal/2026-11-23.md,
   "Layer norm"; 2026-11-25.md, "Layer norm forward, 16-bit rows"). */
#if defined(DTYPE_F32) && ITEMS <= 8
#define PREFETCH 1
#elif VEC == 8 && ITEMS <= 8
#define PREFETCH 1
#define HOLD_WORDS 1
#else
#define PREFETCH 0
#endif

#if defined(HOLD_WORDS)
typedef uint4 held_t;
#define HELD CHUNKS
#else
typedef float held_t;
#define HELD ITEMS
#endif

/* Row `row` of x (nothing of it when row >= m: zeros). */
static inline void load_row(__global const elem_t *x, long x_rs, long x_cs, int a, int n,
                            int lane, long row, long m, __private float *v)
{
    const bool live = row < m;
    load_span(x + (live ? row : 0) * x_rs, x_cs, a, lane, a, live ? a + n : 0, true, v);
}

/* Row `row` held for later: its values, or (HOLD_WORDS) its whole chunks as loaded. */
static inline void hold_row(__global const elem_t *x, long x_rs, long x_cs, int a, int n,
                            int lane, long row, long m, __private held_t *h)
{
#if defined(HOLD_WORDS)
    (void)x_cs;
    const int hi = row < m ? a + n : 0;
    __global const elem_t *p = x + (row < m ? row : 0) * x_rs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        h[c] = pos >= a && pos + VEC <= hi ? *(__global const uint4 *)(p + (pos - a)) : (uint4)(0);
    }
#else
    load_row(x, x_rs, x_cs, a, n, lane, row, m, h);
#endif
}

/* The values of held row `row`: words unpacked, and the chunks straddling an end of the row
   (never held) loaded now. */
static inline void take_row(__global const elem_t *x, long x_rs, int a, int n, int lane, long row,
                            long m, const __private held_t *h, __private float *v)
{
#if defined(HOLD_WORDS)
    const int hi = row < m ? a + n : 0;
    __global const elem_t *p = x + (row < m ? row : 0) * x_rs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) unpack_vec(h[c], v + c * VEC);
    load_straddling(p, a, lane, a, hi, v);
#else
    (void)x, (void)x_rs, (void)a, (void)n, (void)lane, (void)row, (void)m;
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) v[i] = h[i];
#endif
}

/* Rows of at most SPAN - a elements, held on chip, ROWS to a work-group. Offsets and strides
   are in elements; x_cs and y_cs are 1 when VEC > 1. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_fwd(__global const elem_t *x, long x_off, long x_rs, long x_cs,
                   __global elem_t *y, long y_off, long y_rs, long y_cs,
                   __global const elem_t *w, long w_off, long w_cs,
                   __global const elem_t *b, long b_off, long b_cs,
                   __global float *mean, long mean_off, long mean_s,
                   __global float *rstd, long rstd_off, long rstd_s,
                   long m, int n, int a, float eps, int flags)
{
    /* The mean and the variance use separate halves: one barrier apart. */
    __local float2 red[2 * RED_WORDS];
    const int lid = get_local_id(0), lane = lid % TEAM;
    /* A lane holds the same columns in every row: its weight and bias stay on chip. */
    float wv[ITEMS], bv[ITEMS];
    load_affine(w + w_off, w_cs, b + b_off, b_cs, a, lane, a, a + n, flags, wv, bv);
#if defined(WB_LOCAL)
    /* Value i of work-item lid at [i][lid]: a warp's reads fall in distinct banks. Each
       work-item reads back only what it wrote, so no barrier is needed. */
    __local float wl[ITEMS * WG], bl[ITEMS * WG];
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) wl[i * WG + lid] = wv[i], bl[i * WG + lid] = bv[i];
#define W_AT(i) wl[(i) * WG + lid]
#define B_AT(i) bl[(i) * WG + lid]
#else
#define W_AT(i) wv[i]
#define B_AT(i) bv[i]
#endif
    /* With registers to spare (PREFETCH), the next row's loads are issued before this row's
       reductions, so that they are in flight while the team waits at barriers: with one or
       two rows per compute unit, the loads alone would not keep the memory busy. */
    const long step = get_num_groups(0) * ROWS;
    long row = get_group_id(0) * ROWS + lid / TEAM;
    held_t next[HELD];
    if (PREFETCH) hold_row(x + x_off, x_rs, x_cs, a, n, lane, row, m, next);
    for (; row - lid / TEAM < m; row += step) {
        const bool live = row < m;
        const int hi = live ? a + n : 0;
        float v[ITEMS];
        if (PREFETCH) {
            held_t held[HELD];
            #pragma unroll
            for (int i = 0; i < HELD; i++) held[i] = next[i];
            hold_row(x + x_off, x_rs, x_cs, a, n, lane, row + step, m, next);
            take_row(x + x_off, x_rs, a, n, lane, row, m, held, v);
        } else {
            load_row(x + x_off, x_rs, x_cs, a, n, lane, row, m, v);
        }
        const float mu = team_sum((float2)(sum_items(v), 0.0f), red).x / n;
        const float sq = center(mu, lane, a, hi, v);
        const float rs = rsqrt(team_sum((float2)(sq, 0.0f), red + RED_WORDS).x / n + eps);
        #pragma unroll
        for (int i = 0; i < ITEMS; i++) v[i] = v[i] * rs * W_AT(i) + B_AT(i);
        store_span(y + y_off + (live ? row : 0) * y_rs, y_cs, a, lane, a, hi, v);
        if (live && lane == 0)
            store_stats(mean, mean_off, mean_s, rstd, rstd_off, rstd_s, row, mu, rs, flags);
    }
}
#undef W_AT
#undef B_AT
#endif

#if !BACKWARD && LOOP
/* Rows of any length, one per work-group (ROWS == 1), SPAN positions per step. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_fwd_loop(__global const elem_t *x, long x_off, long x_rs, long x_cs,
                        __global elem_t *y, long y_off, long y_rs, long y_cs,
                        __global const elem_t *w, long w_off, long w_cs,
                        __global const elem_t *b, long b_off, long b_cs,
                        __global float *mean, long mean_off, long mean_s,
                        __global float *rstd, long rstd_off, long rstd_s,
                        long m, long n, int a, float eps, int flags)
{
    __local float2 red[2 * RED_WORDS];
    const int lane = get_local_id(0);
    const long end = a + n;
    for (long row = get_group_id(0); row < m; row += get_num_groups(0)) {
        __global const elem_t *xr = x + x_off + row * x_rs;
        __global elem_t *yr = y + y_off + row * y_rs;
        float v[ITEMS], count = 0.0f, mu = 0.0f, m2 = 0.0f;
        #pragma unroll 1
        for (long s = 0; s < end; s += SPAN) {
            const int lo = s ? 0 : a, hi = (int)min(end - s, (long)SPAN);
            load_span(xr + s * x_cs, x_cs, a, lane, lo, hi, true, v);
            const int k = count_inside(lane, lo, hi);
            if (!k) continue;
            const float chunk_mu = sum_items(v) / k, chunk_m2 = center(chunk_mu, lane, lo, hi, v);
            const float total = count + k, d = chunk_mu - mu, share = k / total;
            mu += d * share;
            m2 += chunk_m2 + d * d * count * share;
            count = total;
        }
        const float row_mu = team_sum((float2)(count * mu, 0.0f), red).x / n, d = mu - row_mu;
        const float rs =
            rsqrt(team_sum((float2)(m2 + count * d * d, 0.0f), red + RED_WORDS).x / n + eps);
        /* Each lane rewrites exactly the positions it read, so y may be x. */
        #pragma unroll 1
        for (long s = 0; s < end; s += SPAN) {
            const int lo = s ? 0 : a, hi = (int)min(end - s, (long)SPAN);
            float wv[ITEMS], bv[ITEMS];
            load_span(xr + s * x_cs, x_cs, a, lane, lo, hi, true, v);
            load_affine(w + w_off + s * w_cs, w_cs, b + b_off + s * b_cs, b_cs, a, lane, lo, hi,
                        flags, wv, bv);
            #pragma unroll
            for (int i = 0; i < ITEMS; i++) v[i] = (v[i] - row_mu) * rs * wv[i] + bv[i];
            store_span(yr + s * y_cs, y_cs, a, lane, lo, hi, v);
        }
        if (lane == 0)
            store_stats(mean, mean_off, mean_s, rstd, rstd_off, rstd_s, row, row_mu, rs, flags);
    }
}
#endif

#if BACKWARD
/* xv = xhat and gv = dy at the lane's positions in [lo, hi) of one row (0 outside). */
static inline void load_xhat_dy(__global const elem_t *dy, long g_cs, __global const elem_t *x,
                                long x_cs, float mu, float rs, int a, int lane, int lo, int hi,
                                __private float *xv, __private float *gv)
{
    load_span(x, x_cs, a, lane, lo, hi, true, xv);
    load_span(dy, g_cs, a, lane, lo, hi, true, gv);
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) xv[i] = (xv[i] - mu) * rs;
}

/* gv = w * dy (wdy); returns the lane's part of (c1, c2) * n, the sums of xhat * wdy and wdy. */
static inline float2 scale_by_w(__global const elem_t *w, long w_cs, int a, int lane, int lo,
                                int hi, int flags, const __private float *xv, __private float *gv)
{
    if (flags & HAS_W) {
        float t[ITEMS];
        load_span(w, w_cs, a, lane, lo, hi, flags & WB_VEC, t);
        #pragma unroll
        for (int i = 0; i < ITEMS; i++) gv[i] *= t[i];
    }
    float2 c = 0.0f;
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) c += (float2)(xv[i] * gv[i], gv[i]);
    return c;
}

/* xv = dx = (wdy - (xhat * c1 + c2)) * rstd. */
static inline void dx_values(float2 c, float rs, const __private float *gv, __private float *xv)
{
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) xv[i] = (gv[i] - (xv[i] * c.x + c.y)) * rs;
}
#endif

#if BACKWARD && !LOOP
/* Rows held on chip, ROWS to a work-group. The lane's dw and db sums stay in registers until
   the group has done all its rows; team t of group g then writes partial row g * ROWS + t of
   `part` (dw partials in rows 0..P-1, db in P..2P-1, P = groups x ROWS, N floats each). With
   x, dy and both sums held per position, w is reloaded each row (a cache hit) rather than
   held as well. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_bwd(__global const elem_t *dy, long g_off, long g_rs, long g_cs,
                   __global const elem_t *x, long x_off, long x_rs, long x_cs,
                   __global const elem_t *w, long w_off, long w_cs,
                   __global const float *mean, long mean_off, long mean_s,
                   __global const float *rstd, long rstd_off, long rstd_s,
                   __global elem_t *dx, long dx_off, long dx_rs, long dx_cs,
                   __global float *part, long m, int n, int a, int flags)
{
    /* One reduction per row: alternate halves, so that no lane overwrites a row's partials
       while slower lanes still read the previous row's. */
    __local float2 red[2 * RED_WORDS];
    const int lid = get_local_id(0), lane = lid % TEAM;
    float acc_w[ITEMS], acc_b[ITEMS];
    #pragma unroll
    for (int i = 0; i < ITEMS; i++) acc_w[i] = acc_b[i] = 0.0f;
    int flip = 0;
    for (long block = get_group_id(0); block * ROWS < m; block += get_num_groups(0), flip ^= 1) {
        const long row = block * ROWS + lid / TEAM;
        const bool live = row < m;
        const long r = live ? row : 0;
        const int hi = live ? a + n : 0;
        const float mu = live ? mean[mean_off + r * mean_s] : 0.0f;
        const float rs = live ? rstd[rstd_off + r * rstd_s] : 0.0f;
        float xv[ITEMS], gv[ITEMS];
        load_xhat_dy(dy + g_off + r * g_rs, g_cs, x + x_off + r * x_rs, x_cs, mu, rs, a, lane, a,
                     hi, xv, gv);
        /* Positions outside the row hold dy = 0 and add nothing. */
        #pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            acc_w[i] += gv[i] * xv[i];
            acc_b[i] += gv[i];
        }
        float2 c = scale_by_w(w + w_off, w_cs, a, lane, a, hi, flags, xv, gv);
        c = team_sum(c, red + flip * RED_WORDS) / n;
        dx_values(c, rs, gv, xv);
        store_span(dx + dx_off + r * dx_rs, dx_cs, a, lane, a, hi, xv);
    }
    if (!(flags & WANT_DWDB)) return;
    const long parts = get_num_groups(0) * ROWS, prow = get_group_id(0) * ROWS + lid / TEAM;
    __global float *pw = part + prow * n, *pb = part + (parts + prow) * n;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++)
        #pragma unroll
        for (int k = 0; k < VEC; k++) {
            const int pos = chunk_pos(c, lane) + k;
            if (inside(pos, a, a + n)) {
                pw[pos - a] = acc_w[c * VEC + k];
                pb[pos - a] = acc_b[c * VEC + k];
            }
        }
}
#endif

#if BACKWARD && LOOP
/* Rows of any length, one per work-group (ROWS == 1). Group g owns partial rows g and P + g
   (P = groups); its first row, row g (the host launches at most M groups), stores them and
   later rows add to them. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void layernorm_bwd_loop(__global const elem_t *dy, long g_off, long g_rs, long g_cs,
                        __global const elem_t *x, long x_off, long x_rs, long x_cs,
                        __global const elem_t *w, long w_off, long w_cs,
                        __global const float *mean, long mean_off, long mean_s,
                        __global const float *rstd, long rstd_off, long rstd_s,
                        __global elem_t *dx, long dx_off, long dx_rs, long dx_cs,
                        __global float *part, long m, long n, int a, int flags)
{
    __local float2 red[2 * RED_WORDS];
    const int lane = get_local_id(0);
    const long end = a + n, group = get_group_id(0), groups = get_num_groups(0);
    __global float *pw = part + group * n, *pb = part + (groups + group) * n;
    int flip = 0;
    for (long row = group; row < m; row += groups, flip ^= 1) {
        __global const elem_t *gr = dy + g_off + row * g_rs, *xr = x + x_off + row * x_rs;
        __global elem_t *dxr = dx + dx_off + row * dx_rs;
        const float mu = mean[mean_off + row * mean_s], rs = rstd[rstd_off + row * rstd_s];
        const bool first = row == group;
        float xv[ITEMS], gv[ITEMS];
        float2 c = 0.0f;
        #pragma unroll 1
        for (long s = 0; s < end; s += SPAN) {
            const int lo = s ? 0 : a, hi = (int)min(end - s, (long)SPAN);
            load_xhat_dy(gr + s * g_cs, g_cs, xr + s * x_cs, x_cs, mu, rs, a, lane, lo, hi, xv, gv);
            c += scale_by_w(w + w_off + s * w_cs, w_cs, a, lane, lo, hi, flags, xv, gv);
        }
        c = team_sum(c, red + flip * RED_WORDS) / n;
        /* Each lane rewrites exactly the positions it read, so dx may be dy. */
        #pragma unroll 1
        for (long s = 0; s < end; s += SPAN) {
            const int lo = s ? 0 : a, hi = (int)min(end - s, (long)SPAN);
            load_xhat_dy(gr + s * g_cs, g_cs, xr + s * x_cs, x_cs, mu, rs, a, lane, lo, hi, xv, gv);
            if (flags & WANT_DWDB) {
                #pragma unroll
                for (int i = 0; i < ITEMS; i++) {
                    const int pos = chunk_pos(i / VEC, lane) + i % VEC;
                    if (!inside(pos, lo, hi)) continue;
                    const long at = s + pos - a;
                    pw[at] = (first ? 0.0f : pw[at]) + gv[i] * xv[i];
                    pb[at] = (first ? 0.0f : pb[at]) + gv[i];
                }
            }
            scale_by_w(w + w_off + s * w_cs, w_cs, a, lane, lo, hi, flags, xv, gv);
            dx_values(c, rs, gv, xv);
            store_span(dxr + s * dx_cs, dx_cs, a, lane, lo, hi, xv);
        }
    }
}
#endif

#else /* REDUCE */

/* dw and db from the partial rows of the backward: RCOLS columns per work-group, each summed
   by RSLICES work-items over every RSLICES-th partial, then the slices in order. The order
   depends only on P and the build, so reruns are bitwise equal. P may be 0 (no rows): zeros. */
__kernel __attribute__((reqd_work_group_size(RCOLS * RSLICES, 1, 1)))
void layernorm_dwdb(__global const float *part, int parts, long n,
                    __global elem_t *dw, long dw_off, long dw_s,
                    __global elem_t *db, long db_off, long db_s, int flags)
{
    __local float2 red[RCOLS * RSLICES];
    const int lid = get_local_id(0), c = lid % RCOLS, slice = lid / RCOLS;
    const long col = get_group_id(0) * RCOLS + c;
    float2 acc = 0.0f;
    if (col < n)
        for (int p = slice; p < parts; p += RSLICES)
            acc += (float2)(part[p * n + col], part[(parts + p) * n + col]);
    red[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (slice || col >= n) return;
    for (int s = 1; s < RSLICES; s++) acc += red[s * RCOLS + c];
    if (flags & WANT_DW) STORE(dw, dw_off + col * dw_s, acc.x);
    if (flags & WANT_DB) STORE(db, db_off + col * db_s, acc.y);
}
#endif
