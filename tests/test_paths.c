/* Vendor fast paths (host/paths.c through clkit_fast_paths): what each op family may take,
   the environment switches, a forced build failure of one family's fast path, which leaves
   every other family on its paths and still gives right answers, and the known-answer tests
   (host/selftest.c) with their kept verdicts. On a device without fast paths (PoCL) the
   families report none and the same calls must still be right. */
#define _GNU_SOURCE
#include "internal.h" /* the known-answer tests and verdicts: this suite links the library's objects */
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *families[] = {"matmul", "attention", "cross_entropy", "softmax", "layernorm"};
#define NFAMILIES (sizeof families / sizeof *families)
#define TENSOR_CORES (CLKIT_FAST_PATH_NV_MMA | CLKIT_FAST_PATH_NV_WGMMA | CLKIT_FAST_PATH_NV_TMA)
/* The paths each family's kernels have, as include/clkit.h lists them. */
static const unsigned family_uses[NFAMILIES] = {TENSOR_CORES, TENSOR_CORES, TENSOR_CORES,
                                                CLKIT_FAST_PATH_NV_SHUFFLE, CLKIT_FAST_PATH_NV_SHUFFLE};

static unsigned paths_of(clkit_context *ctx, const char *family)
{
    unsigned p = 0;
    TU_CHECK(clkit_fast_paths(ctx, family, &p));
    return p;
}

static int switched_on(const char *env)
{
    const char *v = getenv(env);
    return !v || strcmp(v, "0") != 0;
}

/* The paths the README promises for this device and the caller's switches: PTX shuffles on
   any NVIDIA device, mma.sync from sm_80, wgmma and the TMA on sm_90, each nested in the one
   before and each off where its switch is 0. */
static unsigned device_paths(const struct clkit_device_props *p)
{
    int mma = p->nv_cc_major >= 8 && switched_on("CLKIT_TENSOR_CORES");
    int wgmma = mma && p->nv_cc_major == 9 && p->nv_cc_minor == 0 && switched_on("CLKIT_WGMMA");
    int tma = wgmma && switched_on("CLKIT_NV_TMA");
    return (p->nv_cc_major ? CLKIT_FAST_PATH_NV_SHUFFLE : 0u) | (mma ? CLKIT_FAST_PATH_NV_MMA : 0u) |
           (wgmma ? CLKIT_FAST_PATH_NV_WGMMA : 0u) | (tma ? CLKIT_FAST_PATH_NV_TMA : 0u);
}

START_TEST(queries)
{
    clkit_context *ctx = tu_ctx();
    struct clkit_device_props props;
    TU_CHECK(clkit_device_props(ctx, &props));
    for (size_t f = 0; f < NFAMILIES; f++)
        ck_assert_uint_eq(paths_of(ctx, families[f]), device_paths(&props) & family_uses[f]);
    unsigned p = 7;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_fast_paths(ctx, "no-such-op", &p));
    ck_assert_uint_eq(p, 7);
    /* Each failure says what was wrong: the unknown op's message is not left behind. */
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_fast_paths(ctx, NULL, &p));
    ck_assert_msg(strstr(clkit_last_error(ctx), "op is NULL"), "%s", clkit_last_error(ctx));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_fast_paths(ctx, "matmul", NULL));
    ck_assert_msg(strstr(clkit_last_error(ctx), "paths is NULL"), "%s", clkit_last_error(ctx));
    ck_assert_int_eq(clkit_fast_paths(NULL, "matmul", &p), CLKIT_ERR_NULL_ARGUMENT);
    clkit_context_release(ctx);
}
END_TEST

/* The paths every family has on ctx now. */
static void paths_now(clkit_context *ctx, unsigned *paths)
{
    for (size_t f = 0; f < NFAMILIES; f++) paths[f] = paths_of(ctx, families[f]);
}

