/* Cross-entropy, fused: loss_t = lse_t - (1 - e) z[t, y_t] - e mean_j z[t, j] (+ zs lse_t^2),
   lse_t = log sum_j exp z[t, j], with z soft-capped first when asked (z <- cap tanh(z / cap)),
   and the gradient of the reduced loss with respect to the logits.

   Done with separate framework ops, log_softmax writes a (T, V) array that the loss gathers
   from; the backward writes a (T, V) one-hot gradient, then reads it with the log-probabilities
   to write dlogits: 3 reads and 3 writes of T x V elements (more when 16-bit logits are
   upcast first). ce_rows reads a row twice and writes its gradient once, in the logits' dtype
   (in place if asked, as Liger-Kernel does): pass 1 keeps an online max and sum of
   exponentials (Milakov & Gimelshein, 2018), the sum of the logits (label smoothing) and the
   target's logit; pass 2 rereads the row, which on a GPU mostly comes from L2 since only the
   rows in flight are reread, and writes
   scale * (softmax (1 + 2 zs lse) - (1 - e) onehot - e / V) * (1 - tanh^2).
   Subtracting the running max keeps exp finite for any logits; -inf logits get softmax 0,
   and a row of nothing but -inf has lse -inf and a NaN loss and gradient, as in PyTorch.

   The linear variant (lce_*) never holds the (T, V) logits: the host computes them a chunk of
   columns at a time with clkit_matmul into an f32 scratch; lce_stats folds each chunk into a
   per-row running state (max, sum of exp, sum of logits, target logit) and, after the last,
   writes the losses and keeps lse; lce_grad turns a recomputed chunk into dloss/dz in the
   storage dtype for the weight and input GEMMs; lce_dbias sums its columns. On NVIDIA's
   tensor cores no f32 logits are stored at all: matmul_mma's CE epilogues
   (cl/nv/matmul_ce_epilogue.h) do lce_stats' and lce_grad's work in registers, and lce_merge
   folds the forward's per-tile states.

   The linear op's dloss/dz is that of the summed loss: the mean's 1 / count is left to the
   f32 side (the GEMMs' alpha, lce_dbias' scale). Stored after it, p / T of an f16 gradient
   fell below f16's normal range (6.1e-5) as T grew and rounded to a few subnormal steps or
   to 0: at T 8192, D 64, V 4000 the mean's dx was 3 % off and its dbias 8 %, where the
   sum's were within 5e-4. ce_rows' dlogits is the op's output, so it is scaled there.

   Every sum has a fixed order (a work-item's own elements in sequence, then a tree over the
   work-group whose shape depends only on WG), so reruns are bitwise equal; reductions use
   local memory and barriers, no sub-group width assumed.

   Compile-time: WG (a power of two, the work-group size), CHUNKS (vectors a work-item loads
   per step), VEC (ce_rows: 1, or 16 bytes' worth for unit-stride rows), the dtype (common.h),
   TARGET_I64 (ce_targets). */
#include "common.h"

#ifndef WG
#define WG 64
#endif
#ifndef CHUNKS
#define CHUNKS 2
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef TARGET_I64
#define TARGET_I64 0
#endif

#if TARGET_I64
typedef long target_t;
#else
typedef int target_t;
#endif

/* ---- fixed-order reductions over the work-group; every work-item gets the result ---- */

