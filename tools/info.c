/* clkit info: the devices the ICD loader offers, the chosen one's properties and the launch
   heuristics derived from them, the binary cache, and why a device may be missing; as text or,
   with --json, the same as one JSON document. Each section gathers its facts first, then
   prints them one way or the other. */
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
#include "internal.h"
#include "tool.h"

#define NVIDIA_LIB "libnvidia-opencl.so.1"
#define TUNED_FILE "tuned.json"
#define MAX_PLATFORMS 16
#define MAX_DEVICES 16  /* per platform */

/* Where the report goes: text on stdout, or members of a JSON object printed at the end. */
typedef struct report {
    json_object *json;  /* NULL: text */
} report;

static void usage(FILE *f)
{
    fprintf(f, "usage: clkit info [--json] [--device D]\n"
               "\n"
               "Lists every OpenCL platform and device (the index --device takes), then for\n"
               "the chosen device (* in the list): its properties, the launch heuristics\n"
               "derived from them, the fast paths each op family may take and the route of\n"
               "each kind of call, the binary cache directory, the tuned-config file and its\n"
               "entries for this device, and a diagnosis of the OpenCL set-up (an installed\n"
               "driver the ICD loader does not know of, no platform).\n"
               "\n"
               "  --json       the same as one JSON document on stdout: clkit_version,\n"
               "               devices, device (the properties; null when it does not open),\n"
               "               heuristics, fast_paths, routes, binary_cache, tuned, opencl\n"
               "               and diagnosis (what also goes to stderr), and error where the\n"
               "               device does not open\n"
               "  --device D   an index or a name substring, as $CLKIT_DEVICE\n"
               "\n"
               "Exit status: 0 the device opens, 1 it does not, 2 bad usage.\n");
}

/* -1 when the options are good, else the exit status. */
static int parse(int argc, char **argv, const char **device, int *json)
{
    static const struct option longs[] = {
        {"device", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, ":hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'd': *device = optarg; break;
        case 'j': *json = 1; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: return tool_option_error("info", c, argv);
        }
    }
    if (optind < argc) return tool_usage_error("info", "unexpected argument '%s'", argv[optind]);
    return -1;
}

/* ---- JSON helpers ---- */

static void put(report *r, const char *key, json_object *value)
{
    json_object_object_add(r->json, key, value);
}

static json_object *text_or_null(const char *s)
{
    return s && *s ? json_object_new_string(s) : NULL;
}

/* ---- devices ---- */

typedef struct device_row {
    int index, chosen;
    char platform[128], name[128], driver[64];
    const char *type;
} device_row;

/* What the platform listing saw, for the diagnosis. */
typedef struct platform_scan {
    int platforms, nvidia;
    device_row rows[MAX_PLATFORMS * MAX_DEVICES];
    int count;
} platform_scan;

static const char *type_name(cl_device_type t)
{
    return t & CL_DEVICE_TYPE_GPU ? "gpu"
         : t & CL_DEVICE_TYPE_CPU ? "cpu"
         : t & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
         : "other";
}

static void device_info(device_row *row, cl_device_id d, const char *platform, cl_device_id chosen)
{
    cl_device_type type = 0;
    snprintf(row->platform, sizeof row->platform, "%s", platform);
    clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof row->name, row->name, NULL);
    clGetDeviceInfo(d, CL_DRIVER_VERSION, sizeof row->driver, row->driver, NULL);
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    row->name[sizeof row->name - 1] = row->driver[sizeof row->driver - 1] = 0;
    row->type = type_name(type);
    row->chosen = d == chosen;
}

