/* clkit tune: fills the tuned-config cache for a list of shapes, and exports or imports it. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "ops.h"
#include "tool.h"

/* --budget at most: a year, far beyond any tuning, and exact in milliseconds. */
#define MAX_BUDGET_S (365 * 86400.0)

typedef struct tune_opts {
    const char *device, *op, *shapes, *export_to, *import_from;
    int standard, tf32, exact_f32;
    clkit_dtype dtype;
    int out_dtype;    /* -1: the op's default for the inputs */
    int transposed;   /* --layout as op_shape.transposed bits: nt = B, tn = A; -1: not given */
    double budget_s;  /* 0: no limit */
    op_shape list[OP_MAX_SHAPES];  /* the shapes to tune, --standard's then --shapes' */
    int count;
} tune_opts;

/* The winner of one shape, for the closing table. */
typedef struct tune_result {
    char shape[48], config[256];
    double ms, flops, seconds;
    char failure[160];    /* "": tuned; else why not ("skipped: ...", "failed") */
    int failed;           /* no winner is stored for the shape: the exit status says so */
    json_object *unsaved; /* tuned, but the cache could not keep it: its entry */
    char note[96];        /* what the budget left out of a tuned shape */
    int finished;         /* tuned, failed or skipped: all of the above is final */
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
               "winner per shape with its TFLOP/s (GFLOP/s where all are below 1 TFLOP/s).\n"
               "--import runs before tuning and --export after it; either may be given alone.\n"
               "\n"
               "  --op NAME        the op to tune (default matmul):");
    for (int i = 0; i < op_count; i++)
        if (op_table[i].tune) fprintf(f, " %s", op_table[i].name);
    fprintf(f, "\n"
               "  --shapes LIST    comma-separated MxNxK or MxNxKxBATCH (matmul), e.g.\n"
               "                   1024x1024x1024,1x4096x4096,512x512x512x16, with the CSV's\n"
               "                   .nt, .bshared, ... where wanted; BxHxLxD with .causal for a\n"
               "                   causal mask (attention, attention_backward), e.g.\n"
               "                   32x4x1024x128.causal; each dim 1 .. 2^31 - 1\n"
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
               "                   (K, M)) or tt, for the shapes that do not name theirs\n"
               "  --budget S       a limit in seconds (above 0) on the tuning of the whole call,\n"
               "                   default none. The shapes share it: each in turn gets what is\n"
               "                   left over the shapes left, and stops trying candidates when\n"
               "                   its share is spent (all passes of it: matmul's candidates,\n"
               "                   then GROUP_M of the winner), keeping the best so far. At the\n"
               "                   limit the call stops, in the middle of a candidate if it must\n"
               "                   (a kernel build cannot be interrupted): that candidate and\n"
               "                   the pass it is in are lost, the winners of earlier passes\n"
               "                   stay stored. The table says what the budget cut short and\n"
               "                   which shapes it left untuned.\n"
               "  --export FILE    write every tuned entry (all devices) to FILE\n"
               "  --import FILE    merge the entries of FILE into the cache\n"
               "  --device D       an index or a name substring, as $CLKIT_DEVICE\n"
               "\n"
               "Where the cache cannot be written (a read-only directory, a full disk), the\n"
               "winners are still shown, and their entries follow the table on stdout as a\n"
               "tuned-config file (from its first '{' line on): save it and --import it where\n"
               "the cache can be written.\n"
               "\n"
               "Exit status: 0 done, 1 a shape could not be tuned (the budget ran out before\n"
               "it had a winner, too), a winner could not be saved (its entry is then on\n"
               "stdout) or a file not read or written, 2 bad usage.\n");
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

/* The shapes to tune into o->list, --layout applied; -1 when the options are good, else the
   exit status. */
