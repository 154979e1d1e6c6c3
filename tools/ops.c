/* The op table shared by `clkit check` and `clkit bench`. */
#include "ops.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"

#define FLOATS (OP_DT(CLKIT_F32) | OP_DT(CLKIT_F16) | OP_DT(CLKIT_BF16))

/* The tutorial's dropout: p = 0.5; any fixed seed makes runs comparable. */
static const float dropout_p = 0.5f;
static const uint64_t dropout_seed = 0x5eed;
/* Not a divisor of the check shapes' rows, so the last group is a partial one. */
static const int swizzle_group = 3;

/* ---- errors ---- */

static char last_error[8192];

const char *op_error(void)
{
    return last_error;
}

clkit_status op_fail(clkit_status s, const char *what)
{
    snprintf(last_error, sizeof last_error, "%s: %s", clkit_status_string(s), what);
    return s;
}

clkit_status op_cl_fail(cl_int err, const char *what)
{
    int oom = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
              err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE;
    char msg[256];
    snprintf(msg, sizeof msg, "%s failed with OpenCL error %d", what, err);
    return op_fail(oom ? CLKIT_ERR_OUT_OF_MEMORY : CLKIT_ERR_OPENCL, msg);
}

clkit_status op_status(clkit_context *ctx, clkit_status s)
{
    if (s) snprintf(last_error, sizeof last_error, "%s", clkit_last_error(ctx));
    return s;
}

/* ---- calls and references, one pair per op ---- */

static clkit_status call_add(clkit_context *ctx, const op_problem *p)
{
    return clkit_add(ctx, &p->t[0], &p->t[1], &p->t[2]);
}

static void want_add(const op_problem *p, const double *const *in, double *want,
                     double *tol)
{
    (void)tol;
    for (int64_t i = 0; i < op_numel(p, 2); i++) want[i] = in[0][i] + in[1][i];
}

static clkit_status call_softmax(clkit_context *ctx, const op_problem *p)
{
    return clkit_softmax(ctx, &p->t[0], &p->t[1]);
}

static void want_softmax(const op_problem *p, const double *const *in, double *want,
                         double *tol)
{
    (void)tol;
    ref_softmax(in[0], want, p->shape.rows, p->shape.cols);
}

static clkit_status call_dropout(clkit_context *ctx, const op_problem *p)
{
    return clkit_dropout(ctx, &p->t[0], &p->t[1], dropout_p, dropout_seed);
}

static void want_dropout(const op_problem *p, const double *const *in, double *want,
                         double *tol)
{
    (void)tol;
    for (int64_t i = 0; i < op_numel(p, 1); i++)
        want[i] = ref_dropout_one(in[0][i], (uint64_t)i, dropout_p, dropout_seed);
}

static clkit_status call_copy(clkit_context *ctx, const op_problem *p)
{
    return clkit_copy(ctx, &p->t[0], &p->t[1]);
}

static void want_copy(const op_problem *p, const double *const *in, double *want,
                      double *tol)
{
    (void)tol;
    int64_t rows = p->shape.rows, cols = p->shape.cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            want[i * cols + j] = p->shape.transposed ? in[0][j * rows + i] : in[0][i * cols + j];
}

static clkit_status call_gray(clkit_context *ctx, const op_problem *p)
{
    return clkit_rgb_to_gray(ctx, &p->t[0], &p->t[1]);
}

static void want_gray(const op_problem *p, const double *const *in, double *want,
                      double *tol)
{
    (void)tol;
    ref_rgb_to_gray(in[0], want, p->shape.rows, p->shape.cols);
}

static clkit_status call_swizzle(clkit_context *ctx, const op_problem *p)
{
    return clkit_swizzle2d(ctx, &p->t[0], &p->t[1], swizzle_group);
}

static void want_swizzle(const op_problem *p, const double *const *in, double *want,
                         double *tol)
{
    (void)tol;
    int64_t rows = p->shape.rows, cols = p->shape.cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t ni, nj;
            ref_swizzle2d_index(i, j, rows, cols, swizzle_group, &ni, &nj);
            want[ni * cols + nj] = in[0][i * cols + j];
        }
}

