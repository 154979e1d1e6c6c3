/* clkit_matmul: validation, the choice of kernel and configuration (override, tuned cache,
   heuristic from device properties), and the launches of clkit's kernels or CLBlast. */
#include "../tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CLKIT_HAVE_CLBLAST
#include <clblast_c.h>
#endif

enum { KERNEL_NAIVE, KERNEL_TILED, KERNEL_BLOCKED, KERNEL_SKINNY, KERNEL_MMA, KERNEL_MATRIX };

typedef struct problem {
    const clkit_tensor *a, *b, *c;
    int64_t m, n, k, batch;
    /* strides in elements: [batch, row, col]; 0 for a size-1 or broadcast dimension */
    int64_t as[3], bs[3], cs[3];
    int64_t a_off, b_off, c_off; /* element offsets */
    clkit_matmul_options opt;
    int mma; /* the tensor-core kernel can take these operands on this device */
    int wgmma; /* ... and may run them on Hopper's wgmma (16-bit operands, sm_90) */
    int tf32; /* f32 operands the caller lets the tensor cores round to TF32 */
    int exact; /* f32 operands the caller keeps off the tensor cores */
    int tma; /* a wgmma tile loads both operands by the TMA */
    clkit_path amd; /* the AMD matrix cores these operands may take (MFMA, WMMA); NONE: none */
    int wave;       /* ... at this wave width */
    int emulated;   /* ... through software instructions (CLKIT_AMD_EMULATE) */
    clkit_family fam; /* whose fast paths these are: matmul's, or the fused epilogues' op */
} problem;

clkit_matmul_options clkit_matmul_defaults(void)
{
    clkit_matmul_options o;
    memset(&o, 0, sizeof o);
    o.alpha = 1.0f;
    o.leaky_slope = 0.01f;
    return o;
}

/* ---- validation ---- */

/* Batch, rows, cols and strides of a 2-D or 3-D operand. */
static void dims(const clkit_tensor *t, int64_t *batch, int64_t *rows, int64_t *cols, int64_t *s)
{
    int d = t->ndim - 2;
    *batch = d ? t->shape[0] : 1;
    *rows = t->shape[d];
    *cols = t->shape[d + 1];
    s[0] = d && t->shape[0] > 1 ? t->strides[0] : 0;
    s[1] = *rows > 1 ? t->strides[d] : 0;
    s[2] = *cols > 1 ? t->strides[d + 1] : 0;
}

static clkit_status check_dtypes(clkit_context *ctx, const problem *p)
{
    clkit_dtype a = p->a->dtype, b = p->b->dtype, c = p->c->dtype;
    if (a != b || (a == CLKIT_F32 && c != CLKIT_F32))
        return clkit_fail(ctx, CLKIT_ERR_DTYPE,
                          "A (%s), B (%s), C (%s): A and B must share a dtype, and f32 inputs "
                          "give an f32 C", clkit_dtype_name(a), clkit_dtype_name(b), clkit_dtype_name(c));
    return CLKIT_OK;
}

static clkit_status check_shapes(clkit_context *ctx, problem *p)
{
    int64_t ab, ar, ac, bb, br, bc, cb, cr, cc;
    dims(p->a, &ab, &ar, &ac, p->as);
    dims(p->b, &bb, &br, &bc, p->bs);
    dims(p->c, &cb, &cr, &cc, p->cs);
    if (ac != br)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "A is %lld x %lld but B is %lld x %lld: K differs",
                          (long long)ar, (long long)ac, (long long)br, (long long)bc);
    if (cr != ar || cc != bc)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "C is %lld x %lld, A @ B is %lld x %lld",
                          (long long)cr, (long long)cc, (long long)ar, (long long)bc);
    if ((ab != 1 && ab != cb) || (bb != 1 && bb != cb) || (p->c->ndim == 2 && cb != 1))
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "batch sizes A %lld, B %lld, C %lld do not broadcast",
                          (long long)ab, (long long)bb, (long long)cb);
    if (ar > INT32_MAX || bc > INT32_MAX || ac > INT32_MAX)
        return clkit_fail(ctx, CLKIT_ERR_OVERFLOW, "M, N and K must each be below 2^31");
    p->m = ar, p->n = bc, p->k = ac, p->batch = cb;
    p->a_off = (int64_t)(p->a->offset / clkit_dtype_size(p->a->dtype));
    p->b_off = (int64_t)(p->b->offset / clkit_dtype_size(p->b->dtype));
    p->c_off = (int64_t)(p->c->offset / clkit_dtype_size(p->c->dtype));
    return CLKIT_OK;
}

/* cp.async moves 16-byte chunks (`chunk` elements) along an operand's unit-stride dimension:
   that dimension must be contiguous (or of size 1), and every other stride and the offset
   must keep chunks 16-byte aligned. */
static int mma_operand(int64_t unit_stride, int64_t unit_size, int64_t other, int64_t batch,
                       int64_t off, int64_t chunk)
{
    return (unit_stride == 1 || unit_size == 1) && other % chunk == 0 && batch % chunk == 0 &&
           off % chunk == 0;
}

/* Whether A (which 0) or B (1) suits cp.async's chunks of `chunk` elements. */
static int mma_operand_fits(const problem *p, int which, int64_t chunk)
{
    if (which == 0)
        return p->as[1] != 1 ? mma_operand(p->as[2], p->k, p->as[1], p->as[0], p->a_off, chunk)
                             : mma_operand(1, p->m, p->as[2], p->as[0], p->a_off, chunk);
    return p->bs[1] != 1 ? mma_operand(p->bs[2], p->n, p->bs[1], p->bs[0], p->b_off, chunk)
                         : mma_operand(1, p->k, p->bs[2], p->bs[0], p->b_off, chunk);
}

static int64_t mma_chunk(const problem *p)
{
    return 16 / (int64_t)clkit_dtype_size(p->a->dtype);
}

static int mma_operands(const clkit_context *ctx, const problem *p)
{
    if (!clkit_path_allowed(ctx, CLKIT_PATH_NV_MMA, p->fam) || p->exact) return 0;
    return mma_operand_fits(p, 0, mma_chunk(p)) && mma_operand_fits(p, 1, mma_chunk(p));
}

/* Whether operands the tensor cores take (mma) may run on Hopper's wgmma: 16-bit, where the
   wgmma path is allowed. */
static int wgmma_allowed(const clkit_context *ctx, const problem *p)
{
    return p->mma && clkit_path_allowed(ctx, CLKIT_PATH_NV_WGMMA, p->fam) && p->a->dtype != CLKIT_F32;
}

/* The AMD matrix cores for these operands: MFMA takes f16, bf16 and f32 (exact f32 products,
   but summed inside the instruction: exact_f32 keeps its promise of one FMA a product on the
   portable kernels), WMMA the 16-bit dtypes. Their loads take any strides. */
static clkit_path amd_operands(const clkit_context *ctx, const problem *p)
{
    if (p->exact) return CLKIT_PATH_NONE;
    if (clkit_path_allowed(ctx, CLKIT_PATH_AMD_MFMA, p->fam)) return CLKIT_PATH_AMD_MFMA;
    if (clkit_path_allowed(ctx, CLKIT_PATH_AMD_WMMA, p->fam) && p->a->dtype != CLKIT_F32)
        return CLKIT_PATH_AMD_WMMA;
    return CLKIT_PATH_NONE;
}

/* The fast paths these operands may take now (again after a path failed to build). */
static void choose_paths(const clkit_context *ctx, problem *p)
{
    p->mma = mma_operands(ctx, p);
    p->wgmma = wgmma_allowed(ctx, p);
    p->amd = amd_operands(ctx, p);
    p->wave = (int)clkit_amd_wave(ctx);
    p->emulated = ctx->amd_emulated;
}

static clkit_status validate(clkit_context *ctx, const clkit_tensor *a, const clkit_tensor *b,
                             const clkit_tensor *c, const clkit_matmul_options *opt,
                             clkit_family fam, problem *p)
{
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, a, "A", 2, 3, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, b, "B", 2, 3, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, c, "C", 2, 3, CLKIT_DT_FLOAT)))
        return s;
    memset(p, 0, sizeof *p);
    p->a = a, p->b = b, p->c = c;
    p->fam = fam;
    p->opt = opt ? *opt : clkit_matmul_defaults();
    if ((s = check_dtypes(ctx, p)) || (s = check_shapes(ctx, p)) ||
        (s = clkit_check_output(ctx, c, "C")) ||
        (s = clkit_check_disjoint(ctx, c, "C", a, "A", false)) ||
        (s = clkit_check_disjoint(ctx, c, "C", b, "B", false)))
        return s;
    const clkit_matmul_options *o = &p->opt;
    if (!isfinite(o->alpha) || !isfinite(o->beta) || !isfinite(o->leaky_slope))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "alpha, beta and leaky_slope must be finite");
    if ((unsigned)o->activation > CLKIT_ACT_LEAKY_RELU || (unsigned)o->provider > CLKIT_PROVIDER_CLBLAST)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "unknown activation %d or provider %d",
                          (int)o->activation, (int)o->provider);
    if (o->allow_tf32 && o->exact_f32)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "allow_tf32 and exact_f32 exclude each other");
    p->tf32 = a->dtype == CLKIT_F32 && o->allow_tf32;
    p->exact = a->dtype == CLKIT_F32 && o->exact_f32;
    choose_paths(ctx, p);
    return CLKIT_OK;
}

/* ---- CLBlast's forms ---- */

/* CLBlast takes matrices with one unit stride and a leading dimension at least the extent of
   the other: for the layout of C, an operand (rows x cols) is either stored in that layout or
   as its transpose. Zero, negative and overlapping strides have no such form. An extent of 1
   makes its stride irrelevant. *trans: stored as the transpose. */
static int blas_operand(int64_t rs, int64_t cs, int64_t rows, int64_t cols, int row_major,
                        int *trans, size_t *ld)
{
    int64_t inner = row_major ? cs : rs, outer = row_major ? rs : cs;
    int64_t span = row_major ? cols : rows, other = row_major ? rows : cols;
    if ((inner == 1 || span == 1) && (other == 1 || outer >= span)) {
        *trans = 0;
        *ld = (size_t)(other == 1 ? span : outer);
    } else if ((outer == 1 || other == 1) && (span == 1 || inner >= other)) {
        *trans = 1;
        *ld = (size_t)(span == 1 ? other : inner);
    } else {
        return 0;
    }
    return 1;
}

typedef struct blas_form {
    int row_major, ta, tb;
    size_t lda, ldb, ldc;
} blas_form;

/* Whether CLBlast's GEMM computes this problem (f32, no activation, K > 0, every operand in
   a BLAS layout, batch strides not negative), and in which form. A problem it cannot express
   runs on clkit's kernels instead, whatever the provider asked for or tuned. */
static int blas_expressible(const problem *pr, blas_form *f)
{
    if (pr->a->dtype != CLKIT_F32 || pr->opt.activation != CLKIT_ACT_NONE || pr->k == 0 ||
        pr->as[0] < 0 || pr->bs[0] < 0 || pr->cs[0] < 0)
        return 0;
    for (int row_major = 1; row_major >= 0; row_major--) {
        int tc;
        if (blas_operand(pr->cs[1], pr->cs[2], pr->m, pr->n, row_major, &tc, &f->ldc) && !tc &&
            blas_operand(pr->as[1], pr->as[2], pr->m, pr->k, row_major, &f->ta, &f->lda) &&
            blas_operand(pr->bs[1], pr->bs[2], pr->k, pr->n, row_major, &f->tb, &f->ldb)) {
            f->row_major = row_major;
            return 1;
        }
    }
    return 0;
}

/* ---- configurations ---- */

static int cfg(const clkit_config *c, const char *name) { return clkit_config_get(c, name, 0); }

static uint64_t blocked_local_bytes(const clkit_config *c)
{
    return 2ull * (uint64_t)cfg(c, "BLOCK_K") * (uint64_t)(cfg(c, "BLOCK_M") + cfg(c, "BLOCK_N") + 8) * 4;
}

static int pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* Local memory of the tensor-core kernel's ring: STAGES slices of both operands, and for wgmma
   1 KiB more, over which the kernel aligns the ring to 1024 bytes. */
static uint64_t ring_bytes(int bm, int bn, int bk, int stages, int elem, int wgmma)
{
    return (uint64_t)stages * (uint64_t)(bm + bn) * (uint64_t)bk * (uint64_t)elem + (wgmma ? 1024 : 0);
}