/* Each switch turns off its path and the paths nested in it, in every family. */
START_TEST(switches)
{
    static const struct {
        const char *env;
        unsigned off;
    } cases[] = {
        {"CLKIT_TENSOR_CORES", CLKIT_FAST_PATH_NV_MMA | CLKIT_FAST_PATH_NV_WGMMA | CLKIT_FAST_PATH_NV_TMA},
        {"CLKIT_WGMMA", CLKIT_FAST_PATH_NV_WGMMA | CLKIT_FAST_PATH_NV_TMA},
        {"CLKIT_NV_TMA", CLKIT_FAST_PATH_NV_TMA},
    };
    clkit_context *ctx = tu_ctx();
    unsigned all[NFAMILIES];
    paths_now(ctx, all);
    clkit_context_release(ctx);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *was = getenv(cases[i].env); /* the caller's own switch stays as it was */
        char *saved = was ? strdup(was) : NULL;
        tu_setenv(cases[i].env, "0");
        ctx = tu_ctx();
        for (size_t f = 0; f < NFAMILIES; f++)
            ck_assert_msg(paths_of(ctx, families[f]) == (all[f] & ~cases[i].off), "%s=0: %s has paths %#x",
                          cases[i].env, families[f], paths_of(ctx, families[f]));
        clkit_context_release(ctx);
        if (saved) tu_setenv(cases[i].env, saved);
        else tu_unsetenv(cases[i].env);
        free(saved);
    }
}
END_TEST

/* ---- a forced build failure ---- */

typedef struct clkit_embedded_source {
    const char *name;
    const char *text;
} clkit_embedded_source;
extern const clkit_embedded_source clkit_embedded_sources[];

/* Put at the top of a source: an error in exactly the builds that take one fast path. */
static const struct {
    const char *file, *guard;
} breaks[] = {
    {"nv/attention_mma.cl", "defined(WARPS)"},                              /* tensor-core attention */
    {"softmax.cl", "defined(CLKIT_NV_SM) && !defined(SOFTMAX_PORTABLE)"},   /* softmax's shuffles */
    {"nv/matmul_mma.cl", "defined(TMA)"},                                   /* matmul's TMA loads */
};

static void write_broken_sources(const char *dir)
{
    for (const clkit_embedded_source *s = clkit_embedded_sources; s->name; s++) {
        FILE *f = tu_create_file(dir, s->name);
        for (size_t i = 0; i < sizeof breaks / sizeof *breaks; i++)
            if (!strcmp(s->name, breaks[i].file))
                fprintf(f, "#if %s\n#error \"forced: this fast path does not build\"\n#endif\n", breaks[i].guard);
        fputs(s->text, f);
        ck_assert_int_eq(fclose(f), 0);
    }
}

static cl_mem random_buffer(clkit_context *ctx, clkit_dtype dt, size_t n, double *host, uint64_t seed)
{
    ref_fill_random(host, n, dt, -1, 1, seed);
    return tu_buffer(ctx, dt, n, host);
}

static void check_attention(clkit_context *ctx)
{
    enum { B = 1, H = 2, L = 64, D = 64, N = B * H * L * D };
    double *q = malloc(3 * N * sizeof *q), *k = q + N, *v = k + N, o[N], want[N];
    cl_mem bq = random_buffer(ctx, CLKIT_F16, N, q, 1), bk = random_buffer(ctx, CLKIT_F16, N, k, 2);
    cl_mem bv = random_buffer(ctx, CLKIT_F16, N, v, 3), bo = tu_buffer(ctx, CLKIT_F16, N, NULL);
    int64_t shape[4] = {B, H, L, D};
    clkit_tensor tq = clkit_tensor_contiguous(bq, CLKIT_F16, 4, shape), tk = clkit_tensor_contiguous(bk, CLKIT_F16, 4, shape);
    clkit_tensor tv = clkit_tensor_contiguous(bv, CLKIT_F16, 4, shape), to = clkit_tensor_contiguous(bo, CLKIT_F16, 4, shape);
    clkit_attention_options opt = {1, 0};
    TU_CHECK(clkit_attention_forward(ctx, &tq, &tk, &tv, &opt, &to, NULL));
    tu_read(ctx, bo, CLKIT_F16, N, o);
    ref_attention_dims dims = {B, H, H, L, L, D, 1, 1.0 / sqrt((double)D)};
    ref_attention_forward(&dims, q, k, v, want, NULL);
    tu_assert_close(o, want, N, 4e-3, 4e-3, "attention f16 after its tensor-core build failed");
    clReleaseMemObject(bq), clReleaseMemObject(bk), clReleaseMemObject(bv), clReleaseMemObject(bo);
    free(q);
}