/* matmul: C = act(alpha A @ B + beta C); OP_ACCUMULATE exercises every term of it. */
static clkit_matmul_options matmul_options(const op_problem *p)
{
    clkit_matmul_options o = clkit_matmul_defaults();
    o.provider = p->provider;
    if (p->shape.flags & OP_ACCUMULATE) {
        o.alpha = 1.5f;
        o.beta = -0.5f;
        o.activation = CLKIT_ACT_RELU;
    }
    return o;
}

static clkit_status call_matmul(clkit_context *ctx, const op_problem *p)
{
    clkit_matmul_options o = matmul_options(p);
    return clkit_matmul(ctx, &p->t[0], &p->t[1], &p->t[2], &o);
}

static clkit_status tune_matmul(clkit_context *ctx, const op_problem *p,
                                const clkit_tune_options *t)
{
    clkit_matmul_options o = matmul_options(p);
    return clkit_tune_matmul(ctx, &p->t[0], &p->t[1], &p->t[2], &o, t);
}

/* A (M, K), B (K, N), C (M, N), each with a batch dimension unless broadcast. */
static void dims_matmul(const op_problem *p, int slot, int64_t d[3])
{
    const op_shape *s = &p->shape;
    int shared = slot < p->op->nin && (s->shared >> slot & 1);
    d[0] = s->batch > 1 && !shared ? s->batch : 0;
    d[1] = slot == 1 ? s->depth : s->rows;
    d[2] = slot == 0 ? s->depth : s->cols;
}

static int64_t matmul_batch(const op_problem *p)
{
    return p->shape.batch > 1 ? p->shape.batch : 1;
}

static void slot_layout(const op_problem *p, int k, int64_t d[3], int64_t strides[3]);

/* The error bound of tests/test_matmul.c: f32 accumulation over K terms of a sum whose
   magnitude ref_matmul reports (inputs are exact in f32, products of f16 and bf16 too). */
static void want_matmul(const op_problem *p, const double *const *in, double *want,
                        double *tol)
{
    const op_shape *s = &p->shape;
    clkit_matmul_options o = matmul_options(p);
    ref_matrix m[3];
    int64_t d[3], n = matmul_batch(p) * s->rows * s->cols;
    for (int k = 0; k < 3; k++) {
        m[k].v = k < 2 ? (double *)in[k] : want;
        slot_layout(p, k, d, m[k].s);
    }
    /* ref_matmul writes the magnitude over tol, which holds op->atol. */
    double atol = p->op->atol;
    ref_matmul(&m[0], &m[1], &m[2], matmul_batch(p), s->rows, s->cols, s->depth, o.alpha,
               o.beta, (int)o.activation, o.leaky_slope, tol);
    for (int64_t i = 0; i < n; i++) tol[i] = atol + 4.0 * (double)(s->depth + 2) * 0x1p-23 * tol[i];
}

static double flops_matmul(const op_problem *p)
{
    const op_shape *s = &p->shape;
    return 2.0 * (double)s->rows * (double)s->cols * (double)s->depth * (double)matmul_batch(p);
}

/* The tutorial's plot: M = N = K; other rows stay off it. */
static double plot_x_matmul(const op_problem *p)
{
    const op_shape *s = &p->shape;
    int cube = s->rows == s->cols && s->cols == s->depth && matmul_batch(p) == 1;
    return cube ? (double)s->rows : NAN;
}

/* ---- shapes ---- */

/* Odd and power-of-two lengths: the tails and the vector paths of the kernels. */
static const op_shape stream_checks[] = {{.rows = 1, .cols = 4099},
                                         {.rows = 1, .cols = 1 << 20}, {0}};
static const op_shape copy_checks[] = {{.rows = 1, .cols = 4099}, {.rows = 1, .cols = 1 << 20},
                                       {.rows = 300, .cols = 257, .transposed = 1}, {0}};
static const op_shape gray_checks[] = {{.rows = 37, .cols = 51}, {.rows = 1066, .cols = 1600},
                                       {0}};
static const op_shape swizzle_checks[] = {{.rows = 37, .cols = 19}, {.rows = 256, .cols = 256},
                                          {0}};
/* Short rows, a row that fits on chip and one long enough for the online path on a GPU. */
static const op_shape softmax_checks[] = {{.rows = 37, .cols = 1000}, {.rows = 128, .cols = 4096},
                                          {.rows = 4, .cols = 50000}, {0}};

