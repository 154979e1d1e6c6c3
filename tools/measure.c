/* Measuring one bench row: first calls, then do_bench-style repeats. */
#include "measure.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tool.h"

/* ---- the temporary cache directory of one row ---- */

static clkit_status make_cache_dir(char *dir, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, n, "%s/clkit-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? CLKIT_OK
                        : op_fail(CLKIT_ERR_IO, "cannot make a temporary cache directory");
}

/* The binary cache writes plain files and no subdirectories. */
static void remove_cache_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char path[4400];
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- first calls ---- */

/* Wall time of the first call of p in a new context over cache_dir. */
static clkit_status first_call(const char *device, const char *cache_dir, op_problem *p,
                               double *ms)
{
    clkit_context *ctx;
    clkit_status s = tool_open(&ctx, device, cache_dir, 0);
    if (s) return op_fail(s, "opening a new context on the device");
    s = op_alloc(ctx, p);
    double t0 = tool_now_ms();
    if (!s) s = op_call(ctx, p);
    if (!s) s = op_status(ctx, clkit_finish(ctx));
    *ms = tool_now_ms() - t0;
    op_free(p);
    clkit_context_release(ctx);
    return s;
}

clkit_status measure_first_calls(const char *device, op_problem *p, measurement *m)
{
    char dir[4096];
    clkit_status s = make_cache_dir(dir, sizeof dir);
    if (s) return s;
    s = first_call(device, dir, p, &m->cold_ms);
    if (!s) s = first_call(device, dir, p, &m->warm_ms);
    remove_cache_dir(dir);
    return s;
}

/* ---- repeats ---- */

clkit_status measure_flush_buffer(clkit_context *ctx, uint64_t bytes, cl_mem *out)
{
    cl_context c;
    clkit_context_cl(ctx, &c, NULL, NULL);
    cl_int err;
    *out = clCreateBuffer(c, CL_MEM_READ_WRITE, (size_t)bytes, NULL, &err);
    return *out ? CLKIT_OK : op_cl_fail(err, "clCreateBuffer (cache flush scratch)");
}

/* One call timed by its kernels' profiling events; the flush runs before the span opens. */
static clkit_status timed_call(clkit_context *ctx, const op_problem *p, cl_mem flush,
                               double *ms)
{
    if (flush) {
        static const cl_uint zero = 0;
        cl_command_queue q;
        size_t bytes = 0;
        clkit_context_cl(ctx, NULL, &q, NULL);
        clGetMemObjectInfo(flush, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
        cl_int err = clEnqueueFillBuffer(q, flush, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
        if (err != CL_SUCCESS) return op_cl_fail(err, "clEnqueueFillBuffer (cache flush)");
    }
    clkit_status s = op_status(ctx, clkit_profile_begin(ctx));
    if (s) return s;
    s = op_call(ctx, p);
    /* End the span even after a failed call, so the context stops recording. */
    clkit_status e = op_status(ctx, clkit_profile_end(ctx, ms));
    return s ? s : e;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Quantile q of sorted v with linear interpolation, as torch.quantile in do_bench. */
static double quantile(const double *v, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    return i + 1 < n ? v[i] + (pos - i) * (v[i + 1] - v[i]) : v[n - 1];
}

static int clamp_reps(double want, int lo, int hi)
{
    return want < lo ? lo : want > hi ? hi : (int)want;
}

/* do_bench: estimate one call from a few, warm up for warmup_ms, then time rep_ms worth of
   calls, each after a cache flush. */
static clkit_status time_repeats(clkit_context *ctx, const op_problem *p,
                                 const measure_budget *b, cl_mem flush, measurement *m)
{
    double est[3];
    clkit_status s = CLKIT_OK;
    for (int i = 0; i < 3 && !s; i++) s = timed_call(ctx, p, flush, &est[i]);
    if (s) return s;
    qsort(est, 3, sizeof *est, cmp_double);
    double per = est[1] > 1e-4 ? est[1] : 1e-4;
    int warm = clamp_reps(b->warmup_ms / per, 1, b->max_reps);
    int reps = b->fixed_reps ? b->fixed_reps
                             : clamp_reps(b->rep_ms / per, b->min_reps, b->max_reps);
    for (int i = 0; i < warm && !s; i++) s = op_call(ctx, p);
    if (!s) s = op_status(ctx, clkit_finish(ctx));
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!ms && !s) s = op_fail(CLKIT_ERR_OUT_OF_MEMORY, "repeat times");
    int n = 0;
    for (double start = tool_now_ms(); !s && n < reps;) {
        s = timed_call(ctx, p, flush, &ms[n++]);
        if (!b->fixed_reps && n >= b->min_reps && tool_now_ms() - start > b->wall_ms) break;
    }
    if (!s) {
        qsort(ms, (size_t)n, sizeof *ms, cmp_double);
        m->ms_median = quantile(ms, n, 0.5);
        m->ms_p20 = quantile(ms, n, 0.2);
        m->ms_p80 = quantile(ms, n, 0.8);
        m->reps = n;
    }
    free(ms);
    return s;
}

clkit_status measure_repeats(clkit_context *ctx, op_problem *p, const measure_budget *b,
                             cl_mem flush, measurement *m)
{
    /* The first call builds the programs, or loads them from the cache, untimed. */
    clkit_status s = op_alloc(ctx, p);
    if (!s) s = op_call(ctx, p);
    if (!s) s = time_repeats(ctx, p, b, flush, m);
    op_free(p);
    return s;
}
