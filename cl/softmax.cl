/* Fused softmax, the second Triton tutorial: out[r, :] = exp(x[r, :] - m) / sum(exp(x[r, :] - m))
   with m the row's max.

   Computed naively, one kernel per step, softmax reads 5MN + 2M elements and writes 3MN + 2M
   (max, subtract, exp, sum, divide each a round trip through DRAM). Here a row is loaded into
   the registers of a team of work-items once, reduced on chip (max, then the sum of the
   exponentials, which stay in registers) and written once: MN reads and MN writes, the least
   any softmax can move, about 4x less traffic than the naive one. Subtracting the row max
   keeps exp from overflowing; arithmetic is f32 for every storage dtype.

   Layout: TEAM work-items share a row, ROWS rows per work-group (short rows). Lane `l` holds
   chunks c = 0..ITEMS/VEC-1 at positions (c * TEAM + l) * VEC, so a warp's loads cover
   consecutive memory. Unit-stride rows use 16-byte loads (VEC elements): positions count from
   the aligned address at or below the row's start, and the `a` positions before the row are
   masked, so any offset and row stride still load whole vectors; chunks that straddle either
   end of the row fall back to masked scalar access. Other column strides use VEC = 1.

   Long rows take the online path (Milakov & Gimelshein, 2018): one pass keeps a running max
   and a running sum of exponentials per lane, rescaling the sum when the max grows; the team
   combines them and a second pass writes exp(x - max) / sum. Only the rows in flight are
   reread, so where L2 holds them (a GPU's persistent grid keeps them few) the second read comes
   from L2 and DRAM still sees one read and one write per element; where L2 cannot hold them it
   is 2 reads and 1 write, against the naive 8. GPUs take it past 2048 positions, where it is
   faster than holding rows in registers (host/heuristics.c gives the measurements); CPUs for
   rows over 2048 elements.

   Reductions: on NVIDIA (sm_70+) warps reduce with shfl.sync butterflies and meet once through
   local memory: one barrier per reduction, none when a team fits in a warp. Elsewhere (PoCL,
   AMD, ...) partials go through local memory, one or two barriers per reduction, without
   assuming any sub-group width. Both orders give the same sums up to rounding.

   Work-groups are persistent: the host launches as many as the compute units hold and each
   loops over rows, so every group runs the same number of iterations (barriers and shuffles
   stay uniform) and a dead row in the last block simply loads and stores nothing.

   Compile-time constants: TEAM, ROWS, ITEMS, VEC (1, or 4 for f32 and 8 for 16-bit dtypes),
   ONLINE (which of the two kernels a program holds: building one halves the compile), the
   dtype (common.h), CLKIT_WARP and, on NVIDIA, CLKIT_NV_SM; SOFTMAX_PORTABLE forces the
   local-memory reductions. */
#include "common.h"

#define WG (TEAM * ROWS)
#define CHUNKS (ITEMS / VEC)
#define SPAN (TEAM * ITEMS) /* positions a team covers in one step */

/* Inline PTX only where the host says the device is NVIDIA, and not in the fallback build. */
#if defined(CLKIT_NV_SM) && !defined(SOFTMAX_PORTABLE)
#define NV_PTX 1
#if CLKIT_NV_SM >= 70 && CLKIT_WARP == 32 && WG % 32 == 0
#define NV_SHUFFLE 1
#endif
#endif

/* Local words per reduction: one partial per warp (NVIDIA), or per lane plus RED_P per row. */
#if defined(NV_SHUFFLE)
#define RED_WORDS (TEAM > 32 ? ROWS * (TEAM / 32) : 1)
#elif TEAM > 32
#define RED_P (TEAM >= 512 ? 32 : TEAM >= 128 ? 16 : 8)
#define RED_WORDS (WG + ROWS * RED_P)
#else
#define RED_WORDS WG
#endif

static inline float fold(float a, float b, bool sum) { return sum ? a + b : fmax(a, b); }

#if defined(NV_SHUFFLE)
#include "nv/shuffle.h"

/* Butterfly over aligned groups of `width` lanes: every lane ends with the same value, since
   each step combines the same two operands in both partner lanes. */
static inline float warp_fold(float v, bool sum, int width)
{
    for (int m = 1; m < width; m <<= 1) v = fold(v, nv_shfl_xor(v, m), sum);
    return v;
}

/* Reduces v over the TEAM lanes of each row; every lane gets the result. */
static inline float team_reduce(float v, bool sum, __local float *red)
{
#if TEAM <= 32
    (void)red;
    return warp_fold(v, sum, TEAM);
#else
    const int lid = get_local_id(0), warp = lid / 32, w = TEAM / 32;
    v = warp_fold(v, sum, 32);
    if (lid % 32 == 0) red[warp] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    return warp_fold(red[warp - warp % w + lid % w], sum, w);
#endif
}
#else
/* Up to 32 lanes: one barrier, then every lane folds the team's partials in the same order,
   so all lanes agree bit for bit. Longer teams: RED_P lanes first fold TEAM / RED_P partials
   each (consecutive lanes read consecutive words: no bank conflicts), then every lane folds
   those RED_P: two barriers. */