/* The vector tutorials' sizes, n = 2^12 .. 2^27; the targets are at 2^26. */
static int stream_shapes(int quick, op_shape *out)
{
    int n = 0;
    for (int e = 12; e <= (quick ? 20 : 27); e += quick ? 4 : 1)
        out[n++] = (op_shape){.rows = 1, .cols = (int64_t)1 << e, .target = e == 26};
    return n;
}

/* Dense copies, then transposing ones (torch: x.t().contiguous()). */
static int copy_shapes(int quick, op_shape *out)
{
    static const int64_t sides[] = {1024, 4096, 8192};
    int n = stream_shapes(quick, out);
    for (size_t i = 0; i < (quick ? 1 : sizeof sides / sizeof *sides); i++)
        out[n++] = (op_shape){.rows = sides[i], .cols = sides[i], .transposed = 1};
    return n;
}

/* The softmax tutorial's sweep, M = 4096 and N = 128 i for i = 2 .. 100, plus the target
   N = 32768; quick: a few N over fewer rows. */
static int softmax_shapes(int quick, op_shape *out)
{
    int n = 0;
    if (quick) {
        for (int64_t i = 2; i <= 32; i *= 4) out[n++] = (op_shape){.rows = 256, .cols = 128 * i};
        return n;
    }
    for (int64_t i = 2; i <= 100; i++) {
        int64_t cols = 128 * i;
        int target = cols == 256 || cols == 1024 || cols == 4096 || cols == 12672;
        out[n++] = (op_shape){.rows = 4096, .cols = cols, .target = target};
    }
    out[n++] = (op_shape){.rows = 4096, .cols = 32768, .target = 1};
    return n;
}

/* The practitioner's guide image, then 4K. */
static int gray_shapes(int quick, op_shape *out)
{
    out[0] = (op_shape){.rows = 1066, .cols = 1600, .target = 1};
    out[1] = (op_shape){.rows = 2160, .cols = 3840};
    return quick ? 1 : 2;
}

#define F32_ONLY OP_DT(CLKIT_F32)

/* Odd sizes for the edges of every tile, multiples of 32 for the vector loads; each layout,
   dtype path and the batch broadcast and epilogue once. */
static const op_shape matmul_checks[] = {
    {.rows = 67, .cols = 45, .depth = 37, .dtypes = F32_ONLY},
    {.rows = 128, .cols = 96, .depth = 64, .dtypes = F32_ONLY},
    {.rows = 67, .cols = 45, .depth = 37, .transposed = 1, .dtypes = F32_ONLY},
    {.rows = 128, .cols = 96, .depth = 64, .transposed = 2, .dtypes = F32_ONLY},
    {.rows = 67, .cols = 45, .depth = 37, .dtypes = OP_DT(CLKIT_F16)},
    {.rows = 128, .cols = 96, .depth = 64, .transposed = 3, .dtypes = OP_DT(CLKIT_F16)},
    {.rows = 128, .cols = 96, .depth = 64, .flags = OP_OUT_IN, .dtypes = OP_DT(CLKIT_BF16)},
    {.rows = 67, .cols = 45, .depth = 37, .batch = 3, .shared = 2, .dtypes = F32_ONLY},
    {.rows = 67, .cols = 45, .depth = 37, .flags = OP_ACCUMULATE, .dtypes = F32_ONLY},
    {0},
};

static op_shape matmul_shape(int64_t m, int64_t n, int64_t k, int64_t batch)
{
    return (op_shape){.rows = m, .cols = n, .depth = k, .batch = batch};
}

/* Skinny (M = 1, 8, 16: a batch of vectors through a layer) and batched products, the
   second with one B shared by the batch. */
static int matmul_odd_shapes(int quick, op_shape *out)
{
    static const int64_t skinny[] = {1, 8, 16};
    int64_t side = quick ? 1024 : 4096, cube = quick ? 256 : 512, batch = quick ? 4 : 16;
    int n = 0;
    for (size_t i = quick ? 1 : 0; i < (quick ? 2 : sizeof skinny / sizeof *skinny); i++)
        out[n++] = matmul_shape(skinny[i], side, side, 0);
    out[n++] = matmul_shape(cube, cube, cube, batch);
    out[n] = matmul_shape(cube, cube, cube, batch);
    out[n++].shared = 2;
    return n;
}

