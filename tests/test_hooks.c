/* The library's hooks: the log callback (what an invalid call reports reaches it, NULL gives
   stderr back, CLKIT_LOG filters it, threads deliver one at a time), events in and out of
   ops (a user event holds later ops back until it is set, a marker completes after the ops
   before it, bad arguments), and clkit_benchmark (ordered quantiles, the count of calls, each
   way of timing, bad options, a failing function). The suite runs with CLKIT_LOG=debug (set
   by main), so that an invalid call's message is logged. */
#define _GNU_SOURCE
#include "util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the log callback ---- */

/* What the callback saw; it runs serialised (clkit's lock), so no lock of its own. */
typedef struct log_seen {
    int count;
    clkit_log_level level;
    char last[2048];
    int matches;            /* messages containing `want` */
    const char *want;
} log_seen;

static void collect(void *user, clkit_log_level level, const char *message)
{
    log_seen *seen = user;
    seen->count++;
    seen->level = level;
    snprintf(seen->last, sizeof seen->last, "%s", message);
    if (seen->want && strstr(message, seen->want)) seen->matches++;
}

/* The invalid call's message arrives at debug level and is the text clkit_last_error gives;
   after NULL the same call writes to stderr again and the callback sees nothing more. */
START_TEST(log_callback_and_default)
{
    clkit_context *ctx = tu_ctx();
    log_seen seen = {0};
    seen.want = "events is NULL";
    clkit_set_log_callback(collect, &seen);
    ck_assert_int_eq(clkit_wait_events(ctx, 1, NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(seen.matches, 1);
    ck_assert_int_eq(seen.level, CLKIT_LOG_DEBUG);
    ck_assert_str_eq(seen.last, clkit_last_error(ctx));

    char path[] = "/tmp/clkit-hooks-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    ck_assert(fd >= 0 && saved >= 0);
    clkit_set_log_callback(NULL, NULL);
    fflush(stderr);
    dup2(fd, 2);
    clkit_status s = clkit_wait_events(ctx, 1, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_int_eq(s, CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(seen.matches, 1);
    char text[4096] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unlink(path);
    ck_assert(n > 0);
    text[n] = 0;
    ck_assert_msg(strstr(text, "clkit debug: null argument: events is NULL"),
                  "stderr got: %s", text);
    clkit_context_release(ctx);
}
END_TEST

/* Run in a new process by log_levels_respected (argv: --log-child): with CLKIT_LOG=error the
   callback gets the failed creation's error and not the invalid call's debug message. The
   exit status says which of the two went wrong. */
static int log_child(void)
{
    log_seen seen = {0};
    seen.want = "no-such-device-anywhere";
    clkit_set_log_callback(collect, &seen);
    clkit_context *ctx;
    clkit_options opt = {0};
    opt.device = "no-such-device-anywhere";
    if (clkit_context_create(&ctx, &opt) != CLKIT_ERR_NO_DEVICE) return 10;
    int bad = (seen.matches != 1 || seen.level != CLKIT_LOG_ERROR) ? 1 : 0;
    if (clkit_context_create(&ctx, NULL) != CLKIT_OK) return 11;
    int before = seen.count;
    clkit_wait_events(ctx, 1, NULL);
    bad |= seen.count != before ? 2 : 0;
    clkit_context_release(ctx);
    return bad;
}

START_TEST(log_levels_respected)
{
    pid_t pid = fork();
    if (pid == 0) {
        /* A new image: this process read CLKIT_LOG once already. */
        char *argv[] = {"test_hooks", "--log-child", NULL};
        tu_setenv("CLKIT_LOG", "error");
        execv("/proc/self/exe", argv);
        _exit(12);
    }
    int status;
    ck_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    ck_assert_msg(WEXITSTATUS(status) == 0, "child: %d (1: no error-level message, 2: a debug "
                  "message got through, 10+: setup)", WEXITSTATUS(status));
}
END_TEST

#define LOG_THREADS 4
#define LOG_CALLS 200

static void *log_worker(void *arg)
{
    clkit_context *ctx = arg;
    for (int i = 0; i < LOG_CALLS; i++) clkit_wait_events(ctx, 1, NULL);
    return NULL;
}

/* Contexts on several threads log at once: every message is delivered, one at a time (the
   callback's plain counter loses none). */
START_TEST(log_callback_threads)
{
    clkit_context *ctx[LOG_THREADS];
    pthread_t th[LOG_THREADS];
    log_seen seen = {0};
    seen.want = "events is NULL";
    for (int t = 0; t < LOG_THREADS; t++) ctx[t] = tu_ctx();
    clkit_set_log_callback(collect, &seen);
    for (int t = 0; t < LOG_THREADS; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, log_worker, ctx[t]), 0);
    for (int t = 0; t < LOG_THREADS; t++) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    clkit_set_log_callback(NULL, NULL);
    ck_assert_int_eq(seen.matches, LOG_THREADS * LOG_CALLS);
    for (int t = 0; t < LOG_THREADS; t++) clkit_context_release(ctx[t]);
}
END_TEST

/* ---- events ---- */

#define N 4096

typedef struct add_problem {
    cl_mem x, y, out;
    clkit_tensor tx, ty, tout;
} add_problem;

static add_problem add_make(clkit_context *ctx)
{
    double v[N];
    for (int i = 0; i < N; i++) v[i] = i % 17;
    add_problem a;
    int64_t shape[1] = {N};
    a.x = tu_buffer(ctx, CLKIT_F32, N, v);
    a.y = tu_buffer(ctx, CLKIT_F32, N, v);
    a.out = tu_buffer(ctx, CLKIT_F32, N, NULL);
    a.tx = clkit_tensor_contiguous(a.x, CLKIT_F32, 1, shape);
    a.ty = clkit_tensor_contiguous(a.y, CLKIT_F32, 1, shape);
    a.tout = clkit_tensor_contiguous(a.out, CLKIT_F32, 1, shape);
    return a;
}

static void add_check(clkit_context *ctx, const add_problem *a)
{
    static double got[N], want[N];
    tu_read(ctx, a->out, CLKIT_F32, N, got);
    for (int i = 0; i < N; i++) want[i] = 2 * (i % 17);
    tu_assert_close(got, want, N, 0, 0, "x + y");
}

static void add_free(add_problem *a)
{
    clReleaseMemObject(a->x), clReleaseMemObject(a->y), clReleaseMemObject(a->out);
}

static cl_int event_status(cl_event e)
{
    cl_int st = -1;
    ck_assert_int_eq(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL),
                     CL_SUCCESS);
    return st;
}

/* An op enqueued after clkit_wait_events on a user event cannot run before the event is set:
   a marker after it stays incomplete however long one looks, then completes once it is set,
   and the op's result is right. */
START_TEST(wait_on_user_event)
{
    clkit_context *ctx = tu_ctx();
    add_problem a = add_make(ctx);
    TU_CHECK(clkit_add(ctx, &a.tx, &a.ty, &a.tout)); /* builds the kernel: no wait below */
    TU_CHECK(clkit_finish(ctx));
    cl_context cl;
    clkit_context_cl(ctx, &cl, NULL, NULL);
    cl_int err;
    cl_event user = clCreateUserEvent(cl, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    TU_CHECK(clkit_wait_events(ctx, 1, &user));
    TU_CHECK(clkit_add(ctx, &a.tx, &a.tx, &a.tout));
    cl_event marker;
    TU_CHECK(clkit_enqueue_marker(ctx, &marker));
    cl_command_queue q;
    clkit_context_cl(ctx, NULL, &q, NULL);
    ck_assert_int_eq(clFlush(q), CL_SUCCESS);
    /* Nothing can complete the marker but the user event: no timing is involved. */
    ck_assert_int_gt(event_status(marker), CL_COMPLETE);
    ck_assert_int_eq(clSetUserEventStatus(user, CL_COMPLETE), CL_SUCCESS);
    ck_assert_int_eq(clWaitForEvents(1, &marker), CL_SUCCESS);
    ck_assert_int_eq(event_status(marker), CL_COMPLETE);
    add_check(ctx, &a);
    clReleaseEvent(marker);
    clReleaseEvent(user);
    add_free(&a);
    clkit_context_release(ctx);
}
END_TEST

/* A marker completes with the ops before it: complete once clkit_finish returns, on an idle
   queue as well. */
START_TEST(marker_completes_after_finish)
{
    clkit_context *ctx = tu_ctx();
    add_problem a = add_make(ctx);
    cl_event m1, m2;
    TU_CHECK(clkit_add(ctx, &a.tx, &a.ty, &a.tout));
    TU_CHECK(clkit_enqueue_marker(ctx, &m1));
    TU_CHECK(clkit_finish(ctx));
    ck_assert_int_eq(event_status(m1), CL_COMPLETE);
    TU_CHECK(clkit_enqueue_marker(ctx, &m2));
    ck_assert_int_eq(clWaitForEvents(1, &m2), CL_SUCCESS);
    ck_assert_int_eq(event_status(m2), CL_COMPLETE);
    /* A marker of one context is something another's ops can wait for. */
    TU_CHECK(clkit_wait_events(ctx, 1, &m1));
    TU_CHECK(clkit_add(ctx, &a.tx, &a.ty, &a.tout));
    add_check(ctx, &a);
    clReleaseEvent(m1), clReleaseEvent(m2);
    add_free(&a);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(event_bad_arguments)
{
    clkit_context *ctx = tu_ctx();
    cl_event e = (cl_event)1;
    ck_assert_int_eq(clkit_wait_events(NULL, 0, NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(clkit_enqueue_marker(NULL, &e), CLKIT_ERR_NULL_ARGUMENT);
    TU_CHECK(clkit_wait_events(ctx, 0, NULL));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_wait_events(ctx, 2, NULL));
    ck_assert(strstr(clkit_last_error(ctx), "events is NULL"));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_enqueue_marker(ctx, NULL));

    cl_context cl;
    clkit_context_cl(ctx, &cl, NULL, NULL);
    cl_int err;
    cl_event good = clCreateUserEvent(cl, &err), list[2] = {good, NULL};
    ck_assert_int_eq(clSetUserEventStatus(good, CL_COMPLETE), CL_SUCCESS);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_wait_events(ctx, 2, list));
    ck_assert(strstr(clkit_last_error(ctx), "events[1]"));

    /* Another context's event: OpenCL refuses it in a wait list. */
    clkit_context *other = tu_ctx();
    cl_event foreign;
    ck_assert_int_eq(clkit_enqueue_marker(other, &foreign), CLKIT_OK);
    list[1] = foreign;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_wait_events(ctx, 2, list));
    ck_assert(strstr(clkit_last_error(ctx), "events[1]"));

    /* A failed event would end every op queued after it. */
    cl_event failed = clCreateUserEvent(cl, &err);
    ck_assert_int_eq(clSetUserEventStatus(failed, -1), CL_SUCCESS);
    list[1] = failed;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_wait_events(ctx, 2, list));
    ck_assert(strstr(clkit_last_error(ctx), "failed"));

    /* Nothing was enqueued by the refused calls: the queue still runs. */
    add_problem a = add_make(ctx);
    TU_CHECK(clkit_add(ctx, &a.tx, &a.ty, &a.tout));
    add_check(ctx, &a);
    add_free(&a);
    clReleaseEvent(good), clReleaseEvent(foreign), clReleaseEvent(failed);
    clkit_context_release(other);
    clkit_context_release(ctx);
}
END_TEST

/* ---- clkit_benchmark ---- */

typedef struct bench_user {
    add_problem a;
    int calls;
    int fail_at;   /* > 0: that call passes a bad tensor */
    int fail_own;  /* > 0: that call returns a failure of its own, with no message */
} bench_user;

static clkit_status bench_add(clkit_context *ctx, void *user)
{
    bench_user *u = user;
    u->calls++;
    if (u->calls == u->fail_own) return CLKIT_ERR_INVALID_VALUE;
    clkit_tensor x = u->a.tx;
    if (u->calls == u->fail_at) x.ndim = 7;
    return clkit_add(ctx, &x, &u->a.ty, &u->a.tout);
}

static void assert_ordered(const clkit_benchmark_result *r)
{
    ck_assert_msg(r->min_ms >= 0 && r->min_ms <= r->p20_ms && r->p20_ms <= r->median_ms &&
                  r->median_ms <= r->p80_ms && r->p80_ms <= r->max_ms,
                  "min %g p20 %g median %g p80 %g max %g", r->min_ms, r->p20_ms, r->median_ms,
                  r->p80_ms, r->max_ms);
    ck_assert(r->mean_ms >= r->min_ms && r->mean_ms <= r->max_ms);
    ck_assert(r->max_ms > 0);
}

/* Events on a profiling context: a fixed count of repeats, requested quantiles that match
   the named ones, every call of fn counted, the flush as asked. */
START_TEST(benchmark_events)
{
    clkit_context *ctx = tu_ctx();
    bench_user u = {add_make(ctx), 0, 0, 0};
    clkit_benchmark_options o = clkit_benchmark_defaults();
    ck_assert_int_eq(o.timing, CLKIT_TIMING_AUTO);
    ck_assert(o.flush && o.warmup_ms == 25 && o.rep_ms == 100 && o.min_reps == 10);
    o.reps = 7;
    o.warmup_ms = 1;
    o.flush_bytes = (1 << 20) + 2;   /* rounded down to whole fill words */
    o.nquantiles = 4;
    o.quantiles[0] = 0, o.quantiles[1] = 0.5, o.quantiles[2] = 1, o.quantiles[3] = 0.2;
    clkit_benchmark_result r;
    TU_CHECK(clkit_benchmark(ctx, bench_add, &u, &o, &r));
    ck_assert_int_eq(r.timing, CLKIT_TIMING_EVENTS);
    ck_assert_int_eq(r.reps, 7);
    ck_assert_int_eq(r.batch, 1);
    ck_assert_int_ge(r.warmup, 1);
    ck_assert_int_eq(r.calls, 3 + r.warmup + r.reps);
    ck_assert_int_eq(u.calls, r.calls);
    ck_assert_uint_eq(r.flush_bytes, 1 << 20);
    assert_ordered(&r);
    ck_assert(r.quantile_ms[0] == r.min_ms && r.quantile_ms[1] == r.median_ms &&
              r.quantile_ms[2] == r.max_ms && r.quantile_ms[3] == r.p20_ms);
    add_check(ctx, &u.a);
    add_free(&u.a);
    clkit_context_release(ctx);
}
END_TEST

/* Wall clock: AUTO on a context without profiling, with the default flush and a budget that
   picks the count; then batched, without flushes, the batch in the count of calls. */
START_TEST(benchmark_wall)
{
    clkit_context *ctx;
    ck_assert_int_eq(clkit_context_create(&ctx, NULL), CLKIT_OK);
    bench_user u = {add_make(ctx), 0, 0, 0};
    clkit_benchmark_options o = clkit_benchmark_defaults();
    o.warmup_ms = 1, o.rep_ms = 2, o.min_reps = 3, o.max_reps = 5;
    clkit_benchmark_result r;
    TU_CHECK(clkit_benchmark(ctx, bench_add, &u, &o, &r));
    ck_assert_int_eq(r.timing, CLKIT_TIMING_WALL);
    ck_assert(r.reps >= 3 && r.reps <= 5);
    ck_assert(r.warmup >= 1 && r.warmup <= 5);
    ck_assert_int_eq(u.calls, 3 + r.warmup + r.reps);
    ck_assert_uint_ge(r.flush_bytes, 64u << 20);   /* the default on a CPU; more elsewhere */
    /* What the size query reports is what a default run wrote (whole fill words). */
    ck_assert_uint_eq(r.flush_bytes, clkit_benchmark_flush_bytes(ctx) / 4 * 4);
    ck_assert_uint_eq(clkit_benchmark_flush_bytes(NULL), 0);
    assert_ordered(&r);

    u.calls = 0;
    o.timing = CLKIT_TIMING_WALL_BATCHED;
    o.reps = 4;
    TU_CHECK(clkit_benchmark(ctx, bench_add, &u, &o, &r));
    ck_assert_int_eq(r.timing, CLKIT_TIMING_WALL_BATCHED);
    ck_assert_int_eq(r.reps, 4);
    ck_assert(r.batch >= 1 && r.batch <= 1000);
    ck_assert_int_eq(u.calls, 3 + r.warmup + r.reps * r.batch);
    ck_assert_int_eq(r.calls, u.calls);
    ck_assert_uint_eq(r.flush_bytes, 0);
    assert_ordered(&r);
    add_check(ctx, &u.a);
    add_free(&u.a);
    clkit_context_release(ctx);
}
END_TEST

/* A failure of fn ends the benchmark with its status and message, and leaves no profiling
   span open; a failure fn makes up itself gets a message naming the call. */
START_TEST(benchmark_fn_fails)
{
    clkit_context *ctx = tu_ctx();
    bench_user u = {add_make(ctx), 0, 5, 0};
    clkit_benchmark_options o = clkit_benchmark_defaults();
    o.reps = 3, o.flush_bytes = 4096;
    clkit_benchmark_result r;
    TU_EXPECT(CLKIT_ERR_NDIM, clkit_benchmark(ctx, bench_add, &u, &o, &r));
    ck_assert_int_eq(u.calls, 5);
    ck_assert_int_eq(r.calls, 5);
    ck_assert_msg(strstr(clkit_last_error(ctx), "wrong number of dimensions"), "%s",
                  clkit_last_error(ctx));
    double ms;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_profile_end(ctx, &ms));

    u.calls = 0, u.fail_at = 0, u.fail_own = 2;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_benchmark(ctx, bench_add, &u, &o, &r));
    ck_assert_msg(strstr(clkit_last_error(ctx), "call 2"), "%s", clkit_last_error(ctx));
    add_free(&u.a);
    clkit_context_release(ctx);
}
END_TEST

