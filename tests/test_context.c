/* Contexts: device choice, the fast-path switches, adopting a host queue, properties, status
   strings, kernel source override, build errors and profiling. */
#define _GNU_SOURCE
#include "util.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
    ck_assert_str_eq(clkit_version(), CLKIT_VERSION_STRING);
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
    tu_setenv("CLKIT_KERNEL_DIR", dir);
    tu_setenv("CLKIT_CACHE_DIR", "");
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
    tu_unsetenv("CLKIT_KERNEL_DIR");
}
END_TEST

/* Shapes whose element count or strides pass 2^63: clkit_tensor_contiguous saturates instead
   of overflowing, and the op reports CLKIT_ERR_OVERFLOW without touching the output. */
START_TEST(huge_shapes_overflow)
{
    tu_guard g = tu_guard_begin();
    clkit_context *ctx = g.ctx;
    static const int64_t shapes[][3] = {
        {INT64_C(1) << 62, 4, 1}, {4, INT64_C(1) << 62, 4}, {INT64_MAX, 2, 2}, {3, INT64_MAX / 2, 3},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        clkit_tensor x = clkit_tensor_contiguous(g.in, CLKIT_F32, 3, shapes[i]);
        clkit_tensor y = clkit_tensor_contiguous(g.out, CLKIT_F32, 3, shapes[i]);
        for (int d = 0; d < 3; d++) ck_assert(x.strides[d] >= 1);
        TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_add(ctx, &x, &x, &y));
        TU_EXPECT(CLKIT_ERR_OVERFLOW, clkit_copy(ctx, &x, &y));
    }
    tu_guard_end(&g);
}
END_TEST

/* ---- every example value the documents give ---- */

/* Whether any device's "platform platform-vendor device vendor type" contains want. */
static int some_device_matches(const char *want)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS) return 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
        char pn[128] = "", pv[128] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pn, pn, NULL);
        clGetPlatformInfo(plats[p], CL_PLATFORM_VENDOR, sizeof pv, pv, NULL);
        for (cl_uint d = 0; d < nd && d < 16; d++) {
            char dn[128] = "", dv[128] = "", label[600];
            cl_device_type t = 0;
            clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof dn, dn, NULL);
            clGetDeviceInfo(devs[d], CL_DEVICE_VENDOR, sizeof dv, dv, NULL);
            clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
            snprintf(label, sizeof label, "%s %s %s %s %s", pn, pv, dn, dv,
                     (t & CL_DEVICE_TYPE_GPU) ? "gpu" : (t & CL_DEVICE_TYPE_CPU) ? "cpu" : "accelerator");
            if (strcasestr(label, want)) return 1;
        }
    }
    return 0;
}

/* README and clkit.h name these CLKIT_DEVICE values: each opens a device exactly when one
   matches it, through the option and through the environment alike. */
START_TEST(documented_device_values)
{
    static const char *values[] = {"nvidia", "amd", "pocl", "cpu", "gpu", "0", "PoCL"};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        int expect = values[i][0] == '0' || some_device_matches(values[i]);
        for (int via_env = 0; via_env < 2; via_env++) {
            clkit_context *ctx = NULL;
            clkit_options opt = {0};
            if (via_env) tu_setenv("CLKIT_DEVICE", values[i]);
            else opt.device = values[i];
            clkit_status s = clkit_context_create(&ctx, &opt);
            tu_unsetenv("CLKIT_DEVICE");
            ck_assert_msg(s == (expect ? CLKIT_OK : CLKIT_ERR_NO_DEVICE), "CLKIT_DEVICE=%s (%s): %s",
                          values[i], via_env ? "env" : "option", clkit_status_string(s));
            struct clkit_device_props p;
            if (s == CLKIT_OK && !strcmp(values[i], "cpu")) {
                ck_assert_int_eq(clkit_device_props(ctx, &p), CLKIT_OK);
                ck_assert_msg(p.is_cpu, "CLKIT_DEVICE=cpu opened %s", p.name);
            }
            if (s == CLKIT_OK && !strcmp(values[i], "gpu")) {
                ck_assert_int_eq(clkit_device_props(ctx, &p), CLKIT_OK);
                ck_assert_msg(p.is_gpu, "CLKIT_DEVICE=gpu opened %s", p.name);
            }
            clkit_context_release(ctx);
        }
    }
    /* CI runs on PoCL: its documented name must find it there. */
    if (some_device_matches("Portable Computing Language"))
        ck_assert_msg(some_device_matches("pocl"), "PoCL is present but 'pocl' matches nothing");
}
END_TEST

/* Lines a child process writes to stderr and to stdout with CLKIT_LOG=level while it makes
   a context on a device that does not exist (an error) and one that does. */
