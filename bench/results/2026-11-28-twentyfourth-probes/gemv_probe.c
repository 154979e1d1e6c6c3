/* GEMV probe harness: gemv_probe FILE K N "OPTS" ... ; each OPTS is -D options plus KC=<rows>.
   Prints per config: max error vs a double reference, and median kernel µs after a clean-L2
   read pass, after a 256 MiB zero fill (do_bench's flush), and warm. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 40

static cl_context ctx;
static cl_device_id dev;
static cl_command_queue q;

static void die(const char *what, cl_int err)
{
    fprintf(stderr, "%s failed: %d\n", what, err);
    exit(1);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) die(path, 0);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    fread(s, 1, n, f);
    s[n] = 0;
    fclose(f);
    return s;
}

static unsigned short f2h_exact(float v) /* v = i / 1024, |i| <= 1024: exact in f16 */
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

static double run_ms(cl_kernel k, size_t *g, size_t *l)
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

int main(int argc, char **argv)
{
    if (argc < 5) return 2;
    const char *src = slurp(argv[1]);
    int K = atoi(argv[2]), N = atoi(argv[3]);
    cl_platform_id plats[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, plats, &np);
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], getenv("PROBE_CPU") ? CL_DEVICE_TYPE_ALL : CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (!dev) die("no GPU", 0);
    cl_int err;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    q = clCreateCommandQueueWithProperties(ctx, dev, qp, &err);
    float *bf = malloc((size_t)K * N * 4), *x = malloc((size_t)K * 4);
    unsigned short *bh = malloc((size_t)K * N * 2);
    srand(7);
    for (size_t i = 0; i < (size_t)K * N; i++) {
        bf[i] = (float)(rand() % 2049 - 1024) / 1024.0f;
        bh[i] = f2h_exact(bf[i]);
    }
    for (int i = 0; i < K; i++) x[i] = (float)(rand() % 2049 - 1024) / 1024.0f;
    double *ref = calloc(N, sizeof *ref), *mag = calloc(N, sizeof *mag);
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) {
            ref[n] += (double)x[k] * bf[(size_t)k * N + n];
            mag[n] += fabs((double)x[k] * bf[(size_t)k * N + n]);
        }
    cl_mem Bh = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, (size_t)K * N * 2, bh, &err);
    cl_mem Bf = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, (size_t)K * N * 4, bf, &err);
    cl_mem X = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, (size_t)K * 4, x, &err);
    cl_mem P = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)N * 4 * 1024, NULL, &err);
    unsigned *zeros = calloc(65536, 4);
    cl_mem T = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, 65536 * 4, zeros, &err);
    cl_mem Y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)N * 4, NULL, &err);
    size_t flush_bytes = getenv("PROBE_CPU") ? 1u << 20 : 256u << 20;
    cl_mem F = clCreateBuffer(ctx, CL_MEM_READ_WRITE, flush_bytes, NULL, &err);
    cl_mem O = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err);
    float *y = malloc((size_t)N * 4);
    for (int c = 4; c < argc; c++) {
        char opts[1024];
        const char *kcs = strstr(argv[c], "KC=");
        int kc = kcs ? atoi(kcs + 3) : K;
        snprintf(opts, sizeof opts, "-cl-std=CL3.0 %s", argv[c]);
        char *kcp = strstr(opts, "KC=");
        if (kcp) kcp[0] = 'Q'; /* harmless -D-less token removal */
        if (kcp) memset(kcp, ' ', strcspn(kcp, " "));
        int f32 = strstr(argv[c], "F32") != NULL;
        cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        if (clBuildProgram(p, 1, &dev, opts, NULL, NULL)) {
            char log[16384] = {0};
            clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
            printf("%s: build failed\n%s\n", argv[c], log);
            continue;
        }
        cl_kernel k = clCreateKernel(p, "gemv", &err), cl = clCreateKernel(p, "clean", &err);
        size_t cw[3];
        clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof cw, cw, NULL);
        int lanes_n = 0, vec = f32 ? 4 : 8;
        const char *ln = strstr(argv[c], "LANES_N=");
        lanes_n = atoi(ln + 8);
        int width = lanes_n * vec, splits = (K + kc - 1) / kc;
        int order = strstr(argv[c], "ORDER=1") != NULL;
        size_t g[2] = {(size_t)(N / width) * cw[0], (size_t)splits}, l[2] = {cw[0], 1};
        if (order) g[0] = (size_t)splits * cw[0], g[1] = (size_t)(N / width);
        cl_mem Bm = f32 ? Bf : Bh;
        clSetKernelArg(k, 0, sizeof Bm, &Bm);
        clSetKernelArg(k, 1, sizeof X, &X);
        clSetKernelArg(k, 2, sizeof P, &P);
        clSetKernelArg(k, 3, sizeof T, &T);
        clSetKernelArg(k, 4, sizeof Y, &Y);
        clSetKernelArg(k, 5, sizeof K, &K);
        clSetKernelArg(k, 6, sizeof N, &N);
        clSetKernelArg(k, 7, sizeof kc, &kc);
        cl_long n16 = (cl_long)(flush_bytes / 16);
        clSetKernelArg(cl, 0, sizeof F, &F);
        clSetKernelArg(cl, 1, sizeof O, &O);
        clSetKernelArg(cl, 2, sizeof n16, &n16);
        size_t cg = 132 * 2048, cl1 = 256;
        run_ms(k, g, l);
        clEnqueueReadBuffer(q, Y, CL_TRUE, 0, (size_t)N * 4, y, 0, NULL, NULL);
        double worst = 0;
        for (int n = 0; n < N; n++) {
            double e = fabs(y[n] - ref[n]) / (mag[n] + 1e-30);
            if (e > worst) worst = e;
        }
        double t[3][REPS];
        for (int mode = 0; mode < 3; mode++)
            for (int r = 0; r < REPS; r++) {
                if (mode == 0) clEnqueueNDRangeKernel(q, cl, 1, NULL, &cg, &cl1, 0, NULL, NULL);
                if (mode == 1) {
                    cl_uint z = 0;
                    clEnqueueFillBuffer(q, F, &z, 4, 0, flush_bytes, 0, NULL, NULL);
                }
                if (mode == 2) run_ms(k, g, l);
                clFinish(q);
                t[mode][r] = run_ms(k, g, l);
            }
        for (int mode = 0; mode < 3; mode++) qsort(t[mode], REPS, sizeof(double), cmp);
        double bytes = (double)K * N * (f32 ? 4 : 2);
        printf("%-70s groups %5zu  err %.1e  clean %6.2f us (%4.0f GB/s)  zero %6.2f  warm %6.2f\n", argv[c],
               g[0] / cw[0] * g[1], worst, t[0][REPS / 2], bytes / t[0][REPS / 2] * 1e-3,
               t[1][REPS / 2], t[2][REPS / 2]);
        fflush(stdout);
        clReleaseKernel(k);
        clReleaseKernel(cl);
        clReleaseProgram(p);
    }
    return 0;
}
