/* clkit_layernorm_forward / _backward: layer norm over the rows of (M, N), see
   cl/layernorm.cl.

   The plan (team of work-items per row, rows per group, values per work-item, on chip or
   looping) comes from the row length, the layout and the device, as for softmax; the grid is
   persistent: G = compute units x the groups one unit holds (by work-items and the built
   kernel's local memory), at most the number of row blocks. The backward's dw and db go
   through P = G x ROWS partial rows, one per team (2P x N floats of scratch, G halved until
   that fits one allocation), and a second kernel that sums them column by column in a fixed
   order: since G depends only on M, N, the dtype, the layout and the device, reruns are
   bitwise equal. */
#include "../internal.h"

#include <math.h>
#include <stdio.h>

/* Kernel flags, as cl/layernorm.cl names them. */
enum {
    LN_HAS_W = 1, LN_HAS_B = 2, LN_WANT_MEAN = 4, LN_WANT_RSTD = 8, LN_WB_VEC = 16,
    LN_WANT_DWDB = 32, LN_WANT_DW = 64, LN_WANT_DB = 128
};

/* How a row is spread over a work-group: a team of `team` work-items holds `items` values
   each (per step when `loop`), `rows` teams to a group; vec elements per load; wb_local: the
   forward keeps weight and bias in local memory instead of registers. */
typedef struct ln_plan {
    unsigned team, rows, items, vec;
    int loop, wb_local;
} ln_plan;

/* GPUs: values a work-item holds on chip, as measured best for softmax (NVIDIA spends about
   3 registers per held value); at the largest team the forward may hold twice as many before
   rows loop, the backward (which also holds dy and the dw and db sums per value) 12: 12 ran at
   the speed of 8 and 16 spilled (measurements:
   docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_GPU_ITEMS 8u
#define LN_GPU_MAX_ITEMS_FWD 16u
#define LN_GPU_MAX_ITEMS_BWD 12u
/* 16-bit rows in 16-byte vectors (8 values) reach 12 only as 8: without this the backward
   loops from N 8193 on, where the loop kernel's per-row update of the partial dw and db rows
   costs more than its loads: held at 16 a lane those rows ran far faster, though 1024-lane
   teams then spill (measurements: docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_GPU_MAX_ITEMS_BWD_VEC8 16u
/* Those rows also start at two chunks (16 values) a lane in the backward once that leaves a
   team of at least 4 warps: half the lanes per row, so groups of 512 where 1024 spilled. A
   team of 2 warps ran slower on two chunks, so such rows keep one (measurements:
   docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_GPU_BWD_VEC8_CHUNKS 2u
#define LN_GPU_MAX_TEAM 1024u
/* Forward groups of at least this many work-items keep weight and bias in local memory (as
   f32, 8 bytes a held value) where it has room: their registers then go to the rows, which
   lets 512-lane groups run two to a compute unit and 1024-lane ones prefetch without spilling.
   256-lane groups lost in a trial, so smaller groups keep them in registers (measurements:
   docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_WB_LOCAL_MIN_WG 512u
/* CPUs (PoCL): no registers to fit, and every distinct plan is one more slow build: two
   shapes, rows of up to 256 positions on chip, 2 to a group of 8-lane teams, and longer rows
   looping over 64 lanes, whose second read comes from the CPU's caches (measurements:
   docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_CPU_TEAM 8u
#define LN_CPU_ITEMS 32u
#define LN_CPU_LOOP_TEAM 64u
#define LN_CPU_LOOP_ITEMS 16u

static uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

static unsigned pow2_floor(size_t x)
{
    unsigned p = 1;
    while ((size_t)p * 2 <= x) p *= 2;
    return p;
}

/* The fewest lanes (a power of two) holding the row in LN_GPU_ITEMS values each, spreading a
   short row within a warp until each lane makes at most two loads; short rows several to a
   group of 4 warps. A row that even max_team lanes cannot hold in max_items loops over
   max_team lanes, two loads per lane per step. */
