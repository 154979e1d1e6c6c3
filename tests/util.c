#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <CL/cl_half.h>

clkit_context *tu_ctx(void)
{
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.profiling = 1;
    clkit_status s = clkit_context_create(&ctx, &opt);
    ck_assert_msg(s == CLKIT_OK, "no context: %s", clkit_status_string(s));
    return ctx;
}

static uint16_t bf16_bits(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static double bf16_value(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void store(clkit_dtype t, void *dst, size_t i, double v)
{
    switch (t) {
    case CLKIT_F32: ((float *)dst)[i] = (float)v; break;
    case CLKIT_F16: ((cl_half *)dst)[i] = cl_half_from_float((float)v, CL_HALF_RTE); break;
    case CLKIT_BF16: ((uint16_t *)dst)[i] = bf16_bits(v); break;
    case CLKIT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    case CLKIT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case CLKIT_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
    }
}

static double load(clkit_dtype t, const void *src, size_t i)
{
    switch (t) {
    case CLKIT_F32: return ((const float *)src)[i];
    case CLKIT_F16: return cl_half_to_float(((const cl_half *)src)[i]);
    case CLKIT_BF16: return bf16_value(((const uint16_t *)src)[i]);
    case CLKIT_U8: return ((const uint8_t *)src)[i];
    case CLKIT_I32: return ((const int32_t *)src)[i];
    case CLKIT_I64: return (double)((const int64_t *)src)[i];
    }
    return NAN;
}

double tu_quantize(clkit_dtype dtype, double v)
{
    unsigned char tmp[8];
    store(dtype, tmp, 0, v);
    return load(dtype, tmp, 0);
}

cl_mem tu_raw_buffer(clkit_context *ctx, size_t bytes)
{
    cl_context c;
    clkit_context_cl(ctx, &c, NULL, NULL);
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    ck_assert_msg(m != NULL, "clCreateBuffer(%zu) failed: %d", bytes, err);
    return m;
}

cl_mem tu_buffer(clkit_context *ctx, clkit_dtype dtype, size_t n, const double *vals)
{
    size_t es = clkit_dtype_size(dtype), bytes = (n ? n : 1) * es;
    void *host = malloc(bytes);
    ck_assert(host != NULL);
    for (size_t i = 0; i < (n ? n : 1); i++)
        store(dtype, host, i, vals && n ? vals[i] : (dtype == CLKIT_U8 ? 77 : -1234.5));
    cl_mem m = tu_raw_buffer(ctx, bytes);
    cl_command_queue q;
    clkit_context_cl(ctx, NULL, &q, NULL);
    cl_int err = clEnqueueWriteBuffer(q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    ck_assert_msg(err == CL_SUCCESS, "write failed: %d", err);
    free(host);
    return m;
}

void tu_read(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n, double *out)
{
    size_t bytes = n * clkit_dtype_size(dtype);
    void *host = malloc(bytes ? bytes : 1);
    ck_assert(host != NULL);
    cl_command_queue q;
    clkit_context_cl(ctx, NULL, &q, NULL);
    cl_int err = clEnqueueReadBuffer(q, buf, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    ck_assert_msg(err == CL_SUCCESS, "read failed: %d", err);
    for (size_t i = 0; i < n; i++) out[i] = load(dtype, host, i);
    free(host);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tu_fill_random(double *v, size_t n, clkit_dtype dtype, double lo, double hi, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix(&s) >> 11) * 0x1.0p-53;
        v[i] = tu_quantize(dtype, lo + (hi - lo) * u);
    }
}

double tu_rtol(clkit_dtype dtype)
{
    switch (dtype) {
    case CLKIT_F16: return 2e-3;
    case CLKIT_BF16: return 1.6e-2;
    default: return 2e-5;
    }
}

int tu_close(double got, double want, double atol, double rtol)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

void tu_assert_close(const double *got, const double *want, size_t n, double atol, double rtol,
                     const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!tu_close(got[i], want[i], atol, rtol))
            ck_abort_msg("%s: element %zu is %.9g, expected %.9g (atol %g, rtol %g)", what, i,
                         got[i], want[i], atol, rtol);
}

clkit_tensor tu_view(cl_mem buf, clkit_dtype dtype, int ndim, const int64_t *shape,
                     const int64_t *strides, size_t offset_elems)
{
    clkit_tensor t = clkit_tensor_contiguous(buf, dtype, ndim, shape);
    for (int i = 0; i < ndim; i++) t.strides[i] = strides[i];
    t.offset = offset_elems * clkit_dtype_size(dtype);
    return t;
}

TCase *tu_tcase(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 600);
    return tc;
}

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
