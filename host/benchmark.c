/* clkit_benchmark: timing a caller's function the way triton.testing.do_bench times one, the
   measurement that `clkit bench` makes of every row (tools/measure.c calls it).

   A few calls first estimate the time of one; from it come the warm-up and repeat counts
   that fill the budget. Each timed repeat starts from a cold cache: a buffer larger than the
   last-level cache is written before it, outside the timed span. */
#define _GNU_SOURCE
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Triton's do_bench writes 256 MiB between repeats to evict a GPU's L2. */
#define FLUSH_GPU_BYTES (256ull << 20)
#define FLUSH_CPU_MIN_BYTES (64ull << 20)
/* Calls timed to plan the warm-up and the repeats: their median. */
#define ESTIMATE_CALLS 3
/* Back-to-back calls in one batched repeat at most. */
#define MAX_BATCH 1000

clkit_benchmark_options clkit_benchmark_defaults(void)
{
    clkit_benchmark_options o;
    memset(&o, 0, sizeof o);
    o.timing = CLKIT_TIMING_AUTO;
    o.warmup_ms = 25;
    o.rep_ms = 100;
    o.wall_limit_ms = 1000;
    o.min_reps = 10;
    o.max_reps = 200;
    o.flush = 1;
    return o;
}

/* One run of clkit_benchmark: its settings resolved, and what it counts. */
typedef struct bench {
    clkit_context *ctx;
    clkit_benchmark_fn fn;
    void *user;
    const clkit_benchmark_options *opt;
    clkit_timing timing;
    cl_mem flush;          /* NULL: no flush */
    cl_mem made;           /* the flush buffer when this call made it */
    size_t flush_bytes;    /* written of it, a multiple of the fill pattern */
    int batch;             /* calls per timed repeat */
    int calls;
} bench;

static double now_ms(void) { return 1e3 * clkit_now_s(); }

/* A call of fn. Where it fails, its message stays on the context (a clkit op's), or one is
   made that names the call. */
static clkit_status call(bench *b)
{
    b->calls++;
    clkit_status s = b->fn(b->ctx, b->user);
    if (s && !b->ctx->error[0])
        clkit_fail(b->ctx, s, "the benchmarked function failed on its call %d", b->calls);
    return s;
}

/* Closes the profiling span after a call that returned s; a failed call's message outlives
   clkit_profile_end, which clears the context's. */
static clkit_status end_span(bench *b, clkit_status s, double *ms)
{
    if (!s) return clkit_profile_end(b->ctx, ms);
    char *saved = strdup(b->ctx->error);
    clkit_profile_end(b->ctx, ms);
    if (saved) memcpy(b->ctx->error, saved, strlen(saved) + 1);
    free(saved);
    return s;
}

static clkit_status flush(bench *b)
{
    static const cl_uint zero = 0;
    if (!b->flush) return CLKIT_OK;
    cl_int err = clEnqueueFillBuffer(b->ctx->queue, b->flush, &zero, sizeof zero, 0,
                                     b->flush_bytes, 0, NULL, NULL);
    return err == CL_SUCCESS ? CLKIT_OK : clkit_cl_fail(b->ctx, err, "clEnqueueFillBuffer (flush)");
}

