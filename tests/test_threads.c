/* Threads: one context per thread, the model include/clkit.h supports. THREADS threads each
   create a context and run every op family in every float dtype, ROUNDS times, each starting
   at a different family and dtype so that different kernels build and run at once; every
   output must be bitwise what a single-threaded run of the same calls gave. The contexts
   share a fresh binary cache directory without a tuned.json, so the threads also miss, build,
   write and load the same cache entries at once and find no tuned configurations together.
   CI also runs this suite under ThreadSanitizer (.ci/run), where it shows races in the host
   code that results alone would not. Worker threads assert nothing (Check's assertions end
   the test process from the thread that fails): they record their first failure, which the
   main thread reports. */
#define _GNU_SOURCE
#include "util.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 2
#define DTYPES 3     /* f32, f16, bf16 */
#define MAX_OUT 8    /* outputs a family records */
#define NVALUES 16384

static double values[NVALUES];

/* The bytes of one output buffer after a family ran. */
typedef struct output {
    size_t n;
    unsigned char *bytes;
} output;

typedef struct family_result {
    int count;
    output out[MAX_OUT];
} family_result;

typedef struct job job;
typedef void (*family_fn)(job *j, clkit_dtype dt, family_result *r);

struct job {
    clkit_context *ctx;
    cl_command_queue queue;
    int first;                              /* rotation of families and dtypes */
    pthread_barrier_t *start;               /* NULL: the single-threaded run */
    family_result *res;                     /* [ROUNDS][DTYPES][FAMILIES] */
    char error[2048];                       /* the first failure; "" if none */
};

static void job_fail(job *j, const char *fmt, ...)
{
    if (j->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->error, sizeof j->error, fmt, ap);
    va_end(ap);
}

#define OP(call)                                                                                 \
    do {                                                                                         \
        clkit_status s_ = (call);                                                                \
        if (s_ != CLKIT_OK)                                                                      \
            job_fail(j, "%s -> %s: %s", #call, clkit_status_string(s_), clkit_last_error(j->ctx));  \
    } while (0)

/* A contiguous tensor over a new buffer of exactly its size, holding values from `seed`'s
   place in the shared table (NULL buffer on failure: the op then fails with a message). */
static clkit_tensor input(job *j, clkit_dtype dt, int ndim, const int64_t *shape, int seed)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    size_t at = (size_t)seed * 997 % (NVALUES - (size_t)n);
    cl_mem m = ref_upload(j->ctx, dt, (size_t)n, values + at);
    if (!m) job_fail(j, "cannot upload %lld %s", (long long)n, clkit_dtype_name(dt));
    return clkit_tensor_contiguous(m, dt, ndim, shape);
}

/* Class indices spread over [0, v). */
static clkit_tensor targets(job *j, int64_t t, int64_t v)
{
    double idx[64];
    for (int64_t i = 0; i < t; i++) idx[i] = (double)((i * 37 + 5) % v);
    cl_mem m = ref_upload(j->ctx, CLKIT_I64, (size_t)t, idx);
    if (!m) job_fail(j, "cannot upload targets");
    return clkit_tensor_contiguous(m, CLKIT_I64, 1, &t);
}

/* Waits for the queue, records each tensor's whole buffer and releases them all. */
static void record(job *j, family_result *r, int nout, clkit_tensor *outs, int nin,
                   clkit_tensor *ins)
{
    OP(clkit_finish(j->ctx));
    for (int i = 0; i < nout; i++) {
        output *o = &r->out[r->count++];
        o->n = 0;
        o->bytes = NULL;
        if (!outs[i].buffer) continue;
        clGetMemObjectInfo(outs[i].buffer, CL_MEM_SIZE, sizeof o->n, &o->n, NULL);
        o->bytes = malloc(o->n);
        if (!o->bytes || clEnqueueReadBuffer(j->queue, outs[i].buffer, CL_TRUE, 0, o->n, o->bytes, 0,
                                             NULL, NULL) != CL_SUCCESS)
            job_fail(j, "cannot read back an output of %zu bytes", o->n);
        clReleaseMemObject(outs[i].buffer);
    }
    for (int i = 0; i < nin; i++)
        if (ins[i].buffer) clReleaseMemObject(ins[i].buffer);
}

/* ---- the families: small ragged shapes, the ones tests/oclgrind_ops.c runs ---- */