static inline float team_reduce(float v, bool sum, __local float *red)
{
#if TEAM == 1
    (void)red;
    return v;
#else
    const int lid = get_local_id(0), lane = lid % TEAM, first = lid - lane;
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
#if TEAM <= 32
    const __local float *part = red + first;
    const int parts = TEAM;
#else
    __local float *part = red + WG + lid / TEAM * RED_P;
    const int parts = RED_P;
    if (lane < RED_P) {
        float acc = red[first + lane];
        for (int j = 1; j < TEAM / RED_P; j++) acc = fold(acc, red[first + lane + j * RED_P], sum);
        part[lane] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    float acc = part[0];
    for (int j = 1; j < parts; j++) acc = fold(acc, part[j], sum);
    return acc;
#endif
}
#endif

/* f16 bits to and from f32 without cl_khr_fp16: one cvt instruction on NVIDIA; elsewhere
   vload_half/vstore_half through a private copy, which compilers reduce to the same. */
#if defined(DTYPE_F16) && defined(NV_PTX)
static inline float half_to_f32(ushort b)
{
    float f;
    __asm__ volatile("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
}

static inline ushort f32_to_half(float f)
{
    ushort b;
    __asm__ volatile("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
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

/* One 16-byte access of VEC elements: f32 as float4, 16-bit dtypes as raw ushort8 bits. The
   values go to and come from the private array one component at a time, which keeps v[] in
   registers without relying on vload/vstore into private memory being inlined. */
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
/* p is aligned to VEC elements. */
static inline void load_vec(__global const elem_t *p, __private float *v)
{
#if defined(DTYPE_F32)
    float4 t = *(__global const float4 *)p;
    SPLIT(v, t);
#elif defined(DTYPE_F16)
    ushort8 b = *(__global const ushort8 *)p;
    float8 t = (float8)(half_to_f32(b.s0), half_to_f32(b.s1), half_to_f32(b.s2),
                        half_to_f32(b.s3), half_to_f32(b.s4), half_to_f32(b.s5),
                        half_to_f32(b.s6), half_to_f32(b.s7));
    SPLIT(v, t);
#elif defined(DTYPE_BF16)
    ushort8 b = *(__global const ushort8 *)p;
    float8 t = (float8)(bf16_to_f32(b.s0), bf16_to_f32(b.s1), bf16_to_f32(b.s2),
                        bf16_to_f32(b.s3), bf16_to_f32(b.s4), bf16_to_f32(b.s5),
                        bf16_to_f32(b.s6), bf16_to_f32(b.s7));
    SPLIT(v, t);
#endif
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
    *(__global ushort8 *)p = (ushort8)(f32_to_bf16(v[0]), f32_to_bf16(v[1]), f32_to_bf16(v[2]),
                                       f32_to_bf16(v[3]), f32_to_bf16(v[4]), f32_to_bf16(v[5]),
                                       f32_to_bf16(v[6]), f32_to_bf16(v[7]));
#endif
}

/* Whether the chunk at pos holds some but not all of the positions [lo, hi). */
static inline bool straddles(int pos, int lo, int hi)
{
    return (pos < lo && pos + VEC > lo) || (pos < hi && pos + VEC > hi);
}
#endif

static inline int chunk_pos(int c, int lane) { return (c * TEAM + lane) * VEC; }

/* The lane's CHUNKS chunks of a row whose elements sit at positions [lo, hi) of p, element i
   at p[i * cs] (cs is 1 when VEC > 1). Positions outside the row read as -inf, which no max or
   sum is poisoned by. Chunks wholly inside move as one vector; the at most two that straddle
   the row's ends are finished in a separate pass, so that compilers keep the vector loads
   whole instead of merging both paths into scalar loads. */
static inline void load_span(__global const elem_t *p, long cs, int lane, int lo, int hi,
                             __private float *v)
{
#if VEC > 1
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        if (pos >= lo && pos + VEC <= hi) {
            load_vec(p + pos, v + c * VEC);
        } else {
            #pragma unroll
            for (int k = 0; k < VEC; k++) v[c * VEC + k] = -INFINITY;
        }
    }
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        if (straddles(pos, lo, hi)) {
            #pragma unroll
            for (int k = 0; k < VEC; k++)
                if (pos + k >= lo && pos + k < hi) v[c * VEC + k] = LOAD(p, pos + k);
        }
    }
#else
    /* Stepping a pointer, rather than indexing with pos * cs, keeps compilers from hoisting
       one 64-bit offset per chunk out of the row loop into registers. */
    p += lane * cs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++, p += TEAM * cs) {
        const int pos = chunk_pos(c, lane);
        v[c] = pos >= lo && pos < hi ? LOAD(p, 0) : -INFINITY;
    }
#endif
}

static inline void store_span(__global elem_t *p, long cs, int lane, int lo, int hi,
                              const __private float *v)
{
#if VEC > 1
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = chunk_pos(c, lane);
        if (pos >= lo && pos + VEC <= hi) {
            store_vec(p + pos, v + c * VEC);
        } else if (straddles(pos, lo, hi)) {
            #pragma unroll
            for (int k = 0; k < VEC; k++)
                if (pos + k >= lo && pos + k < hi) STORE(p, pos + k, v[c * VEC + k]);
        }
    }
#else
    p += lane * cs;
    #pragma unroll
    for (int c = 0; c < CHUNKS; c++, p += TEAM * cs) {
        const int pos = chunk_pos(c, lane);
        if (pos >= lo && pos < hi) STORE(p, 0, v[c]);
    }
#endif
}

