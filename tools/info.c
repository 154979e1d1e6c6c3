/* clkit info: the devices the ICD loader offers, the chosen one's properties and the launch
   heuristics derived from them, the binary cache, and why a device may be missing. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "heuristics.h"
#include "tool.h"

#define NVIDIA_LIB "libnvidia-opencl.so.1"
#define TUNED_FILE "tuned.json"

/* What the platform listing saw, for the diagnosis. */
typedef struct platform_scan {
    int platforms, devices, nvidia;
} platform_scan;

static void usage(FILE *f)
{
    fprintf(f, "usage: clkit info [--device D]\n"
               "\n"
               "Lists every OpenCL platform and device (the index --device takes), then for\n"
               "the chosen device (* in the list): its properties, the launch heuristics\n"
               "derived from them, the binary cache directory, the tuned-config file and its\n"
               "entries for this device, and a diagnosis of the OpenCL set-up (an installed\n"
               "driver the ICD loader does not know of, no platform).\n"
               "\n"
               "  --device D   an index or a name substring, as $CLKIT_DEVICE\n"
               "\n"
               "Exit status: 0 the device opens, 1 it does not, 2 bad usage.\n");
}

/* -1 when the options are good, else the exit status. */
static int parse(int argc, char **argv, const char **device)
{
    static const struct option longs[] = {
        {"device", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'd': *device = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: usage(stderr); return TOOL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    return -1;
}

/* ---- devices ---- */

static const char *type_name(cl_device_type t)
{
    return t & CL_DEVICE_TYPE_GPU ? "gpu"
         : t & CL_DEVICE_TYPE_CPU ? "cpu"
         : t & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
         : "other";
}

static void print_device(int index, cl_device_id d, const char *platform, cl_device_id chosen)
{
    char name[128] = "", driver[64] = "";
    cl_device_type type = 0;
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof name, name, NULL);
    clGetDeviceInfo(d, CL_DRIVER_VERSION, sizeof driver, driver, NULL);
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    name[sizeof name - 1] = driver[sizeof driver - 1] = 0;
    printf("%c %3d  %-28s %-40s %-5s %s\n", d == chosen ? '*' : ' ', index, platform, name,
           type_name(type), driver);
}

/* In the order clkit numbers them: platforms in loader order, devices in platform order. */
static platform_scan list_devices(cl_device_id chosen)
{
    platform_scan scan = {0, 0, 0};
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0) {
        printf("no OpenCL platform\n");
        return scan;
    }
    scan.platforms = np > 16 ? 16 : (int)np;
    printf("devices (--device and CLKIT_DEVICE take the index or a name substring):\n");
    printf("  %3s  %-28s %-40s %-5s %s\n", "#", "platform", "device", "type", "driver");
    for (int p = 0; p < scan.platforms; p++) {
        char pname[128] = "";
        cl_device_id devs[16];
        cl_uint nd = 0;
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        pname[sizeof pname - 1] = 0;
        scan.nvidia |= strstr(pname, "NVIDIA") != NULL;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd && d < 16; d++)
            print_device(scan.devices++, devs[d], pname, chosen);
    }
    return scan;
}

static void print_props(const struct clkit_device_props *dev)
{
    printf("\nproperties of the chosen device (clkit_device_props):\n");
    for (size_t i = 0; i < tool_prop_count; i++) {
        const prop_field *f = &tool_props[i];
        const char *text = tool_prop_text(dev, f);
        int64_t v = tool_prop_int(dev, f);
        char bytes[32] = "";
        if (f->kind == PROP_U64) tool_bytes_text((uint64_t)v, bytes, sizeof bytes);
        if (text)
            printf("  %-16s %s\n", f->name, *text ? text : "-");
        else
            printf("  %-16s %lld%s%s%s\n", f->name, (long long)v, *bytes ? " (" : "", bytes,
                   *bytes ? ")" : "");
    }
}

/* ---- heuristics ---- */

/* The plan for f32 rows of n, contiguous and aligned: 16-byte loads of 4 elements. */
static void print_softmax_plan(const struct clkit_device_props *dev, int64_t m, int64_t n)
{
    clkit_softmax_plan plan = clkit_softmax_heuristic(dev, n, 4, 0);
    size_t wg = (size_t)plan.team * plan.rows;
    /* Before a kernel is built its local memory and registers are unknown: the occupancy
       shown is the bound from work-items. */
    unsigned occ = clkit_occupancy(dev, wg, 0, 0);
    uint64_t tasks = (uint64_t)(m + plan.rows - 1) / plan.rows;
    printf("  %8lld %6u %6u %6u %4u  %-8s %10zu %10u %8zu\n", (long long)n, plan.team,
           plan.rows, plan.items, plan.vec, plan.online ? "online" : "on chip", wg, occ,
           clkit_persistent_groups(dev, occ, tasks));
}

