/* clkit tune: fills the tuned-config cache for a list of shapes, and exports or imports it. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "ops.h"
#include "tool.h"

typedef struct tune_opts {
    const char *device, *op, *shapes, *export_to, *import_from;
    int standard, tf32, exact_f32;
    clkit_dtype dtype;
    int out_dtype;    /* -1: the op's default for the inputs */
    int transposed;   /* --layout as op_shape.transposed bits: nt = B, tn = A */
    double budget_s;
} tune_opts;

/* The winner of one shape, for the closing table. */
typedef struct tune_result {
    char shape[48], config[256];
    double ms, flops, seconds;
    const char *failure;  /* NULL: tuned; else why not ("skipped: ...", "failed") */
    int failed;           /* a failure, not a skip: the exit status says so */
    json_object *unsaved; /* tuned, but the cache could not keep it: its entry */
} tune_result;

static void usage(FILE *f)
{
    fprintf(f, "usage: clkit tune [--op NAME] (--shapes LIST | --standard) [--dtype f32|f16|bf16]\n"
               "                  [--out-dtype f32|f16|bf16] [--layout nn|nt|tn|tt]\n"
               "                  [--tf32 | --exact-f32] [--budget SECONDS] [--export FILE]\n"
               "                  [--import FILE] [--device D]\n"
               "\n"
               "Times every candidate configuration of the op on each shape (candidate i of n,\n"
               "its config and time, and the best so far on stderr) and stores the fastest in\n"
               "the tuned-config cache ($CLKIT_CACHE_DIR/tuned.json), which every later call on\n"
               "this device uses: the exact shape, else the nearest tuned one. Prints the\n"
               "winner per shape with its TFLOP/s. --import runs before tuning and --export\n"
               "after it; either may be given alone.\n"
               "\n"
               "  --op NAME        the op to tune (default matmul):");
    for (int i = 0; i < op_count; i++)
        if (op_table[i].tune) fprintf(f, " %s", op_table[i].name);
    fprintf(f, "\n"
               "  --shapes LIST    comma-separated MxNxK or MxNxKxBATCH (matmul), e.g.\n"
               "                   1024x1024x1024,1x4096x4096,512x512x512x16; BxHxLxD with\n"
               "                   .causal for a causal mask (attention, attention_backward),\n"
               "                   e.g. 32x4x1024x128.causal\n"
               "  --standard       the tutorials' and the bench's shapes. matmul: squares 256\n"
               "                   .. 8192, every 4th of M = N = K = 128 i (i = 2 .. 32),\n"
               "                   M = 1, 8, 16 with N = K = 4096, and 16 x 512^3 batched;\n"
               "                   attention: the bench's 32x4xLx128 and 8x16xLx64, causal,\n"
               "                   at L 1024 and 4096 (f16/bf16 on NVIDIA tensor cores have\n"
               "                   fixed tiles: CLKIT_TENSOR_CORES=0 tunes the portable ones)\n"
               "  --dtype T        the inputs' dtype (default f32)\n"
               "  --out-dtype T    the output's (default f32; f16 and bf16 inputs may also\n"
               "                   write their own dtype)\n"
               "  --tf32           f32 inputs may round to TF32 on the tensor cores (matmul's\n"
               "                   allow_tf32: calls that set it find these entries)\n"
               "  --exact-f32      f32 inputs stay off the tensor cores, where they otherwise\n"
               "                   run as 3xTF32 (matmul's exact_f32: calls that set it find\n"
               "                   these entries)\n"
               "  --layout L       nn (default), nt (B stored transposed, as (N, K)), tn (A as\n"
               "                   (K, M)) or tt\n"
               "  --budget S       stop trying candidates of a shape after S seconds, keeping\n"
               "                   the best so far (default: no limit)\n"
               "  --export FILE    write every tuned entry (all devices) to FILE\n"
               "  --import FILE    merge the entries of FILE into the cache\n"
               "  --device D       an index or a name substring, as $CLKIT_DEVICE\n"
               "\n"
               "Where the cache cannot be written (a read-only directory, a full disk), the\n"
               "winners are still shown, and their entries follow the table on stdout as a\n"
               "tuned-config file (from its first '{' line on): save it and --import it where\n"
               "the cache can be written.\n"
               "\n"
               "Exit status: 0 done, 1 a shape could not be tuned, a winner could not be\n"
               "saved (its entry is then on stdout) or a file not read or written, 2 bad usage.\n");
}

static int bad_usage(const char *msg)
{
    fprintf(stderr, "clkit tune: %s\n", msg);
    usage(stderr);
    return TOOL_EXIT_USAGE;
}