/* In the order clkit numbers them: platforms in loader order, devices in platform order. */
static void scan_devices(cl_device_id chosen, platform_scan *scan)
{
    cl_platform_id plats[MAX_PLATFORMS];
    cl_uint np = 0;
    memset(scan, 0, sizeof *scan);
    if (clGetPlatformIDs(MAX_PLATFORMS, plats, &np) != CL_SUCCESS) np = 0;
    scan->platforms = np > MAX_PLATFORMS ? MAX_PLATFORMS : (int)np;
    for (int p = 0; p < scan->platforms; p++) {
        char pname[128] = "";
        cl_device_id devs[MAX_DEVICES];
        cl_uint nd = 0;
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        pname[sizeof pname - 1] = 0;
        scan->nvidia |= strstr(pname, "NVIDIA") != NULL;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devs, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < nd && d < MAX_DEVICES; d++, scan->count++) {
            scan->rows[scan->count].index = scan->count;
            device_info(&scan->rows[scan->count], devs[d], pname, chosen);
        }
    }
}

static void report_devices(report *r, const platform_scan *scan)
{
    if (r->json) {
        json_object *list = json_object_new_array();
        for (int i = 0; i < scan->count; i++) {
            const device_row *d = &scan->rows[i];
            json_object *o = json_object_new_object();
            json_object_object_add(o, "index", json_object_new_int(d->index));
            json_object_object_add(o, "platform", json_object_new_string(d->platform));
            json_object_object_add(o, "name", json_object_new_string(d->name));
            json_object_object_add(o, "type", json_object_new_string(d->type));
            json_object_object_add(o, "driver", json_object_new_string(d->driver));
            json_object_object_add(o, "chosen", json_object_new_boolean(d->chosen));
            json_object_array_add(list, o);
        }
        put(r, "devices", list);
        return;
    }
    if (!scan->platforms) {
        printf("no OpenCL platform\n");
        return;
    }
    printf("devices (--device and CLKIT_DEVICE take the index or a name substring):\n");
    printf("  %3s  %-28s %-40s %-5s %s\n", "#", "platform", "device", "type", "driver");
    for (int i = 0; i < scan->count; i++) {
        const device_row *d = &scan->rows[i];
        printf("%c %3d  %-28s %-40s %-5s %s\n", d->chosen ? '*' : ' ', d->index, d->platform,
               d->name, d->type, d->driver);
    }
}

static void report_props(report *r, const struct clkit_device_props *dev)
{
    if (r->json) {
        put(r, "device", tool_props_json(dev));
        return;
    }
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

static const int64_t softmax_n[] = {256, 1024, 4096, 12672, 32768, 65536};
#define SOFTMAX_M 4096
/* Dense streaming kernels take 4 elements per work-item (host/launch.c). */
#define STREAM_ITEMS ((1ull << 26) / 4)

/* The plan for f32 rows of n, contiguous and aligned: 16-byte loads of 4 elements. */
typedef struct softmax_row {
    int64_t n;
    clkit_softmax_plan plan;
    size_t wg, groups;
    unsigned occupancy;
} softmax_row;

static softmax_row softmax_plan(const struct clkit_device_props *dev, int64_t m, int64_t n)
{
    softmax_row row = {.n = n, .plan = clkit_softmax_heuristic(dev, n, 4, 0)};
    row.wg = (size_t)row.plan.team * row.plan.rows;
    /* Before a kernel is built its local memory and registers are unknown: the occupancy
       shown is the bound from work-items. */
    row.occupancy = clkit_occupancy(dev, row.wg, 0, 0);
    uint64_t tasks = (uint64_t)(m + row.plan.rows - 1) / row.plan.rows;
    row.groups = clkit_persistent_groups(dev, row.occupancy, tasks);
    return row;
}

static json_object *softmax_json(const softmax_row *s)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "n", json_object_new_int64(s->n));
    json_object_object_add(o, "team", json_object_new_int64(s->plan.team));
    json_object_object_add(o, "rows", json_object_new_int64(s->plan.rows));
    json_object_object_add(o, "items", json_object_new_int64(s->plan.items));
    json_object_object_add(o, "vec", json_object_new_int64(s->plan.vec));
    json_object_object_add(o, "path", json_object_new_string(s->plan.online ? "online" : "on chip"));
    json_object_object_add(o, "work_group", json_object_new_int64((int64_t)s->wg));
    json_object_object_add(o, "occupancy", json_object_new_int64(s->occupancy));
    json_object_object_add(o, "groups", json_object_new_int64((int64_t)s->groups));
    return o;
}