static inline float group_max(float v, __local float *red)
{
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] = fmax(red[lid], red[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* red is reused by the next reduction */
    return r;
}

static inline float2 group_sum2(float2 v, __local float2 *red)
{
    const int lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

/* ---- targets: validation and the mean's divisor ---- */

/* Copies targets (any stride, i32 or i64) into a dense i32 array, -1 for ignored tokens, so
   that no later kernel can index logits with an unchecked target; counts the tokens that are
   not ignored and finds the first out-of-range one. Group g writes (count, first bad token or
   -1, its target) to partial[3g..3g+2]; the host combines the groups and fails before any
   kernel reads logits by target. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void ce_targets(__global const target_t *y, long y_off, long y_stride, long n, long v,
                long ignore, __global int *tgt, __global long *partial)
{
    __local long red_n[WG], red_bad[WG];
    const int lid = get_local_id(0);
    long count = 0, bad = n;
    for (long t = get_global_id(0); t < n; t += get_global_size(0)) {
        const long label = y[y_off + t * y_stride];
        const bool ignored = label == ignore, ok = label >= 0 && label < v;
        tgt[t] = ok && !ignored ? (int)label : -1;
        count += ok && !ignored;
        if (!ok && !ignored) bad = min(bad, t);
    }
    red_n[lid] = count;
    red_bad[lid] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            red_n[lid] += red_n[lid + s];
            red_bad[lid] = min(red_bad[lid], red_bad[lid + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        const long g = get_group_id(0), first = red_bad[0];
        partial[3 * g] = red_n[0];
        partial[3 * g + 1] = first < n ? first : -1;
        partial[3 * g + 2] = first < n ? (long)y[y_off + first * y_stride] : 0;
    }
}

/* Sum (times scale: 1 / count for the mean) of n per-token losses, and of the z-losses when
   zloss is not NULL, by one work-group in a fixed order. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void ce_reduce(__global const float *tok, __global const float *ztok, long n, float scale,
               __global float *loss, long l_off, __global float *zloss, long z_off)
{
    __local float2 red[WG];
    const int lid = get_local_id(0);
    float2 acc = (float2)(0.0f);
    for (long t = lid; t < n; t += WG) acc += (float2)(tok[t], zloss ? ztok[t] : 0.0f);
    acc = group_sum2(acc, red);
    if (lid == 0) {
        loss[l_off] = acc.x * scale;
        if (zloss) zloss[z_off] = acc.y * scale;
    }
}

#if defined(DTYPE_F32) || defined(DTYPE_F16) || defined(DTYPE_BF16)

#define ITEMS (CHUNKS * VEC)
#define SPAN (WG * ITEMS) /* positions a work-group covers in one step */

/* ---- row math shared by the fused and the linear kernels ---- */

static inline float cap_logit(float z, float cap) { return cap > 0.0f ? cap * tanh(z / cap) : z; }

/* exp(m_part - m_all) for merging online sums; a part that saw only -inf has sum 0 and must
   stay 0 rather than become exp(-inf - -inf) = NaN. */
static inline float rescale(float m_part, float m_all)
{
    return m_part == -INFINITY ? 0.0f : exp(m_part - m_all);
}

/* Running max m, sum s of exp(z - m) and sum sz of the logits. */
typedef struct online {
    float m, s, sz;
} online;

/* Folds n values v (their sum: total) into st; n is a constant after inlining. */
static inline void online_add(online *st, const float *v, int n, float total)
{
    float nm = st->m;
    for (int i = 0; i < n; i++) nm = fmax(nm, v[i]);
    st->sz += total;
    if (nm == -INFINITY) return;
    float s = st->s * rescale(st->m, nm);
    for (int i = 0; i < n; i++) s += exp(v[i] - nm);
    st->s = s;
    st->m = nm;
}

/* The work-group's combined state; every work-item gets it. */
static inline online online_reduce(online st, __local float *red_m, __local float2 *red_s)
{
    const float m = group_max(st.m, red_m);
    const float2 s = group_sum2((float2)(st.s * rescale(st.m, m), st.sz), red_s);
    online r = {m, s.x, s.y};
    return r;
}

static inline float row_lse(online st) { return st.m + log(st.s); }

/* Loss and z-loss of a row of v logits from its state and target logit zy. The cross-entropy
   is log s + (1 - e)(m - zy) + e (m - mean z): differences from the max, which keep their
   precision where lse - zy would cancel for large logits. */
static inline float2 row_loss(online st, float zy, float smoothing, float z_scale, long v)
{
    const float log_s = log(st.s), lse = st.m + log_s;
    float ce = log_s + (1.0f - smoothing) * (st.m - zy);
    if (smoothing > 0.0f) ce += smoothing * (st.m - st.sz / (float)v);
    const float zl = z_scale > 0.0f ? z_scale * lse * lse : 0.0f;
    return (float2)(ce + zl, zl);
}

/* Per-row factors of the gradient g = p exp(z - lse) - base - [target] hit, times
   1 - tanh^2(z / cap) when capped. */
typedef struct grad_coef {
    float lse, p, base, hit, cap;
} grad_coef;

static inline grad_coef row_coef(float lse, float scale, float smoothing, float z_scale, long v,
                                 float cap)
{
    grad_coef c = {lse, scale * (1.0f + 2.0f * z_scale * lse), scale * smoothing / (float)v,
                   scale * (1.0f - smoothing), cap};
    return c;
}

/* z is the capped logit. */
static inline float grad_logit(float z, bool target, const grad_coef *c)
{
    float g = c->p * exp(z - c->lse) - c->base - (target ? c->hit : 0.0f);
    if (c->cap > 0.0f) {
        const float t = z / c->cap;
        g *= 1.0f - t * t;
    }
    return g;
}

static inline void store_token(__global float *out, long off, long stride, long t, float v)
{
    if (out) out[off + t * stride] = v;
}

/* A token's loss and z-loss (l.x, l.y); either output may be NULL. */
static inline void store_losses(__global float *loss, long l_off, long l_stride,
                                __global float *zloss, long z_off, long z_stride, long t, float2 l)
{
    store_token(loss, l_off, l_stride, t, l.x);
    store_token(zloss, z_off, z_stride, t, l.y);
}

/* ---- the fused kernel: rows of stored logits ---- */

/* f16 bits to f32 and back without cl_khr_fp16. */
#if defined(DTYPE_F16)
static inline float half_bits_to_f32(ushort b) { return vload_half(0, (const __private half *)&b); }

static inline ushort f32_to_half_bits(float f)
{
    ushort b;
    vstore_half_rte(f, 0, (__private half *)&b);
    return b;
}
#endif

#if VEC > 1
/* One 16-byte access: f32 as float4, 16-bit dtypes as raw ushort8 bits; p is VEC-aligned. */
static inline void load_vec(__global const elem_t *p, float *v)
{
#if defined(DTYPE_F32)
    const float4 t = *(__global const float4 *)p;
    v[0] = t.s0, v[1] = t.s1, v[2] = t.s2, v[3] = t.s3;
#else
    const ushort8 b = *(__global const ushort8 *)p;
    const ushort u[8] = {b.s0, b.s1, b.s2, b.s3, b.s4, b.s5, b.s6, b.s7};
    for (int k = 0; k < 8; k++)
#if defined(DTYPE_F16)
        v[k] = half_bits_to_f32(u[k]);
#else
        v[k] = bf16_to_f32(u[k]);
#endif
#endif
}

static inline void store_vec(__global elem_t *p, const float *v)
{
#if defined(DTYPE_F32)
    *(__global float4 *)p = (float4)(v[0], v[1], v[2], v[3]);
#elif defined(DTYPE_F16)
    *(__global ushort8 *)p =
        (ushort8)(f32_to_half_bits(v[0]), f32_to_half_bits(v[1]), f32_to_half_bits(v[2]),
                  f32_to_half_bits(v[3]), f32_to_half_bits(v[4]), f32_to_half_bits(v[5]),
                  f32_to_half_bits(v[6]), f32_to_half_bits(v[7]));
#else
    *(__global ushort8 *)p =
        (ushort8)(f32_to_bf16(v[0]), f32_to_bf16(v[1]), f32_to_bf16(v[2]), f32_to_bf16(v[3]),
                  f32_to_bf16(v[4]), f32_to_bf16(v[5]), f32_to_bf16(v[6]), f32_to_bf16(v[7]));
#endif
}
#endif

/* Position of item i of a work-item in a step: chunk c covers (c * WG + lane) * VEC onwards,
   so neighbouring work-items touch neighbouring memory. */
static inline int item_pos(int i, int lane) { return ((i / VEC) * WG + lane) * VEC + i % VEC; }

/* The work-item's ITEMS logits of a step whose row elements sit at positions [lo, hi) of p
   (element at p[pos * cs]; cs is 1 when VEC > 1), soft-capped; other positions read -inf.
   Returns the sum of the loaded logits. Whole vectors are loaded in one loop and the at most
   two that straddle the row's ends in another, so compilers keep the vector loads whole. */
static inline float load_step(__global const elem_t *p, long cs, int lane, int lo, int hi,
                              float cap, float *v)
{
#if VEC > 1
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = item_pos(c * VEC, lane);
        if (pos >= lo && pos + VEC <= hi) load_vec(p + pos, v + c * VEC);
        else
            for (int k = 0; k < VEC; k++) v[c * VEC + k] = -INFINITY;
    }
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = item_pos(c * VEC, lane);
        if ((pos < lo && pos + VEC > lo) || (pos < hi && pos + VEC > hi))
            for (int k = 0; k < VEC; k++)
                if (pos + k >= lo && pos + k < hi) v[c * VEC + k] = LOAD(p, pos + k);
    }
#else
    for (int i = 0; i < ITEMS; i++) {
        const int pos = item_pos(i, lane);
        v[i] = pos >= lo && pos < hi ? LOAD(p + pos * cs, 0) : -INFINITY;
    }
#endif
    float total = 0.0f;
    for (int i = 0; i < ITEMS; i++) {
        const int pos = item_pos(i, lane);
        if (pos >= lo && pos < hi) {
            v[i] = cap_logit(v[i], cap);
            total += v[i];
        }
    }
    return total;
}

