/* The op table shared by `clkit check` and `clkit bench`. */
#include "ops.h"

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

static void want_add(const op_problem *p, const double *const *in, double *want)
{
    for (int64_t i = 0; i < op_numel(p, 2); i++) want[i] = in[0][i] + in[1][i];
}

static clkit_status call_softmax(clkit_context *ctx, const op_problem *p)
{
    return clkit_softmax(ctx, &p->t[0], &p->t[1]);
}

static void want_softmax(const op_problem *p, const double *const *in, double *want)
{
    ref_softmax(in[0], want, p->shape.rows, p->shape.cols);
}

static clkit_status call_dropout(clkit_context *ctx, const op_problem *p)
{
    return clkit_dropout(ctx, &p->t[0], &p->t[1], dropout_p, dropout_seed);
}

static void want_dropout(const op_problem *p, const double *const *in, double *want)
{
    for (int64_t i = 0; i < op_numel(p, 1); i++)
        want[i] = ref_dropout_one(in[0][i], (uint64_t)i, dropout_p, dropout_seed);
}

static clkit_status call_copy(clkit_context *ctx, const op_problem *p)
{
    return clkit_copy(ctx, &p->t[0], &p->t[1]);
}

static void want_copy(const op_problem *p, const double *const *in, double *want)
{
    int64_t rows = p->shape.rows, cols = p->shape.cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            want[i * cols + j] = p->shape.transposed ? in[0][j * rows + i] : in[0][i * cols + j];
}

static clkit_status call_gray(clkit_context *ctx, const op_problem *p)
{
    return clkit_rgb_to_gray(ctx, &p->t[0], &p->t[1]);
}

static void want_gray(const op_problem *p, const double *const *in, double *want)
{
    ref_rgb_to_gray(in[0], want, p->shape.rows, p->shape.cols);
}

static clkit_status call_swizzle(clkit_context *ctx, const op_problem *p)
{
    return clkit_swizzle2d(ctx, &p->t[0], &p->t[1], swizzle_group);
}

static void want_swizzle(const op_problem *p, const double *const *in, double *want)
{
    int64_t rows = p->shape.rows, cols = p->shape.cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t ni, nj;
            ref_swizzle2d_index(i, j, rows, cols, swizzle_group, &ni, &nj);
            want[ni * cols + nj] = in[0][i * cols + j];
        }
}

/* ---- shapes ---- */

/* Odd and power-of-two lengths: the tails and the vector paths of the kernels. */
static const op_shape stream_checks[] = {{1, 4099, 0, 0}, {1, 1 << 20, 0, 0}, {0, 0, 0, 0}};
static const op_shape copy_checks[] = {{1, 4099, 0, 0}, {1, 1 << 20, 0, 0}, {300, 257, 1, 0},
                                       {0, 0, 0, 0}};
static const op_shape gray_checks[] = {{37, 51, 0, 0}, {1066, 1600, 0, 0}, {0, 0, 0, 0}};
static const op_shape swizzle_checks[] = {{37, 19, 0, 0}, {256, 256, 0, 0}, {0, 0, 0, 0}};
/* Short rows, a row that fits on chip and one long enough for the online path on a GPU. */
static const op_shape softmax_checks[] = {{37, 1000, 0, 0}, {128, 4096, 0, 0},
                                          {4, 50000, 0, 0}, {0, 0, 0, 0}};

/* The vector tutorials' sizes, n = 2^12 .. 2^27; the targets are at 2^26. */
static int stream_shapes(int quick, op_shape *out)
{
    int n = 0;
    for (int e = 12; e <= (quick ? 20 : 27); e += quick ? 4 : 1)
        out[n++] = (op_shape){1, (int64_t)1 << e, 0, e == 26};
    return n;
}

/* Dense copies, then transposing ones (torch: x.t().contiguous()). */
static int copy_shapes(int quick, op_shape *out)
{
    static const int64_t sides[] = {1024, 4096, 8192};
    int n = stream_shapes(quick, out);
    for (size_t i = 0; i < (quick ? 1 : sizeof sides / sizeof *sides); i++)
        out[n++] = (op_shape){sides[i], sides[i], 1, 0};
    return n;
}

/* The softmax tutorial's sweep, M = 4096 and N = 128 i for i = 2 .. 100, plus the target
   N = 32768; quick: a few N over fewer rows. */
static int softmax_shapes(int quick, op_shape *out)
{
    int n = 0;
    if (quick) {
        for (int64_t i = 2; i <= 32; i *= 4) out[n++] = (op_shape){256, 128 * i, 0, 0};
        return n;
    }
    for (int64_t i = 2; i <= 100; i++) {
        int64_t cols = 128 * i;
        int target = cols == 256 || cols == 1024 || cols == 4096 || cols == 12672;
        out[n++] = (op_shape){4096, cols, 0, target};
    }
    out[n++] = (op_shape){4096, 32768, 0, 1};
    return n;
}

/* The practitioner's guide image, then 4K. */
static int gray_shapes(int quick, op_shape *out)
{
    out[0] = (op_shape){1066, 1600, 0, 1};
    out[1] = (op_shape){2160, 3840, 0, 0};
    return quick ? 1 : 2;
}

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
    p.shape = shape;
    return p;
}

int64_t op_numel(const op_problem *p, int slot)
{
    int64_t planes = slot < p->op->nin ? p->op->planes : 1;
    return planes * p->shape.rows * p->shape.cols;
}