static int parse_shapes(tune_opts *o, const op_def *op)
{
    char why[256];
    if (o->standard) o->count = op->tune_shapes(o->list);
    if (o->shapes && op_shape_list(op, o->shapes, o->list, &o->count, why, sizeof why))
        return tool_usage_error("tune", "--shapes: %s", why);
    for (int i = 0; i < o->count && o->transposed >= 0; i++) {
        if (o->list[i].transposed && o->list[i].transposed != o->transposed)
            return tool_usage_error("tune", "--layout contradicts the layout of a shape in "
                                    "--shapes");
        o->list[i].transposed = o->transposed;
    }
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
    o->out_dtype = o->transposed = -1;
    int c, t;
    while ((c = getopt_long(argc, argv, ":hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'o': o->op = optarg; break;
        case 's': o->shapes = optarg; break;
        case 'S': o->standard = 1; break;
        case 'f': o->tf32 = 1; break;
        case 'x': o->exact_f32 = 1; break;
        case 't':
            if ((t = float_dtype(optarg)) < 0)
                return tool_usage_error("tune", "--dtype takes f32, f16 or bf16, not '%s'", optarg);
            o->dtype = (clkit_dtype)t;
            break;
        case 'T':
            if ((o->out_dtype = float_dtype(optarg)) < 0)
                return tool_usage_error("tune", "--out-dtype takes f32, f16 or bf16, not '%s'",
                                        optarg);
            break;
        case 'l':
            if ((o->transposed = parse_layout(optarg)) < 0)
                return tool_usage_error("tune", "--layout takes nn, nt, tn or tt, not '%s'", optarg);
            break;
        case 'b':
            if (tool_parse_real(optarg, 0, MAX_BUDGET_S, &o->budget_s) || o->budget_s <= 0)
                return tool_usage_error("tune", "--budget takes seconds, a number above 0 and "
                                        "at most %.0f, not '%s'", MAX_BUDGET_S, optarg);
            break;
        case 'e': o->export_to = optarg; break;
        case 'i': o->import_from = optarg; break;
        case 'd': o->device = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: return tool_option_error("tune", c, argv);
        }
    }
    if (optind < argc) return tool_usage_error("tune", "unexpected argument '%s'", argv[optind]);
    const op_def *op = op_find(o->op);
    if (!op || !op->tune) return tool_usage_error("tune", "no op '%s' to tune", o->op);
    if (o->shapes && o->standard)
        return tool_usage_error("tune", "--shapes and --standard exclude each other");
    if (o->tf32 && o->exact_f32)
        return tool_usage_error("tune", "--tf32 and --exact-f32 exclude each other");
    if (!o->shapes && !o->standard && !o->export_to && !o->import_from)
        return tool_usage_error("tune", "nothing to do: give --shapes, --standard, --export or "
                                "--import");
    return parse_shapes(o, op);
}

/* ---- the run ---- */

/* What the progress line of one shape shows, the winner it saw, and the budget of its tuning
   call. */
typedef struct tune_progress {
    int active;         /* the tuning call of the shape has begun */
    int index;          /* of the shape */
    int tty;            /* stderr is a terminal: one line redrawn, else a line per candidate */
    int pass;           /* the tuner's passes (matmul: candidates, then GROUP_M of the best) */
    int done, total;    /* candidates of this pass */
    int timed, offered; /* candidates tried and offered by the finished passes */
    double best_ms;
    char best[256];
    double stored_ms;   /* the winner an earlier pass stored; NaN: none yet */
    char stored[256];
    double start_ms, last_ms;  /* clock at the call, and at the last candidate's end */
    double longest_ms;         /* the longest candidate so far, builds included */
    double share_end_ms;       /* when the shape's share of the budget is spent; INFINITY */
    clkit_tune_options topt;   /* the library's, budget_s cut at each new pass */
} tune_progress;

/* Shared by the thread that tunes and the one that waits for it. */
typedef struct tune_run {
    const tune_opts *o;
    const op_def *op;
    clkit_context *ctx;
    struct clkit_device_props dev;
    op_problem *problems;
    tune_result *results;
    int n;
    double deadline_ms;    /* the clock at which the budget runs out; INFINITY: none */
    pthread_mutex_t lock;  /* over all below, the results and the output of either thread */
    pthread_cond_t changed;
    int current;           /* the shape being tuned */
    int finished;
    tune_progress progress;  /* of the current shape */
} tune_run;

static void lock(tune_run *r)
{
    pthread_mutex_lock(&r->lock);
}

static void unlock(tune_run *r)
{
    pthread_mutex_unlock(&r->lock);
}

/* ---- progress ---- */

static void progress_bar(char *buf, int width, int done, int total)
{
    int full = total > 0 ? done * width / total : width;
    for (int i = 0; i < width; i++) buf[i] = i < full ? '#' : '.';
    buf[width] = 0;
}

/* text in at most room characters, its middle replaced by "..." where it is longer; nothing
   where too little of it would show. */
static void elide(const char *text, int room, char *out, size_t n)
{
    int len = (int)strlen(text);
    if (len <= room || room < 8) {
        snprintf(out, n, "%s", len <= room ? text : "");
        return;
    }
    int left = (room - 3 + 1) / 2, right = room - 3 - left;
    snprintf(out, n, "%.*s...%s", left, text, text + len - right);
}

/* The line of one candidate. On a terminal it keeps within the width: the bar goes first,
   then the time left, then the config yields to the rest (elided in the middle); what still
   does not fit is cut. */
static void progress_line(const tune_run *r, const char *config, const char *took, char *line,
                          size_t n)
{
    const tune_progress *t = &r->progress;
    const tune_result *res = &r->results[t->index];
    char head[96], bar[24] = "", count[32], best[96], left[32] = "", shown[256];
    double scale, tflops = res->flops / t->best_ms * 1e-9;
    const char *unit = tool_rate_unit(1, tflops, &scale);
    snprintf(head, sizeof head, "[%d/%d] %s pass %d ", t->index + 1, r->n, res->shape, t->pass);
    bar[0] = '[';
    progress_bar(bar + 1, 20, t->done, t->total);
    strcat(bar, "] ");
    snprintf(count, sizeof count, "%d/%d ", t->done, t->total);
    snprintf(best, sizeof best, ": %s; best %.4g ms, %.3g %s", took, t->best_ms, tflops * scale,
             unit);
    if (isfinite(r->deadline_ms))
        snprintf(left, sizeof left, "; %.1f s left",
                 fmax(r->deadline_ms - tool_now_ms(), 0) * 1e-3);
    int width = t->tty ? tool_term_width() - 1 : (int)n - 1;
    int fixed = (int)(strlen(head) + strlen(count) + strlen(best));
    int least = (int)strlen(config) < 16 ? (int)strlen(config) : 16;
    if (fixed + (int)(strlen(bar) + strlen(left)) + least > width) bar[0] = 0;
    if (fixed + (int)strlen(left) + least > width) left[0] = 0;
    elide(config, width - fixed - (int)(strlen(bar) + strlen(left)), shown, sizeof shown);
    snprintf(line, n, "%s%s%s%s%s%s", head, bar, count, shown, best, left);
    if ((int)strlen(line) > width) line[width > 0 ? width : 0] = 0;
}

/* A pass ends where the next begins or the call returns: what it timed of what it had. */
static void end_pass(tune_progress *t)
{
    t->timed += t->done;
    t->offered += t->total;
    t->done = t->total = 0;
}

/* clkit_autotune reads topt.budget_s before each candidate and ends the pass once the pass
   has run that long, counted from its start (no earlier than the previous candidate's end).
   The shape's share steers it: a new pass (matmul's GROUP_M after its candidates) gets what
   the share has left, not the whole of it again, and a pass ends early where one more
   candidate as long as the longest so far (a kernel build, where the driver's cache misses)
   would end past the share, rather than meet the deadline in the middle and lose the pass. */
static void steer_budget(tune_progress *t, int new_pass, double now)
{
    t->longest_ms = fmax(t->longest_ms, now - t->last_ms);
    if (!isfinite(t->share_end_ms)) return;
    if (new_pass) t->topt.budget_s = fmax(t->share_end_ms - t->last_ms, 1) * 1e-3;
    if (now + t->longest_ms > t->share_end_ms) t->topt.budget_s = 1e-9;
}

static void on_candidate(void *user, int done, int total, const char *config, double ms,
                         double best_ms)
{
    tune_run *r = user;
    tune_progress *t = &r->progress;
    double now = tool_now_ms();
    lock(r);
    int new_pass = done == 1 && t->pass;
    if (new_pass) {
        t->stored_ms = t->best_ms;
        snprintf(t->stored, sizeof t->stored, "%s", t->best);
        end_pass(t);
    }
    t->pass += done == 1;
    steer_budget(t, new_pass, now);
    t->done = done;
    t->total = total;
    t->last_ms = now;
    /* The stored winner is the best of the last pass, which re-times the earlier ones. */
    if (ms >= 0 && ms == best_ms) {
        t->best_ms = best_ms;
        snprintf(t->best, sizeof t->best, "%s", config);
    }
    char took[32], line[1024];
    if (ms >= 0)
        snprintf(took, sizeof took, "%.4g ms", ms);
    else
        snprintf(took, sizeof took, "cannot run");
    progress_line(r, config, took, line, sizeof line);
    fprintf(stderr, "%s%s%s", t->tty ? "\r" : "", line, t->tty ? "\033[K" : "\n");
    fflush(stderr);
    unlock(r);
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
static void keep_unsaved(const tune_progress *t, tune_result *res, json_object *entry)
{
    const char *detail = tool_detail(CLKIT_ERR_IO, op_error());
    int len = (int)(strstr(detail, unsaved_mark) - detail);
    fprintf(stderr, "clkit tune: %s: tuned, but not saved in the cache: %.*s\n", res->shape, len,
            detail);
    res->unsaved = entry;
    res->ms = t->best_ms;
    snprintf(res->config, sizeof res->config, "%s", t->best);
}

/* The outcome of a tuning call that returned s into res. */
static void record(tune_run *r, const op_problem *p, clkit_status s, tune_result *res)
{
    tune_progress *t = &r->progress;
    json_object *entry = s == CLKIT_ERR_IO && isfinite(t->best_ms) ? unsaved_entry(op_error()) : NULL;
    if (entry) {
        keep_unsaved(t, res, entry);
        return;
    }
    if (s == CLKIT_ERR_UNSUPPORTED) {
        fprintf(stderr, "clkit tune: skipping %s: %s\n", res->shape, op_error());
        snprintf(res->failure, sizeof res->failure,
                 "skipped: nothing to tune on this device (see stderr)");
        return;
    }
    if (s) {
        char what[96];
        snprintf(what, sizeof what, "tune %s %s", p->op->name, res->shape);
        tool_error(what, s, op_error());
        snprintf(res->failure, sizeof res->failure, "failed");
        res->failed = 1;
        return;
    }
    res->ms = t->best_ms;
    snprintf(res->config, sizeof res->config, "%s", t->best);
    if (t->timed < t->offered)
        snprintf(res->note, sizeof res->note, "(budget: %d of %d candidates tried)", t->timed,
                 t->offered);
}

/* Tunes shape i, with its share of what the budget has left: an equal part for each shape
   still to tune, so that a shape done early leaves its time to the rest. */
static void tune_one(tune_run *r, op_problem *p, int i)
{
    tune_progress *t = &r->progress;
    tune_result *res = &r->results[i];
    lock(r);
    double now = tool_now_ms(), share = (r->deadline_ms - now) / (r->n - i);
    memset(t, 0, sizeof *t);
    t->active = 1;
    t->index = i;
    t->tty = isatty(STDERR_FILENO);
    t->best_ms = INFINITY;
    t->stored_ms = NAN;
    t->start_ms = t->last_ms = now;
    t->share_end_ms = now + share;
    t->topt = (clkit_tune_options){.budget_s = isfinite(share) ? fmax(share, 1) * 1e-3 : 0,
                                   .progress = on_candidate, .user = r};
    unlock(r);
    clkit_status s = op_alloc(r->ctx, p);
    if (!s) s = op_status(r->ctx, p->op->tune(r->ctx, p, &t->topt));
    op_free(p);
    lock(r);
    if (t->tty && t->pass) fputc('\n', stderr);
    end_pass(t);
    res->seconds = (tool_now_ms() - t->start_ms) * 1e-3;
    record(r, p, s, res);
    res->finished = 1;
    unlock(r);
}

/* The problem of one shape, or a note why it is skipped (into res->failure). */
static op_problem tune_problem(const tune_opts *o, const op_def *op, const op_shape *shape,
                               const struct clkit_device_props *dev, tune_result *res)
{
    op_problem p = op_problem_make(op, o->dtype, *shape);
    if (o->out_dtype >= 0) p.out_dtype = (clkit_dtype)o->out_dtype;
    p.allow_tf32 = o->tf32, p.exact_f32 = o->exact_f32;
    op_shape_text(&p, res->shape, sizeof res->shape);
    res->flops = op->flops ? op->flops(&p) : 0;
    /* The tuner writes a scratch copy of the output. */
    const char *why = op_too_big(dev, &p, op_slot_bytes(&p, op->nin));
    if (why) {
        fprintf(stderr, "clkit tune: skipping %s: %s\n", res->shape, why);
        snprintf(res->failure, sizeof res->failure, "skipped: too big for the device");
    }
    return p;
}

static void *tune_worker(void *arg)
{
    tune_run *r = arg;
    for (int i = 0; i < r->n; i++) {
        lock(r);
        r->current = i;
        int skip = r->results[i].finished;
        unlock(r);
        if (!skip) tune_one(r, &r->problems[i], i);
    }
    lock(r);
    r->finished = 1;
    pthread_cond_signal(&r->changed);
    unlock(r);
    return NULL;
}

/* ---- the budget ---- */

/* Waits for the worker until the deadline; 1 when the budget ran out first, with the lock
   held from then on: the worker stops at its next report, or in the build it is in. */
static int wait_worker(tune_run *r, pthread_t worker)
{
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    double left_s = (r->deadline_ms - tool_now_ms()) * 1e-3;
    if (isfinite(left_s)) {
        double whole = floor(fmax(left_s, 0));
        at.tv_sec += (time_t)whole;
        at.tv_nsec += (long)((fmax(left_s, 0) - whole) * 1e9);
        at.tv_sec += at.tv_nsec / 1000000000;
        at.tv_nsec %= 1000000000;
    }
    lock(r);
    int e = 0;
    while (!r->finished && e != ETIMEDOUT)
        e = isfinite(left_s) ? pthread_cond_timedwait(&r->changed, &r->lock, &at)
                             : pthread_cond_wait(&r->changed, &r->lock);
    if (!r->finished) return 1;
    unlock(r);
    pthread_join(worker, NULL);
    return 0;
}

/* The shape the budget interrupted, and those it left untuned, in the results. */
static void mark_interrupted(tune_run *r)
{
    const tune_progress *t = &r->progress;
    if (t->tty && t->active && t->pass) fputc('\n', stderr);
    for (int i = r->current; i < r->n; i++) {
        tune_result *res = &r->results[i];
        if (res->finished) continue;
        res->failed = isnan(t->stored_ms) || !t->active || t->index != i;
        if (res->failed && t->active && t->index == i && t->total)
            snprintf(res->failure, sizeof res->failure, "not tuned: the budget ran out during "
                     "its first pass, at candidate %d of %d", t->done + 1, t->total);
        else if (res->failed && t->active && t->index == i)
            snprintf(res->failure, sizeof res->failure, "not tuned: the budget ran out during "
                     "its first candidate");
        else if (res->failed)
            snprintf(res->failure, sizeof res->failure, "not tuned: the budget ran out before it");
        if (res->failed) continue;
        res->seconds = (tool_now_ms() - t->start_ms) * 1e-3;
        res->ms = t->stored_ms;
        snprintf(res->config, sizeof res->config, "%s", t->stored);
        snprintf(res->note, sizeof res->note, "(budget: ran out in pass %d; pass %d's winner "
                 "stored)", t->pass, t->pass - 1);
    }
}

/* ---- results ---- */

static void print_results(const tune_result *res, int n, int unsaved, const op_problem *p,
                          const struct clkit_device_props *dev)
{
    char dtype[24];
    double best = 0, scale;
    for (int i = 0; i < n; i++)
        if (!res[i].failure[0]) best = fmax(best, res[i].flops / res[i].ms * 1e-9);
    const char *unit = tool_rate_unit(1, best, &scale);
    op_dtype_text(p, dtype, sizeof dtype);
    printf("\ntuned %s %s on %s (the winner per shape, %s):\n", p->op->name, dtype, dev->name,
           unsaved ? "stored in the cache unless marked" : "stored in the cache");
    printf("%-24s %10s %9s %8s  %s\n", "shape", "ms", unit, "tune s", "config");
    for (int i = 0; i < n; i++) {
        if (res[i].failure[0])
            printf("%-24s %s\n", res[i].shape, res[i].failure);
        else
            printf("%-24s %10.4g %9.4g %8.1f  %s%s%s%s\n", res[i].shape, res[i].ms,
                   res[i].flops / res[i].ms * 1e-9 * scale, res[i].seconds, res[i].config,
                   res[i].unsaved ? "  (not saved)" : "", res[i].note[0] ? "  " : "",
                   res[i].note);
    }
}

/* The entries the cache could not keep, as the tuned-config file that --import reads, so that
   the tuning is not lost; takes the entries out of res. */
static void print_unsaved(tune_result *res, int n, int unsaved)
{
    json_object *root = json_object_new_object(), *entries = json_object_new_array();
    json_object_object_add(root, "format", json_object_new_int(1)); /* tune_cache.c's FORMAT_VERSION */
    json_object_object_add(root, "entries", entries);
    for (int i = 0; i < n; i++)
        if (res[i].unsaved) json_object_array_add(entries, res[i].unsaved);
    printf("\n%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
    fprintf(stderr, "clkit tune: %d winner%s could not be saved; the tuned-config file after the "
                    "table on stdout keeps %s: save it and run `clkit tune --import FILE` where "
                    "the cache can be written\n", unsaved, unsaved == 1 ? "" : "s",
            unsaved == 1 ? "it" : "them");
    json_object_put(root);
}

/* What the budget did, on stderr, where it cut anything. */
static void print_budget(const tune_opts *o, const tune_result *res, int n, int interrupted)
{
    int full = 0, cut = 0, none = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].failure[0] && !res[i].failed) continue;
        full += !res[i].failure[0] && !res[i].note[0];
        cut += !res[i].failure[0] && res[i].note[0];
        none += res[i].failed;
    }
    if (cut || interrupted)
        fprintf(stderr, "clkit tune: the budget of %g s %s: %d shape%s tuned in full, %d in part, "
                        "%d not tuned\n", o->budget_s, interrupted ? "ran out" : "cut candidates",
                full, full == 1 ? "" : "s", cut, none);
}