static inline void store_step(__global elem_t *p, long cs, int lane, int lo, int hi,
                              const float *v)
{
#if VEC > 1
    for (int c = 0; c < CHUNKS; c++) {
        const int pos = item_pos(c * VEC, lane);
        if (pos >= lo && pos + VEC <= hi) store_vec(p + pos, v + c * VEC);
        else
            for (int k = 0; k < VEC; k++)
                if (pos + k >= lo && pos + k < hi) STORE(p, pos + k, v[c * VEC + k]);
    }
#else
    for (int i = 0; i < ITEMS; i++) {
        const int pos = item_pos(i, lane);
        if (pos >= lo && pos < hi) STORE(p + pos * cs, 0, v[i]);
    }
#endif
}

/* One work-group per row on a persistent grid. Rows are addressed from the VEC-aligned
   element at or below their start (a positions before it are masked), so any offset and row
   stride keep whole-vector loads; dx shares x's alignment phase (the host checks). tgt is the
   dense i32 array from ce_targets. Per-token losses go to loss[l_off + t * l_stride] (and
   z-losses likewise when zloss is not NULL); dx NULL: no gradient. dx may be x itself: pass 2
   reads each element before writing it, in the same work-item. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void ce_rows(__global const elem_t *x, long x_off, long x_rs, long x_cs,
             __global const int *tgt, long n_rows, long v, float smoothing, float cap,
             float z_scale, float grad_scale, __global float *loss, long l_off, long l_stride,
             __global float *zloss, long z_off, long z_stride, __global elem_t *dx, long d_off,
             long d_rs, long d_cs)
{
    __local float red_m[WG];
    __local float2 red_s[WG];
    const int lane = get_local_id(0);
    for (long row = get_group_id(0); row < n_rows; row += get_num_groups(0)) {
        const long xs = x_off + row * x_rs, ds = d_off + row * d_rs;
        const int a = (int)(xs % VEC);
        const long end = a + v;
        __global const elem_t *xp = x + xs - a;
        const int y = tgt[row];
        float val[ITEMS];
        if (y < 0) { /* ignored: no loss, zero gradient, the row is never read */
            if (lane == 0) store_losses(loss, l_off, l_stride, zloss, z_off, z_stride, row, (float2)(0.0f));
            for (int i = 0; i < ITEMS; i++) val[i] = 0.0f;
            for (long b = 0; dx && b < end; b += SPAN)
                store_step(dx + ds - a + b * d_cs, d_cs, lane, b ? 0 : a,
                           (int)min(end - b, (long)SPAN), val);
            continue;
        }
        online st = {-INFINITY, 0.0f, 0.0f};
        for (long b = 0; b < end; b += SPAN) {
            const float total = load_step(xp + b * x_cs, x_cs, lane, b ? 0 : a,
                                          (int)min(end - b, (long)SPAN), cap, val);
            online_add(&st, val, ITEMS, total);
        }
        /* Read before the reduction's barriers: in place, pass 2 may overwrite it next. */
        const float zy = lane == 0 ? cap_logit(LOAD(x, xs + y * x_cs), cap) : 0.0f;
        st = online_reduce(st, red_m, red_s);
        if (lane == 0) {
            const float2 l = row_loss(st, zy, smoothing, z_scale, v);
            store_losses(loss, l_off, l_stride, zloss, z_off, z_stride, row, l);
        }
        if (!dx) continue;
        const grad_coef coef = row_coef(row_lse(st), grad_scale, smoothing, z_scale, v, cap);
        for (long b = 0; b < end; b += SPAN) {
            const int lo = b ? 0 : a, hi = (int)min(end - b, (long)SPAN);
            load_step(xp + b * x_cs, x_cs, lane, lo, hi, cap, val);
            for (int i = 0; i < ITEMS; i++)
                val[i] = grad_logit(val[i], b + item_pos(i, lane) - a == y, &coef);
            store_step(dx + ds - a + b * d_cs, d_cs, lane, lo, hi, val);
        }
    }
}

