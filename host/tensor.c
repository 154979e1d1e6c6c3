/* Tensor descriptors: validation before anything is enqueued, and the normalised views the
   kernels index with. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dtype_names[] = {"f32", "f16", "bf16", "u8", "i32", "i64"};
static const size_t dtype_sizes[] = {4, 2, 2, 1, 4, 8};

static bool dtype_valid(clkit_dtype t)
{
    return (int)t >= 0 && (int)t < (int)(sizeof dtype_sizes / sizeof *dtype_sizes);
}

const char *clkit_dtype_name(clkit_dtype t)
{
    return dtype_valid(t) ? dtype_names[t] : "invalid";
}

size_t clkit_dtype_size(clkit_dtype t)
{
    return dtype_valid(t) ? dtype_sizes[t] : 0;
}

const char *clkit_dtype_macro(clkit_dtype t)
{
    static const char *macros[] = {"-D DTYPE_F32", "-D DTYPE_F16", "-D DTYPE_BF16",
                                   "-D DTYPE_U8", "-D DTYPE_I32", "-D DTYPE_I64"};
    return dtype_valid(t) ? macros[t] : "";
}

clkit_tensor clkit_tensor_contiguous(cl_mem buffer, clkit_dtype dtype, int ndim,
                                     const int64_t *shape)
{
    clkit_tensor t;
    memset(&t, 0, sizeof t);
    t.buffer = buffer;
    t.dtype = dtype;
    t.ndim = shape ? ndim : 0; /* no shape: 0 dims, which every op rejects */
    if (ndim < 1 || ndim > CLKIT_MAX_DIMS || !shape) return t;
    /* A stride past INT64_MAX saturates: validation then reports CLKIT_ERR_OVERFLOW instead of
       the product wrapping into a stride that looks legal. */
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = stride;
        if (__builtin_mul_overflow(stride, shape[i] > 0 ? shape[i] : 1, &stride)) stride = INT64_MAX;
    }
    return t;
}

/* Saturates at INT64_MAX so that callers holding an unvalidated view never overflow. */
int64_t clkit_numel(const clkit_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n)) return INT64_MAX;
    return n;
}

/* Smallest and largest element offsets the view reaches, relative to its first element. */
static clkit_status extent(clkit_context *ctx, const clkit_tensor *t, const char *name,
                           int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t span;
        if (__builtin_mul_overflow(t->strides[i], t->shape[i] - 1, &span) ||
            __builtin_add_overflow(span < 0 ? *lo : *hi, span, span < 0 ? lo : hi))
            return clkit_fail(ctx, CLKIT_ERR_OVERFLOW, "%s: stride %lld x extent %lld overflows",
                              name, (long long)t->strides[i], (long long)t->shape[i]);
    }
    return CLKIT_OK;
}

static clkit_status check_bounds(clkit_context *ctx, const clkit_tensor *t, const char *name)
{
    int64_t lo, hi;
    clkit_status s = extent(ctx, t, name, &lo, &hi);
    if (s) return s;
    size_t es = clkit_dtype_size(t->dtype), bufsize = 0;
    cl_int err = clGetMemObjectInfo(t->buffer, CL_MEM_SIZE, sizeof bufsize, &bufsize, NULL);
    if (err != CL_SUCCESS)
        return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "%s: buffer is not a valid cl_mem (%s)",
                          name, clkit_cl_error_name(err));
    /* elements lo_e..hi_e, bytes up to end_b */
    int64_t first = (int64_t)(t->offset / es), lo_e, hi_e, end_b;
    if (t->offset > (size_t)INT64_MAX || __builtin_add_overflow(first, lo, &lo_e) ||
        __builtin_add_overflow(first, hi, &hi_e) || __builtin_add_overflow(hi_e, 1, &end_b) ||
        __builtin_mul_overflow(end_b, (int64_t)es, &end_b))
        return clkit_fail(ctx, CLKIT_ERR_OVERFLOW, "%s: byte range overflows", name);
    if (lo_e < 0 || (uint64_t)end_b > bufsize)
        return clkit_fail(ctx, CLKIT_ERR_OUT_OF_BOUNDS,
                          "%s: view reaches elements %lld..%lld of a %zu-byte buffer of %s", name,
                          (long long)lo_e, (long long)hi_e, bufsize, clkit_dtype_name(t->dtype));
    return CLKIT_OK;
}