/* The tensor-core kernel's tile for these operands on this device: operands it can take,
   BLOCK_K a whole number of mma steps (k 16 for 16-bit dtypes, 8 for TF32), each warp's piece
   a whole number of 16 x 16 fragment pairs with at most 128 f32 accumulators a lane (more
   spills), the copies spread evenly over the work-group, the STAGES-deep ring (a static
   array) within the local memory a kernel may declare. */
#define WGMMA_MAX_STAGES 12
static int mma_legal(const struct clkit_device_props *p, const problem *pr, const clkit_config *c)
{
    int bm = cfg(c, "BLOCK_M"), bn = cfg(c, "BLOCK_N"), bk = cfg(c, "BLOCK_K");
    int wm = cfg(c, "WARPS_M"), wn = cfg(c, "WARPS_N"), stages = cfg(c, "STAGES");
    int elem = (int)clkit_dtype_size(pr->a->dtype), chunk = 16 / elem;
    if (!pr->mma || !pow2(bm) || !pow2(bn) || !pow2(wm) || !pow2(wn) || bk < 32 / elem ||
        bk > 64 || !pow2(bk) || stages < 2 || stages > (cfg(c, "WGMMA") ? WGMMA_MAX_STAGES : 6) || cfg(c, "GROUP_M") < 1)
        return 0;
    int warp_m = bm / wm, warp_n = bn / wn, wg = wm * wn * 32;
    uint64_t local = ring_bytes(bm, bn, bk, stages, elem, cfg(c, "WGMMA"));
    /* wgmma: warpgroups of 64 rows, one wgmma 64 x BLOCK_N a k step, 128-byte rows (BLOCK_K 64) */
    if (cfg(c, "WGMMA") && (!pr->wgmma || bk != 64 || (bn != 64 && bn != 128 && bn != 256) ||
                            bm % 64 || wn != 1 || wm != bm / 16 || stages < 3))
        return 0;
    return warp_m >= 16 && warp_n >= 16 && (warp_m / 16) * (warp_n / 8) * 4 <= 128 && cfg(c, "splits") >= 0 &&
           (size_t)wg <= p->max_work_group && (bm * bk / chunk) % wg == 0 &&
           (bn * bk / chunk) % wg == 0 && local <= p->local_mem_static;
}

/* The AMD matrix instruction's tile (32 x 32 MFMA, 16 x 16 WMMA) and its k: 8 for 16-bit
   MFMA, 2 for f32 MFMA, 16 for WMMA. */
static int matrix_insn(const problem *pr) { return pr->amd == CLKIT_PATH_AMD_MFMA ? 32 : 16; }

static int matrix_k(const problem *pr)
{
    if (pr->amd == CLKIT_PATH_AMD_WMMA) return 16;
    return pr->a->dtype == CLKIT_F32 ? 2 : 8;
}

/* Local memory of cl/amd/matmul_matrix.cl: two stages of both operands in padded k-lines, and
   under emulation each wave's operand registers. AMD gives a work-group 64 KiB. */
static uint64_t matrix_local_bytes(const problem *pr, const clkit_config *c)
{
    int elem = (int)clkit_dtype_size(pr->a->dtype), pad = elem == 4 ? 1 : 4;
    int waves = cfg(c, "WAVES_M") * cfg(c, "WAVES_N");
    uint64_t stages = 2ull * (uint64_t)(cfg(c, "BLOCK_M") + cfg(c, "BLOCK_N")) * (uint64_t)(cfg(c, "BLOCK_K") + pad) * (uint64_t)elem;
    uint64_t scratch = pr->emulated ? (uint64_t)waves * 2u * (uint64_t)(matrix_insn(pr) * matrix_k(pr)) * 4u : 0;
    return stages + scratch;
}

/* The AMD matrix-core kernel's tile for these operands: each wave's piece a whole number of
   instruction tiles, BLOCK_K a whole number of instruction k steps (at most 64), the loads
   spread evenly over the work-group, at most 64 f32 accumulators a lane (MFMA keeps them in
   the AGPRs; 128, as 128 x 64 on one wave, spilled to scratch with element-wise loads) and,
   for WMMA, whose 16-element fragments take 8 VGPRs each, at most 96 VGPRs of accumulators and
   fragments together (128 x 128 on eight wave32s, 112, spilled with element-wise loads; the
   same tile at wave64, 80, does not), the two stages within 64 KiB of local memory. The bounds
   hold every row of mfma_shapes / wmma_shapes free of scratch in clang-19's assembly for
   gfx90a, gfx942 and gfx1100 (tests/compile_amd_matrix.sh, whose legal() mirrors this
   function: keep the two in sync). */
static int matrix_legal(const struct clkit_device_props *p, const problem *pr, const clkit_config *c)
{
    int bm = cfg(c, "BLOCK_M"), bn = cfg(c, "BLOCK_N"), bk = cfg(c, "BLOCK_K");
    int wm = cfg(c, "WAVES_M"), wn = cfg(c, "WAVES_N"), insn = matrix_insn(pr);
    if (pr->amd == CLKIT_PATH_NONE || !pow2(bm) || !pow2(bn) || !pow2(bk) || !pow2(wm) || !pow2(wn) ||
        bk % matrix_k(pr) || bk > 64 || cfg(c, "GROUP_M") < 1 || bm % (wm * insn) || bn % (wn * insn))
        return 0;
    int wg = wm * wn * pr->wave, fm = bm / wm / insn, fn = bn / wn / insn;
    int acc = fm * fn * insn * insn / pr->wave;
    int regs = acc + (pr->amd == CLKIT_PATH_AMD_WMMA ? (fm + fn) * 8 : 0);
    uint64_t lds = p->local_mem < 65536 ? p->local_mem : 65536;
    return (size_t)wg <= p->max_work_group && wg <= 1024 && (bm * bk) % wg == 0 && (bn * bk) % wg == 0 &&
           acc <= 64 && regs <= 96 && matrix_local_bytes(pr, c) <= lds;
}

/* ---- the skinny path (cl/matmul.cl's matmul_skinny) ---- */

/* Whether the skinny kernel reads B along K (K contiguous, N not: nn.Linear's W^T) rather
   than along N (N contiguous, or any other strides element by element). */
static int skinny_kmajor(const problem *pr) { return pr->bs[1] == 1 && pr->bs[2] != 1; }

/* B loads in flight a lane (configs written before SK_LOADS existed: 4). */
static int skinny_loads(const clkit_config *c) { return clkit_config_get(c, "SK_LOADS", 4); }

/* Columns a lane owns: 8 along N, SK_LOADS along K. */
static int skinny_vals(const problem *pr, const clkit_config *c)
{
    return skinny_kmajor(pr) ? skinny_loads(c) : 8;
}

/* The kernel's reduction buffer: SK_RED rows of every lane's sums, SK_RED as many rows as
   16 KiB holds, at least one, at most SK_M (as cl/matmul.cl computes it). */
static uint64_t skinny_local_bytes(const problem *pr, const clkit_config *c)
{
    uint64_t lane_row = (uint64_t)cfg(c, "SK_COLS") * (uint64_t)cfg(c, "SK_K") * (uint64_t)skinny_vals(pr, c) * 4;
    uint64_t red = 16384 / lane_row, rows = (uint64_t)cfg(c, "SK_M");
    return (red < 1 ? 1 : red > rows ? rows : red) * lane_row;
}

/* Whether a config can run these operands on this device (before building: the built
   kernel's own limit is checked at launch). */
static int config_legal(const struct clkit_device_props *p, const problem *pr, const clkit_config *c)
{
    int kernel = cfg(c, "KERNEL");
    if (clkit_config_get(c, "provider", 0)) return CLKIT_HAVE_CLBLAST && blas_expressible(pr, &(blas_form){0});
    if (kernel == KERNEL_NAIVE || kernel == KERNEL_TILED) {
        int t = cfg(c, "TILE");
        return t >= 1 && t <= 32 && (size_t)(t * t) <= p->max_work_group &&
               (uint64_t)(2 * t * (t + 1) * 4) <= p->local_mem;
    }
    if (kernel == KERNEL_SKINNY) {
        int cols = cfg(c, "SK_COLS"), lanes = cfg(c, "SK_K"), rows = cfg(c, "SK_M"), loads = skinny_loads(c);
        return pow2(cols) && pow2(lanes) && cols <= 1024 && lanes <= 1024 && pow2(rows) && rows <= 16 &&
               pow2(loads) && loads <= 8 && cfg(c, "splits") >= 0 &&
               (size_t)(cols * lanes) <= p->max_work_group && skinny_local_bytes(pr, c) <= p->local_mem;
    }
    if (kernel == KERNEL_MMA) return mma_legal(p, pr, c);
    if (kernel == KERNEL_MATRIX) return matrix_legal(p, pr, c);
    if (kernel != KERNEL_BLOCKED) return 0;
    int bm = cfg(c, "BLOCK_M"), bn = cfg(c, "BLOCK_N"), bk = cfg(c, "BLOCK_K");
    int tm = cfg(c, "THREAD_M"), tn = cfg(c, "THREAD_N"), g = cfg(c, "GROUP_M");
    if (!pow2(bm) || !pow2(bn) || !pow2(bk) || !pow2(tm) || !pow2(tn) || g < 1 || tm > bm ||
        tn > bn || tm > 16 || tn > 16 || tm * tn > 128)
        return 0;
    int wg = (bm / tm) * (bn / tn);
    return (size_t)wg <= p->max_work_group && (bm * bk) % wg == 0 && (bn * bk) % wg == 0 &&
           blocked_local_bytes(c) <= p->local_mem;
}

static clkit_config blocked(int bm, int bn, int bk, int tm, int tn, int group)
{
    clkit_config c = {0};
    clkit_config_set(&c, "KERNEL", KERNEL_BLOCKED);
    clkit_config_set(&c, "BLOCK_M", bm);
    clkit_config_set(&c, "BLOCK_N", bn);
    clkit_config_set(&c, "BLOCK_K", bk);
    clkit_config_set(&c, "THREAD_M", tm);
    clkit_config_set(&c, "THREAD_N", tn);
    clkit_config_set(&c, "GROUP_M", group);
    return c;
}

static clkit_config mma(const int *shape, int group)
{
    static const char *names[] = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "WARPS_M", "WARPS_N", "STAGES"};
    clkit_config c = {0};
    clkit_config_set(&c, "KERNEL", KERNEL_MMA);
    for (int i = 0; i < 6; i++) clkit_config_set(&c, names[i], shape[i]);
    clkit_config_set(&c, "GROUP_M", group);
    return c;
}

static clkit_config skinny(int cols, int lanes, int rows, int loads)
{
    clkit_config c = {0};
    clkit_config_set(&c, "KERNEL", KERNEL_SKINNY);
    clkit_config_set(&c, "SK_COLS", cols);
    clkit_config_set(&c, "SK_K", lanes);
    clkit_config_set(&c, "SK_M", rows);
    clkit_config_set(&c, "SK_LOADS", loads);
    return c;
}

static clkit_config simple(int kernel, int tile)
{
    clkit_config c = {0};
    clkit_config_set(&c, "KERNEL", kernel);
    clkit_config_set(&c, "TILE", tile);
    return c;
}

/* The register-blocked shapes the tuner tries, largest first: (BLOCK_M, BLOCK_N, BLOCK_K,
   THREAD_M, THREAD_N). */
static const int block_shapes[][5] = {
    {128, 256, 8, 8, 16}, {256, 128, 8, 16, 8},  {128, 128, 16, 8, 16}, {128, 128, 8, 16, 8},
    {128, 128, 16, 8, 8}, {128, 128, 8, 8, 8},   {128, 64, 16, 8, 4},   {64, 128, 16, 4, 8},
    {128, 64, 8, 8, 4},   {64, 128, 8, 4, 8},    {64, 64, 16, 4, 4},    {64, 64, 8, 4, 4},
    {64, 32, 16, 4, 4},   {32, 64, 16, 4, 4},    {32, 32, 8, 4, 4},     {16, 128, 16, 2, 8},
    {16, 64, 16, 2, 4},   {16, 32, 16, 2, 2},    {8, 64, 16, 1, 4},
};
#define NSHAPES (sizeof block_shapes / sizeof *block_shapes)