uint64_t op_bytes(const op_problem *p)
{
    uint64_t n = 0;
    for (int k = 0; k <= p->op->nin; k++) n += (uint64_t)op_numel(p, k);
    return n * clkit_dtype_size(p->dtype);
}

void op_shape_text(const op_problem *p, char *buf, size_t n)
{
    const op_shape *s = &p->shape;
    if (p->op->ndim == 1 && !s->transposed)
        snprintf(buf, n, "%lld", (long long)s->cols);
    else
        snprintf(buf, n, "%lldx%lld%s", (long long)s->rows, (long long)s->cols,
                 s->transposed ? ".T" : "");
}

double op_plot_x(const op_problem *p)
{
    return p->op->x_is_cols ? (double)p->shape.cols : (double)p->shape.rows * (double)p->shape.cols;
}

/* Contiguous tensors over the buffers; a transposed source reads a (cols, rows) matrix. */
static void set_views(op_problem *p)
{
    const op_shape *s = &p->shape;
    int two_d = p->op->ndim == 2 || s->transposed;
    for (int k = 0; k <= p->op->nin; k++) {
        int64_t shape[3];
        int nd = 0;
        if (k < p->op->nin && p->op->planes > 1) shape[nd++] = p->op->planes;
        if (two_d) shape[nd++] = s->rows;
        shape[nd++] = s->cols;
        p->t[k] = clkit_tensor_contiguous(p->buf[k], p->dtype, nd, shape);
    }
    if (s->transposed) {
        p->t[0].strides[0] = 1;
        p->t[0].strides[1] = s->rows;
    }
}

clkit_status op_alloc(clkit_context *ctx, op_problem *p)
{
    /* 0x3c in every byte is a finite normal number in each dtype (f32 0.0115, f16 1.06). */
    static const cl_uchar pattern = 0x3c;
    cl_context c;
    cl_command_queue q;
    clkit_context_cl(ctx, &c, &q, NULL);
    for (int k = 0; k <= p->op->nin; k++) {
        size_t bytes = (size_t)op_numel(p, k) * clkit_dtype_size(p->dtype);
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

static void compare(const op_problem *p, const double *got, const double *want, int64_t n,
                    double *max_err, int *pass)
{
    /* u8: a rounding tie computed in float may land one step from the double reference. */
    double atol = p->dtype == CLKIT_U8 ? 1 : p->op->atol, rtol = ref_rtol(p->dtype);
    *max_err = 0;
    *pass = 1;
    for (int64_t i = 0; i < n; i++) {
        double e = ref_close(got[i], want[i], 0, 0) ? 0 : fabs(got[i] - want[i]);
        if (isnan(e)) e = INFINITY;
        if (e > *max_err) *max_err = e;
        if (!ref_close(got[i], want[i], atol, rtol)) *pass = 0;
    }
}

/* Host arrays of one verification: inputs, then the output read back, then the reference. */
typedef struct verify_data {
    double *v[4];
} verify_data;

static clkit_status verify_alloc(op_problem *p, verify_data *d)
{
    int nin = p->op->nin;
    for (int k = 0; k <= nin + 1; k++) {
        int64_t n = op_numel(p, k > nin ? nin : k);
        if (!(d->v[k] = malloc((size_t)n * sizeof(double))))
            return op_fail(CLKIT_ERR_OUT_OF_MEMORY, "host arrays for the reference");
        if (k < nin) {
            int u8 = p->dtype == CLKIT_U8;
            ref_fill_random(d->v[k], (size_t)n, p->dtype, u8 ? 0 : p->op->lo,
                            u8 ? 256 : p->op->hi, 1 + (uint64_t)k);
        }
    }
    return CLKIT_OK;
}

static clkit_status verify_upload(clkit_context *ctx, op_problem *p, const verify_data *d)
{
    for (int k = 0; k <= p->op->nin; k++) {
        /* The output starts as ref_upload's sentinel pattern, so unwritten elements show. */
        const double *vals = k < p->op->nin ? d->v[k] : NULL;
        p->buf[k] = ref_upload(ctx, p->dtype, (size_t)op_numel(p, k), vals);
        if (!p->buf[k]) return op_fail(CLKIT_ERR_OUT_OF_MEMORY, "ref_upload could not fill a buffer");
    }
    set_views(p);
    return CLKIT_OK;
}

clkit_status op_verify(clkit_context *ctx, op_problem *p, double *max_err, int *pass)
{
    verify_data d = {{NULL}};
    int nin = p->op->nin;
    int64_t n = op_numel(p, nin);
    clkit_status s = verify_alloc(p, &d);
    if (!s) s = verify_upload(ctx, p, &d);
    if (!s) s = op_call(ctx, p);
    if (!s && ref_download(ctx, p->buf[nin], p->dtype, (size_t)n, d.v[nin]))
        s = op_fail(CLKIT_ERR_OPENCL, "ref_download could not read the output");
    if (!s) {
        double *want = d.v[nin + 1];
        p->op->reference(p, (const double *const *)d.v, want);
        for (int64_t i = 0; i < n; i++) want[i] = store_as(p->dtype, want[i]);
        compare(p, d.v[nin], want, n, max_err, pass);
    }
    op_free(p);
    for (int k = 0; k < 4; k++) free(d.v[k]);
    return s;
}
