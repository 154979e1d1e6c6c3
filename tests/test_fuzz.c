/* An API fuzzer for every public entry point of clkit.h.

   Each case builds a random call of one op: tensor descriptors over sub-buffers of one arena
   buffer, with random guard bytes between them, and random option structs. Two modes:

   - valid: small random shapes (zero dims included), random legal layouts (permuted, padded,
     negative strides, broadcasting zero strides on inputs, junk strides on extent-1 dims,
     offsets), in place where the op allows it, legal options. The call must succeed and its
     outputs match the double-precision references of tests/ref, within what the op's own
     suite allows for its dtype.
   - invalid: such a call with 1-3 mutations: NULL tensors, buffers or context; ndim, dtype,
     shape, stride and offset values at the edges (0, -1, 2^31, 2^62, INT64_MIN, ...);
     outputs aliasing inputs exactly, shifted or through a second cl_mem over the same memory;
     buffers too small; swapped arguments; out-of-range, NaN and infinite options.

   Every call is checked against the arena's image before it: a failing call must leave every
   byte as it was and set a non-empty clkit_last_error; a succeeding call must only have been
   given views that lie inside their buffers, outputs that overlap nothing but their allowed
   in-place input, and must write nothing outside its outputs' elements (guards, inputs,
   padding). A mutated call that succeeds is also checked against the reference when its
   options are untouched and its inputs finite and moderate. Calls this model deems valid but
   whose work would be huge (zero strides make any shape fit) are skipped, not run.

   The seed is fixed (CLKIT_FUZZ_SEED), the case count is CLKIT_FUZZ_CASES (3/4 invalid, 1/4
   valid: the valid ones launch kernels) and CLKIT_FUZZ_CASE=k runs case k alone, for a
   reproduction. Check forks each test, so a crash fails that test; the case in progress is
   kept in memory shared with the parent, which names it and prints the summary line. Tuning
   runs on a second context whose cache directory is private to the fuzzer, so that its
   entries never steer other programs' kernels. */
#define _GNU_SOURCE
#include "util.h"

#include <CL/cl_half.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_T 10
#define MAX_SLOTS 16
#define ARENA (1u << 19)
/* Calls the model deems valid with more work than this (sum of elements times the largest
   dimension, a bound on every op's work) are not run. */
#define MAX_WORK 4e6

enum { MODE_INVALID, MODE_VALID };

/* ---- random numbers ---- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi], inclusive. */
static int64_t irange(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(next(r) % (uint64_t)(hi - lo + 1));
}

static double urange(rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(next(r) >> 11) * 0x1.0p-53);
}

static bool chance(rng *r, double p) { return urange(r, 0, 1) < p; }

/* ---- statistics, shared with the parent process ---- */

enum { F_MISMATCH, F_TOUCHED, F_EMPTY, F_REJECTED, F_ACCEPTED, F_STRAY, F_STATUS, F_KINDS };
static const char *const finding_names[F_KINDS] = {
    "mismatch", "touched on error", "empty message", "valid rejected", "invalid accepted",
    "stray write", "bad status"};

#define TESTS 3
#define FIRST 12

typedef struct stats {
    long cases, accepted, skipped, findings[F_KINDS];
    char running[TESTS][600]; /* the case a test is in, "" between cases */
    char first[FIRST][900];
    int nfirst;
} stats;

static stats *g_stats;

static struct {
    long cases, only;
    uint64_t seed;
} g_env;

/* ---- devices: a context and its arena ---- */

typedef struct fdev {
    clkit_context *ctx;
    cl_context cl;
    cl_command_queue q;
    cl_mem arena;
    size_t align;
    int mm_tensor_cores, attn_tensor_cores; /* matmul's, attention's fast path NV_MMA */
} fdev;

static fdev g_main, g_tune;
static uint8_t g_before[ARENA], g_after[ARENA];
static uint16_t g_mask[ARENA]; /* bit i: tensor i (an output) may write this byte */

static void dev_open(fdev *d, clkit_context *ctx)
{
    d->ctx = ctx;
    ck_assert_int_eq(clkit_context_cl(ctx, &d->cl, &d->q, NULL), CLKIT_OK);
    d->mm_tensor_cores = tu_fast_path(ctx, "matmul", CLKIT_FAST_PATH_NV_MMA);
    d->attn_tensor_cores = tu_fast_path(ctx, "attention", CLKIT_FAST_PATH_NV_MMA);
    cl_device_id dev;
    clkit_context_cl(ctx, NULL, NULL, &dev);
    cl_uint bits = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
    d->align = bits >= 8 ? bits / 8 : 128;
    cl_int err;
    d->arena = clCreateBuffer(d->cl, CL_MEM_READ_WRITE, ARENA, NULL, &err);
    ck_assert_msg(d->arena != NULL, "no arena: %d", err);
}

static void dev_close(fdev *d)
{
    if (!d->ctx) return;
    clReleaseMemObject(d->arena);
    clkit_context_release(d->ctx);
    memset(d, 0, sizeof *d);
}

/* The tuning context keeps its tuned.json in a directory of its own under the default
   cache, where the kernels it builds also stay for the next run. */
static void tune_open(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", clkit_cache_dir(g_main.ctx));
    if (dir[0]) {
        strncat(dir, "/fuzz-tuning", sizeof dir - strlen(dir) - 1);
        mkdir(dir, 0700);
    }
    clkit_options o = {0};
    o.cache_dir = dir;
    clkit_context *ctx = NULL;
    ck_assert_int_eq(clkit_context_create(&ctx, &o), CLKIT_OK);
    dev_open(&g_tune, ctx);
}

/* ---- cases ---- */

/* A region of the arena that one or more tensors' buffers cover. */
typedef struct slot {
    size_t origin, size;
    cl_mem buf;
} slot;

struct op;

typedef struct fcase {
    const struct op *op;
    rng r;
    int mode;
    long index;
    clkit_tensor t[MAX_T];
    bool present[MAX_T];
    int slot_of[MAX_T]; /* -1 when the buffer is NULL */
    double lo[MAX_T], hi[MAX_T]; /* values the tensor's slot starts with */
    slot s[MAX_SLOTS];
    int nslots;
    size_t end; /* arena bytes in use */
    bool null_ctx, opt_mutated, pass_opt;
    char mutations[160];
    /* scalar arguments and options of the ops */
    float f; /* dropout's p, layer norm's eps */
    uint64_t seed;
    int group;
    clkit_matmul_options mm;
    clkit_cross_entropy_options ce;
    clkit_attention_options at;
    clkit_tune_options topt;
    char config[96];
    char why[900];
} fcase;

typedef struct op {
    const char *name;
    int nt;
    const char *names[MAX_T];
    unsigned outputs, optional; /* bit masks over the tensors */
    int alias[2][2];            /* (output, input) pairs that may be the exact same view */
    int nalias;
    int weight[2];              /* share of invalid and of valid cases */
    bool tuning;                /* runs on the tuning context */
    bool values_after_mutation; /* no relation between input values that a mutation breaks */
    void (*gen)(fcase *c);
    void (*prepare)(fcase *c);  /* values that must hold a relation; may be NULL */
    clkit_status (*call)(clkit_context *ctx, fcase *c);
    void (*mutate_opt)(fcase *c); /* NULL: the op has no options */
    bool (*check)(fcase *c);      /* outputs against the reference; NULL: none */
} op;

static const clkit_tensor *P(const fcase *c, int i) { return c->present[i] ? &c->t[i] : NULL; }

static clkit_dtype float_dt(rng *r)
{
    static const clkit_dtype d[4] = {CLKIT_F32, CLKIT_F32, CLKIT_F16, CLKIT_BF16};
    return d[irange(r, 0, 3)];
}

/* A dimension: 0 now and then, else 1..hi. */
static int64_t dim(rng *r, int64_t hi) { return chance(r, 0.06) ? 0 : irange(r, 1, hi); }

static int64_t numel(const clkit_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Strides of a legal view of t's shape: dims in a random memory order, padded now and then,
   some walked backwards; inputs may broadcast a dim (stride 0); extent-1 dims get junk
   strides, which no op may apply. */
static void random_strides(rng *r, clkit_tensor *t, bool input)
{
    int order[CLKIT_MAX_DIMS] = {0, 1, 2, 3};
    for (int i = t->ndim - 1; i > 0 && chance(r, 0.5); i--) {
        int j = (int)irange(r, 0, i), tmp = order[i];
        order[i] = order[j], order[j] = tmp;
    }
    int64_t run = 1;
    for (int k = t->ndim - 1; k >= 0; k--) {
        int d = order[k];
        t->strides[d] = chance(r, 0.2) ? -run : run;
        run = run * (t->shape[d] > 0 ? t->shape[d] : 1) + (chance(r, 0.2) ? irange(r, 1, 2) : 0);
        if (input && chance(r, 0.1)) t->strides[d] = 0;
        if (t->shape[d] == 1 && chance(r, 0.3)) t->strides[d] = irange(r, -1000000, 1000000);
    }
}

/* Element offsets (from the first element) of the view's lowest and highest elements. */
static void extent(const clkit_tensor *t, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t span = t->strides[i] * (t->shape[i] - 1);
        *(span < 0 ? lo : hi) += span;
    }
}

/* Tensor i gets a slot of its own: its view plus 0-3 elements of slack either side. */
static void own_slot(fcase *c, int i)
{
    clkit_tensor *t = &c->t[i];
    int64_t es = (int64_t)clkit_dtype_size(t->dtype), lo = 0, hi = 0, pre = irange(&c->r, 0, 3);
    int64_t post = chance(&c->r, 0.5) ? 0 : irange(&c->r, 1, 3);
    if (numel(t) > 0) extent(t, &lo, &hi);
    else hi = irange(&c->r, 0, 2);
    slot *s = &c->s[c->nslots];
    s->size = (size_t)((pre - lo + hi + 1 + post) * es);
    t->offset = (size_t)((pre - lo) * es);
    c->slot_of[i] = c->nslots++;
}

static void tensor(fcase *c, int i, clkit_dtype dt, int ndim, const int64_t *shape, bool input)
{
    clkit_tensor *t = &c->t[i];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    random_strides(&c->r, t, input);
    c->present[i] = true;
    if (c->hi[i] == c->lo[i]) c->lo[i] = -2, c->hi[i] = 2;
    own_slot(c, i);
}

/* Output `out` is exactly input `in`'s view: the op runs in place. */
static void alias(fcase *c, int out, int in)
{
    c->t[out] = c->t[in];
    c->present[out] = true;
    c->slot_of[out] = c->slot_of[in];
}

static void range(fcase *c, int i, double lo, double hi) { c->lo[i] = lo, c->hi[i] = hi; }

/* ---- values in the arena's image ---- */

static uint16_t bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static void put(clkit_dtype dt, uint8_t *p, double v)
{
    float f = (float)v;
    uint16_t h;
    switch (dt) {
    case CLKIT_F32: memcpy(p, &f, 4); break;
    case CLKIT_F16: h = cl_half_from_float(f, CL_HALF_RTE), memcpy(p, &h, 2); break;
    case CLKIT_BF16: h = bf16_bits(f), memcpy(p, &h, 2); break;
    case CLKIT_U8: *p = (uint8_t)v; break;
    case CLKIT_I32: { int32_t i = (int32_t)v; memcpy(p, &i, 4); break; }
    case CLKIT_I64: { int64_t i = (int64_t)v; memcpy(p, &i, 8); break; }
    }
}

static double get(clkit_dtype dt, const uint8_t *p)
{
    float f;
    uint16_t h;
    uint32_t u;
    int32_t i32;
    int64_t i64;
    switch (dt) {
    case CLKIT_F32: memcpy(&f, p, 4); return f;
    case CLKIT_F16: memcpy(&h, p, 2); return cl_half_to_float(h);
    case CLKIT_BF16: memcpy(&h, p, 2), u = (uint32_t)h << 16, memcpy(&f, &u, 4); return f;
    case CLKIT_U8: return *p;
    case CLKIT_I32: memcpy(&i32, p, 4); return i32;
    case CLKIT_I64: memcpy(&i64, p, 8); return (double)i64;
    }
    return NAN;
}

/* Byte position in the arena of element `linear` (row-major) of tensor i's valid view. */
static size_t at(const fcase *c, int i, int64_t linear)
{
    const clkit_tensor *t = &c->t[i];
    int64_t off = 0;
    for (int k = t->ndim - 1; k >= 0; k--) {
        off += linear % t->shape[k] * t->strides[k];
        linear /= t->shape[k];
    }
    return c->s[c->slot_of[i]].origin + t->offset + (size_t)(off * (int64_t)clkit_dtype_size(t->dtype));
}

/* Tensor i's elements, row-major, as img holds them; NULL when it is absent. */
static double *gather(const fcase *c, int i, const uint8_t *img)
{
    if (!c->present[i]) return NULL;
    int64_t n = numel(&c->t[i]);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert(v != NULL);
    for (int64_t e = 0; e < n; e++) v[e] = get(c->t[i].dtype, img + at(c, i, e));
    return v;
}

static double *in(const fcase *c, int i) { return gather(c, i, g_before); }
static double *out(const fcase *c, int i) { return gather(c, i, g_after); }

