/* clkit_attention_forward / _backward: validation, the choice of path and tiles and the
   launches. On NVIDIA sm_80+ the tensor-core kernels run (f16/bf16, and f32 as 3xTF32) when
   q, k, v (and dO) suit cp.async, each kernel where a tile fits the head dim; otherwise the
   portable kernels run with a tuned entry from the cache, else a heuristic from the device's
   local memory and work-group limits (a tile whose built kernel does not fit gives way to the
   next smaller one). */
#include "../tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows held per work-group, rows streamed per step, the micro-tile, and the slices of the
   head dimension and of the streamed rows that pass through local memory (cl/attention.cl). */
typedef struct tiles {
    int bm, bn, tm, tn, sd, sn;
} tiles;

static const char *const tile_names[6] = {"BLOCK_M", "BLOCK_N", "THREAD_M", "THREAD_N", "SLICE_D",
                                          "SLICE_N"};

/* What the launches need of the chosen kernels: rows held per work-group, its work-items. */
typedef struct blocking {
    int bm;
    size_t wg;
} blocking;

typedef struct problem {
    int64_t b, hq, hkv, lq, lk, d;
    clkit_dtype dtype;
    int causal;  /* CLKIT_CAUSAL_* */
    float scale; /* resolved: never 0 */
    const struct tiles *force; /* the tuner's candidate: these portable tiles alone */
} problem;

/* A tensor as the kernels take it: buffer, element offset, strides (b, h, l, d). */
typedef struct kview {
    cl_mem buf;
    cl_long off;
    cl_long4 st;
} kview;

clkit_attention_options clkit_attention_defaults(void)
{
    clkit_attention_options o;
    memset(&o, 0, sizeof o);
    return o;
}

/* ---- validation ---- */

static clkit_status check_like(clkit_context *ctx, const clkit_tensor *t, const char *name,
                               const clkit_tensor *ref, const char *ref_name)
{
    clkit_status s = clkit_check_tensor(ctx, t, name, 4, 4, CLKIT_DT_FLOAT);
    if (s) return s;
    if (t->dtype != ref->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "%s is %s but %s is %s: they must match", name,
                          clkit_dtype_name(t->dtype), ref_name, clkit_dtype_name(ref->dtype));
    return clkit_check_same_shape(ctx, t, name, ref, ref_name);
}

static clkit_status check_lse(clkit_context *ctx, const clkit_tensor *lse, const problem *p)
{
    clkit_status s = clkit_check_tensor(ctx, lse, "lse", 3, 3, CLKIT_DT(CLKIT_F32));
    if (s) return s;
    if (lse->shape[0] != p->b || lse->shape[1] != p->hq || lse->shape[2] != p->lq)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "lse is %lld x %lld x %lld, expected (B, Hq, Lq) = "
                          "%lld x %lld x %lld", (long long)lse->shape[0], (long long)lse->shape[1],
                          (long long)lse->shape[2], (long long)p->b, (long long)p->hq, (long long)p->lq);
    return CLKIT_OK;
}

static int head_dim_supported(int64_t d)
{
    return d == 16 || d == 32 || d == 64 || d == 128 || d == 256;
}

/* q, k, v and the options: everything both passes read. */
static clkit_status check_inputs(clkit_context *ctx, const clkit_tensor *q, const clkit_tensor *k,
                                 const clkit_tensor *v, const clkit_attention_options *opt,
                                 problem *p)
{
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, q, "q", 4, 4, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, k, "k", 4, 4, CLKIT_DT_FLOAT)) ||
        (s = check_like(ctx, v, "v", k, "k")))
        return s;
    if (k->dtype != q->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "k is %s but q is %s: they must match",
                          clkit_dtype_name(k->dtype), clkit_dtype_name(q->dtype));
    memset(p, 0, sizeof *p);
    p->b = q->shape[0], p->hq = q->shape[1], p->lq = q->shape[2], p->d = q->shape[3];
    p->hkv = k->shape[1], p->lk = k->shape[2], p->dtype = q->dtype;
    if (k->shape[0] != p->b || k->shape[3] != p->d)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "q is (B %lld, D %lld) but k and v are (B %lld, D %lld)",
                          (long long)p->b, (long long)p->d, (long long)k->shape[0], (long long)k->shape[3]);
    if (p->hkv == 0 ? p->hq != 0 : p->hq % p->hkv != 0)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "%lld query heads do not divide into %lld kv heads",
                          (long long)p->hq, (long long)p->hkv);
    if (p->lq > INT32_MAX || p->lk > INT32_MAX || p->hq > INT32_MAX || p->b * p->hq > INT32_MAX)
        return clkit_fail(ctx, CLKIT_ERR_OVERFLOW, "Lq, Lk and B x Hq must each be below 2^31");
    if (!head_dim_supported(p->d))
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "head dim %lld is not supported (16, 32, 64, "
                          "128 or 256)", (long long)p->d);
    clkit_attention_options o = opt ? *opt : clkit_attention_defaults();
    if (!isfinite(o.scale) || o.scale < 0)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "scale %g must be finite and >= 0 (0: "
                          "1/sqrt(D))", (double)o.scale);
    if (o.causal < CLKIT_CAUSAL_NONE || o.causal > CLKIT_CAUSAL_BOTTOM_RIGHT)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "causal %d is not one of CLKIT_CAUSAL_NONE (0), "
                          "_TOP_LEFT (1) or _BOTTOM_RIGHT (2)", o.causal);
    p->causal = o.causal;
    p->scale = o.scale != 0 ? o.scale : (float)(1.0 / sqrt((double)p->d));
    return CLKIT_OK;
}

/* Each output is a clean view and overlaps neither an input nor another output. */
static clkit_status check_outputs(clkit_context *ctx, int nout, const clkit_tensor *const *outs,
                                  const char *const *out_names, int nin,
                                  const clkit_tensor *const *ins, const char *const *in_names)
{
    clkit_status s;
    for (int i = 0; i < nout; i++) {
        if ((s = clkit_check_output(ctx, outs[i], out_names[i]))) return s;
        for (int j = 0; j < nin; j++)
            if ((s = clkit_check_disjoint(ctx, outs[i], out_names[i], ins[j], in_names[j], false)))
                return s;
        for (int j = 0; j < i; j++)
            if ((s = clkit_check_disjoint(ctx, outs[i], out_names[i], outs[j], out_names[j], false)))
                return s;
    }
    return CLKIT_OK;
}

/* ---- tiles ---- */

static int pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* Local memory of the kernels, bytes: the layouts in cl/attention.cl (FWD_WORDS, DQ_WORDS,
   DKDV_WORDS). */
static uint64_t local_bytes(const tiles *t, int d, int bwd)
{
    uint64_t ldm = (uint64_t)t->bm + 4, ldn = (uint64_t)t->bn + 4, ldd = (uint64_t)d + 4;
    uint64_t sd = (uint64_t)t->sd, sn = (uint64_t)t->sn, held = (uint64_t)d * (uint64_t)t->bm;
    if (!bwd) {
        uint64_t slices = sd * ldn > sn * ldd ? sd * ldn : sn * ldd;
        return 4 * (held + (uint64_t)t->bn * ldm + slices + (uint64_t)(t->bm * (t->bn / t->tn)));
    }
    uint64_t dq_slices = 2 * sd * ldn > sn * ldd ? 2 * sd * ldn : sn * ldd;
    uint64_t dkdv_slices = 2 * sd * ldn > 2 * sn * ldd ? 2 * sd * ldn : 2 * sn * ldd;
    uint64_t dq = 2 * held + (uint64_t)t->bn * ldm + dq_slices + 2 * (uint64_t)t->bm;
    uint64_t dkdv = 2 * held + 2 * (uint64_t)t->bn * ldm + dkdv_slices + 2 * (uint64_t)t->bn;
    return 4 * (dq > dkdv ? dq : dkdv);
}

static int work_items(const tiles *t) { return (t->bm / t->tm) * (t->bn / t->tn); }

/* f32 accumulators a work-item keeps: the score tiles and the output tiles. */
static int accumulators(const tiles *t, int d, int bwd)
{
    int td = d / (t->bn / t->tn), scores = t->tm * t->tn, out = t->tm * td;
    return bwd ? 2 * scores + 2 * out : scores + out + 2 * t->tm;
}

/* Accumulators beyond this spill on GPUs (255 registers a work-item, less the operands). */
#define MAX_ACCUMULATORS 128

/* Local memory tiles may take: the device's, at most 64 KiB. More buys a CPU nothing (its
   "local memory" is cache-resident RAM), and within it every build the tests make on PoCL also
   compiles for AMD GPUs, where CI replays them. */
static uint64_t local_budget(const struct clkit_device_props *p)
{
    return p->local_mem < 65536 ? p->local_mem : 65536;
}

static int tiles_legal(const struct clkit_device_props *p, const tiles *t, int d, int bwd)
{
    if (!pow2(t->bm) || !pow2(t->bn) || !pow2(t->tm) || !pow2(t->tn) || !pow2(t->sd) ||
        !pow2(t->sn) || t->bm < 4 || t->bn < 4 || t->tm > t->bm || t->tn > t->bn || t->tm > 16 ||
        t->tn > 16 || t->bn / t->tn > d || t->sd > d || t->sn > t->bn)
        return 0;
    return (size_t)work_items(t) <= p->max_work_group && local_bytes(t, d, bwd) <= local_budget(p);
}

/* Largest first. GPU tiles are sized for NVIDIA's 48 KiB of local memory a work-group (AMD
   has 64): the forward holds BLOCK_M x D of q; the backward two such tiles (k and v, or q and
   dO) and two BLOCK_N x BLOCK_M tiles (P and dS), so its blocks are smaller. */