static void gpu_plan(ln_plan *plan, const struct clkit_device_props *p, uint64_t span,
                     unsigned max_team, bool backward)
{
    unsigned warp = p->warp > 1 ? p->warp : 1, vec = plan->vec;
    unsigned max_items = !backward ? LN_GPU_MAX_ITEMS_FWD
                         : vec == 8 ? LN_GPU_MAX_ITEMS_BWD_VEC8 : LN_GPU_MAX_ITEMS_BWD;
    uint64_t chunks = div_up(span, vec), max_chunks = LN_GPU_ITEMS > vec ? LN_GPU_ITEMS / vec : 1;
    if (backward && vec == 8 && div_up(chunks, LN_GPU_BWD_VEC8_CHUNKS) > 2 * warp)
        max_chunks = LN_GPU_BWD_VEC8_CHUNKS;
    unsigned team = 1;
    if (max_team > LN_GPU_MAX_TEAM) max_team = LN_GPU_MAX_TEAM;
    while (team < max_team &&
           (div_up(chunks, team) > max_chunks || (team < warp && div_up(chunks, team) > 2)))
        team *= 2;
    uint64_t per_lane = div_up(chunks, team) * vec;
    if (per_lane <= (max_items > vec ? max_items : vec)) {
        plan->team = team;
        plan->items = (unsigned)per_lane;
        while (plan->team * plan->rows * 2 <= (4 * warp < max_team ? 4 * warp : max_team))
            plan->rows *= 2;
        return;
    }
    plan->loop = 1;
    plan->team = max_team;
    plan->items = vec > 1 ? 2 * vec : 4;
}

static void cpu_plan(ln_plan *plan, uint64_t span, unsigned max_team)
{
    plan->team = max_team < LN_CPU_TEAM ? max_team : LN_CPU_TEAM;
    plan->rows = max_team / plan->team < 2 ? 1 : 2;
    plan->items = LN_CPU_ITEMS;
    if (div_up(span, plan->vec) <= plan->team * (LN_CPU_ITEMS / plan->vec)) return;
    plan->loop = 1;
    plan->team = max_team < LN_CPU_LOOP_TEAM ? max_team : LN_CPU_LOOP_TEAM;
    plan->rows = 1;
    plan->items = LN_CPU_LOOP_ITEMS;
}

/* span: positions a row occupies (N plus its phase a); wg_limit: the built kernel's limit,
   0 for the device's. */
static ln_plan make_plan(const struct clkit_device_props *p, uint64_t span, unsigned vec,
                         size_t wg_limit, bool backward)
{
    ln_plan plan = {1, 1, 1, vec, 0, 0};
    size_t limit = wg_limit && wg_limit < p->max_work_group ? wg_limit : p->max_work_group;
    unsigned max_team = pow2_floor(limit < 1024 ? limit : 1024);
    if (p->is_gpu) gpu_plan(&plan, p, span ? span : 1, max_team, backward);
    else cpu_plan(&plan, span ? span : 1, max_team);
    /* Beside weight and bias, the most local memory the reductions take (the portable ones:
       cl/layernorm.cl's RED_WORDS float2 words, twice). */
    uint64_t wg = (uint64_t)plan.team * plan.rows, wb_bytes = 2 * sizeof(float) * plan.items * wg;
    uint64_t red_bytes = 2 * 2 * sizeof(float) * (wg + 32u * plan.rows);
    plan.wb_local = p->is_gpu && !backward && !plan.loop && wg >= LN_WB_LOCAL_MIN_WG &&
                    wb_bytes + red_bytes <= p->local_mem_static;
    return plan;
}

/* A 2-D (M, N) operand as the kernels take it: offset and strides in elements. */
typedef struct rows_view {
    cl_mem buf;
    cl_long off, rs, cs;
} rows_view;

/* A 1-D operand (weight, bias, statistics, gradients); a NULL tensor becomes a stand-in
   buffer the kernel never touches. */
typedef struct line_view {
    cl_mem buf;
    cl_long off, s;
} line_view;

static rows_view rows_of(const clkit_tensor *t)
{
    rows_view v = {t->buffer, (cl_long)(t->offset / clkit_dtype_size(t->dtype)), t->strides[0],
                   t->strides[1]};
    /* Strides of a dim of extent 1 are never applied: normalise them so they cannot stop the
       vector path. */
    if (t->shape[0] == 1) v.rs = 0;
    if (t->shape[1] == 1) v.cs = 1;
    return v;
}