/* The tensor-core tiles, the fastest on an H100 first (the heuristic takes the first legal
   one that gives every compute unit a work-group): (BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M,
   WARPS_N, STAGES). The wide tile halves the L2 traffic of 128 x 128, and more slices in flight
   hide its latency. On sm_90 the ring may pass the 48 KiB that NVIDIA's OpenCL reports
   (local_mem_static): four or six 128 x 256 x 32 stages (96 / 144 KiB) beat the best 48 KiB
   ring (four 128 x 256 x 16 stages), which leads where the deeper rings do not fit (sm_80).
   tests/compile_nvptx.sh reads this table (measurements:
   docs/nvidia-tensor-cores.md#measurements-behind-the-code). */
static const int mma_shapes[][6] = {
    {128, 256, 32, 2, 4, 4}, {128, 256, 32, 2, 4, 6}, {256, 128, 32, 4, 2, 4},
    {128, 256, 16, 2, 4, 4}, {256, 128, 16, 4, 2, 4}, {128, 128, 32, 2, 2, 3},
    {128, 128, 32, 2, 4, 3}, {128, 128, 16, 2, 4, 4}, {128, 128, 16, 2, 2, 4},
    {128, 256, 32, 2, 4, 2}, {256, 128, 32, 4, 2, 2}, {128, 64, 32, 2, 2, 4},
    {64, 128, 32, 2, 2, 4},  {64, 64, 64, 2, 2, 3},   {64, 64, 32, 2, 2, 4},
    {32, 64, 32, 1, 2, 4},   {128, 256, 64, 2, 4, 3}, {256, 128, 64, 4, 2, 3},
    {128, 128, 64, 2, 2, 4}, {128, 128, 32, 2, 2, 6},
};

/* The same for f32 operands rounded to TF32 (BLOCK_K in f32 elements, twice the bytes): the
   ring of 48 KiB holds half the k of the 16-bit tiles (the first three in order of speed).
   128 x 128 on four warps is left out: with the TF32 conversions its 64 x 64 warp pieces
   spill at BLOCK_K 16. The last four need sm_90's larger rings; the tuner took 128 x 128 x 32
   on 8 warps, 4 stages, at 4096^3. Default f32 (3xTF32, three mma a product) runs the same
   tiles, ahead of cuBLAS's exact f32: the tuner took the first at 2048^3, 4096^3 and 8192^3,
   128 x 64 x 16 at 3072^3 and 64 x 64 x 32 at 1024^3 (measurements:
   docs/nvidia-tensor-cores.md#measurements-behind-the-code). */
static const int tf32_shapes[][6] = {
    {128, 256, 8, 2, 4, 4},  {128, 128, 16, 2, 4, 3}, {256, 128, 8, 4, 2, 4},
    {128, 64, 16, 2, 2, 4},  {64, 128, 16, 2, 2, 4},  {128, 128, 8, 2, 4, 6},
    {64, 64, 16, 2, 2, 4},   {64, 64, 32, 2, 2, 3},   {32, 64, 16, 1, 2, 4},
    {128, 256, 16, 2, 4, 4}, {256, 128, 16, 4, 2, 4}, {128, 128, 32, 2, 4, 4},
    {128, 256, 32, 2, 4, 3},
};

/* The tensor-core tiles for these operands' dtype; none where the kernel cannot take them. */
static size_t mma_table(const problem *pr, const int (**rows)[6])
{
    int tf32 = pr->a->dtype == CLKIT_F32;
    *rows = tf32 ? tf32_shapes : mma_shapes;
    if (!pr->mma) return 0;
    return tf32 ? sizeof tf32_shapes / sizeof *tf32_shapes : sizeof mma_shapes / sizeof *mma_shapes;
}

/* The wgmma tiles (sm_90, 16-bit operands), tried before mma_shapes: (BLOCK_M, BLOCK_N,
   STAGES, speed), BLOCK_K 64, a warpgroup per 64 rows; speed is the tile's TFLOP/s in percent
   of the first's on a full grid, measured at a size where every tile's last wave is nearly
   full (measurements: docs/nvidia-wgmma.md#measurements-behind-the-code). */
static const int wgmma_shapes[][4] = {
    {128, 256, 4, 100}, {256, 128, 4, 97}, {128, 128, 6, 85}, {128, 128, 4, 87}, {64, 256, 4, 67},
    {64, 128, 4, 79},   {128, 64, 4, 72},  {64, 64, 4, 63},   {128, 64, 6, 64},  {64, 64, 6, 52},
};
#define NWGMMA (sizeof wgmma_shapes / sizeof *wgmma_shapes)

static clkit_config wgmma(const int *shape, int group)
{
    int s[6] = {shape[0], shape[1], 64, shape[0] / 16, 1, shape[2]};
    clkit_config c = mma(s, group);
    clkit_config_set(&c, "WGMMA", 1);
    return c;
}

/* The AMD matrix-core tiles, (BLOCK_M, BLOCK_N, BLOCK_K, WAVES_M, WAVES_N), largest first;
   BLOCK_K counts 16-bit operands and halves for f32 (the same bytes a line). Never measured
   on AMD hardware (none here): the order is docs/amd-matrix-cores.md's estimate, and the tuner
   times them all. tests/compile_amd_matrix.sh reads these tables and assembles every legal row
   for its targets: none may use scratch. Left out of wmma_shapes for that: 64 x 64 x 64 (2 x 2),
   which spilled at wave32 and wave64, and 32 x 64 x 32 (1 x 2) and 32 x 32 x 32 (1 x 1), which
   spilled at wave32, all three with element-wise loads (a slice of 32 or more operands a lane
   staged in registers). */
static const int mfma_shapes[][5] = {
    {128, 128, 32, 2, 2}, {256, 128, 32, 4, 2}, {128, 256, 32, 2, 4},
    {128, 64, 32, 2, 2},  {64, 128, 32, 2, 2},  {64, 64, 64, 2, 2},   {64, 64, 32, 2, 2},
    {32, 64, 32, 1, 2},   {32, 32, 32, 1, 1},
};
static const int wmma_shapes[][5] = {
    {128, 128, 32, 4, 2}, {128, 128, 32, 2, 4}, {128, 64, 32, 4, 2}, {64, 128, 32, 2, 4},
    {64, 64, 32, 2, 2},
};

static clkit_config matrix_tile(const problem *pr, const int *shape, int group)
{
    static const char *names[] = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "WAVES_M", "WAVES_N"};
    clkit_config c = {0};
    clkit_config_set(&c, "KERNEL", KERNEL_MATRIX);
    for (int i = 0; i < 5; i++)
        clkit_config_set(&c, names[i], i == 2 && pr->a->dtype == CLKIT_F32 ? shape[i] / 2 : shape[i]);
    clkit_config_set(&c, "GROUP_M", group);
    return c;
}

/* The i-th tensor-core configuration for these operands, the likeliest fastest first: AMD's
   matrix-core tiles where they may run; on NVIDIA wgmma's where it may run, then mma.sync's
   (TF32 tiles for f32). Returns 0 past the last. Built one at a time: the heuristic, which
   every untuned call runs, usually takes the first. */