static const tiles gpu_fwd[] = {
    {64, 64, 4, 4, 16, 16}, {64, 32, 4, 4, 16, 8}, {32, 64, 2, 4, 16, 8}, {16, 64, 2, 4, 16, 8},
    {32, 32, 4, 4, 16, 8},  {16, 32, 2, 2, 16, 8}, {16, 16, 2, 2, 8, 4},  {8, 8, 2, 2, 4, 4},
    {4, 4, 1, 1, 4, 4},
};
static const tiles gpu_bwd[] = {
    {64, 32, 4, 4, 16, 8}, {64, 16, 4, 2, 16, 8}, {32, 32, 2, 4, 16, 4}, {16, 64, 2, 4, 8, 2},
    {16, 32, 2, 4, 8, 4},  {16, 16, 2, 2, 8, 4},  {8, 8, 2, 2, 4, 4},    {4, 4, 1, 1, 4, 4},
};
/* CPUs (PoCL runs a work-group as loops over its work-items, vectorised across them): small
   micro-tiles, which build twice as fast as 4 x 4 ones and run nearly as fast. */
static const tiles cpu_tiles[] = {
    {32, 32, 2, 2, 16, 8}, {16, 16, 2, 2, 8, 4}, {8, 8, 2, 2, 4, 4}, {4, 4, 1, 1, 4, 4},
};

#define NTILES(a) ((int)(sizeof a / sizeof *a))

/* Appends c to the list unless it is there already. */
static void add_candidate(tiles *out, int *n, int max, const tiles *c)
{
    for (int i = 0; i < *n; i++)
        if (memcmp(&out[i], c, sizeof *c) == 0) return;
    if (*n < max) out[(*n)++] = *c;
}

static clkit_tune_key tune_key(const problem *p, int bwd)
{
    clkit_tune_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.op, sizeof k.op, "attention");
    snprintf(k.dtype, sizeof k.dtype, "%s", clkit_dtype_name(p->dtype));
    static const char *const masks[3] = {"", ".causal", ".causal_br"};
    snprintf(k.layout, sizeof k.layout, "%s%s", bwd ? "bwd" : "fwd", masks[p->causal]);
    k.shape[0] = p->lq, k.shape[1] = p->lk, k.shape[2] = p->d, k.shape[3] = p->b * p->hq;
    k.nshape = 4;
    return k;
}

static int tiles_from_config(const clkit_config *c, tiles *t)
{
    int *f[6] = {&t->bm, &t->bn, &t->tm, &t->tn, &t->sd, &t->sn};
    for (int i = 0; i < 6; i++) *f[i] = clkit_config_get(c, tile_names[i], 0);
    return t->bm > 0;
}

static clkit_config config_of(const tiles *t)
{
    const int f[6] = {t->bm, t->bn, t->tm, t->tn, t->sd, t->sn};
    clkit_config c = {0};
    for (int i = 0; i < 6; i++) clkit_config_set(&c, tile_names[i], f[i]);
    return c;
}

/* The device's tile list for the pass, largest first. */
static const tiles *tile_list(const struct clkit_device_props *dp, int bwd, int *len)
{
    *len = dp->is_gpu ? (bwd ? NTILES(gpu_bwd) : NTILES(gpu_fwd)) : NTILES(cpu_tiles);
    return dp->is_gpu ? (bwd ? gpu_bwd : gpu_fwd) : cpu_tiles;
}

typedef struct tuned_problem {
    const problem *p;
    int bwd;
} tuned_problem;

static bool tuned_legal(const clkit_context *ctx, const void *arg, const clkit_config *c)
{
    const tuned_problem *tp = arg;
    tiles t;
    return tiles_from_config(c, &t) && tiles_legal(&ctx->props, &t, (int)tp->p->d, tp->bwd);
}

/* Tiles to try, best first: a tuned entry that fits, then the heuristic's legal tiles within
   the register budget, then any legal tile. The caller builds each in turn until one fits
   the built kernel's limits. */
static int candidates(clkit_context *ctx, const problem *p, int bwd, tiles *out, int max)
{
    const struct clkit_device_props *dp = &ctx->props;
    int n = 0, d = (int)p->d, len;
    if (p->force) return tiles_legal(dp, p->force, d, bwd) ? (out[0] = *p->force, 1) : 0;
    const tiles *list = tile_list(dp, bwd, &len);
    tiles heuristic[24];
    int nh = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < len; i++)
            if (tiles_legal(dp, &list[i], d, bwd) &&
                (pass || accumulators(&list[i], d, bwd) <= MAX_ACCUMULATORS))
                add_candidate(heuristic, &nh, 24, &list[i]);
    tuned_problem tp = {p, bwd};
    clkit_chooser ch = {tune_key(p, bwd), &tp, tuned_legal, NULL, {0}};
    if (nh) ch.heuristic = config_of(&heuristic[0]);
    clkit_config cfg;
    tiles t;
    clkit_choose_config(ctx, &ch, &cfg);
    if (tiles_from_config(&cfg, &t)) add_candidate(out, &n, max, &t);
    for (int i = 0; i < nh; i++) add_candidate(out, &n, max, &heuristic[i]);
    return n;
}

/* ---- launching ---- */

static kview kview_of(const clkit_tensor *t)
{
    kview v;
    memset(&v, 0, sizeof v);
    if (!t) return v;
    v.buf = t->buffer;
    v.off = (cl_long)(t->offset / clkit_dtype_size(t->dtype));
    for (int i = 0; i < t->ndim; i++) v.st.s[i] = t->shape[i] > 1 ? t->strides[i] : 0;
    return v;
}

static void arg_view(clkit_args *a, const kview *v)
{
    clkit_arg_mem(a, v->buf), clkit_arg_long(a, v->off), clkit_arg_long4(a, v->st);
}

static void build_options(const problem *p, const tiles *t, int bwd, char *buf, size_t n)
{
    snprintf(buf, n, "%s -D %s -D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D THREAD_M=%d "
             "-D THREAD_N=%d -D SLICE_D=%d -D SLICE_N=%d", clkit_dtype_macro(p->dtype),
             bwd ? "ATTN_BWD" : "ATTN_FWD", (int)p->d, t->bm, t->bn, t->tm, t->tn, t->sd, t->sn);
}

/* ---- tensor cores ---- */

/* Rows held (BLOCK_M), rows streamed (BLOCK_N) and warps of one of cl/nv/attention_mma.cl's
   kernels, the largest head dim it serves (0: any), and whether the held rows stay in local
   memory (HELD_LOCAL) instead of registers. */
typedef struct mma_tiles {
    int bm, bn, warps, max_d, held_local;
} mma_tiles;

enum { MMA_FWD, MMA_DKDV, MMA_DQ };

/* Fastest first (H100, causal, D 64 and 128), each kernel its own: each warp holds 16 or 32
   rows. */
static const mma_tiles mma_fwd[] = {{128, 64, 4, 0, 0}, {64, 64, 4, 0, 0}, {64, 32, 4, 0, 0}};
static const mma_tiles mma_dkdv[] = {{64, 32, 4, 0, 0}, {64, 16, 4, 0, 0}, {32, 16, 2, 0, 0}};
static const mma_tiles mma_dq[] = {{128, 32, 4, 0, 0}, {64, 32, 4, 0, 0}, {64, 16, 4, 0, 0}};
/* f32 (3xTF32) holds twice the fragment registers and splits every operand: only these
   tiles assemble with no more than MMA_F32_SPILL bytes of spills, by head dim (ptxas for
   sm_90; tests/compile_nvptx.sh holds them to it). At D 128 the held rows would take half
   the registers, so there they stay in local memory (the last field), which sm_90 has room
   for beside the streamed tiles; where it has not (sm_80), the forward holds them in
   registers and the backward stays portable (dK/dV's two accumulators alone fill 128
   registers; dQ spills 324 bytes). At D 128, with the held rows in local memory, 16 streamed
   rows beat 32 and 64 in the forward and in dK/dV, and 128 held rows on 8 warps gained little
   over 64 on 4 (measurements: docs/attention.md#measurements-behind-the-code). */
#define MMA_F32_SPILL 320
static const mma_tiles mma_fwd_f32[] = {{64, 32, 4, 64, 0}, {64, 16, 4, 128, 1}, {64, 16, 4, 128, 0}};
static const mma_tiles mma_dkdv_f32[] = {{64, 32, 4, 32, 0}, {64, 16, 4, 64, 0}, {64, 16, 4, 128, 1}};
static const mma_tiles mma_dq_f32[] = {{64, 32, 4, 64, 0}, {64, 16, 4, 128, 1}};

/* Registers a lane keeps in fragments and accumulators (each FRAG_M = bm / warps / 16 rows
   of 16): held A fragments (d / 4 each for 16-bit elements, d / 2 for f32; none when they
   stay in local memory), head-dimension accumulators (d / 2 each) and score accumulators
   (bn / 2 each). Beyond MMA_REGISTERS ptxas spills (sm_80 and sm_90). */
#define MMA_REGISTERS 208

static int mma_registers(const mma_tiles *t, int d, size_t es, int kernel)
{
    int frag_m = t->bm / t->warps / 16, held = t->held_local ? 0 : d * (int)es / 8;
    int out = d / 2, scores = t->bn / 2;
    if (kernel == MMA_FWD) return frag_m * (held + out + scores);
    return frag_m * (2 * held + (kernel == MMA_DKDV ? 2 : 1) * out + 2 * scores);
}

/* Local memory, bytes: the held tiles (the forward's q; the backward's two), or the streamed
   ones that take their place once read (the forward's K and V; two stages of two tiles for
   the backward, with their rows' lse and delta for dK/dV); both when the held ones stay. */