static line_view line_of(const clkit_tensor *t, cl_mem stand_in)
{
    line_view v = {stand_in, 0, 0};
    if (!t) return v;
    v.buf = t->buffer;
    v.off = (cl_long)(t->offset / clkit_dtype_size(t->dtype));
    v.s = t->shape[0] == 1 ? 1 : t->strides[0];
    return v;
}

static int64_t mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

static void arg_rows(clkit_args *a, const rows_view *v)
{
    clkit_arg_mem(a, v->buf), clkit_arg_long(a, v->off), clkit_arg_long(a, v->rs), clkit_arg_long(a, v->cs);
}

static void arg_line(clkit_args *a, const line_view *v)
{
    clkit_arg_mem(a, v->buf), clkit_arg_long(a, v->off), clkit_arg_long(a, v->s);
}

/* The row count, then the row length: 32-bit for the kernels that hold a row on chip. */
static void arg_extent(clkit_args *a, cl_long m, cl_long n, int loop)
{
    clkit_arg_long(a, m);
    if (loop) clkit_arg_long(a, n);
    else clkit_arg_int(a, (cl_int)n);
}

/* 16-byte accesses need unit columns, row strides of whole vectors and one phase (the start's
   distance past an aligned address) shared by every row operand, so that a lane's positions
   are the same columns in each of them and in every row. */
static unsigned vector_width(const rows_view *v, int count, clkit_dtype dtype, int *phase)
{
    int64_t vec = 16 / (int64_t)clkit_dtype_size(dtype);
    *phase = 0;
    for (int i = 0; i < count; i++)
        if (v[i].cs != 1 || mod(v[i].rs, vec) || mod(v[i].off - v[0].off, vec)) return 1;
    *phase = (int)mod(v[0].off, vec);
    return (unsigned)vec;
}

/* Weight and bias rows load as vectors when they share the row operands' phase. */
static bool lines_aligned(const line_view *v, const clkit_tensor *const *ts, int count,
                          unsigned vec, int phase)
{
    if (vec == 1) return false;
    for (int i = 0; i < count; i++)
        if (ts[i] && (v[i].s != 1 || mod(v[i].off, vec) != phase)) return false;
    return true;
}

typedef struct row_problem {
    int64_t n;
    unsigned vec;
    int phase;
    clkit_dtype dtype;
    bool backward;
    ln_plan rows; /* the plan's row layout, for the launch */
} row_problem;

/* The row layout within wg_limit. NVIDIA's build reduces with inline PTX shuffles;
   LN_PORTABLE (or any other device) without them. The grid comes from the built kernel. */
static clkit_status plan_rows(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    static const char *names[2][2] = {{"layernorm_fwd", "layernorm_fwd_loop"},
                                      {"layernorm_bwd", "layernorm_bwd_loop"}};
    row_problem *p = arg;
    uint64_t span = (uint64_t)p->n + (uint64_t)p->phase;
    const ln_plan r = p->rows = make_plan(&ctx->props, span, p->vec, wg_limit, p->backward);
    const char *portable = clkit_plan_path(ctx, plan, CLKIT_PATH_NV_SHUFFLE, CLKIT_FAMILY_LAYERNORM,
                                           " -D LN_PORTABLE");
    plan->file = "layernorm.cl";
    snprintf(plan->name, sizeof plan->name, "%s", names[p->backward][r.loop]);
    snprintf(plan->options, sizeof plan->options,
             "%s -D TEAM=%u -D ROWS=%u -D ITEMS=%u -D VEC=%u -D LOOP=%d -D BACKWARD=%d%s%s",
             clkit_dtype_macro(p->dtype), r.team, r.rows, r.items, r.vec, r.loop, p->backward,
             r.wb_local ? " -D WB_LOCAL" : "", portable);
    plan->dims = 1;
    plan->local[0] = (size_t)r.team * r.rows;
    return CLKIT_OK;
}