static double *zeros(int64_t n)
{
    double *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    ck_assert(v != NULL);
    return v;
}

static void scatter(fcase *c, int i, const double *v)
{
    for (int64_t e = 0; e < numel(&c->t[i]); e++) put(c->t[i].dtype, g_before + at(c, i, e), v[e]);
}

/* Whether got matches want within atol + rtol |want| (NaN matches NaN, inf the same inf);
   on a mismatch c->why names the element. */
static bool close_all(fcase *c, int i, const double *got, const double *want, int64_t n,
                      double atol, double rtol)
{
    for (int64_t e = 0; e < n; e++)
        if (!ref_close(got[e], want[e], atol, rtol)) {
            snprintf(c->why, sizeof c->why, "%s[%lld] is %.9g, expected %.9g (atol %.3g rtol %.3g)",
                     c->op->names[i], (long long)e, got[e], want[e], atol, rtol);
            return false;
        }
    return true;
}

/* The same with a tolerance per element. */
static bool close_tol(fcase *c, int i, const double *got, const double *want, const double *tol,
                      int64_t n)
{
    for (int64_t e = 0; e < n; e++)
        if (!(fabs(got[e] - want[e]) <= tol[e]) && !ref_close(got[e], want[e], 0, 0)) {
            snprintf(c->why, sizeof c->why, "%s[%lld] is %.9g, expected %.9g (tolerance %.3g)",
                     c->op->names[i], (long long)e, got[e], want[e], tol[e]);
            return false;
        }
    return true;
}

/* Checks that an accepted call's tensors relate as the reference needs: tensor i has these
   dims. A call accepted otherwise is a finding in itself. */
static bool dims_are(fcase *c, int i, int ndim, const int64_t *d)
{
    bool same = c->t[i].ndim == ndim;
    for (int k = 0; same && k < ndim; k++) same = c->t[i].shape[k] == d[k];
    if (!same) snprintf(c->why, sizeof c->why, "accepted %s with a shape that does not fit", c->op->names[i]);
    return same;
}

static void free_all(double **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
}

/* ---- add ---- */

enum { ADD_X, ADD_Y, ADD_OUT };

static void random_shape(rng *r, int ndim, int64_t hi, int64_t *shape)
{
    for (int i = 0; i < ndim; i++) shape[i] = dim(r, hi);
}

static void gen_add(fcase *c)
{
    clkit_dtype dt = float_dt(&c->r);
    int64_t shape[4];
    int nd = (int)irange(&c->r, 1, 4), in_place = (int)irange(&c->r, 0, 5);
    random_shape(&c->r, nd, 5, shape);
    tensor(c, ADD_X, dt, nd, shape, in_place != 1);
    tensor(c, ADD_Y, dt, nd, shape, in_place != 2);
    if (in_place == 1 || in_place == 2) alias(c, ADD_OUT, in_place == 1 ? ADD_X : ADD_Y);
    else tensor(c, ADD_OUT, dt, nd, shape, false);
}

static clkit_status call_add(clkit_context *ctx, fcase *c)
{
    return clkit_add(ctx, P(c, ADD_X), P(c, ADD_Y), P(c, ADD_OUT));
}

/* f32 sums rounded once to the dtype: exact. */
static bool check_add(fcase *c)
{
    const clkit_tensor *o = &c->t[ADD_OUT];
    if (!dims_are(c, ADD_X, o->ndim, o->shape) || !dims_are(c, ADD_Y, o->ndim, o->shape)) return false;
    int64_t n = numel(o);
    double *x = in(c, ADD_X), *y = in(c, ADD_Y), *got = out(c, ADD_OUT), *want = zeros(n);
    for (int64_t e = 0; e < n; e++) want[e] = ref_quantize(o->dtype, (float)((float)x[e] + (float)y[e]));
    bool ok = close_all(c, ADD_OUT, got, want, n, 0, 0);
    free_all((double *[]){x, y, got, want}, 4);
    return ok;
}

/* ---- copy ---- */

enum { CP_X, CP_OUT };

static bool is_float(clkit_dtype t) { return t == CLKIT_F32 || t == CLKIT_F16 || t == CLKIT_BF16; }

static void gen_copy(fcase *c)
{
    clkit_dtype dt = (clkit_dtype)irange(&c->r, CLKIT_F32, CLKIT_I64), odt = dt;
    if (is_float(dt)) odt = float_dt(&c->r);
    if (dt == CLKIT_U8) range(c, CP_X, 0, 255.99);
    if (dt == CLKIT_I32 || dt == CLKIT_I64) range(c, CP_X, -1e6, 1e6);
    int64_t shape[4];
    int nd = (int)irange(&c->r, 1, 4);
    bool in_place = odt == dt && chance(&c->r, 0.15);
    random_shape(&c->r, nd, 5, shape);
    tensor(c, CP_X, dt, nd, shape, !in_place);
    if (in_place) alias(c, CP_OUT, CP_X);
    else tensor(c, CP_OUT, odt, nd, shape, false);
}

static clkit_status call_copy(clkit_context *ctx, fcase *c)
{
    return clkit_copy(ctx, P(c, CP_X), P(c, CP_OUT));
}

/* Raw copies and round-to-nearest-even conversions: exact. */
static bool check_copy(fcase *c)
{
    const clkit_tensor *o = &c->t[CP_OUT];
    if (!dims_are(c, CP_X, o->ndim, o->shape)) return false;
    int64_t n = numel(o);
    double *x = in(c, CP_X), *got = out(c, CP_OUT);
    for (int64_t e = 0; e < n; e++) x[e] = ref_quantize(o->dtype, x[e]);
    bool ok = close_all(c, CP_OUT, got, x, n, 0, 0);
    free_all((double *[]){x, got}, 2);
    return ok;
}

/* ---- rgb_to_gray ---- */

enum { GR_RGB, GR_GRAY };

static void gen_gray(fcase *c)
{
    clkit_dtype dt = chance(&c->r, 0.5) ? CLKIT_U8 : CLKIT_F32;
    int64_t h = dim(&c->r, 9), w = dim(&c->r, 9), s3[3] = {3, h, w}, s2[2] = {h, w};
    if (dt == CLKIT_U8) range(c, GR_RGB, 0, 255.99);
    else range(c, GR_RGB, 0, 1);
    tensor(c, GR_RGB, dt, 3, s3, true);
    tensor(c, GR_GRAY, dt, 2, s2, false);
}

static clkit_status call_gray(clkit_context *ctx, fcase *c)
{
    return clkit_rgb_to_gray(ctx, P(c, GR_RGB), P(c, GR_GRAY));
}

/* u8 rounds an f32 value to nearest: within half a level of the exact one. */
static bool check_gray(fcase *c)
{
    const clkit_tensor *g = &c->t[GR_GRAY];
    int64_t h = g->shape[0], w = g->shape[1];
    if (!dims_are(c, GR_RGB, 3, (int64_t[]){3, h, w})) return false;
    double *rgb = in(c, GR_RGB), *got = out(c, GR_GRAY), *want = zeros(h * w);
    ref_rgb_to_gray(rgb, want, h, w);
    bool u8 = g->dtype == CLKIT_U8;
    bool ok = close_all(c, GR_GRAY, got, want, h * w, u8 ? 0.5 + 1e-3 : 1e-6, u8 ? 0 : 2e-6);
    free_all((double *[]){rgb, got, want}, 3);
    return ok;
}

/* ---- swizzle2d ---- */

enum { SW_X, SW_OUT };

static void gen_swizzle(fcase *c)
{
    clkit_dtype dt = (clkit_dtype)irange(&c->r, CLKIT_F32, CLKIT_I64);
    int64_t shape[2] = {dim(&c->r, 9), dim(&c->r, 9)};
    if (!is_float(dt)) range(c, SW_X, 0, 200);
    tensor(c, SW_X, dt, 2, shape, true);
    tensor(c, SW_OUT, dt, 2, shape, false);
    c->group = (int)irange(&c->r, 1, shape[0] + 2);
}

static clkit_status call_swizzle(clkit_context *ctx, fcase *c)
{
    return clkit_swizzle2d(ctx, P(c, SW_X), P(c, SW_OUT), c->group);
}

static void mutate_swizzle(fcase *c)
{
    static const int groups[] = {0, -1, INT_MIN, INT_MAX, 1, 2, 1000};
    c->group = groups[irange(&c->r, 0, 6)];
}

static bool check_swizzle(fcase *c)
{
    const clkit_tensor *o = &c->t[SW_OUT];
    int64_t m = o->shape[0], n = o->shape[1];
    if (!dims_are(c, SW_X, 2, o->shape)) return false;
    double *x = in(c, SW_X), *got = out(c, SW_OUT), *want = zeros(m * n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t ni, nj;
            ref_swizzle2d_index(i, j, m, n, c->group, &ni, &nj);
            want[ni * n + nj] = x[i * n + j];
        }
    bool ok = close_all(c, SW_OUT, got, want, m * n, 0, 0);
    free_all((double *[]){x, got, want}, 3);
    return ok;
}

/* ---- dropout ---- */

enum { DR_X, DR_OUT };

static void gen_dropout(fcase *c)
{
    clkit_dtype dt = float_dt(&c->r);
    int64_t shape[4];
    int nd = (int)irange(&c->r, 1, 4);
    bool in_place = chance(&c->r, 0.2);
    random_shape(&c->r, nd, 5, shape);
    tensor(c, DR_X, dt, nd, shape, !in_place);
    if (in_place) alias(c, DR_OUT, DR_X);
    else tensor(c, DR_OUT, dt, nd, shape, false);
    c->f = chance(&c->r, 0.1) ? 0.0f : chance(&c->r, 0.1) ? 1.0f : (float)urange(&c->r, 0, 1);
    c->seed = next(&c->r);
}

static clkit_status call_dropout(clkit_context *ctx, fcase *c)
{
    return clkit_dropout(ctx, P(c, DR_X), P(c, DR_OUT), c->f, c->seed);
}

static const float odd_floats[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f,
                                   1.0000001f, 0.99999994f, -1e-30f, 1e-45f, FLT_MAX, -FLT_MAX,
                                   2.0f, 1e30f};
#define ODD_FLOAT(r) odd_floats[irange(r, 0, sizeof odd_floats / sizeof *odd_floats - 1)]

static void mutate_dropout(fcase *c) { c->f = ODD_FLOAT(&c->r); }

/* The reference stream, element for element: exact. */
static bool check_dropout(fcase *c)
{
    const clkit_tensor *o = &c->t[DR_OUT];
    if (!dims_are(c, DR_X, o->ndim, o->shape)) return false;
    int64_t n = numel(o);
    double *x = in(c, DR_X), *got = out(c, DR_OUT), *want = zeros(n);
    for (int64_t e = 0; e < n; e++)
        want[e] = ref_quantize(o->dtype, ref_dropout_one(x[e], (uint64_t)e, c->f, c->seed));
    bool ok = close_all(c, DR_OUT, got, want, n, 0, 0);
    free_all((double *[]){x, got, want}, 3);
    return ok;
}

/* ---- softmax ---- */

enum { SM_X, SM_OUT };

static void gen_softmax(fcase *c)
{
    clkit_dtype dt = float_dt(&c->r);
    int64_t m = dim(&c->r, 6), shape[2] = {m, m == 0 && chance(&c->r, 0.3) ? 0 : irange(&c->r, 1, 40)};
    bool in_place = chance(&c->r, 0.2);
    range(c, SM_X, -5, 5);
    tensor(c, SM_X, dt, 2, shape, !in_place);
    if (in_place) alias(c, SM_OUT, SM_X);
    else tensor(c, SM_OUT, dt, 2, shape, false);
}

static clkit_status call_softmax(clkit_context *ctx, fcase *c)
{
    return clkit_softmax(ctx, P(c, SM_X), P(c, SM_OUT));
}

static bool check_softmax(fcase *c)
{
    const clkit_tensor *o = &c->t[SM_OUT];
    int64_t m = o->shape[0], n = o->shape[1];
    if (!dims_are(c, SM_X, 2, o->shape)) return false;
    double *x = in(c, SM_X), *got = out(c, SM_OUT), *want = zeros(m * n);
    ref_softmax(x, want, m, n);
    bool ok = close_all(c, SM_OUT, got, want, m * n, o->dtype == CLKIT_F16 ? 6e-8 : 1e-9,
                        ref_rtol(o->dtype));
    free_all((double *[]){x, got, want}, 3);
    return ok;
}

/* ---- matmul and its tuner ---- */

enum { MM_A, MM_B, MM_C };

/* An operand (rows, cols), 3-D with `batch` in front when batch >= 0. */
static void operand(fcase *c, int i, clkit_dtype dt, int64_t batch, int64_t rows, int64_t cols,
                    bool input)
{
    int64_t s3[3] = {batch, rows, cols};
    if (batch >= 0) tensor(c, i, dt, 3, s3, input);
    else tensor(c, i, dt, 2, s3 + 1, input);
}