/* The tutorial's sweep M = N = K = 128 i for i = 2 .. 32 (its squares 256 .. 4096 among
   them), 8192, then the odd shapes; the targets at 4096. */
static int matmul_shapes(int quick, op_shape *out)
{
    int n = 0;
    for (int64_t i = 2; i <= (quick ? 4 : 32); i += quick ? 2 : 1) {
        out[n] = matmul_shape(128 * i, 128 * i, 128 * i, 0);
        out[n++].target = i == 32;
    }
    if (!quick) out[n++] = matmul_shape(8192, 8192, 8192, 0);
    return n + matmul_odd_shapes(quick, out + n);
}

/* `clkit tune --standard`: the squares 256 .. 8192, every 4th size of the sweep in between
   (the tuned-cache lookup takes the nearest shape for the rest), and the odd shapes. */
static int matmul_tune_shapes(op_shape *out)
{
    int n = 0;
    for (int64_t side = 256; side <= 8192; side += 128) {
        int64_t i = side / 128;
        if ((side & (side - 1)) == 0 || (i <= 32 && (i - 2) % 4 == 0))
            out[n++] = matmul_shape(side, side, side, 0);
    }
    /* One batched entry serves both bench rows: broadcasting does not change the tuned key. */
    return n + matmul_odd_shapes(0, out + n) - 1;
}

/* clkit's call as is (tuned), the same without a tuned entry, and CLBlast (f32 only; NVIDIA's
   OpenCL has no fp16 for it). */
static const op_provider matmul_providers[] = {
    {.name = "clkit"},
    {.name = "heuristic", .fresh_cache = 1},
    {.name = "clblast", .api = CLKIT_PROVIDER_CLBLAST, .wall_clock = 1, .peer = 1,
     .dtypes = OP_DT(CLKIT_F32)},
};

/* ---- the table ---- */

const op_def op_table[] = {
    {.name = "add", .nin = 2, .planes = 1, .ndim = 1, .dtypes = FLOATS, .lo = -4, .hi = 4,
     .x_label = "elements", .checks = stream_checks, .bench_shapes = stream_shapes,
     .call = call_add, .reference = want_add},
    {.name = "softmax", .nin = 1, .planes = 1, .ndim = 2, .dtypes = FLOATS, .lo = -8, .hi = 8,
     .atol = 1e-6, .x_label = "N (row length)", .x_is_cols = 1, .checks = softmax_checks,
     .bench_shapes = softmax_shapes, .call = call_softmax, .reference = want_softmax},
    {.name = "dropout", .nin = 1, .planes = 1, .ndim = 1, .dtypes = FLOATS, .lo = -4, .hi = 4,
     .x_label = "elements", .checks = stream_checks, .bench_shapes = stream_shapes,
     .call = call_dropout, .reference = want_dropout},
    {.name = "copy", .nin = 1, .planes = 1, .ndim = 1, .dtypes = FLOATS, .lo = -4, .hi = 4,
     .x_label = "elements", .checks = copy_checks, .bench_shapes = copy_shapes,
     .call = call_copy, .reference = want_copy},
    {.name = "grayscale", .nin = 1, .planes = 3, .ndim = 2,
     .dtypes = OP_DT(CLKIT_F32) | OP_DT(CLKIT_U8), .lo = 0, .hi = 1, .atol = 1e-6,
     .x_label = "pixels", .checks = gray_checks, .bench_shapes = gray_shapes,
     .call = call_gray, .reference = want_gray},
    {.name = "swizzle", .nin = 1, .planes = 1, .ndim = 2, .dtypes = OP_DT(CLKIT_F32), .lo = -4,
     .hi = 4, .checks = swizzle_checks, .call = call_swizzle, .reference = want_swizzle},
    {.name = "matmul", .nin = 2, .planes = 1, .ndim = 3, .dtypes = FLOATS, .out_f32 = 1, .lo = -1,
     .hi = 1, .x_label = "M = N = K", .checks = matmul_checks, .bench_shapes = matmul_shapes,
     .providers = matmul_providers,
     .nproviders = sizeof matmul_providers / sizeof *matmul_providers, .call = call_matmul,
     .reference = want_matmul, .dims = dims_matmul, .flops = flops_matmul,
     .plot_x = plot_x_matmul, .tune = tune_matmul, .tune_shapes = matmul_tune_shapes},
};
const int op_count = sizeof op_table / sizeof *op_table;