static void log_lines(const char *level, int *err_lines, int *out_bytes)
{
    char err_path[] = "/tmp/clkit-log-XXXXXX", out_path[] = "/tmp/clkit-out-XXXXXX";
    int ef = mkstemp(err_path), of = mkstemp(out_path);
    ck_assert(ef >= 0 && of >= 0);
    pid_t pid = fork();
    if (pid == 0) {
        tu_setenv("CLKIT_LOG", level);
        dup2(ef, 2), dup2(of, 1);
        clkit_context *ctx;
        clkit_options opt = {0};
        opt.device = "no-such-device-anywhere";
        clkit_context_create(&ctx, &opt);
        if (clkit_context_create(&ctx, NULL) == CLKIT_OK) clkit_context_release(ctx);
        _exit(0);
    }
    int status;
    ck_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    FILE *f = fopen(err_path, "r");
    char line[4096];
    *err_lines = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "clkit ", 6)) (*err_lines)++;
    if (f) fclose(f);
    struct stat sb;
    *out_bytes = stat(out_path, &sb) == 0 ? (int)sb.st_size : -1;
    close(ef), close(of), unlink(err_path), unlink(out_path);
}

/* CLKIT_LOG: none silences, error and above report the failed creation, nothing ever goes to
   stdout, and an unknown level falls back to warn. */
START_TEST(documented_log_levels)
{
    static const char *levels[] = {"none", "error", "warn", "info", "debug", "WARN", "bogus"};
    int lines[7];
    for (int i = 0; i < 7; i++) {
        int out;
        log_lines(levels[i], &lines[i], &out);
        ck_assert_msg(out == 0, "CLKIT_LOG=%s wrote %d bytes to stdout", levels[i], out);
    }
    ck_assert_msg(lines[0] == 0, "CLKIT_LOG=none printed %d lines", lines[0]);
    for (int i = 1; i < 7; i++) ck_assert_msg(lines[i] >= 1, "CLKIT_LOG=%s printed nothing", levels[i]);
    ck_assert(lines[1] <= lines[2] && lines[2] <= lines[3] && lines[3] <= lines[4]);
    ck_assert_int_eq(lines[5], lines[2]);
    ck_assert_int_eq(lines[6], lines[2]);
}
END_TEST

/* CLKIT_CACHE_DIR: a directory is used, "" disables the cache; the config example in
   clkit.h's matmul options is accepted. */
START_TEST(documented_cache_and_config_values)
{
    char dir[] = "/tmp/clkit-docdir-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    tu_setenv("CLKIT_CACHE_DIR", dir);
    clkit_context *ctx = tu_ctx();
    ck_assert_str_eq(clkit_cache_dir(ctx), dir);
    clkit_context_release(ctx);
    tu_setenv("CLKIT_CACHE_DIR", "");
    ctx = tu_ctx();
    ck_assert_str_eq(clkit_cache_dir(ctx), "");
    double v[64];
    for (int i = 0; i < 64; i++) v[i] = (i % 7) - 3;
    cl_mem b = tu_buffer(ctx, CLKIT_F32, 64, v), c = tu_buffer(ctx, CLKIT_F32, 64, NULL);
    int64_t shape[2] = {8, 8};
    clkit_tensor tb = clkit_tensor_contiguous(b, CLKIT_F32, 2, shape), tc = clkit_tensor_contiguous(c, CLKIT_F32, 2, shape);
    clkit_matmul_options o = clkit_matmul_defaults();
    o.config = "KERNEL=2,BLOCK_M=64,BLOCK_N=64,BLOCK_K=8,THREAD_M=4,THREAD_N=4,GROUP_M=8";
    TU_CHECK(clkit_matmul(ctx, &tb, &tb, &tc, &o));
    double got[64], want[64];
    tu_read(ctx, c, CLKIT_F32, 64, got);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            want[i * 8 + j] = 0;
            for (int k = 0; k < 8; k++) want[i * 8 + j] += v[i * 8 + k] * v[k * 8 + j];
        }
    tu_assert_close(got, want, 64, 0, 0, "matmul with clkit.h's example config");
    clReleaseMemObject(b), clReleaseMemObject(c);
    clkit_context_release(ctx);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("context");
    TCase *tc = tu_tcase("context");
    tcase_add_test(tc, status_strings);
    tcase_add_test(tc, null_arguments);
    tcase_add_test(tc, device_choice);
    tcase_add_test(tc, adopted_queue);
    tcase_add_test(tc, profiling_needs_a_profiling_queue);
    tcase_add_test(tc, kernel_dir_override);
    tcase_add_test(tc, huge_shapes_overflow);
    tcase_add_test(tc, documented_device_values);
    tcase_add_test(tc, documented_log_levels);
    tcase_add_test(tc, documented_cache_and_config_values);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