static void gen_matmul_shapes(fcase *c, clkit_dtype dt, clkit_dtype cdt)
{
    bool batched = chance(&c->r, 0.4);
    int64_t bt = batched ? irange(&c->r, 0, 3) : -1, m = dim(&c->r, 6), n = dim(&c->r, 6);
    int64_t k = chance(&c->r, 0.08) ? 0 : irange(&c->r, 1, 8);
    /* a 2-D operand, or one of batch 1, broadcasts over C's batch */
    int64_t ab = !batched ? (chance(&c->r, 0.1) ? 1 : -1) : chance(&c->r, 0.2) ? -1 : chance(&c->r, 0.2) ? 1 : bt;
    int64_t bb = !batched ? (chance(&c->r, 0.1) ? 1 : -1) : chance(&c->r, 0.2) ? -1 : chance(&c->r, 0.2) ? 1 : bt;
    operand(c, MM_A, dt, ab, m, k, true);
    operand(c, MM_B, dt, bb, k, n, true);
    operand(c, MM_C, cdt, bt, m, n, false);
}

static void gen_matmul_options(fcase *c, bool tuning)
{
    c->mm = clkit_matmul_defaults();
    c->mm.alpha = chance(&c->r, 0.5) ? 1.0f : (float)urange(&c->r, -2, 2);
    c->mm.beta = chance(&c->r, 0.5) ? 0.0f : (float)urange(&c->r, -2, 2);
    c->mm.activation = (clkit_activation)irange(&c->r, 0, 2);
    c->mm.leaky_slope = (float)urange(&c->r, 0, 0.5);
    c->mm.provider = chance(&c->r, 0.7) ? CLKIT_PROVIDER_AUTO : CLKIT_PROVIDER_CLKIT;
    if (!tuning && c->t[MM_A].dtype == CLKIT_F32 && c->mm.activation == CLKIT_ACT_NONE &&
        chance(&c->r, 0.1) && CLKIT_HAVE_CLBLAST)
        c->mm.provider = CLKIT_PROVIDER_CLBLAST;
    int precision = (int)irange(&c->r, 0, 9);
    c->mm.allow_tf32 = precision == 0, c->mm.exact_f32 = precision == 1;
    c->pass_opt = tuning || chance(&c->r, 0.9);
}

/* C in f32 or in the inputs' dtype: each (dtypes, layout) is one more program to build on a
   cold cache, and test_matmul has the crossed 16-bit pairs. */
static void gen_matmul(fcase *c)
{
    clkit_dtype dt = float_dt(&c->r);
    gen_matmul_shapes(c, dt, chance(&c->r, 0.5) ? CLKIT_F32 : dt);
    gen_matmul_options(c, false);
}

static const clkit_matmul_options *mm_opt(fcase *c)
{
    if (c->config[0]) c->mm.config = c->config;
    return c->pass_opt ? &c->mm : NULL;
}

static clkit_status call_matmul(clkit_context *ctx, fcase *c)
{
    return clkit_matmul(ctx, P(c, MM_A), P(c, MM_B), P(c, MM_C), mm_opt(c));
}

static void mutate_matmul(fcase *c)
{
    static const char *configs[] = {
        "", ",", "KERNEL=99", "BLOCK_M=0", "KERNEL=2,BLOCK_M=1000000", "KERNEL=-1", "garbage",
        "KERNEL=2,BLOCK_M=64,BLOCK_N=64,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=0", "KERNEL=4",
        "KERNEL==2", "KERNEL=2,,BLOCK_M=16", "KERNEL=99999999999999999999"};
    switch (irange(&c->r, 0, 6)) {
    case 0: c->mm.alpha = ODD_FLOAT(&c->r); break;
    case 1: c->mm.beta = ODD_FLOAT(&c->r); break;
    case 2: c->mm.leaky_slope = ODD_FLOAT(&c->r); break;
    case 3: c->mm.activation = (clkit_activation)irange(&c->r, -2, 5); break;
    case 4: c->mm.provider = (clkit_provider)irange(&c->r, -2, 5); break;
    case 5: snprintf(c->config, sizeof c->config, "%s", configs[irange(&c->r, 0, 11)]); break;
    default: c->mm.allow_tf32 = (int)irange(&c->r, -1, 2), c->mm.exact_f32 = (int)irange(&c->r, -1, 2);
    }
}

/* Batch, rows and cols of a 2-D or 3-D operand; 2-D has batch 1. */
static void mm_dims(const clkit_tensor *t, int64_t *b, int64_t *r, int64_t *cl)
{
    int o = t->ndim - 2;
    *b = o ? t->shape[0] : 1, *r = t->shape[o], *cl = t->shape[o + 1];
}

/* The bound of test_matmul.c: f32 accumulation over K terms of the absolute products, the
   inputs' rounding on the way (TF32, 3xTF32), one rounding of C to its dtype. */
static bool check_matmul(fcase *c)
{
    int64_t ab, m, k, bb, k2, n, cb, m2, n2;
    mm_dims(&c->t[MM_A], &ab, &m, &k);
    mm_dims(&c->t[MM_B], &bb, &k2, &n);
    mm_dims(&c->t[MM_C], &cb, &m2, &n2);
    if (k2 != k || m2 != m || n2 != n || (ab != 1 && ab != cb) || (bb != 1 && bb != cb)) {
        snprintf(c->why, sizeof c->why, "accepted operands whose shapes do not multiply");
        return false;
    }
    clkit_matmul_options o = c->pass_opt ? c->mm : clkit_matmul_defaults();
    double *a = in(c, MM_A), *b = in(c, MM_B), *want = in(c, MM_C), *got = out(c, MM_C);
    double *mag = zeros(cb * m * n);
    ref_matrix ra = {a, {ab == 1 ? 0 : m * k, k, 1}}, rb = {b, {bb == 1 ? 0 : k * n, n, 1}};
    ref_matrix rc = {want, {m * n, n, 1}};
    ref_matmul(&ra, &rb, &rc, cb, m, n, k, o.alpha, o.beta, (int)o.activation, o.leaky_slope, mag);
    clkit_dtype in_dt = c->t[MM_A].dtype, out_dt = c->t[MM_C].dtype;
    const fdev *d = c->op->tuning ? &g_tune : &g_main;
    double in_rtol = o.allow_tf32 ? 0x1p-11
                     : in_dt == CLKIT_F32 && d->mm_tensor_cores && !o.exact_f32 ? 0x1p-20 : 0;
    double out_rtol = out_dt == CLKIT_F32 ? 0 : out_dt == CLKIT_F16 ? 0x1p-10 : 0x1p-7;
    for (int64_t e = 0; e < cb * m * n; e++)
        mag[e] = (4.0 * (double)(k + 2) * 0x1p-23 + 2 * in_rtol) * mag[e] + out_rtol * fabs(want[e]) + 1e-30;
    for (int64_t e = 0; e < cb * m * n; e++) want[e] = ref_quantize(out_dt, want[e]);
    bool ok = close_tol(c, MM_C, got, want, mag, cb * m * n);
    free_all((double *[]){a, b, want, got, mag}, 5);
    return ok;
}

/* The tuner's report after each candidate; *user counts reports that do not add up. */
static void progress(void *user, int done, int total, const char *config, double ms, double best)
{
    (void)ms, (void)best;
    if (done < 1 || done > total || !config) ++*(long *)user;
}

static long g_bad_progress;

/* A budget that lets one candidate run: tuning is slow, and what the fuzzer checks is the
   call, not the tuned choice. */
static void gen_topt(fcase *c)
{
    c->topt.budget_s = 1e-9;
    c->topt.progress = chance(&c->r, 0.5) ? progress : NULL;
    c->topt.user = &g_bad_progress;
}

static void gen_tune_matmul(fcase *c)
{
    gen_matmul_shapes(c, CLKIT_F32, CLKIT_F32);
    gen_matmul_options(c, true);
    gen_topt(c);
}

static clkit_status call_tune_matmul(clkit_context *ctx, fcase *c)
{
    return clkit_tune_matmul(ctx, P(c, MM_A), P(c, MM_B), P(c, MM_C), mm_opt(c), &c->topt);
}

/* ---- layer norm ---- */

enum { LN_X, LN_W, LN_B, LN_Y, LN_MEAN, LN_RSTD };
enum { LB_DY, LB_X, LB_W, LB_MEAN, LB_RSTD, LB_DX, LB_DW, LB_DB };

/* What a layernorm case, forward or backward, draws first, in this order (a seed replays
   the case): the dtype; M rows of N, N = 0 only without rows (a row of nothing has no mean);
   whether the output overwrites its input. The input x takes values in [-4, 6]. */
typedef struct ln_draw {
    clkit_dtype dt;
    int64_t shape[2]; /* (M, N) */
    bool in_place;
} ln_draw;

static ln_draw ln_begin(fcase *c, int x)
{
    ln_draw d;
    d.dt = float_dt(&c->r);
    d.shape[0] = dim(&c->r, 5);
    d.shape[1] = d.shape[0] == 0 && chance(&c->r, 0.3) ? 0 : irange(&c->r, 1, 40);
    d.in_place = chance(&c->r, 0.2);
    range(c, x, -4, 6);
    return d;
}

/* An optional (len) line in dtype dt, present with probability p. */
static void line(fcase *c, int i, clkit_dtype dt, int64_t len, bool input, double p)
{
    if (chance(&c->r, p)) tensor(c, i, dt, 1, &len, input);
}

static void gen_ln_fwd(fcase *c)
{
    ln_draw d = ln_begin(c, LN_X);
    tensor(c, LN_X, d.dt, 2, d.shape, !d.in_place);
    line(c, LN_W, d.dt, d.shape[1], true, 0.7);
    line(c, LN_B, d.dt, d.shape[1], true, 0.7);
    if (d.in_place) alias(c, LN_Y, LN_X);
    else tensor(c, LN_Y, d.dt, 2, d.shape, false);
    line(c, LN_MEAN, CLKIT_F32, d.shape[0], false, 0.6);
    line(c, LN_RSTD, CLKIT_F32, d.shape[0], false, 0.6);
    c->f = (float)pow(10, urange(&c->r, -6, -1));
}

static clkit_status call_ln_fwd(clkit_context *ctx, fcase *c)
{
    return clkit_layernorm_forward(ctx, P(c, LN_X), P(c, LN_W), P(c, LN_B), c->f, P(c, LN_Y),
                                   P(c, LN_MEAN), P(c, LN_RSTD));
}

static void mutate_eps(fcase *c) { c->f = ODD_FLOAT(&c->r); }

/* Whether an optional line is absent or (len). */
static bool line_fits(fcase *c, int i, int64_t len) { return !c->present[i] || dims_are(c, i, 1, &len); }

/* test_layernorm.c's bounds: one rounding to the dtype, f32 arithmetic on the normalised
   value and the affine part, the mean's error scaled by rstd. */
static void ln_fwd_tolerances(const fcase *c, const double *x, const double *w, const double *b,
                              const double *mean, const double *rstd, const double *want,
                              int64_t m, int64_t n, double *tol)
{
    for (int64_t r = 0; r < m; r++)
        for (int64_t k = 0; k < n; k++) {
            double xhat = (x[r * n + k] - mean[r]) * rstd[r], wk = w ? fabs(w[k]) : 1;
            tol[r * n + k] = ref_rtol(c->t[LN_Y].dtype) * fabs(want[r * n + k]) +
                             2e-5 * (fabs(xhat) * wk + (b ? fabs(b[k]) : 0) + 1e-3) +
                             2e-6 * fabs(mean[r]) * rstd[r] * wk;
        }
}

static bool check_ln_stats(fcase *c, const double *x, const double *mean, const double *rstd,
                           int64_t m, int64_t n)
{
    double *got = out(c, LN_MEAN), *tol = zeros(m);
    bool ok = true;
    if (got) {
        for (int64_t r = 0; r < m; r++) {
            for (int64_t k = 0; k < n; k++) tol[r] = fmax(tol[r], 2e-6 * fabs(x[r * n + k]));
        }
        ok = close_tol(c, LN_MEAN, got, mean, tol, m);
        free(got);
    }
    got = out(c, LN_RSTD);
    if (ok && got) {
        for (int64_t r = 0; r < m; r++) tol[r] = 2e-5 * rstd[r];
        ok = close_tol(c, LN_RSTD, got, rstd, tol, m);
    }
    free_all((double *[]){got, tol}, 2);
    return ok;
}

static bool check_ln_fwd(fcase *c)
{
    int64_t m = c->t[LN_Y].shape[0], n = c->t[LN_Y].shape[1];
    if (!dims_are(c, LN_X, 2, c->t[LN_Y].shape) || !line_fits(c, LN_W, n) ||
        !line_fits(c, LN_B, n) || !line_fits(c, LN_MEAN, m) || !line_fits(c, LN_RSTD, m))
        return false;
    double *x = in(c, LN_X), *w = in(c, LN_W), *b = in(c, LN_B), *got = out(c, LN_Y);
    double *want = zeros(m * n), *mean = zeros(m), *rstd = zeros(m), *tol = zeros(m * n);
    ref_layernorm_forward(x, w, b, c->f, m, n, want, mean, rstd);
    ln_fwd_tolerances(c, x, w, b, mean, rstd, want, m, n, tol);
    bool ok = close_tol(c, LN_Y, got, want, tol, m * n) && check_ln_stats(c, x, mean, rstd, m, n);
    free_all((double *[]){x, w, b, got, want, mean, rstd, tol}, 8);
    return ok;
}