#if !ONLINE
/* Rows of at most SPAN - (VEC - 1) elements (SPAN when rows start aligned), held on chip.
   x_off, o_off: element offsets; *_rs, *_cs: row and column strides in elements (the column
   strides are 1 when VEC > 1). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_rows(__global const elem_t *x, long x_off, long x_rs, long x_cs,
                  __global elem_t *out, long o_off, long o_rs, long o_cs, long m, int n)
{
    __local float red[2 * RED_WORDS]; /* max and sum use separate halves: one barrier apart */
    const int lid = get_local_id(0), lane = lid % TEAM;
    for (long block = get_group_id(0); block * ROWS < m; block += get_num_groups(0)) {
        const long row = block * ROWS + lid / TEAM;
        const bool live = row < m;
        const long xs = live ? x_off + row * x_rs : 0, os = live ? o_off + row * o_rs : 0;
        const int a = (int)(xs % VEC), hi = live ? a + n : 0;
        float v[ITEMS];
        load_span(x + xs - a, x_cs, lane, a, hi, v);
        float mx = -INFINITY;
        #pragma unroll
        for (int i = 0; i < ITEMS; i++) mx = fmax(mx, v[i]);
        mx = team_reduce(mx, false, red);
        /* Masked positions hold -inf and so contribute exp(-inf) = 0, unless the max itself
           is -inf: then the row is all -inf and NaN throughout, as in PyTorch. */
        float sum = 0.0f;
        #pragma unroll
        for (int i = 0; i < ITEMS; i++) {
            v[i] = exp(v[i] - mx);
            sum += v[i];
        }
        const float inv = 1.0f / team_reduce(sum, true, red + RED_WORDS);
        #pragma unroll
        for (int i = 0; i < ITEMS; i++) v[i] *= inv;
        store_span(out + os - a, o_cs, lane, a, hi, v);
    }
}
#else
/* Rows of any length, one per work-group (ROWS == 1), SPAN positions per step. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void softmax_online(__global const elem_t *x, long x_off, long x_rs, long x_cs,
                    __global elem_t *out, long o_off, long o_rs, long o_cs, long m, long n)
{
    __local float red[2 * RED_WORDS];
    const int lane = get_local_id(0) % TEAM;
    for (long row = get_group_id(0); row < m; row += get_num_groups(0)) {
        const long xs = x_off + row * x_rs, os = o_off + row * o_rs;
        const int a = (int)(xs % VEC);
        const long end = a + n;
        __global const elem_t *xp = x + xs - a;
        __global elem_t *op = out + os - a;
        float v[ITEMS];
        /* Pass 1: running max and sum of exp(x - max) per lane; the sum is rescaled when the
           max grows. A lane that has seen nothing above -inf skips the step: its sum stays 0
           instead of becoming exp(-inf - -inf) = NaN, which a later finite max could not undo. */
        float mx = -INFINITY, sum = 0.0f;
        #pragma unroll 1
        for (long b = 0; b < end; b += SPAN) {
            const int lo = b ? 0 : a, hi = (int)min(end - b, (long)SPAN);
            load_span(xp + b * x_cs, x_cs, lane, lo, hi, v);
            float nm = mx;
            #pragma unroll
            for (int i = 0; i < ITEMS; i++) nm = fmax(nm, v[i]);
            if (nm == -INFINITY) continue;
            sum *= exp(mx - nm);
            #pragma unroll
            for (int i = 0; i < ITEMS; i++) sum += exp(v[i] - nm);
            mx = nm;
        }
        /* A lane still at -inf has sum 0 and scales by exp(-inf) = 0 (or, when the whole row
           is -inf, by NaN, the row's answer). */
        const float row_max = team_reduce(mx, false, red);
        sum *= exp(mx - row_max);
        const float inv = 1.0f / team_reduce(sum, true, red + RED_WORDS);
        /* Pass 2: each lane rereads and writes the very positions it read in pass 1, so in
           place needs no synchronisation beyond the reductions. */
        #pragma unroll 1
        for (long b = 0; b < end; b += SPAN) {
            const int lo = b ? 0 : a, hi = (int)min(end - b, (long)SPAN);
            load_span(xp + b * x_cs, x_cs, lane, lo, hi, v);
            #pragma unroll
            for (int i = 0; i < ITEMS; i++) v[i] = exp(v[i] - row_max) * inv;
            store_span(op + b * o_cs, o_cs, lane, lo, hi, v);
        }
    }
}
#endif