static void fam_add(job *j, clkit_dtype dt, family_result *r)
{
    int64_t s[3] = {2, 3, 129};
    clkit_tensor x = input(j, dt, 3, s, 1), y = input(j, dt, 3, s, 2), o = input(j, dt, 3, s, 3);
    OP(clkit_add(j->ctx, &x, &y, &o));
    clkit_tensor in[2] = {x, y};
    record(j, r, 1, &o, 2, in);
}

static void fam_copy(job *j, clkit_dtype dt, family_result *r)
{
    int64_t s[2] = {37, 53};
    clkit_tensor x = input(j, dt, 2, s, 4), o = input(j, dt, 2, s, 5);
    clkit_tensor transposed = o;
    transposed.strides[0] = 1, transposed.strides[1] = s[0];
    OP(clkit_copy(j->ctx, &x, &transposed));
    record(j, r, 1, &o, 1, &x);
}

/* Grayscale takes u8 and f32 whatever dt is: each dtype pass runs both. */
static void fam_grayscale(job *j, clkit_dtype dt, family_result *r)
{
    (void)dt;
    int64_t rgb[3] = {3, 17, 23}, gray[2] = {17, 23};
    for (int u8 = 0; u8 < 2; u8++) {
        clkit_dtype g = u8 ? CLKIT_U8 : CLKIT_F32;
        clkit_tensor x = input(j, g, 3, rgb, 6), o = input(j, g, 2, gray, 7);
        OP(clkit_rgb_to_gray(j->ctx, &x, &o));
        record(j, r, 1, &o, 1, &x);
    }
}

static void fam_swizzle(job *j, clkit_dtype dt, family_result *r)
{
    int64_t s[2] = {33, 45};
    clkit_tensor x = input(j, dt, 2, s, 8), o = input(j, dt, 2, s, 9);
    OP(clkit_swizzle2d(j->ctx, &x, &o, 4));
    record(j, r, 1, &o, 1, &x);
}

static void fam_softmax(job *j, clkit_dtype dt, family_result *r)
{
    static const int64_t shapes[][2] = {{7, 301}, {2, 5000}};
    for (int i = 0; i < 2; i++) {
        clkit_tensor x = input(j, dt, 2, shapes[i], 10 + i), o = input(j, dt, 2, shapes[i], 12);
        OP(clkit_softmax(j->ctx, &x, &o));
        record(j, r, 1, &o, 1, &x);
    }
}

static void fam_dropout(job *j, clkit_dtype dt, family_result *r)
{
    int64_t s[1] = {1001};
    clkit_tensor x = input(j, dt, 1, s, 13), o = input(j, dt, 1, s, 14);
    OP(clkit_dropout(j->ctx, &x, &o, 0.3f, 7));
    record(j, r, 1, &o, 1, &x);
}

/* The default plan, a register-blocked tile and, for f32 where libclkit has it, CLBlast. */
static void fam_matmul(job *j, clkit_dtype dt, family_result *r)
{
    static const char *configs[] = {
        NULL, "KERNEL=2,BLOCK_M=32,BLOCK_N=32,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=2"};
    int64_t sa[2] = {37, 29}, sb[2] = {29, 41}, sc[2] = {37, 41};
    for (int i = 0; i < 3; i++) {
        if (i == 2 && (dt != CLKIT_F32 || !CLKIT_HAVE_CLBLAST)) break;
        clkit_tensor a = input(j, dt, 2, sa, 15), b = input(j, dt, 2, sb, 16);
        clkit_tensor c = input(j, CLKIT_F32, 2, sc, 17);
        clkit_matmul_options o = clkit_matmul_defaults();
        if (i < 2) o.config = configs[i];
        else o.provider = CLKIT_PROVIDER_CLBLAST;
        o.beta = i == 2 ? 0.5f : 0.25f;
        OP(clkit_matmul(j->ctx, &a, &b, &c, &o));
        clkit_tensor in[2] = {a, b};
        record(j, r, 1, &c, 2, in);
    }
}

