/* wgmma throughput probe: per iteration each warpgroup issues C1 wgmma (SS or RS, N1) and
   C2 RS wgmma (N2); reports TFLOP/s. Built from OpenCL C with the library's nv/mma.h, its PTX
   retargeted to sm_90a as host/program.c does. Usage: wgprobe <cl dir> <label> <defines> <groups per CU> */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
"#include \"nv/mma.h\"\n"
"#define CAT_(a,b) a##b\n#define CAT(a,b) CAT_(a,b)\n"
"__kernel __attribute__((reqd_work_group_size(WGS*128,1,1))) void probe(__global float *out, int iters) {\n"
"  __local uint4 words[(WGS*8192 + 32768 + TMAB + 1024)/16];\n"
"  __local uchar *base = (__local uchar*)words + (1024 - nv_shared(words)%1024)%1024;\n"
"  for (int i = get_local_id(0); i < (WGS*8192+32768+TMAB)/16; i += get_local_size(0)) ((__local uint4*)base)[i] = (uint4)(0);\n"
"  nv_fence_proxy_async(); barrier(CLK_LOCAL_MEM_FENCE);\n"
"  int g = get_local_id(0) / 128;\n"
"  __local uchar *A = base + g*8192, *Bt = base + WGS*8192;\n"
"  float d1[N1/2], d2[N2/2 > 0 ? N2/2 : 1];\n"
"  _Pragma(\"unroll\") for (int i = 0; i < N1/2; i++) d1[i] = 0.0f;\n"
"  _Pragma(\"unroll\") for (int i = 0; i < N2/2; i++) d2[i] = 0.0f;\n"
"  uint a[4] = {get_local_id(0) & 0, 0, 0, 0};\n"
"  for (int it = 0; it < iters; it++) {\n"
"    nv_wgmma_fence();\n"
"    #pragma unroll\n"
"    for (int k = 0; k < C1; k++) {\n"
"      ulong db = nv_wgmma_desc(Bt + (k%4)*32, 16, 1024);\n"
"#if RS1\n"
"      CAT(NV_WGMMA_RS_, N1)(d1, \".f16.f16\", \"0\", a, db);\n"
"#else\n"
"      ulong da = nv_wgmma_desc(A + (k%4)*32, 16, 1024);\n"
"      CAT(NV_WGMMA_, N1)(d1, \".f16.f16\", \"0\", \"0\", da, db);\n"
"#endif\n"
"    }\n"
"#if C2\n"
"    #pragma unroll\n"
"    for (int k = 0; k < C2; k++) {\n"
"      ulong db = nv_wgmma_desc(Bt + (k%4) * 16 * 128, 8192, 1024);\n"
"      CAT(NV_WGMMA_RS_, N2)(d2, \".f16.f16\", \"1\", a, db);\n"
"    }\n"
"#endif\n"
"    nv_wgmma_commit();\n"
"    NV_WGMMA_WAIT(0);\n"
"  }\n"
"  NV_WGMMA_WAIT(0);\n"
"  float s = 0.0f;\n"
"  _Pragma(\"unroll\") for (int i = 0; i < N1/2; i++) s += d1[i];\n"
"  _Pragma(\"unroll\") for (int i = 0; i < N2/2; i++) s += d2[i];\n"
"  out[get_global_id(0)] = s;\n"
"}\n";

static void die(const char *what, cl_int err) { fprintf(stderr, "%s failed: %d\n", what, err); exit(1); }

int main(int argc, char **argv)
{
    if (argc < 5) return 2;
    cl_platform_id plats[8]; cl_uint np; clGetPlatformIDs(8, plats, &np);
    cl_device_id dev = 0; char name[256];
    for (cl_uint i = 0; i < np && !dev; i++) {
        cl_uint nd; cl_device_id d[8];
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 8, d, &nd) == CL_SUCCESS) dev = d[0];
    }
    if (!dev) die("no GPU", 0);
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    cl_uint cus; clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    char opts[1024];
    snprintf(opts, sizeof opts, "-I %s -D CLKIT_NV_SM=90 %s", argv[1], argv[3]);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (clBuildProgram(p, 1, &dev, opts, NULL, NULL)) {
        char log[16384] = {0};
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fprintf(stderr, "%s\n", log); die("build", 1);
    }
    size_t n; clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL);
    char *ptx = malloc(n + 4), *o = malloc(n + 4); unsigned char *pp = (unsigned char *)ptx;
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof pp, &pp, NULL); ptx[n] = 0;
    size_t k = 0;
    for (size_t i = 0; ptx[i];) { if (!strncmp(ptx + i, "//@90a ", 7)) { i += 7; continue; } o[k++] = ptx[i++]; }
    o[k] = 0;
    char *t = strstr(o, "\n.target sm_90"); memmove(t + 15, t + 14, strlen(t + 14) + 1); t[14] = 'a';
    if (argc > 5) {
        char *body = strstr(strstr(o, ".entry"), "\n{"), *o2 = malloc(strlen(o) + 64);
        size_t at = (size_t)(body - o);
        memcpy(o2, o, at); at += (size_t)sprintf(o2 + at, "\n.maxnreg %s", argv[5]); strcpy(o2 + at, body);
        o = o2;
    }
    size_t len = strlen(o) + 1; const unsigned char *b = (const unsigned char *)o; cl_int st;
    cl_program p2 = clCreateProgramWithBinary(ctx, 1, &dev, &len, &b, &st, &err);
    if (!p2 || clBuildProgram(p2, 1, &dev, "", NULL, NULL)) die("rebuild", err);
    cl_kernel kern = clCreateKernel(p2, "probe", &err);
    size_t regs = 0; /* not queryable; report launch */
    int wgs = 0, n1 = 0, c1 = 0, n2 = 0, c2 = 0;
    sscanf(strstr(argv[3], "WGS=") + 4, "%d", &wgs);
    sscanf(strstr(argv[3], "N1=") + 3, "%d", &n1); sscanf(strstr(argv[3], "C1=") + 3, "%d", &c1);
    sscanf(strstr(argv[3], "N2=") + 3, "%d", &n2); sscanf(strstr(argv[3], "C2=") + 3, "%d", &c2);
    size_t lsz = wgs * 128, groups = (size_t)cus * atoi(argv[4]), gsz = groups * lsz;
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, gsz * 4, NULL, &err);
    int iters = 4000;
    clSetKernelArg(kern, 0, sizeof out, &out); clSetKernelArg(kern, 1, sizeof iters, &iters);
    double best = 1e30;
    for (int r = 0; r < 6; r++) {
        cl_event e; cl_ulong t0, t1;
        if ((err = clEnqueueNDRangeKernel(q, kern, 1, NULL, &gsz, &lsz, 0, NULL, &e))) die("launch", err);
        clWaitForEvents(1, &e);
        clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        if (t1 - t0 < best) best = (double)(t1 - t0);
        clReleaseEvent(e);
    }
    double flops = 2.0 * 64 * 16 * ((double)n1 * c1 + (double)n2 * c2) * iters * wgs * groups;
    printf("%-28s %s groups/CU %s: %.3f ms, %.1f TFLOP/s\n", argv[2], name, argv[4], best * 1e-6, flops / best * 1e-3);
    (void)regs;
    return 0;
}