static void print_heuristics(const struct clkit_device_props *dev)
{
    static const int64_t softmax_n[] = {256, 1024, 4096, 12672, 32768, 65536};
    const int64_t softmax_m = 4096;
    /* Dense streaming kernels take 4 elements per work-item (host/launch.c). */
    const uint64_t stream_items = (1ull << 26) / 4;
    size_t wg = clkit_stream_wg(dev, 0);
    printf("\nlaunch heuristics (host/heuristics.h):\n");
    printf("  work-items resident per compute unit: %u\n", clkit_threads_per_cu(dev));
    printf("  streaming ops: work-group %zu, occupancy %u per compute unit, %zu groups for "
           "n = 2^26\n",
           wg, clkit_occupancy(dev, wg, 0, 0), clkit_stream_groups(dev, stream_items, wg));
    printf("  softmax f32 over %lld rows (persistent grid):\n", (long long)softmax_m);
    printf("  %8s %6s %6s %6s %4s  %-8s %10s %10s %8s\n", "N", "team", "rows", "items", "vec",
           "path", "work-group", "occupancy", "groups");
    for (size_t i = 0; i < sizeof softmax_n / sizeof *softmax_n; i++)
        print_softmax_plan(dev, softmax_m, softmax_n[i]);
}

/* ---- fast paths ---- */

/* Where each kind of call runs, given the fast paths its family may take (bits of
   clkit_fast_paths). */
static void print_routes(unsigned mm, unsigned attn, unsigned ce, const struct clkit_device_props *dev)
{
    const char *off = dev->nv_cc_major >= 8 ? "portable kernels (CLKIT_TENSOR_CORES=0)"
                      : dev->amd_gfx[0]     ? "portable kernels (no AMD matrix-core path for this target and op)"
                                            : "portable kernels (tensor cores need NVIDIA sm_80 or later)";
    printf("  matmul with f16/bf16 operands: %s\n",
           mm & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x8, any strides; CLKIT_AMD_MATRIX=0: portable kernels)"
           : mm & CLKIT_FAST_PATH_AMD_WMMA
               ? "AMD matrix cores (WMMA 16x16x16, any strides; CLKIT_AMD_MATRIX=0: portable kernels)"
           : mm & CLKIT_FAST_PATH_NV_TMA
               ? "tensor cores (wgmma, sm_90a PTX, operands loaded by the TMA; CLKIT_NV_TMA=0: "
                 "cp.async; mma.sync if that does not build; CLKIT_WGMMA=0: mma.sync) when every "
                 "operand has a unit-stride dimension and 8-element-aligned strides, else portable kernels"
           : mm & CLKIT_FAST_PATH_NV_WGMMA
               ? "tensor cores (wgmma, sm_90a PTX; mma.sync if that does not build; "
                 "CLKIT_WGMMA=0: mma.sync) when every operand has a unit-stride "
                 "dimension and 8-element-aligned strides, else portable kernels"
           : mm & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores (mma.sync) when every operand has a unit-stride "
                 "dimension and 8-element-aligned strides, else portable kernels"
               : off);
    printf("  matmul with f32 operands: %s\n",
           mm & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x2 f32: f32 products summed in f32), unless "
                 "exact_f32, else portable kernels or CLBlast"
           : mm & CLKIT_FAST_PATH_AMD_WMMA ? "portable kernels or CLBlast (WMMA has no f32 form)"
           : mm & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores as 3xTF32 (f32-accurate products) under the same conditions with "
                 "4-element-aligned strides, unless exact_f32, else portable kernels or CLBlast"
               : off);
    printf("  linear cross-entropy f16/bf16: %s\n",
           ce & CLKIT_FAST_PATH_NV_MMA
               ? "fused on the tensor cores (wgmma where it may take it; the logits stay in the "
                 "GEMMs' epilogues) when x and weight have a unit-stride D and 8-element-aligned "
                 "strides, else chunks of f32 logits in scratch between matmuls"
               : "chunks of f32 logits in scratch between matmuls");
    printf("  attention f16/bf16: %s\n",
           attn & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x8), any strides, head dims that are multiples of "
                 "32: the forward up to 256, the backward up to 128, else portable kernels"
           : attn & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores (mma.sync) when q, k, v (and dO) have a contiguous head dimension "
                 "and 8-element-aligned strides, head dim <= 128 forward and backward, else "
                 "portable kernels"
               : off);
    printf("  attention f32: %s\n",
           attn & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x2 f32), any strides, head dims that are multiples "
                 "of 32: the forward up to 128, the backward up to 64, else portable kernels"
           : attn & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores as 3xTF32 (f32-accurate products) under the same conditions with "
                 "4-element-aligned strides, head dim <= 128 (backward <= 64 without sm_90's "
                 "local memory), else portable kernels"
               : off);
}

