#define _XOPEN_SOURCE 700 /* nftw */
#include "tune.h"
#include "util.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
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

/* PoCL's worker threads call getenv() while they run kernels, and glibc's setenv() frees the
   environ array it replaces when a new name makes it grow: a suite that sets a new variable
   while a kernel still runs can crash PoCL. These keep every array and string they replace
   alive (and reachable, for LeakSanitizer), and change one pointer at a time. */
extern char **environ;

static struct {
    char **kept[64];   /* environ arrays this file made, newest last */
    size_t arrays, capacity;
    char **strings;    /* every "name=value" made here */
    size_t nstrings, string_capacity;
} env;

/* Not ck_assert: oclgrind_ops, which is no Check suite, uses these too. */
static void env_need(int ok, const char *what)
{
    if (ok) return;
    fprintf(stderr, "tu_setenv: %s\n", what);
    abort();
}

static size_t env_count(void)
{
    size_t n = 0;
    while (environ && environ[n]) n++;
    return n;
}

/* The index of name in environ, or -1. */
static long env_find(const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; environ && environ[i]; i++)
        if (!strncmp(environ[i], name, len) && environ[i][len] == '=') return (long)i;
    return -1;
}

/* Makes environ one of our arrays with room for one more name; the old array stays. */
static void env_reserve(void)
{
    size_t n = env_count();
    if (env.arrays && environ == env.kept[env.arrays - 1] && n + 1 < env.capacity) return;
    env_need(env.arrays < sizeof env.kept / sizeof env.kept[0], "too many environment arrays");
    size_t capacity = 2 * n + 64;
    char **grown = calloc(capacity, sizeof *grown);
    env_need(grown != NULL, "out of memory");
    if (n) memcpy(grown, environ, n * sizeof *grown);
    env.kept[env.arrays++] = grown;
    env.capacity = capacity;
    environ = grown;
}

static char *env_string(const char *name, const char *value)
{
    if (env.nstrings == env.string_capacity) {
        env.string_capacity = env.string_capacity ? 2 * env.string_capacity : 64;
        env.strings = realloc(env.strings, env.string_capacity * sizeof *env.strings);
        env_need(env.strings != NULL, "out of memory");
    }
    size_t size = strlen(name) + strlen(value) + 2;
    char *entry = malloc(size);
    env_need(entry != NULL, "out of memory");
    snprintf(entry, size, "%s=%s", name, value);
    return env.strings[env.nstrings++] = entry;
}

int tu_setenv(const char *name, const char *value)
{
    env_reserve();
    char *entry = env_string(name, value);
    long at = env_find(name);
    if (at >= 0) environ[at] = entry;
    else environ[env_count()] = entry; /* the slot after it is already NULL */
    return 0;
}

int tu_unsetenv(const char *name)
{
    env_reserve();
    for (long at = env_find(name); at >= 0; at = env_find(name))
        for (size_t i = (size_t)at; environ[i]; i++) environ[i] = environ[i + 1];
    return 0;
}