/* Registers a backward work-item takes: about 3 per held value plus 56 for the pointers,
   strides and reduction, as NVIDIA's compiler allots them (in 1024-lane groups it gives fewer
   than it wants). No OpenCL query reports them, but the backward's grid must not count on
   more resident groups than fit: each group writes, and layernorm_dwdb rereads, 2N floats of
   partials, and twice the resident 1024-lane groups at 4096 x 8192 (f16) made 17 MB of
   partials beside 201 MB of rows (register counts:
   docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_BWD_REGS(items) (3u * (items) + 56u)
/* The forward's likewise, fewer where weight and bias stay in local memory, as the driver's
   kernels take fewer there than where they hold them in registers. A grid counting only
   work-items ran twice the resident 1024-lane groups, in two waves, each group starting by
   loading weight, bias and a first row; one group a compute unit ran faster (measurements:
   docs/layernorm-softmax.md#measurements-behind-the-code). */
#define LN_FWD_REGS(plan) ((plan)->wb_local ? 2u * (plan)->items + 48u : LN_BWD_REGS((plan)->items))

/* Persistent groups for the built kernel: as many as the compute units hold (counting
   registers where regs_per_item is given and the device reports its register file), at
   most one per block of rows. */
static size_t grid_groups(clkit_context *ctx, cl_kernel k, const ln_plan *plan, int64_t m,
                          unsigned regs_per_item)
{
    uint64_t local_bytes, private_bytes;
    clkit_kernel_mem(ctx, k, &local_bytes, &private_bytes);
    unsigned occupancy = clkit_occupancy(&ctx->props, (size_t)plan->team * plan->rows,
                                         local_bytes, regs_per_item);
    return clkit_persistent_groups(&ctx->props, occupancy, div_up((uint64_t)m, plan->rows));
}

static void log_plan(const char *what, const clkit_tensor *x, const ln_plan *plan, int phase,
                     size_t groups)
{
    clkit_log(CLKIT_LOG_DEBUG, "%s %lldx%lld %s: team %u rows %u items %u vec %u phase %d%s%s, "
              "%zu groups", what, (long long)x->shape[0], (long long)x->shape[1],
              clkit_dtype_name(x->dtype), plan->team, plan->rows, plan->items, plan->vec, phase,
              plan->loop ? " loop" : "", plan->wb_local ? " wb-local" : "", groups);
}

/* ---- validation ---- */

static clkit_status check_line(clkit_context *ctx, const clkit_tensor *t, const char *name,
                               unsigned dtypes, int64_t len, const char *len_name)
{
    clkit_status s = clkit_check_tensor(ctx, t, name, 1, 1, dtypes);
    if (s) return s;
    if (t->shape[0] != len)
        return clkit_fail(ctx, CLKIT_ERR_SHAPE, "%s has length %lld; it must be %s = %lld", name,
                          (long long)t->shape[0], len_name, (long long)len);
    return CLKIT_OK;
}

static clkit_status check_dtype(clkit_context *ctx, const clkit_tensor *t, const char *name,
                                const clkit_tensor *x, const char *x_name)
{
    if (t->dtype == x->dtype) return CLKIT_OK;
    return clkit_fail(ctx, CLKIT_ERR_DTYPE, "%s (%s) must have %s's dtype (%s)", name,
                      clkit_dtype_name(t->dtype), x_name, clkit_dtype_name(x->dtype));
}

/* An optional (N) operand in x's dtype. */
static clkit_status check_param(clkit_context *ctx, const clkit_tensor *t, const char *name,
                                const clkit_tensor *x)
{
    clkit_status s;
    if (!t) return CLKIT_OK;
    if ((s = check_line(ctx, t, name, CLKIT_DT_FLOAT, x->shape[1], "N")) ||
        (s = check_dtype(ctx, t, name, x, "x")))
        return s;
    return CLKIT_OK;
}

/* An (M, N) operand shaped and typed like x. */
static clkit_status check_rows(clkit_context *ctx, const clkit_tensor *t, const char *name,
                               const clkit_tensor *x)
{
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, t, name, 2, 2, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_same_shape(ctx, x, "x", t, name)) || (s = check_dtype(ctx, t, name, x, "x")))
        return s;
    return CLKIT_OK;
}

typedef struct named {
    const clkit_tensor *t;
    const char *name;
} named;

/* Each present output writes no element twice and meets no input, nor another output; only
   `alias` (an output, may be NULL) may be exactly the view of `alias_of`. */
