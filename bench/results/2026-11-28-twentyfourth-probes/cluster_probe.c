/* Does NVIDIA's OpenCL launch a kernel whose PTX asks for thread-block clusters as clusters?
   Builds a probe from source, inserts ".reqnctapercluster 2, 1, 1" into its PTX entry, rebuilds
   from that binary and reads back cluster registers and a DSMEM write from the peer CTA. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
    "__kernel void probe(__global uint *out) {\n"
    "  __local uint box[4];\n"
    "  uint rank, cid, nct, ncl, addr, remote, peer;\n"
    "  __asm__ volatile(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(rank));\n"
    "  __asm__ volatile(\"mov.u32 %0, %%clusterid.x;\" : \"=r\"(cid));\n"
    "  __asm__ volatile(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(nct));\n"
    "  __asm__ volatile(\"mov.u32 %0, %%nclusterid.x;\" : \"=r\"(ncl));\n"
    "  if (get_local_id(0) == 0) box[0] = 0xffffffffu;\n"
    "  __asm__ volatile(\"barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n"
    "  if (get_local_id(0) == 0 && nct > 1) {\n"
    "    addr = (uint)(size_t)box; peer = rank ^ 1;\n"
    "    __asm__ volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(remote) : \"r\"(addr), \"r\"(peer));\n"
    "    __asm__ volatile(\"st.shared::cluster.u32 [%0], %1;\" :: \"r\"(remote), \"r\"((uint)get_group_id(0)) : \"memory\");\n"
    "  }\n"
    "  __asm__ volatile(\"barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n"
    "  if (get_local_id(0) == 0) {\n"
    "    uint g = get_group_id(0);\n"
    "    out[g * 5 + 0] = rank; out[g * 5 + 1] = cid; out[g * 5 + 2] = nct; out[g * 5 + 3] = ncl; out[g * 5 + 4] = box[0];\n"
    "  }\n"
    "}\n";

static void die(const char *what, cl_int err)
{
    fprintf(stderr, "%s failed: %d\n", what, err);
    exit(1);
}

static cl_program from_binary(cl_context ctx, cl_device_id dev, const char *ptx)
{
    size_t n = strlen(ptx) + 1;
    const unsigned char *b = (const unsigned char *)ptx;
    cl_int st, err;
    cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &n, &b, &st, &err);
    if (!p) die("clCreateProgramWithBinary", err);
    err = clBuildProgram(p, 1, &dev, "", NULL, NULL);
    if (err) {
        char log[8192] = {0};
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fprintf(stderr, "build log: %s\n", log);
        die("clBuildProgram (binary)", err);
    }
    return p;
}

static void run(cl_context ctx, cl_device_id dev, cl_command_queue q, cl_program p, const char *label,
                size_t groups)
{
    cl_int err;
    cl_kernel k = clCreateKernel(p, "probe", &err);
    if (!k) die("clCreateKernel", err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, groups * 5 * 4, NULL, &err);
    clSetKernelArg(k, 0, sizeof out, &out);
    size_t local = 64, global = groups * 64;
    err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
    printf("%s: enqueue %d", label, err);
    err = clFinish(q);
    printf(" finish %d\n", err);
    unsigned h[64 * 5] = {0};
    clEnqueueReadBuffer(q, out, CL_TRUE, 0, groups * 5 * 4, h, 0, NULL, NULL);
    for (size_t g = 0; g < groups; g++)
        printf("  group %zu: rank %u cluster %u ctas %u clusters %u peer-wrote %d\n", g, h[g * 5],
               h[g * 5 + 1], h[g * 5 + 2], h[g * 5 + 3], (int)h[g * 5 + 4]);
    clReleaseMemObject(out);
    clReleaseKernel(k);
    (void)dev;
}

int main(void)
{
    cl_platform_id plats[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, plats, &np);
    cl_device_id dev = NULL;
    for (cl_uint i = 0; i < np && !dev; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (!dev) die("no GPU", 0);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    err = clBuildProgram(p, 1, &dev, "-cl-std=CL3.0", NULL, NULL);
    if (err) {
        char log[8192] = {0};
        clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fprintf(stderr, "build log: %s\n", log);
        die("clBuildProgram (source)", err);
    }
    size_t n = 0;
    clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL);
    unsigned char *bin = malloc(n + 1);
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
    bin[n] = 0;
    char *ptx = (char *)bin;
    run(ctx, dev, q, p, "plain", 4);
    const char *body = strstr(strstr(ptx, ".entry"), "\n{");
    static const char directive[] = "\n.reqnctapercluster 2, 1, 1";
    static const char directive4[] = "\n.reqnctapercluster 4, 1, 1";
    for (int v = 0; v < 2; v++) {
        const char *d = v ? directive4 : directive;
        char *mod = malloc(n + 64);
        size_t head = (size_t)(body - ptx);
        memcpy(mod, ptx, head);
        strcpy(mod + head, d);
        strcat(mod, body);
        if (v == 0) fputs(mod, stdout);
        cl_program c = from_binary(ctx, dev, mod);
        run(ctx, dev, q, c, v ? "cluster 4" : "cluster 2", 8);
        clReleaseProgram(c);
        free(mod);
    }
    return 0;
}