static void check_softmax(clkit_context *ctx)
{
    enum { M = 64, NC = 300, N = M * NC };
    double *x = malloc(2 * N * sizeof *x), *got = x + N, want[N];
    cl_mem bx = random_buffer(ctx, CLKIT_F32, N, x, 4), by = tu_buffer(ctx, CLKIT_F32, N, NULL);
    int64_t shape[2] = {M, NC};
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 2, shape), ty = clkit_tensor_contiguous(by, CLKIT_F32, 2, shape);
    TU_CHECK(clkit_softmax(ctx, &tx, &ty));
    tu_read(ctx, by, CLKIT_F32, N, got);
    ref_softmax(x, want, M, NC);
    tu_assert_close(got, want, N, 1e-7, 1e-5, "softmax after its shuffle build failed");
    clReleaseMemObject(bx), clReleaseMemObject(by);
    free(x);
}

/* f16 matmul, on a wgmma tile with TMA loads where the device has them. */
static void check_matmul(clkit_context *ctx, int tma)
{
    enum { S = 256, N = S * S };
    double *a = malloc(4 * N * sizeof *a), *b = a + N, *got = b + N, *want = got + N;
    cl_mem ba = random_buffer(ctx, CLKIT_F16, N, a, 5), bb = random_buffer(ctx, CLKIT_F16, N, b, 6);
    cl_mem bc = tu_buffer(ctx, CLKIT_F32, N, NULL);
    int64_t shape[2] = {S, S};
    clkit_tensor ta = clkit_tensor_contiguous(ba, CLKIT_F16, 2, shape), tb = clkit_tensor_contiguous(bb, CLKIT_F16, 2, shape);
    clkit_tensor tc = clkit_tensor_contiguous(bc, CLKIT_F32, 2, shape);
    clkit_matmul_options o = clkit_matmul_defaults();
    if (tma) o.config = "KERNEL=4,WGMMA=1,BLOCK_M=128,BLOCK_N=128,BLOCK_K=64,WARPS_M=8,WARPS_N=1,STAGES=4,GROUP_M=8";
    TU_CHECK(clkit_matmul(ctx, &ta, &tb, &tc, &o));
    tu_read(ctx, bc, CLKIT_F32, N, got);
    ref_matrix ra = {a, {0, S, 1}}, rb = {b, {0, S, 1}}, rc = {want, {0, S, 1}};
    ref_matmul(&ra, &rb, &rc, 1, S, S, S, 1, 0, 0, 0, NULL);
    tu_assert_close(got, want, N, 1e-4, 1e-5, "matmul f16 after its TMA build failed");
    clReleaseMemObject(ba), clReleaseMemObject(bb), clReleaseMemObject(bc);
    free(a);
}