clkit_status clkit_check_tensor(clkit_context *ctx, const clkit_tensor *t, const char *name,
                                int min_ndim, int max_ndim, unsigned dtypes)
{
    if (!t) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "%s is NULL", name);
    if (!t->buffer) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "%s.buffer is NULL", name);
    if (t->ndim < min_ndim || t->ndim > max_ndim || t->ndim > CLKIT_MAX_DIMS)
        return clkit_fail(ctx, CLKIT_ERR_NDIM, "%s has %d dims; this op takes %d..%d", name,
                          t->ndim, min_ndim, max_ndim);
    if (!dtype_valid(t->dtype) || !(dtypes & CLKIT_DT(t->dtype)))
        return clkit_fail(ctx, CLKIT_ERR_DTYPE, "%s: dtype %s (%d) not supported here", name,
                          clkit_dtype_name(t->dtype), (int)t->dtype);
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0)
            return clkit_fail(ctx, CLKIT_ERR_SHAPE, "%s.shape[%d] = %lld is negative", name, i,
                              (long long)t->shape[i]);
        if (__builtin_mul_overflow(n, t->shape[i], &n) ||
            __builtin_mul_overflow(n, (int64_t)clkit_dtype_size(t->dtype), &(int64_t){0}))
            return clkit_fail(ctx, CLKIT_ERR_OVERFLOW, "%s: element count overflows", name);
    }
    if (t->offset % clkit_dtype_size(t->dtype))
        return clkit_fail(ctx, CLKIT_ERR_STRIDE, "%s: offset %zu is not a multiple of %zu bytes",
                          name, t->offset, clkit_dtype_size(t->dtype));
    return n == 0 ? CLKIT_OK : check_bounds(ctx, t, name);
}

clkit_status clkit_check_same_shape(clkit_context *ctx, const clkit_tensor *a, const char *an,
                                    const clkit_tensor *b, const char *bn)
{
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++) same = a->shape[i] == b->shape[i];
    if (same) return CLKIT_OK;
    char sa[96] = "", sb[96] = "";
    for (int i = 0; i < a->ndim; i++)
        snprintf(sa + strlen(sa), sizeof sa - strlen(sa), "%s%lld", i ? "," : "", (long long)a->shape[i]);
    for (int i = 0; i < b->ndim; i++)
        snprintf(sb + strlen(sb), sizeof sb - strlen(sb), "%s%lld", i ? "," : "", (long long)b->shape[i]);
    return clkit_fail(ctx, CLKIT_ERR_SHAPE, "%s (%s) and %s (%s) differ in shape", an, sa, bn, sb);
}

/* Sufficient test for "no two indices share an element": with dims sorted by |stride|, each
   stride must step past everything the smaller dims reach. */
clkit_status clkit_check_output(clkit_context *ctx, const clkit_tensor *out, const char *name)
{
    int64_t st[CLKIT_MAX_DIMS], sh[CLKIT_MAX_DIMS];
    int n = 0;
    if (clkit_numel(out) == 0) return CLKIT_OK; /* nothing written; its strides were never checked */
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] == 1) continue;
        int64_t s = out->strides[i] < 0 ? -out->strides[i] : out->strides[i];
        int j = n++;
        for (; j > 0 && st[j - 1] > s; j--) {
            st[j] = st[j - 1];
            sh[j] = sh[j - 1];
        }
        st[j] = s;
        sh[j] = out->shape[i];
    }
    int64_t reach = 0; /* largest offset the smaller dims reach */
    for (int i = 0; i < n; i++) {
        if (st[i] <= reach)
            return clkit_fail(ctx, CLKIT_ERR_STRIDE,
                              "%s: stride %lld makes elements alias (the output would be written "
                              "twice)", name, (long long)st[i]);
        reach += st[i] * (sh[i] - 1);
    }
    return CLKIT_OK;
}

/* The buffer a cl_mem's bytes belong to and where its own start there: a sub-buffer is a
   window on its parent, so views through two handles can still share bytes. */
static cl_mem root_of(cl_mem m, size_t *base)
{
    cl_mem parent = NULL;
    size_t off = 0;
    *base = 0;
    if (clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) != CL_SUCCESS ||
        !parent || clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof off, &off, NULL) != CL_SUCCESS)
        return m;
    *base = off;
    return parent; /* OpenCL makes sub-buffers of buffers only: one level */
}

/* The same elements in the same order, through any handles over the same bytes. */
static bool same_view(const clkit_tensor *a, size_t a_base, const clkit_tensor *b, size_t b_base)
{
    if (a_base + a->offset != b_base + b->offset || a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->strides[i] != b->strides[i]))
            return false;
    return true;
}