static uint64_t mma_local(const mma_tiles *t, int d, size_t es, int kernel)
{
    uint64_t row = (uint64_t)d * es, bm = (uint64_t)t->bm, bn = (uint64_t)t->bn;
    uint64_t held = (kernel == MMA_FWD ? 1 : 2) * bm * row;
    uint64_t streamed = kernel == MMA_FWD ? 2 * bn * row : 2 * (2 * bn * row + (kernel == MMA_DKDV ? 8 * bn : 0));
    if (t->held_local) return held + streamed;
    return held > streamed ? held : streamed;
}

/* The first legal tile of the kernel's list (by element size) for head dim d; 0 when none is. */
static int mma_pick(const struct clkit_device_props *dp, int d, size_t es, int kernel, mma_tiles *out)
{
    static const struct {
        const mma_tiles *tiles;
        int n;
    } lists[2][3] = {{{mma_fwd, NTILES(mma_fwd)}, {mma_dkdv, NTILES(mma_dkdv)}, {mma_dq, NTILES(mma_dq)}},
                     {{mma_fwd_f32, NTILES(mma_fwd_f32)}, {mma_dkdv_f32, NTILES(mma_dkdv_f32)},
                      {mma_dq_f32, NTILES(mma_dq_f32)}}};
    int f32 = es == 4;
    for (int i = 0; i < lists[f32][kernel].n; i++) {
        const mma_tiles *t = &lists[f32][kernel].tiles[i];
        if (t->bm % (16 * t->warps) == 0 && (size_t)(t->warps * 32) <= dp->max_work_group &&
            (t->max_d == 0 || d <= t->max_d) && mma_local(t, d, es, kernel) <= dp->local_mem_static &&
            mma_registers(t, d, es, kernel) <= MMA_REGISTERS) {
            *out = *t;
            return 1;
        }
    }
    return 0;
}

/* Hopper's wgmma forward (attn_fwd_wgmma): two warpgroups of 64 query rows; the key block
   by head dim, so that a lane's scores (bn / 2) and output (d / 2) fit its 255 registers
   (ptxas for sm_90a, tests/compile_nvptx.sh prints them). Local memory: q, and two stages
   of K and V, 1024-aligned. At D 128, 64 keys a block leave room (99 KB) for two work-groups
   a compute unit, which took an H200 from 495 to 558 TFLOP/s at L 4096 (128 keys: 164 KB,
   one); at D 64, 64 keys were 14 % slower than 128 (docs/attention.md). */
static const mma_tiles wgmma_fwd[] = {{128, 128, 8, 64, 0}, {128, 64, 8, 256, 0}};
/* The backward's (attn_bwd_dkdv_wgmma, attn_bwd_dq_wgmma; a program a tile, each kernel on its
   own): rows held in local memory (keys in dK/dV, queries in dQ), 64 streamed (dK/dV's 128 at
   D 64, below). 32 streamed
   rows took fewer registers (ptxas for sm_90a: 243 against 255 and 92 bytes of spills at D
   128) but ran slower on an H200: D 128 240 against 315 TFLOP/s at L 4096, D 64 193 against
   227. The held rows follow the registers of the driver's build: dK/dV takes 168 a work-item
   at D 64 and 255 at D 128, so two warpgroups (128 keys) made one work-group a compute unit,
   whose warpgroups ran in step (a barrier a block: softmax beside softmax); one warpgroup of
   64 keys a work-group fits three a unit at D 64 and two at D 128, each at its own pace (H200,
   f16, the backward 10-12 % faster at D 64 and 1-1.5 % at D 128). dQ takes 168 at D 128:
   there a third warpgroup (192 queries) fits the unit's 64 K registers beside the first two,
   2-3 % faster; at D 64 (128 registers) two work-groups of two warpgroups share a unit, and
   work-groups of one or three ran slower. dK/dV streams 128 queries a step at D 64 (253
   registers, two work-groups a unit; half the steps, twice the columns a product): H200, f16,
   the backward 4-8 % faster than with 64 (4x16x4096x64 2.061 -> 1.927 ms, causal 8x16x4096x64
   2.127 -> 2.068); dQ streaming 128 keys there (64 x 128 x 4, 128 x 128 x 8) ran 3-5 % slower.
   One set of tensor maps serves both kernels (bwd_boxes). At D 256
   the held tiles take 128 KB, which leaves room for 32 streamed rows only, and dK and dV over
   all 256 columns would take 256 registers a lane: each dK/dV work-group computes 128 of their
   columns (WGMMA_BWD_COLS; the kernel's OUT_DIM), recomputing the scores; dQ keeps all 256 in
   two such accumulators; one work-group of 64 keys a unit there ran 33 % slower. A driver whose
   build of dQ cannot run 384 work-items a group (more than 168 registers) gets two warpgroups
   at D 128, as before. */
static const mma_tiles wgmma_dkdv[] = {{64, 128, 4, 64, 0}, {64, 64, 4, 128, 0}, {128, 32, 8, 256, 0}};
static const mma_tiles wgmma_dq[] = {{128, 64, 8, 64, 0}, {192, 64, 12, 128, 0}, {128, 64, 8, 128, 0},
                                     {128, 32, 8, 256, 0}};
/* Both backward kernels where cp.async loads their tiles (strides past the TMA's, or the TMA
   path off): two warpgroups. Its loop takes more registers (clang's build of the one-warpgroup
   dK/dV spills at D 128, dQ's three warpgroups 201 against 168 with the TMA), and the tiles
   above ran 5 % slower there at D 128 (H200, 4x16x4096x128: 3.95 against 3.78 ms). */
static const mma_tiles wgmma_bwd_copy[] = {{128, 64, 8, 128, 0}, {128, 32, 8, 256, 0}};
#define WGMMA_BWD_COLS 128

/* Local memory of a wgmma tile, 1024-aligned: the forward holds q and two stages of K and V;
   the backward two held tiles, two stages of two streamed ones, and their statistics. */
static uint64_t wgmma_local(const mma_tiles *t, int d, int kind)
{
    uint64_t held = kind == MMA_FWD ? 1 : 2;
    return 2 * (uint64_t)d * (held * (uint64_t)t->bm + 4 * (uint64_t)t->bn) + (kind == MMA_FWD ? 0 : 16u * t->bn) + 1024;
}

/* The wgmma tiles of a kernel, loaded by the TMA or not; *n of them. */
static const mma_tiles *wgmma_tiles(int kind, bool tma, size_t *n)
{
    if (kind == MMA_FWD) {
        *n = NTILES(wgmma_fwd);
        return wgmma_fwd;
    }
    if (!tma) {
        *n = NTILES(wgmma_bwd_copy);
        return wgmma_bwd_copy;
    }
    *n = kind == MMA_DKDV ? NTILES(wgmma_dkdv) : NTILES(wgmma_dq);
    return kind == MMA_DKDV ? wgmma_dkdv : wgmma_dq;
}

/* A kernel's wgmma tile for 16-bit head dims from 64 to 256, loaded by the TMA or not, of at
   most wg_limit work-items (0: the device's limit); 0 when none fits. */
static int wgmma_pick(const clkit_context *ctx, const problem *p, int kind, bool tma, size_t wg_limit,
                      mma_tiles *out)
{
    int d = (int)p->d;
    size_t n;
    const mma_tiles *list = wgmma_tiles(kind, tma, &n);
    if (p->dtype == CLKIT_F32 || d < 64 || !clkit_path_allowed(ctx, CLKIT_PATH_NV_WGMMA, CLKIT_FAMILY_ATTENTION))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (d <= list[i].max_d && wgmma_local(&list[i], d, kind) <= ctx->props.local_mem_static &&
            (size_t)list[i].warps * 32 <= (wg_limit ? wg_limit : ctx->props.max_work_group)) {
            *out = list[i];
            return 1;
        }
    return 0;
}

/* Whether t can be moved in 16-byte chunks along the head dimension (cp.async; the decoding
   kernel's aligned loads): it must be contiguous, and every other stride and the offset must
   keep chunks 16-byte aligned. */
static int mma_view(const clkit_tensor *t)
{
    size_t es = clkit_dtype_size(t->dtype), chunk = 16 / es;
    if (t->strides[3] != 1 || t->offset % 16 != 0) return 0;
    for (int i = 0; i < 3; i++)
        if (t->shape[i] > 1 && t->strides[i] % (int64_t)chunk != 0) return 0;
    return 1;
}

/* ---- AMD matrix cores (cl/amd/attention_matrix.cl: forward and backward, on MFMA) ---- */

/* Rows held and streamed, waves of 64 (each holds 32 rows), the most held rows first: the
   forward's and dQ's held rows are queries, dK/dV's keys. */
static const mma_tiles matrix_fwd[] = {{128, 64, 4, 0, 0}, {128, 32, 4, 0, 0}, {64, 32, 2, 0, 0}};
static const mma_tiles matrix_bwd[] = {{128, 32, 4, 0, 0}, {64, 32, 2, 0, 0}};

/* Registers a lane keeps (32-bit): held B fragments (d / 4 each for 16-bit elements, d / 2 for
   f32: the forward's queries, dQ's queries and dO, dK/dV's keys and values), head-dimension
   accumulators (d / 2 each: o; dq; dk and dv) and scores (bn / 2 each: s; s and dp), within
   the counts whose offline builds use no scratch (tests/compile_amd_matrix.sh assembles every
   tile these rules allow). Local memory: the staged tiles in padded lines, within 64 KiB; the
   backward program holds dK/dV and dQ built with one tile, so dQ's tile must fit dK/dV's
   local memory too. */
