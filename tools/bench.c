/* clkit bench: the tutorials' tables (GB/s, matmul TFLOP/s) on the chosen device. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "tool.h"

/* do_bench's 25 ms warm-up and 100 ms of repeats, capped so that a full run over some 150
   rows takes minutes on a GPU; quick keeps a CPU run to seconds. */
static const measure_budget full_budget = {25, 100, 1000, 10, 200, 0};
static const measure_budget quick_budget = {5, 20, 250, 5, 30, 0};
/* --reps at most: the repeats' times are kept in memory. */
#define MAX_REPS 1000000

typedef struct bench_opts {
    const char *device, *op, *plot, *shapes, *from;
    clkit_dtype dtype;
    int quick, reps, tf32, exact_f32;
    out_format format;
    uint64_t flush;  /* bytes written between repeats */
} bench_opts;

static void usage(FILE *f)
{
    fprintf(f, "usage: clkit bench [--op NAME|all] [--dtype f32|f16|bf16] [--tf32 | --exact-f32]\n"
               "                   [--quick] [--shapes LIST] [--reps N] [--csv | --json] [--plot FILE.png]\n"
               "                   [--device D]\n"
               "       clkit bench --from FILE.csv --plot FILE.png [--op NAME]\n"
               "\n"
               "Times each op over the tutorials' sizes: add, dropout and copy n = 2^12 .. 2^27\n"
               "(copy also transposes square matrices), softmax 4096 x N for N = 128 i\n"
               "(i = 2 .. 100) and 32768, grayscale 1066 x 1600 and 3840 x 2160 in u8 and f32,\n"
               "swizzle 2048^2 and 8192^2 f32 (out at tl.swizzle2d's place, group 3),\n"
               "matmul M = N = K = 128 i (i = 2 .. 32) and 8192, M = 1, 8, 16 with\n"
               "N = K = 4096, and 16 x 512^3 batched (once with B broadcast), layernorm and\n"
               "layernorm_backward 4096 x N for N = 512 i (i = 2 .. 31) with weight and bias,\n"
               "eps 1e-5, mean and rstd saved (the backward writes dx, dweight and dbias),\n"
               "linear_cross_entropy T x D x V = 32768 x 384 x 32768 and 8192 x 4096 x 128256\n"
               "(loss, dx and dweight in one call; no bias, mean over tokens, i32 targets), and\n"
               "attention and attention_backward B x H x L x D = 32 x 4 x L x 128 and\n"
               "8 x 16 x L x 64 for L = 512 i (i = 1 .. 16), causal, both in each dtype (the\n"
               "backward writes dq, dk and dv given o, dout and the lse of a forward).\n"
               "Rows give GB/s moved (inputs read once, output written once; layernorm as its\n"
               "tutorial counts: x and y, or dy, x and dx), or TFLOP/s for matmul (2 M N K\n"
               "batch per call), linear_cross_entropy (6 T D V, forward and backward) and\n"
               "attention (4 B H L^2 D, halved when causal; the backward 2.5 times that),\n"
               "from kernel time: median and 20 %% / 80 %% quantiles over repeats after a\n"
               "warm-up, each repeat after a cache flush (256 MiB written on a GPU, twice the\n"
               "last-level cache on a CPU), as triton.testing.do_bench. matmul has three\n"
               "columns: clkit (the normal call, which takes a `clkit tune` entry where the\n"
               "cache has one), heuristic (the same call in a context over an empty cache: the\n"
               "default from device properties) and clblast (f32 only; timed by wall clock\n"
               "over back-to-back calls, as its event covers only its last kernel). On the\n"
               "first size of each op and dtype and on the sizes of bench/TARGETS.md, also the\n"
               "wall time of a first call in a new context with an empty cache (cold: compile) and\n"
               "again with the cache it filled (warm). linear_cross_entropy also shows the\n"
               "most device memory clkit held for intermediates during a call\n"
               "(clkit_scratch_peak). Tables and plots show GFLOP/s instead of TFLOP/s where\n"
               "a table's first row or a panel's best is below 1 TFLOP/s (CPUs); CSV and JSON\n"
               "keep TFLOP/s. Sizes that do not fit the device are skipped with a note on\n"
               "stderr.\n"
               "\n"
               "  --op NAME    one op (default: all), or layernorm or attention for both of\n"
               "               its ops:\n"
               "              ");
    tool_print_ops(f, 14, 1);
    fprintf(f, "\n"
               "  --dtype T    float dtype of the ops' inputs (default f32; bench/TARGETS.md\n"
               "               times layernorm in f16 and f32, linear_cross_entropy in f16,\n"
               "               attention 32 x 4 x L x 128 in f32 and 8 x 16 x L x 64 in f16);\n"
               "               grayscale runs u8 too; matmul writes f32 whatever its inputs\n"
               "  --tf32       matmul with f32 inputs may round them to TF32 on the tensor cores\n"
               "               (allow_tf32 of clkit_matmul_options; a no-op elsewhere)\n"
               "  --exact-f32  matmul with f32 inputs keeps them off the tensor cores, where\n"
               "               they otherwise run as 3xTF32 (exact_f32 of clkit_matmul_options)\n"
               "  --quick      a few small sizes and repeats, no first-call timings, and the\n"
               "               drivers' kernel caches left on: seconds per op on a CPU once\n"
               "               its kernels are built (PoCL's first builds take longer)\n"
               "  --shapes L   only these comma-separated shapes of the --op, spelled as the\n"
               "               CSV's shape column: 4096x8192 (rows x cols), 1024x1024.T (a\n"
               "               transposed copy), MxNxK[xBATCH] with .tn, .nt or .tt, .ashared,\n"
               "               .bshared, .acc.relu (matmul), BxHxLxD[.causal] (attention;\n"
               "               .qLq with L then Lk, .kvHkv for grouped-query heads, .br for\n"
               "               bottom-right causal: 8x32x32768x128.q1.kv8 is decoding),\n"
               "               TxDxV (linear + cross-entropy); each dim 1 .. 2^31 - 1\n"
               "  --reps N     exactly N timed repeats per row and column (1 .. 1000000)\n"
               "  --csv        CSV: op,dtype,shape,n_bytes,ms_median,ms_p20,ms_p80,gbps_median,\n"
               "               gbps_p20,gbps_p80,cold_ms,warm_ms,device,provider,n_flops,\n"
               "               tflops_median,tflops_p20,tflops_p80,scratch_mib: a line per\n"
               "               row and provider (bandwidth ops: provider clkit). gbps_p20 is\n"
               "               the 20 %% quantile of GB/s (from the 80 %% quantile of time);\n"
               "               GB/s rate the bandwidth ops, TFLOP/s matmul,\n"
               "               linear_cross_entropy and attention, and the other pair is\n"
               "               empty, as are fields not measured; scratch_mib:\n"
               "               clkit_scratch_peak of the first call, MiB\n"
               "  --json       one JSON document: the device's properties and the rows\n"
               "  --plot FILE  GB/s or TFLOP/s against size, a panel per op, as PNG through\n"
               "               gnuplot (matmul: the M = N = K rows; attention: against L,\n"
               "               the configuration bench/TARGETS.md times in the dtype, bf16 as\n"
               "               f16, and the quick shape; linear_cross_entropy has no sweep\n"
               "               to plot); a line per dtype and provider\n"
               "  --from FILE  plot FILE instead of measuring: the CSV of --csv, or the merged\n"
               "               CSV of bench/torch_peer.py --out, whose peers (torch, compile,\n"
               "               upcast) get a line each beside clkit's providers\n"
               "  --device D   an index or a name substring, as $CLKIT_DEVICE\n"
               "\n"
               "Exit status: 0 done, 1 an op failed, 2 bad usage, 3 no plot could be made.\n");
}