/* Byte range [lo, hi) a validated, non-empty view touches. */
static void byte_range(const clkit_tensor *t, int64_t *lo, int64_t *hi)
{
    int64_t es = (int64_t)clkit_dtype_size(t->dtype), a = 0, b = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t span = t->strides[i] * (t->shape[i] - 1);
        if (span < 0) a += span;
        else b += span;
    }
    *lo = (int64_t)t->offset + a * es;
    *hi = (int64_t)t->offset + (b + 1) * es;
}

clkit_status clkit_check_disjoint(clkit_context *ctx, const clkit_tensor *out, const char *on,
                                  const clkit_tensor *in, const char *in_name, bool allow_alias)
{
    if (clkit_numel(out) == 0 || clkit_numel(in) == 0) return CLKIT_OK;
    size_t obase, ibase;
    if (root_of(out->buffer, &obase) != root_of(in->buffer, &ibase)) return CLKIT_OK;
    if (allow_alias && same_view(out, obase, in, ibase)) return CLKIT_OK;
    int64_t olo, ohi, ilo, ihi;
    byte_range(out, &olo, &ohi);
    byte_range(in, &ilo, &ihi);
    olo += (int64_t)obase, ohi += (int64_t)obase, ilo += (int64_t)ibase, ihi += (int64_t)ibase;
    if (ohi <= ilo || ihi <= olo) return CLKIT_OK;
    return clkit_fail(ctx, CLKIT_ERR_OVERLAP,
                      "%s (bytes %lld..%lld) overlaps %s (bytes %lld..%lld) in the same buffer%s",
                      on, (long long)olo, (long long)ohi, in_name, (long long)ilo, (long long)ihi,
                      allow_alias ? "; only the exact same view is allowed in place" : "");
}

void clkit_views(int n, const clkit_tensor *const *ts, clkit_view *views, int *ndim)
{
    int64_t shape[CLKIT_MAX_DIMS], strides[8][CLKIT_MAX_DIMS];
    int d = 0;
    const clkit_tensor *t0 = ts[0];
    for (int i = 0; i < t0->ndim; i++) {
        if (t0->shape[i] == 1) continue;
        bool merge = d > 0;
        for (int k = 0; merge && k < n; k++)
            merge = strides[k][d - 1] == ts[k]->strides[i] * t0->shape[i];
        if (merge) {
            shape[d - 1] *= t0->shape[i];
            for (int k = 0; k < n; k++) strides[k][d - 1] = ts[k]->strides[i];
            continue;
        }
        shape[d] = t0->shape[i];
        for (int k = 0; k < n; k++) strides[k][d] = ts[k]->strides[i];
        d++;
    }
    if (d == 0) {
        shape[0] = 1;
        for (int k = 0; k < n; k++) strides[k][0] = 1;
        d = 1;
    }
    for (int k = 0; k < n; k++) {
        clkit_view *v = &views[k];
        for (int i = 0; i < CLKIT_MAX_DIMS; i++) {
            int src = i - (CLKIT_MAX_DIMS - d);
            v->shape.s[i] = src < 0 ? 1 : shape[src];
            v->strides.s[i] = src < 0 ? 0 : strides[k][src];
        }
        v->offset = (cl_long)(ts[k]->offset / clkit_dtype_size(ts[k]->dtype));
    }
    *ndim = d;
}

bool clkit_view_is_dense(const clkit_view *v, int ndim)
{
    return ndim == 1 && v->strides.s[CLKIT_MAX_DIMS - 1] == 1;
}

/* Released scratch stays in the context's pool: buffers created and freed in every call cost
   linear cross-entropy a measurable share of its time, the device idle while they were made.
   A request takes the smallest pooled buffer of at least its size and at most twice it
   (measurements: docs/linear-cross-entropy.md#measurements-behind-the-code). */
static cl_mem pool_take(clkit_context *ctx, size_t bytes)
{
    int best = -1;
    for (int i = 0; i < CLKIT_SCRATCH_POOL; i++) {
        size_t have = ctx->pool[i].bytes;
        if (ctx->pool[i].buf && have >= bytes && have / 2 <= bytes && (best < 0 || have < ctx->pool[best].bytes))
            best = i;
    }
    if (best < 0) return NULL;
    cl_mem buf = ctx->pool[best].buf;
    ctx->pool[best].buf = NULL, ctx->pool[best].bytes = 0;
    return buf;
}

void clkit_context_trim(clkit_context *ctx)
{
    if (!ctx) return;
    for (int i = 0; i < CLKIT_SCRATCH_POOL; i++) {
        if (ctx->pool[i].buf) clReleaseMemObject(ctx->pool[i].buf);
        ctx->pool[i].buf = NULL, ctx->pool[i].bytes = 0;
    }
}