static int matrix_fits(const mma_tiles *t, int d, int es, int kernel)
{
    int held = d * es / 8, pad = es == 4 ? 1 : 4;
    uint64_t rows = (uint64_t)t->bn * (uint64_t)(d + pad) * (uint64_t)es;
    uint64_t trans = (uint64_t)d * (uint64_t)(t->bn + pad) * (uint64_t)es;
    uint64_t dkdv_local = 2 * (rows + trans) + 8u * t->bn;
    if (kernel == MMA_FWD) return held + d / 2 + t->bn / 2 <= 208 && rows + trans <= 65536;
    if (kernel == MMA_DQ) return 2 * held + d / 2 + t->bn <= 256 && dkdv_local <= 65536;
    return 2 * held + d + t->bn <= 256 && dkdv_local <= 65536;
}

static int matrix_pick(const problem *p, int kernel, mma_tiles *out)
{
    int d = (int)p->d, es = (int)clkit_dtype_size(p->dtype);
    const mma_tiles *list = kernel == MMA_FWD ? matrix_fwd : matrix_bwd;
    size_t n = kernel == MMA_FWD ? NTILES(matrix_fwd) : NTILES(matrix_bwd);
    if (d % 32) return 0;
    for (size_t i = 0; i < n; i++)
        if (matrix_fits(&list[i], d, es, kernel)) {
            *out = list[i];
            return 1;
        }
    return 0;
}

enum { ON_NV = 1, ON_AMD = 2, ON_WGMMA = 3 }; /* on[i] of a kernel on the fast path */

/* A kernel's NVIDIA tile: wgmma's where it has one (the TMA's; plan_attention takes
   cp.async's where the TMA does not load), else mma.sync's. */
static int nv_pick(const clkit_context *ctx, const problem *p, int kind, mma_tiles *out)
{
    if (wgmma_pick(ctx, p, kind, true, 0, out)) return ON_WGMMA;
    return mma_pick(&ctx->props, (int)p->d, clkit_dtype_size(p->dtype), kind, out) ? ON_NV : 0;
}

/* How many of the kernels kinds[0..n) run on the tensor cores for this problem and device:
   on[i] says which (and whose), with its tiles in out[i]. The views decide for all of them;
   the tiles for each, so that one kernel without a tile for the head dim leaves the others
   there. AMD's matrix cores take any view. */
static int mma_choice(const clkit_context *ctx, const problem *p, const clkit_tensor *const *ins,
                      int nin, const int *kinds, int n, mma_tiles *out, int *on)
{
    int count = 0;
    for (int i = 0; i < n; i++) on[i] = 0;
    if (p->force) return 0;
    if (clkit_path_allowed(ctx, CLKIT_PATH_AMD_MFMA, CLKIT_FAMILY_ATTENTION)) {
        for (int i = 0; i < n; i++) count += on[i] = matrix_pick(p, kinds[i], &out[i]) ? ON_AMD : 0;
        return count;
    }
    if (!clkit_path_allowed(ctx, CLKIT_PATH_NV_MMA, CLKIT_FAMILY_ATTENTION)) return 0;
    for (int i = 0; i < nin; i++)
        if (!mma_view(ins[i])) return 0;
    for (int i = 0; i < n; i++)
        count += (on[i] = nv_pick(ctx, p, kinds[i], &out[i])) != 0;
    return count;
}

/* One pass's kernels as the plan step sees them: each on the tensor cores where it has a
   tile there (on[i], mt[i]) and the family may take them, else on the portable tiles the pass
   shares, the first candidate that every portable kernel of the pass runs. */
typedef struct pass {
    const problem *p;
    int bwd;
    const char *const *names_mma, *const *names_portable;
    const int *kinds;
    int on[3];
    mma_tiles mt[3];
    tiles cands[24];
    int ncands, cand; /* ncands -1: not listed yet */
    int tma_views;    /* the TMA can read every input (clkit_tma_strides; the rest of the rules
                         are mma_view's) */
    int i;            /* the kernel being planned */
    int ds;           /* the backward passes dS through memory (ds_suits; DS_TILES) */
    int ds_lost;      /* ... but a kernel of it was planned off the TMA */
    blocking chosen[3];
} pass;

static void mma_options(const problem *p, int bwd, const mma_tiles *t, char *buf, size_t n)
{
    snprintf(buf, n, "%s -D %s -D HEAD_DIM=%d -D BLOCK_M=%d -D BLOCK_N=%d -D WARPS=%d%s",
             clkit_dtype_macro(p->dtype), bwd ? "ATTN_BWD" : "ATTN_FWD", (int)p->d, t->bm, t->bn,
             t->warps, t->held_local ? " -D HELD_LOCAL" : "");
}

/* The wgmma forward's stagger (cl/nv/attention_mma.cl): the first wave's second work-group on
   each compute unit, where two fit its local memory. */
static void stagger_options(const clkit_context *ctx, const problem *p, const mma_tiles *t, char *buf, size_t n)
{
    if (2 * wgmma_local(t, (int)p->d, MMA_FWD) > ctx->props.local_mem_static) return;
    size_t used = strlen(buf);
    snprintf(buf + used, n - used, " -D STAGGER_FROM=%u -D STAGGER_TO=%u", ctx->props.compute_units,
             2 * ctx->props.compute_units);
}

/* The pass's portable tiles: its current candidate, moved on past those whose work-group
   exceeds wg_limit. CLKIT_ERR_UNSUPPORTED when none is left. */
static clkit_status portable_tiles(clkit_context *ctx, pass *ps, size_t wg_limit, const tiles **t)
{
    if (ps->ncands < 0) ps->ncands = candidates(ctx, ps->p, ps->bwd, ps->cands, 24);
    while (ps->cand < ps->ncands && wg_limit && (size_t)work_items(&ps->cands[ps->cand]) > wg_limit)
        ps->cand++;
    if (ps->cand >= ps->ncands)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "attention: no tile size fits this device's local "
                          "memory and work-group limits for head dim %lld", (long long)ps->p->d);
    *t = &ps->cands[ps->cand];
    return CLKIT_OK;
}

/* The boxes (rows) of the backward's tensor maps, built once for both kernels: q's and dO's
   are dK/dV's streamed block, K's and V's dQ's; where one kernel does not run on wgmma (and
   reads no map), the other's held rows. Each is a whole number of times in the other kernel's
   held rows (every wgmma tile at a head dim has the same streamed rows, as many as the other
   kernel's held rows or a divisor of them): whole boxes of 128 queries took dK/dV's stream at
   D 64 1 % faster than boxes of 64 (H200, f16, 4x16x4096x64 1.927 against 1.945 ms). */
static void bwd_boxes(const pass *ps, char *buf, size_t n)
{
    int qo = ps->on[1] == ON_WGMMA ? ps->mt[1].bn : ps->mt[2].bm;
    int kv = ps->on[2] == ON_WGMMA ? ps->mt[2].bn : ps->mt[1].bm;
    size_t used = strlen(buf);
    snprintf(buf + used, n - used, " -D Q_BOX=%d -D KV_BOX=%d", qo, kv);
}

/* Kernel ps->i of the pass. attn_bwd_delta takes any work-group size (its launch picks one),
   so only the tiled kernels bind a work-group here. */
static clkit_status plan_attention(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    pass *ps = arg;
    int i = ps->i;
    const mma_tiles *mt = &ps->mt[i];
    bool delta = strcmp(ps->names_portable[i], "attn_bwd_delta") == 0;
    /* After a wgmma build failure the kernel takes mma.sync's tile. */
    if (ps->on[i] == ON_WGMMA && !clkit_path_allowed(ctx, CLKIT_PATH_NV_WGMMA, CLKIT_FAMILY_ATTENTION))
        ps->on[i] = nv_pick(ctx, ps->p, ps->kinds[i], &ps->mt[i]);
    bool amd = ps->on[i] == ON_AMD, wg = ps->on[i] == ON_WGMMA;
    bool tma = wg && ps->tma_views && clkit_path_allowed(ctx, CLKIT_PATH_NV_TMA, CLKIT_FAMILY_ATTENTION);
    if (wg) wgmma_pick(ctx, ps->p, ps->kinds[i], tma, wg_limit, &ps->mt[i]);
    bool ds = ps->ds && !delta && wg && tma;
    ps->ds_lost |= ps->ds && !delta && !ds;
    clkit_path path = amd ? CLKIT_PATH_AMD_MFMA : wg ? CLKIT_PATH_NV_WGMMA : CLKIT_PATH_NV_MMA;
    size_t wave = amd ? 64 : 32;
    bool mma = ps->on[i] && clkit_path_allowed(ctx, path, CLKIT_FAMILY_ATTENTION) &&
               (!wg_limit || delta || (size_t)mt->warps * wave <= wg_limit);
    plan->file = !mma ? "attention.cl" : amd ? "amd/attention_matrix.cl" : "nv/attention_mma.cl";
    plan->family = CLKIT_FAMILY_ATTENTION;
    plan->dims = 2;
    if (mma) {
        /* AMD's kernels are NVIDIA's names with _matrix for _mma, Hopper's with _wgmma (the
           delta kernel is shared). */
        const char *name = ps->names_mma[i], *suffix = amd ? "_matrix" : wg ? "_wgmma" : "_mma";
        size_t stem = strlen(name) - (delta ? 0 : 4);
        bool dq = ds && ps->kinds[i] == MMA_DQ;
        snprintf(plan->name, sizeof plan->name, "%.*s%s%s", (int)stem, name, dq ? "_ds" : "", delta ? "" : suffix);
        mma_options(ps->p, ps->bwd, mt, plan->options, sizeof plan->options);
        /* wgmma kernels load by the TMA where they may, by cp.async otherwise. */
        if (wg) {
            strncat(plan->options, tma ? " -D WGMMA -D TMA" : " -D WGMMA",
                    sizeof plan->options - strlen(plan->options) - 1);
            if (ds) strncat(plan->options, " -D DS_TILES", sizeof plan->options - strlen(plan->options) - 1);
            if (ps->bwd && tma) bwd_boxes(ps, plan->options, sizeof plan->options);
            if (tma) path = CLKIT_PATH_NV_TMA;
            if (!ps->bwd) stagger_options(ctx, ps->p, mt, plan->options, sizeof plan->options);
        }
        if (amd) {
            size_t used = strlen(plan->options);
            snprintf(plan->options + used, sizeof plan->options - used, " -D WAVE=64 -D MATRIX_MFMA32%s",
                     ctx->amd_emulated ? " -D AMD_EMULATE" : "");
        }
        plan->path = path;
        ps->chosen[i] = (blocking){mt->bm, (size_t)mt->warps * wave};
    } else {
        const tiles *t = NULL;
        clkit_status s = portable_tiles(ctx, ps, delta ? 0 : wg_limit, &t);
        if (s) return s;
        snprintf(plan->name, sizeof plan->name, "%s", ps->names_portable[i]);
        build_options(ps->p, t, ps->bwd, plan->options, sizeof plan->options);
        ps->chosen[i] = (blocking){t->bm, (size_t)work_items(t)};
    }
    plan->local[0] = delta ? 0 : ps->chosen[i].wg;
    return CLKIT_OK;
}

