#include "ref.h"

#include <math.h>
#include <stdlib.h>

static void store(clkit_dtype t, void *dst, size_t i, double v)
{
    switch (t) {
    case CLKIT_F32: ((float *)dst)[i] = (float)v; break;
    case CLKIT_F16: ((uint16_t *)dst)[i] = clkit_f32_to_f16((float)v); break;
    case CLKIT_BF16: ((uint16_t *)dst)[i] = clkit_f32_to_bf16((float)v); break;
    case CLKIT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    case CLKIT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case CLKIT_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
    }
}

static double load(clkit_dtype t, const void *src, size_t i)
{
    switch (t) {
    case CLKIT_F32: return ((const float *)src)[i];
    case CLKIT_F16: return clkit_f16_to_f32(((const uint16_t *)src)[i]);
    case CLKIT_BF16: return clkit_bf16_to_f32(((const uint16_t *)src)[i]);
    case CLKIT_U8: return ((const uint8_t *)src)[i];
    case CLKIT_I32: return ((const int32_t *)src)[i];
    case CLKIT_I64: return (double)((const int64_t *)src)[i];
    }
    return NAN;
}

double ref_quantize(clkit_dtype dtype, double v)
{
    unsigned char tmp[8];
    store(dtype, tmp, 0, v);
    return load(dtype, tmp, 0);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ref_fill_random(double *v, size_t n, clkit_dtype dtype, double lo, double hi, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(splitmix(&s) >> 11) * 0x1.0p-53;
        v[i] = ref_quantize(dtype, lo + (hi - lo) * u);
    }
}

double ref_rtol(clkit_dtype dtype)
{
    switch (dtype) {
    case CLKIT_F16: return 2e-3;
    case CLKIT_BF16: return 1.6e-2;
    default: return 2e-5;
    }
}

int ref_close(double got, double want, double atol, double rtol)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

int64_t ref_first_mismatch(const double *got, const double *want, size_t n, double atol,
                           double rtol)
{
    for (size_t i = 0; i < n; i++)
        if (!ref_close(got[i], want[i], atol, rtol)) return (int64_t)i;
    return -1;
}

cl_mem ref_upload(clkit_context *ctx, clkit_dtype dtype, size_t n, const double *vals)
{
    size_t count = n ? n : 1, bytes = count * clkit_dtype_size(dtype);
    void *host = malloc(bytes);
    if (!host) return NULL;
    for (size_t i = 0; i < count; i++)
        store(dtype, host, i, vals && n ? vals[i] : (dtype == CLKIT_U8 ? 77 : -1234.5));
    cl_context c;
    cl_command_queue q;
    clkit_context_cl(ctx, &c, &q, NULL);
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (m && clEnqueueWriteBuffer(q, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL) != CL_SUCCESS) {
        clReleaseMemObject(m);
        m = NULL;
    }
    free(host);
    return m;
}

int ref_download(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n, double *out)
{
    size_t bytes = n * clkit_dtype_size(dtype);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return -1;
    cl_command_queue q;
    clkit_context_cl(ctx, NULL, &q, NULL);
    int rc = clEnqueueReadBuffer(q, buf, CL_TRUE, 0, bytes, host, 0, NULL, NULL) == CL_SUCCESS ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < n; i++) out[i] = load(dtype, host, i);
    free(host);
    return rc;
}
