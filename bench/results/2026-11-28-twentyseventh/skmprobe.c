/* skmprobe FILE M K N "OPTS S=splits" ...: max error against a double reference and median µs
   of skm() after a 256 MiB zero fill and warm. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <math.h>
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
static unsigned short f2h_exact(float v)
{
    if (v == 0) return 0;
    unsigned sign = v < 0 ? 0x8000 : 0;
    float a = fabsf(v);
    int e = 0;
    while (a >= 2.0f) a /= 2, e++;
    while (a < 1.0f) a *= 2, e--;
    unsigned mant = (unsigned)lrintf((a - 1.0f) * 1024.0f);
    return (unsigned short)(sign | ((unsigned)(e + 15) << 10) | mant);
}
static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double run_us(cl_kernel k, size_t *g, size_t *l)
{
    cl_event e;
    cl_int err = clEnqueueNDRangeKernel(q, k, 2, NULL, g, l, 0, NULL, &e);
    if (err) die("enqueue", err);
    clWaitForEvents(1, &e);
    cl_ulong t0, t1;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    clReleaseEvent(e);
    return (t1 - t0) * 1e-3;
}
static int opt(const char *s, const char *key, int dflt)
{
    const char *p = strstr(s, key);
    return p ? atoi(p + strlen(key)) : dflt;
}

int main(int argc, char **argv)
{
    if (argc < 6) return 2;
    const char *src = slurp(argv[1]);
    int M = atoi(argv[2]), K = atoi(argv[3]), N = atoi(argv[4]);
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
    float *af = malloc((size_t)M * K * 4), *bf = malloc((size_t)K * N * 4);
    unsigned short *ah = malloc((size_t)M * K * 2), *bh = malloc((size_t)K * N * 2);
    srand(7);
    for (size_t i = 0; i < (size_t)K * N; i++) bf[i] = (float)(rand() % 2049 - 1024) / 1024.0f, bh[i] = f2h_exact(bf[i]);
    for (size_t i = 0; i < (size_t)M * K; i++) af[i] = (float)(rand() % 2049 - 1024) / 1024.0f, ah[i] = f2h_exact(af[i]);
    double *ref = calloc((size_t)M * N, sizeof *ref), *mag = calloc((size_t)M * N, sizeof *mag);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                double p = (double)af[(size_t)m * K + k] * bf[(size_t)k * N + n];
                ref[(size_t)m * N + n] += p, mag[(size_t)m * N + n] += fabs(p);
            }
    cl_mem A = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, (size_t)M * K * 2, ah, &err);
    cl_mem B = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, (size_t)K * N * 2, bh, &err);
    cl_mem P = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)M * N * 4 * 128, NULL, &err);
    unsigned *zeros = calloc(65536, 4);
    cl_mem T = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, 65536 * 4, zeros, &err);
    cl_mem C = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)M * N * 4, NULL, &err);
    size_t flush_bytes = 256u << 20;
    cl_mem F = clCreateBuffer(ctx, CL_MEM_READ_WRITE, flush_bytes, NULL, &err);
    float *y = malloc((size_t)M * N * 4);
    for (int c = 5; c < argc; c++) {
        char opts[1024];
        snprintf(opts, sizeof opts, "-cl-std=CL3.0 %s", argv[c]);
        char *sp = strstr(opts, " S=");
        int splits = sp ? atoi(sp + 3) : 1;
        if (sp) memset(sp + 1, ' ', strcspn(sp + 1, " "));
        cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        if (clBuildProgram(p, 1, &dev, opts, NULL, NULL)) {
            char log[16384] = {0};
            clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
            printf("%s: build failed\n%s\n", argv[c], log);
            continue;
        }
        cl_kernel k = clCreateKernel(p, "skm", &err);
        int warps = opt(argv[c], "WARPS=", 8), cb = opt(argv[c], "CB=", 1), u = opt(argv[c], "-DU=", 4);
        int kc = (K + splits - 1) / splits;
        int step = warps * 16 * u;
        kc = (kc + 15) / 16 * 16;
        (void)step;
        size_t g[2] = {(size_t)(N / (32 * cb)) * warps * 32, (size_t)splits}, l[2] = {(size_t)warps * 32, 1};
        clSetKernelArg(k, 0, sizeof A, &A);
        clSetKernelArg(k, 1, sizeof B, &B);
        clSetKernelArg(k, 2, sizeof P, &P);
        clSetKernelArg(k, 3, sizeof T, &T);
        clSetKernelArg(k, 4, sizeof C, &C);
        clSetKernelArg(k, 5, sizeof M, &M);
        clSetKernelArg(k, 6, sizeof N, &N);
        clSetKernelArg(k, 7, sizeof K, &K);
        clSetKernelArg(k, 8, sizeof kc, &kc);
        run_us(k, g, l);
        clFinish(q);
        clEnqueueReadBuffer(q, splits == 1 ? P : C, CL_TRUE, 0, (size_t)M * N * 4, y, 0, NULL, NULL);
        double worst = 0;
        for (size_t i = 0; i < (size_t)M * N; i++) {
            double e = fabs(y[i] - ref[i]) / (mag[i] + 1e-30);
            if (e > worst) worst = e;
        }
        double t[2][REPS];
        for (int mode = 0; mode < 2; mode++)
            for (int r = 0; r < REPS; r++) {
                if (mode == 0) {
                    cl_uint z = 0;
                    clEnqueueFillBuffer(q, F, &z, 4, 0, flush_bytes, 0, NULL, NULL);
                } else run_us(k, g, l);
                clFinish(q);
                t[mode][r] = run_us(k, g, l);
            }
        for (int mode = 0; mode < 2; mode++) qsort(t[mode], REPS, sizeof(double), cmp);
        printf("M %2d %-44s S %3d groups %5zu err %.1e  after-fill %7.2f us  warm %7.2f us\n", M, argv[c], splits,
               g[0] / l[0] * g[1], worst, t[0][REPS / 2], t[1][REPS / 2]);
        fflush(stdout);
        clReleaseKernel(k);
        clReleaseProgram(p);
    }
    return 0;
}