static int tensor_core_config(const problem *pr, size_t i, clkit_config *out)
{
    if (pr->amd != CLKIT_PATH_NONE) {
        int mfma = pr->amd == CLKIT_PATH_AMD_MFMA;
        size_t n = mfma ? sizeof mfma_shapes / sizeof *mfma_shapes : sizeof wmma_shapes / sizeof *wmma_shapes;
        if (i >= n) return 0;
        *out = matrix_tile(pr, mfma ? mfma_shapes[i] : wmma_shapes[i], 8);
        return 1;
    }
    size_t first = pr->wgmma ? NWGMMA : 0;
    if (i < first) {
        *out = wgmma(wgmma_shapes[i], 8);
        return 1;
    }
    const int (*tiles)[6];
    if (i - first >= mma_table(pr, &tiles)) return 0;
    *out = mma(tiles[i - first], 8);
    return 1;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Work-groups of a tensor-core tile that the device holds at once: on each compute unit as
   many rings as its local memory takes (at most 2048 work-items, as on sm_80 and sm_90), at
   least one. */
static uint64_t mma_resident(const struct clkit_device_props *p, const clkit_config *c, int elem)
{
    int wg = cfg(c, "WARPS_M") * cfg(c, "WARPS_N") * 32;
    uint64_t ring = ring_bytes(cfg(c, "BLOCK_M"), cfg(c, "BLOCK_N"), cfg(c, "BLOCK_K"), cfg(c, "STAGES"),
                               elem, cfg(c, "WGMMA"));
    uint64_t per_unit = p->local_mem_static / ring, by_threads = (uint64_t)(2048 / wg);
    if (per_unit > by_threads) per_unit = by_threads;
    return (per_unit < 1 ? 1 : per_unit) * p->compute_units;
}

/* The k rows of one split of K: the config's "splits" (host-side: never a build option) where
   set, else `want` (no more than min_k rows a split allow); several splits walk multiples of
   `align` rows, one walks all of K. The kernel runs ceil(K / chunk) splits. */
static int k_chunk(const problem *pr, const clkit_config *c, int64_t want, int64_t min_k, int align)
{
    int64_t k = pr->k > 0 ? pr->k : 1, splits = cfg(c, "splits");
    if (splits <= 0) splits = want < ceil_div(k, min_k) ? want : ceil_div(k, min_k);
    if (splits <= 1) return (int)k;
    return (int)(ceil_div(ceil_div(k, splits), align) * align);
}

/* A tensor-core grid of fewer tiles than compute units splits K until the splits fill the
   device: for wgmma tiles as many work-groups as its local memory holds at once, for mma.sync
   tiles (register-bound: 3xTF32's hold one work-group a unit) one a unit; as many splits as
   fit whole (a second round would cost what the first did), of at least TILE_MIN_SPLIT_K rows
   each, multiples of BLOCK_K. On an H200 (same run, f16 M x 4096 x 4096 on 64 x 64 wgmma
   tiles): M 16 0.0223 ms with 6 splits, 0.0231 with 4, 0.0375 unsplit; f32 128 x 128 TF32x3
   tiles at M 128 0.0955 ms with 4 splits, 0.151 for the 32 x 64 tile the rule below took
   before (docs/nvidia-wgmma.md#split-k). */
#define TILE_MIN_SPLIT_K 256
static int tile_k_chunk(const struct clkit_device_props *p, const problem *pr, const clkit_config *c)
{
    int64_t tiles = ceil_div(pr->m, cfg(c, "BLOCK_M")) * ceil_div(pr->n, cfg(c, "BLOCK_N")) * pr->batch;
    int64_t fill = cfg(c, "WGMMA") ? (int64_t)mma_resident(p, c, (int)clkit_dtype_size(pr->a->dtype))
                                   : (int64_t)p->compute_units;
    int64_t want = tiles >= (int64_t)p->compute_units ? 1 : fill / tiles;
    return k_chunk(pr, c, want, TILE_MIN_SPLIT_K, cfg(c, "BLOCK_K"));
}

/* The wgmma tile whose grid should finish first, for grids that give the widest tile at least
   half a wave: each compute unit runs ceil(groups / units) work-groups of a tile one after
   another, each taking the tile's area over its speed. Only tiles whose ring lets one
   work-group a compute unit are weighed (smaller ones share a unit, which this count does not
   model: at 768^3 and 1024^3 two 64 x 64 work-groups a unit beat one 64 x 128, and the rule
   below takes them). Unlike "the fastest tile that fills the device", this sees a last wave
   left mostly empty: 2176^3 on 128 x 256 makes 153 work-groups, two rounds on 132 compute
   units, where 128 x 128 takes three full ones; 1536^3 and 2048^3 take 128 x 256 over
   128 x 128, each the faster there. Returns 0 to leave the choice to the rule below
   (measurements: docs/nvidia-wgmma.md#measurements-behind-the-code). */
static int wgmma_pick(const struct clkit_device_props *p, const problem *pr, clkit_config *out)
{
    const int *wide = wgmma_shapes[0];
    if (!pr->wgmma || ceil_div(pr->m, wide[0]) * ceil_div(pr->n, wide[1]) * pr->batch * 2 < p->compute_units)
        return 0;
    double best = 0;
    for (size_t i = 0; i < NWGMMA; i++) {
        const int *t = wgmma_shapes[i];
        clkit_config c = wgmma(t, 8);
        if (!config_legal(p, pr, &c) || 2 * ring_bytes(t[0], t[1], 64, t[2], 2, 1) <= p->local_mem_static)
            continue;
        int64_t per_unit = ceil_div(ceil_div(pr->m, t[0]) * ceil_div(pr->n, t[1]) * pr->batch, p->compute_units);
        double time = (double)per_unit * t[0] * t[1] / t[3];
        if (best == 0 || time < best) best = time, *out = c;
    }
    return best > 0;
}

/* Grids of about one wave: the 6-stage rows of wgmma_shapes, largest first (its order), the
   first whose grid fills at least 7/8 of the compute units and all of it at once (128-row
   tiles one work-group a unit, 64 x 64 two). With the whole grid resident, a deeper ring (more
   slices in flight a work-group) is worth more than more work-groups a unit: on an H200 (f16,
   same run, ms) 1024^3 0.0132 on 128 x 64 x 6 stages against 0.0148 on 64 x 64 x 4, 256 x
   4096 x 4096 0.0289 against 0.0386, 512 x 4096 x 4096 0.0334 on 128 x 128 x 6 against 0.0423
   (docs/nvidia-wgmma.md#one-wave-grids). The 64 x 64 tile, and any walk of WAVE_CP_SLICES
   slices or fewer, loads by cp.async (host key cp_async): the TMA's set-up in each work-group
   (its tensor maps built and published, about a microsecond) is not repaid by a short walk
   (1024^3: 0.0121 against 0.0132), and a grid of single-warpgroup tiles ran faster without the
   TMA at every length measured (128 x 4096 x 4096: 0.0248 against 0.0273). K is not split
   (tile_k_chunk would split the 64 x 64 grid in two there: 0.0277). */
#define WAVE_CP_SLICES 16

/* Where each compute unit holds one work-group of wgmma tile c and its walk is long, the
   deepest ring one work-group may declare (up to WGMMA_MAX_STAGES): a work-group alone on its
   unit is bound by the slices it has in flight, not by the tensor cores. On an H100 (f16,
   same run, ms; docs/nvidia-wgmma.md#deep-rings): 128 x 4096 x 4096 on 64 x 64 0.0290 with 6
   stages, 0.0265 / 0.0261 / 0.0252 / 0.0253 with 8 / 10 / 12 / 14; 256 x 4096 x 4096 on
   128 x 64 0.0326 with 6, 0.0301 with 9; 512 x 4096 x 4096 on 128 x 128 0.0356 with 6, 0.0348
   with 7. On an H200 the 64 x 64 tile at M 128 gained less (0.0253 with 6, 0.0250 with 12). A
   walk of WAVE_CP_SLICES or fewer keeps its ring (1024^3: 0.0121 with 6, 0.0120 with 8).
   Returns whether the ring grew. */
static int deepen(const struct clkit_device_props *p, const problem *pr, clkit_config *c)
{
    int elem = (int)clkit_dtype_size(pr->a->dtype), stages = WGMMA_MAX_STAGES;
    if (ceil_div(pr->k, 64) <= WAVE_CP_SLICES) return 0;
    while (stages > cfg(c, "STAGES") &&
           ring_bytes(cfg(c, "BLOCK_M"), cfg(c, "BLOCK_N"), 64, stages, elem, 1) > p->local_mem_static)
        stages--;
    if (stages == cfg(c, "STAGES")) return 0;
    clkit_config_set(c, "STAGES", stages);
    return 1;
}

/* How a one-wave wgmma tile loads: the 64 x 64 tile, and any walk of WAVE_CP_SLICES slices or
   fewer, by cp.async (host key cp_async), the others by the TMA. */
static void wave_loads(const problem *pr, clkit_config *c)
{
    if (cfg(c, "BLOCK_M") == 64 || ceil_div(pr->k, 64) <= WAVE_CP_SLICES) clkit_config_set(c, "cp_async", 1);
}

static int wave_pick(const struct clkit_device_props *p, const problem *pr, clkit_config *out)
{
    if (!pr->wgmma) return 0;
    for (size_t i = 0; i < NWGMMA; i++) {
        const int *t = wgmma_shapes[i];
        if (t[2] != 6) continue;
        clkit_config c = wgmma(t, 8);
        int64_t groups = ceil_div(pr->m, t[0]) * ceil_div(pr->n, t[1]) * pr->batch;
        if (!config_legal(p, pr, &c) || groups * 8 < (int64_t)p->compute_units * 7 ||
            (uint64_t)groups > mma_resident(p, &c, (int)clkit_dtype_size(pr->a->dtype)))
            continue;
        wave_loads(pr, &c);
        if (groups <= (int64_t)p->compute_units) deepen(p, pr, &c);
        clkit_config_set(&c, "splits", 1);
        *out = c;
        return 1;
    }
    return 0;
}

/* split_pick's wgmma tile on the deepest ring (deepen) where it still splits, now for one
   work-group a compute unit (tile_k_chunk: two splits where the grid is half a wave), and each
   split walks more than WAVE_CP_SLICES slices; other grids keep the 6-stage rule. Same-run
   times (f16, M x 4096 x 4096, 64 tiles, ms; 6 stages, 4 splits / 12 stages, 2 splits / 12
   stages unsplit), H100: M 1 0.0231 / 0.0228 / 0.0244, M 16 0.0238 / 0.0236 / 0.0244, M 32
   0.0249 / 0.0239 / 0.0245, M 48 0.0271 / 0.0256 / 0.0248, M 64 0.0283 / 0.0263 / 0.0249;
   H200: M 32 0.0206 / 0.0197 / 0.0244, M 48 0.0225 / 0.0214 / 0.0246, M 64 0.0239 / 0.0220 /
   0.0248. Unsplit won on the H100 from M 48 and lost
   more on the H200, where it was slower than before; two splits beat the old rule on both
   (docs/nvidia-wgmma.md#deep-rings). */
static void deep_split(const struct clkit_device_props *p, const problem *pr, clkit_config *c)
{
    clkit_config deep = *c;
    if (!deepen(p, pr, &deep)) return;
    int chunk = tile_k_chunk(p, pr, &deep);
    if (chunk < pr->k && ceil_div(chunk, 64) > WAVE_CP_SLICES) *c = deep;
}

/* Rows 65-128 (or any M whose 64-row grid is twice its 128-row one) where the 128 x 64 tile
   split in two makes about one wave: it reads each slice of B once for both 64-row blocks,
   the quarter of L2 reads that cuBLAS saves by running its 64 x 64 tiles in clusters of two
   sharing B (docs/nvidia-wgmma.md#split-k), on its deep ring. Each split must walk at least
   2 WAVE_CP_SLICES slices. H200, f16, same run, us: 128 x 4096 x 4096 23.9 against 25.3 on
   wave_pick's 64 x 64 (12 stages, unsplit), 65 and 96 x 4096 x 4096 23.7 against 25.1-25.3,
   batch 2 x 128 x 2048 x 4096 23.7 against 25.1; shorter splits lost: K 3000 (24 slices a
   split) 22.6 against 22.3, K 2048 17.0 against 16.4, K 1024 13.7 against 10.7
   (bench/results/2026-11-29-thirtysecond.md). */
static int pair_pick(const struct clkit_device_props *p, const problem *pr, clkit_config *out)
{
    static const int pair[3] = {128, 64, 6};
    clkit_config c = wgmma(pair, 8);
    int64_t groups = ceil_div(pr->m, 128) * ceil_div(pr->n, 64) * pr->batch, units = p->compute_units;
    if (!pr->wgmma || ceil_div(pr->m, 64) != 2 * ceil_div(pr->m, 128) || 2 * groups > units ||
        16 * groups < 7 * units || !config_legal(p, pr, &c) || !deepen(p, pr, &c))
        return 0;
    int chunk = tile_k_chunk(p, pr, &c);
    if (chunk >= pr->k || ceil_div(chunk, 64) < 2 * WAVE_CP_SLICES) return 0;
    *out = c;
    return 1;
}

/* The first of tiles[0..n) that is bm x bn (and BLOCK_K bk, unless bk is 0); n if none. */
static size_t find_tile(const int (*tiles)[6], size_t n, int bm, int bn, int bk)
{
    size_t i = 0;
    while (i < n && !(tiles[i][0] == bm && tiles[i][1] == bn && (!bk || tiles[i][2] == bk))) i++;
    return i;
}

/* Grids that leave compute units idle even on the small tile: that tile with K split
   (tile_k_chunk), where K is long enough to split. The small tile is wgmma's 64 x 64 with 6
   stages, two work-groups a compute unit (on an H200 at M 1 / 16 / 64 x 4096 x 4096, f16,
   ms: 0.0187 / 0.0197 / 0.0239 with 4 splits, against 0.0195 / 0.0203 / 0.0269 for 4 stages
   and 6 splits; docs/nvidia-wgmma.md#split-k), on its deep ring where deep_split takes it,
   else the 128 x 128 mma.sync tile (f32 at M 17 to 256). For f32 up to 64 rows the 64 x 64 x 32
   tile, which leaves no half of its rows empty, where it still splits: H200, 3xTF32, ms, M x N
   x K, against 128 x 128: 64 x 4096 x 4096 0.0676 (2 splits) / 0.0858 (4), 17 x 4096 x 4096
   0.0621 / 0.0789, 64 x 1024 x 4096 0.0276 / 0.0401, 64 x 4096 x 1024 0.0259 / 0.0337; where it
   would not split, 64 x 8192 x 8192: 0.369 unsplit / 0.292 with 2 splits. Grids that fill the
   device do not split: at M 256 and 512 x 4096 x 4096, 768^3 and 1024^3 every split tile lost
   to an unsplit one. */
static int split_pick(const struct clkit_device_props *p, const problem *pr, clkit_config *out)
{
    const int (*tiles)[6];
    size_t n = mma_table(pr, &tiles);
    clkit_config c = wgmma(wgmma_shapes[NWGMMA - 1], 8);
    if (!pr->wgmma) {
        size_t i = find_tile(tiles, n, 128, 128, 0), j = find_tile(tiles, n, 64, 64, 32);
        if (i == n) return 0;
        c = mma(tiles[i], 8);
        if (j < n && pr->a->dtype == CLKIT_F32 && pr->m <= 64) {
            clkit_config small = mma(tiles[j], 8);
            if (config_legal(p, pr, &small) && tile_k_chunk(p, pr, &small) < pr->k) c = small;
        }
    }
    int64_t groups = ceil_div(pr->m, cfg(&c, "BLOCK_M")) * ceil_div(pr->n, cfg(&c, "BLOCK_N")) * pr->batch;
    if (groups >= (int64_t)p->compute_units || !config_legal(p, pr, &c) || tile_k_chunk(p, pr, &c) >= pr->k)
        return 0;
    if (pr->wgmma) deep_split(p, pr, &c);
    *out = c;
    return 1;
}

/* The skinny path's rule, in constants to re-tune per device (H100 / H200 first):
   - SKINNY_MAX_M: the GPU heuristic streams f32 B through the skinny kernel up to this many
     rows of A (16-bit B: skinny_suits). At M <= 16 the product is bound by reading B (2 M
     flops a B element, far below any GPU's flops per byte), which the skinny kernel does once
     at full width; the tensor cores' 64 x 64 tiles re-read nothing either but waste 48 of 64
     rows at M = 16 and more below, and still beat it on 16-bit B on an H200 (skinny_suits).
   - SKINNY_GROUPS_PER_CU: the wide shapes split K until the grid holds this many work-groups
     a compute unit (a CPU: one a core), enough loads in flight to cover DRAM latency on every
     unit; the narrow shape's 256-512 lanes a work-group have as many in flight at one a unit,
     and a second split costs it more than it brings (skinny_default).
   - SKINNY_NARROW_WAVES: the narrow shape serves grids of up to this many waves (skinny_default).
   - SKINNY_MIN_SPLIT_K: ... but no split walks fewer k rows: each split writes M x N f32
     partials that the reduction reads back, 8 M N bytes against the split's 2 x 256 N bytes
     of 16-bit B, at most M / 64 more traffic. */
#define SKINNY_MAX_M 16
#define SKINNY_GROUPS_PER_CU 4
#define SKINNY_MIN_SPLIT_K 256
#define SKINNY_NARROW_WAVES 3

/* Rows a skinny work-group keeps: M rounded up to a power of two, at most 16. */
static int skinny_rows(int64_t m)
{
    int r = 1;
    while (r < m && r < 16) r *= 2;
    return r;
}

/* Work-groups of a skinny config before K is split: column blocks x row blocks x batches. */
static int64_t skinny_groups(const problem *pr, const clkit_config *c)
{
    int64_t width = (int64_t)cfg(c, "SK_COLS") * skinny_vals(pr, c);
    return ceil_div(pr->n, width) * ceil_div(pr->m, cfg(c, "SK_M")) * pr->batch;
}

/* The skinny kernel's split: as many splits as SKINNY_GROUPS_PER_CU asks, of at least
   SKINNY_MIN_SPLIT_K rows, multiples of 64 (the kernel's 16-byte chunks of K-major B stay
   aligned). */
static int skinny_k_chunk(const struct clkit_device_props *p, const problem *pr, const clkit_config *c)
{
    int64_t want = (int64_t)p->compute_units * (p->is_gpu ? SKINNY_GROUPS_PER_CU : 1);
    int64_t groups = skinny_groups(pr, c);
    return k_chunk(pr, c, groups >= want ? 1 : ceil_div(want, groups), SKINNY_MIN_SPLIT_K, 64);
}

/* The skinny config that long read the weight best, SK_LOADS 8, split SKINNY_GROUPS_PER_CU
   times over the device. B along N: 32 column groups of 8 columns (a 512-byte row segment of
   16-bit B per k row), 8 lanes on K; fewer column groups for narrow N, their lanes moved onto
   K. B along K: 8 column groups of 16 lanes. On an H200 (f16, N = K = 4096, L2-warm tuner
   times) these led their candidates: M 1 0.0145 ms (16 x 16 lanes 0.0181, 64 x 64 x 64
   tensor-core tile 0.0221), M 16 0.088 ms (16 x 16 lanes with 2 loads 0.105), K-major M 1
   0.0144 ms (8 x 32 lanes 0.0208). 16 rows with 8 loads spill in sm_90's ptxas (clang-19), yet
   ran twice as fast as with 2 loads (f16 0.106 against 0.215 ms, f32 6.25 against 2.22
   TFLOP/s at 16 x 4096 x 4096). */
static clkit_config skinny_wide(const problem *pr)
{
    int rows = skinny_rows(pr->m);
    if (skinny_kmajor(pr)) return skinny(8, 16, rows, 8);
    int cols = 32;
    while (cols > 1 && (int64_t)cols * 4 >= pr->n) cols /= 2;
    return skinny(cols, 256 / cols, rows, 8);
}

/* The narrow skinny shape: 4 column groups (32 columns of B a work-group) of `lanes` lanes on
   K, split only as far as one wave of work-groups holds (explicit "splits"), each split at
   least SKINNY_MIN_SPLIT_K rows. */
static clkit_config skinny_narrow(const struct clkit_device_props *p, const problem *pr, int lanes)
{
    clkit_config c = skinny(4, lanes, skinny_rows(pr->m), 8);
    int64_t k = pr->k > 0 ? pr->k : 1, groups = skinny_groups(pr, &c);
    int64_t fit = (int64_t)p->compute_units / (groups > 0 ? groups : 1), most = ceil_div(k, SKINNY_MIN_SPLIT_K);
    clkit_config_set(&c, "splits", (int)(fit < 1 ? 1 : fit < most ? fit : most));
    return c;
}

/* The skinny config for these operands on a GPU: the narrow shape (skinny_narrow) where its
   grid is at most SKINNY_NARROW_WAVES waves, at one row of A for B along K, else the wide one.
   128 lanes on K where a split has at least 4 of their steps (4096 rows) and 8 rows or fewer
   (16 rows of sums on 512 lanes spill), else 64. H200, same runs, cuBLAS in the same process
   (ms, 32-column work-groups against the wide shape): f32 B along N, K 4096, N 4096, M 1 / 2 /
   4 / 8 0.0233 / 0.0245 / 0.0295 / 0.0448 against 0.0287 / 0.0300 / 0.0342 / 0.0607 (cuBLAS
   0.0231 / 0.0754 / 0.0760 / 0.0474), M 16 (64 lanes) 0.0430 against 0.0614; f16 M 1 0.0162
   (cuBLAS 0.0188); N 1024 (4 splits, 64 lanes) 0.0132 against 0.0150; K 11008 0.0519 against
   0.0636; N 11008 (344 work-groups) 0.0560 against 0.0583; yet M 2 x N 14336 (448) 0.0780
   against 0.0715. B along K, M 1: f32 0.0244 against 0.0270, f16 0.0164; at M 4 the wide shape
   led (f32 0.0340 against 0.0373). bench/results/2026-11-28-twentyfifth-skinny.md. */
static clkit_config skinny_default(const struct clkit_device_props *p, const problem *pr)
{
    clkit_config c = skinny_narrow(p, pr, 128);
    int64_t k = pr->k > 0 ? pr->k : 1;
    if (skinny_groups(pr, &c) > SKINNY_NARROW_WAVES * (int64_t)p->compute_units || (skinny_kmajor(pr) && pr->m > 1))
        return skinny_wide(pr);
    if (cfg(&c, "SK_M") > 8 || ceil_div(k, cfg(&c, "splits")) < 4096 || !config_legal(p, pr, &c))
        c = skinny_narrow(p, pr, 64);
    return config_legal(p, pr, &c) ? c : skinny_wide(pr); /* work-groups capped below 256 lanes */
}

/* Whether the GPU heuristic streams B through the skinny kernel: up to SKINNY_MAX_M rows for
   f32 B; 16-bit B only where the tensor cores' tiles are slower. wgmma's 64 x 64 tile with K
   split over the device (split_pick) streamed B faster than the wide shape at every M (H200,
   f16, N = K = 4096, ms: 0.0189 against 0.0204 at M 1, 0.019 against 0.027 at M 2 and 4;
   bench/results/2026-11-28-twentyfourth-gemv.md), and slower than the narrow one at M 1 and 2
   while its grid is one wave: 0.0190 against 0.0162 / 0.0179 (M 4: 0.0191 against 0.0233),
   0.0189 against 0.0164 along K at M 1, N 1024 0.0124 against 0.0118; N 14336 (3.4 waves)
   0.0405 against 0.0425. Without wgmma, up to 4 rows along N and 1 along K, as measured before
   the split tiles (H200: wide skinny 0.030 / 0.031 / 0.036 / 0.073 at M 1 / 2 / 4 / 8, the
   unsplit tile 0.037-0.039; along K 0.030 against 0.043). */
static int skinny_suits(const struct clkit_device_props *p, const problem *pr)
{
    if (pr->b->dtype == CLKIT_F32) return pr->m <= SKINNY_MAX_M;
    if (!pr->wgmma) return pr->m <= (skinny_kmajor(pr) ? 1 : 4);
    clkit_config c = skinny_narrow(p, pr, 128);
    return pr->m <= (skinny_kmajor(pr) ? 1 : 2) && skinny_groups(pr, &c) <= (int64_t)p->compute_units;
}

/* Heuristic default from device properties: the largest legal tile that still gives every
   compute unit a work-group (the tutorials' 128 x 128 on big GPUs, smaller tiles for small
   or skinny problems and for CPUs, where one work-group per core runs at a time). */
static clkit_config heuristic_config(const struct clkit_device_props *p, const problem *pr)
{
    uint64_t want = p->is_gpu ? p->compute_units : p->compute_units * 4;
    if (p->is_gpu && skinny_suits(p, pr)) {
        clkit_config c = skinny_default(p, pr);
        if (config_legal(p, pr, &c)) return c;
    }
    /* The first tile (the table is ordered by speed) that fills the device and wastes at
       most an eighth of its grid on padding (N 384 on 128 x 256 pads a quarter: 256 x 128
       fits it); else the first that fills the device; short of a full wave, the tile with the
       most work-groups, not the largest (f32 256^3 on the table's last row made 2 work-groups
       and ran several times slower; measurements:
       docs/nvidia-tensor-cores.md#measurements-behind-the-code). */
    clkit_config best = {0}, filling = {0}, tc;
    if (wgmma_pick(p, pr, &best) || pair_pick(p, pr, &best) || wave_pick(p, pr, &best) || split_pick(p, pr, &best))
        return best;
    uint64_t best_groups = 0; /* 0: no legal tensor-core tile */
    for (size_t i = 0; tensor_core_config(pr, i, &tc); i++) {
        if (!config_legal(p, pr, &tc)) continue;
        int bm = cfg(&tc, "BLOCK_M"), bn = cfg(&tc, "BLOCK_N");
        int64_t rows = ceil_div(pr->m, bm), cols = ceil_div(pr->n, bn);
        uint64_t groups = (uint64_t)(rows * cols * pr->batch);
        double grid = (double)(rows * bm) * (double)(cols * bn);
        if (groups >= want && (double)pr->m * (double)pr->n >= 0.875 * grid) return tc;
        if (groups >= want && !cfg(&filling, "KERNEL")) filling = tc;
        if (groups > best_groups) best = tc, best_groups = groups;
    }
    if (cfg(&filling, "KERNEL")) return filling;
    if (best_groups) return best;
    int found = 0;
    for (size_t i = 0; i < NSHAPES; i++) {
        const int *s = block_shapes[i];
        clkit_config c = blocked(s[0], s[1], s[2], s[3], s[4], 8);
        if (!config_legal(p, pr, &c) || (!p->is_gpu && s[0] * s[1] > 64 * 64)) continue;
        if (pr->m <= 16 && s[0] > 16 && p->is_gpu) continue; /* skinny: don't waste rows */
        uint64_t tiles = (uint64_t)(ceil_div(pr->m, s[0]) * ceil_div(pr->n, s[1]) * pr->batch);
        if (tiles >= want) return c;
        best = c, found = 1;
    }
    return found ? best : simple(KERNEL_TILED, 8);
}

/* The wide skinny shapes the tuner tries, (SK_COLS, SK_K, SK_LOADS) for each way of reading
   B, 128 or 256 lanes, after the narrow shape with 128 and 64 lanes (skinny_narrow); the wide
   shapes' K splits follow skinny_k_chunk's rule, and the first runs once more unsplit. */
static const int skinny_nmajor_shapes[][3] = {{32, 8, 8}, {16, 16, 8}, {8, 32, 8}, {16, 16, 4},
                                              {32, 8, 4},  {16, 8, 8}, {32, 4, 8}, {16, 16, 2}};
static const int skinny_kmajor_shapes[][3] = {{8, 16, 8}, {8, 32, 8}, {4, 64, 8}, {8, 32, 4},
                                              {16, 16, 8}, {4, 32, 8}, {16, 8, 8}};

/* Appends c after out[0..n) where it is legal here and is not out[0] (the heuristic's, which
   the tuner times first anyway). */
static int add_unlike_first(const struct clkit_device_props *p, const problem *pr, const clkit_config *c,
                            clkit_config *out, int n)
{
    if (config_legal(p, pr, c) && memcmp(c, &out[0], sizeof *c) != 0) out[n++] = *c;
    return n;
}

/* Appends the skinny candidates for up to 4 x SKINNY_MAX_M rows, those unlike out[0]. */
static int skinny_candidates(const struct clkit_device_props *p, const problem *pr, clkit_config *out,
                             int n, int max)
{
    int km = skinny_kmajor(pr);
    const int (*shapes)[3] = km ? skinny_kmajor_shapes : skinny_nmajor_shapes;
    size_t count = km ? sizeof skinny_kmajor_shapes / sizeof *skinny_kmajor_shapes
                      : sizeof skinny_nmajor_shapes / sizeof *skinny_nmajor_shapes;
    for (int lanes = 128; lanes >= 64 && n < max && pr->m <= 4 * SKINNY_MAX_M; lanes /= 2) {
        clkit_config c = skinny_narrow(p, pr, lanes);
        n = add_unlike_first(p, pr, &c, out, n);
    }
    for (size_t i = 0; i <= count && n < max && pr->m <= 4 * SKINNY_MAX_M; i++) {
        const int *s = shapes[i < count ? i : 0];
        clkit_config c = skinny(s[0], s[1], skinny_rows(pr->m), s[2]);
        if (i == count) clkit_config_set(&c, "splits", 1);
        n = add_unlike_first(p, pr, &c, out, n);
    }
    return n;
}

/* A 6-stage wgmma tile on its deep ring (deepen), unsplit, loaded as wave_pick loads it
   (wave_loads), after out[0..n) unless the ring stays or out[0] is that config already. */
static int add_deep(const struct clkit_device_props *p, const problem *pr, clkit_config c, clkit_config *out, int n)
{
    if (!deepen(p, pr, &c)) return n;
    wave_loads(pr, &c);
    clkit_config_set(&c, "splits", 1);
    return add_unlike_first(p, pr, &c, out, n);
}

/* Every candidate the tuner times, the likeliest first so that a time budget cuts the long
   tail: the heuristic default, CLBlast where it applies, the skinny kernel for a few rows,
   the tensor-core tiles where the operands allow them (each that splits K also unsplit, each
   6-stage wgmma tile also on its deep ring where K is long), each legal blocked shape with
   GROUP_M 8 (the caller refines GROUP_M of the winner), then tiled and naive. */
static int candidates(const struct clkit_device_props *p, const problem *pr, clkit_config *out, int max)
{
    int n = 0;
    out[n++] = heuristic_config(p, pr);
    if (CLKIT_HAVE_CLBLAST && pr->a->dtype == CLKIT_F32 && pr->opt.activation == CLKIT_ACT_NONE) {
        clkit_config c = {0};
        clkit_config_set(&c, "provider", 1);
        out[n++] = c;
    }
    n = skinny_candidates(p, pr, out, n, max);
    clkit_config tc;
    for (size_t i = 0; n < max && tensor_core_config(pr, i, &tc); i++) {
        if (!config_legal(p, pr, &tc)) continue;
        if (memcmp(&tc, &out[0], sizeof tc) != 0) out[n++] = tc;
        if (n < max && cfg(&tc, "KERNEL") == KERNEL_MMA && tile_k_chunk(p, pr, &tc) < pr->k) {
            clkit_config_set(&tc, "splits", 1);
            out[n++] = tc;
        }
        if (n < max && cfg(&tc, "WGMMA") && cfg(&tc, "STAGES") == 6) n = add_deep(p, pr, tc, out, n);
    }
    for (size_t i = 0; i < NSHAPES && n < max; i++) {
        const int *s = block_shapes[i];
        clkit_config c = blocked(s[0], s[1], s[2], s[3], s[4], 8);
        n = add_unlike_first(p, pr, &c, out, n);
    }
    static const int simple_kernels[][2] = {{KERNEL_TILED, 16}, {KERNEL_TILED, 32}, {KERNEL_NAIVE, 16}};
    for (size_t i = 0; i < 3 && n < max; i++) {
        clkit_config c = simple(simple_kernels[i][0], simple_kernels[i][1]);
        if (config_legal(p, pr, &c)) out[n++] = c;
    }
    return n;
}

/* ---- clkit's kernels ---- */

/* Vector width for loading an operand along its unit-stride dimension: vec when that stride
   is 1, the other strides and the offset keep every vec-element group aligned, and the tile
   divides into vec-element loads; else 1. */
static int operand_vec_of(int vec, int64_t unit_stride, int64_t other, int64_t batch, int64_t off,
                          int loads_per_thread, int tile_dim)
{
    return unit_stride == 1 && other % vec == 0 && batch % vec == 0 && off % vec == 0 &&
                   loads_per_thread % vec == 0 && tile_dim % vec == 0
               ? vec
               : 1;
}

static const char *dtype_token(clkit_dtype t)
{
    return t == CLKIT_F16 ? "F16" : t == CLKIT_BF16 ? "BF16" : "F32";
}

/* The tensor-core kernel's arithmetic for these operands: f16 (the default), bf16, f32 rounded
   to TF32 under allow_tf32, else f32 as 3xTF32. */
static const char *mma_math(const problem *pr)
{
    clkit_dtype t = pr->a->dtype;
    if (t == CLKIT_BF16) return " -D MMA_BF16";
    if (t != CLKIT_F32) return "";
    return pr->tf32 ? " -D MMA_TF32" : " -D MMA_TF32 -D TF32X3";
}

/* How the skinny kernel loads 8 elements of an operand along its unit stride (unit: that
   dimension's stride, other and batch the rest): 2 aligned 16-byte loads (every stride and the
   offset keep 8-element groups 16-byte aligned: 4-element for f32, whose groups are two
   float4), 1 vload8, 0 element by element (no unit stride). */
static int skinny_vec(clkit_dtype dt, int64_t unit, int64_t other, int64_t batch, int64_t off)
{
    int64_t chunk = dt == CLKIT_F32 ? 4 : 8;
    if (unit != 1) return 0;
    return other % chunk == 0 && batch % chunk == 0 && off % chunk == 0 ? 2 : 1;
}

/* B along N, or along K where skinny_kmajor reads it so. */
static int skinny_vec_b(const problem *pr)
{
    if (skinny_kmajor(pr)) return skinny_vec(pr->b->dtype, pr->bs[1], pr->bs[2], pr->bs[0], pr->b_off);
    return skinny_vec(pr->b->dtype, pr->bs[2], pr->bs[1], pr->bs[0], pr->b_off);
}

/* The same for A's 8-element groups along K (its k rows a lane takes start on multiples of 8
   wherever the kernel loads 8 at once). */
static int skinny_vec_a(const problem *pr)
{
    return skinny_vec(pr->a->dtype, pr->as[2], pr->as[1], pr->as[0], pr->a_off);
}

static void build_options(const problem *pr, const clkit_config *c, int split, char *buf, size_t n)
{
    char base[512];
    clkit_config_options(c, base, sizeof base);
    int used = snprintf(buf, n, "%s -D A_DTYPE=%s -D B_DTYPE=%s -D C_DTYPE=%s", base,
                        dtype_token(pr->a->dtype), dtype_token(pr->b->dtype), dtype_token(pr->c->dtype));
    if (cfg(c, "KERNEL") == KERNEL_SKINNY) {
        snprintf(buf + used, n - (size_t)used, " -D SK_KMAJOR=%d -D VEC_B=%d -D A_UNIT=%d", skinny_kmajor(pr),
                 skinny_vec_b(pr), skinny_vec_a(pr));
        return;
    }
    if (cfg(c, "KERNEL") == KERNEL_MMA) {
        snprintf(buf + used, n - (size_t)used, " -D A_KMAJOR=%d -D B_NMAJOR=%d%s%s%s", pr->as[1] != 1,
                 pr->bs[1] != 1, mma_math(pr), pr->tma ? " -D TMA=1" : "", split ? " -D SPLIT_K=1" : "");
        return;
    }
    int kernel = cfg(c, "KERNEL");
    if (kernel != KERNEL_BLOCKED && kernel != KERNEL_MATRIX) return;
    int bm = cfg(c, "BLOCK_M"), bn = cfg(c, "BLOCK_N"), bk = cfg(c, "BLOCK_K");
    int matrix = kernel == KERNEL_MATRIX;
    int wg = matrix ? cfg(c, "WAVES_M") * cfg(c, "WAVES_N") * pr->wave
                    : (bm / cfg(c, "THREAD_M")) * (bn / cfg(c, "THREAD_N"));
    int vec = matrix ? 16 / (int)clkit_dtype_size(pr->a->dtype) : 4; /* 16-byte loads */
    int a_kmajor = pr->as[1] != 1, b_nmajor = pr->bs[1] != 1;
    int va = a_kmajor ? operand_vec_of(vec, pr->as[2], pr->as[1], pr->as[0], pr->a_off, bm * bk / wg, bk)
                      : operand_vec_of(vec, 1, pr->as[2], pr->as[0], pr->a_off, bm * bk / wg, bm);
    int vb = b_nmajor ? operand_vec_of(vec, pr->bs[2], pr->bs[1], pr->bs[0], pr->b_off, bn * bk / wg, bn)
                      : operand_vec_of(vec, 1, pr->bs[2], pr->bs[0], pr->b_off, bn * bk / wg, bk);
    used += snprintf(buf + used, n - (size_t)used, " -D A_KMAJOR=%d -D B_NMAJOR=%d -D VEC_A=%d -D VEC_B=%d",
                     a_kmajor, b_nmajor, va, vb);
    if (matrix)
        snprintf(buf + used, n - (size_t)used, " -D WAVE=%d -D %s%s", pr->wave,
                 pr->amd == CLKIT_PATH_AMD_MFMA ? "MATRIX_MFMA32" : "MATRIX_WMMA16",
                 pr->emulated ? " -D AMD_EMULATE" : "");
}

bool clkit_matmul_tma(const clkit_context *ctx, clkit_family fam)
{
    return clkit_path_allowed(ctx, CLKIT_PATH_NV_TMA, fam);
}

/* Sets pr->tma where c is a wgmma tile that walks all of K (split: 0), not one that loads by
   cp.async by choice (wave_pick), and the TMA can read both operands. */
static void tma_prepare(const clkit_context *ctx, problem *pr, const clkit_config *c, int split)
{
    pr->tma = cfg(c, "WGMMA") && !split && !cfg(c, "cp_async") && clkit_matmul_tma(ctx, pr->fam) &&
              clkit_tma_strides(pr->as, 3) && clkit_tma_strides(pr->bs, 3);
}

/* An operand's buffer, element offset and (batch, row, column) strides. */
static void arg_operand(clkit_args *a, cl_mem buf, int64_t off, const int64_t *st)
{
    clkit_arg_mem(a, buf), clkit_arg_long(a, off);
    for (int i = 0; i < 3; i++) clkit_arg_long(a, st[i]);
}

/* cl/matmul.h's OPERANDS, then the TMA's map slot where the tile takes it. */
static clkit_status arg_operands(clkit_context *ctx, clkit_args *a, const problem *pr,
                                 const clkit_tensor *c)
{
    arg_operand(a, pr->a->buffer, pr->a_off, pr->as);
    arg_operand(a, pr->b->buffer, pr->b_off, pr->bs);
    arg_operand(a, c->buffer, (int64_t)(c->offset / clkit_dtype_size(c->dtype)), pr->cs);
    clkit_arg_int(a, (cl_int)pr->m), clkit_arg_int(a, (cl_int)pr->n), clkit_arg_int(a, (cl_int)pr->k);
    clkit_arg_float(a, pr->opt.alpha), clkit_arg_float(a, pr->opt.beta);
    clkit_arg_int(a, pr->opt.activation), clkit_arg_float(a, pr->opt.leaky_slope);
    cl_mem slot;
    clkit_status s = pr->tma ? clkit_tma_maps(ctx, &slot) : CLKIT_OK;
    if (!s && pr->tma) clkit_arg_mem(a, slot);
    return s;
}

/* Work-groups a batch for the TMA's persistent kernel (tiles of the batch): as many as stay
   resident together, shared among the batches, never more than the tiles. */
static int64_t persistent_groups(const struct clkit_device_props *p, const problem *pr,
                                 const clkit_config *c, int64_t tiles)
{
    int64_t resident = (int64_t)mma_resident(p, c, (int)clkit_dtype_size(pr->a->dtype));
    int64_t groups = (resident + pr->batch - 1) / pr->batch;
    return groups < tiles ? groups : tiles;
}

/* The fast path a tensor-core program of config c takes: TMA loads, else wgmma, else mma.sync. */
static clkit_path mma_path(const problem *pr, const clkit_config *c)
{
    return pr->tma ? CLKIT_PATH_NV_TMA : cfg(c, "WGMMA") ? CLKIT_PATH_NV_WGMMA : CLKIT_PATH_NV_MMA;
}

/* One call of clkit's kernels as the plan step sees it. */
typedef struct mm_call {
    problem pr;
    clkit_config c;
    const clkit_matmul_epilogue *epilogue; /* NULL: C is stored */
    int k_chunk; /* the k rows of a split (the skinny kernel, split tensor-core tiles) */
} mm_call;

/* Splits of K the call runs (1 where k_chunk covers K). */
static int64_t splits_of(const mm_call *m)
{
    int64_t k = m->pr.k > 0 ? m->pr.k : 1;
    return m->k_chunk > 0 ? ceil_div(k, m->k_chunk) : 1;
}


/* A tiled kernel (blocked or tensor-core): a work-group a tile, batches across. The TMA's
   persistent kernel walks its tiles one grid apart; a fused epilogue's short-K tiles, which
   pay its per-group setup most, launch one resident wave of it, while plain matmuls launch a
   work-group a tile as they did when the persistent kernel came (docs/nvidia-tma.md). */
static void tile_geometry(const clkit_context *ctx, const mm_call *m, clkit_plan *plan)
{
    const problem *pr = &m->pr;
    const clkit_config *c = &m->c;
    int bm = cfg(c, "BLOCK_M"), bn = cfg(c, "BLOCK_N");
    int kernel = cfg(c, "KERNEL");
    size_t wg = kernel == KERNEL_MMA      ? (size_t)(cfg(c, "WARPS_M") * cfg(c, "WARPS_N") * 32)
                : kernel == KERNEL_MATRIX ? (size_t)(cfg(c, "WAVES_M") * cfg(c, "WAVES_N") * pr->wave)
                                          : (size_t)(bm / cfg(c, "THREAD_M")) * (size_t)(bn / cfg(c, "THREAD_N"));
    int64_t groups = ceil_div(pr->m, bm) * ceil_div(pr->n, bn);
    if (pr->tma && m->epilogue) groups = persistent_groups(&ctx->props, pr, c, groups);
    plan->dims = 3;
    plan->global[0] = (size_t)groups * wg, plan->global[1] = (size_t)pr->batch;
    plan->global[2] = (size_t)splits_of(m);
    plan->local[0] = wg, plan->local[1] = 1, plan->local[2] = 1;
}

static void geometry(const clkit_context *ctx, const mm_call *m, clkit_plan *plan)
{
    const problem *pr = &m->pr;
    const clkit_config *c = &m->c;
    int kernel = cfg(c, "KERNEL");
    if (kernel == KERNEL_BLOCKED || kernel == KERNEL_MMA || kernel == KERNEL_MATRIX) {
        tile_geometry(ctx, m, plan);
        return;
    }
    plan->dims = 3;
    plan->global[2] = (size_t)pr->batch, plan->local[2] = 1;
    if (kernel == KERNEL_SKINNY) {
        size_t wg = (size_t)(cfg(c, "SK_COLS") * cfg(c, "SK_K"));
        int64_t k = pr->k > 0 ? pr->k : 1;
        plan->global[0] = (size_t)ceil_div(pr->n, (int64_t)cfg(c, "SK_COLS") * skinny_vals(pr, c)) * wg;
        plan->global[1] = (size_t)ceil_div(k, m->k_chunk);
        plan->global[2] = (size_t)(pr->batch * ceil_div(pr->m, cfg(c, "SK_M")));
        plan->local[0] = wg, plan->local[1] = 1;
        return;
    }
    size_t t = (size_t)cfg(c, "TILE");
    plan->global[0] = (size_t)ceil_div(pr->n, (int64_t)t) * t;
    plan->global[1] = (size_t)ceil_div(pr->m, (int64_t)t) * t;
    plan->local[0] = t, plan->local[1] = t;
}

/* The plan of config m->c on the fast paths the family may take now. A tensor-core tile that
   a failed path has made illegal gives way to the heuristic (a fused epilogue has no other
   kernel: CLKIT_ERR_UNSUPPORTED, and its op runs unfused); a TMA tile whose TMA failed keeps
   its tile, loaded by cp.async. Configs fix their work-group, so wg_limit has no say: a kernel
   that cannot run it fails the plan. */
static clkit_status plan_matmul(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    static const char *names[] = {"matmul_naive", "matmul_tiled", "matmul_blocked", "matmul_skinny",
                                  "matmul_mma", "matmul_matrix"};
    static const char *files[] = {"matmul.cl", "matmul.cl", "matmul.cl", "matmul.cl", "nv/matmul_mma.cl",
                                  "amd/matmul_matrix.cl"};
    (void)wg_limit;
    mm_call *m = arg;
    problem *pr = &m->pr;
    choose_paths(ctx, pr);
    int fast = cfg(&m->c, "KERNEL") == KERNEL_MMA || cfg(&m->c, "KERNEL") == KERNEL_MATRIX;
    if (fast && !config_legal(&ctx->props, pr, &m->c)) {
        if (m->epilogue)
            return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "%s: the tensor-core program does not build",
                              m->epilogue->define);
        m->c = heuristic_config(&ctx->props, pr);
    }
    int kernel = cfg(&m->c, "KERNEL");
    if (kernel == KERNEL_SKINNY) m->k_chunk = skinny_k_chunk(&ctx->props, pr, &m->c);
    /* a fused epilogue needs whole sums */
    if (kernel == KERNEL_MMA) m->k_chunk = m->epilogue ? (int)pr->k : tile_k_chunk(&ctx->props, pr, &m->c);
    int split = kernel == KERNEL_MMA && splits_of(m) > 1;
    tma_prepare(ctx, pr, &m->c, split);
    plan->file = files[kernel];
    snprintf(plan->name, sizeof plan->name, "%s", names[kernel]);
    build_options(pr, &m->c, split, plan->options, sizeof plan->options);
    if (m->epilogue) {
        size_t used = strlen(plan->options);
        snprintf(plan->options + used, sizeof plan->options - used, " %s", m->epilogue->define);
    }
    plan->path = kernel == KERNEL_MMA ? mma_path(pr, &m->c) : kernel == KERNEL_MATRIX ? pr->amd : CLKIT_PATH_NONE;
    plan->family = pr->fam;
    geometry(ctx, m, plan);
    return CLKIT_OK;
}