/* A float dtype name to clkit_dtype; -1 when it is not one. */
static int float_dtype(const char *name)
{
    int t = tool_dtype_parse(name);
    return t >= CLKIT_F32 && t <= CLKIT_BF16 ? t : -1;
}

static int parse_layout(const char *text)
{
    static const char *const names[] = {"nn", "tn", "nt", "tt"};
    for (int i = 0; i < 4; i++)
        if (strcmp(text, names[i]) == 0) return i;
    return -1;
}

/* -1 when the options are good, else the exit status. */
static int parse(int argc, char **argv, tune_opts *o)
{
    static const struct option longs[] = {
        {"op", required_argument, NULL, 'o'},      {"shapes", required_argument, NULL, 's'},
        {"standard", no_argument, NULL, 'S'},      {"dtype", required_argument, NULL, 't'},
        {"out-dtype", required_argument, NULL, 'T'}, {"layout", required_argument, NULL, 'l'},
        {"budget", required_argument, NULL, 'b'},  {"export", required_argument, NULL, 'e'},
        {"import", required_argument, NULL, 'i'},  {"device", required_argument, NULL, 'd'},
        {"tf32", no_argument, NULL, 'f'},          {"help", no_argument, NULL, 'h'},
        {"exact-f32", no_argument, NULL, 'x'},     {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->op = "matmul";
    o->out_dtype = -1;
    int c, t;
    char *end;
    while ((c = getopt_long(argc, argv, "hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->op = optarg; break;
        case 's': o->shapes = optarg; break;
        case 'S': o->standard = 1; break;
        case 'f': o->tf32 = 1; break;
        case 'x': o->exact_f32 = 1; break;
        case 't':
            if ((t = float_dtype(optarg)) < 0) return bad_usage("--dtype takes f32, f16 or bf16");
            o->dtype = (clkit_dtype)t;
            break;
        case 'T':
            if ((o->out_dtype = float_dtype(optarg)) < 0)
                return bad_usage("--out-dtype takes f32, f16 or bf16");
            break;
        case 'l':
            if ((o->transposed = parse_layout(optarg)) < 0)
                return bad_usage("--layout takes nn, nt, tn or tt");
            break;
        case 'b':
            o->budget_s = strtod(optarg, &end);
            if (*end || end == optarg || !(o->budget_s >= 0))
                return bad_usage("--budget takes seconds, 0 or more");
            break;
        case 'e': o->export_to = optarg; break;
        case 'i': o->import_from = optarg; break;
        case 'd': o->device = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: usage(stderr); return TOOL_EXIT_USAGE;
        }
    }
    const op_def *op = op_find(o->op);
    if (!op || !op->tune) return bad_usage("no such op to tune");
    if (o->shapes && o->standard) return bad_usage("--shapes and --standard exclude each other");
    if (!o->shapes && !o->standard && !o->export_to && !o->import_from)
        return bad_usage("nothing to do: give --shapes, --standard, --export or --import");
    if (optind < argc) return bad_usage("unexpected arguments");
    return -1;
}

/* The shapes to tune, with the layout; -1 (after a message) on a malformed one. */
static int tune_shapes(const tune_opts *o, const op_def *op, op_shape *out)
{
    int n = 0;
    if (o->standard) n = op->tune_shapes(out);
    if (op_shape_list(op, o->shapes, "clkit tune", out, &n)) return -1;
    for (int i = 0; i < n; i++) out[i].transposed = o->transposed;
    return n;
}

/* ---- progress ---- */

/* What the progress line of one shape shows, and the winner it saw. */
typedef struct tune_progress {
    const tune_result *shape;
    int index, count;  /* shape index of count */
    int tty;           /* stderr is a terminal: one line redrawn, else a line per candidate */
    int pass;          /* the tuner's passes (matmul: candidates, then GROUP_M of the best) */
    int last_done;
    double best_ms;
    char best[256];
} tune_progress;

static void progress_bar(char *buf, int width, int done, int total)
{
    int full = total > 0 ? done * width / total : width;
    for (int i = 0; i < width; i++) buf[i] = i < full ? '#' : '.';
    buf[width] = 0;
}

static void on_candidate(void *user, int done, int total, const char *config, double ms,
                         double best_ms)
{
    tune_progress *t = user;
    if (done == 1) t->pass++;
    t->last_done = done;
    /* The stored winner is the best of the last pass, which re-times the earlier ones. */
    if (ms >= 0 && ms == best_ms) {
        t->best_ms = best_ms;
        snprintf(t->best, sizeof t->best, "%s", config);
    }
    char bar[21], took[32];
    progress_bar(bar, 20, done, total);
    if (ms >= 0)
        snprintf(took, sizeof took, "%.4g ms", ms);
    else
        snprintf(took, sizeof took, "cannot run");
    double tflops = t->shape->flops / t->best_ms * 1e-9;
    fprintf(stderr, "%s[%d/%d] %s pass %d [%s] %d/%d %s: %s; best %.4g ms, %.3g TFLOP/s%s",
            t->tty ? "\r" : "", t->index + 1, t->count, t->shape->shape, t->pass, bar, done,
            total, config, took, t->best_ms, tflops, t->tty ? "\033[K" : "\n");
    fflush(stderr);
}

/* ---- tuning ---- */

/* What follows it in the message of a failed store is the entry that was not saved
   (host/tune_cache.c: UNSAVED_MARK). */
static const char unsaved_mark[] = "; unsaved entry: ";

/* The entry that detail, a failed store's message, carries; NULL when it carries none. */
static json_object *unsaved_entry(const char *detail)
{
    const char *at = strstr(detail, unsaved_mark);
    json_object *e = at ? json_tokener_parse(at + sizeof unsaved_mark - 1) : NULL;
    if (e && !json_object_is_type(e, json_type_object)) {
        json_object_put(e);
        e = NULL;
    }
    return e;
}

/* A shape tuned whose winner the cache could not keep: the winner for the table, the entry
   for stdout, what went wrong on stderr. */
static void keep_unsaved(const tune_progress *t, tune_result *r, json_object *entry)
{
    const char *detail = tool_detail(CLKIT_ERR_IO, op_error());
    int len = (int)(strstr(detail, unsaved_mark) - detail);
    fprintf(stderr, "clkit tune: %s: tuned, but not saved in the cache: %.*s\n", r->shape, len, detail);
    r->unsaved = entry;
    r->ms = t->best_ms;
    snprintf(r->config, sizeof r->config, "%s", t->best);
}

static void tune_one(clkit_context *ctx, op_problem *p, const tune_opts *o, tune_progress *t,
                     tune_result *r)
{
    clkit_tune_options topt = {.budget_s = o->budget_s, .progress = on_candidate, .user = t};
    double t0 = tool_now_ms();
    clkit_status s = op_alloc(ctx, p);
    if (!s) s = op_status(ctx, p->op->tune(ctx, p, &topt));
    op_free(p);
    if (t->tty && t->last_done) fputc('\n', stderr);
    r->seconds = (tool_now_ms() - t0) * 1e-3;
    json_object *entry = s == CLKIT_ERR_IO && isfinite(t->best_ms) ? unsaved_entry(op_error()) : NULL;
    if (entry) {
        keep_unsaved(t, r, entry);
        return;
    }
    if (s == CLKIT_ERR_UNSUPPORTED) {
        fprintf(stderr, "clkit tune: skipping %s: %s\n", r->shape, op_error());
        r->failure = "skipped: nothing to tune on this device (see stderr)";
        return;
    }
    if (s) {
        char what[96];
        snprintf(what, sizeof what, "tune %s %s", p->op->name, r->shape);
        tool_error(what, s, op_error());
        r->failure = "failed";
        r->failed = 1;
        return;
    }
    r->ms = t->best_ms;
    snprintf(r->config, sizeof r->config, "%s", t->best);
}

/* The problem of one shape, or a note why it is skipped (into r->failure). */
static op_problem tune_problem(const tune_opts *o, const op_def *op, const op_shape *shape,
                               const struct clkit_device_props *dev, tune_result *r)
{
    op_problem p = op_problem_make(op, o->dtype, *shape);
    if (o->out_dtype >= 0) p.out_dtype = (clkit_dtype)o->out_dtype;
    p.allow_tf32 = o->tf32, p.exact_f32 = o->exact_f32;
    op_shape_text(&p, r->shape, sizeof r->shape);
    r->flops = op->flops ? op->flops(&p) : 0;
    /* The tuner writes a scratch copy of the output. */
    const char *why = op_too_big(dev, &p, op_slot_bytes(&p, op->nin));
    if (why) {
        fprintf(stderr, "clkit tune: skipping %s: %s\n", r->shape, why);
        r->failure = "skipped: too big for the device";
    }
    return p;
}

static void print_results(const tune_result *r, int n, int unsaved, const op_problem *p,
                          const struct clkit_device_props *dev)
{
    char dtype[24];
    op_dtype_text(p, dtype, sizeof dtype);
    printf("\ntuned %s %s on %s (the winner per shape, %s):\n", p->op->name, dtype, dev->name,
           unsaved ? "stored in the cache unless marked" : "stored in the cache");
    printf("%-24s %10s %9s %8s  %s\n", "shape", "ms", "TFLOP/s", "tune s", "config");
    for (int i = 0; i < n; i++) {
        if (r[i].failure)
            printf("%-24s %s\n", r[i].shape, r[i].failure);
        else
            printf("%-24s %10.4g %9.4g %8.1f  %s%s\n", r[i].shape, r[i].ms,
                   r[i].flops / r[i].ms * 1e-9, r[i].seconds, r[i].config,
                   r[i].unsaved ? "  (not saved)" : "");
    }
}

/* The entries the cache could not keep, as the tuned-config file that --import reads, so that
   the tuning is not lost; takes the entries out of r. */
static void print_unsaved(tune_result *r, int n, int unsaved)
{
    json_object *root = json_object_new_object(), *entries = json_object_new_array();
    json_object_object_add(root, "format", json_object_new_int(1)); /* tune_cache.c's FORMAT_VERSION */
    json_object_object_add(root, "entries", entries);
    for (int i = 0; i < n; i++)
        if (r[i].unsaved) json_object_array_add(entries, r[i].unsaved);
    printf("\n%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
    fprintf(stderr, "clkit tune: %d winner%s could not be saved; the tuned-config file after the "
                    "table on stdout keeps %s: save it and run `clkit tune --import FILE` where "
                    "the cache can be written\n", unsaved, unsaved == 1 ? "" : "s",
            unsaved == 1 ? "it" : "them");
    json_object_put(root);
}

static int tune_all(clkit_context *ctx, const tune_opts *o, const op_def *op)
{
    op_shape shapes[OP_MAX_SHAPES];
    int n = tune_shapes(o, op, shapes), rc = TOOL_EXIT_OK;
    if (n <= 0) return n ? TOOL_EXIT_USAGE : bad_usage("--shapes lists no shape");
    struct clkit_device_props dev;
    clkit_device_props(ctx, &dev);
    tune_result *results = calloc((size_t)n, sizeof *results);
    if (!results) return TOOL_EXIT_FAIL;
    op_problem p;
    int unsaved = 0;
    for (int i = 0; i < n; i++) {
        p = tune_problem(o, op, &shapes[i], &dev, &results[i]);
        if (results[i].failure) continue;
        tune_progress t = {.shape = &results[i], .index = i, .count = n,
                           .tty = isatty(STDERR_FILENO), .best_ms = INFINITY};
        tune_one(ctx, &p, o, &t, &results[i]);
        unsaved += results[i].unsaved != NULL;
        if (results[i].failed || results[i].unsaved) rc = TOOL_EXIT_FAIL;
    }
    /* The title names the op and dtypes, which every problem shares. */
    print_results(results, n, unsaved, &p, &dev);
    if (unsaved) print_unsaved(results, n, unsaved);
    free(results);
    return rc;
}

/* One of --import and --export; 0 on success. */
static int transfer(clkit_context *ctx, const char *path, int import)
{
    clkit_status s = import ? clkit_tuned_import(ctx, path) : clkit_tuned_export(ctx, path);
    if (s) {
        tool_error(import ? "--import" : "--export", s, clkit_last_error(ctx));
        return TOOL_EXIT_FAIL;
    }
    fprintf(stderr, "clkit tune: %s %s\n", import ? "imported" : "exported to", path);
    return TOOL_EXIT_OK;
}

int cmd_tune(int argc, char **argv)
{
    tune_opts o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0) return rc;
    clkit_context *ctx;
    clkit_status s = tool_open(&ctx, o.device, NULL, 0);
    if (s) {
        tool_error("cannot open the device", s, "`clkit info` diagnoses");
        return TOOL_EXIT_FAIL;
    }
    rc = TOOL_EXIT_OK;
    if (!*clkit_cache_dir(ctx) && (o.import_from || o.shapes || o.standard)) {
        fprintf(stderr, "clkit tune: the cache is off (CLKIT_CACHE_DIR is empty, or no HOME): "
                        "nothing could be kept\n");
        rc = TOOL_EXIT_FAIL;
    }
    if (!rc && o.import_from) rc = transfer(ctx, o.import_from, 1);
    if (!rc && (o.shapes || o.standard)) rc = tune_all(ctx, &o, op_find(o.op));
    if (o.export_to && rc != TOOL_EXIT_USAGE) {
        int e = transfer(ctx, o.export_to, 0);
        if (!rc) rc = e;
    }
    clkit_context_release(ctx);
    return rc;
}