/* One timed repeat: per call, in ms. */
static clkit_status time_one(bench *b, int batch, double *ms)
{
    clkit_status s;
    double t0;
    switch (b->timing) {
    case CLKIT_TIMING_EVENTS:
        /* The flush runs before the span opens: the span holds the kernels of fn's ops. */
        if ((s = flush(b)) || (s = clkit_profile_begin(b->ctx))) return s;
        return end_span(b, call(b), ms);
    case CLKIT_TIMING_WALL:
        if ((s = flush(b)) || (s = clkit_finish(b->ctx))) return s;
        t0 = now_ms();
        if (!(s = call(b))) s = clkit_finish(b->ctx);
        *ms = now_ms() - t0;
        return s;
    default:
        /* Batched: launches overlap the work of the calls before them, as in a real
           workload, so no flush comes between them. */
        t0 = now_ms();
        s = CLKIT_OK;
        for (int i = 0; i < batch && !s; i++) s = call(b);
        if (!s) s = clkit_finish(b->ctx);
        *ms = (now_ms() - t0) / batch;
        return s;
    }
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

static int clamp_count(double want, int lo, int hi)
{
    return want < lo ? lo : want > hi ? hi : (int)want;
}

/* do_bench's plan: from the median of a few timed calls, the warm-up and repeat counts that
   fill the budget; batched, a repeat is a batch long enough for min_reps of them to fill it. */
static clkit_status plan(bench *b, int *warm, int *reps)
{
    const clkit_benchmark_options *o = b->opt;
    double est[ESTIMATE_CALLS];
    clkit_status s = CLKIT_OK;
    for (int i = 0; i < ESTIMATE_CALLS && !s; i++) s = time_one(b, 1, &est[i]);
    if (s) return s;
    qsort(est, ESTIMATE_CALLS, sizeof *est, cmp_double);
    double per = est[ESTIMATE_CALLS / 2] > 1e-4 ? est[ESTIMATE_CALLS / 2] : 1e-4;
    b->batch = b->timing == CLKIT_TIMING_WALL_BATCHED
                   ? clamp_count(o->rep_ms / o->min_reps / per, 1, MAX_BATCH) : 1;
    *warm = clamp_count(o->warmup_ms / per, 1, o->max_reps);
    *reps = o->reps ? o->reps : clamp_count(o->rep_ms / (per * b->batch), o->min_reps, o->max_reps);
    return CLKIT_OK;
}

static void summarise(const clkit_benchmark_options *o, double *ms, int n,
                      clkit_benchmark_result *res)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += ms[i];
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    res->median_ms = quantile(ms, n, 0.5);
    res->p20_ms = quantile(ms, n, 0.2);
    res->p80_ms = quantile(ms, n, 0.8);
    res->min_ms = ms[0];
    res->max_ms = ms[n - 1];
    res->mean_ms = sum / n;
    for (int i = 0; i < o->nquantiles; i++) res->quantile_ms[i] = quantile(ms, n, o->quantiles[i]);
    res->reps = n;
}

static clkit_status run(bench *b, clkit_benchmark_result *res)
{
    const clkit_benchmark_options *o = b->opt;
    int warm, reps, n = 0;
    clkit_status s = plan(b, &warm, &reps);
    for (int i = 0; !s && i < warm; i++) s = call(b);
    if (!s) s = clkit_finish(b->ctx);
    if (s) return s;
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!ms) return clkit_fail(b->ctx, CLKIT_ERR_OUT_OF_MEMORY, "%d repeat times", reps);
    for (double start = now_ms(); !s && n < reps;) {
        s = time_one(b, b->batch, &ms[n++]);
        if (!o->reps && o->wall_limit_ms > 0 && n >= o->min_reps &&
            now_ms() - start > o->wall_limit_ms)
            break;
    }
    if (!s) {
        summarise(o, ms, n, res);
        res->warmup = warm;
        res->batch = b->batch;
    }
    free(ms);
    return s;
}

static bool is_budget(double v)
{
    return isfinite(v) && v >= 0;
}

static clkit_status check_options(clkit_context *ctx, const clkit_benchmark_options *o)
{
    static const uint64_t zero[sizeof o->reserved / sizeof o->reserved[0]];
    if (memcmp(o->reserved, zero, sizeof zero))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "reserved options are set: a newer "
                          "clkit.h than this library (%s) knows", clkit_version());
    if ((unsigned)o->timing > CLKIT_TIMING_WALL_BATCHED)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "timing %d is no clkit_timing",
                          (int)o->timing);
    if (!is_budget(o->warmup_ms) || !is_budget(o->rep_ms) || !is_budget(o->wall_limit_ms))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "warmup_ms %g, rep_ms %g and "
                          "wall_limit_ms %g must be finite and >= 0", o->warmup_ms, o->rep_ms,
                          o->wall_limit_ms);
    if (o->min_reps < 1 || o->max_reps < o->min_reps || o->reps < 0)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "min_reps %d, max_reps %d, reps %d: "
                          "1 <= min_reps <= max_reps and reps >= 0", o->min_reps, o->max_reps,
                          o->reps);
    if (o->nquantiles < 0 || o->nquantiles > CLKIT_BENCHMARK_MAX_QUANTILES)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "nquantiles %d outside 0..%d",
                          o->nquantiles, CLKIT_BENCHMARK_MAX_QUANTILES);
    for (int i = 0; i < o->nquantiles; i++)
        if (!(o->quantiles[i] >= 0 && o->quantiles[i] <= 1))
            return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "quantiles[%d] = %g is outside "
                              "[0, 1]", i, o->quantiles[i]);
    if (o->flush_bytes > ctx->props.max_alloc)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "flush_bytes %llu exceeds the device's "
                          "largest allocation, %llu", (unsigned long long)o->flush_bytes,
                          (unsigned long long)ctx->props.max_alloc);
    if (o->timing == CLKIT_TIMING_EVENTS && !ctx->profiling)
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "CLKIT_TIMING_EVENTS needs a queue made "
                          "with profiling on (clkit_options.profiling)");
    if (ctx->recording)
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "inside a clkit_profile_begin span, "
                          "whose events the benchmark would take over");
    return CLKIT_OK;
}

