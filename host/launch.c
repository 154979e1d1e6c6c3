/* Kernel arguments, launches and the profiling span between clkit_profile_begin/_end. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

clkit_args clkit_args_of(cl_kernel k)
{
    clkit_args a = {k, 0, CL_SUCCESS, 0};
    return a;
}

void clkit_arg(clkit_args *a, size_t size, const void *value)
{
    if (a->err == CL_SUCCESS && (a->err = clSetKernelArg(a->k, a->n, size, value)) != CL_SUCCESS)
        a->err_at = a->n;
    a->n++;
}

void clkit_arg_mem(clkit_args *a, cl_mem m) { clkit_arg(a, sizeof m, &m); }
void clkit_arg_int(clkit_args *a, cl_int v) { clkit_arg(a, sizeof v, &v); }
void clkit_arg_uint(clkit_args *a, cl_uint v) { clkit_arg(a, sizeof v, &v); }
void clkit_arg_long(clkit_args *a, cl_long v) { clkit_arg(a, sizeof v, &v); }
void clkit_arg_long4(clkit_args *a, cl_long4 v) { clkit_arg(a, sizeof v, &v); }
void clkit_arg_float(clkit_args *a, float v) { clkit_arg(a, sizeof v, &v); }

static void kernel_name(cl_kernel k, char *name, size_t n)
{
    snprintf(name, n, "?");
    clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, n, name, NULL);
    name[n - 1] = 0;
}

static clkit_status check_args(clkit_context *ctx, const clkit_args *a)
{
    char name[128];
    cl_uint declared = 0;
    if (a->err == CL_SUCCESS && clGetKernelInfo(a->k, CL_KERNEL_NUM_ARGS, sizeof declared, &declared,
                                                NULL) == CL_SUCCESS && declared == a->n)
        return CLKIT_OK;
    kernel_name(a->k, name, sizeof name);
    if (a->err != CL_SUCCESS)
        return clkit_fail(ctx, CLKIT_ERR_OPENCL, "%s: clSetKernelArg(%u) failed with %s", name,
                          a->err_at, clkit_cl_error_name(a->err));
    return clkit_fail(ctx, CLKIT_ERR_OPENCL, "%s declares %u arguments, the host set %u", name,
                      declared, a->n);
}

clkit_status clkit_run(clkit_context *ctx, const clkit_args *a, cl_uint dims, const size_t *global,
                       const size_t *local)
{
    clkit_status s = check_args(ctx, a);
    if (s) return s;
    size_t wg = 1, limit = clkit_kernel_wg_limit(ctx, a->k);
    for (cl_uint d = 0; local && d < dims; d++) wg *= local[d];
    char name[128];
    if (wg > limit) {
        kernel_name(a->k, name, sizeof name);
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "%s runs at most %zu work-items per group; "
                          "the plan asks %zu", name, limit, wg);
    }
    cl_event ev = NULL;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, a->k, dims, NULL, global, local, 0, NULL,
                                        ctx->recording ? &ev : NULL);
    if (err != CL_SUCCESS) {
        kernel_name(a->k, name, sizeof name);
        return clkit_fail(ctx, err == CL_OUT_OF_RESOURCES ? CLKIT_ERR_OUT_OF_MEMORY : CLKIT_ERR_OPENCL,
                          "launching %s (global %zu, local %zu) failed with %s", name,
                          global[0], local ? local[0] : 0, clkit_cl_error_name(err));
    }
    clkit_record_event(ctx, ev);
    return CLKIT_OK;
}

static size_t plan_wg(const clkit_plan *plan)
{
    size_t wg = 1;
    for (cl_uint d = 0; d < plan->dims; d++) wg *= plan->local[0] ? plan->local[d] : 1;
    return wg;
}

clkit_status clkit_plan_kernel(clkit_context *ctx, clkit_plan_fn plan_fn, void *problem,
                               clkit_plan *plan, cl_kernel *k)
{
    clkit_path failed[CLKIT_PATH_COUNT];
    int nfailed = 0;
    size_t limit = 0;
    for (;;) {
        memset(plan, 0, sizeof *plan);
        plan->path = CLKIT_PATH_NONE;
        clkit_status s = plan_fn(ctx, problem, limit, plan);
        if (!s) s = clkit_get_kernel(ctx, plan->file, plan->name, plan->options, k);
        if (s == CLKIT_ERR_BUILD && plan->path != CLKIT_PATH_NONE && nfailed < CLKIT_PATH_COUNT) {
            clkit_path_failed(ctx, plan->path, plan->family);
            failed[nfailed++] = plan->path;
            continue;
        }
        for (int i = 0; s == CLKIT_ERR_BUILD && i < nfailed; i++)
            clkit_path_acquit(ctx, failed[i], plan->family);
        if (s) return s;
        if (plan->path != CLKIT_PATH_NONE && !clkit_path_proven(ctx, plan->path, plan->family)) continue;
        size_t wg = plan_wg(plan), kernel_limit = clkit_kernel_wg_limit(ctx, *k);
        if (wg <= kernel_limit) return CLKIT_OK;
        if (limit && kernel_limit >= limit)
            return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "%s: no plan fits the kernel's limit of "
                              "%zu work-items per group", plan->name, kernel_limit);
        clkit_log(CLKIT_LOG_DEBUG, "%s: kernel limit %zu < %zu work-items, planning again",
                  plan->name, kernel_limit, wg);
        limit = kernel_limit;
    }
}

const char *clkit_plan_path(const clkit_context *ctx, clkit_plan *plan, clkit_path path,
                            clkit_family family, const char *portable)
{
    bool allowed = clkit_path_allowed(ctx, path, family);
    plan->path = allowed ? path : CLKIT_PATH_NONE;
    plan->family = family;
    return ctx->path_on[path] && !allowed ? portable : "";
}

clkit_status clkit_plan_run(clkit_context *ctx, const clkit_plan *plan, const clkit_args *a)
{
    return clkit_run(ctx, a, plan->dims, plan->global, plan->local[0] ? plan->local : NULL);
}

clkit_status clkit_launch_pointwise(clkit_context *ctx, const char *file, const char *base,
                                    const char *options, int n, const clkit_tensor *const *ts,
                                    clkit_extra_args extra, const void *user)
{
    clkit_view v[8];
    int ndim;
    clkit_views(n, ts, v, &ndim);
    bool dense = true;
    for (int i = 0; i < n; i++) dense = dense && clkit_view_is_dense(&v[i], ndim);
    char name[64];
    snprintf(name, sizeof name, "%s_%s", base, dense ? "dense" : "strided");
    cl_kernel k;
    clkit_status s = clkit_get_kernel(ctx, file, name, options, &k);
    if (s) return s;
    clkit_args a = clkit_args_of(k);
    for (int i = 0; i < n; i++) {
        clkit_arg_mem(&a, ts[i]->buffer);
        clkit_arg_long(&a, v[i].offset);
        if (!dense) clkit_arg_long4(&a, v[i].strides);
    }
    cl_long count = clkit_numel(ts[0]);
    if (!dense) clkit_arg_long4(&a, v[0].shape);
    clkit_arg_long(&a, count);
    if (extra) extra(&a, user);
    size_t wg = clkit_stream_wg(&ctx->props, clkit_kernel_wg_limit(ctx, k));
    uint64_t items = dense ? ((uint64_t)count + 3) / 4 : (uint64_t)count;
    size_t global = clkit_stream_groups(&ctx->props, items, wg) * wg;
    return clkit_run(ctx, &a, 1, &global, &wg);
}

void clkit_record_event(clkit_context *ctx, cl_event ev)
{
    if (!ev) return;
    if (!ctx->recording) {
        clReleaseEvent(ev);
        return;
    }
    if (!ctx->first_event) {
        ctx->first_event = ev;
        clRetainEvent(ev);
    }
    if (ctx->last_event) clReleaseEvent(ctx->last_event);
    ctx->last_event = ev;
}

/* A kernel declaring reqd_work_group_size builds only for a size the compiler commits to
   running, so that size is its limit: NVIDIA's driver (580) still answers
   CL_KERNEL_WORK_GROUP_SIZE with 256 for such kernels while 1024 runs. Other kernels get the
   driver's answer. */