/* The vendor fast paths each op family may take (clkit_fast_paths): what the device and the
   switches allow, before any operand's layout has a say. */
static void print_fast_paths(clkit_context *ctx, const struct clkit_device_props *dev)
{
    static const char *families[] = {"matmul", "attention", "cross_entropy", "softmax", "layernorm"};
    static const char *names[] = {"PTX shuffles", "mma.sync", "wgmma", "TMA", "MFMA", "WMMA"};
    printf("\nfast paths (CLKIT_TENSOR_CORES, CLKIT_WGMMA, CLKIT_NV_TMA, CLKIT_AMD_MATRIX = 0 turn "
           "them off):\n");
    unsigned bits[sizeof families / sizeof *families];
    for (size_t f = 0; f < sizeof families / sizeof *families; f++) {
        unsigned paths = 0;
        clkit_fast_paths(ctx, families[f], &paths);
        printf("  %-14s", families[f]);
        for (size_t i = 0; i < sizeof names / sizeof *names; i++)
            if (paths & (1u << i)) printf(" %s", names[i]);
        printf("%s\n", paths ? "" : " portable only");
        bits[f] = paths;
    }
    printf("\nroutes:\n");
    print_routes(bits[0], bits[1], bits[2], dev);
}

/* ---- binary cache ---- */

/* Entries and bytes of the binary cache in `path` ("": the cache is off). */

static void print_cache(const char *path)
{
    if (!*path) {
        printf("\nbinary cache: off (CLKIT_CACHE_DIR is empty, or no HOME)\n");
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        printf("\nbinary cache: %s (not created yet)\n", path);
        return;
    }
    int entries = 0;
    uint64_t bytes = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char file[4400];
        struct stat st;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        /* The tuned configs share the directory; print_tuned shows them. */
        if (strncmp(e->d_name, TUNED_FILE, strlen(TUNED_FILE)) == 0) continue;
        if (stat(file, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        entries++;
        bytes += (uint64_t)st.st_size;
    }
    closedir(d);
    char text[32];
    tool_bytes_text(bytes, text, sizeof text);
    const char *cap = getenv("CLKIT_CACHE_MAX_MB");
    printf("\nbinary cache: %s, %d entries, %llu bytes (%s)\n", path, entries,
           (unsigned long long)bytes, text);
    if (cap && *cap)
        printf("  capped at CLKIT_CACHE_MAX_MB=%s megabytes (0: no cap)\n", cap);
    else
        printf("  capped at %d megabytes (the default; CLKIT_CACHE_MAX_MB sets it)\n",
               CLKIT_CACHE_MAX_MB_DEFAULT);
}

/* ---- tuned configurations ---- */

/* "[ 64, 64, 64, 1 ]", the key's shape as the cache stores it, as "64x64x64x1". */
static void shape_dims(const char *json, char *buf, size_t n)
{
    size_t used = 0;
    for (const char *p = json; *p && used + 1 < n; p++) {
        if (isdigit((unsigned char)*p))
            buf[used++] = *p;
        else if (*p == ',')
            buf[used++] = 'x';
    }
    buf[used] = 0;
}

static void print_tuned_entry(void *user, const char *op, const char *dtype, const char *layout,
                              const char *shape, const char *config, double ms)
{
    int *count = user;
    char dims[64];
    if ((*count)++ == 0)
        printf("  %-8s %-14s %-12s %-22s %10s  %s\n", "op", "dtypes", "layout", "shape", "ms",
               "config");
    shape_dims(shape, dims, sizeof dims);
    printf("  %-8s %-14s %-12s %-22s %10.4f  %s\n", op, dtype, layout, dims, ms, config);
}

/* The tuned-config file and its entries for this device (exact shapes; calls on other
   shapes take the nearest entry of the same op, dtypes and layout). */
static void print_tuned(clkit_context *ctx)
{
    const char *dir = clkit_cache_dir(ctx);
    if (!*dir) {
        printf("\ntuned configurations: off, as the cache is\n");
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, TUNED_FILE);
    int missing = access(path, F_OK) != 0, count = 0;
    printf("\ntuned configurations: %s%s\n", path,
           missing ? " (not created yet: `clkit tune` fills it)" : "");
    clkit_status s = clkit_tuned_list(ctx, print_tuned_entry, &count);
    if (s)
        tool_error("listing the tuned configurations", s, clkit_last_error(ctx));
    else if (!missing)
        printf("  %d entr%s for this device\n", count, count == 1 ? "y" : "ies");
}

/* ---- diagnosis ---- */

/* ocl-icd reads $OCL_ICD_VENDORS instead of /etc/OpenCL/vendors when it names a directory. */
static const char *vendors_dir(void)
{
    const char *env = getenv("OCL_ICD_VENDORS");
    struct stat st;
    return env && stat(env, &st) == 0 && S_ISDIR(st.st_mode) ? env : "/etc/OpenCL/vendors";
}

/* Lists the *.icd files of dir on stdout; 1 when one of them names the NVIDIA library. */
static int scan_icd_files(const char *dir)
{
    DIR *d = opendir(dir);
    int nvidia = 0, files = 0;
    printf("  ICD files in %s:", dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".icd")) continue;
        char path[4400], lib[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f && !fgets(lib, sizeof lib, f)) lib[0] = 0;
        if (f) fclose(f);
        lib[strcspn(lib, "\r\n")] = 0;
        printf(" %s (%s)", e->d_name, lib);
        files++;
        nvidia |= strstr(lib, "libnvidia-opencl") != NULL;
    }
    printf("%s\n", !d ? " none: the directory is missing" : files ? "" : " none");
    if (d) closedir(d);
    return nvidia;
}