/* A kernel that splits K (cl/matmul.h's SPLIT_PARAMS after the operands): the splits' f32
   partial sums in scratch and a counter a tile, whose last split adds them into C. The skinny
   kernel takes these arguments with one split too, and then writes C itself (handed C's
   buffer for the partials and counters it never touches). */
static clkit_status launch_split(clkit_context *ctx, const mm_call *m, const clkit_plan *plan,
                                 cl_kernel k, const clkit_tensor *out)
{
    const problem *pr = &m->pr;
    size_t splits = (size_t)splits_of(m), groups = 1;
    for (cl_uint i = 0; i < plan->dims; i++) groups *= plan->global[i] / plan->local[i];
    size_t bytes = splits > 1 ? splits * (size_t)(pr->batch * pr->m * pr->n) * sizeof(float) : 0;
    cl_mem part = out->buffer, tickets = out->buffer;
    clkit_status s = bytes ? clkit_scratch_alloc(ctx, bytes, &part) : CLKIT_OK;
    if (!s && bytes) s = clkit_tickets(ctx, groups / splits, &tickets);
    clkit_args a = clkit_args_of(k);
    if (!s) s = arg_operands(ctx, &a, pr, out);
    if (!s) {
        clkit_arg_mem(&a, part), clkit_arg_mem(&a, tickets), clkit_arg_int(&a, m->k_chunk);
        s = clkit_plan_run(ctx, plan, &a);
    }
    if (bytes) clkit_scratch_release(ctx, part, bytes);
    return s;
}