/* ---- the linear kernels: chunks of f32 logits from clkit_matmul ---- */

/* A chunk is n columns [v0, v0 + n) of the logits: row r at z[r * ldz], ldz a multiple of 4
   so rows start 16-byte aligned; bias (NULL: none) in the storage dtype at
   b_off + column * b_stride. Items here are 4 consecutive columns per chunk. */
#define ZITEMS (CHUNKS * 4)
#define ZSPAN (WG * ZITEMS)

static inline int zitem_pos(int i, int lane) { return ((i / 4) * WG + lane) * 4 + i % 4; }

/* The work-item's ZITEMS logits of the step at column j0 of the chunk (bias added, capped);
   columns past n read -inf. Returns their sum. */
static inline float load_zstep(__global const float *zr, long j0, long n, long v0,
                               __global const elem_t *bias, long b_off, long b_stride,
                               float cap, int lane, float *v)
{
    for (int c = 0; c < CHUNKS; c++) {
        const long j = j0 + zitem_pos(4 * c, lane);
        if (j + 4 <= n) {
            const float4 t = *(__global const float4 *)(zr + j);
            v[4 * c] = t.s0, v[4 * c + 1] = t.s1, v[4 * c + 2] = t.s2, v[4 * c + 3] = t.s3;
        } else {
            for (int k = 0; k < 4; k++) v[4 * c + k] = j + k < n ? zr[j + k] : -INFINITY;
        }
    }
    float total = 0.0f;
    for (int i = 0; i < ZITEMS; i++) {
        const long j = j0 + zitem_pos(i, lane);
        if (j < n) {
            if (bias) v[i] += LOAD(bias, b_off + (v0 + j) * b_stride);
            v[i] = cap_logit(v[i], cap);
            total += v[i];
        }
    }
    return total;
}