static clkit_status check_outputs(clkit_context *ctx, const named *outs, int nouts,
                                  const named *ins, int nins, const clkit_tensor *alias,
                                  const clkit_tensor *alias_of)
{
    clkit_status s;
    for (int i = 0; i < nouts; i++) {
        const clkit_tensor *o = outs[i].t;
        if (!o) continue;
        if ((s = clkit_check_output(ctx, o, outs[i].name))) return s;
        for (int j = 0; j < nins; j++)
            if (ins[j].t && (s = clkit_check_disjoint(ctx, o, outs[i].name, ins[j].t, ins[j].name,
                                                      o == alias && ins[j].t == alias_of)))
                return s;
        for (int j = 0; j < i; j++)
            if (outs[j].t &&
                (s = clkit_check_disjoint(ctx, o, outs[i].name, outs[j].t, outs[j].name, false)))
                return s;
    }
    return CLKIT_OK;
}

static clkit_status check_eps(clkit_context *ctx, float eps)
{
    if (eps > 0 && isfinite(eps)) return CLKIT_OK;
    return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "eps = %g; it must be finite and > 0",
                      (double)eps);
}

/* The mean of an empty row is undefined: rows must have elements unless there are none. */
static clkit_status check_row_length(clkit_context *ctx, const clkit_tensor *x)
{
    if (x->shape[1] > 0 || x->shape[0] == 0) return CLKIT_OK;
    return clkit_fail(ctx, CLKIT_ERR_SHAPE, "x is %lld x 0: layer norm needs N > 0",
                      (long long)x->shape[0]);
}

/* ---- forward ---- */

static clkit_status forward(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *weight,
                            const clkit_tensor *bias, float eps, const clkit_tensor *y,
                            const clkit_tensor *mean, const clkit_tensor *rstd)
{
    rows_view rv[2] = {rows_of(x), rows_of(y)};
    line_view wb[2] = {line_of(weight, x->buffer), line_of(bias, x->buffer)};
    line_view mv = line_of(mean, x->buffer), sv = line_of(rstd, x->buffer);
    const clkit_tensor *params[2] = {weight, bias};
    int phase;
    unsigned vec = vector_width(rv, 2, x->dtype, &phase);
    cl_int flags = (weight ? LN_HAS_W : 0) | (bias ? LN_HAS_B : 0) | (mean ? LN_WANT_MEAN : 0) |
                   (rstd ? LN_WANT_RSTD : 0) |
                   (lines_aligned(wb, params, 2, vec, phase) ? LN_WB_VEC : 0);
    row_problem rp = {x->shape[1], vec, phase, x->dtype, false, {0}};
    clkit_plan pl;
    cl_kernel k;
    clkit_status s = clkit_plan_kernel(ctx, plan_rows, &rp, &pl, &k);
    if (s) return s;
    const ln_plan plan = rp.rows;
    cl_long m = x->shape[0];
    clkit_args a = clkit_args_of(k);
    arg_rows(&a, &rv[0]), arg_rows(&a, &rv[1]);
    arg_line(&a, &wb[0]), arg_line(&a, &wb[1]), arg_line(&a, &mv), arg_line(&a, &sv);
    arg_extent(&a, m, x->shape[1], plan.loop);
    clkit_arg_int(&a, phase), clkit_arg_float(&a, eps), clkit_arg_int(&a, flags);
    size_t groups = grid_groups(ctx, k, &plan, m, LN_FWD_REGS(&plan));
    pl.global[0] = groups * pl.local[0];
    log_plan("layernorm forward", x, &plan, phase, groups);
    return clkit_plan_run(ctx, &pl, &a);
}