static void gen_ln_bwd(fcase *c)
{
    ln_draw d = ln_begin(c, LB_X);
    range(c, LB_MEAN, -1, 1);
    range(c, LB_RSTD, 0.5, 2);
    tensor(c, LB_DY, d.dt, 2, d.shape, !d.in_place);
    tensor(c, LB_X, d.dt, 2, d.shape, true);
    line(c, LB_W, d.dt, d.shape[1], true, 0.7);
    tensor(c, LB_MEAN, CLKIT_F32, 1, &d.shape[0], true);
    tensor(c, LB_RSTD, CLKIT_F32, 1, &d.shape[0], true);
    if (d.in_place) alias(c, LB_DX, LB_DY);
    else tensor(c, LB_DX, d.dt, 2, d.shape, false);
    line(c, LB_DW, d.dt, d.shape[1], false, 0.7);
    line(c, LB_DB, d.dt, d.shape[1], false, 0.7);
}

static clkit_status call_ln_bwd(clkit_context *ctx, fcase *c)
{
    return clkit_layernorm_backward(ctx, P(c, LB_DY), P(c, LB_X), P(c, LB_W), P(c, LB_MEAN),
                                    P(c, LB_RSTD), P(c, LB_DX), P(c, LB_DW), P(c, LB_DB));
}

/* One rounding to the dtype plus f32 arithmetic on the magnitudes behind each result (the
   reference scales them by rstd, which a mutated call may give negative). */
static bool close_mag(fcase *c, int i, const double *want, const double *mag, int64_t n)
{
    double *got = out(c, i);
    if (!got) return true;
    double *tol = zeros(n);
    for (int64_t e = 0; e < n; e++)
        tol[e] = ref_rtol(c->t[i].dtype) * fabs(want[e]) + 2e-5 * fabs(mag[e]) + 1e-30;
    bool ok = close_tol(c, i, got, want, tol, n);
    free_all((double *[]){got, tol}, 2);
    return ok;
}

static bool check_ln_bwd(fcase *c)
{
    int64_t m = c->t[LB_DX].shape[0], n = c->t[LB_DX].shape[1];
    if (!dims_are(c, LB_X, 2, c->t[LB_DX].shape) || !dims_are(c, LB_DY, 2, c->t[LB_DX].shape) ||
        !line_fits(c, LB_W, n) || !dims_are(c, LB_MEAN, 1, &m) || !dims_are(c, LB_RSTD, 1, &m) ||
        !line_fits(c, LB_DW, n) || !line_fits(c, LB_DB, n))
        return false;
    double *dy = in(c, LB_DY), *x = in(c, LB_X), *w = in(c, LB_W), *mean = in(c, LB_MEAN);
    double *rstd = in(c, LB_RSTD), *dx = zeros(m * n), *dw = zeros(n), *db = zeros(n);
    double *dx_mag = zeros(m * n), *dw_mag = zeros(n), *db_mag = zeros(n);
    ref_layernorm_backward(dy, x, w, mean, rstd, m, n, dx, dw, db, dx_mag, dw_mag, db_mag);
    bool ok = close_mag(c, LB_DX, dx, dx_mag, m * n) && close_mag(c, LB_DW, dw, dw_mag, n) &&
              close_mag(c, LB_DB, db, db_mag, n);
    free_all((double *[]){dy, x, w, mean, rstd, dx, dw, db, dx_mag, dw_mag, db_mag}, 11);
    return ok;
}

/* ---- attention and its tuners ---- */

enum { AF_Q, AF_K, AF_V, AF_O, AF_LSE };
enum { AB_Q, AB_K, AB_V, AB_O, AB_DOUT, AB_LSE, AB_DQ, AB_DK, AB_DV };

typedef struct attn_dims {
    int64_t b, hq, hkv, lq, lk, d;
} attn_dims;

/* D 16 alone: each head dim is two more programs to build per dtype. */
static attn_dims attn_shape(fcase *c)
{
    attn_dims a = {chance(&c->r, 0.1) ? 0 : irange(&c->r, 1, 2), 0, irange(&c->r, 1, 2),
                   dim(&c->r, 7), dim(&c->r, 7), 16};
    a.hq = a.hkv * (chance(&c->r, 0.05) ? 0 : irange(&c->r, 1, 2));
    return a;
}

static void gen_attn_opt(fcase *c)
{
    c->at = clkit_attention_defaults();
    c->at.causal = chance(&c->r, 0.5);
    c->at.scale = chance(&c->r, 0.5) ? 0.0f : (float)urange(&c->r, 0.05, 0.5);
    c->pass_opt = chance(&c->r, 0.85);
}

/* q, k and v (the same indices in both passes) and the options. */
static attn_dims gen_qkv(fcase *c, clkit_dtype dt)
{
    attn_dims a = attn_shape(c);
    int64_t qs[4] = {a.b, a.hq, a.lq, a.d}, ks[4] = {a.b, a.hkv, a.lk, a.d};
    range(c, AF_V, -1, 1);
    tensor(c, AF_Q, dt, 4, qs, true);
    tensor(c, AF_K, dt, 4, ks, true);
    tensor(c, AF_V, dt, 4, ks, true);
    gen_attn_opt(c);
    return a;
}

static void gen_attn_fwd_dt(fcase *c, clkit_dtype dt)
{
    attn_dims a = gen_qkv(c, dt);
    int64_t qs[4] = {a.b, a.hq, a.lq, a.d};
    tensor(c, AF_O, dt, 4, qs, false);
    if (chance(&c->r, 0.7)) tensor(c, AF_LSE, CLKIT_F32, 3, qs, false);
}

static void gen_attn_fwd(fcase *c) { gen_attn_fwd_dt(c, float_dt(&c->r)); }

static const clkit_attention_options *at_opt(const fcase *c) { return c->pass_opt ? &c->at : NULL; }

static clkit_status call_attn_fwd(clkit_context *ctx, fcase *c)
{
    return clkit_attention_forward(ctx, P(c, AF_Q), P(c, AF_K), P(c, AF_V), at_opt(c), P(c, AF_O),
                                   P(c, AF_LSE));
}

static void mutate_attn(fcase *c)
{
    if (chance(&c->r, 0.7)) c->at.scale = ODD_FLOAT(&c->r);
    else c->at.causal = (int)irange(&c->r, INT_MIN, INT_MAX);
    c->pass_opt = true;
}

/* Dims of q and k as an accepted call gives them, once they are known to fit together. */
static bool attn_fits(fcase *c, int q, int k, int v, ref_attention_dims *a)
{
    const clkit_tensor *tq = &c->t[q], *tk = &c->t[k];
    a->b = tq->shape[0], a->hq = tq->shape[1], a->lq = tq->shape[2], a->d = tq->shape[3];
    a->hkv = tk->shape[1], a->lk = tk->shape[2];
    clkit_attention_options o = c->pass_opt ? c->at : clkit_attention_defaults();
    a->causal = o.causal != 0;
    a->scale = o.scale != 0 ? (double)o.scale : 1.0 / sqrt((double)a->d);
    bool ok = tq->ndim == 4 && tk->ndim == 4 && tk->shape[0] == a->b && tk->shape[3] == a->d &&
              dims_are(c, v, 4, tk->shape) &&
              (a->hkv ? a->hq % a->hkv == 0 : a->hq == 0);
    if (!ok) snprintf(c->why, sizeof c->why, "accepted q, k and v that do not fit together");
    return ok;
}

/* test_attention.c's bound: a fraction of the largest value, one rounding to the dtype (two
   where the tensor cores round P to it), and the gradients' cancellation scale. */
static bool attn_close(fcase *c, int i, const double *want, int64_t n, const double *scale,
                       double scale_eps)
{
    double *got = out(c, i), mx = 0, frac = 3e-5;
    clkit_dtype dt = c->t[i].dtype;
    const fdev *d = c->op->tuning ? &g_tune : &g_main;
    int rounded_p = d->attn_tensor_cores && dt != CLKIT_F32;
    for (int64_t e = 0; e < n; e++)
        if (isfinite(want[e])) mx = fmax(mx, fabs(want[e]));
    double round = dt == CLKIT_F16 ? 0x1p-11 : dt == CLKIT_BF16 ? 0x1p-8 : 0;
    double abs_err = (frac + (rounded_p ? round : 0)) * mx + 1e-30, *tol = zeros(n);
    for (int64_t e = 0; e < n; e++)
        tol[e] = abs_err + (scale ? scale_eps * scale[e] : 0) + (round + frac) * fabs(want[e]);
    bool ok = close_tol(c, i, got, want, tol, n);
    free_all((double *[]){got, tol}, 2);
    return ok;
}

static bool check_attn_fwd(fcase *c)
{
    ref_attention_dims a;
    if (!attn_fits(c, AF_Q, AF_K, AF_V, &a) || !dims_are(c, AF_O, 4, c->t[AF_Q].shape) ||
        (c->present[AF_LSE] && !dims_are(c, AF_LSE, 3, c->t[AF_Q].shape)))
        return false;
    int64_t nq = a.b * a.hq * a.lq * a.d, nl = a.b * a.hq * a.lq;
    double *q = in(c, AF_Q), *k = in(c, AF_K), *v = in(c, AF_V), *o = zeros(nq), *lse = zeros(nl);
    ref_attention_forward(&a, q, k, v, o, lse);
    bool ok = attn_close(c, AF_O, o, nq, NULL, 0) &&
              (!c->present[AF_LSE] || attn_close(c, AF_LSE, lse, nl, NULL, 0));
    free_all((double *[]){q, k, v, o, lse}, 5);
    return ok;
}

static void gen_tune_attn_fwd(fcase *c)
{
    gen_attn_fwd_dt(c, CLKIT_F32);
    gen_topt(c);
}

static clkit_status call_tune_attn_fwd(clkit_context *ctx, fcase *c)
{
    return clkit_tune_attention_forward(ctx, P(c, AF_Q), P(c, AF_K), P(c, AF_V), at_opt(c),
                                        P(c, AF_O), P(c, AF_LSE), &c->topt);
}

static void gen_attn_bwd_dt(fcase *c, clkit_dtype dt)
{
    attn_dims a = gen_qkv(c, dt);
    int64_t qs[4] = {a.b, a.hq, a.lq, a.d}, ks[4] = {a.b, a.hkv, a.lk, a.d};
    range(c, AB_O, -1, 1);
    range(c, AB_DOUT, -1, 1);
    tensor(c, AB_O, dt, 4, qs, true);
    tensor(c, AB_DOUT, dt, 4, qs, true);
    /* lse must be each row's own (prepare_attn_bwd): a broadcast would share one */
    tensor(c, AB_LSE, CLKIT_F32, 3, qs, false);
    tensor(c, AB_DQ, dt, 4, qs, false);
    tensor(c, AB_DK, dt, 4, ks, false);
    tensor(c, AB_DV, dt, 4, ks, false);
}

static void gen_attn_bwd(fcase *c) { gen_attn_bwd_dt(c, float_dt(&c->r)); }

/* The backward rebuilds P from lse: it must be the forward's. */
static void prepare_attn_bwd(fcase *c)
{
    ref_attention_dims a;
    if (!attn_fits(c, AB_Q, AB_K, AB_V, &a)) return;
    int64_t nq = a.b * a.hq * a.lq * a.d;
    double *q = in(c, AB_Q), *k = in(c, AB_K), *v = in(c, AB_V), *o = zeros(nq);
    double *lse = zeros(a.b * a.hq * a.lq);
    ref_attention_forward(&a, q, k, v, o, lse);
    scatter(c, AB_LSE, lse);
    free_all((double *[]){q, k, v, o, lse}, 5);
}

static clkit_status call_attn_bwd(clkit_context *ctx, fcase *c)
{
    return clkit_attention_backward(ctx, P(c, AB_Q), P(c, AB_K), P(c, AB_V), P(c, AB_O),
                                    P(c, AB_DOUT), P(c, AB_LSE), at_opt(c), P(c, AB_DQ),
                                    P(c, AB_DK), P(c, AB_DV));
}

static bool check_attn_bwd(fcase *c)
{
    ref_attention_dims a;
    const int64_t *qs = c->t[AB_Q].shape, *ks = c->t[AB_K].shape;
    if (!attn_fits(c, AB_Q, AB_K, AB_V, &a) || !dims_are(c, AB_O, 4, qs) ||
        !dims_are(c, AB_DOUT, 4, qs) || !dims_are(c, AB_DQ, 4, qs) || !dims_are(c, AB_DK, 4, ks) ||
        !dims_are(c, AB_DV, 4, ks))
        return false;
    int64_t nq = a.b * a.hq * a.lq * a.d, nk = a.b * a.hkv * a.lk * a.d;
    double *q = in(c, AB_Q), *k = in(c, AB_K), *v = in(c, AB_V), *o = in(c, AB_O);
    double *dout = in(c, AB_DOUT), *g[3] = {zeros(nq), zeros(nk), zeros(nk)};
    double *s[3] = {zeros(nq), zeros(nk), zeros(nk)};
    ref_attention_backward(&a, q, k, v, o, dout, g[0], g[1], g[2]);
    ref_attention_backward_scale(&a, q, k, v, o, dout, s[0], s[1], s[2]);
    double eps = (double)a.d * 0x1p-24;
    bool ok = attn_close(c, AB_DQ, g[0], nq, s[0], eps) && attn_close(c, AB_DK, g[1], nk, s[1], eps) &&
              attn_close(c, AB_DV, g[2], nk, s[2], eps);
    free_all((double *[]){q, k, v, o, dout, g[0], g[1], g[2], s[0], s[1], s[2]}, 11);
    return ok;
}