/* Tunes every shape in a thread of its own, so that the budget can end the call at its
   deadline whatever the tuner is doing. *interrupted: it did; the thread still holds the
   context and the run, which stay allocated. */
static int tune_all(clkit_context *ctx, const tune_opts *o, const op_def *op, int *interrupted)
{
    tune_run *r = calloc(1, sizeof *r);
    tune_result *res = calloc((size_t)o->count, sizeof *res);
    op_problem *problems = calloc((size_t)o->count, sizeof *problems);
    pthread_condattr_t attr;
    pthread_t worker;
    int started = r && res && problems && pthread_condattr_init(&attr) == 0;
    if (started) {
        *r = (tune_run){.o = o, .op = op, .ctx = ctx, .problems = problems, .results = res,
                        .n = o->count, .deadline_ms = INFINITY, .progress.stored_ms = NAN};
        clkit_device_props(ctx, &r->dev);
        for (int i = 0; i < r->n; i++) {
            problems[i] = tune_problem(o, op, &o->list[i], &r->dev, &res[i]);
            res[i].finished = res[i].failure[0] != 0;
        }
        if (o->budget_s > 0) r->deadline_ms = tool_now_ms() + o->budget_s * 1e3;
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_mutex_init(&r->lock, NULL);
        pthread_cond_init(&r->changed, &attr);
        pthread_condattr_destroy(&attr);
        started = pthread_create(&worker, NULL, tune_worker, r) == 0;
    }
    if (!started) {
        fprintf(stderr, "clkit tune: cannot start the tuning thread\n");
        free(r);
        free(res);
        free(problems);
        return TOOL_EXIT_FAIL;
    }
    *interrupted = wait_worker(r, worker);
    if (*interrupted) mark_interrupted(r);
    int rc = TOOL_EXIT_OK, unsaved = 0;
    for (int i = 0; i < r->n; i++) {
        unsaved += res[i].unsaved != NULL;
        if (res[i].failed || res[i].unsaved) rc = TOOL_EXIT_FAIL;
    }
    /* The title names the op and dtypes, which every problem shares. */
    print_results(res, r->n, unsaved, &problems[0], &r->dev);
    if (unsaved) print_unsaved(res, r->n, unsaved);
    print_budget(o, res, r->n, *interrupted);
    if (*interrupted) return rc;
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->changed);
    free(problems);
    free(res);
    free(r);
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