/* -1 when the options are good, else the exit status. */
static int parse(int argc, char **argv, bench_opts *o)
{
    static const struct option longs[] = {
        {"op", required_argument, NULL, 'o'},    {"dtype", required_argument, NULL, 't'},
        {"quick", no_argument, NULL, 'q'},       {"reps", required_argument, NULL, 'r'},
        {"csv", no_argument, NULL, 'c'},         {"json", no_argument, NULL, 'j'},
        {"plot", required_argument, NULL, 'p'},  {"device", required_argument, NULL, 'd'},
        {"tf32", no_argument, NULL, 'f'},        {"help", no_argument, NULL, 'h'},
        {"shapes", required_argument, NULL, 's'}, {"exact-f32", no_argument, NULL, 'x'},
        {"from", required_argument, NULL, 'F'},  {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    int c, t, formats = 0;
    long long reps;
    while ((c = getopt_long(argc, argv, ":hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->op = strcmp(optarg, "all") ? optarg : NULL; break;
        case 't':
            if ((t = tool_dtype_parse(optarg)) < 0 || t > CLKIT_BF16)
                return tool_usage_error("bench", "--dtype takes f32, f16 or bf16, not '%s'", optarg);
            o->dtype = (clkit_dtype)t;
            break;
        case 'q': o->quick = 1; break;
        case 's': o->shapes = optarg; break;
        case 'f': o->tf32 = 1; break;
        case 'x': o->exact_f32 = 1; break;
        case 'r':
            if (tool_parse_int(optarg, 1, MAX_REPS, &reps))
                return tool_usage_error("bench", "--reps takes a whole number from 1 to %d, not '%s'",
                                        MAX_REPS, optarg);
            o->reps = (int)reps;
            break;
        case 'c': o->format = OUT_CSV, formats++; break;
        case 'j': o->format = OUT_JSON, formats++; break;
        case 'p': o->plot = optarg; break;
        case 'd': o->device = optarg; break;
        case 'F': o->from = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: return tool_option_error("bench", c, argv);
        }
    }
    if (optind < argc) return tool_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    int benched = 0;
    for (int i = 0; o->op && i < op_count; i++) {
        op_shape shapes[OP_MAX_SHAPES];
        char why[256];
        int n = 0, selected = op_table[i].bench_shapes && op_selected(&op_table[i], o->op);
        if (selected && o->shapes &&
            op_shape_list(&op_table[i], o->shapes, shapes, &n, why, sizeof why))
            return tool_usage_error("bench", "--shapes: %s", why);
        benched |= selected;
    }
    if (o->op && !benched) return tool_usage_error("bench", "no op '%s' to bench", o->op);
    if (o->shapes && !o->op) return tool_usage_error("bench", "--shapes needs an --op");
    if (formats > 1) return tool_usage_error("bench", "--csv and --json exclude each other");
    if (o->tf32 && o->exact_f32)
        return tool_usage_error("bench", "--tf32 and --exact-f32 exclude each other");
    if (o->from && (!o->plot || formats || o->shapes || o->quick || o->reps))
        return tool_usage_error("bench", "--from plots a CSV: it takes --plot, and --op, alone");
    return -1;
}

/* A profiling context the repeats run in, with its flush scratch. */
typedef struct bench_ctx {
    clkit_context *ctx;
    cl_mem flush;
    char dir[4096];  /* the empty cache directory it was opened over; "" for the default */
} bench_ctx;

/* One run: the options, the contexts (the default one, and one over an empty cache opened
   for the first provider that asks for it), the rows. */
typedef struct bench_run {
    const bench_opts *o;
    bench_ctx main, fresh;
    out_report report;
} bench_run;

/* Opens c whole or not at all (its directory stays for bench_ctx_close). */
static clkit_status bench_ctx_open(const bench_opts *o, bench_ctx *c, int fresh_cache)
{
    clkit_status s = fresh_cache && !*c->dir ? measure_temp_dir(c->dir, sizeof c->dir) : CLKIT_OK;
    if (s) return s;
    s = tool_open(&c->ctx, o->device, fresh_cache ? c->dir : NULL, 1);
    if (s) return op_fail(s, "opening a profiling context on the device");
    s = measure_flush_buffer(c->ctx, o->flush, &c->flush);
    if (s) {
        clkit_context_release(c->ctx);
        c->ctx = NULL;
    }
    return s;
}

static void bench_ctx_close(bench_ctx *c)
{
    if (c->flush) clReleaseMemObject(c->flush);
    if (c->ctx) clkit_context_release(c->ctx);
    if (*c->dir) measure_remove_dir(c->dir);
    memset(c, 0, sizeof *c);
}

static void skip_note(const op_problem *p, const char *shape, const char *why)
{
    fprintf(stderr, "clkit bench: skipping %s %s %s: %s\n", p->op->name,
            clkit_dtype_name(p->dtype), shape, why);
}

/* The column of one provider; a peer that fails leaves its column empty, with a note. */
static clkit_status bench_provider(bench_run *run, op_problem *p, const op_provider *prov,
                                   measurement *m)
{
    const bench_opts *o = run->o;
    if (prov->dtypes && !(prov->dtypes & OP_DT(p->dtype))) return CLKIT_OK;
    bench_ctx *c = prov->fresh_cache ? &run->fresh : &run->main;
    clkit_status s = c->ctx ? CLKIT_OK : bench_ctx_open(o, c, prov->fresh_cache);
    measure_budget b = o->quick ? quick_budget : full_budget;
    b.fixed_reps = o->reps;
    p->provider = prov->api;
    if (!s)
        s = measure_repeats(c->ctx, p, &b, prov->wall_clock ? MEASURE_WALL : MEASURE_EVENTS,
                            c->flush, m);
    p->provider = CLKIT_PROVIDER_AUTO;
    if (s && prov->peer && s != CLKIT_ERR_OUT_OF_MEMORY) {
        char shape[48];
        op_shape_text(p, shape, sizeof shape);
        fprintf(stderr, "clkit bench: %s %s %s: %s failed, its column stays empty: %s\n",
                p->op->name, clkit_dtype_name(p->dtype), shape, prov->name,
                tool_detail(s, op_error()));
        m->reps = 0;
        return CLKIT_OK;
    }
    return s;
}

/* Measures one row, every provider of the op, and adds it; a device out of memory skips
   the row. */
static clkit_status bench_row(bench_run *run, op_problem *p, int first_calls)
{
    char shape[48];
    op_shape_text(p, shape, sizeof shape);
    const char *why = op_too_big(&run->report.dev, p, run->o->flush);
    if (why) {
        skip_note(p, shape, why);
        return CLKIT_OK;
    }
    out_row row = out_row_make(p);
    clkit_status s = first_calls ? measure_first_calls(run->o->device, p, &row.m[0]) : CLKIT_OK;
    int n;
    const op_provider *prov = op_providers(p->op, &n);
    for (int j = 0; j < n && !s; j++) s = bench_provider(run, p, &prov[j], &row.m[j]);
    if (s == CLKIT_ERR_OUT_OF_MEMORY) {
        skip_note(p, shape, tool_detail(s, op_error()));
        return CLKIT_OK;
    }
    if (s) return s;
    return out_add(&run->report, &row) ? op_fail(CLKIT_ERR_OUT_OF_MEMORY, "the report's rows")
                                       : CLKIT_OK;
}

/* Every shape of op in one dtype; stops at the first failure, which it reports. */
static int bench_dtype(bench_run *run, const op_def *op, clkit_dtype dtype)
{
    op_shape shapes[OP_MAX_SHAPES];
    char why[256];
    int n = 0;
    /* parse has read --shapes already: it cannot fail here. */
    if (!run->o->shapes)
        n = op->bench_shapes(run->o->quick, shapes);
    else if (op_shape_list(op, run->o->shapes, shapes, &n, why, sizeof why))
        return TOOL_EXIT_FAIL;
    if (run->report.format != OUT_TABLE)
        fprintf(stderr, "clkit bench: %s %s, %d shape%s\n", op->name, clkit_dtype_name(dtype), n,
                n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) {
        op_problem p = op_problem_make(op, dtype, shapes[i]);
        p.allow_tf32 = run->o->tf32, p.exact_f32 = run->o->exact_f32;
        /* New contexts cost 1.5 s each on NVIDIA's OpenCL: first calls, which need two,
           are measured on the first shape and on the targets' shapes only; on none in quick
           mode, whose driver caches stay on (a cold build on PoCL takes seconds a kernel). */
        clkit_status s = bench_row(run, &p, !run->o->quick && (i == 0 || shapes[i].target));
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
        if (op->bench_shapes && (!run->o->op || op_selected(op, run->o->op)) &&
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

int cmd_bench(int argc, char **argv)
{
    bench_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    if (o.from) return out_plot_csv(o.from, o.op, o.plot);
    /* Driver caches of compiled kernels would turn a cold first call into a cache hit. Quick
       mode measures no first call, and keeps them: the peer and heuristic columns build
       their kernels anew in each run, which takes minutes on PoCL without its cache. */
    if (!o.quick) {
        setenv("CUDA_CACHE_DISABLE", "1", 1);
        setenv("POCL_KERNEL_CACHE", "0", 1);
    }
    /* The bench times what the cache holds: autotuning on a miss would tune the heuristic
       column too, inside its untimed first call. */
    unsetenv("CLKIT_AUTOTUNE");
    bench_run run = {.o = &o};
    clkit_status s = tool_open(&run.main.ctx, o.device, NULL, 1);
    if (s) {
        tool_error("cannot open the device", s, "`clkit info` diagnoses");
        return TOOL_EXIT_FAIL;
    }
    struct clkit_device_props dev;
    clkit_device_props(run.main.ctx, &dev);
    o.flush = clkit_benchmark_flush_bytes(run.main.ctx);
    s = measure_flush_buffer(run.main.ctx, o.flush, &run.main.flush);
    if (s) {
        tool_error("cache flush scratch", s, op_error());
        rc = TOOL_EXIT_FAIL;
    } else {
        out_begin(&run.report, o.format, &dev);
        rc = bench_ops(&run);
        out_free(&run.report);
    }
    bench_ctx_close(&run.fresh);
    bench_ctx_close(&run.main);
    return rc;
}