static void heuristics_json(report *r, const struct clkit_device_props *dev, size_t wg)
{
    json_object *h = json_object_new_object(), *stream = json_object_new_object();
    json_object *softmax = json_object_new_array();
    json_object_object_add(h, "threads_per_cu", json_object_new_int64(clkit_threads_per_cu(dev)));
    json_object_object_add(stream, "work_group", json_object_new_int64((int64_t)wg));
    json_object_object_add(stream, "occupancy", json_object_new_int64(clkit_occupancy(dev, wg, 0, 0)));
    json_object_object_add(stream, "n", json_object_new_int64(STREAM_ITEMS * 4));
    json_object_object_add(stream, "groups",
                           json_object_new_int64((int64_t)clkit_stream_groups(dev, STREAM_ITEMS, wg)));
    json_object_object_add(h, "stream", stream);
    json_object_object_add(h, "softmax_rows", json_object_new_int64(SOFTMAX_M));
    for (size_t i = 0; i < sizeof softmax_n / sizeof *softmax_n; i++) {
        softmax_row s = softmax_plan(dev, SOFTMAX_M, softmax_n[i]);
        json_object_array_add(softmax, softmax_json(&s));
    }
    json_object_object_add(h, "softmax", softmax);
    put(r, "heuristics", h);
}

static void report_heuristics(report *r, const struct clkit_device_props *dev)
{
    size_t wg = clkit_stream_wg(dev, 0);
    if (r->json) {
        heuristics_json(r, dev, wg);
        return;
    }
    printf("\nlaunch heuristics (host/heuristics.h):\n");
    printf("  work-items resident per compute unit: %u\n", clkit_threads_per_cu(dev));
    printf("  streaming ops: work-group %zu, occupancy %u per compute unit, %zu groups for "
           "n = 2^26\n",
           wg, clkit_occupancy(dev, wg, 0, 0), clkit_stream_groups(dev, STREAM_ITEMS, wg));
    printf("  softmax f32 over %d rows (persistent grid):\n", SOFTMAX_M);
    printf("  %8s %6s %6s %6s %4s  %-8s %10s %10s %8s\n", "N", "team", "rows", "items", "vec",
           "path", "work-group", "occupancy", "groups");
    for (size_t i = 0; i < sizeof softmax_n / sizeof *softmax_n; i++) {
        softmax_row s = softmax_plan(dev, SOFTMAX_M, softmax_n[i]);
        printf("  %8lld %6u %6u %6u %4u  %-8s %10zu %10u %8zu\n", (long long)s.n, s.plan.team,
               s.plan.rows, s.plan.items, s.plan.vec, s.plan.online ? "online" : "on chip", s.wg,
               s.occupancy, s.groups);
    }
}

/* ---- fast paths ---- */

static const char *const families[] = {"matmul", "attention", "cross_entropy", "softmax",
                                       "layernorm"};
#define NFAMILIES (sizeof families / sizeof *families)
static const char *const path_names[] = {"PTX shuffles", "mma.sync", "wgmma", "TMA", "MFMA",
                                         "WMMA"};
#define NPATHS (sizeof path_names / sizeof *path_names)

/* The kinds of call whose route `clkit info` tells. */
enum { ROUTE_MATMUL_16, ROUTE_MATMUL_F32, ROUTE_LCE_16, ROUTE_ATTN_16, ROUTE_ATTN_F32, NROUTES };
static const char *const route_names[NROUTES] = {
    "matmul with f16/bf16 operands", "matmul with f32 operands", "linear cross-entropy f16/bf16",
    "attention f16/bf16", "attention f32"};
static const char *const route_keys[NROUTES] = {"matmul_f16_bf16", "matmul_f32",
                                                "linear_cross_entropy_f16_bf16",
                                                "attention_f16_bf16", "attention_f32"};

/* Where each kind of call runs, given the fast paths its family may take (bits of
   clkit_fast_paths). */