const op_def *op_find(const char *name)
{
    for (int i = 0; i < op_count; i++)
        if (strcmp(op_table[i].name, name) == 0) return &op_table[i];
    return NULL;
}

/* ---- problems ---- */

op_problem op_problem_make(const op_def *op, clkit_dtype dtype, op_shape shape)
{
    op_problem p;
    memset(&p, 0, sizeof p);
    p.op = op;
    p.dtype = dtype;
    p.out_dtype = op->out_f32 && !(shape.flags & OP_OUT_IN) ? CLKIT_F32 : dtype;
    p.provider = CLKIT_PROVIDER_AUTO;
    p.shape = shape;
    return p;
}

/* The elementwise ops: inputs of `planes` planes; 2-D where the op or a transposed source
   needs rows. */
static void dims_default(const op_problem *p, int slot, int64_t d[3])
{
    const op_shape *s = &p->shape;
    d[0] = slot < p->op->nin && p->op->planes > 1 ? p->op->planes : 0;
    d[1] = p->op->ndim == 2 || s->transposed ? s->rows : 0;
    d[2] = s->cols;
}

/* Dims of slot k and the strides (leading, row, col) of its dense storage: row-major, or
   column-major for a transposed input; a leading stride of 0 where there is no such dim. */
static void slot_layout(const op_problem *p, int k, int64_t d[3], int64_t strides[3])
{
    (p->op->dims ? p->op->dims : dims_default)(p, k, d);
    int64_t rows = d[1] ? d[1] : 1;
    int transposed = k < p->op->nin && (p->shape.transposed >> k & 1);
    strides[0] = d[0] ? rows * d[2] : 0;
    strides[1] = transposed ? 1 : d[2];
    strides[2] = transposed ? rows : 1;
}

int64_t op_numel(const op_problem *p, int slot)
{
    int64_t d[3], strides[3];
    slot_layout(p, slot, d, strides);
    return (d[0] ? d[0] : 1) * (d[1] ? d[1] : 1) * d[2];
}

clkit_dtype op_slot_dtype(const op_problem *p, int slot)
{
    return slot < p->op->nin ? p->dtype : p->out_dtype;
}

uint64_t op_slot_bytes(const op_problem *p, int slot)
{
    return (uint64_t)op_numel(p, slot) * clkit_dtype_size(op_slot_dtype(p, slot));
}

uint64_t op_bytes(const op_problem *p)
{
    uint64_t n = 0;
    for (int k = 0; k <= p->op->nin; k++) n += op_slot_bytes(p, k);
    return n;
}

const op_provider *op_providers(const op_def *op, int *n)
{
    static const op_provider only_clkit = {.name = "clkit"};
    *n = op->providers ? op->nproviders : 1;
    return op->providers ? op->providers : &only_clkit;
}

/* ".nt" (A as stored, B transposed) where an input is transposed, ".bshared" where B is
   broadcast, ".acc.relu" with the epilogue. */
static void matmul_suffix(const op_shape *s, char *buf, size_t n)
{
    static const char *const layouts[] = {"", ".tn", ".nt", ".tt"};
    snprintf(buf, n, "%s%s%s%s", layouts[s->transposed & 3], s->shared & 1 ? ".ashared" : "",
             s->shared & 2 ? ".bshared" : "", s->flags & OP_ACCUMULATE ? ".acc.relu" : "");
}

void op_shape_text(const op_problem *p, char *buf, size_t n)
{
    const op_shape *s = &p->shape;
    if (p->op->ndim == 3) {
        char suffix[32], batch[24] = "";
        matmul_suffix(s, suffix, sizeof suffix);
        if (s->batch > 1) snprintf(batch, sizeof batch, "x%lld", (long long)s->batch);
        snprintf(buf, n, "%lldx%lldx%lld%s%s", (long long)s->rows, (long long)s->cols,
                 (long long)s->depth, batch, suffix);
    } else if (p->op->ndim == 1 && !s->transposed) {
        snprintf(buf, n, "%lld", (long long)s->cols);
    } else {
        snprintf(buf, n, "%lldx%lld%s", (long long)s->rows, (long long)s->cols,
                 s->transposed ? ".T" : "");
    }
}