clkit_status clkit_scratch_alloc(clkit_context *ctx, size_t bytes, cl_mem *buffer)
{
    cl_int err = CL_SUCCESS;
    size_t want = bytes ? bytes : 1;
    *buffer = NULL;
    if (want > ctx->props.max_alloc) /* drivers refuse it as an invalid size, not as memory */
        return clkit_fail(ctx, CLKIT_ERR_OUT_OF_MEMORY, "scratch of %zu bytes is past the device's "
                          "largest allocation (%llu bytes)", want, (unsigned long long)ctx->props.max_alloc);
    *buffer = pool_take(ctx, want);
    if (!*buffer) *buffer = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, want, NULL, &err);
    if (!*buffer) { /* the pool's buffers may be what the device lacks */
        clkit_context_trim(ctx);
        *buffer = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, want, NULL, &err);
    }
    if (!*buffer)
        return clkit_cl_fail(ctx, err, "clCreateBuffer (scratch)");
    ctx->scratch_now += bytes;
    if (ctx->scratch_now > ctx->scratch_peak) ctx->scratch_peak = ctx->scratch_now;
    return CLKIT_OK;
}

clkit_status clkit_tickets(clkit_context *ctx, size_t n, cl_mem *out)
{
    if (n > ctx->tickets_n) {
        size_t want = n < 1024 ? 1024 : n;
        cl_uint zero = 0;
        cl_int err;
        cl_mem buf = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, want * sizeof zero, NULL, &err);
        if (!buf) return clkit_cl_fail(ctx, err, "clCreateBuffer (split-K counters)");
        err = clEnqueueFillBuffer(ctx->queue, buf, &zero, sizeof zero, 0, want * sizeof zero, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            clReleaseMemObject(buf);
            return clkit_cl_fail(ctx, err, "clEnqueueFillBuffer (split-K counters)");
        }
        if (ctx->tickets) clReleaseMemObject(ctx->tickets); /* kept by the kernels that use it */
        ctx->tickets = buf, ctx->tickets_n = want;
    }
    *out = ctx->tickets;
    return CLKIT_OK;
}

bool clkit_tma_strides(const int64_t *strides, int n)
{
    for (int i = 0; i < n; i++)
        if ((uint64_t)strides[i] >= (1ull << 39)) return false;
    return true;
}

clkit_status clkit_tma_maps(clkit_context *ctx, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    if (!ctx->tma_slot) ctx->tma_slot = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, CLKIT_TMA_MAPS * 128, NULL, &err);
    *out = ctx->tma_slot;
    return ctx->tma_slot ? CLKIT_OK : clkit_cl_fail(ctx, err, "clCreateBuffer (TMA tensor maps)");
}

/* Into the pool's free entry, else in place of its smallest buffer if that is smaller. */
void clkit_scratch_release(clkit_context *ctx, cl_mem buffer, size_t bytes)
{
    if (!buffer) return;
    ctx->scratch_now -= bytes < ctx->scratch_now ? bytes : ctx->scratch_now;
    size_t have = 0;
    if (clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof have, &have, NULL) != CL_SUCCESS) have = 0;
    int slot = 0;
    for (int i = 1; i < CLKIT_SCRATCH_POOL; i++)
        if (ctx->pool[i].bytes < ctx->pool[slot].bytes) slot = i;
    if (have <= ctx->pool[slot].bytes) {
        clReleaseMemObject(buffer);
        return;
    }
    if (ctx->pool[slot].buf) clReleaseMemObject(ctx->pool[slot].buf);
    ctx->pool[slot].buf = buffer, ctx->pool[slot].bytes = have;
}

uint64_t clkit_scratch_peak(clkit_context *ctx, int reset)
{
    if (!ctx) return 0;
    uint64_t peak = ctx->scratch_peak;
    if (reset) ctx->scratch_peak = ctx->scratch_now;
    return peak;
}

clkit_status clkit_scratch_like(clkit_context *ctx, const clkit_tensor *t, clkit_tensor *out,
                                cl_mem *buffer, size_t *bytes)
{
    int64_t lo, hi;
    byte_range(t, &lo, &hi);
    *bytes = (size_t)(hi - lo);
    clkit_status s = clkit_scratch_alloc(ctx, *bytes, buffer);
    if (s) return s;
    *out = *t;
    out->buffer = *buffer;
    out->offset = t->offset - (size_t)lo;
    return CLKIT_OK;
}