/* Plans, builds and runs config c (e: a fused epilogue, NULL for none). */
static clkit_status launch_clkit(clkit_context *ctx, const problem *pr, const clkit_config *c,
                                 const clkit_tensor *out, const clkit_matmul_epilogue *e)
{
    mm_call m = {*pr, *c, e, 0};
    clkit_plan plan;
    cl_kernel k = NULL;
    clkit_status s = clkit_plan_kernel(ctx, plan_matmul, &m, &plan, &k);
    if (s) return s;
    if (cfg(&m.c, "KERNEL") == KERNEL_SKINNY || splits_of(&m) > 1) return launch_split(ctx, &m, &plan, k, out);
    clkit_args a = clkit_args_of(k);
    if ((s = arg_operands(ctx, &a, &m.pr, out))) return s;
    if (e) e->args(&a, e->user);
    return clkit_plan_run(ctx, &plan, &a);
}

/* ---- CLBlast ---- */

#if CLKIT_HAVE_CLBLAST
static clkit_status launch_clblast(clkit_context *ctx, const problem *pr, const clkit_tensor *out)
{
    blas_form f;
    if (!blas_expressible(pr, &f))
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "CLBlast cannot express this matmul");
    CLBlastLayout layout = f.row_major ? CLBlastLayoutRowMajor : CLBlastLayoutColMajor;
    CLBlastTranspose ta = f.ta ? CLBlastTransposeYes : CLBlastTransposeNo;
    CLBlastTranspose tb = f.tb ? CLBlastTransposeYes : CLBlastTransposeNo;
    cl_event ev = NULL;
    size_t c_off = out->offset / 4;
    CLBlastStatusCode st;
    if (pr->batch == 1)
        st = CLBlastSgemm(layout, ta, tb, (size_t)pr->m, (size_t)pr->n, (size_t)pr->k, pr->opt.alpha,
                          pr->a->buffer, (size_t)pr->a_off, f.lda, pr->b->buffer, (size_t)pr->b_off, f.ldb,
                          pr->opt.beta, out->buffer, c_off, f.ldc, &ctx->queue, &ev);
    else
        st = CLBlastSgemmStridedBatched(layout, ta, tb, (size_t)pr->m, (size_t)pr->n, (size_t)pr->k,
                                        pr->opt.alpha, pr->a->buffer, (size_t)pr->a_off, f.lda,
                                        (size_t)pr->as[0], pr->b->buffer, (size_t)pr->b_off, f.ldb,
                                        (size_t)pr->bs[0], pr->opt.beta, out->buffer, c_off, f.ldc,
                                        (size_t)pr->cs[0], (size_t)pr->batch, &ctx->queue, &ev);
    if (st != CLBlastSuccess)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "CLBlast GEMM failed with status %d", (int)st);
    clkit_record_event(ctx, ev);
    return CLKIT_OK;
}
#endif