clkit_status clkit_layernorm_forward(clkit_context *ctx, const clkit_tensor *x,
                                     const clkit_tensor *weight, const clkit_tensor *bias,
                                     float eps, const clkit_tensor *y, const clkit_tensor *mean,
                                     const clkit_tensor *rstd)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 2, 2, CLKIT_DT_FLOAT)) ||
        (s = check_rows(ctx, y, "y", x)) || (s = check_param(ctx, weight, "weight", x)) ||
        (s = check_param(ctx, bias, "bias", x)) ||
        (mean && (s = check_line(ctx, mean, "mean", CLKIT_DT(CLKIT_F32), x->shape[0], "M"))) ||
        (rstd && (s = check_line(ctx, rstd, "rstd", CLKIT_DT(CLKIT_F32), x->shape[0], "M"))) ||
        (s = check_eps(ctx, eps)) || (s = check_row_length(ctx, x)))
        return s;
    const named outs[] = {{y, "y"}, {mean, "mean"}, {rstd, "rstd"}};
    const named ins[] = {{x, "x"}, {weight, "weight"}, {bias, "bias"}};
    if ((s = check_outputs(ctx, outs, 3, ins, 3, y, x))) return s;
    if (x->shape[0] == 0) return CLKIT_OK;
    return forward(ctx, x, weight, bias, eps, y, mean, rstd);
}

/* ---- backward ---- */

typedef struct reduce_problem {
    clkit_dtype dtype;
    cl_long n;
} reduce_problem;

/* A warp of columns (64 on CPUs) by enough slices of the partial rows to make 256 work-items
   on GPUs; within wg_limit, fewer slices first, then fewer columns. */
static clkit_status plan_reduce(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    const reduce_problem *r = arg;
    const struct clkit_device_props *p = &ctx->props;
    unsigned cols = p->is_gpu ? (p->warp > 32 ? p->warp : 32) : 64;
    unsigned slices = p->is_gpu ? 256 / cols : 1;
    while (wg_limit && (size_t)cols * slices > wg_limit && cols * slices > 1) {
        if (slices > 1) slices /= 2;
        else cols /= 2;
    }
    plan->file = "layernorm.cl";
    snprintf(plan->name, sizeof plan->name, "layernorm_dwdb");
    snprintf(plan->options, sizeof plan->options, "%s -D REDUCE=1 -D RCOLS=%u -D RSLICES=%u",
             clkit_dtype_macro(r->dtype), cols, slices);
    plan->family = CLKIT_FAMILY_LAYERNORM;
    plan->dims = 1;
    plan->local[0] = (size_t)cols * slices;
    plan->global[0] = (size_t)div_up((uint64_t)r->n, cols) * plan->local[0];
    return CLKIT_OK;
}

/* Sums the partial rows into dweight and dbias (zeros when parts is 0). */
static clkit_status reduce_partials(clkit_context *ctx, cl_mem part, cl_int parts, cl_long n,
                                    const clkit_tensor *dweight, const clkit_tensor *dbias)
{
    const clkit_tensor *any = dweight ? dweight : dbias;
    reduce_problem rp = {any->dtype, n};
    clkit_plan pl;
    cl_kernel k;
    clkit_status s = clkit_plan_kernel(ctx, plan_reduce, &rp, &pl, &k);
    if (s) return s;
    line_view dw = line_of(dweight, any->buffer), db = line_of(dbias, any->buffer);
    cl_int flags = (dweight ? LN_WANT_DW : 0) | (dbias ? LN_WANT_DB : 0);
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, part), clkit_arg_int(&a, parts), clkit_arg_long(&a, n);
    arg_line(&a, &dw), arg_line(&a, &db), clkit_arg_int(&a, flags);
    return clkit_plan_run(ctx, &pl, &a);
}

/* Groups of the backward's grid whose partial rows fit one allocation: 2 x groups x rows x N
   floats. */
static size_t fit_partials(clkit_context *ctx, size_t groups, unsigned rows, int64_t n)
{
    while (groups > 1 && 2.0 * (double)groups * rows * (double)n * sizeof(float) >
                             (double)ctx->props.max_alloc)
        groups = (groups + 1) / 2;
    return groups;
}

typedef struct bwd_args {
    const clkit_tensor *dy, *x, *weight, *mean, *rstd, *dx, *dweight, *dbias;
} bwd_args;