static void gen_tune_attn_bwd(fcase *c)
{
    gen_attn_bwd_dt(c, CLKIT_F32);
    gen_topt(c);
}

static clkit_status call_tune_attn_bwd(clkit_context *ctx, fcase *c)
{
    return clkit_tune_attention_backward(ctx, P(c, AB_Q), P(c, AB_K), P(c, AB_V), P(c, AB_O),
                                         P(c, AB_DOUT), P(c, AB_LSE), at_opt(c), P(c, AB_DQ),
                                         P(c, AB_DK), P(c, AB_DV), &c->topt);
}

/* ---- cross-entropy ---- */

enum { CE_LOGITS, CE_TARGETS, CE_LOSS, CE_Z, CE_DLOGITS };
enum { LC_X, LC_W, LC_B, LC_TARGETS, LC_LOSS, LC_Z, LC_DX, LC_DW, LC_DB };

static void gen_ce_opt(fcase *c, int64_t v)
{
    c->ce = clkit_cross_entropy_defaults();
    if (chance(&c->r, 0.3)) c->ce.ignore_index = irange(&c->r, -2, v + 1);
    c->ce.reduction = (clkit_reduction)irange(&c->r, 0, 2);
    if (chance(&c->r, 0.4)) c->ce.label_smoothing = (float)urange(&c->r, 0, 1);
    if (chance(&c->r, 0.4)) c->ce.softcap = (float)urange(&c->r, 0.5, 4);
    if (chance(&c->r, 0.4)) c->ce.z_loss_scale = (float)pow(10, urange(&c->r, -4, -1));
    c->pass_opt = chance(&c->r, 0.85);
}

/* The options an accepted call ran with. */
static clkit_cross_entropy_options ce_used(const fcase *c)
{
    return c->pass_opt ? c->ce : clkit_cross_entropy_defaults();
}

/* targets (t) and loss; z_loss too, now and then, where options are passed. */
static void gen_ce_losses(fcase *c, int tg, int loss, int z, int64_t t)
{
    int64_t nl = ce_used(c).reduction == CLKIT_REDUCTION_NONE ? t : 1;
    tensor(c, tg, chance(&c->r, 0.5) ? CLKIT_I32 : CLKIT_I64, 1, &t, true);
    tensor(c, loss, CLKIT_F32, 1, &nl, false);
    if (c->pass_opt && chance(&c->r, 0.4)) tensor(c, z, CLKIT_F32, 1, &nl, false);
}

static void gen_ce(fcase *c)
{
    clkit_dtype dt = float_dt(&c->r);
    int64_t t = dim(&c->r, 5), v = irange(&c->r, 1, 12), shape[2] = {t, v};
    gen_ce_opt(c, v);
    bool grad = chance(&c->r, 0.6), in_place = grad && chance(&c->r, 0.3);
    range(c, CE_LOGITS, -4, 4);
    tensor(c, CE_LOGITS, dt, 2, shape, !in_place);
    gen_ce_losses(c, CE_TARGETS, CE_LOSS, CE_Z, t);
    if (in_place) alias(c, CE_DLOGITS, CE_LOGITS);
    else if (grad) tensor(c, CE_DLOGITS, dt, 2, shape, false);
}

/* Targets in [0, V), every fifth or so ignore_index. */
static void prepare_targets(fcase *c, int tg, int64_t v)
{
    int64_t n = numel(&c->t[tg]);
    double *y = zeros(n);
    for (int64_t e = 0; e < n; e++)
        y[e] = chance(&c->r, 0.2) ? (double)ce_used(c).ignore_index : (double)irange(&c->r, 0, v - 1);
    scatter(c, tg, y);
    free(y);
}

static void prepare_ce(fcase *c) { prepare_targets(c, CE_TARGETS, c->t[CE_LOGITS].shape[1]); }

/* z_loss travels in the options: without them the call never sees it, nor may the model. */
static const clkit_cross_entropy_options *ce_opt(fcase *c, int z)
{
    c->present[z] = c->present[z] && c->pass_opt;
    c->ce.z_loss = P(c, z);
    return c->pass_opt ? &c->ce : NULL;
}

static clkit_status call_ce(clkit_context *ctx, fcase *c)
{
    return clkit_cross_entropy(ctx, P(c, CE_LOGITS), P(c, CE_TARGETS), ce_opt(c, CE_Z),
                               P(c, CE_LOSS), P(c, CE_DLOGITS));
}

static void mutate_ce(fcase *c)
{
    static const int64_t ignores[] = {INT64_MIN, INT64_MAX, -1, 0, 1, INT32_MIN, (int64_t)INT32_MAX + 1};
    switch (irange(&c->r, 0, 4)) {
    case 0: c->ce.ignore_index = ignores[irange(&c->r, 0, 6)]; break;
    case 1: c->ce.reduction = (clkit_reduction)irange(&c->r, -2, 5); break;
    case 2: c->ce.label_smoothing = ODD_FLOAT(&c->r); break;
    case 3: c->ce.softcap = ODD_FLOAT(&c->r); break;
    default: c->ce.z_loss_scale = ODD_FLOAT(&c->r);
    }
    c->pass_opt = true;
}

/* Targets as integers. */
static int64_t *targets_of(const fcase *c, int tg)
{
    double *y = in(c, tg);
    int64_t n = numel(&c->t[tg]), *yi = malloc((size_t)(n ? n : 1) * sizeof *yi);
    ck_assert(yi != NULL);
    for (int64_t e = 0; e < n; e++) yi[e] = (int64_t)y[e];
    free(y);
    return yi;
}

/* test_cross_entropy.c's bounds: f32 rounding of values the size of each row's log-sum-exp,
   the gradient's in proportion, the reduced loss the sum of the rows'. */
static bool check_ce_values(fcase *c, const double *x, int64_t t, int64_t v,
                            const clkit_cross_entropy_options *o, int64_t count,
                            const double *l_want, const double *z_want, const double *g_want)
{
    bool none = o->reduction == CLKIT_REDUCTION_NONE, ok = true;
    double scale = o->reduction == CLKIT_REDUCTION_MEAN ? (count ? 1.0 / (double)count : 0) : 1;
    double zs = o->z_loss_scale, sum_atol = 0, *l = out(c, CE_LOSS), *z = out(c, CE_Z);
    double *g = out(c, CE_DLOGITS);
    clkit_dtype dt = c->t[CE_LOGITS].dtype;
    for (int64_t r = 0; ok && r < t; r++) {
        double big = 0;
        for (int64_t k = 0; k < v; k++) big = fmax(big, fabs(x[r * v + k]));
        if (o->softcap > 0 && big > o->softcap) big = o->softcap;
        double mag = big + log((double)v) + 1, l_atol = 4e-6 * mag * (1 + zs * mag);
        sum_atol += l_atol;
        if (none) ok = close_all(c, CE_LOSS, l + r, l_want + r, 1, l_atol, 2e-5) &&
                       (!z || close_all(c, CE_Z, z + r, z_want + r, 1, l_atol, 2e-5));
        double g_atol = scale * 4e-7 * mag * (1 + 2 * zs * mag) + (dt == CLKIT_F16 ? 6e-8 : 0);
        if (ok && g)
            ok = close_all(c, CE_DLOGITS, g + r * v, g_want + r * v, v, g_atol,
                           dt == CLKIT_F32 ? 2e-5 : ref_rtol(dt));
    }
    if (ok && !none)
        ok = close_all(c, CE_LOSS, l, l_want, 1, sum_atol * scale, 2e-5) &&
             (!z || close_all(c, CE_Z, z, z_want, 1, sum_atol * scale, 2e-5));
    free_all((double *[]){l, z, g}, 3);
    return ok;
}

static bool check_ce(fcase *c)
{
    const clkit_tensor *lg = &c->t[CE_LOGITS];
    int64_t t = lg->shape[0], v = lg->shape[1];
    clkit_cross_entropy_options o = ce_used(c);
    int64_t nl = o.reduction == CLKIT_REDUCTION_NONE ? t : 1;
    if (lg->ndim != 2 || !dims_are(c, CE_TARGETS, 1, &t) || !dims_are(c, CE_LOSS, 1, &nl) ||
        !line_fits(c, CE_Z, nl) || (c->present[CE_DLOGITS] && !dims_are(c, CE_DLOGITS, 2, lg->shape)))
        return false;
    int64_t *y = targets_of(c, CE_TARGETS);
    double *x = in(c, CE_LOGITS), *l = zeros(nl), *z = zeros(nl), *g = zeros(t * v);
    int64_t count = ref_cross_entropy(x, y, t, v, &o, l, z, g);
    bool ok = check_ce_values(c, x, t, v, &o, count, l, z, g);
    free(y);
    free_all((double *[]){x, l, z, g}, 4);
    return ok;
}

static void gen_lce(fcase *c)
{
    clkit_dtype dt = float_dt(&c->r);
    int64_t t = dim(&c->r, 4), d = irange(&c->r, 1, 8), v = irange(&c->r, 1, 9);
    int64_t xs[2] = {t, d}, ws[2] = {v, d};
    gen_ce_opt(c, v);
    for (int i = LC_X; i <= LC_B; i++) range(c, i, -1, 1);
    tensor(c, LC_X, dt, 2, xs, true);
    tensor(c, LC_W, dt, 2, ws, true);
    line(c, LC_B, dt, v, true, 0.6);
    gen_ce_losses(c, LC_TARGETS, LC_LOSS, LC_Z, t);
    if (chance(&c->r, 0.6)) tensor(c, LC_DX, dt, 2, xs, false);
    if (chance(&c->r, 0.6)) tensor(c, LC_DW, dt, 2, ws, false);
    line(c, LC_DB, dt, v, false, 0.6);
}

static void prepare_lce(fcase *c) { prepare_targets(c, LC_TARGETS, c->t[LC_W].shape[0]); }

static clkit_status call_lce(clkit_context *ctx, fcase *c)
{
    return clkit_linear_cross_entropy(ctx, P(c, LC_X), P(c, LC_W), P(c, LC_B), P(c, LC_TARGETS),
                                      ce_opt(c, LC_Z), P(c, LC_LOSS), P(c, LC_DX), P(c, LC_DW),
                                      P(c, LC_DB));
}

/* test_cross_entropy.c's bound for a gradient: within what rounding the logits' gradient to
   the storage dtype, and f32 arithmetic, move a sum of |terms| mag; plus `extra`, what the
   cancellation in each logit's gradient (p - target, near 0 where p is near 1) leaves. */
static bool lce_close(fcase *c, int i, const double *want, const double *mag, const double *extra,
                      int64_t n, int64_t v)
{
    double *got = out(c, i);
    if (!got) return true;
    clkit_dtype dt = c->t[i].dtype;
    double rel = dt == CLKIT_F32 ? 1e-5 : 2 * ref_rtol(dt), atol = dt == CLKIT_F16 ? 6e-8 * (double)v : 1e-9;
    double *tol = zeros(n);
    for (int64_t e = 0; e < n; e++) tol[e] = atol + rel * (mag[e] + fabs(want[e])) + extra[e];
    bool ok = close_tol(c, i, got, want, tol, n);
    free_all((double *[]){got, tol}, 2);
    return ok;
}

/* A logit's gradient is off by up to test_cross_entropy.c's g_atol for its row (f32 rounding
   of values the size of the row's log-sum-exp); the gradients sum such terms times |x| (dw),
   |w| (dx) or 1 (db). */
static void lce_extra(const double *x, const double *w, const double *b, int64_t t, int64_t d,
                      int64_t v, const clkit_cross_entropy_options *o, double scale, double *dx,
                      double *dw, double *db)
{
    for (int64_t r = 0; r < t; r++) {
        double big = 0;
        for (int64_t j = 0; j < v; j++) {
            double z = b ? b[j] : 0;
            for (int64_t k = 0; k < d; k++) z += x[r * d + k] * w[j * d + k];
            big = fmax(big, fabs(z));
        }
        if (o->softcap > 0 && big > o->softcap) big = o->softcap;
        double mag = big + log((double)v) + 1, zs = o->z_loss_scale;
        double e = scale * 4e-7 * mag * (1 + 2 * zs * mag);
        for (int64_t j = 0; j < v; j++) {
            db[j] += e;
            for (int64_t k = 0; k < d; k++) {
                dw[j * d + k] += e * fabs(x[r * d + k]);
                dx[r * d + k] += e * fabs(w[j * d + k]);
            }
        }
    }
}