START_TEST(one_family_fails_alone)
{
    char kdir[] = "/tmp/clkit-paths-XXXXXX", cdir[] = "/tmp/clkit-pcache-XXXXXX";
    ck_assert(mkdtemp(kdir) != NULL && mkdtemp(cdir) != NULL);
    write_broken_sources(kdir);
    tu_setenv("CLKIT_KERNEL_DIR", kdir);
    tu_setenv("CLKIT_CACHE_DIR", cdir);
    clkit_context *ctx = tu_ctx();
    unsigned all[NFAMILIES];
    paths_now(ctx, all);
    check_attention(ctx);
    check_softmax(ctx);
    check_matmul(ctx, (all[0] & CLKIT_FAST_PATH_NV_TMA) != 0);
    /* What each family (in families[] order) loses: matmul its TMA, attention its tensor
       cores, softmax its shuffles; cross-entropy and layer norm nothing. */
    const unsigned lost[NFAMILIES] = {CLKIT_FAST_PATH_NV_TMA, TENSOR_CORES, 0, CLKIT_FAST_PATH_NV_SHUFFLE, 0};
    for (size_t f = 0; f < NFAMILIES; f++)
        ck_assert_msg(paths_of(ctx, families[f]) == (all[f] & ~lost[f]), "%s: paths %#x, expected %#x",
                      families[f], paths_of(ctx, families[f]), all[f] & ~lost[f]);
    /* The paths stay off for the failing families: the next calls run (and are right) too. */
    check_attention(ctx);
    check_softmax(ctx);
    clkit_context_release(ctx);
    tu_unsetenv("CLKIT_KERNEL_DIR");
    tu_remove_tree(kdir);
    tu_remove_tree(cdir);
}
END_TEST

/* The highest path a family may take (bits of clkit_fast_paths), CLKIT_PATH_NONE for none. */
static clkit_path top_path(unsigned bits)
{
    for (int i = CLKIT_PATH_COUNT - 1; i >= 0; i--)
        if (bits & (1u << i)) return (clkit_path)i;
    return CLKIT_PATH_NONE;
}

/* Every family's known-answer problem gets its answer here, on the paths the device gives it
   (on PoCL the portable kernels: the references and comparisons are what is tested), and the
   tests leave every path on. */
START_TEST(known_answers)
{
    clkit_context *ctx = tu_ctx();
    unsigned before[NFAMILIES];
    for (size_t f = 0; f < NFAMILIES; f++) {
        before[f] = paths_of(ctx, families[f]);
        ck_assert_msg(clkit_selftest_run(ctx, top_path(before[f]), (clkit_family)f),
                      "%s: its known-answer test failed: %s", families[f], clkit_last_error(ctx));
    }
    for (size_t f = 0; f < NFAMILIES; f++) ck_assert_uint_eq(paths_of(ctx, families[f]), before[f]);
    clkit_context_release(ctx);
}
END_TEST

/* Verdicts are kept in the binary cache; a kept failure turns the path off for its family at
   the path's first use, and for no other family. */
START_TEST(kept_verdicts)
{
    char cdir[] = "/tmp/clkit-verdict-XXXXXX";
    ck_assert(mkdtemp(cdir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", cdir);
    clkit_context *ctx = tu_ctx();
    char name[96];
    clkit_path_test_name(CLKIT_PATH_NV_MMA, CLKIT_FAMILY_ATTENTION, name, sizeof name);
    ck_assert_int_eq(clkit_cache_verdict(ctx, name), -1);
    clkit_cache_set_verdict(ctx, name, true);
    ck_assert_int_eq(clkit_cache_verdict(ctx, name), 1);
    clkit_cache_set_verdict(ctx, name, false);
    ck_assert_int_eq(clkit_cache_verdict(ctx, name), 0);
    clkit_context_release(ctx);
    ctx = tu_ctx();
    unsigned all[NFAMILIES];
    paths_now(ctx, all);
    check_attention(ctx);
    ck_assert_uint_eq(paths_of(ctx, "attention"), all[1] & ~TENSOR_CORES);
    ck_assert_uint_eq(paths_of(ctx, "matmul"), all[0]);
    clkit_context_release(ctx);
    tu_remove_tree(cdir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("paths");
    TCase *tc = tu_tcase("paths");
    tcase_add_test(tc, queries);
    tcase_add_test(tc, switches);
    tcase_add_test(tc, one_family_fails_alone);
    tcase_add_test(tc, known_answers);
    tcase_add_test(tc, kept_verdicts);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