static clkit_status backward(clkit_context *ctx, const bwd_args *t)
{
    const clkit_tensor *x = t->x;
    rows_view rv[3] = {rows_of(t->dy), rows_of(x), rows_of(t->dx)};
    line_view wv = line_of(t->weight, x->buffer), mv = line_of(t->mean, x->buffer);
    line_view sv = line_of(t->rstd, x->buffer);
    int phase;
    unsigned vec = vector_width(rv, 3, x->dtype, &phase);
    bool grads = t->dweight || t->dbias;
    cl_int flags = (t->weight ? LN_HAS_W : 0) | (grads ? LN_WANT_DWDB : 0) |
                   (lines_aligned(&wv, &t->weight, 1, vec, phase) ? LN_WB_VEC : 0);
    row_problem rp = {x->shape[1], vec, phase, x->dtype, true, {0}};
    clkit_plan pl;
    cl_kernel k;
    clkit_status s = clkit_plan_kernel(ctx, plan_rows, &rp, &pl, &k);
    if (s) return s;
    const ln_plan plan = rp.rows;
    cl_long m = x->shape[0], n = x->shape[1];
    size_t groups = grid_groups(ctx, k, &plan, m, LN_BWD_REGS(plan.items));
    if (grads) groups = fit_partials(ctx, groups, plan.rows, n);
    cl_int parts = (cl_int)(groups * plan.rows);
    size_t part_bytes = grads ? 2 * (size_t)parts * (size_t)n * sizeof(float) : 0;
    cl_mem part = x->buffer;
    if (grads && (s = clkit_scratch_alloc(ctx, part_bytes, &part))) return s;
    clkit_args a = clkit_args_of(k);
    arg_rows(&a, &rv[0]), arg_rows(&a, &rv[1]);
    arg_line(&a, &wv), arg_line(&a, &mv), arg_line(&a, &sv);
    arg_rows(&a, &rv[2]), clkit_arg_mem(&a, part);
    arg_extent(&a, m, n, plan.loop);
    clkit_arg_int(&a, phase), clkit_arg_int(&a, flags);
    pl.global[0] = groups * pl.local[0];
    log_plan("layernorm backward", x, &plan, phase, groups);
    s = clkit_plan_run(ctx, &pl, &a);
    if (!s && grads) s = reduce_partials(ctx, part, parts, n, t->dweight, t->dbias);
    if (grads) clkit_scratch_release(ctx, part, part_bytes);
    return s;
}

static clkit_status check_backward(clkit_context *ctx, const bwd_args *t)
{
    const clkit_tensor *x = t->x;
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 2, 2, CLKIT_DT_FLOAT)) ||
        (s = check_rows(ctx, t->dy, "dy", x)) || (s = check_rows(ctx, t->dx, "dx", x)) ||
        (s = check_param(ctx, t->weight, "weight", x)) ||
        (s = check_line(ctx, t->mean, "mean", CLKIT_DT(CLKIT_F32), x->shape[0], "M")) ||
        (s = check_line(ctx, t->rstd, "rstd", CLKIT_DT(CLKIT_F32), x->shape[0], "M")) ||
        (s = check_param(ctx, t->dweight, "dweight", x)) ||
        (s = check_param(ctx, t->dbias, "dbias", x)) || (s = check_row_length(ctx, x)))
        return s;
    const named outs[] = {{t->dx, "dx"}, {t->dweight, "dweight"}, {t->dbias, "dbias"}};
    const named ins[] = {{t->dy, "dy"}, {x, "x"}, {t->weight, "weight"}, {t->mean, "mean"},
                         {t->rstd, "rstd"}};
    return check_outputs(ctx, outs, 3, ins, 5, t->dx, t->dy);
}

clkit_status clkit_layernorm_backward(clkit_context *ctx, const clkit_tensor *dy,
                                      const clkit_tensor *x, const clkit_tensor *weight,
                                      const clkit_tensor *mean, const clkit_tensor *rstd,
                                      const clkit_tensor *dx, const clkit_tensor *dweight,
                                      const clkit_tensor *dbias)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    const bwd_args t = {dy, x, weight, mean, rstd, dx, dweight, dbias};
    clkit_status s = check_backward(ctx, &t);
    if (s) return s;
    if (x->shape[0] > 0) return backward(ctx, &t);
    /* No rows: dx is empty and the column sums are zeros. */
    if (!(dweight || dbias) || x->shape[1] == 0) return CLKIT_OK;
    return reduce_partials(ctx, x->buffer, 0, x->shape[1], dweight, dbias);
}
