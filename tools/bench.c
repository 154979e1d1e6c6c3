/* clkit bench: the tutorials' bandwidth tables on the chosen device. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "tool.h"

/* Triton's do_bench flushes L2 by writing a 256 MiB buffer between repeats. */
#define FLUSH_BYTES (256ull << 20)
#define MIN_FLUSH_BYTES (64ull << 20)

/* do_bench's 25 ms warm-up and 100 ms of repeats, capped so that a full run over some 150
   rows takes minutes on a GPU; quick keeps a CPU run to seconds. */
static const measure_budget full_budget = {25, 100, 1000, 10, 200, 0};
static const measure_budget quick_budget = {5, 20, 250, 5, 30, 0};

typedef struct bench_opts {
    const char *device, *op, *plot;
    clkit_dtype dtype;
    int quick, reps;
    out_format format;
    uint64_t flush;  /* bytes written between repeats */
} bench_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: clkit bench [--op add|softmax|dropout|copy|grayscale|all] [--dtype f32|f16|bf16]\n"
            "                   [--quick] [--reps N] [--csv | --json] [--plot FILE.png]\n"
            "                   [--device D]\n"
            "\n"
            "Times each op over the tutorials' sizes: add, dropout and copy n = 2^12 .. 2^27 (copy\n"
            "also transposes square matrices), softmax 4096 x N for N = 128 i (i = 2 .. 100) and\n"
            "32768, grayscale 1066 x 1600 and 3840 x 2160 in u8 and f32. Rows give GB/s moved\n"
            "(inputs read once, output written once) from kernel time, median and 20 %% / 80 %%\n"
            "quantiles over repeats after a warm-up, each after a cache flush (256 MiB written on a\n"
            "GPU, twice the last-level cache on a CPU), like triton.testing.do_bench. On the first\n"
            "size of each op and dtype and on the sizes of TARGETS.md, also the wall time of a\n"
            "first call in a new context with an empty binary cache (cold: compile) and again with\n"
            "the cache it filled (warm). Sizes that do not fit the device are skipped with a note\n"
            "on stderr.\n"
            "\n"
            "  --op NAME      one op (default: all)\n"
            "  --dtype T      float dtype of the ops (default f32); grayscale always runs u8 too\n"
            "  --quick        a few small sizes: seconds on a CPU\n"
            "  --reps N       exactly N timed repeats per row\n"
            "  --csv          CSV: op,dtype,shape,n_bytes,ms_median,ms_p20,ms_p80,gbps_median,\n"
            "                 gbps_p20,gbps_p80,cold_ms,warm_ms,device (gbps_p20 is the 20 %% quantile\n"
            "                 of GB/s, from the 80 %% quantile of time)\n"
            "  --json         one JSON document: device properties and the rows\n"
            "  --plot FILE    GB/s against size, a panel per op, as PNG through gnuplot\n"
            "  --device D     an index or a name substring, as $CLKIT_DEVICE\n"
            "\n"
            "Exit status: 0 done, 1 an op failed, 2 bad usage, 3 the plot could not be made.\n");
}

