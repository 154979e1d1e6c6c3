#define _XOPEN_SOURCE 700 /* nftw */
#include "tune.h"
#include "util.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

clkit_context *tu_ctx(void)
{
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.profiling = 1;
    clkit_status s = clkit_context_create(&ctx, &opt);
    ck_assert_msg(s == CLKIT_OK, "no context: %s", clkit_status_string(s));
    return ctx;
}

int tu_fast_path(clkit_context *ctx, const char *family, unsigned path)
{
    unsigned paths = 0;
    clkit_status s = clkit_fast_paths(ctx, family, &paths);
    ck_assert_msg(s == CLKIT_OK, "clkit_fast_paths(%s): %s", family, clkit_last_error(ctx));
    return (paths & path) != 0;
}

cl_mem tu_buffer(clkit_context *ctx, clkit_dtype dtype, size_t n, const double *vals)
{
    cl_mem m = ref_upload(ctx, dtype, n, vals);
    ck_assert_msg(m != NULL, "cannot make a buffer of %zu %s", n, clkit_dtype_name(dtype));
    return m;
}

void tu_read(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n, double *out)
{
    ck_assert_msg(ref_download(ctx, buf, dtype, n, out) == 0, "read-back failed");
}

void tu_assert_close(const double *got, const double *want, size_t n, double atol, double rtol,
                     const char *what)
{
    int64_t i = ref_first_mismatch(got, want, n, atol, rtol);
    if (i >= 0)
        ck_abort_msg("%s: element %lld is %.9g, expected %.9g (atol %g, rtol %g)", what,
                     (long long)i, got[i], want[i], atol, rtol);
}

void tu_assert_unchanged(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n,
                         const double *before)
{
    ck_assert_int_eq(clkit_finish(ctx), CLKIT_OK);
    double *after = malloc(n * sizeof *after);
    ck_assert(after != NULL);
    tu_read(ctx, buf, dtype, n, after);
    int same = memcmp(before, after, n * sizeof *after) == 0;
    free(after);
    ck_assert_msg(same, "a rejected call wrote its output");
}

tu_guard tu_guard_begin(void)
{
    tu_guard g;
    g.ctx = tu_ctx();
    g.in = tu_buffer(g.ctx, CLKIT_F32, 64, NULL);
    g.out = tu_buffer(g.ctx, CLKIT_F32, 64, NULL);
    tu_read(g.ctx, g.out, CLKIT_F32, 64, g.before);
    return g;
}

void tu_guard_end(tu_guard *g)
{
    tu_assert_unchanged(g->ctx, g->out, CLKIT_F32, 64, g->before);
    clReleaseMemObject(g->in);
    clReleaseMemObject(g->out);
    clkit_context_release(g->ctx);
}

clkit_tensor tu_view(cl_mem buf, clkit_dtype dtype, int ndim, const int64_t *shape,
                     const int64_t *strides, size_t offset_elems)
{
    clkit_tensor t = clkit_tensor_contiguous(buf, dtype, ndim, shape);
    for (int i = 0; i < ndim; i++) t.strides[i] = strides[i];
    t.offset = offset_elems * clkit_dtype_size(dtype);
    return t;
}

FILE *tu_create_file(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (char *p = strchr(path + strlen(dir) + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        ck_assert_msg(mkdir(path, 0755) == 0 || errno == EEXIST, "cannot create %s", path);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    return f;
}

void tu_write_text(const char *dir, const char *name, const char *text)
{
    FILE *f = tu_create_file(dir, name);
    fputs(text, f);
    fclose(f);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

void tu_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

clkit_tune_key tu_matmul_key(const char *layout, int64_t m, int64_t n, int64_t k)
{
    clkit_tune_key key;
    memset(&key, 0, sizeof key);
    snprintf(key.op, sizeof key.op, "matmul");
    snprintf(key.dtype, sizeof key.dtype, "f32.f32.f32");
    snprintf(key.layout, sizeof key.layout, "%s", layout);
    key.shape[0] = m, key.shape[1] = n, key.shape[2] = k, key.shape[3] = 1;
    key.nshape = 4;
    return key;
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

#if defined(__SANITIZE_ADDRESS__)
#define TU_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_LSAN 1
#endif
#endif
#ifdef TU_LSAN
#include <sanitizer/lsan_interface.h>
void tu_leaks_off(void) { __lsan_disable(); }
void tu_leaks_on(void) { __lsan_enable(); }
#else
void tu_leaks_off(void) {}
void tu_leaks_on(void) {}
#endif
