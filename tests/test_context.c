/* Contexts: device choice, the fast-path switches, adopting a host queue, properties, status
   strings, kernel source override, build errors and profiling. */
#define _GNU_SOURCE
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

START_TEST(status_strings)
{
    for (int s = 0; s < CLKIT_STATUS_COUNT; s++) {
        const char *a = clkit_status_string((clkit_status)s);
        ck_assert(a && a[0]);
        for (int t = 0; t < s; t++) ck_assert_str_ne(a, clkit_status_string((clkit_status)t));
    }
    ck_assert_str_eq(clkit_status_string((clkit_status)-1), "unknown status");
    ck_assert_str_eq(clkit_status_string(CLKIT_STATUS_COUNT), "unknown status");
    ck_assert_int_eq(CLKIT_OK, 0);
}
END_TEST

START_TEST(null_arguments)
{
    ck_assert_int_eq(clkit_context_create(NULL, NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(clkit_finish(NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(clkit_device_props(NULL, NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(clkit_context_cl(NULL, NULL, NULL, NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_int_eq(clkit_profile_begin(NULL), CLKIT_ERR_NULL_ARGUMENT);
    clkit_context *ctx = (clkit_context *)1;
    ck_assert_int_eq(clkit_context_from_queue(&ctx, NULL), CLKIT_ERR_NULL_ARGUMENT);
    ck_assert_ptr_null(ctx);
    clkit_context_release(NULL);
    clkit_context_trim(NULL);
    ck_assert_str_eq(clkit_last_error(NULL), "no context");
}
END_TEST

START_TEST(device_choice)
{
    clkit_context *ctx = (clkit_context *)1;
    clkit_options opt = {0};
    opt.device = "no-such-device-anywhere";
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_ERR_NO_DEVICE);
    ck_assert_ptr_null(ctx);
    opt.device = "999";
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_ERR_NO_DEVICE);
    opt.device = "0";
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_OK);
    struct clkit_device_props p;
    ck_assert_int_eq(clkit_device_props(ctx, &p), CLKIT_OK);
    ck_assert(p.name[0] && p.vendor[0] && p.platform[0]);
    ck_assert(p.compute_units >= 1 && p.max_work_group >= 1 && p.warp >= 1);
    ck_assert(p.local_mem > 0 && p.global_mem > 0 && p.max_alloc > 0);
    ck_assert(p.opencl_c_major >= 1);
    clkit_context_release(ctx);
}
END_TEST

/* The NVIDIA fast paths nest (the TMA needs wgmma, wgmma the tensor cores, those sm_80), and
   each switch turns off what it names and what needs it. Elsewhere all of them stay 0. */
static struct clkit_device_props props_with(const char *var, const char *value)
{
    if (var) setenv(var, value, 1);
    clkit_context *ctx = tu_ctx();
    struct clkit_device_props p;
    TU_CHECK(clkit_device_props(ctx, &p));
    clkit_context_release(ctx);
    if (var) unsetenv(var);
    return p;
}

START_TEST(fast_path_switches)
{
    struct clkit_device_props p = props_with(NULL, NULL);
    ck_assert(!p.tma || p.wgmma);
    ck_assert(!p.wgmma || (p.tensor_cores && p.nv_cc_major == 9));
    ck_assert(!p.tensor_cores || p.nv_cc_major >= 8);
    struct clkit_device_props no_tma = props_with("CLKIT_NV_TMA", "0");
    ck_assert_int_eq(no_tma.tma, 0);
    ck_assert_int_eq(no_tma.wgmma, p.wgmma);
    struct clkit_device_props no_wgmma = props_with("CLKIT_WGMMA", "0");
    ck_assert(!no_wgmma.wgmma && !no_wgmma.tma);
    ck_assert_int_eq(no_wgmma.tensor_cores, p.tensor_cores);
    struct clkit_device_props portable = props_with("CLKIT_TENSOR_CORES", "0");
    ck_assert(!portable.tensor_cores && !portable.wgmma && !portable.tma);
}
END_TEST

START_TEST(adopted_queue)
{
    clkit_context *own = tu_ctx(), *ctx;
    cl_command_queue q;
    cl_context c;
    cl_device_id d;
    ck_assert_int_eq(clkit_context_cl(own, &c, &q, &d), CLKIT_OK);
    ck_assert_int_eq(clkit_context_from_queue(&ctx, q), CLKIT_OK);
    cl_command_queue q2;
    clkit_context_cl(ctx, NULL, &q2, NULL);
    ck_assert_ptr_eq(q, q2);
    clkit_context_release(own); /* the adopted context keeps its own references */
    double x[100], got[100];
    tu_fill_random(x, 100, CLKIT_F32, -1, 1, 3);
    cl_mem b = tu_buffer(ctx, CLKIT_F32, 100, x);
    int64_t shape[1] = {100};
    clkit_tensor t = clkit_tensor_contiguous(b, CLKIT_F32, 1, shape);
    TU_CHECK(clkit_add(ctx, &t, &t, &t));
    tu_read(ctx, b, CLKIT_F32, 100, got);
    for (int i = 0; i < 100; i++) ck_assert(got[i] == 2 * x[i]);
    double ms;
    TU_CHECK(clkit_profile_begin(ctx));
    TU_CHECK(clkit_add(ctx, &t, &t, &t));
    TU_CHECK(clkit_profile_end(ctx, &ms));
    ck_assert(ms > 0);
    clReleaseMemObject(b);
    clkit_context_release(ctx);
}
END_TEST

START_TEST(profiling_needs_a_profiling_queue)
{
    clkit_context *ctx;
    clkit_options opt = {0};
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_OK);
    TU_EXPECT(CLKIT_ERR_UNSUPPORTED, clkit_profile_begin(ctx));
    double ms;
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_profile_end(ctx, &ms));
    clkit_context_release(ctx);
}
END_TEST

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* CLKIT_KERNEL_DIR wins over the embedded sources; a source that does not compile surfaces
   as CLKIT_ERR_BUILD with the compiler's log, and the next context still works. */
START_TEST(kernel_dir_override)
{
    char dir[] = "/tmp/clkit-kdir-XXXXXX", path[256];
    ck_assert(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/add.cl", dir);
    write_text(path, "#include \"common.h\"\n"
                     "__kernel void add_dense(__global const elem_t *x, long xo, __global const elem_t *y,"
                     " long yo, __global elem_t *o, long oo, long n) {\n"
                     "  for (long i = get_global_id(0); i < n; i += get_global_size(0))"
                     " STORE(o + oo, i, LOAD(x + xo, i) - LOAD(y + yo, i)); }\n");
    setenv("CLKIT_KERNEL_DIR", dir, 1);
    setenv("CLKIT_CACHE_DIR", "", 1);
    clkit_context *ctx = tu_ctx();
    double x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, y[10] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, got[10];
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, 10, x), by = tu_buffer(ctx, CLKIT_F32, 10, y);
    int64_t shape[1] = {10};
    clkit_tensor tx = clkit_tensor_contiguous(bx, CLKIT_F32, 1, shape), ty = clkit_tensor_contiguous(by, CLKIT_F32, 1, shape);
    TU_CHECK(clkit_add(ctx, &tx, &ty, &tx));
    tu_read(ctx, bx, CLKIT_F32, 10, got);
    for (int i = 0; i < 10; i++) ck_assert(got[i] == x[i] - 1);
    clReleaseMemObject(bx);
    clReleaseMemObject(by);
    clkit_context_release(ctx);

    write_text(path, "__kernel void add_dense(__global float *x) { this is not C; }\n");
    ctx = tu_ctx();
    bx = tu_buffer(ctx, CLKIT_F32, 10, x);
    tx.buffer = bx;
    TU_EXPECT(CLKIT_ERR_BUILD, clkit_add(ctx, &tx, &tx, &tx));
    ck_assert_msg(strstr(clkit_last_error(ctx), "add.cl") != NULL, "%s", clkit_last_error(ctx));
    clReleaseMemObject(bx);
    clkit_context_release(ctx);
    unlink(path);
    rmdir(dir);
    unsetenv("CLKIT_KERNEL_DIR");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tu_tcase("context");
    tcase_add_test(tc, status_strings);
    tcase_add_test(tc, null_arguments);
    tcase_add_test(tc, device_choice);
    tcase_add_test(tc, fast_path_switches);
    tcase_add_test(tc, adopted_queue);
    tcase_add_test(tc, profiling_needs_a_profiling_queue);
    tcase_add_test(tc, kernel_dir_override);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