void op_dtype_text(const op_problem *p, char *buf, size_t n)
{
    if (p->out_dtype == p->dtype)
        snprintf(buf, n, "%s", clkit_dtype_name(p->dtype));
    else
        snprintf(buf, n, "%s>%s", clkit_dtype_name(p->dtype), clkit_dtype_name(p->out_dtype));
}

int op_shape_parse(const op_def *op, const char *text, op_shape *out)
{
    int64_t d[4];
    int n = 0;
    char *end = NULL;
    for (const char *at = text;; at = end + 1) {
        if (n == 4 || !isdigit((unsigned char)*at)) return -1;
        long long v = strtoll(at, &end, 10);
        if (v <= 0) return -1;
        d[n++] = v;
        if (*end != 'x') break;
    }
    if (*end) return -1;
    /* ndim numbers; a (M, N, K) op may add the batch count. */
    int want = op->ndim < 2 ? 1 : op->ndim;
    if (n != want && !(op->ndim == 3 && n == 4)) return -1;
    memset(out, 0, sizeof *out);
    out->rows = n > 1 ? d[0] : 1;
    out->cols = d[n > 1];
    if (n >= 3) out->depth = d[2];
    if (n == 4) out->batch = d[3];
    return 0;
}

double op_plot_x(const op_problem *p)
{
    if (p->op->plot_x) return p->op->plot_x(p);
    return p->op->x_is_cols ? (double)p->shape.cols : (double)p->shape.rows * (double)p->shape.cols;
}

const char *op_too_big(const struct clkit_device_props *dev, const op_problem *p,
                       uint64_t scratch)
{
    uint64_t total = scratch;
    for (int k = 0; k <= p->op->nin; k++) {
        uint64_t bytes = op_slot_bytes(p, k);
        if (bytes > dev->max_alloc) return "a buffer exceeds the device's max_alloc";
        total += bytes;
    }
    return total > dev->global_mem / 10 * 9 ? "the buffers exceed the device's memory" : NULL;
}

/* Dense tensors over the buffers, in the layouts of slot_layout. */
static void set_views(op_problem *p)
{
    for (int k = 0; k <= p->op->nin; k++) {
        int64_t d[3], strides[3], shape[3], view_strides[3];
        int nd = 0;
        slot_layout(p, k, d, strides);
        for (int i = 0; i < 3; i++) {
            if (!d[i]) continue;
            shape[nd] = d[i];
            view_strides[nd++] = strides[i];
        }
        p->t[k] = clkit_tensor_contiguous(p->buf[k], op_slot_dtype(p, k), nd, shape);
        memcpy(p->t[k].strides, view_strides, (size_t)nd * sizeof *view_strides);
    }
}

clkit_status op_alloc(clkit_context *ctx, op_problem *p)
{
    /* 0x3c in every byte is a finite normal value in each dtype: f32 and bf16 0.0115,
       f16 1.06, u8 60. */
    static const cl_uchar pattern = 0x3c;
    cl_context c;
    cl_command_queue q;
    clkit_context_cl(ctx, &c, &q, NULL);
    for (int k = 0; k <= p->op->nin; k++) {
        size_t bytes = (size_t)op_slot_bytes(p, k);
        cl_int err;
        p->buf[k] = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!p->buf[k]) return op_cl_fail(err, "clCreateBuffer");
        err = clEnqueueFillBuffer(q, p->buf[k], &pattern, 1, 0, bytes, 0, NULL, NULL);
        if (err != CL_SUCCESS) return op_cl_fail(err, "clEnqueueFillBuffer");
    }
    set_views(p);
    /* Drivers allocate on first use: waiting here makes a device out of memory show now. */
    return op_status(ctx, clkit_finish(ctx));
}

void op_free(op_problem *p)
{
    for (int k = 0; k < 3; k++) {
        if (p->buf[k]) clReleaseMemObject(p->buf[k]);
        p->buf[k] = NULL;
    }
}

clkit_status op_call(clkit_context *ctx, const op_problem *p)
{
    return op_status(ctx, p->op->call(ctx, p));
}

/* ---- verification ---- */

/* Outputs as the op stores them; u8 rounds to nearest and saturates (ref_quantize truncates,
   which suits inputs only). */