static clkit_benchmark_options bad_options(int which)
{
    clkit_benchmark_options o = clkit_benchmark_defaults();
    switch (which) {
    case 0: o.min_reps = 0; break;
    case 1: o.max_reps = o.min_reps - 1; break;
    case 2: o.reps = -1; break;
    case 3: o.warmup_ms = NAN; break;
    case 4: o.rep_ms = -1; break;
    case 5: o.wall_limit_ms = INFINITY; break;
    case 6: o.nquantiles = CLKIT_BENCHMARK_MAX_QUANTILES + 1; break;
    case 7: o.nquantiles = 1, o.quantiles[0] = 1.5; break;
    case 8: o.timing = (clkit_timing)99; break;
    case 9: o.reserved[3] = 1; break;
    default: o.flush_bytes = UINT64_MAX; break;
    }
    return o;
}

START_TEST(benchmark_bad_arguments)
{
    clkit_context *ctx = tu_ctx();
    bench_user u = {add_make(ctx), 0, 0, 0};
    clkit_benchmark_result r;
    ck_assert_int_eq(clkit_benchmark(NULL, bench_add, &u, NULL, &r), CLKIT_ERR_NULL_ARGUMENT);
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_benchmark(ctx, NULL, &u, NULL, &r));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_benchmark(ctx, bench_add, &u, NULL, NULL));
    for (int i = 0; i <= 10; i++) {
        clkit_benchmark_options o = bad_options(i);
        clkit_status s = clkit_benchmark(ctx, bench_add, &u, &o, &r);
        ck_assert_msg(s == CLKIT_ERR_INVALID_VALUE, "bad options %d: %s", i,
                      clkit_status_string(s));
        ck_assert_msg(clkit_last_error(ctx)[0], "bad options %d left no message", i);
    }
    /* A flush buffer of another cl_context. */
    clkit_context *other;
    ck_assert_int_eq(clkit_context_create(&other, NULL), CLKIT_OK);
    cl_mem foreign = tu_buffer(other, CLKIT_F32, 64, NULL);
    clkit_benchmark_options o = clkit_benchmark_defaults();
    o.flush_buffer = foreign;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_benchmark(ctx, bench_add, &u, &o, &r));
    /* Events need profiling; a profiling span open already would lose its events. */
    o = clkit_benchmark_defaults();
    o.timing = CLKIT_TIMING_EVENTS;
    ck_assert_int_eq(clkit_benchmark(other, bench_add, &u, &o, &r), CLKIT_ERR_UNSUPPORTED);
    ck_assert(clkit_last_error(other)[0]);
    TU_CHECK(clkit_profile_begin(ctx));
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_benchmark(ctx, bench_add, &u, NULL, &r));
    double ms;
    TU_CHECK(clkit_profile_end(ctx, &ms));
    ck_assert_int_eq(u.calls, 0);
    clReleaseMemObject(foreign);
    clkit_context_release(other);
    add_free(&u.a);
    clkit_context_release(ctx);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--log-child")) return log_child();
    /* Before any call logs: the level is read once. */
    tu_setenv("CLKIT_LOG", "debug");
    Suite *s = suite_create("hooks");
    TCase *tc = tu_tcase("hooks");
    tcase_add_test(tc, log_callback_and_default);
    tcase_add_test(tc, log_levels_respected);
    tcase_add_test(tc, log_callback_threads);
    tcase_add_test(tc, wait_on_user_event);
    tcase_add_test(tc, marker_completes_after_finish);
    tcase_add_test(tc, event_bad_arguments);
    tcase_add_test(tc, benchmark_events);
    tcase_add_test(tc, benchmark_wall);
    tcase_add_test(tc, benchmark_fn_fails);
    tcase_add_test(tc, benchmark_bad_arguments);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