static void routes(unsigned mm, unsigned attn, unsigned ce, const struct clkit_device_props *dev,
                   const char *out[NROUTES])
{
    const char *off = dev->nv_cc_major >= 8 ? "portable kernels (CLKIT_TENSOR_CORES=0)"
                      : dev->amd_gfx[0]     ? "portable kernels (no AMD matrix-core path for this target and op)"
                                            : "portable kernels (tensor cores need NVIDIA sm_80 or later)";
    out[ROUTE_MATMUL_16] =
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
               : off;
    out[ROUTE_MATMUL_F32] =
           mm & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x2 f32: f32 products summed in f32), unless "
                 "exact_f32, else portable kernels or CLBlast"
           : mm & CLKIT_FAST_PATH_AMD_WMMA ? "portable kernels or CLBlast (WMMA has no f32 form)"
           : mm & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores as 3xTF32 (f32-accurate products) under the same conditions with "
                 "4-element-aligned strides, unless exact_f32, else portable kernels or CLBlast"
               : off;
    out[ROUTE_LCE_16] =
           ce & CLKIT_FAST_PATH_NV_MMA
               ? "fused on the tensor cores (wgmma where it may take it; the logits stay in the "
                 "GEMMs' epilogues) when x and weight have a unit-stride D and 8-element-aligned "
                 "strides, else chunks of f32 logits in scratch between matmuls"
               : "chunks of f32 logits in scratch between matmuls";
    out[ROUTE_ATTN_16] =
           attn & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x8), any strides, head dims that are multiples of "
                 "32: the forward up to 256, the backward up to 128, else portable kernels"
           : attn & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores (mma.sync) when q, k, v (and dO) have a contiguous head dimension "
                 "and 8-element-aligned strides, head dim <= 128 forward and backward, else "
                 "portable kernels"
               : off;
    out[ROUTE_ATTN_F32] =
           attn & CLKIT_FAST_PATH_AMD_MFMA
               ? "AMD matrix cores (MFMA 32x32x2 f32), any strides, head dims that are multiples "
                 "of 32: the forward up to 128, the backward up to 64, else portable kernels"
           : attn & CLKIT_FAST_PATH_NV_MMA
               ? "tensor cores as 3xTF32 (f32-accurate products) under the same conditions with "
                 "4-element-aligned strides, head dim <= 128 (backward <= 64 without sm_90's "
                 "local memory), else portable kernels"
               : off;
}

static void fast_paths_json(report *r, const unsigned bits[NFAMILIES], const char *route[NROUTES])
{
    json_object *paths = json_object_new_object(), *ways = json_object_new_object();
    for (size_t f = 0; f < NFAMILIES; f++) {
        json_object *list = json_object_new_array();
        for (size_t i = 0; i < NPATHS; i++)
            if (bits[f] & (1u << i)) json_object_array_add(list, json_object_new_string(path_names[i]));
        json_object_object_add(paths, families[f], list);
    }
    for (int k = 0; k < NROUTES; k++)
        json_object_object_add(ways, route_keys[k], json_object_new_string(route[k]));
    put(r, "fast_paths", paths);
    put(r, "routes", ways);
}

/* The vendor fast paths each op family may take (clkit_fast_paths): what the device and the
   switches allow, before any operand's layout has a say. */
static void report_fast_paths(report *r, clkit_context *ctx, const struct clkit_device_props *dev)
{
    unsigned bits[NFAMILIES];
    const char *route[NROUTES];
    for (size_t f = 0; f < NFAMILIES; f++) {
        bits[f] = 0;
        clkit_fast_paths(ctx, families[f], &bits[f]);
    }
    routes(bits[0], bits[1], bits[2], dev, route);
    if (r->json) {
        fast_paths_json(r, bits, route);
        return;
    }
    printf("\nfast paths (CLKIT_TENSOR_CORES, CLKIT_WGMMA, CLKIT_NV_TMA, CLKIT_AMD_MATRIX = 0 turn "
           "them off):\n");
    for (size_t f = 0; f < NFAMILIES; f++) {
        printf("  %-14s", families[f]);
        for (size_t i = 0; i < NPATHS; i++)
            if (bits[f] & (1u << i)) printf(" %s", path_names[i]);
        printf("%s\n", bits[f] ? "" : " portable only");
    }
    printf("\nroutes:\n");
    for (int k = 0; k < NROUTES; k++) printf("  %s: %s\n", route_names[k], route[k]);
}