static bool lce_fits(fcase *c, int64_t *t, int64_t *d, int64_t *v, int64_t nl)
{
    const clkit_tensor *x = &c->t[LC_X], *w = &c->t[LC_W];
    *t = x->shape[0], *d = x->shape[1], *v = w->shape[0];
    return x->ndim == 2 && dims_are(c, LC_W, 2, (int64_t[]){*v, *d}) && line_fits(c, LC_B, *v) &&
           dims_are(c, LC_TARGETS, 1, t) && dims_are(c, LC_LOSS, 1, &nl) && line_fits(c, LC_Z, nl) &&
           (!c->present[LC_DX] || dims_are(c, LC_DX, 2, x->shape)) &&
           (!c->present[LC_DW] || dims_are(c, LC_DW, 2, w->shape)) && line_fits(c, LC_DB, *v);
}

static bool check_lce(fcase *c)
{
    clkit_cross_entropy_options o = ce_used(c);
    int64_t t, d, v, nl = o.reduction == CLKIT_REDUCTION_NONE ? c->t[LC_X].shape[0] : 1;
    if (!lce_fits(c, &t, &d, &v, nl)) return false;
    int64_t *y = targets_of(c, LC_TARGETS);
    double *x = in(c, LC_X), *w = in(c, LC_W), *b = in(c, LC_B), *l = zeros(nl), *z = zeros(nl);
    double *g[9] = {zeros(t * d), zeros(v * d), zeros(v), zeros(t * d), zeros(v * d), zeros(v),
                    zeros(t * d), zeros(v * d), zeros(v)};
    ref_lce_grads rg = {g[0], g[1], g[2], g[3], g[4], g[5]};
    int64_t count = ref_linear_cross_entropy(x, w, b, y, t, v, d, &o, l, z, &rg);
    double scale = o.reduction == CLKIT_REDUCTION_MEAN ? (count ? 1.0 / (double)count : 0) : 1;
    lce_extra(x, w, b, t, d, v, &o, scale, g[6], g[7], g[8]);
    double *lg = out(c, LC_LOSS), *zg = out(c, LC_Z);
    bool ok = close_all(c, LC_LOSS, lg, l, nl, 2e-5, 2e-5) && (!zg || close_all(c, LC_Z, zg, z, nl, 2e-6, 2e-5)) &&
              lce_close(c, LC_DX, g[0], g[3], g[6], t * d, v) &&
              lce_close(c, LC_DW, g[1], g[4], g[7], v * d, t) && lce_close(c, LC_DB, g[2], g[5], g[8], v, t);
    free(y);
    free_all((double *[]){x, w, b, l, z, lg, zg}, 7);
    free_all(g, 9);
    return ok;
}

/* ---- the op table ---- */

#define BIT(i) (1u << (i))

static const op ops[] = {
    {"add", 3, {"x", "y", "out"}, BIT(2), 0, {{2, 0}, {2, 1}}, 2, {6, 6}, false, true,
     gen_add, NULL, call_add, NULL, check_add},
    {"copy", 2, {"x", "out"}, BIT(1), 0, {{1, 0}}, 1, {6, 6}, false, true, gen_copy, NULL,
     call_copy, NULL, check_copy},
    {"rgb_to_gray", 2, {"rgb", "gray"}, BIT(1), 0, {{0}}, 0, {5, 4}, false, true, gen_gray, NULL,
     call_gray, NULL, check_gray},
    {"swizzle2d", 2, {"x", "out"}, BIT(1), 0, {{0}}, 0, {5, 4}, false, true, gen_swizzle, NULL,
     call_swizzle, mutate_swizzle, check_swizzle},
    {"dropout", 2, {"x", "out"}, BIT(1), 0, {{1, 0}}, 1, {6, 5}, false, true, gen_dropout, NULL,
     call_dropout, mutate_dropout, check_dropout},
    {"softmax", 2, {"x", "out"}, BIT(1), 0, {{1, 0}}, 1, {6, 7}, false, true, gen_softmax, NULL,
     call_softmax, NULL, check_softmax},
    {"matmul", 3, {"A", "B", "C"}, BIT(2), 0, {{0}}, 0, {8, 8}, false, true, gen_matmul, NULL,
     call_matmul, mutate_matmul, check_matmul},
    {"layernorm_forward", 6, {"x", "weight", "bias", "y", "mean", "rstd"},
     BIT(3) | BIT(4) | BIT(5), BIT(1) | BIT(2) | BIT(4) | BIT(5), {{3, 0}}, 1, {8, 7}, false, true,
     gen_ln_fwd, NULL, call_ln_fwd, mutate_eps, check_ln_fwd},
    {"layernorm_backward", 8, {"dy", "x", "weight", "mean", "rstd", "dx", "dweight", "dbias"},
     BIT(5) | BIT(6) | BIT(7), BIT(2) | BIT(6) | BIT(7), {{5, 0}}, 1, {8, 7}, false, true,
     gen_ln_bwd, NULL, call_ln_bwd, NULL, check_ln_bwd},
    {"attention_forward", 5, {"q", "k", "v", "o", "lse"}, BIT(3) | BIT(4), BIT(4), {{0}}, 0,
     {8, 6}, false, true, gen_attn_fwd, NULL, call_attn_fwd, mutate_attn, check_attn_fwd},
    {"attention_backward", 9, {"q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"},
     BIT(6) | BIT(7) | BIT(8), 0, {{0}}, 0, {8, 6}, false, false, gen_attn_bwd, prepare_attn_bwd,
     call_attn_bwd, mutate_attn, check_attn_bwd},
    {"cross_entropy", 5, {"logits", "targets", "loss", "z_loss", "dlogits"},
     BIT(2) | BIT(3) | BIT(4), BIT(3) | BIT(4), {{4, 0}}, 1, {8, 7}, false, true, gen_ce,
     prepare_ce, call_ce, mutate_ce, check_ce},
    {"linear_cross_entropy", 9,
     {"x", "weight", "bias", "targets", "loss", "z_loss", "dx", "dweight", "dbias"},
     BIT(4) | BIT(5) | BIT(6) | BIT(7) | BIT(8), BIT(2) | BIT(5) | BIT(6) | BIT(7) | BIT(8),
     {{0}}, 0, {8, 5}, false, true, gen_lce, prepare_lce, call_lce, mutate_ce, check_lce},
    /* C is not an output: the tuner writes a scratch copy and must leave C as it was. */
    {"tune_matmul", 3, {"A", "B", "C"}, 0, 0, {{0}}, 0, {3, 0}, true, true, gen_tune_matmul,
     NULL, call_tune_matmul, mutate_matmul, NULL},
    {"tune_attention_forward", 5, {"q", "k", "v", "o", "lse"}, BIT(3) | BIT(4), BIT(4), {{0}}, 0,
     {3, 0}, true, true, gen_tune_attn_fwd, NULL, call_tune_attn_fwd, mutate_attn, check_attn_fwd},
    {"tune_attention_backward", 9, {"q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"},
     BIT(6) | BIT(7) | BIT(8), 0, {{0}}, 0, {3, 0}, true, false, gen_tune_attn_bwd,
     prepare_attn_bwd, call_tune_attn_bwd, mutate_attn, check_attn_bwd},
};
#define NOPS ((int)(sizeof ops / sizeof *ops))

/* Valid tuning cases: a few a run, each one tuner build (cached across runs). */
static const op *const tuners[] = {&ops[13], &ops[14], &ops[15]};

static const op *pick_op(rng *r, int mode)
{
    int total = 0;
    for (int i = 0; i < NOPS; i++) total += ops[i].weight[mode];
    int64_t x = irange(r, 0, total - 1);
    for (int i = 0; i < NOPS; i++)
        if ((x -= ops[i].weight[mode]) < 0) return &ops[i];
    return &ops[0];
}

/* ---- the model of what a call may accept and write ---- */

/* What is wrong with tensor i's descriptor on its own, or NULL. */
static const char *view_problem(const fcase *c, int i)
{
    const clkit_tensor *t = &c->t[i];
    if (!c->present[i]) return c->op->optional & BIT(i) ? NULL : "required tensor NULL";
    if (c->slot_of[i] < 0) return "NULL buffer";
    if (t->ndim < 1 || t->ndim > CLKIT_MAX_DIMS) return "ndim out of range";
    if ((unsigned)t->dtype > CLKIT_I64) return "invalid dtype";
    __int128 n = 1, es = (__int128)clkit_dtype_size(t->dtype), lo = 0, hi = 0;
    for (int k = 0; k < t->ndim; k++) {
        if (t->shape[k] < 0) return "negative shape";
        n *= t->shape[k];
        if (n * es > INT64_MAX) return "size overflows";
    }
    if (t->offset % (size_t)es) return "misaligned offset";
    if (n == 0) return NULL;
    for (int k = 0; k < t->ndim; k++) {
        __int128 span = (__int128)t->strides[k] * (t->shape[k] - 1);
        *(span < 0 ? &lo : &hi) += span;
    }
    __int128 first = (__int128)(t->offset / (size_t)es);
    if (first + lo < 0 || (first + hi + 1) * es > (__int128)c->s[c->slot_of[i]].size)
        return "view outside its buffer";
    return NULL;
}

static bool model_valid(const fcase *c)
{
    for (int i = 0; i < c->op->nt; i++)
        if (view_problem(c, i)) return false;
    return true;
}

/* A bound on the call's work: elements of all its tensors times its largest dimension. */
static double work(const fcase *c)
{
    double sum = 0, top = 1;
    for (int i = 0; i < c->op->nt; i++) {
        if (!c->present[i]) continue;
        double n = 1;
        for (int k = 0; k < c->t[i].ndim && k < CLKIT_MAX_DIMS; k++) {
            double d = c->t[i].shape[k] > 0 ? (double)c->t[i].shape[k] : 0;
            n *= d;
            top = fmax(top, d);
        }
        sum += n;
    }
    return sum * top;
}

static bool same_view(const fcase *c, int a, int b)
{
    const clkit_tensor *x = &c->t[a], *y = &c->t[b];
    if (c->s[c->slot_of[a]].origin + x->offset != c->s[c->slot_of[b]].origin + y->offset ||
        x->dtype != y->dtype || x->ndim != y->ndim)
        return false;
    for (int k = 0; k < x->ndim; k++)
        if (x->shape[k] != y->shape[k] || (x->shape[k] > 1 && x->strides[k] != y->strides[k]))
            return false;
    return true;
}

static bool alias_allowed(const fcase *c, int o, int i)
{
    for (int k = 0; k < c->op->nalias; k++)
        if (c->op->alias[k][0] == o && c->op->alias[k][1] == i) return same_view(c, o, i);
    return false;
}

/* Marks every byte each present output of an accepted, model-valid call may write; says
   why the call should not have been accepted (an output written twice, outputs overlapping
   each other or an input other than their allowed in-place one), or NULL. */
static const char *mark_outputs(const fcase *c)
{
    memset(g_mask, 0, c->end * sizeof *g_mask);
    for (int i = 0; i < c->op->nt; i++) {
        if (!c->present[i] || !(c->op->outputs & BIT(i))) continue;
        size_t es = clkit_dtype_size(c->t[i].dtype);
        for (int64_t e = 0; e < numel(&c->t[i]); e++) {
            size_t p = at(c, i, e);
            for (size_t b = 0; b < es; b++) {
                if (g_mask[p + b] & BIT(i)) return "an output element written twice";
                if (g_mask[p + b]) return "two outputs overlap";
                g_mask[p + b] |= (uint16_t)BIT(i);
            }
        }
    }
    for (int j = 0; j < c->op->nt; j++) {
        if (!c->present[j] || (c->op->outputs & BIT(j))) continue;
        size_t es = clkit_dtype_size(c->t[j].dtype);
        for (int64_t e = 0; e < numel(&c->t[j]); e++)
            for (size_t b = 0, p = at(c, j, e); b < es; b++)
                for (int o = 0; o < c->op->nt; o++)
                    if ((g_mask[p + b] & BIT(o)) && !alias_allowed(c, o, j))
                        return "an output overlaps an input";
    }
    return NULL;
}

/* ---- findings ---- */

static void describe(const fcase *c, char *buf, size_t n)
{
    int len = snprintf(buf, n, "case %ld (%s) %s%s%s:", c->index, c->mode ? "valid" : "invalid",
                       c->op->name, c->null_ctx ? " ctx=NULL" : "", c->mutations);
    for (int i = 0; i < c->op->nt && len > 0 && (size_t)len < n; i++) {
        const clkit_tensor *t = &c->t[i];
        if (!c->present[i]) {
            len += snprintf(buf + len, n - (size_t)len, " %s=NULL", c->op->names[i]);
            continue;
        }
        len += snprintf(buf + len, n - (size_t)len, " %s=%s/%d[%lld,%lld,%lld,%lld]s[%lld,%lld,%lld,%lld]@%zu#%d",
                        c->op->names[i], clkit_dtype_name(t->dtype), t->ndim, (long long)t->shape[0],
                        (long long)t->shape[1], (long long)t->shape[2], (long long)t->shape[3],
                        (long long)t->strides[0], (long long)t->strides[1], (long long)t->strides[2],
                        (long long)t->strides[3], t->offset, c->slot_of[i]);
    }
}