/* ---- choosing and running ---- */

static clkit_status run_config(clkit_context *ctx, const problem *pr, const clkit_config *c,
                               const clkit_tensor *out)
{
    /* Without CLBlast (meson -Dclblast=disabled) no config names it: config_legal refuses
       such configs and candidates offers none. */
#if CLKIT_HAVE_CLBLAST
    if (clkit_config_get(c, "provider", 0)) return launch_clblast(ctx, pr, out);
#endif
    return launch_clkit(ctx, pr, c, out, NULL);
}

/* An operand's layout in a tuned entry's key: n row-major, t transposed (both with a unit
   stride and rows that do not overlap), g anything else (zero, negative or overlapping
   strides), so that an entry measured on one kind never serves another. */
static char layout_letter(int64_t rs, int64_t cs, int64_t rows, int64_t cols)
{
    int trans;
    size_t ld;
    if (!blas_operand(rs, cs, rows, cols, 1, &trans, &ld)) return 'g';
    return trans ? 't' : 'n';
}

static clkit_tune_key tune_key(const problem *pr)
{
    clkit_tune_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.op, sizeof k.op, "matmul");
    snprintf(k.dtype, sizeof k.dtype, "%s.%s.%s", clkit_dtype_name(pr->a->dtype),
             clkit_dtype_name(pr->b->dtype), clkit_dtype_name(pr->c->dtype));
    char la = layout_letter(pr->as[1], pr->as[2], pr->m, pr->k);
    char lb = layout_letter(pr->bs[1], pr->bs[2], pr->k, pr->n);
    snprintf(k.layout, sizeof k.layout, "%c%c%s%s%s", la, lb, pr->batch > 1 ? ".batched" : "",
             pr->opt.activation != CLKIT_ACT_NONE ? ".act" : "", pr->tf32 ? ".tf32" : pr->exact ? ".exact" : "");
    k.shape[0] = pr->m, k.shape[1] = pr->n, k.shape[2] = pr->k, k.shape[3] = pr->batch;
    k.nshape = 4;
    return k;
}

static clkit_status tune(clkit_context *ctx, const problem *pr, const clkit_tune_options *topt,
                         clkit_config *best);

/* Work-groups of a tiled config (blocked or tensor-core) over the problem; 0 for the others. */
static uint64_t tile_groups(const void *arg, const clkit_config *c)
{
    const problem *pr = arg;
    int bm = cfg(c, "BLOCK_M"), bn = cfg(c, "BLOCK_N");
    if (bm <= 0 || bn <= 0) return 0;
    return (uint64_t)(ceil_div(pr->m, bm) * ceil_div(pr->n, bn) * pr->batch);
}

/* A tuned entry serves where it is legal, and names CLBlast only where the provider allows. */
static bool tuned_legal(const clkit_context *ctx, const void *arg, const clkit_config *c)
{
    const problem *pr = arg;
    return config_legal(&ctx->props, pr, c) &&
           !(pr->opt.provider == CLKIT_PROVIDER_CLKIT && clkit_config_get(c, "provider", 0));
}