static size_t groups_of(int64_t rows, int block) { return (size_t)((rows + block - 1) / block); }

/* The dS tiles' scratch for one kv head: 64 x 64 16-bit scores a tile, every (query block, key
   block) of each query head it serves. */
static uint64_t ds_head_bytes(const problem *p)
{
    return (uint64_t)(p->hq / p->hkv) * groups_of(p->lq, 64) * groups_of(p->lk, 64) * 64 * 64 * 2;
}

/* The most scratch the dS tiles may take: CLKIT_ATTN_DS_MB mebibytes (0: the path off; up
   to 2^40), default 2048, within the device's largest allocation. */
static uint64_t ds_cap(const clkit_context *ctx)
{
    int64_t mb = 2048;
    clkit_env_int("CLKIT_ATTN_DS_MB", 0, (int64_t)1 << 40, &mb);
    uint64_t cap = (uint64_t)mb << 20;
    return cap < ctx->props.max_alloc ? cap : ctx->props.max_alloc;
}

/* Whether the backward passes dS through memory (cl/nv/attention_mma.cl's DS_TILES): 16-bit
   head dim 128 on wgmma with the TMA (dK/dV's tiles there are 64 keys by 64 queries), where
   one kv head's tiles fit the scratch cap. At D 64 the dS round trip (2 bytes a score written
   and read back) cost more than the two products it saves: H200, causal 8x16x4096x64, 2.35
   against 2.12 ms; at D 128 it won (4x16x4096x128: 2.90 against 3.34; docs/attention.md). */
static int ds_suits(const clkit_context *ctx, const problem *p)
{
    return p->d == 128 && p->dtype != CLKIT_F32 && p->lq > 0 && p->lk > 0 && p->hq > 0 &&
           ds_head_bytes(p) <= ds_cap(ctx);
}

/* Whether kernel k, planned on the portable tiles, fits the device's local memory. */
static bool local_fits(clkit_context *ctx, cl_kernel k)
{
    uint64_t local, priv;
    clkit_kernel_mem(ctx, k, &local, &priv);
    return local <= ctx->props.local_mem;
}

/* The kernels names_mma[i] (tiles of kinds[i]) where the problem and the device take them,
   else the portable names_portable[i], with their plans (into plans[i] where plans is not
   NULL). A portable kernel that does not fit moves the pass to its next candidate tiles, and
   the pass is planned again, so that its portable kernels share one tile. */
static clkit_status choose_kernels(clkit_context *ctx, const problem *p, int bwd,
                                   const clkit_tensor *const *ins, int nin, const int *kinds,
                                   const char *const *names_mma, const char *const *names_portable,
                                   int n, cl_kernel *ks, blocking *out, clkit_plan *plans, int *ds)
{
    pass ps = {.p = p, .bwd = bwd, .names_mma = names_mma, .names_portable = names_portable,
               .kinds = kinds, .ncands = -1, .tma_views = 1};
    mma_choice(ctx, p, ins, nin, kinds, n, ps.mt, ps.on);
    for (int i = 0; i < nin; i++) ps.tma_views &= clkit_tma_strides(ins[i]->strides, 3);
    ps.ds = ds && ds_suits(ctx, p) && ps.tma_views && ps.on[1] == ON_WGMMA && ps.on[2] == ON_WGMMA;
    for (ps.i = 0; ps.i < n || ps.ds_lost;) {
        if (ps.ds_lost) {
            /* Both kernels pass dS through memory or neither does. */
            ps.ds = ps.ds_lost = 0;
            ps.i = 0;
            continue;
        }
        clkit_plan pl;
        clkit_status s = clkit_plan_kernel(ctx, plan_attention, &ps, &pl, &ks[ps.i]);
        if (s) return s;
        if (pl.path != CLKIT_PATH_NONE || local_fits(ctx, ks[ps.i])) {
            out[ps.i] = ps.chosen[ps.i];
            if (plans) plans[ps.i] = pl;
            ps.i++;
            continue;
        }
        const tiles *t = &ps.cands[ps.cand];
        clkit_log(CLKIT_LOG_INFO, "attention: tiles %dx%d (%dx%d) exceed the device's local memory, "
                  "trying smaller ones", t->bm, t->bn, t->tm, t->tn);
        ps.cand++;
        ps.i = 0;
    }
    if (ds) *ds = ps.ds;
    return CLKIT_OK;
}

static float scale_log2(const problem *p) { return (float)(p->scale * 1.4426950408889634); }

/* The kernels' causal mask (cl/attention.h's hidden): key c is hidden from query t when
   c - t > diag; Lk hides nothing. */
static cl_int diag_of(const problem *p)
{
    return p->causal == CLKIT_CAUSAL_TOP_LEFT ? 0 : p->causal == CLKIT_CAUSAL_BOTTOM_RIGHT ? (cl_int)(p->lk - p->lq)
                                                                                          : (cl_int)p->lk;
}

/* ---- tuning ---- */

static const char *const fwd_names[] = {"attn_fwd"}, *const fwd_names_mma[] = {"attn_fwd_mma"};
static const int fwd_kinds[] = {MMA_FWD};
static const char *const bwd_names[] = {"attn_bwd_delta", "attn_bwd_dkdv", "attn_bwd_dq"};
static const char *const bwd_names_mma[] = {"attn_bwd_delta", "attn_bwd_dkdv_mma", "attn_bwd_dq_mma"};
static const int bwd_kinds[] = {MMA_DKDV, MMA_DKDV, MMA_DQ};

/* The tensors of one call and its problem, validated once by entry(): the pass runs it, and
   the tuner repeats it with each candidate. */
typedef struct call {
    const clkit_tensor *q, *k, *v, *o, *dout, *lse, *dq, *dk, *dv;
    const clkit_attention_options *opt;
    problem p;
} call;

static clkit_status forward(clkit_context *ctx, const call *c, const tiles *force);
static clkit_status backward(clkit_context *ctx, const call *c, const tiles *force);

static clkit_status run_candidate(clkit_context *ctx, const clkit_config *cfg, void *user, int bwd)
{
    tiles t;
    if (!tiles_from_config(cfg, &t))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "attention: a candidate without tiles");
    return bwd ? backward(ctx, user, &t) : forward(ctx, user, &t);
}

static clkit_status run_forward(clkit_context *ctx, const clkit_config *cfg, void *user)
{
    return run_candidate(ctx, cfg, user, 0);
}

static clkit_status run_backward(clkit_context *ctx, const clkit_config *cfg, void *user)
{
    return run_candidate(ctx, cfg, user, 1);
}

/* Whether every kernel of the pass runs on the tensor cores, whose tiles come from fixed
   tables: then there are no portable tiles to tune. */
static int takes_mma(const clkit_context *ctx, const call *c, int bwd)
{
    const clkit_tensor *ins[4] = {c->q, c->k, c->v, c->dout};
    mma_tiles mt[3];
    int on[3], n = bwd ? 3 : 1;
    return mma_choice(ctx, &c->p, ins, bwd ? 4 : 3, bwd ? bwd_kinds : fwd_kinds, n, mt, on) == n;
}

/* Times every legal portable tile of the device's list on this call and stores the fastest
   under the pass's key. */
static clkit_status tune(clkit_context *ctx, int bwd, call *c, const clkit_tune_options *topt)
{
    const problem *p = &c->p;
    if (takes_mma(ctx, c, bwd))
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "attention: this problem runs on the tensor-core "
                          "kernels, whose tiles are fixed (CLKIT_TENSOR_CORES=0 or CLKIT_AMD_MATRIX=0 tunes the "
                          "portable ones)");
    int len, n = 0;
    const tiles *list = tile_list(&ctx->props, bwd, &len);
    clkit_config cands[24], best;
    for (int i = 0; i < len && n < 24; i++)
        if (tiles_legal(&ctx->props, &list[i], (int)p->d, bwd)) cands[n++] = config_of(&list[i]);
    clkit_tune_key key = tune_key(p, bwd);
    return clkit_autotune(ctx, &key, cands, n, bwd ? run_backward : run_forward, c, topt, &best);
}

/* CLKIT_AUTOTUNE=1 and no exact entry for a problem on the portable kernels: tune first. */
static clkit_status autotune_first(clkit_context *ctx, int bwd, call *c)
{
    const char *env = getenv("CLKIT_AUTOTUNE");
    if (!env || strcmp(env, "1") != 0 || takes_mma(ctx, c, bwd)) return CLKIT_OK;
    clkit_tune_key key = tune_key(&c->p, bwd);
    clkit_config cfg;
    if (clkit_cache_lookup(ctx, &key, &cfg) == CLKIT_LOOKUP_EXACT) return CLKIT_OK;
    return tune(ctx, bwd, c, NULL);
}