static int bad_usage(const char *msg)
{
    fprintf(stderr, "clkit bench: %s\n", msg);
    usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* -1 when the options are good, else the exit status. */
static int parse(int argc, char **argv, bench_opts *o)
{
    static const struct option longs[] = {
        {"op", required_argument, NULL, 'o'},    {"dtype", required_argument, NULL, 't'},
        {"quick", no_argument, NULL, 'q'},       {"reps", required_argument, NULL, 'r'},
        {"csv", no_argument, NULL, 'c'},         {"json", no_argument, NULL, 'j'},
        {"plot", required_argument, NULL, 'p'},  {"device", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    int c, t, formats = 0;
    while ((c = getopt_long(argc, argv, "hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->op = strcmp(optarg, "all") ? optarg : NULL; break;
        case 't':
            if ((t = tool_dtype_parse(optarg)) < 0 || t > CLKIT_BF16)
                return bad_usage("--dtype takes f32, f16 or bf16");
            o->dtype = (clkit_dtype)t;
            break;
        case 'q': o->quick = 1; break;
        case 'r':
            if ((o->reps = atoi(optarg)) <= 0) return bad_usage("--reps takes a positive count");
            break;
        case 'c': o->format = OUT_CSV, formats++; break;
        case 'j': o->format = OUT_JSON, formats++; break;
        case 'p': o->plot = optarg; break;
        case 'd': o->device = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: usage(stderr); return TOOL_EXIT_USAGE;
        }
    }
    const op_def *op = o->op ? op_find(o->op) : NULL;
    if (o->op && (!op || !op->bench_shapes))
        return bad_usage("--op takes add, softmax, dropout, copy, grayscale or all");
    if (formats > 1) return bad_usage("--csv and --json exclude each other");
    if (optind < argc) return bad_usage("unexpected arguments");
    return -1;
}

/* Why a problem cannot run on the device, or NULL: every buffer within max_alloc, all of
   them and the flush scratch within most of global memory. */
static const char *too_big(const struct clkit_device_props *dev, const op_problem *p,
                           uint64_t flush)
{
    uint64_t total = flush;
    for (int k = 0; k <= p->op->nin; k++) {
        uint64_t bytes = (uint64_t)op_numel(p, k) * clkit_dtype_size(p->dtype);
        if (bytes > dev->max_alloc) return "a buffer exceeds the device's max_alloc";
        total += bytes;
    }
    return total > dev->global_mem / 10 * 9 ? "the buffers exceed the device's memory" : NULL;
}

/* One run: the options, the context the repeats run in and its flush scratch, the rows. */
typedef struct bench_run {
    const bench_opts *o;
    clkit_context *ctx;
    cl_mem flush;
    out_report report;
} bench_run;

/* Measures one row and adds it; a device out of memory skips the row. */
static clkit_status bench_row(bench_run *run, op_problem *p, int first_calls)
{
    const bench_opts *o = run->o;
    char shape[48];
    op_shape_text(p, shape, sizeof shape);
    const char *why = too_big(&run->report.dev, p, o->flush);
    if (why) {
        fprintf(stderr, "clkit bench: skipping %s %s %s: %s\n", p->op->name,
                clkit_dtype_name(p->dtype), shape, why);
        return CLKIT_OK;
    }
    measure_budget b = o->quick ? quick_budget : full_budget;
    b.fixed_reps = o->reps;
    measurement m = {.cold_ms = NAN, .warm_ms = NAN};
    clkit_status s = first_calls ? measure_first_calls(o->device, p, &m) : CLKIT_OK;
    if (!s) s = measure_repeats(run->ctx, p, &b, run->flush, &m);
    if (s == CLKIT_ERR_OUT_OF_MEMORY) {
        fprintf(stderr, "clkit bench: skipping %s %s %s: %s\n", p->op->name,
                clkit_dtype_name(p->dtype), shape, tool_detail(s, op_error()));
        return CLKIT_OK;
    }
    if (s) return s;
    out_row row = out_row_make(p, &m);
    return out_add(&run->report, &row) ? op_fail(CLKIT_ERR_OUT_OF_MEMORY, "the report's rows")
                                       : CLKIT_OK;
}

/* Every shape of op in one dtype; stops at the first failure, which it reports. */
static int bench_dtype(bench_run *run, const op_def *op, clkit_dtype dtype)
{
    op_shape shapes[OP_MAX_SHAPES];
    int n = op->bench_shapes(run->o->quick, shapes);
    if (run->report.format != OUT_TABLE)
        fprintf(stderr, "clkit bench: %s %s, %d shapes\n", op->name, clkit_dtype_name(dtype), n);
    for (int i = 0; i < n; i++) {
        op_problem p = op_problem_make(op, dtype, shapes[i]);
        /* New contexts cost 1.5 s each on NVIDIA's OpenCL: first calls, which need two,
           are measured on the first shape and on the targets' shapes only. */
        clkit_status s = bench_row(run, &p, i == 0 || shapes[i].target);
        if (s) {
            char what[128], shape[48];
            op_shape_text(&p, shape, sizeof shape);
            snprintf(what, sizeof what, "bench %s %s %s", op->name, clkit_dtype_name(dtype), shape);
            tool_error(what, s, op_error());
            return TOOL_EXIT_FAIL;
        }
    }
    return TOOL_EXIT_OK;
}

/* The requested float dtype where the op has it, and u8 for the ops on images. */
static int bench_op(bench_run *run, const op_def *op)
{
    int rc = TOOL_EXIT_OK;
    unsigned want = OP_DT(run->o->dtype) | OP_DT(CLKIT_U8);
    for (int t = CLKIT_F32; t <= CLKIT_I64; t++)
        if ((op->dtypes & want & OP_DT(t)) && bench_dtype(run, op, (clkit_dtype)t))
            rc = TOOL_EXIT_FAIL;
    return rc;
}

static int bench_ops(bench_run *run)
{
    int rc = TOOL_EXIT_OK;
    for (int i = 0; i < op_count; i++) {
        const op_def *op = &op_table[i];
        if (op->bench_shapes && (!run->o->op || strcmp(run->o->op, op->name) == 0) &&
            bench_op(run, op))
            rc = TOOL_EXIT_FAIL;
    }
    clkit_status s = out_end(&run->report);
    if (s) {
        tool_error("bench output", s, NULL);
        rc = TOOL_EXIT_FAIL;
    }
    if (run->o->plot) {
        int plot = out_plot(&run->report, run->o->plot);
        if (plot && !rc) rc = plot;
    }
    return rc;
}

/* 256 MiB as do_bench on a GPU. A CPU writes 256 MiB in some 0.1 s, which would dominate a
   quick run: twice its last-level cache evicts it as well, and at least 64 MiB in case the
   driver reports a smaller level. */
static uint64_t flush_bytes(clkit_context *ctx, const struct clkit_device_props *dev)
{
    cl_device_id d;
    cl_ulong cache = 0;
    uint64_t bytes = FLUSH_BYTES;
    clkit_context_cl(ctx, NULL, NULL, &d);
    if (dev->is_cpu &&
        clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL) == CL_SUCCESS &&
        cache && 2 * cache < bytes)
        bytes = 2 * cache > MIN_FLUSH_BYTES ? 2 * cache : MIN_FLUSH_BYTES;
    return bytes < dev->max_alloc ? bytes : dev->max_alloc;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    /* Driver caches of compiled kernels would turn a cold first call into a cache hit. */
    setenv("CUDA_CACHE_DISABLE", "1", 1);
    setenv("POCL_KERNEL_CACHE", "0", 1);
    bench_run run = {.o = &o};
    clkit_status s = tool_open(&run.ctx, o.device, NULL, 1);
    if (s) {
        tool_error("cannot open the device", s, "`clkit info` diagnoses");
        return TOOL_EXIT_FAIL;
    }
    struct clkit_device_props dev;
    clkit_device_props(run.ctx, &dev);
    o.flush = flush_bytes(run.ctx, &dev);
    s = measure_flush_buffer(run.ctx, o.flush, &run.flush);
    if (s) {
        tool_error("cache flush scratch", s, op_error());
        rc = TOOL_EXIT_FAIL;
    } else {
        out_begin(&run.report, o.format, &dev);
        rc = bench_ops(&run);
        out_free(&run.report);
        clReleaseMemObject(run.flush);
    }
    clkit_context_release(run.ctx);
    return rc;
}