/* ---- binary cache ---- */

typedef struct cache_facts {
    const char *path;  /* "": the cache is off */
    int exists, entries;
    uint64_t bytes;
    const char *cap;   /* $CLKIT_CACHE_MAX_MB; NULL: the default */
} cache_facts;

/* Entries and bytes of the binary cache in `path`. */
static cache_facts cache_scan(const char *path)
{
    cache_facts c = {.path = path, .cap = getenv("CLKIT_CACHE_MAX_MB")};
    if (c.cap && !*c.cap) c.cap = NULL;
    DIR *d = *path ? opendir(path) : NULL;
    c.exists = d != NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        char file[4400];
        struct stat st;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        /* The tuned configs share the directory; the tuned section shows them. */
        if (strncmp(e->d_name, TUNED_FILE, strlen(TUNED_FILE)) == 0) continue;
        if (stat(file, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        c.entries++;
        c.bytes += (uint64_t)st.st_size;
    }
    if (d) closedir(d);
    return c;
}

static void cache_json(report *r, const cache_facts *c)
{
    if (!*c->path) {
        put(r, "binary_cache", NULL);
        return;
    }
    json_object *o = json_object_new_object();
    double cap = (double)clkit_cache_cap() / 1048576.0;
    json_object_object_add(o, "path", json_object_new_string(c->path));
    json_object_object_add(o, "exists", json_object_new_boolean(c->exists));
    json_object_object_add(o, "entries", json_object_new_int(c->entries));
    json_object_object_add(o, "bytes", json_object_new_int64((int64_t)c->bytes));
    /* The cap the library applies (a whole number of megabytes as an integer); 0: none */
    json_object_object_add(o, "cap_mb", cap == (double)(int64_t)cap ? json_object_new_int64((int64_t)cap)
                                                                    : json_object_new_double(cap));
    json_object_object_add(o, "cap_from_env", json_object_new_boolean(c->cap != NULL));
    put(r, "binary_cache", o);
}

static void report_cache(report *r, const char *path)
{
    cache_facts c = cache_scan(path);
    if (r->json) {
        cache_json(r, &c);
        return;
    }
    if (!*path) {
        printf("\nbinary cache: off (CLKIT_CACHE_DIR is empty, or no HOME)\n");
        return;
    }
    if (!c.exists) {
        printf("\nbinary cache: %s (not created yet)\n", path);
        return;
    }
    char text[32];
    tool_bytes_text(c.bytes, text, sizeof text);
    printf("\nbinary cache: %s, %d entries, %llu bytes (%s)\n", path, c.entries,
           (unsigned long long)c.bytes, text);
    double cap = (double)clkit_cache_cap() / 1048576.0;
    if (cap == 0)
        printf("  no cap (CLKIT_CACHE_MAX_MB=%s)\n", c.cap);
    else if (c.cap)
        printf("  capped at %g megabytes (CLKIT_CACHE_MAX_MB=%s)\n", cap, c.cap);
    else
        printf("  capped at %g megabytes (the default; CLKIT_CACHE_MAX_MB sets it)\n", cap);
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

/* The listing's state: the entries so far (text: their count; JSON: the array). */
typedef struct tuned_list {
    int count;
    json_object *entries;
} tuned_list;

static void tuned_entry(void *user, const char *op, const char *dtype, const char *layout,
                        const char *shape, const char *config, double ms)
{
    tuned_list *l = user;
    char dims[64];
    shape_dims(shape, dims, sizeof dims);
    if (l->entries) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "op", json_object_new_string(op));
        json_object_object_add(o, "dtypes", json_object_new_string(dtype));
        json_object_object_add(o, "layout", json_object_new_string(layout));
        json_object_object_add(o, "shape", json_object_new_string(dims));
        char text[32];
        snprintf(text, sizeof text, "%.6g", ms);
        json_object_object_add(o, "ms", json_object_new_double_s(ms, text));
        json_object_object_add(o, "config", json_object_new_string(config));
        json_object_array_add(l->entries, o);
        return;
    }
    if (l->count++ == 0)
        printf("  %-8s %-14s %-12s %-22s %10s  %s\n", "op", "dtypes", "layout", "shape", "ms",
               "config");
    printf("  %-8s %-14s %-12s %-22s %10.4f  %s\n", op, dtype, layout, dims, ms, config);
}