/* ---- forward ---- */

/* Validation of the inputs into p, and of the outputs. */
static clkit_status check_forward(clkit_context *ctx, const call *c, problem *p)
{
    clkit_status s = check_inputs(ctx, c->q, c->k, c->v, c->opt, p);
    if (s || (s = check_like(ctx, c->o, "o", c->q, "q")) || (c->lse && (s = check_lse(ctx, c->lse, p))))
        return s;
    const clkit_tensor *outs[2] = {c->o, c->lse}, *ins[3] = {c->q, c->k, c->v};
    const char *out_names[2] = {"o", "lse"}, *in_names[3] = {"q", "k", "v"};
    return check_outputs(ctx, c->lse ? 2 : 1, outs, out_names, 3, ins, in_names);
}

/* ---- decoding: a few queries against many keys (cl/attention.cl's attn_decode, cl/nv/attention_mma.cl's
   attn_decode_mma) ---- */

/* The portable kernel's work-group and most rows (8); the tensor-core kernel's rows (16, an
   mma's); the splits the merge's weights hold. */
#define DEC_WG 128
#define DEC_ROWS 8
#define DEC_MMA_ROWS 16
#define DEC_MAX_SPLITS 128

/* Splitting the keys pays where each kv head has a few query rows (group x Lq, at most four
   blocks of DEC_ROWS) and more keys than a work-group should walk alone. */
static int decode_suits(const problem *p)
{
    int64_t rows = p->hq / p->hkv * p->lq;
    return !p->force && p->lq <= 16 && rows <= 4 * DEC_ROWS && p->lk >= 256;
}

/* Keys a work-group takes. The keys stream at the bandwidth only while enough work-groups
   run, so the grid should end in whole waves of `per_cu` work-groups a compute unit: the
   chunk (a multiple of 64 keys, at most DEC_MAX_SPLITS of them) whose waves cost least,
   each as long as its work-groups' chunk plus DEC_SPLIT_KEYS, the fewest splits on a tie. On
   an H200 at B 8, Hkv 8, Lk 32768, D 128, one wave of 256 work-groups took 0.257 ms, two, three
   and four waves of smaller chunks 0.262, 0.267 and 0.271 (about 150 keys' time a wave), and
   2.2 waves 0.306 (the last fifth of a wave alone on the GPU at the end). */
#define DEC_SPLIT_KEYS 128

static int decode_chunk(const clkit_context *ctx, const problem *p, size_t groups, int per_cu)
{
    int64_t slots = (int64_t)ctx->props.compute_units * per_cu, best = 0, best_cost = 0;
    for (int64_t want = 1; want <= DEC_MAX_SPLITS; want++) {
        int64_t chunk = ((p->lk + want - 1) / want + 63) / 64 * 64, splits = (p->lk + chunk - 1) / chunk;
        int64_t cost = ((int64_t)groups * splits + slots - 1) / slots * (chunk + DEC_SPLIT_KEYS);
        if (!best || cost < best_cost) best = chunk, best_cost = cost;
    }
    return (int)best;
}

typedef struct dec_problem {
    const call *c;
    int rows;   /* the plan's rows a work-group */
    int per_cu; /* its work-groups a compute unit holds */
} dec_problem;

/* The tensor-core kernel (cl/nv/attention_mma.cl) needs 16-bit operands whose rows start on
   16 bytes, a head dim of 64 to 256, and at head dim 256 room for its warps' rings of copies
   (sm_90's local memory: 104 KB a work-group); it has run on sm_90 only. */
static int decode_mma_suits(const clkit_context *ctx, const call *c)
{
    const problem *p = &c->p;
    return p->dtype != CLKIT_F32 && p->d >= 64 && mma_view(c->q) && mma_view(c->k) && mma_view(c->v) &&
           ctx->props.local_mem_static >= (192u << 10) &&
           clkit_path_allowed(ctx, CLKIT_PATH_NV_MMA, CLKIT_FAMILY_ATTENTION);
}

/* Four warps (two at head dim 256, whose q stays in local memory), each taking blocks of 16
   keys (32 at head dim 64) of K and V. Up to head dim 128 a warp loads the next block into
   registers while it computes one from local memory (DEC_REGS): on an H200 that read the
   cache at 4.2 TB/s where cp.async's ring of three blocks read 3.7 (a read probe: plain
   16-byte loads 4.35, cp.async 3.8, bulk copies 4.0). At head dim 256 the next block would
   not fit the registers beside the output's 128 a lane, so a ring of three blocks, two in
   flight, fills by cp.async. NVIDIA's build takes 255 registers a lane: two work-groups a
   compute unit. */
static void plan_decode_mma(const problem *p, dec_problem *dp, clkit_plan *plan)
{
    int warps = p->d == 256 ? 2 : 4, block_n = p->d == 64 ? 32 : 16;
    dp->rows = DEC_MMA_ROWS;
    dp->per_cu = 2;
    plan->path = CLKIT_PATH_NV_MMA;
    plan->file = "nv/attention_mma.cl";
    snprintf(plan->name, sizeof plan->name, "attn_decode_mma");
    snprintf(plan->options, sizeof plan->options, "%s -D ATTN_DECODE -D HEAD_DIM=%d -D ROWS=%d -D WARPS=%d "
             "-D BLOCK_M=%d -D BLOCK_N=%d %s", clkit_dtype_macro(p->dtype), (int)p->d, DEC_MMA_ROWS, warps,
             16 * warps, block_n, p->d == 256 ? "-D HELD_LOCAL -D DEC_STAGES=3" : "-D DEC_REGS");
    plan->local[0] = (size_t)(32 * warps);
}

static clkit_status plan_decode(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    dec_problem *dp = arg;
    const call *c = dp->c;
    const problem *p = &c->p;
    plan->family = CLKIT_FAMILY_ATTENTION;
    plan->dims = 2;
    plan->local[1] = 1;
    if (decode_mma_suits(ctx, c) && (!wg_limit || wg_limit >= DEC_WG)) {
        plan_decode_mma(p, dp, plan);
        return CLKIT_OK;
    }
    if (wg_limit && wg_limit < DEC_WG)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "attention: the decoding kernel runs fewer than %d "
                          "work-items per group here", DEC_WG);
    int64_t r_all = p->hq / p->hkv * p->lq;
    dp->rows = 1;
    while (dp->rows < r_all && dp->rows < DEC_ROWS) dp->rows *= 2;
    /* f32 on an H200, B 8, Hkv 8, Lk 32768: 0.567 ms planned for eight work-groups a compute
       unit, 0.646 for four; two a core on a CPU. */
    dp->per_cu = ctx->props.is_gpu ? 8 : 2;
    int dense = c->k->strides[3] == 1 && c->v->strides[3] == 1;
    int aligned = mma_view(c->k) && mma_view(c->v);
    plan->file = "attention.cl";
    snprintf(plan->name, sizeof plan->name, "attn_decode");
    snprintf(plan->options, sizeof plan->options, "%s -D ATTN_DECODE -D HEAD_DIM=%d -D ROWS=%d -D DEC_LOCAL=%llu%s%s",
             clkit_dtype_macro(p->dtype), (int)p->d, dp->rows, (unsigned long long)ctx->props.local_mem,
             dense ? " -D DENSE_D" : "", aligned ? " -D ALIGNED_KV" : "");
    plan->local[0] = DEC_WG;
    return CLKIT_OK;
}

/* Flash-decoding: every kv head's query rows (in blocks of the plan's rows) times splits of
   the keys write partial results to scratch; the last split of each row block to finish
   merges them into o and lse (a counter a row block). */
static clkit_status decode(clkit_context *ctx, const call *c)
{
    const problem *p = &c->p;
    dec_problem dp = {c, 0, 0};
    clkit_plan pl;
    cl_kernel k;
    clkit_status s = clkit_plan_kernel(ctx, plan_decode, &dp, &pl, &k);
    if (s) return s;
    int64_t r_all = p->hq / p->hkv * p->lq;
    size_t groups = (size_t)(p->b * p->hkv * ((r_all + dp.rows - 1) / dp.rows));
    cl_int chunk = decode_chunk(ctx, p, groups, dp.per_cu), splits = (cl_int)((p->lk + chunk - 1) / chunk);
    size_t bytes = (size_t)(p->b * p->hkv * r_all) * (size_t)splits * (size_t)(p->d + 2) * sizeof(float);
    cl_mem tickets, part = NULL;
    if ((s = clkit_tickets(ctx, groups, &tickets)) || (s = clkit_scratch_alloc(ctx, bytes, &part))) return s;
    kview vq = kview_of(c->q), vk = kview_of(c->k), vv = kview_of(c->v), vo = kview_of(c->o);
    kview vl = kview_of(c->lse);
    cl_int hq = (cl_int)p->hq, group = (cl_int)(p->hq / p->hkv), lq = (cl_int)p->lq, lk = (cl_int)p->lk;
    cl_int diag = diag_of(p);
    float scale2 = scale_log2(p);
    clkit_args a = clkit_args_of(k);
    arg_view(&a, &vq), arg_view(&a, &vk), arg_view(&a, &vv), arg_view(&a, &vo), arg_view(&a, &vl);
    clkit_arg(&a, sizeof part, &part), clkit_arg(&a, sizeof tickets, &tickets);
    clkit_arg(&a, 4, &hq), clkit_arg(&a, 4, &group), clkit_arg(&a, 4, &lq), clkit_arg(&a, 4, &lk);
    clkit_arg(&a, 4, &diag), clkit_arg(&a, 4, &scale2), clkit_arg(&a, 4, &chunk);
    pl.global[0] = groups * pl.local[0], pl.global[1] = (size_t)splits;
    s = clkit_plan_run(ctx, &pl, &a);
    clkit_scratch_release(ctx, part, bytes);
    return s;
}