static int g_test; /* which test (and running[] entry) this process runs */

static void finding(const fcase *c, int kind, const char *detail)
{
    __atomic_add_fetch(&g_stats->findings[kind], 1, __ATOMIC_RELAXED);
    char desc[700];
    describe(c, desc, sizeof desc);
    if (c->index < 0) fprintf(stderr, "fuzz: %s: %s\n  %s\n", finding_names[kind], detail, desc);
    else fprintf(stderr, "fuzz: %s: %s\n  %s\n  repro: CLKIT_FUZZ_SEED=%llu CLKIT_FUZZ_CASES=%ld CLKIT_FUZZ_CASE=%ld\n",
                 finding_names[kind], detail, desc, (unsigned long long)g_env.seed, g_env.cases, c->index);
    int k = __atomic_fetch_add(&g_stats->nfirst, 1, __ATOMIC_RELAXED);
    if (k < FIRST) snprintf(g_stats->first[k], sizeof g_stats->first[k], "%s: %s: %s", finding_names[kind], detail, desc);
}

/* ---- mutations ---- */

static const int64_t odd_dims[] = {0, -1, 1, 2, 3, INT64_MIN, INT64_MAX, INT32_MAX,
                                   (int64_t)INT32_MAX + 1, (int64_t)UINT32_MAX + 2, 1ll << 40,
                                   1ll << 62, -(1ll << 40), INT64_MAX / 2};
static const int64_t odd_strides[] = {0, 1, -1, 2, -2, INT64_MIN, INT64_MIN + 1, INT64_MAX,
                                      1ll << 31, 1ll << 62, -(1ll << 62), 1ll << 33, INT64_MAX / 4};
#define PICK(r, a) a[irange(r, 0, (int64_t)(sizeof a / sizeof *a) - 1)]

static int pick_tensor(fcase *c, bool output)
{
    for (int tries = 0; tries < 32; tries++) {
        int i = (int)irange(&c->r, 0, c->op->nt - 1);
        if (!output || (c->op->outputs & BIT(i))) return i;
    }
    return 0;
}

/* a + b, wrapping at the int64 edges the mutations start from. */
static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

static void mutate_shape(fcase *c, clkit_tensor *t)
{
    int k = (int)irange(&c->r, 0, CLKIT_MAX_DIMS - 1);
    t->shape[k] = chance(&c->r, 0.5) ? PICK(&c->r, odd_dims) : wrap_add(t->shape[k], irange(&c->r, -1, 1));
}

static void mutate_stride(fcase *c, clkit_tensor *t)
{
    int k = (int)irange(&c->r, 0, CLKIT_MAX_DIMS - 1);
    t->strides[k] = chance(&c->r, 0.5) ? PICK(&c->r, odd_strides) : wrap_add(t->strides[k], irange(&c->r, -2, 2));
}

static void mutate_offset(fcase *c, int i)
{
    clkit_tensor *t = &c->t[i];
    size_t size = c->slot_of[i] >= 0 ? c->s[c->slot_of[i]].size : 64, es = clkit_dtype_size(t->dtype);
    const size_t offsets[] = {size, size - es, size + es, 2 * size, t->offset + 1, t->offset + es,
                              SIZE_MAX, SIZE_MAX - 7, (size_t)1 << 63, (size_t)INT64_MAX, 0};
    t->offset = PICK(&c->r, offsets);
}

/* Output i over input (or output) j's memory: exactly its view, shifted, or re-strided; or
   through a second cl_mem over the same memory, which only the addresses can tell. */
static void mutate_alias(fcase *c, int i, bool second_buffer)
{
    int j = (int)irange(&c->r, 0, c->op->nt - 1);
    if (j == i || c->slot_of[j] < 0 || !c->present[j]) return;
    int kind = (int)irange(&c->r, 0, 2);
    size_t es = clkit_dtype_size(c->t[j].dtype);
    if (kind == 0) c->t[i] = c->t[j];
    if (kind == 1) c->t[i] = c->t[j], c->t[i].offset += es * (size_t)irange(&c->r, 1, 3);
    c->present[i] = true;
    c->slot_of[i] = c->slot_of[j];
    if (second_buffer && c->nslots < MAX_SLOTS) {
        c->s[c->nslots] = c->s[c->slot_of[j]];
        c->slot_of[i] = c->nslots++;
    }
}

static void swap_tensors(fcase *c, int i, int j)
{
    clkit_tensor t = c->t[i];
    c->t[i] = c->t[j], c->t[j] = t;
    bool p = c->present[i];
    c->present[i] = c->present[j], c->present[j] = p;
    int s = c->slot_of[i];
    c->slot_of[i] = c->slot_of[j], c->slot_of[j] = s;
}

enum { MU_NULL, MU_BUFFER, MU_NDIM, MU_DTYPE, MU_SHAPE, MU_STRIDE, MU_OFFSET, MU_ALIAS, MU_SECOND,
       MU_SHRINK, MU_OPTION, MU_CTX, MU_SWAP, MU_KINDS };
static const char *const mutation_names[MU_KINDS] = {
    "null", "buffer", "ndim", "dtype", "shape", "stride", "offset", "alias", "second-buffer",
    "shrink", "option", "ctx", "swap"};
static const int mutation_weights[MU_KINDS] = {4, 3, 4, 4, 10, 10, 6, 6, 3, 5, 8, 1, 2};

static int pick_mutation(rng *r)
{
    int64_t x = irange(r, 0, 65);
    for (int k = 0; k < MU_KINDS; k++)
        if ((x -= mutation_weights[k]) < 0) return k;
    return MU_SHAPE;
}

static void mutate_one(fcase *c, int kind)
{
    int i = pick_tensor(c, kind == MU_ALIAS || kind == MU_SECOND);
    clkit_tensor *t = &c->t[i];
    switch (kind) {
    case MU_NULL: c->present[i] = false; break;
    case MU_BUFFER: c->slot_of[i] = -1; break;
    case MU_NDIM: t->ndim = (int)PICK(&c->r, ((const int64_t[]){-1, 0, 5, 6, INT_MAX, INT_MIN, 1, 2, 3, 4})); break;
    case MU_DTYPE: t->dtype = (clkit_dtype)irange(&c->r, -2, 8); break;
    case MU_SHAPE: mutate_shape(c, t); break;
    case MU_STRIDE: mutate_stride(c, t); break;
    case MU_OFFSET: mutate_offset(c, i); break;
    case MU_ALIAS: mutate_alias(c, i, false); break;
    case MU_SECOND: mutate_alias(c, i, true); break;
    case MU_SHRINK:
        if (c->slot_of[i] >= 0 && c->s[c->slot_of[i]].size > 1)
            c->s[c->slot_of[i]].size -= (size_t)irange(&c->r, 1, (int64_t)c->s[c->slot_of[i]].size - 1);
        break;
    case MU_OPTION:
        if (c->op->mutate_opt) c->op->mutate_opt(c), c->opt_mutated = true;
        else mutate_shape(c, t);
        break;
    case MU_CTX: c->null_ctx = true; break;
    default: swap_tensors(c, i, pick_tensor(c, false));
    }
}

static void mutate(fcase *c)
{
    int n = (int)irange(&c->r, 1, 3), len = 0;
    for (int k = 0; k < n; k++) {
        int kind = pick_mutation(&c->r);
        mutate_one(c, kind);
        len += snprintf(c->mutations + len, sizeof c->mutations - (size_t)len, " %s", mutation_names[kind]);
    }
}

/* ---- running a case ---- */

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Slots one after another, each starting on the device's sub-buffer alignment, with at least
   one alignment's worth of guard bytes after it. */
static bool place(fcase *c, const fdev *d)
{
    size_t cursor = d->align;
    for (int k = 0; k < c->nslots; k++) {
        c->s[k].origin = round_up(cursor, d->align);
        cursor = c->s[k].origin + c->s[k].size + d->align;
    }
    c->end = cursor;
    return cursor <= ARENA;
}

/* Random guard bytes, then each slot filled with values of the first tensor over it. */
static void fill(fcase *c)
{
    for (size_t p = 0; p < c->end; p++) g_before[p] = (uint8_t)next(&c->r);
    for (int k = 0; k < c->nslots; k++)
        for (int i = 0; i < c->op->nt; i++) {
            if (!c->present[i] || c->slot_of[i] != k) continue;
            size_t es = clkit_dtype_size(c->t[i].dtype);
            for (size_t p = 0; p + es <= c->s[k].size; p += es)
                put(c->t[i].dtype, g_before + c->s[k].origin + p, urange(&c->r, c->lo[i], c->hi[i]));
            break;
        }
}

static void make_buffers(fcase *c, const fdev *d)
{
    for (int k = 0; k < c->nslots; k++) {
        cl_buffer_region region = {c->s[k].origin, c->s[k].size};
        cl_int err;
        c->s[k].buf = clCreateSubBuffer(d->arena, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                        &region, &err);
        ck_assert_msg(c->s[k].buf != NULL, "clCreateSubBuffer: %d", err);
    }
    for (int i = 0; i < c->op->nt; i++) c->t[i].buffer = c->slot_of[i] >= 0 ? c->s[c->slot_of[i]].buf : NULL;
    ck_assert_int_eq(clEnqueueWriteBuffer(d->q, d->arena, CL_TRUE, 0, c->end, g_before, 0, NULL, NULL),
                     CL_SUCCESS);
}

static void release_buffers(fcase *c)
{
    for (int k = 0; k < c->nslots; k++) clReleaseMemObject(c->s[k].buf);
}

/* Whether every input a mutated, accepted call read is an ordinary number, so that its
   outputs can be held to the reference's tolerances. */
static bool tame(const fcase *c)
{
    for (int i = 0; i < c->op->nt; i++) {
        if (!c->present[i] || (c->op->outputs & BIT(i))) continue;
        double *v = in(c, i);
        bool ok = true;
        for (int64_t e = 0; ok && e < numel(&c->t[i]); e++) ok = isfinite(v[e]) && fabs(v[e]) <= 1e4;
        free(v);
        if (!ok) return false;
    }
    return true;
}

static void judge_failure(fcase *c, clkit_status s, const fdev *d)
{
    char detail[1200];
    snprintf(detail, sizeof detail, "%s (%s)", clkit_status_string(s), c->null_ctx ? "" : clkit_last_error(d->ctx));
    if ((int)s < 0 || s >= CLKIT_STATUS_COUNT) finding(c, F_STATUS, detail);
    if (!c->null_ctx && !clkit_last_error(d->ctx)[0]) finding(c, F_EMPTY, detail);
    if (memcmp(g_before, g_after, c->end) != 0) finding(c, F_TOUCHED, detail);
    if (c->mode == MODE_VALID) finding(c, F_REJECTED, detail);
}

/* Why an accepted call should have been refused, into detail; false when it is fine. */
static bool accepted_wrongly(const fcase *c, char *detail, size_t n)
{
    for (int i = 0; i < c->op->nt; i++) {
        const char *why = view_problem(c, i);
        if (!why) continue;
        snprintf(detail, n, "%s: %s", c->op->names[i], why);
        return true;
    }
    const char *why = mark_outputs(c);
    if (why) snprintf(detail, n, "%s", why);
    return why != NULL;
}

/* The first byte outside the outputs that the call changed, or -1. */
static long stray_byte(const fcase *c)
{
    for (size_t p = 0; p < c->end; p++)
        if (g_before[p] != g_after[p] && !g_mask[p]) return (long)p;
    return -1;
}

static void judge_success(fcase *c)
{
    char detail[160];
    long stray;
    if (c->null_ctx) {
        finding(c, F_STATUS, "OK without a context");
    } else if (accepted_wrongly(c, detail, sizeof detail)) {
        finding(c, F_ACCEPTED, detail);
    } else if ((stray = stray_byte(c)) >= 0) {
        snprintf(detail, sizeof detail, "byte %ld of the arena changed", stray);
        finding(c, F_STRAY, detail);
    } else if ((c->mode == MODE_VALID || (!c->opt_mutated && c->op->values_after_mutation && tame(c))) &&
               c->op->check && !c->op->check(c)) {
        finding(c, F_MISMATCH, c->why);
    }
}