/* 256 MiB as do_bench on a GPU. A CPU writes 256 MiB in some 0.1 s, which would dominate a
   quick run: twice its last-level cache evicts it as well, and at least 64 MiB in case the
   driver reports a smaller level. Never more than one allocation may hold. */
uint64_t clkit_benchmark_flush_bytes(const clkit_context *ctx)
{
    if (!ctx) return 0;
    cl_ulong cache = 0;
    uint64_t bytes = FLUSH_GPU_BYTES;
    if (ctx->props.is_cpu &&
        clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache,
                        NULL) == CL_SUCCESS && cache && 2 * cache < bytes)
        bytes = 2 * cache > FLUSH_CPU_MIN_BYTES ? 2 * cache : FLUSH_CPU_MIN_BYTES;
    return bytes < ctx->props.max_alloc ? bytes : ctx->props.max_alloc;
}

/* The caller's flush buffer, written whole, or a new one of flush_bytes. */
static clkit_status flush_buffer(bench *b)
{
    const clkit_benchmark_options *o = b->opt;
    size_t bytes = 0;
    cl_int err;
    if (!o->flush || b->timing == CLKIT_TIMING_WALL_BATCHED) return CLKIT_OK;
    if (o->flush_buffer) {
        cl_context c = NULL;
        err = clGetMemObjectInfo(o->flush_buffer, CL_MEM_CONTEXT, sizeof c, &c, NULL);
        if (err == CL_SUCCESS)
            err = clGetMemObjectInfo(o->flush_buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
        if (err != CL_SUCCESS || c != b->ctx->cl)
            return clkit_fail(b->ctx, CLKIT_ERR_INVALID_VALUE, "flush_buffer is not a buffer "
                              "of the context's cl_context");
        b->flush = o->flush_buffer;
    } else {
        bytes = (size_t)(o->flush_bytes ? o->flush_bytes : clkit_benchmark_flush_bytes(b->ctx));
        b->flush = b->made = clCreateBuffer(b->ctx->cl, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!b->flush) return clkit_cl_fail(b->ctx, err, "clCreateBuffer (flush)");
    }
    b->flush_bytes = bytes / sizeof(cl_uint) * sizeof(cl_uint);
    if (!b->flush_bytes) b->flush = NULL;
    return CLKIT_OK;
}

clkit_status clkit_benchmark(clkit_context *ctx, clkit_benchmark_fn fn, void *user,
                             const clkit_benchmark_options *opt, clkit_benchmark_result *res)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!fn) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "fn is NULL");
    if (!res) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "res is NULL");
    memset(res, 0, sizeof *res);
    clkit_benchmark_options defaults = clkit_benchmark_defaults();
    if (!opt) opt = &defaults;
    clkit_status s = check_options(ctx, opt);
    if (s) return s;
    bench b = {ctx, fn, user, opt, opt->timing, NULL, NULL, 0, 1, 0};
    if (b.timing == CLKIT_TIMING_AUTO)
        b.timing = ctx->profiling ? CLKIT_TIMING_EVENTS : CLKIT_TIMING_WALL;
    s = flush_buffer(&b);
    if (!s) s = run(&b, res);
    if (b.made) clReleaseMemObject(b.made);
    res->timing = b.timing;
    res->calls = b.calls;
    res->flush_bytes = b.flush ? b.flush_bytes : 0;
    return s;
}