/* The tensor maps of a TMA pass (plan pl's program): q, k and v, and for the backward dout
   (NULL in the forward, whose kernel takes q there and builds three), built into the
   context's map slot by the program's attn_tma_maps, one work-item a map, before the pass's
   kernels run. */
static clkit_status tma_maps(clkit_context *ctx, const clkit_plan *pl, const problem *p, const kview *vq,
                             const kview *vk, const kview *vv, const kview *vdout, cl_mem *maps)
{
    cl_kernel k;
    clkit_status s = clkit_get_kernel(ctx, pl->file, "attn_tma_maps", pl->options, &k);
    if (s || (s = clkit_tma_maps(ctx, maps))) return s;
    cl_int b = (cl_int)p->b, hq = (cl_int)p->hq, hkv = (cl_int)p->hkv, lq = (cl_int)p->lq, lk = (cl_int)p->lk;
    clkit_args a = clkit_args_of(k);
    arg_view(&a, vq), arg_view(&a, vk), arg_view(&a, vv), arg_view(&a, vdout ? vdout : vq), clkit_arg_mem(&a, *maps);
    clkit_arg(&a, 4, &b), clkit_arg(&a, 4, &hq), clkit_arg(&a, 4, &hkv), clkit_arg(&a, 4, &lq), clkit_arg(&a, 4, &lk);
    size_t n = vdout ? 4 : 3;
    return clkit_run(ctx, &a, 1, &n, &n);
}

/* The wgmma kernels' sections (cl/attention.h's sectioned_block): heads of B x `heads` whose
   streamed rows (two tensors of `rows` rows, `share` heads reading each) fill half the
   device's last-level cache, at least one; every head (the 2-D grids' order) where the cache
   size is unknown, and with causal, whose heaviest blocks must come first across all heads:
   sections there ran 2-5 % slower on an H200, where non-causal L 1024 gained 3-10 %
   (docs/attention.md). */
static cl_int cache_section(const clkit_context *ctx, const problem *p, int64_t heads, int64_t rows,
                            int64_t share)
{
    int64_t all = p->b * heads;
    uint64_t per_head = 2 * (uint64_t)rows * (uint64_t)p->d * clkit_dtype_size(p->dtype) / (uint64_t)share;
    if (!ctx->cache_bytes || !per_head || p->causal != CLKIT_CAUSAL_NONE) return (cl_int)all;
    int64_t n = (int64_t)(ctx->cache_bytes / 2 / per_head);
    return (cl_int)(n < 1 ? 1 : n > all ? all : n);
}

/* Whether plan pl's kernel is a wgmma kernel (loaded by cp.async or by the TMA). */
static bool on_wgmma(const clkit_plan *pl)
{
    return pl->path == CLKIT_PATH_NV_WGMMA || pl->path == CLKIT_PATH_NV_TMA;
}

/* A wgmma kernel's (plan pl's) sectioned grid: its arguments B and section, and global made
   one-dimensional; the other kernels keep their 2-D grids. */
static void sectioned_grid(const clkit_plan *pl, clkit_args *a, const problem *p, cl_int section,
                           size_t global[2])
{
    if (!on_wgmma(pl)) return;
    cl_int b = (cl_int)p->b;
    clkit_arg(a, 4, &b), clkit_arg(a, 4, &section);
    global[0] *= global[1], global[1] = 1;
}

/* Whether an output's rows are whole 16-byte chunks, each on a 16-byte boundary (contiguous
   columns, offset and strides multiples of 8 elements): the wgmma kernels then store them
   through local memory, 16 bytes a work-item (cl/nv/attention_mma.cl's store_rows). */
static cl_int chunked_rows(const kview *vo)
{
    cl_long lanes = vo->off | vo->st.s[0] | vo->st.s[1] | vo->st.s[2];
    return vo->st.s[3] == 1 && lanes % 8 == 0;
}

/* The forward of a validated, non-empty call (force: the tuner's tiles, else NULL). */
static clkit_status forward(clkit_context *ctx, const call *c, const tiles *force)
{
    problem p = c->p;
    p.force = force;
    if (decode_suits(&p)) return decode(ctx, c);
    const clkit_tensor *ins[3] = {c->q, c->k, c->v};
    cl_kernel kern;
    blocking t;
    clkit_plan pl;
    clkit_status s;
    if ((s = choose_kernels(ctx, &p, 0, ins, 3, fwd_kinds, fwd_names_mma, fwd_names, 1, &kern, &t, &pl, NULL)))
        return s;
    kview vq = kview_of(c->q), vk = kview_of(c->k), vv = kview_of(c->v), vo = kview_of(c->o);
    kview vl = kview_of(c->lse);
    cl_int hq = (cl_int)p.hq, group = (cl_int)(p.hq / p.hkv), lq = (cl_int)p.lq, lk = (cl_int)p.lk;
    cl_int diag = diag_of(&p);
    float scale2 = scale_log2(&p);
    cl_mem maps = NULL;
    if (pl.path == CLKIT_PATH_NV_TMA && (s = tma_maps(ctx, &pl, &p, &vq, &vk, &vv, NULL, &maps))) return s;
    clkit_args a = clkit_args_of(kern);
    arg_view(&a, &vq), arg_view(&a, &vk), arg_view(&a, &vv), arg_view(&a, &vo), arg_view(&a, &vl);
    clkit_arg(&a, 4, &hq), clkit_arg(&a, 4, &group), clkit_arg(&a, 4, &lq), clkit_arg(&a, 4, &lk), clkit_arg(&a, 4, &diag);
    clkit_arg(&a, 4, &scale2);
    /* Heads across, blocks down (cl/attention.h's grid_block); the wgmma kernel's one-dimensional
       grid in sections of heads instead. */
    size_t global[2] = {(size_t)(p.b * p.hq) * t.wg, groups_of(p.lq, t.bm)}, local[2] = {t.wg, 1};
    sectioned_grid(&pl, &a, &p, cache_section(ctx, &p, p.hq, p.lk, p.hq / p.hkv), global);
    if (on_wgmma(&pl)) {
        cl_int chunks = chunked_rows(&vo);
        clkit_arg(&a, 4, &chunks);
    }
    if (maps) clkit_arg_mem(&a, maps);
    return clkit_run(ctx, &a, 2, global, local);
}

/* ---- backward ---- */

typedef struct bwd_views {
    kview q, k, v, o, dout, lse, dq, dk, dv, delta;
    cl_mem maps;     /* the TMA's tensor maps (attn_tma_maps), NULL without */
    cl_mem ds_tiles; /* dS through memory (ds_suits), NULL without */
} bwd_views;

static clkit_status launch_delta(clkit_context *ctx, cl_kernel kern, const problem *p,
                                 const bwd_views *bv)
{
    cl_int hq = (cl_int)p->hq, lq = (cl_int)p->lq;
    clkit_args a = clkit_args_of(kern);
    arg_view(&a, &bv->o), arg_view(&a, &bv->dout);
    clkit_arg(&a, sizeof bv->delta.buf, &bv->delta.buf), clkit_arg(&a, 4, &hq), clkit_arg(&a, 4, &lq);
    /* DELTA_LANES work-items a row, DELTA_WG at most a group (cl/attention.h). */
    size_t lanes = 8, wg = clkit_kernel_wg_limit(ctx, kern);
    wg = (wg < 256 ? wg : 256) / lanes * lanes;
    if (!wg) return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "attention: delta kernel runs fewer "
                               "than %zu work-items per group", lanes);
    size_t rows = wg / lanes;
    size_t global[2] = {groups_of(p->lq, (int)rows) * wg, (size_t)(p->b * p->hq)};
    size_t local[2] = {wg, 1};
    return clkit_run(ctx, &a, 2, global, local);
}

/* dq (dkdv 0) or dk and dv (dkdv 1): the arguments the two kernels share, then the launch, for
   `count` kv heads (across batches) from g0: all of them but with dS through memory. */
static clkit_status launch_grad(clkit_context *ctx, cl_kernel kern, const clkit_plan *pl, const problem *p,
                                const blocking *t, const bwd_views *bv, int dkdv, cl_int g0, cl_int count)
{
    cl_int hq = (cl_int)p->hq, group = (cl_int)(p->hq / p->hkv), lq = (cl_int)p->lq;
    cl_int lk = (cl_int)p->lk, diag = diag_of(p);
    /* No query heads (Hq = 0 < Hkv): the kernels divide by the group, so each kv head reads
       as serving one head of no queries, whose dK and dV are the zeros that Lq = 0 gives. */
    if (group == 0) hq = (cl_int)p->hkv, group = 1, lq = 0;
    float scale2 = scale_log2(p), scale = p->scale;
    clkit_args a = clkit_args_of(kern);
    arg_view(&a, &bv->q), arg_view(&a, &bv->k), arg_view(&a, &bv->v), arg_view(&a, &bv->dout);
    clkit_arg(&a, sizeof bv->lse.buf, &bv->lse.buf), clkit_arg(&a, 8, &bv->lse.off), clkit_arg(&a, sizeof bv->lse.st, &bv->lse.st);
    clkit_arg(&a, sizeof bv->delta.buf, &bv->delta.buf);
    if (dkdv) arg_view(&a, &bv->dk), arg_view(&a, &bv->dv);
    else arg_view(&a, &bv->dq);
    clkit_arg(&a, 4, &hq), clkit_arg(&a, 4, &group), clkit_arg(&a, 4, &lq), clkit_arg(&a, 4, &lk), clkit_arg(&a, 4, &diag);
    clkit_arg(&a, 4, &scale2), clkit_arg(&a, 4, &scale);
    size_t global[2] = {(size_t)count * (size_t)(dkdv ? 1 : group) * t->wg, groups_of(dkdv ? p->lk : p->lq, t->bm)};
    size_t local[2] = {t->wg, 1};
    /* dK/dV streams the q and dO rows of each kv head's group, dQ the K and V rows its query
       head shares with the group. */
    sectioned_grid(pl, &a, p, dkdv ? cache_section(ctx, p, p->hkv, p->lq * group, 1)
                                   : cache_section(ctx, p, p->hq, p->lk, group), global);
    if (on_wgmma(pl)) {
        cl_int chunks = dkdv ? chunked_rows(&bv->dk) && chunked_rows(&bv->dv) : chunked_rows(&bv->dq);
        clkit_arg(&a, 4, &chunks);
        if (dkdv) global[1] = (size_t)groups_of(p->d, WGMMA_BWD_COLS); /* dK's and dV's column blocks */
    }
    if (pl->path == CLKIT_PATH_NV_TMA) clkit_arg_mem(&a, bv->maps);
    if (bv->ds_tiles) clkit_arg_mem(&a, bv->ds_tiles), clkit_arg(&a, 4, &g0), clkit_arg(&a, 4, &count);
    return clkit_run(ctx, &a, 2, global, local);
}