static void run_case(int mode, long index)
{
    fcase c;
    memset(&c, 0, sizeof c);
    c.mode = mode, c.index = index, c.r.s = g_env.seed * 0x2545f4914f6cdd1dull + (uint64_t)index;
    next(&c.r);
    c.op = mode == MODE_VALID && index % 331 == 7 ? tuners[index / 331 % 3] : pick_op(&c.r, mode);
    c.pass_opt = true;
    c.op->gen(&c);
    const fdev *d = c.op->tuning ? &g_tune : &g_main;
    if (!place(&c, d)) return;
    fill(&c);
    if (c.op->prepare) c.op->prepare(&c);
    if (mode == MODE_INVALID) mutate(&c);
    bool valid = model_valid(&c);
    /* Tuning a valid call times candidates: only a mutated option (to be refused, or one
       candidate on the budget) earns that. */
    if (mode == MODE_INVALID && valid && !c.null_ctx &&
        ((c.op->tuning && !c.opt_mutated) || work(&c) > MAX_WORK)) {
        __atomic_add_fetch(&g_stats->skipped, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_add_fetch(&g_stats->cases, 1, __ATOMIC_RELAXED);
    make_buffers(&c, d);
    describe(&c, g_stats->running[g_test], sizeof g_stats->running[g_test]);
    long bad_progress = g_bad_progress;
    clkit_status s = c.op->call(c.null_ctx ? NULL : d->ctx, &c);
    cl_int err = clEnqueueReadBuffer(d->q, d->arena, CL_TRUE, 0, c.end, g_after, 0, NULL, NULL);
    g_stats->running[g_test][0] = 0;
    ck_assert_msg(err == CL_SUCCESS, "reading the arena back: %d (after %s)", err, c.op->name);
    if (g_bad_progress != bad_progress) finding(&c, F_STATUS, "a progress report of the tuner: done outside 1..total or no config");
    if (s != CLKIT_OK) judge_failure(&c, s, d);
    else judge_success(&c), __atomic_add_fetch(&g_stats->accepted, 1, __ATOMIC_RELAXED);
    release_buffers(&c);
}

/* ---- context and device queries ---- */

static void expect_fail(clkit_context *ctx, clkit_status s, const char *what)
{
    __atomic_add_fetch(&g_stats->cases, 1, __ATOMIC_RELAXED);
    fcase c;
    memset(&c, 0, sizeof c);
    static const op query = {.name = "query"};
    c.op = &query, c.index = -1; /* the queries run the same every time */
    snprintf(c.mutations, sizeof c.mutations, " %s", what);
    if (s == CLKIT_OK) finding(&c, F_ACCEPTED, clkit_status_string(s));
    else if ((int)s < 0 || s >= CLKIT_STATUS_COUNT) finding(&c, F_STATUS, "unknown status");
    else if (ctx && !clkit_last_error(ctx)[0]) finding(&c, F_EMPTY, clkit_status_string(s));
}

static void list_entry(void *user, const char *op, const char *dtype, const char *layout,
                       const char *shape, const char *config, double ms)
{
    (void)op, (void)dtype, (void)layout, (void)shape, (void)config, (void)ms;
    ++*(int *)user;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void query_contexts(void)
{
    clkit_context *ctx = NULL;
    clkit_options o = {0};
    expect_fail(NULL, clkit_context_create(NULL, NULL), "context_create(NULL)");
    static const char *devices[] = {"no-such-device-xyz", "999", "-1", "99999999999999999999"};
    for (int i = 0; i < 4; i++) {
        o.device = devices[i];
        expect_fail(NULL, clkit_context_create(&ctx, &o), devices[i]);
        ck_assert_msg(ctx == NULL, "a failed context_create left a context");
    }
    expect_fail(NULL, clkit_context_from_queue(NULL, g_main.q), "from_queue(NULL, q)");
    expect_fail(NULL, clkit_context_from_queue(&ctx, NULL), "from_queue(&ctx, NULL)");
    clkit_context_release(NULL);
    cl_context cl;
    expect_fail(NULL, clkit_context_cl(NULL, &cl, NULL, NULL), "context_cl(NULL)");
    ck_assert_int_eq(clkit_context_cl(g_main.ctx, NULL, NULL, NULL), CLKIT_OK);
    expect_fail(NULL, clkit_finish(NULL), "finish(NULL)");
    struct clkit_device_props p;
    expect_fail(NULL, clkit_device_props(NULL, &p), "device_props(NULL, p)");
    expect_fail(g_main.ctx, clkit_device_props(g_main.ctx, NULL), "device_props(ctx, NULL)");
}

static void query_strings(rng *r)
{
    const int odd[] = {-1, CLKIT_STATUS_COUNT, INT_MAX, INT_MIN, 6, 7, 255};
    for (int i = 0; i < 7; i++) {
        int v = chance(r, 0.5) ? odd[i] : (int)irange(r, INT_MIN, INT_MAX);
        ck_assert_ptr_nonnull(clkit_status_string((clkit_status)v));
        ck_assert_ptr_nonnull(clkit_dtype_name((clkit_dtype)v));
        ck_assert_msg(clkit_dtype_size((clkit_dtype)v) == 0 || (v >= 0 && v <= CLKIT_I64),
                      "dtype %d has a size", v);
    }
    ck_assert_ptr_nonnull(clkit_version());
    ck_assert_ptr_nonnull(clkit_last_error(NULL));
    ck_assert_ptr_nonnull(clkit_cache_dir(NULL));
    ck_assert_int_eq((int)clkit_scratch_peak(NULL, 1), 0);
    clkit_context_trim(NULL);
}

/* Fast-path queries: NULLs, families that do not exist; the real ones answer. */
static void query_fast_paths(void)
{
    static const char *families[] = {"matmul", "attention", "cross_entropy", "softmax", "layernorm"};
    unsigned paths;
    expect_fail(NULL, clkit_fast_paths(NULL, "matmul", &paths), "fast_paths(NULL)");
    expect_fail(g_main.ctx, clkit_fast_paths(g_main.ctx, NULL, &paths), "fast_paths(op NULL)");
    expect_fail(g_main.ctx, clkit_fast_paths(g_main.ctx, "matmul", NULL), "fast_paths(paths NULL)");
    static const char *odd[] = {"", "MATMUL", "matmul ", "no-such-op", "\xff"};
    for (int i = 0; i < 5; i++) expect_fail(g_main.ctx, clkit_fast_paths(g_main.ctx, odd[i], &paths), odd[i]);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(clkit_fast_paths(g_main.ctx, families[i], &paths) == CLKIT_OK, "fast_paths(%s): %s",
                      families[i], clkit_last_error(g_main.ctx));
}

/* Profiling calls out of order, on a context without a profiling queue. */
static void query_profiling(void)
{
    double ms;
    expect_fail(NULL, clkit_profile_begin(NULL), "profile_begin(NULL)");
    expect_fail(NULL, clkit_profile_end(NULL, &ms), "profile_end(NULL)");
    expect_fail(g_main.ctx, clkit_profile_end(g_main.ctx, NULL), "profile_end(ctx, NULL)");
    expect_fail(g_main.ctx, clkit_profile_end(g_main.ctx, &ms), "profile_end without begin");
    expect_fail(g_tune.ctx, clkit_profile_begin(g_tune.ctx), "profile_begin without profiling");
}

/* Contiguous tensors that no buffer can hold (negative or huge dims, odd ndim, no shape):
   made without a crash, refused when used. */
static void query_tensors(rng *r)
{
    static const int64_t huge[] = {-1, INT64_MIN, INT64_MAX, 1ll << 40, 1ll << 62,
                                   (int64_t)INT32_MAX + 1};
    const int ndims[] = {-1, 0, 5, INT_MAX, INT_MIN};
    int64_t shape[8];
    for (int i = 0; i < 8; i++) shape[i] = PICK(r, huge);
    for (int i = 0; i < 5; i++) {
        clkit_tensor t = clkit_tensor_contiguous(g_main.arena, CLKIT_F32, ndims[i], shape);
        expect_fail(g_main.ctx, clkit_add(g_main.ctx, &t, &t, &t), "contiguous of odd ndim");
        t = clkit_tensor_contiguous(g_main.arena, CLKIT_F32, (int)irange(r, 1, 4), NULL);
        expect_fail(g_main.ctx, clkit_add(g_main.ctx, &t, &t, &t), "contiguous of NULL shape");
        t = clkit_tensor_contiguous(g_main.arena, CLKIT_F32, (int)irange(r, 1, 4), shape);
        expect_fail(g_main.ctx, clkit_add(g_main.ctx, &t, &t, &t), "contiguous of huge shape");
    }
}

/* The tuned-config files: NULLs, paths that cannot be, files that are not tuned sets. Imports
   go to the tuning context, whose cache is the fuzzer's own. */
static void query_tuned(void)
{
    int n = 0;
    expect_fail(NULL, clkit_tuned_list(NULL, list_entry, &n), "tuned_list(NULL)");
    expect_fail(g_main.ctx, clkit_tuned_list(g_main.ctx, NULL, &n), "tuned_list(fn NULL)");
    expect_fail(NULL, clkit_tuned_export(NULL, "/tmp/x.json"), "tuned_export(NULL)");
    expect_fail(g_main.ctx, clkit_tuned_export(g_main.ctx, NULL), "tuned_export(path NULL)");
    expect_fail(g_main.ctx, clkit_tuned_export(g_main.ctx, "/nonexistent-dir/x/y.json"), "export to nowhere");
    expect_fail(NULL, clkit_tuned_import(NULL, "/tmp/x.json"), "tuned_import(NULL)");
    expect_fail(g_tune.ctx, clkit_tuned_import(g_tune.ctx, NULL), "tuned_import(path NULL)");
    expect_fail(g_tune.ctx, clkit_tuned_import(g_tune.ctx, "/nonexistent-dir/x.json"), "import from nowhere");
    char dir[] = "/tmp/clkit-fuzz-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bad.json", dir);
    static const char *files[] = {"", "{", "[1,2,3]", "{\"version\": \"x\"}", "\xff\xfe garbage",
                                  "{\"version\": 1, \"entries\": 7}"};
    for (int i = 0; i < 6; i++) {
        write_file(path, files[i]);
        clkit_status s = clkit_tuned_import(g_tune.ctx, path);
        if (s != CLKIT_OK) expect_fail(g_tune.ctx, s, "import of a malformed file");
    }
    ck_assert_int_eq(clkit_tuned_list(g_tune.ctx, list_entry, &n), CLKIT_OK);
    remove(path);
    rmdir(dir);
}

/* ---- tests ---- */

static void open_devices(void)
{
    clkit_options o = {0};
    clkit_context *ctx = NULL;
    ck_assert_int_eq(clkit_context_create(&ctx, &o), CLKIT_OK);
    dev_open(&g_main, ctx);
    tune_open();
}

static void close_devices(void)
{
    dev_close(&g_main);
    dev_close(&g_tune);
}

static long findings_total(void)
{
    long n = 0;
    for (int k = 0; k < F_KINDS; k++) n += g_stats->findings[k];
    return n;
}

/* Cases [first, first + count) of a mode, or the one CLKIT_FUZZ_CASE names. */
static void run_range(int test, int mode, long first, long count)
{
    g_test = test;
    open_devices();
    long before = findings_total();
    for (long k = first; k < first + count; k++)
        if (g_env.only < 0 || g_env.only == k) run_case(mode, k);
    close_devices();
    ck_assert_msg(findings_total() == before, "%ld findings (listed above)", findings_total() - before);
}

static long invalid_count(void) { return g_env.cases * 3 / 4; }

START_TEST(queries)
{
    g_test = 0;
    open_devices();
    rng r = {g_env.seed};
    long before = findings_total();
    query_contexts();
    query_strings(&r);
    query_fast_paths();
    query_profiling();
    query_tensors(&r);
    query_tuned();
    close_devices();
    ck_assert_msg(findings_total() == before, "%ld findings (listed above)", findings_total() - before);
}
END_TEST

START_TEST(invalid) { run_range(1, MODE_INVALID, 0, invalid_count()); }
END_TEST

START_TEST(valid) { run_range(2, MODE_VALID, invalid_count(), g_env.cases - invalid_count()); }
END_TEST

static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 0) : fallback;
}

int main(void)
{
    g_env.cases = env_long("CLKIT_FUZZ_CASES", 4000);
    g_env.seed = (uint64_t)env_long("CLKIT_FUZZ_SEED", 1);
    g_env.only = env_long("CLKIT_FUZZ_CASE", -1);
    g_stats = mmap(NULL, sizeof *g_stats, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_stats == MAP_FAILED) return EXIT_FAILURE;
    memset(g_stats, 0, sizeof *g_stats);

    Suite *s = suite_create("fuzz");
    TCase *tc = tu_tcase("fuzz");
    tcase_set_timeout(tc, 1500);
    tcase_add_test(tc, queries);
    tcase_add_test(tc, invalid);
    tcase_add_test(tc, valid);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);

    long crashes = 0;
    for (int t = 0; t < TESTS; t++)
        if (g_stats->running[t][0]) {
            crashes++;
            fprintf(stderr, "fuzz: crash or timeout in %s\n", g_stats->running[t]);
        }
    for (int k = 0; k < g_stats->nfirst && k < FIRST; k++) fprintf(stderr, "fuzz: finding %s\n", g_stats->first[k]);
    const long *f = g_stats->findings;
    printf("fuzz: %ld cases, %ld crashes, %ld mismatches, %ld outputs touched on error, %ld empty "
           "messages, %ld valid rejected, %ld invalid accepted, %ld stray writes, %ld bad statuses "
           "(%ld calls accepted; %ld valid-looking calls not run: too much work, or tuning; seed %llu)\n",
           g_stats->cases, crashes, f[F_MISMATCH], f[F_TOUCHED], f[F_EMPTY], f[F_REJECTED], f[F_ACCEPTED],
           f[F_STRAY], f[F_STATUS], g_stats->accepted, g_stats->skipped, (unsigned long long)g_env.seed);
    return rc;
}
