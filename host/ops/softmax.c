/* clkit_softmax: row-wise softmax over the last dimension of (M, N), see cl/softmax.cl.

   The plan (team, rows per group, values per work-item, on chip or online) comes from the row
   length, the layout and the device; the grid from the built kernel: as many groups as the
   compute units hold by work-items and the kernel's local memory, each looping over rows. */
#include "../internal.h"

#include <stdio.h>

/* A 2-D view as the kernels take it: offsets and strides in elements. */
typedef struct layout {
    cl_long x_off, x_rs, x_cs, o_off, o_rs, o_cs, m, n;
} layout;

static layout make_layout(const clkit_tensor *x, const clkit_tensor *out)
{
    size_t es = clkit_dtype_size(x->dtype);
    layout l = {(cl_long)(x->offset / es), x->strides[0], x->strides[1],
                (cl_long)(out->offset / es), out->strides[0], out->strides[1],
                x->shape[0], x->shape[1]};
    /* Strides of a dim of extent 1 are never applied: normalise them so they cannot stop the
       vector path. */
    if (l.m == 1) l.x_rs = l.o_rs = 0;
    if (l.n == 1) l.x_cs = l.o_cs = 1;
    return l;
}

static int64_t mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }

/* 16-byte loads and stores need unit columns and the same alignment phase in x and out, so
   one position grid serves both. */
static unsigned vector_width(const layout *l, clkit_dtype dtype)
{
    int64_t vec = 16 / (int64_t)clkit_dtype_size(dtype);
    if (l->x_cs != 1 || l->o_cs != 1) return 1;
    if (mod(l->x_off - l->o_off, vec) || mod(l->x_rs - l->o_rs, vec)) return 1;
    return (unsigned)vec;
}

/* Positions a row occupies: its elements, plus up to vec - 1 masked ones before it when
   rows start off alignment. */
static int64_t row_span(const layout *l, unsigned vec)
{
    bool aligned = l->x_off % vec == 0 && mod(l->x_rs, vec) == 0;
    return l->n + (aligned ? 0 : vec - 1);
}

typedef struct problem {
    const layout *l;
    clkit_dtype dtype;
    clkit_softmax_plan rows; /* the plan's row layout, for the launch */
} problem;

/* The heuristic's row layout within wg_limit. NVIDIA's build reduces with inline PTX
   shuffles; SOFTMAX_PORTABLE (or any other device) without them. */
static clkit_status plan_softmax(clkit_context *ctx, void *arg, size_t wg_limit, clkit_plan *plan)
{
    problem *p = arg;
    unsigned vec = vector_width(p->l, p->dtype);
    const clkit_softmax_plan r = p->rows = clkit_softmax_heuristic(&ctx->props, row_span(p->l, vec), vec, wg_limit);
    const char *portable = clkit_plan_path(ctx, plan, CLKIT_PATH_NV_SHUFFLE, CLKIT_FAMILY_SOFTMAX,
                                           " -D SOFTMAX_PORTABLE");
    plan->file = "softmax.cl";
    snprintf(plan->name, sizeof plan->name, "%s", r.online ? "softmax_online" : "softmax_rows");
    snprintf(plan->options, sizeof plan->options, "%s -D TEAM=%u -D ROWS=%u -D ITEMS=%u -D VEC=%u -D ONLINE=%d%s",
             clkit_dtype_macro(p->dtype), r.team, r.rows, r.items, r.vec, r.online, portable);
    plan->dims = 1;
    plan->local[0] = (size_t)r.team * r.rows;
    return CLKIT_OK;
}

static clkit_status launch(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out,
                           const layout *l)
{
    problem p = {l, x->dtype, {0}};
    clkit_plan pl;
    cl_kernel k;
    clkit_status s = clkit_plan_kernel(ctx, plan_softmax, &p, &pl, &k);
    if (s) return s;
    const clkit_softmax_plan plan = p.rows;
    clkit_args a = clkit_args_of(k);
    clkit_arg_mem(&a, x->buffer), clkit_arg_long(&a, l->x_off);
    clkit_arg_long(&a, l->x_rs), clkit_arg_long(&a, l->x_cs);
    clkit_arg_mem(&a, out->buffer), clkit_arg_long(&a, l->o_off);
    clkit_arg_long(&a, l->o_rs), clkit_arg_long(&a, l->o_cs);
    clkit_arg_long(&a, l->m);
    if (plan.online) clkit_arg_long(&a, l->n);
    else clkit_arg_int(&a, (cl_int)l->n);
    size_t wg = pl.local[0];
    uint64_t local_bytes, private_bytes;
    clkit_kernel_mem(ctx, k, &local_bytes, &private_bytes);
    /* Registers are left out: no OpenCL query reports them, and on NVIDIA a grid sized by
       threads and local memory alone, which oversubscribes where registers bind, ran faster
       than one sized to the registers (measurements:
       docs/layernorm-softmax.md#measurements-behind-the-code). */
    unsigned occupancy = clkit_occupancy(&ctx->props, wg, local_bytes, 0);
    uint64_t tasks = ((uint64_t)l->m + plan.rows - 1) / plan.rows;
    pl.global[0] = clkit_persistent_groups(&ctx->props, occupancy, tasks) * wg;
    clkit_log(CLKIT_LOG_DEBUG,
              "softmax %lldx%lld %s: team %u rows %u items %u vec %u%s, %zu groups (occupancy %u, "
              "local %llu B, private %llu B)",
              (long long)l->m, (long long)l->n, clkit_dtype_name(x->dtype), plan.team, plan.rows,
              plan.items, plan.vec, plan.online ? " online" : "", pl.global[0] / wg, occupancy,
              (unsigned long long)local_bytes, (unsigned long long)private_bytes);
    return clkit_plan_run(ctx, &pl, &a);
}

/* The softmax of an empty row is undefined (a sum of no exponentials): rows must have
   elements unless there are no rows, as layer norm's. */
static clkit_status check_row_length(clkit_context *ctx, const clkit_tensor *x)
{
    if (x->shape[1] > 0 || x->shape[0] == 0) return CLKIT_OK;
    return clkit_fail(ctx, CLKIT_ERR_SHAPE, "x is %lld x 0: softmax needs N > 0",
                      (long long)x->shape[0]);
}

clkit_status clkit_softmax(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    clkit_status s;
    if ((s = clkit_check_tensor(ctx, x, "x", 2, 2, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_tensor(ctx, out, "out", 2, 2, CLKIT_DT_FLOAT)) ||
        (s = clkit_check_same_shape(ctx, x, "x", out, "out")))
        return s;
    if (x->dtype != out->dtype)
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "x (%s) and out (%s) must share a dtype",
                          clkit_dtype_name(x->dtype), clkit_dtype_name(out->dtype));
    if ((s = check_row_length(ctx, x)) || (s = clkit_check_output(ctx, out, "out")) ||
        (s = clkit_check_disjoint(ctx, out, "out", x, "x", true)))
        return s;
    if (clkit_numel(x) == 0) return CLKIT_OK;
    layout l = make_layout(x, out);
    return launch(ctx, x, out, &l);
}