static double store_as(clkit_dtype t, double v)
{
    if (t == CLKIT_U8) return v < 0 ? 0 : v > 255 ? 255 : floor(v + 0.5);
    return ref_quantize(t, v);
}

/* Host arrays of one verification: the inputs, the output (its old values, then what the
   device wrote), the reference and the tolerance of each output element. */
typedef struct verify_data {
    double *in[3], *out, *want, *tol;
} verify_data;

static void compare(const op_problem *p, const verify_data *d, int64_t n, double *max_err,
                    int *pass)
{
    double rtol = ref_rtol(p->out_dtype);
    *max_err = 0;
    *pass = 1;
    for (int64_t i = 0; i < n; i++) {
        double got = d->out[i], want = d->want[i];
        double e = ref_close(got, want, 0, 0) ? 0 : fabs(got - want);
        if (isnan(e)) e = INFINITY;
        if (e > *max_err) *max_err = e;
        if (!ref_close(got, want, d->tol[i], rtol)) *pass = 0;
    }
}

static double *random_values(const op_problem *p, int slot, clkit_dtype t)
{
    size_t n = (size_t)op_numel(p, slot);
    double *v = malloc(n * sizeof *v);
    int u8 = t == CLKIT_U8;
    if (v) ref_fill_random(v, n, t, u8 ? 0 : p->op->lo, u8 ? 256 : p->op->hi, 1 + (uint64_t)slot);
    return v;
}

/* Random inputs (and old output values where the op reads them), and the reference. */
static clkit_status verify_expect(const op_problem *p, verify_data *d)
{
    int nin = p->op->nin, reads_out = p->shape.flags & OP_ACCUMULATE;
    size_t n = (size_t)op_numel(p, nin);
    int ok = 1;
    for (int k = 0; k < nin; k++) ok &= (d->in[k] = random_values(p, k, p->dtype)) != NULL;
    d->out = reads_out ? random_values(p, nin, p->out_dtype) : malloc(n * sizeof(double));
    d->want = malloc(n * sizeof(double));
    d->tol = malloc(n * sizeof(double));
    if (!ok || !d->out || !d->want || !d->tol)
        return op_fail(CLKIT_ERR_OUT_OF_MEMORY, "host arrays for the reference");
    /* u8: a rounding tie computed in float may land one step from the double reference. */
    double atol = p->out_dtype == CLKIT_U8 ? 1 : p->op->atol;
    for (size_t i = 0; i < n; i++) {
        d->want[i] = reads_out ? d->out[i] : 0;
        d->tol[i] = atol;
    }
    p->op->reference(p, (const double *const *)d->in, d->want, d->tol);
    for (size_t i = 0; i < n; i++) d->want[i] = store_as(p->out_dtype, d->want[i]);
    return CLKIT_OK;
}

static clkit_status verify_upload(clkit_context *ctx, op_problem *p, const verify_data *d)
{
    int nin = p->op->nin;
    for (int k = 0; k <= nin; k++) {
        /* An output the op does not read starts as ref_upload's sentinel pattern, so
           unwritten elements show. */
        const double *vals = k < nin ? d->in[k] : p->shape.flags & OP_ACCUMULATE ? d->out : NULL;
        p->buf[k] = ref_upload(ctx, op_slot_dtype(p, k), (size_t)op_numel(p, k), vals);
        if (!p->buf[k])
            return op_fail(CLKIT_ERR_OUT_OF_MEMORY, "ref_upload could not fill a buffer");
    }
    set_views(p);
    return CLKIT_OK;
}

clkit_status op_verify(clkit_context *ctx, op_problem *p, double *max_err, int *pass)
{
    verify_data d = {{NULL}, NULL, NULL, NULL};
    int nin = p->op->nin;
    int64_t n = op_numel(p, nin);
    clkit_status s = verify_expect(p, &d);
    if (!s) s = verify_upload(ctx, p, &d);
    if (!s) s = op_call(ctx, p);
    if (!s && ref_download(ctx, p->buf[nin], p->out_dtype, (size_t)n, d.out))
        s = op_fail(CLKIT_ERR_OPENCL, "ref_download could not read the output");
    if (!s) compare(p, &d, n, max_err, pass);
    op_free(p);
    for (int k = 0; k < 3; k++) free(d.in[k]);
    free(d.out);
    free(d.want);
    free(d.tol);
    return s;
}