static clkit_status check_backward(clkit_context *ctx, const call *c, problem *p)
{
    clkit_status s;
    const clkit_tensor *q = c->q, *k = c->k;
    if ((s = check_inputs(ctx, q, k, c->v, c->opt, p)) || (s = check_like(ctx, c->o, "o", q, "q")) ||
        (s = check_like(ctx, c->dout, "dout", q, "q")) || (s = check_lse(ctx, c->lse, p)) ||
        (s = check_like(ctx, c->dq, "dq", q, "q")) || (s = check_like(ctx, c->dk, "dk", k, "k")) ||
        (s = check_like(ctx, c->dv, "dv", k, "k")))
        return s;
    const clkit_tensor *outs[3] = {c->dq, c->dk, c->dv}, *ins[6] = {q, k, c->v, c->o, c->dout, c->lse};
    const char *out_names[3] = {"dq", "dk", "dv"};
    const char *in_names[6] = {"q", "k", "v", "o", "dout", "lse"};
    return check_outputs(ctx, 3, outs, out_names, 6, ins, in_names);
}

static int backward_empty(const problem *p)
{
    return p->b * p->hq * p->lq == 0 && p->b * p->hkv * p->lk == 0;
}

/* The dS tiles' scratch where the chosen kernels pass dS through memory (*ds): as many kv heads
   at a time (across batches) as the cap holds, *per of them (all without the tiles). Where the
   device has no room for it, *ds turns 0: the caller plans again, dS recomputed. */
static void ds_scratch(clkit_context *ctx, const problem *p, int *ds, int64_t *per, size_t *bytes, cl_mem *buf)
{
    int64_t all = p->b * p->hkv, fit = *ds ? (int64_t)(ds_cap(ctx) / ds_head_bytes(p)) : all;
    *per = fit < all ? fit : all;
    *bytes = *ds ? (size_t)((uint64_t)*per * ds_head_bytes(p)) : 0;
    if (!*ds || clkit_scratch_alloc(ctx, *bytes, buf) == CLKIT_OK) return;
    clkit_log(CLKIT_LOG_INFO, "attention: no room for %zu bytes of dS tiles; the dQ kernel recomputes dS", *bytes);
    clkit_clear_error(ctx);
    *ds = 0, *per = all, *bytes = 0;
}

/* delta, then dK/dV and dQ for `per` kv heads at a time. */
static clkit_status launch_backward(clkit_context *ctx, const problem *p, const cl_kernel *kern,
                                    const blocking *t, const clkit_plan *pl, const bwd_views *bv, int64_t per)
{
    int has_q = p->b * p->hq * p->lq > 0, has_kv = p->b * p->hkv * p->lk > 0;
    int64_t all = p->b * p->hkv, g0 = 0;
    clkit_status s = has_q ? launch_delta(ctx, kern[0], p, bv) : CLKIT_OK;
    do {
        cl_int count = (cl_int)(all - g0 < per ? all - g0 : per);
        if (!s && has_kv) s = launch_grad(ctx, kern[1], &pl[1], p, &t[1], bv, 1, (cl_int)g0, count);
        if (!s && has_q) s = launch_grad(ctx, kern[2], &pl[2], p, &t[2], bv, 0, (cl_int)g0, count);
    } while (!s && (g0 += per) < all);
    return s;
}

/* The backward of a validated call with queries or keys (force as for forward()). */
static clkit_status backward(clkit_context *ctx, const call *c, const tiles *force)
{
    problem p = c->p;
    p.force = force;
    const clkit_tensor *ins[4] = {c->q, c->k, c->v, c->dout};
    cl_kernel kern[3];
    blocking t[3];
    clkit_plan pl[3];
    clkit_status s;
    int ds = 0;
    if ((s = choose_kernels(ctx, &p, 1, ins, 4, bwd_kinds, bwd_names_mma, bwd_names, 3, kern, t, pl, &ds)))
        return s;
    int64_t per;
    size_t tile_bytes, delta_bytes = (size_t)(p.b * p.hq * p.lq) * sizeof(float);
    cl_mem tiles = NULL;
    int wanted = ds;
    ds_scratch(ctx, &p, &ds, &per, &tile_bytes, &tiles);
    if (wanted && !ds &&
        (s = choose_kernels(ctx, &p, 1, ins, 4, bwd_kinds, bwd_names_mma, bwd_names, 3, kern, t, pl, NULL)))
        return s;
    bwd_views bv = {kview_of(c->q), kview_of(c->k), kview_of(c->v), kview_of(c->o),
                    kview_of(c->dout), kview_of(c->lse), kview_of(c->dq), kview_of(c->dk),
                    kview_of(c->dv), {0}, NULL, tiles};
    int tma = pl[1].path == CLKIT_PATH_NV_TMA ? 1 : pl[2].path == CLKIT_PATH_NV_TMA ? 2 : 0;
    if (tma) s = tma_maps(ctx, &pl[tma], &p, &bv.q, &bv.k, &bv.v, &bv.dout, &bv.maps);
    if (!s) s = clkit_scratch_alloc(ctx, delta_bytes, &bv.delta.buf);
    if (!s) s = launch_backward(ctx, &p, kern, t, pl, &bv, per);
    clkit_scratch_release(ctx, bv.delta.buf, delta_bytes);
    clkit_scratch_release(ctx, tiles, tile_bytes);
    return s;
}

/* ---- entry points ---- */

/* Validation into c->p (then nothing to do for an empty problem), then the tuner, or the
   pass (tuned first on a miss with CLKIT_AUTOTUNE=1). The tuner's candidates run forward() and
   backward() on the same validated call, with their tiles forced. */
static clkit_status entry(clkit_context *ctx, call *c, int bwd, const clkit_tune_options *topt,
                          int tuning)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    problem *p = &c->p;
    clkit_status s = bwd ? check_backward(ctx, c, p) : check_forward(ctx, c, p);
    if (s || (bwd ? backward_empty(p) : p->b * p->hq * p->lq == 0)) return s;
    if (tuning) return tune(ctx, bwd, c, topt);
    if ((s = autotune_first(ctx, bwd, c))) return s;
    return bwd ? backward(ctx, c, NULL) : forward(ctx, c, NULL);
}

clkit_status clkit_attention_forward(clkit_context *ctx, const clkit_tensor *q,
                                     const clkit_tensor *k, const clkit_tensor *v,
                                     const clkit_attention_options *opt, const clkit_tensor *o,
                                     const clkit_tensor *lse)
{
    call c = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .opt = opt};
    return entry(ctx, &c, 0, NULL, 0);
}

clkit_status clkit_tune_attention_forward(clkit_context *ctx, const clkit_tensor *q,
                                          const clkit_tensor *k, const clkit_tensor *v,
                                          const clkit_attention_options *opt,
                                          const clkit_tensor *o, const clkit_tensor *lse,
                                          const clkit_tune_options *topt)
{
    call c = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .opt = opt};
    return entry(ctx, &c, 0, topt, 1);
}

clkit_status clkit_attention_backward(clkit_context *ctx, const clkit_tensor *q,
                                      const clkit_tensor *k, const clkit_tensor *v,
                                      const clkit_tensor *o, const clkit_tensor *dout,
                                      const clkit_tensor *lse, const clkit_attention_options *opt,
                                      const clkit_tensor *dq, const clkit_tensor *dk,
                                      const clkit_tensor *dv)
{
    call c = {.q = q, .k = k, .v = v, .o = o, .dout = dout, .lse = lse,
              .dq = dq, .dk = dk, .dv = dv, .opt = opt};
    return entry(ctx, &c, 1, NULL, 0);
}

clkit_status clkit_tune_attention_backward(clkit_context *ctx, const clkit_tensor *q,
                                           const clkit_tensor *k, const clkit_tensor *v,
                                           const clkit_tensor *o, const clkit_tensor *dout,
                                           const clkit_tensor *lse,
                                           const clkit_attention_options *opt,
                                           const clkit_tensor *dq, const clkit_tensor *dk,
                                           const clkit_tensor *dv, const clkit_tune_options *topt)
{
    call c = {.q = q, .k = k, .v = v, .o = o, .dout = dout, .lse = lse,
              .dq = dq, .dk = dk, .dv = dv, .opt = opt};
    return entry(ctx, &c, 1, topt, 1);
}