/* The tuned-config file and its entries for this device (exact shapes; calls on other
   shapes take the nearest entry of the same op, dtypes and layout). */
static void report_tuned(report *r, clkit_context *ctx)
{
    const char *dir = clkit_cache_dir(ctx);
    if (!*dir) {
        if (r->json)
            put(r, "tuned", NULL);
        else
            printf("\ntuned configurations: off, as the cache is\n");
        return;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, TUNED_FILE);
    int missing = access(path, F_OK) != 0;
    tuned_list l = {0, r->json ? json_object_new_array() : NULL};
    if (!r->json)
        printf("\ntuned configurations: %s%s\n", path,
               missing ? " (not created yet: `clkit tune` fills it)" : "");
    clkit_status s = clkit_tuned_list(ctx, tuned_entry, &l);
    if (s) tool_error("listing the tuned configurations", s, clkit_last_error(ctx));
    if (r->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_object_add(o, "exists", json_object_new_boolean(!missing));
        json_object_object_add(o, "error", s ? text_or_null(clkit_last_error(ctx)) : NULL);
        json_object_object_add(o, "entries", l.entries);
        put(r, "tuned", o);
    } else if (!s && !missing) {
        printf("  %d entr%s for this device\n", l.count, l.count == 1 ? "y" : "ies");
    }
}

/* ---- diagnosis ---- */

/* ocl-icd reads $OCL_ICD_VENDORS instead of /etc/OpenCL/vendors when it names a directory. */
static const char *vendors_dir(void)
{
    const char *env = getenv("OCL_ICD_VENDORS");
    struct stat st;
    return env && stat(env, &st) == 0 && S_ISDIR(st.st_mode) ? env : "/etc/OpenCL/vendors";
}

/* The *.icd files of dir, each with the library it names, as "file (library)" items of
   `files` (a JSON array, also the text's source); 1 when one names the NVIDIA library.
   *exists: whether dir could be read. */
static int scan_icd_files(const char *dir, json_object *files, int *exists)
{
    DIR *d = opendir(dir);
    int nvidia = 0;
    *exists = d != NULL;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".icd")) continue;
        char path[4400], lib[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f && !fgets(lib, sizeof lib, f)) lib[0] = 0;
        if (f) fclose(f);
        lib[strcspn(lib, "\r\n")] = 0;
        json_object *o = json_object_new_object();
        json_object_object_add(o, "file", json_object_new_string(e->d_name));
        json_object_object_add(o, "library", json_object_new_string(lib));
        json_object_array_add(files, o);
        nvidia |= strstr(lib, "libnvidia-opencl") != NULL;
    }
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

/* A diagnosis on stderr, and in the JSON document's list. */
static void diagnosis(json_object *list, const char *text)
{
    fprintf(stderr, "clkit info: %s\n", text);
    if (list) json_object_array_add(list, json_object_new_string(text));
}

static void opencl_text(const char *dir, json_object *files, int exists, const char *state)
{
    printf("\nOpenCL set-up:\n");
    printf("  ICD files in %s:", dir);
    size_t n = json_object_array_length(files);
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx(files, i), *file, *lib;
        json_object_object_get_ex(o, "file", &file);
        json_object_object_get_ex(o, "library", &lib);
        printf(" %s (%s)", json_object_get_string(file), json_object_get_string(lib));
    }
    printf("%s\n", !exists ? " none: the directory is missing" : n ? "" : " none");
    printf("  NVIDIA OpenCL driver (%s): %s\n", NVIDIA_LIB, state);
}