size_t clkit_kernel_wg_limit(clkit_context *ctx, cl_kernel k)
{
    size_t compiled[3] = {0, 0, 0};
    if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof compiled,
                                 compiled, NULL) == CL_SUCCESS) {
        size_t n = compiled[0] * compiled[1] * compiled[2];
        if (n && n <= ctx->props.max_work_group) return n;
    }
    size_t wg = 0;
    if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) !=
            CL_SUCCESS || wg == 0)
        wg = ctx->props.max_work_group;
    return wg < ctx->props.max_work_group ? wg : ctx->props.max_work_group;
}

void clkit_kernel_mem(clkit_context *ctx, cl_kernel k, uint64_t *local, uint64_t *priv)
{
    cl_ulong l = 0, p = 0;
    clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof l, &l, NULL);
    clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof p, &p, NULL);
    *local = l;
    *priv = p;
}

static void drop_events(clkit_context *ctx)
{
    if (ctx->first_event) clReleaseEvent(ctx->first_event);
    if (ctx->last_event) clReleaseEvent(ctx->last_event);
    ctx->first_event = ctx->last_event = NULL;
}

clkit_status clkit_profile_begin(clkit_context *ctx)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!ctx->profiling)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED,
                          "profiling needs a queue made with profiling on (clkit_options.profiling)");
    drop_events(ctx);
    ctx->recording = true;
    return CLKIT_OK;
}

clkit_status clkit_profile_end(clkit_context *ctx, double *ms)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!ms) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "ms is NULL");
    *ms = 0;
    if (!ctx->recording) return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "no clkit_profile_begin");
    ctx->recording = false;
    if (!ctx->first_event) return CLKIT_OK;
    cl_int err = clWaitForEvents(1, &ctx->last_event);
    cl_ulong start = 0, end = 0;
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(ctx->first_event, CL_PROFILING_COMMAND_START, sizeof start,
                                      &start, NULL);
    if (err == CL_SUCCESS)
        err = clGetEventProfilingInfo(ctx->last_event, CL_PROFILING_COMMAND_END, sizeof end, &end,
                                      NULL);
    drop_events(ctx);
    if (err != CL_SUCCESS) return clkit_cl_fail(ctx, err, "clGetEventProfilingInfo");
    *ms = end > start ? (double)(end - start) * 1e-6 : 0.0;
    return CLKIT_OK;
}