static void fam_layernorm(job *j, clkit_dtype dt, family_result *r)
{
    int64_t s[2] = {7, 301}, m[1] = {7}, n[1] = {301};
    clkit_tensor x = input(j, dt, 2, s, 18), y = input(j, dt, 2, s, 19), dy = input(j, dt, 2, s, 20);
    clkit_tensor dx = input(j, dt, 2, s, 21), w = input(j, dt, 1, n, 22), b = input(j, dt, 1, n, 23);
    clkit_tensor dw = input(j, dt, 1, n, 24), db = input(j, dt, 1, n, 25);
    clkit_tensor mean = input(j, CLKIT_F32, 1, m, 26), rstd = input(j, CLKIT_F32, 1, m, 27);
    OP(clkit_layernorm_forward(j->ctx, &x, &w, &b, 1e-5f, &y, &mean, &rstd));
    OP(clkit_layernorm_backward(j->ctx, &dy, &x, &w, &mean, &rstd, &dx, &dw, &db));
    clkit_tensor out[6] = {y, mean, rstd, dx, dw, db}, in[4] = {x, dy, w, b};
    record(j, r, 6, out, 4, in);
}

/* Grouped-query, causal, Lq != Lk, lengths off every block size. */
static void fam_attention(job *j, clkit_dtype dt, family_result *r)
{
    int64_t qs[4] = {1, 2, 37, 32}, ks[4] = {1, 1, 45, 32}, ls[3] = {1, 2, 37};
    clkit_tensor q = input(j, dt, 4, qs, 28), k = input(j, dt, 4, ks, 29), v = input(j, dt, 4, ks, 30);
    clkit_tensor o = input(j, dt, 4, qs, 31), dout = input(j, dt, 4, qs, 32), dq = input(j, dt, 4, qs, 33);
    clkit_tensor dk = input(j, dt, 4, ks, 34), dv = input(j, dt, 4, ks, 35);
    clkit_tensor lse = input(j, CLKIT_F32, 3, ls, 36);
    clkit_attention_options opt = clkit_attention_defaults();
    opt.causal = 1;
    OP(clkit_attention_forward(j->ctx, &q, &k, &v, &opt, &o, &lse));
    OP(clkit_attention_backward(j->ctx, &q, &k, &v, &o, &dout, &lse, &opt, &dq, &dk, &dv));
    clkit_tensor out[5] = {o, lse, dq, dk, dv}, in[4] = {q, k, v, dout};
    record(j, r, 5, out, 4, in);
}

/* Cross-entropy with every option, and linear + cross-entropy with every gradient. */
static void fam_cross_entropy(job *j, clkit_dtype dt, family_result *r)
{
    int64_t ls[2] = {5, 1000}, one[1] = {1};
    clkit_tensor logits = input(j, dt, 2, ls, 37), dlogits = input(j, dt, 2, ls, 38);
    clkit_tensor tg = targets(j, 5, 1000), loss = input(j, CLKIT_F32, 1, one, 39);
    clkit_tensor zl = input(j, CLKIT_F32, 1, one, 40);
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    o.label_smoothing = 0.1f, o.softcap = 30.0f, o.z_loss_scale = 1e-4f, o.z_loss = &zl;
    OP(clkit_cross_entropy(j->ctx, &logits, &tg, &o, &loss, &dlogits));
    clkit_tensor out[3] = {loss, zl, dlogits}, in[2] = {logits, tg};
    record(j, r, 3, out, 2, in);

    int64_t xs[2] = {6, 40}, ws[2] = {150, 40}, bs[1] = {150}, t6[1] = {6};
    clkit_tensor x = input(j, dt, 2, xs, 41), w = input(j, dt, 2, ws, 42), b = input(j, dt, 1, bs, 43);
    clkit_tensor dx = input(j, dt, 2, xs, 44), dw = input(j, dt, 2, ws, 45), db = input(j, dt, 1, bs, 46);
    clkit_tensor per_token = input(j, CLKIT_F32, 1, t6, 47);
    tg = targets(j, 6, 150);
    o = clkit_cross_entropy_defaults();
    o.reduction = CLKIT_REDUCTION_NONE;
    OP(clkit_linear_cross_entropy(j->ctx, &x, &w, &b, &tg, &o, &per_token, &dx, &dw, &db));
    clkit_tensor lout[4] = {per_token, dx, dw, db}, lin[4] = {x, w, b, tg};
    record(j, r, 4, lout, 4, lin);
}

static const family_fn families[] = {
    fam_add,    fam_copy,   fam_grayscale, fam_swizzle,   fam_softmax,
    fam_dropout, fam_matmul, fam_layernorm, fam_attention, fam_cross_entropy,
};
#define FAMILIES ((int)(sizeof families / sizeof *families))
static const char *const family_names[] = {
    "add",     "copy",   "grayscale", "swizzle",   "softmax",
    "dropout", "matmul", "layernorm", "attention", "cross_entropy",
};
static const clkit_dtype dtypes[DTYPES] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};