/* Folds chunk columns [v0, v0 + n) into each row's state (m, s, sz, target logit); first
   starts the state, last turns it into the row's losses and leaves lse in state.x for the
   backward. Ignored rows are skipped (their loss is 0). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void lce_stats(__global const float *z, long ldz, long n, long v0, __global const elem_t *bias,
               long b_off, long b_stride, __global const int *tgt, long n_rows, long v,
               float smoothing, float cap, float z_scale, __global float4 *state, int first,
               int last, __global float *loss, long l_off, long l_stride, __global float *zloss,
               long z_off, long z_stride)
{
    __local float red_m[WG];
    __local float2 red_s[WG];
    const int lane = get_local_id(0);
    for (long row = get_group_id(0); row < n_rows; row += get_num_groups(0)) {
        const int y = tgt[row];
        if (y < 0) {
            if (last && lane == 0) store_losses(loss, l_off, l_stride, zloss, z_off, z_stride, row, (float2)(0.0f));
            continue;
        }
        __global const float *zr = z + row * ldz;
        online st = {-INFINITY, 0.0f, 0.0f};
        float val[ZITEMS];
        for (long j0 = 0; j0 < n; j0 += ZSPAN) {
            const float total = load_zstep(zr, j0, n, v0, bias, b_off, b_stride, cap, lane, val);
            online_add(&st, val, ZITEMS, total);
        }
        st = online_reduce(st, red_m, red_s);
        if (lane != 0) continue;
        float4 prev = first ? (float4)(-INFINITY, 0.0f, 0.0f, 0.0f) : state[row];
        online all = {fmax(prev.x, st.m), 0.0f, prev.z + st.sz};
        all.s = prev.y * rescale(prev.x, all.m) + st.s * rescale(st.m, all.m);
        float zy = prev.w;
        if (y >= v0 && y < v0 + n)
            zy = cap_logit(zr[y - v0] + (bias ? LOAD(bias, b_off + y * b_stride) : 0.0f), cap);
        if (last) {
            const float2 l = row_loss(all, zy, smoothing, z_scale, v);
            store_losses(loss, l_off, l_stride, zloss, z_off, z_stride, row, l);
            all.m = row_lse(all);
        }
        state[row] = (float4)(all.m, all.s, all.sz, zy);
    }
}

/* The linear op on the tensor cores (matmul_mma with EPI_CE_STATS) leaves each row's logits
   as `tiles` partial states, one per column tile: (max, sum of exp) in ms, the sum of logits
   in sz (NULL without label smoothing), the target's logit in zt. Folded here in tile order
   into the row's losses, and lse into state.x for EPI_CE_GRAD. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void lce_merge(__global const float2 *ms, __global const float *sz, __global const float *zt,
               long tiles, __global const int *tgt, long n_rows, long v, float smoothing,
               float z_scale, __global float4 *state, __global float *loss, long l_off,
               long l_stride, __global float *zloss, long z_off, long z_stride)
{
    __local float red_m[WG];
    __local float2 red_s[WG];
    const int lane = get_local_id(0);
    for (long row = get_group_id(0); row < n_rows; row += get_num_groups(0)) {
        const int y = tgt[row];
        if (y < 0) {
            if (lane == 0) store_losses(loss, l_off, l_stride, zloss, z_off, z_stride, row, (float2)(0.0f));
            continue;
        }
        online st = {-INFINITY, 0.0f, 0.0f};
        for (long i = lane; i < tiles; i += WG) {
            const float2 p = ms[row * tiles + i];
            const float m = fmax(st.m, p.x);
            st.s = st.s * rescale(st.m, m) + p.y * rescale(p.x, m);
            st.m = m;
            st.sz += sz ? sz[row * tiles + i] : 0.0f;
        }
        st = online_reduce(st, red_m, red_s);
        if (lane != 0) continue;
        const float2 l = row_loss(st, zt[row], smoothing, z_scale, v);
        store_losses(loss, l_off, l_stride, zloss, z_off, z_stride, row, l);
        state[row] = (float4)(row_lse(st), st.s, st.sz, zt[row]);
    }
}

static inline void store_zstep(__global elem_t *sr, long j0, long n, int lane, const float *v)
{
    for (int c = 0; c < CHUNKS; c++) {
        const long j = j0 + zitem_pos(4 * c, lane);
        if (j + 4 <= n) {
            STORE4(sr, j, vload4(0, v + 4 * c));
        } else {
            for (int k = 0; k < 4; k++)
                if (j + k < n) STORE(sr, j + k, v[4 * c + k]);
        }
    }
}

/* dloss/dz (of the summed loss) of chunk columns [v0, v0 + n) into s (row stride lds,
   storage dtype), from the recomputed logits z and each row's lse in state.x; zero for
   ignored rows. s may be z itself (f32): each element is read before it is written, by the
   same work-item. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void lce_grad(__global const float *z, long ldz, long n, long v0, __global const elem_t *bias,
              long b_off, long b_stride, __global const int *tgt, long n_rows, long v,
              float smoothing, float cap, float z_scale, __global const float4 *state,
              __global elem_t *s, long lds)
{
    const int lane = get_local_id(0);
    for (long row = get_group_id(0); row < n_rows; row += get_num_groups(0)) {
        const int y = tgt[row];
        __global const float *zr = z + row * ldz;
        __global elem_t *sr = s + row * lds;
        float val[ZITEMS];
        if (y < 0) {
            for (int i = 0; i < ZITEMS; i++) val[i] = 0.0f;
            for (long j0 = 0; j0 < n; j0 += ZSPAN) store_zstep(sr, j0, n, lane, val);
            continue;
        }
        const grad_coef coef = row_coef(state[row].x, 1.0f, smoothing, z_scale, v, cap);
        for (long j0 = 0; j0 < n; j0 += ZSPAN) {
            load_zstep(zr, j0, n, v0, bias, b_off, b_stride, cap, lane, val);
            for (int i = 0; i < ZITEMS; i++)
                val[i] = grad_logit(val[i], v0 + j0 + zitem_pos(i, lane) == y, &coef);
            store_zstep(sr, j0, n, lane, val);
        }
    }
}

/* Logits kept from the forward: matmul_mma's EPI_CE_STATS with CE_STORE left them (bias added,
   capped) in the storage dtype, row stride ldz, n columns from vocabulary column 0 (a token
   chunk's whole rows, or the first vocabulary chunk, which the forward runs last), and
   lce_merge each row's lse in state.x; z turns into dloss/dz (of the summed loss) in place,
   one read and one write where recomputing the logits would take a GEMM of 2 T D n. Zero for
   ignored rows. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void lce_zgrad(__global elem_t *z, long ldz, long n, long v, __global const int *tgt, long n_rows,
               float smoothing, float cap, float z_scale, __global const float4 *state)
{
    const int lane = get_local_id(0);
    float val[ITEMS];
    for (long row = get_group_id(0); row < n_rows; row += get_num_groups(0)) {
        __global elem_t *zr = z + row * ldz;
        const int y = tgt[row];
        const grad_coef coef = row_coef(y < 0 ? 0.0f : state[row].x, 1.0f, smoothing, z_scale, v, cap);
        for (long b = 0; b < n; b += SPAN) {
            const int hi = (int)min(n - b, (long)SPAN);
            if (y < 0) {
                for (int i = 0; i < ITEMS; i++) val[i] = 0.0f;
            } else {
                load_step(zr + b, 1, lane, 0, hi, 0.0f, val); /* already capped */
                for (int i = 0; i < ITEMS; i++)
                    val[i] = grad_logit(val[i], b + item_pos(i, lane) == y, &coef);
            }
            store_step(zr + b, 1, lane, 0, hi, val);
        }
    }
}

