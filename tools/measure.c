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

/* The call clkit_benchmark times. A failure of op_call has its message in op_error already;
   one of clkit_benchmark itself (a flush, a wait) is taken from the context after. */
typedef struct bench_call {
    const op_problem *p;
    int failed;
} bench_call;

static clkit_status call_op(clkit_context *ctx, void *user)
{
    bench_call *c = user;
    clkit_status s = op_call(ctx, c->p);
    c->failed = s != CLKIT_OK;
    return s;
}

/* do_bench through the library: warm-up, then each repeat timed; median and quantiles. */
static clkit_status time_repeats(clkit_context *ctx, const op_problem *p,
                                 const measure_budget *b, measure_method how, cl_mem flush,
                                 measurement *m)
{
    clkit_benchmark_options o = clkit_benchmark_defaults();
    o.timing = how == MEASURE_WALL ? CLKIT_TIMING_WALL_BATCHED : CLKIT_TIMING_EVENTS;
    o.warmup_ms = b->warmup_ms;
    o.rep_ms = b->rep_ms;
    o.wall_limit_ms = b->wall_ms;
    o.min_reps = b->min_reps;
    o.max_reps = b->max_reps;
    o.reps = b->fixed_reps;
    o.flush = flush != NULL;
    o.flush_buffer = flush;
    bench_call c = {p, 0};
    clkit_benchmark_result r;
    clkit_status s = clkit_benchmark(ctx, call_op, &c, &o, &r);
    if (s) return c.failed ? s : op_status(ctx, s);
    m->ms_median = r.median_ms;
    m->ms_p20 = r.p20_ms;
    m->ms_p80 = r.p80_ms;
    m->reps = r.reps;
    return CLKIT_OK;
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
