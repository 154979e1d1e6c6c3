/* Measuring one bench row: first calls, then do_bench-style repeats. */
#include "measure.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tool.h"

/* ---- a temporary binary cache directory ---- */

clkit_status measure_temp_dir(char *dir, size_t n)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, n, "%s/clkit-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? CLKIT_OK
                        : op_fail(CLKIT_ERR_IO, "cannot make a temporary cache directory");
}

/* The caches write plain files and no subdirectories. */
void measure_remove_dir(const char *dir)
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
    clkit_status s = measure_temp_dir(dir, sizeof dir);
    if (s) return s;
    s = first_call(device, dir, p, &m->cold_ms);
    if (!s) s = first_call(device, dir, p, &m->warm_ms);
    measure_remove_dir(dir);
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

/* Wall-clock time per call of `batch` calls enqueued back to back and waited for once. */
static clkit_status wall_batch(clkit_context *ctx, const op_problem *p, int batch, double *ms)
{
    double t0 = tool_now_ms();
    clkit_status s = CLKIT_OK;
    for (int i = 0; i < batch && !s; i++) s = op_call(ctx, p);
    if (!s) s = op_status(ctx, clkit_finish(ctx));
    *ms = (tool_now_ms() - t0) / batch;
    return s;
}

/* The counts of one measurement. */
typedef struct plan {
    int warm, reps;
    int batch;  /* calls per repeat by wall clock; 0: one call per repeat, timed by events */
} plan;

static clkit_status time_one(clkit_context *ctx, const op_problem *p, const plan *pl,
                             cl_mem flush, double *ms)
{
    return pl->batch ? wall_batch(ctx, p, pl->batch, ms) : timed_call(ctx, p, flush, ms);
}

/* do_bench's plan: the warm-up and repeat counts that fill the budget, from the median of a
   few timed calls. By wall clock a repeat is a batch long enough for min_reps of them to fill
   the budget, so that launch latency overlaps as in a real workload. */
static clkit_status plan_repeats(clkit_context *ctx, const op_problem *p, const measure_budget *b,
                                 measure_method how, cl_mem flush, plan *pl)
{
    double est[3];
    clkit_status s = CLKIT_OK;
    pl->batch = how == MEASURE_WALL;
    for (int i = 0; i < 3 && !s; i++) s = time_one(ctx, p, pl, flush, &est[i]);
    if (s) return s;
    qsort(est, 3, sizeof *est, cmp_double);
    double per = est[1] > 1e-4 ? est[1] : 1e-4;
    if (pl->batch) pl->batch = clamp_reps(b->rep_ms / b->min_reps / per, 1, 1000);
    double per_rep = per * (pl->batch ? pl->batch : 1);
    pl->warm = clamp_reps(b->warmup_ms / per, 1, b->max_reps);
    pl->reps = b->fixed_reps ? b->fixed_reps
                             : clamp_reps(b->rep_ms / per_rep, b->min_reps, b->max_reps);
    return CLKIT_OK;
}

/* do_bench: warm up, then time each repeat; median and quantiles. */
static clkit_status time_repeats(clkit_context *ctx, const op_problem *p,
                                 const measure_budget *b, measure_method how, cl_mem flush,
                                 measurement *m)
{
    plan pl;
    int n = 0;
    clkit_status s = plan_repeats(ctx, p, b, how, flush, &pl);
    for (int i = 0; !s && i < pl.warm; i++) s = op_call(ctx, p);
    if (!s) s = op_status(ctx, clkit_finish(ctx));
    double *ms = s ? NULL : malloc((size_t)pl.reps * sizeof *ms);
    if (!ms && !s) s = op_fail(CLKIT_ERR_OUT_OF_MEMORY, "repeat times");
    for (double start = tool_now_ms(); !s && n < pl.reps;) {
        s = time_one(ctx, p, &pl, flush, &ms[n++]);
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
                             measure_method how, cl_mem flush, measurement *m)
{
    /* The first call builds the programs, or loads them from the cache, untimed. Its scratch
       peak counts from after op_alloc, whose prepare may call ops too. */
    clkit_status s = op_alloc(ctx, p);
    clkit_scratch_peak(ctx, 1);
    if (!s) s = op_call(ctx, p);
    if (!s) m->scratch_bytes = (double)clkit_scratch_peak(ctx, 1);
    if (!s) s = time_repeats(ctx, p, b, how, flush, m);
    op_free(p);
    return s;
}