/* Column sums of the chunk gradient s (n_rows x n, row stride lds) times scale (the mean's
   1 / count, applied to the f32 total) into db[db_off + j * db_stride], accumulated in f32:
   DB_COLS columns per work-group, DB_ROWS work-items per column each summing every DB_ROWS-th
   row in order, then a fixed tree. Token chunks add their unscaled sums in the f32 acc
   (first: from zero; last: the total goes to db); a vocabulary chunk is first and last, and
   acc may be NULL. */
#define DB_COLS 32
#define DB_ROWS 8
__kernel __attribute__((reqd_work_group_size(DB_COLS, DB_ROWS, 1)))
void lce_dbias(__global const elem_t *s, long lds, long n_rows, long n, __global float *acc,
               int first, int last, float scale, __global elem_t *db, long db_off, long db_stride)
{
    __local float red[DB_ROWS][DB_COLS];
    const int cx = get_local_id(0), ry = get_local_id(1);
    const long j = get_group_id(0) * DB_COLS + cx;
    float sum = 0.0f;
    for (long r = ry; j < n && r < n_rows; r += DB_ROWS) sum += LOAD(s, r * lds + j);
    red[ry][cx] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = DB_ROWS / 2; h > 0; h >>= 1) {
        if (ry < h) red[ry][cx] += red[ry + h][cx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (ry != 0 || j >= n) return;
    const float total = red[0][cx] + (first ? 0.0f : acc[j]);
    if (last) STORE(db, db_off + j * db_stride, total * scale);
    else acc[j] = total;
}


/* lce_split_sum: a GEMM split along its reduction because its tile grid is too small to
   fill the device while the reduction is long (a vocabulary chunk's dweight rows, over T;
   a token chunk's dx rows, over V): out = sum of `splits` f32 partial products, added in
   order so reruns are bitwise equal, rounded once to the storage dtype. A grid-stride loop
   over the n x d elements. */
__kernel void lce_split_sum(__global const float *part, long n, long d, int splits,
                            __global elem_t *out, long out_off, long out_s0, long out_s1)
{
    const long total = n * d;
    for (long i = get_global_id(0); i < total; i += get_global_size(0)) {
        float acc = 0.0f;
        for (int k = 0; k < splits; k++) acc += part[k * total + i];
        STORE(out, out_off + (i / d) * out_s0 + (i % d) * out_s1, acc);
    }
}

#endif