static void report_setup(report *r, const platform_scan *scan)
{
    const char *dir = vendors_dir(), *env = getenv("OCL_ICD_FILENAMES");
    json_object *files = json_object_new_array(), *found = r->json ? json_object_new_array() : NULL;
    int exists, registered = scan_icd_files(dir, files, &exists) ||
                             (env && strstr(env, "libnvidia-opencl"));
    int driver = nvidia_driver_present();
    const char *state = !driver ? "not installed" : registered ? "installed, registered"
                                                               : "installed, not registered";
    if (r->json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "icd_dir", json_object_new_string(dir));
        json_object_object_add(o, "icd_dir_exists", json_object_new_boolean(exists));
        json_object_object_add(o, "icd_files", files);
        json_object_object_add(o, "platforms", json_object_new_int(scan->platforms));
        json_object_object_add(o, "nvidia_driver", json_object_new_string(state));
        put(r, "opencl", o);
    } else {
        opencl_text(dir, files, exists, state);
        json_object_put(files);
    }
    char text[1024];
    if (driver && !registered && !scan->nvidia) {
        snprintf(text, sizeof text, "the NVIDIA OpenCL driver is installed but the ICD loader "
                 "does not know of it. Register it (as root):\n  mkdir -p %s && echo %s > "
                 "%s/nvidia.icd", dir, NVIDIA_LIB, dir);
        diagnosis(found, text);
    } else if (driver && registered && !scan->nvidia) {
        snprintf(text, sizeof text, "%s is registered but no NVIDIA platform loads: check that "
                 "the driver works (nvidia-smi) and that the library matches the kernel module",
                 NVIDIA_LIB);
        diagnosis(found, text);
    }
    if (scan->platforms == 0) {
        snprintf(text, sizeof text, "no OpenCL platform. The ICD loader reads %s; for a CPU "
                 "device install PoCL (apt-get install pocl-opencl-icd), for a GPU its vendor's "
                 "OpenCL driver. `clinfo -l` lists what the loader finds.", dir);
        diagnosis(found, text);
    }
    if (found) put(r, "diagnosis", found);
}

/* The chosen device's sections; NULL devices (it did not open) are null in JSON. */
static void report_device(report *r, clkit_context *ctx)
{
    if (!ctx) {
        static const char *const sections[] = {"device", "heuristics", "fast_paths", "routes",
                                               "binary_cache", "tuned"};
        for (size_t i = 0; r->json && i < sizeof sections / sizeof *sections; i++)
            put(r, sections[i], NULL);
        return;
    }
    struct clkit_device_props dev;
    clkit_device_props(ctx, &dev);
    report_props(r, &dev);
    report_heuristics(r, &dev);
    report_fast_paths(r, ctx, &dev);
    report_cache(r, clkit_cache_dir(ctx));
    report_tuned(r, ctx);
}

int cmd_info(int argc, char **argv)
{
    const char *device = NULL;
    int json = 0, rc = parse(argc, argv, &device, &json);
    if (rc >= 0) return rc;
    report r = {json ? json_object_new_object() : NULL};
    if (r.json)
        put(&r, "clkit_version", json_object_new_string(CLKIT_VERSION_STRING));
    else
        printf("clkit %s\n\n", CLKIT_VERSION_STRING);
    clkit_context *ctx = NULL;
    clkit_status s = tool_open(&ctx, device, NULL, 0);
    cl_device_id chosen = NULL;
    if (!s) clkit_context_cl(ctx, NULL, NULL, &chosen);
    static platform_scan scan;
    scan_devices(chosen, &scan);
    report_devices(&r, &scan);
    report_device(&r, s ? NULL : ctx);
    if (!s) clkit_context_release(ctx);
    report_setup(&r, &scan);
    if (s) tool_error("cannot open the device", s, "see the diagnosis above");
    if (r.json) {
        put(&r, "error", s ? json_object_new_string(clkit_status_string(s)) : NULL);
        printf("%s\n", json_object_to_json_string_ext(r.json, JSON_C_TO_STRING_PRETTY |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(r.json);
    }
    return s ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
