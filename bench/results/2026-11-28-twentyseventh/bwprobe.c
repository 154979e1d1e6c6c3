/* bwprobe FILE MB "OPTS G=groups" ...: median µs and GB/s of bw() reading MB MiB after a 256 MiB
   zero fill (the bench's flush) and warm (same kernel just before). */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 30
static cl_context ctx;
static cl_device_id dev;
static cl_command_queue q;

static void die(const char *what, cl_int err) { fprintf(stderr, "%s failed: %d\n", what, err); exit(1); }

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path, 0);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    if (fread(s, 1, n, f) != (size_t)n) die("read", 0);
    s[n] = 0;
    fclose(f);
    return s;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double run_us(cl_kernel k, size_t g, size_t l)
{
    cl_event e;
    cl_int err = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, &e);
    if (err) die("enqueue", err);
    clWaitForEvents(1, &e);
    cl_ulong t0, t1;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    clReleaseEvent(e);
    return (t1 - t0) * 1e-3;
}

static cl_program build(const char *src, const char *opts)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (clBuildProgram(p, 1, &dev, opts, NULL, NULL)) goto fail;
    size_t n;
    clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL);
    char *ptx = malloc(n + 2), *o = ptx;
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof ptx, &ptx, NULL);
    ptx[n] = 0;
    if (!strstr(ptx, "//@90a ")) return p;
    for (char *i = ptx; *i;) {
        if (!strncmp(i, "//@90a ", 7)) { i += 7; continue; }
        *o++ = *i++;
    }
    *o = 0;
    char *at = strstr(ptx, "\n.target sm_90");
    memmove(at + 15, at + 14, strlen(at + 14) + 1);
    at[14] = 'a';
    n = strlen(ptx) + 1;
    const unsigned char *b = (const unsigned char *)ptx;
    clReleaseProgram(p);
    p = clCreateProgramWithBinary(ctx, 1, &dev, &n, &b, NULL, &err);
    if (err || clBuildProgram(p, 1, &dev, "", NULL, NULL)) goto fail;
    return p;
fail: {
    char log[16384] = {0};
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    printf("%s: build failed\n%s\n", opts, log);
    return NULL;
}
}

int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    const char *src = slurp(argv[1]);
    size_t bytes = (size_t)atoi(argv[2]) << 20, flush_bytes = 256u << 20;
    cl_platform_id plats[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, plats, &np);
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (!dev) die("no GPU", 0);
    cl_int err;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    q = clCreateCommandQueueWithProperties(ctx, dev, qp, &err);
    cl_mem S = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem F = clCreateBuffer(ctx, CL_MEM_READ_WRITE, flush_bytes, NULL, &err);
    cl_mem O = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
    cl_uint one = 1;
    clEnqueueFillBuffer(q, S, &one, 4, 0, bytes, 0, NULL, NULL);
    clFinish(q);
    for (int c = 3; c < argc; c++) {
        char opts[1024];
        snprintf(opts, sizeof opts, "-cl-std=CL3.0 %s", argv[c]);
        char *gp = strstr(opts, " G=");
        size_t groups = gp ? (size_t)atoi(gp + 3) : 264;
        if (gp) memset(gp + 1, ' ', strcspn(gp + 1, " "));
        cl_program p = build(src, opts);
        if (!p) continue;
        cl_kernel k = clCreateKernel(p, "bw", &err);
        size_t cw[3];
        clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof cw, cw, NULL);
        cl_long n16 = (cl_long)(bytes / 16);
        clSetKernelArg(k, 0, sizeof S, &S);
        clSetKernelArg(k, 1, sizeof n16, &n16);
        clSetKernelArg(k, 2, sizeof O, &O);
        double t[2][REPS];
        for (int mode = 0; mode < 2; mode++)
            for (int r = 0; r < REPS; r++) {
                if (mode == 0) {
                    cl_uint z = 0;
                    clEnqueueFillBuffer(q, F, &z, 4, 0, flush_bytes, 0, NULL, NULL);
                } else run_us(k, groups * cw[0], cw[0]);
                clFinish(q);
                t[mode][r] = run_us(k, groups * cw[0], cw[0]);
            }
        for (int mode = 0; mode < 2; mode++) qsort(t[mode], REPS, sizeof(double), cmp);
        printf("%-60s G %4zu  after-fill %8.2f us (%4.0f GB/s)  warm %8.2f us (%4.0f GB/s)\n", argv[c], groups,
               t[0][REPS / 2], bytes / t[0][REPS / 2] * 1e-3, t[1][REPS / 2], bytes / t[1][REPS / 2] * 1e-3);
        fflush(stdout);
        clReleaseKernel(k);
        clReleaseProgram(p);
    }
    return 0;
}