static int nvidia_driver_present(void)
{
    void *h = dlopen(NVIDIA_LIB, RTLD_LAZY | RTLD_LOCAL);
    int found = h != NULL;
    if (h) dlclose(h);
    return found;
}

static void diagnose(const platform_scan *scan)
{
    const char *dir = vendors_dir(), *files = getenv("OCL_ICD_FILENAMES");
    printf("\nOpenCL set-up:\n");
    int registered = scan_icd_files(dir) || (files && strstr(files, "libnvidia-opencl"));
    int driver = nvidia_driver_present();
    const char *state = !driver ? "not installed" : registered ? "installed, registered"
                                                               : "installed, not registered";
    printf("  NVIDIA OpenCL driver (%s): %s\n", NVIDIA_LIB, state);
    if (driver && !registered && !scan->nvidia)
        fprintf(stderr, "clkit info: the NVIDIA OpenCL driver is installed but the ICD loader does "
                        "not know of it. Register it (as root):\n"
                        "  mkdir -p %s && echo %s > %s/nvidia.icd\n",
                dir, NVIDIA_LIB, dir);
    else if (driver && registered && !scan->nvidia)
        fprintf(stderr, "clkit info: %s is registered but no NVIDIA platform loads: check that "
                        "the driver works (nvidia-smi) and that the library matches the kernel "
                        "module\n",
                NVIDIA_LIB);
    if (scan->platforms == 0)
        fprintf(stderr, "clkit info: no OpenCL platform. The ICD loader reads %s; for a CPU device "
                        "install PoCL (apt-get install pocl-opencl-icd), for a GPU its vendor's "
                        "OpenCL driver. `clinfo -l` lists what the loader finds.\n",
                dir);
}

int cmd_info(int argc, char **argv)
{
    const char *device = NULL;
    int rc = parse(argc, argv, &device);
    if (rc >= 0) return rc;
    printf("clkit %s\n\n", CLKIT_VERSION_STRING);
    clkit_context *ctx = NULL;
    clkit_status s = tool_open(&ctx, device, NULL, 0);
    cl_device_id chosen = NULL;
    if (!s) clkit_context_cl(ctx, NULL, NULL, &chosen);
    platform_scan scan = list_devices(chosen);
    if (!s) {
        struct clkit_device_props dev;
        clkit_device_props(ctx, &dev);
        print_props(&dev);
        print_heuristics(&dev);
        print_fast_paths(ctx, &dev);
        print_cache(clkit_cache_dir(ctx));
        print_tuned(ctx);
        clkit_context_release(ctx);
    }
    diagnose(&scan);
    if (s) tool_error("cannot open the device", s, "see the diagnosis above");
    return s ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