static clkit_status choose(clkit_context *ctx, const problem *pr, clkit_config *c)
{
    const clkit_matmul_options *o = &pr->opt;
    if (o->config) {
        if (clkit_config_parse(o->config, c) != 0 || !config_legal(&ctx->props, pr, c))
            return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "matmul config '%s' is malformed or "
                              "does not fit this device and these operands", o->config);
        return CLKIT_OK;
    }
    memset(c, 0, sizeof *c);
    if (o->provider == CLKIT_PROVIDER_CLBLAST) {
        if (!CLKIT_HAVE_CLBLAST)
            return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "CLBlast provider: this libclkit was built without CLBlast");
        if (pr->a->dtype != CLKIT_F32 || o->activation != CLKIT_ACT_NONE)
            return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "CLBlast provider: f32 without activation only");
        if (blas_expressible(pr, &(blas_form){0})) {
            clkit_config_set(c, "provider", 1);
            return CLKIT_OK;
        }
        clkit_log(CLKIT_LOG_INFO, "CLBlast cannot express these strides (or K = 0); clkit's kernels run it");
        *c = heuristic_config(&ctx->props, pr);
        return CLKIT_OK;
    }
    clkit_chooser ch = {tune_key(pr), pr, tuned_legal, tile_groups, heuristic_config(&ctx->props, pr)};
    clkit_lookup found = clkit_choose_config(ctx, &ch, c);
    const char *autotune = getenv("CLKIT_AUTOTUNE");
    if (found != CLKIT_LOOKUP_EXACT && autotune && strcmp(autotune, "1") == 0 &&
        o->provider == CLKIT_PROVIDER_AUTO)
        return tune(ctx, pr, NULL, c);
    return CLKIT_OK;
}

/* ---- misaligned operands, staged ---- */

/* Where only alignment keeps the tensor cores from a 16-bit product (K or N not a multiple of
   8, a view that starts mid-chunk or has no unit stride), each misaligned operand is copied
   into scratch with its rows padded to whole 16-byte chunks, and the product runs on the
   copies. The copy reads and writes the operand once; it pays where the
   product does at least STAGE_MIN_FLOPS_PER_BYTE flops a byte copied: the portable kernels
   that serve such operands otherwise ran f16 128 x 4000 x 4100 in 447 us on an H200, where
   the tensor cores take about 24 us (bench/results/2026-11-29-thirtysecond.md). Misaligned
   f32 operands keep the portable kernels' exact f32, as the header promises. */
#define STAGE_MIN_FLOPS_PER_BYTE 32

typedef struct staged {
    clkit_tensor t;
    cl_mem buf; /* NULL: the operand is used as it is */
    size_t bytes;
} staged;

static double operand_bytes(const clkit_tensor *t)
{
    return (double)clkit_numel(t) * (double)clkit_dtype_size(t->dtype);
}

/* Whether staging the misaligned operands may pay: the tensor cores are allowed for these
   operands but for their alignment, and the product is worth the copies. */
static int stage_pays(const clkit_context *ctx, const problem *p)
{
    if (p->mma || p->a->dtype == CLKIT_F32 || p->k == 0 || p->opt.config || p->opt.provider == CLKIT_PROVIDER_CLBLAST ||
        !clkit_path_allowed(ctx, CLKIT_PATH_NV_MMA, p->fam))
        return 0;
    int64_t chunk = mma_chunk(p);
    double bytes = (mma_operand_fits(p, 0, chunk) ? 0 : operand_bytes(p->a)) +
                   (mma_operand_fits(p, 1, chunk) ? 0 : operand_bytes(p->b));
    double flops = 2.0 * (double)p->m * (double)p->n * (double)p->k * (double)p->batch;
    return flops >= STAGE_MIN_FLOPS_PER_BYTE * bytes;
}

/* Scratch for a dense copy of t whose rows (or columns, where t's rows have the unit
   stride) start on whole chunks. */
static clkit_status stage_alloc(clkit_context *ctx, const clkit_tensor *t, int64_t chunk, staged *out)
{
    int d = t->ndim - 2;
    int64_t rows = t->shape[d], cols = t->shape[d + 1], batch = d ? t->shape[0] : 1;
    int col_major = cols > 1 && t->strides[d + 1] != 1 && rows > 1 && t->strides[d] == 1;
    int64_t inner = col_major ? rows : cols, ld = ceil_div(inner, chunk) * chunk;
    out->t = *t;
    out->t.offset = 0;
    out->t.strides[d] = col_major ? 1 : ld;
    out->t.strides[d + 1] = col_major ? ld : 1;
    if (d) out->t.strides[0] = ld * (col_major ? cols : rows);
    out->bytes = (size_t)(batch * ld * (col_major ? cols : rows)) * clkit_dtype_size(t->dtype);
    clkit_status s = clkit_scratch_alloc(ctx, out->bytes, &out->buf);
    if (s) out->buf = NULL;
    out->t.buffer = out->buf;
    return s;
}

static void stage_release(clkit_context *ctx, staged *st)
{
    for (int i = 0; i < 2; i++)
        if (st[i].buf) clkit_scratch_release(ctx, st[i].buf, st[i].bytes);
}

/* Where staging pays (stage_pays): scratch for copies of pr's misaligned operands, the copies
   enqueued, and the problem on them in *sp; returns 1. Else, also where scratch runs short
   or a copy fails, 0 with no scratch held and no error left. */
static int stage(clkit_context *ctx, const problem *pr, const clkit_tensor *c, staged *st, problem *sp)
{
    if (!stage_pays(ctx, pr)) return 0;
    const clkit_tensor *ops[2] = {pr->a, pr->b};
    clkit_status s = CLKIT_OK;
    memset(st, 0, 2 * sizeof *st);
    for (int i = 0; i < 2 && !s; i++)
        if (!mma_operand_fits(pr, i, mma_chunk(pr))) s = stage_alloc(ctx, ops[i], mma_chunk(pr), &st[i]);
    if (!s) s = validate(ctx, st[0].buf ? &st[0].t : pr->a, st[1].buf ? &st[1].t : pr->b, c, &pr->opt, pr->fam, sp);
    if (!s && !sp->mma) s = clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "the staged operands do not suit the tensor cores");
    for (int i = 0; i < 2 && !s; i++)
        if (st[i].buf) s = clkit_copy(ctx, ops[i], &st[i].t);
    if (!s) return 1;
    clkit_log(CLKIT_LOG_INFO, "matmul: misaligned operands not staged (%s)", clkit_last_error(ctx));
    clkit_clear_error(ctx);
    stage_release(ctx, st);
    return 0;
}

/* Runs pr on staged copies of its misaligned operands where that pays and the chosen config
   (heuristic or tuned) is a tensor-core tile on them (*done = 1); else *done = 0 and the call
   takes the plain path. */
static clkit_status run_staged(clkit_context *ctx, const problem *pr, const clkit_tensor *c, int *done)
{
    staged st[2];
    problem sp;
    clkit_config cf;
    *done = 0;
    if (!stage(ctx, pr, c, st, &sp)) return CLKIT_OK;
    clkit_status s = choose(ctx, &sp, &cf);
    if (!s && cfg(&cf, "KERNEL") == KERNEL_MMA) {
        *done = 1;
        s = run_config(ctx, &sp, &cf, c);
    }
    stage_release(ctx, st);
    if (*done) return s;
    clkit_clear_error(ctx);
    return CLKIT_OK;
}

clkit_status clkit_matmul(clkit_context *ctx, const clkit_tensor *a, const clkit_tensor *b,
                          const clkit_tensor *c, const clkit_matmul_options *opt)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    problem pr;
    clkit_config cfg_;
    clkit_status s = validate(ctx, a, b, c, opt, CLKIT_FAMILY_MATMUL, &pr);
    if (s || pr.m == 0 || pr.n == 0 || pr.batch == 0) return s;
    int staged_run;
    if ((s = run_staged(ctx, &pr, c, &staged_run)) || staged_run) return s;
    if ((s = choose(ctx, &pr, &cfg_))) return s;
    return run_config(ctx, &pr, &cfg_, c);
}

/* ---- epilogues for other ops ---- */

bool clkit_matmul_tile_legal(const clkit_context *ctx, clkit_dtype dt, const char *config)
{
    clkit_tensor a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.a = &a, pr.b = &a, pr.c = &a;
    pr.fam = CLKIT_FAMILY_CROSS_ENTROPY;
    pr.mma = clkit_path_allowed(ctx, CLKIT_PATH_NV_MMA, pr.fam); /* no operands to align yet */
    pr.wgmma = wgmma_allowed(ctx, &pr);
    clkit_config c;
    return clkit_config_parse(config, &c) == 0 && cfg(&c, "KERNEL") == KERNEL_MMA &&
           mma_legal(&ctx->props, &pr, &c);
}

uint64_t clkit_matmul_resident(const clkit_context *ctx, clkit_dtype dt, const char *config)
{
    clkit_config c;
    if (clkit_config_parse(config, &c) || cfg(&c, "KERNEL") != KERNEL_MMA) return ctx->props.compute_units;
    return mma_resident(&ctx->props, &c, (int)clkit_dtype_size(dt));
}

clkit_status clkit_matmul_epilogue_run(clkit_context *ctx, const clkit_tensor *a,
                                       const clkit_tensor *b, const clkit_tensor *c,
                                       const clkit_matmul_options *opt,
                                       const clkit_matmul_epilogue *e)
{
    problem pr;
    clkit_config cf;
    clkit_status s = validate(ctx, a, b, c, opt, CLKIT_FAMILY_CROSS_ENTROPY, &pr);
    if (s) return s;
    if (!pr.mma)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "%s: the tensor cores cannot take these operands here",
                          e->define);
    if ((s = choose(ctx, &pr, &cf))) return s;
    if (cfg(&cf, "KERNEL") != KERNEL_MMA)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "%s needs a tensor-core tile", e->define);
    return launch_clkit(ctx, &pr, &cf, c, e);
}

/* ---- tuning ---- */

typedef struct tune_run {
    const problem *pr;
    const clkit_tensor *scratch;
} tune_run;

static clkit_status run_candidate(clkit_context *ctx, const clkit_config *c, void *user)
{
    const tune_run *t = user;
    return run_config(ctx, t->pr, c, t->scratch);
}

static clkit_status tune(clkit_context *ctx, const problem *pr, const clkit_tune_options *topt,
                         clkit_config *best)
{
    clkit_config cands[48];
    int n = candidates(&ctx->props, pr, cands, 48);
    clkit_tensor scratch;
    cl_mem buf;
    size_t bytes;
    clkit_status s = clkit_scratch_like(ctx, pr->c, &scratch, &buf, &bytes);
    if (s) return s;
    tune_run run = {pr, &scratch};
    clkit_tune_key key = tune_key(pr);
    double start = clkit_now_s();
    s = clkit_autotune(ctx, &key, cands, n, run_candidate, &run, topt, best);
    /* Refine the winner's program order (GROUP_M only matters for blocked kernels) in what
       is left of the budget, which is the whole call's; none left: the winner stands. */
    clkit_tune_options rest = topt ? *topt : (clkit_tune_options){0};
    if (rest.budget_s > 0) rest.budget_s -= clkit_now_s() - start;
    int kernel = s ? 0 : cfg(best, "KERNEL"); /* best is unset when no candidate ran */
    if (!s && (!topt || topt->budget_s <= 0 || rest.budget_s > 0) &&
        (kernel == KERNEL_BLOCKED || kernel == KERNEL_MMA || kernel == KERNEL_MATRIX) &&
        !clkit_config_get(best, "provider", 0)) {
        clkit_config groups[3] = {*best, *best, *best};
        clkit_config_set(&groups[1], "GROUP_M", 1);
        clkit_config_set(&groups[2], "GROUP_M", 4);
        s = clkit_autotune(ctx, &key, groups, 3, run_candidate, &run, &rest, best);
    }
    clkit_scratch_release(ctx, buf, bytes);
    return s;
}

clkit_status clkit_tune_matmul(clkit_context *ctx, const clkit_tensor *a, const clkit_tensor *b,
                               const clkit_tensor *c, const clkit_matmul_options *opt,
                               const clkit_tune_options *topt)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    problem pr;
    clkit_status s = validate(ctx, a, b, c, opt, CLKIT_FAMILY_MATMUL, &pr);
    if (s || pr.m == 0 || pr.n == 0 || pr.batch == 0) return s;
    if (pr.opt.provider == CLKIT_PROVIDER_CLBLAST || pr.opt.config)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "tuning needs provider AUTO or CLKIT and no config override");
    clkit_config best;
    staged st[2];
    problem sp;
    if (!stage(ctx, &pr, c, st, &sp)) return tune(ctx, &pr, topt, &best);
    s = tune(ctx, &sp, topt, &best);
    stage_release(ctx, st);
    return s;
}