/* --export after an interrupted tuning, in a context of its own: the tuning thread keeps its. */
static int export_apart(const tune_opts *o)
{
    clkit_context *ctx;
    clkit_status s = tool_open(&ctx, o->device, NULL, 0);
    if (s) {
        tool_error("--export", s, "cannot open the device again");
        return TOOL_EXIT_FAIL;
    }
    int rc = transfer(ctx, o->export_to, 0);
    clkit_context_release(ctx);
    return rc;
}

int cmd_tune(int argc, char **argv)
{
    tune_opts o;
    int rc = parse(argc, argv, &o), interrupted = 0;
    if (rc >= 0) return rc;
    clkit_context *ctx;
    clkit_status s = tool_open(&ctx, o.device, NULL, 0);
    if (s) {
        tool_error("cannot open the device", s, "`clkit info` diagnoses");
        return TOOL_EXIT_FAIL;
    }
    rc = TOOL_EXIT_OK;
    if (!*clkit_cache_dir(ctx) && (o.import_from || o.count)) {
        fprintf(stderr, "clkit tune: the cache is off (CLKIT_CACHE_DIR is empty, or no HOME): "
                        "nothing could be kept\n");
        rc = TOOL_EXIT_FAIL;
    }
    if (!rc && o.import_from) rc = transfer(ctx, o.import_from, 1);
    if (!rc && o.count) rc = tune_all(ctx, &o, op_find(o.op), &interrupted);
    if (o.export_to) {
        int e = interrupted ? export_apart(&o) : transfer(ctx, o.export_to, 0);
        if (!rc) rc = e;
    }
    if (interrupted) {
        /* The tuning thread may be inside the driver, in a kernel build nothing can
           interrupt: exit's handlers would tear the driver down under it. */
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    clkit_context_release(ctx);
    return rc;
}