static family_result *slot(family_result *res, int round, int d, int f)
{
    return &res[((size_t)round * DTYPES + (size_t)d) * FAMILIES + (size_t)f];
}

static void *worker(void *arg)
{
    job *j = arg;
    if (j->start) pthread_barrier_wait(j->start);
    clkit_status s = clkit_context_create(&j->ctx, NULL);
    if (s != CLKIT_OK) {
        job_fail(j, "no context: %s", clkit_status_string(s));
        return NULL;
    }
    clkit_context_cl(j->ctx, NULL, &j->queue, NULL);
    for (int round = 0; round < ROUNDS && !j->error[0]; round++)
        for (int i = 0; i < DTYPES * FAMILIES && !j->error[0]; i++) {
            int k = (i + j->first) % (DTYPES * FAMILIES);
            int f = k % FAMILIES, d = (k / FAMILIES + j->first) % DTYPES;
            families[f](j, dtypes[d], slot(j->res, round, d, f));
        }
    clkit_context_release(j->ctx);
    return NULL;
}

static job *new_job(int first, pthread_barrier_t *start)
{
    job *j = calloc(1, sizeof *j);
    ck_assert(j != NULL);
    j->res = calloc((size_t)ROUNDS * DTYPES * FAMILIES, sizeof *j->res);
    ck_assert(j->res != NULL);
    j->first = first;
    j->start = start;
    return j;
}

static void free_job(job *j)
{
    for (size_t i = 0; i < (size_t)ROUNDS * DTYPES * FAMILIES; i++)
        for (int o = 0; o < j->res[i].count; o++) free(j->res[i].out[o].bytes);
    free(j->res);
    free(j);
}

/* Every output of every round of j equals the first round of the single-threaded run. */
static void assert_same(const job *base, const job *j, int thread)
{
    for (int round = 0; round < ROUNDS; round++)
        for (int d = 0; d < DTYPES; d++)
            for (int f = 0; f < FAMILIES; f++) {
                const family_result *want = slot(base->res, 0, d, f), *got = slot(j->res, round, d, f);
                ck_assert_msg(want->count > 0 && got->count == want->count,
                              "thread %d round %d %s %s: %d outputs, expected %d", thread, round,
                              family_names[f], clkit_dtype_name(dtypes[d]), got->count, want->count);
                for (int o = 0; o < want->count; o++) {
                    const output *a = &want->out[o], *b = &got->out[o];
                    ck_assert_msg(a->n == b->n && memcmp(a->bytes, b->bytes, a->n) == 0,
                                  "thread %d round %d %s %s: output %d differs from the "
                                  "single-threaded run", thread, round, family_names[f],
                                  clkit_dtype_name(dtypes[d]), o);
                }
            }
}

START_TEST(one_context_per_thread)
{
    char dir[] = "/tmp/clkit-threads-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", dir);
    ref_fill_random(values, NVALUES, CLKIT_F32, 0, 2, 1);

    job *base = new_job(0, NULL);
    worker(base);
    ck_assert_msg(!base->error[0], "single-threaded run: %s", base->error);
    assert_same(base, base, -1); /* its second round, from the in-memory program cache */

    pthread_barrier_t start;
    ck_assert_int_eq(pthread_barrier_init(&start, NULL, THREADS), 0);
    /* A cache directory no thread has used: they all miss, build and write the same entries. */
    char fresh[sizeof dir + 8];
    snprintf(fresh, sizeof fresh, "%s/fresh", dir);
    tu_setenv("CLKIT_CACHE_DIR", fresh);
    job *jobs[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = new_job(t * (DTYPES * FAMILIES) / THREADS + 1, &start);
        ck_assert_int_eq(pthread_create(&th[t], NULL, worker, jobs[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int t = 0; t < THREADS; t++) {
        ck_assert_msg(!jobs[t]->error[0], "thread %d: %s", t, jobs[t]->error);
        assert_same(base, jobs[t], t);
        free_job(jobs[t]);
    }
    free_job(base);
    tu_unsetenv("CLKIT_CACHE_DIR");
    char cmd[sizeof dir + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tu_tcase("threads");
    tcase_add_test(tc, one_context_per_thread);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
