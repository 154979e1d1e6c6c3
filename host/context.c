/* Context: device choice, queue, device properties, errors and logging. */
#define _GNU_SOURCE
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <CL/cl_ext.h>

/* Vendor queries (cl_nv_device_attribute_query, cl_amd_device_attribute_query); spelled
   out because older headers lack some of them. */
#define NV_CC_MAJOR 0x4000
#define NV_CC_MINOR 0x4001
#define NV_REGISTERS 0x4002
#define NV_WARP 0x4003
#define AMD_BOARD 0x4038
#define AMD_SIMD_PER_CU 0x4040
#define AMD_WAVEFRONT 0x4043
#define AMD_GFXIP_MAJOR 0x404A
#define AMD_GFXIP_MINOR 0x404B
#define AMD_MAX_WG 0x4031

/* ---- logging and errors ---- */

/* Logging is process-wide, as CLKIT_LOG is: most messages come from code that has no context
   at hand (creation, cache files, the fast paths' verdicts). One recursive lock covers the
   callback and every delivery, so that lines never interleave, a callback needs no locking of
   its own, clkit_set_log_callback returns only once no other thread is inside the old one,
   and a callback that calls back into clkit (which may log) does not deadlock itself. */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock;
static int log_threshold;
static clkit_log_fn log_fn;
static void *log_user;

static void log_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&log_lock, &a);
    pthread_mutexattr_destroy(&a);
    const char *e = getenv("CLKIT_LOG");
    static const char *names[] = {"none", "error", "warn", "info", "debug"};
    log_threshold = CLKIT_LOG_WARN;
    for (int i = 0; e && i < 5; i++)
        if (strcasecmp(e, names[i]) == 0) log_threshold = i;
}

int clkit_env_int(const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(e, &end, 10);
    if (*end || errno || v < lo || v > hi) {
        clkit_log(CLKIT_LOG_WARN, "%s='%s' is not a whole number from %lld to %lld; ignored", name, e,
                  (long long)lo, (long long)hi);
        return 0;
    }
    *out = v;
    return 1;
}

void clkit_set_log_callback(clkit_log_fn fn, void *user)
{
    pthread_once(&log_once, log_init);
    pthread_mutex_lock(&log_lock);
    log_fn = fn;
    log_user = user;
    pthread_mutex_unlock(&log_lock);
}

void clkit_log(int level, const char *fmt, ...)
{
    pthread_once(&log_once, log_init);
    if (level > log_threshold) return;
    static const char *tags[] = {"", "error", "warn", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&log_lock);
    if (log_fn)
        log_fn(log_user, (clkit_log_level)level, line);
    else
        fprintf(stderr, "clkit %s: %s\n", tags[level], line);
    pthread_mutex_unlock(&log_lock);
}

clkit_status clkit_fail(clkit_context *ctx, clkit_status s, const char *fmt, ...)
{
    char buf[sizeof ctx->error];
    int n = snprintf(buf, sizeof buf, "%s: ", clkit_status_string(s));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (ctx) memcpy(ctx->error, buf, sizeof buf);
    clkit_log(CLKIT_LOG_DEBUG, "%s", buf);
    return s;
}

const char *clkit_cl_error_name(cl_int err)
{
    switch (err) {
#define E(x) case x: return #x;
    E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_BUILD_PROGRAM_FAILURE) E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT) E(CL_INVALID_COMMAND_QUEUE)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS)
    E(CL_INVALID_PROGRAM) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX)
    E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE) E(CL_INVALID_KERNEL_ARGS)
    E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE) E(CL_INVALID_WORK_ITEM_SIZE)
    E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION)
    E(CL_INVALID_BUFFER_SIZE) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PLATFORM)
    E(CL_INVALID_QUEUE_PROPERTIES) E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) E(CL_PLATFORM_NOT_FOUND_KHR)
#undef E
    default: return "CL_UNKNOWN_ERROR";
    }
}

clkit_status clkit_cl_fail(clkit_context *ctx, cl_int err, const char *what)
{
    clkit_status s = (err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                      err == CL_OUT_OF_RESOURCES)
                         ? CLKIT_ERR_OUT_OF_MEMORY
                         : CLKIT_ERR_OPENCL;
    return clkit_fail(ctx, s, "%s failed with %s (%d)", what, clkit_cl_error_name(err), err);
}

void clkit_clear_error(clkit_context *ctx)
{
    if (ctx) ctx->error[0] = 0;
}

const char *clkit_status_string(clkit_status s)
{
    static const char *names[CLKIT_STATUS_COUNT] = {
#define CLKIT_STATUS_TEXT_(name, text) [name] = text,
        CLKIT_STATUS_LIST(CLKIT_STATUS_TEXT_)
#undef CLKIT_STATUS_TEXT_
    };
    if ((int)s < 0 || s >= CLKIT_STATUS_COUNT) return "unknown status";
    return names[s];
}

const char *clkit_version(void)
{
    return CLKIT_VERSION_STRING;
}

const char *clkit_last_error(const clkit_context *ctx)
{
    return ctx ? ctx->error : "no context";
}

/* ---- device choice ---- */

static void device_string(cl_device_id d, cl_device_info what, char *out, size_t n)
{
    out[0] = 0;
    if (clGetDeviceInfo(d, what, n, out, NULL) != CL_SUCCESS) out[0] = 0;
    out[n - 1] = 0;
}

static int ci_contains(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return 1;
    return n == 0;
}

typedef struct candidate {
    cl_platform_id platform;
    cl_device_id device;
    char label[400];
    int is_gpu;
} candidate;

/* Every device of every platform, in platform order. */
static int list_devices(candidate *out, int max)
{
    cl_uint np = 0;
    if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0) return 0;
    cl_platform_id plats[16];
    if (np > 16) np = 16;
    clGetPlatformIDs(np, plats, NULL);
    int count = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        cl_device_id devs[16];
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
        if (nd > 16) nd = 16;
        /* PoCL's platform is "Portable Computing Language"; only its vendor, "The pocl
           project", says pocl, so the label carries both. */
        char pname[128] = "", pvendor[128] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        clGetPlatformInfo(plats[p], CL_PLATFORM_VENDOR, sizeof pvendor, pvendor, NULL);
        pname[sizeof pname - 1] = pvendor[sizeof pvendor - 1] = 0;
        for (cl_uint d = 0; d < nd && count < max; d++) {
            char dname[128], vendor[128];
            cl_device_type type = 0;
            device_string(devs[d], CL_DEVICE_NAME, dname, sizeof dname);
            device_string(devs[d], CL_DEVICE_VENDOR, vendor, sizeof vendor);
            clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            candidate *c = &out[count++];
            c->platform = plats[p];
            c->device = devs[d];
            c->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
            snprintf(c->label, sizeof c->label, "%s %s %s %s %s", pname, pvendor, dname, vendor,
                     c->is_gpu ? "gpu" : (type & CL_DEVICE_TYPE_CPU) ? "cpu" : "accelerator");
        }
    }
    return count;
}

static clkit_status choose_device(clkit_context *ctx, const char *want)
{
    candidate c[64];
    int n = list_devices(c, 64);
    if (n == 0)
        return clkit_fail(ctx, CLKIT_ERR_NO_DEVICE,
                          "no OpenCL platform found (is an ICD installed under "
                          "/etc/OpenCL/vendors? `clkit info` diagnoses)");
    int pick = -1;
    if (want && *want) {
        char *end;
        long idx = strtol(want, &end, 10);
        if (*end == 0) {
            pick = (idx >= 0 && idx < n) ? (int)idx : -1;
        } else { /* the first GPU that matches, else the first match: "amd" is also PoCL's AMD CPU */
            for (int i = 0; i < n; i++)
                if (ci_contains(c[i].label, want) && (pick < 0 || (c[i].is_gpu && !c[pick].is_gpu))) pick = i;
        }
        if (pick < 0)
            return clkit_fail(ctx, CLKIT_ERR_NO_DEVICE,
                              "no device matches '%s' (%d devices; `clkit info` lists them)",
                              want, n);
    } else {
        for (int i = 0; i < n && pick < 0; i++)
            if (c[i].is_gpu) pick = i;
        if (pick < 0) pick = 0;
    }
    ctx->platform = c[pick].platform;
    ctx->device = c[pick].device;
    return CLKIT_OK;
}

/* ---- properties ---- */

static void parse_c_version(struct clkit_device_props *p)
{
    int major = 1, minor = 2;
    if (sscanf(p->c_version, "OpenCL C %d.%d", &major, &minor) == 2) {
        p->opencl_c_major = major;
        p->opencl_c_minor = minor;
    } else {
        p->opencl_c_major = 1;
        p->opencl_c_minor = 2;
    }
}

static void query_vendor_props(cl_device_id d, struct clkit_device_props *p, const char *extensions)
{
    if (strstr(extensions, "cl_nv_device_attribute_query")) {
        cl_uint v = 0;
        if (clGetDeviceInfo(d, NV_CC_MAJOR, sizeof v, &v, NULL) == CL_SUCCESS) p->nv_cc_major = (int)v;
        if (clGetDeviceInfo(d, NV_CC_MINOR, sizeof v, &v, NULL) == CL_SUCCESS) p->nv_cc_minor = (int)v;
        if (clGetDeviceInfo(d, NV_REGISTERS, sizeof v, &v, NULL) == CL_SUCCESS) p->registers = v;
        if (clGetDeviceInfo(d, NV_WARP, sizeof v, &v, NULL) == CL_SUCCESS && v) p->warp = v;
        /* CL_DEVICE_LOCAL_MEM_SIZE says 48 KiB, and a dynamic __local argument beyond it is
           refused, but on sm_90 the driver builds and runs kernels whose static __local arrays
           take up to 227 KiB (ptxas's limit there, 48 KiB on sm_80; H100, driver 580): keep
           1 KiB of it for the kernels' small arrays beside their tiles. */
        if (p->nv_cc_major >= 9) p->local_mem_static = (226u << 10);
    }
    if (strstr(extensions, "cl_amd_device_attribute_query") && p->is_gpu) {
        cl_uint v = 0;
        size_t wg = 0;
        if (clGetDeviceInfo(d, AMD_WAVEFRONT, sizeof v, &v, NULL) == CL_SUCCESS && v) p->warp = v;
        if (clGetDeviceInfo(d, AMD_SIMD_PER_CU, sizeof v, &v, NULL) == CL_SUCCESS) p->simd_per_cu = v;
        if (clGetDeviceInfo(d, AMD_MAX_WG, sizeof wg, &wg, NULL) == CL_SUCCESS && wg > p->max_work_group)
            p->max_work_group = wg;
        /* The device name is the gfx target on ROCm ("gfx90a:sramecc+:xnack-"). */
        if (strncmp(p->name, "gfx", 3) == 0) {
            size_t n = strcspn(p->name, ":");
            if (n >= sizeof p->amd_gfx) n = sizeof p->amd_gfx - 1;
            memcpy(p->amd_gfx, p->name, n);
            p->amd_gfx[n] = 0;
        }
    }
}

static void query_props(cl_platform_id plat, cl_device_id d, struct clkit_device_props *p)
{
    memset(p, 0, sizeof *p);
    clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof p->platform, p->platform, NULL);
    p->platform[sizeof p->platform - 1] = 0;
    device_string(d, CL_DEVICE_VENDOR, p->vendor, sizeof p->vendor);
    device_string(d, CL_DEVICE_NAME, p->name, sizeof p->name);
    device_string(d, CL_DRIVER_VERSION, p->driver, sizeof p->driver);
    device_string(d, CL_DEVICE_VERSION, p->device_version, sizeof p->device_version);
    device_string(d, CL_DEVICE_OPENCL_C_VERSION, p->c_version, sizeof p->c_version);
    parse_c_version(p);
    cl_device_type type = 0;
    cl_uint cu = 0;
    cl_ulong gmem = 0, alloc = 0, lmem = 0;
    size_t wg = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof alloc, &alloc, NULL);
    clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
    clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    p->is_gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    p->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
    p->compute_units = cu ? cu : 1;
    p->global_mem = gmem;
    p->max_alloc = alloc;
    p->local_mem = p->local_mem_static = lmem;
    p->max_work_group = wg ? wg : 1;
    p->warp = 1;

    size_t ext_len = 0;
    clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len);
    char *ext = calloc(ext_len + 1, 1);
    if (ext) {
        clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL);
        p->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
        p->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
        p->subgroups = strstr(ext, "cl_khr_subgroups") != NULL;
        query_vendor_props(d, p, ext);
        free(ext);
    }
}

/* -cl-std from the device's OpenCL C version, never CL3.0 (AMD rejects it; every kernel is
   1.2), plus the macros that vendor fast paths test. */
static void set_build_base(clkit_context *ctx)
{
    const struct clkit_device_props *p = &ctx->props;
    int n = snprintf(ctx->build_base, sizeof ctx->build_base, "-cl-std=CL1.2 -D CLKIT_WARP=%u",
                     p->warp);
    if (p->nv_cc_major)
        n += snprintf(ctx->build_base + n, sizeof ctx->build_base - (size_t)n,
                      " -D CLKIT_NV_SM=%d", p->nv_cc_major * 10 + p->nv_cc_minor);
    if (p->amd_gfx[0])
        snprintf(ctx->build_base + n, sizeof ctx->build_base - (size_t)n, " -D CLKIT_AMD=1");
}

clkit_status clkit_device_props(const clkit_context *ctx, struct clkit_device_props *out)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    /* The context is the caller's heap object behind a const view: its message may change. */
    if (!out) return clkit_fail((clkit_context *)ctx, CLKIT_ERR_NULL_ARGUMENT, "out is NULL");
    *out = ctx->props;
    return CLKIT_OK;
}

/* ---- lifetime ---- */

/* CLKIT_AMD_EMULATE=gfxNNN on a CPU device (PoCL): the context plans as on that AMD target
   (paths.c), and its matrix-core kernels run with cl/amd/matrix.h's software instructions, so
   that they are tested where no AMD GPU is. The other kernels are the CPU's as ever. */
static void amd_emulation(clkit_context *ctx)
{
    const char *gfx = getenv("CLKIT_AMD_EMULATE");
    struct clkit_device_props *p = &ctx->props;
    if (!gfx || !*gfx) return;
    size_t n = strlen(gfx);
    if (!p->is_cpu || strncmp(gfx, "gfx", 3) != 0 || n < 5 || n >= sizeof p->amd_gfx ||
        strspn(gfx + 3, "0123456789abcdef") != n - 3) {
        clkit_log(CLKIT_LOG_WARN, "CLKIT_AMD_EMULATE=%s ignored: it takes an AMD target (gfx942, "
                  "gfx90a, gfx1100) and a CPU device (PoCL)", gfx);
        return;
    }
    memcpy(p->amd_gfx, gfx, n + 1);
    ctx->amd_emulated = true;
}

static clkit_status finish_setup(clkit_context *ctx, const char *cache_dir)
{
    query_props(ctx->platform, ctx->device, &ctx->props);
    cl_ulong cache = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof cache, &cache, NULL) == CL_SUCCESS)
        ctx->cache_bytes = cache;
    amd_emulation(ctx);
    clkit_paths_init(ctx);
    set_build_base(ctx);
    if (!cache_dir) cache_dir = getenv("CLKIT_CACHE_DIR");
    if (cache_dir) {
        ctx->cache_dir = *cache_dir ? strdup(cache_dir) : NULL;
    } else {
        ctx->cache_dir = clkit_default_cache_dir();
    }
    clkit_log(CLKIT_LOG_INFO, "device: %s (%s), driver %s, cache %s", ctx->props.name,
              ctx->props.platform, ctx->props.driver, ctx->cache_dir ? ctx->cache_dir : "off");
    return CLKIT_OK;
}

static clkit_status alloc_context(clkit_context **out, clkit_context **ctx)
{
    if (!out) return CLKIT_ERR_NULL_ARGUMENT;
    *out = NULL;
    *ctx = calloc(1, sizeof **ctx);
    return *ctx ? CLKIT_OK : CLKIT_ERR_OUT_OF_MEMORY;
}

/* Creation failures leave their message on a temporary context; stderr carries it. */
static clkit_status abandon(clkit_context *ctx, clkit_status s)
{
    clkit_log(CLKIT_LOG_ERROR, "%s", ctx->error);
    clkit_context_release(ctx);
    return s;
}

clkit_status clkit_context_create(clkit_context **out, const clkit_options *opt)
{
    clkit_context *ctx;
    clkit_status s = alloc_context(out, &ctx);
    if (s) return s;
    const char *want = opt && opt->device ? opt->device : getenv("CLKIT_DEVICE");
    if ((s = choose_device(ctx, want))) return abandon(ctx, s);
    cl_int err;
    cl_context_properties cp[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
    ctx->cl = clCreateContext(cp, 1, &ctx->device, NULL, NULL, &err);
    if (!ctx->cl) return abandon(ctx, clkit_cl_fail(ctx, err, "clCreateContext"));
    ctx->profiling = opt && opt->profiling;
    ctx->queue = clCreateCommandQueue(ctx->cl, ctx->device,
                                      ctx->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
    if (!ctx->queue) return abandon(ctx, clkit_cl_fail(ctx, err, "clCreateCommandQueue"));
    finish_setup(ctx, opt ? opt->cache_dir : NULL);
    *out = ctx;
    return CLKIT_OK;
}

clkit_status clkit_context_from_queue(clkit_context **out, cl_command_queue queue)
{
    clkit_context *ctx;
    clkit_status s = alloc_context(out, &ctx);
    if (s) return s;
    if (!queue) return abandon(ctx, clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "queue is NULL"));
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx->cl, &ctx->cl, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device, &ctx->device, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof ctx->platform,
                              &ctx->platform, NULL);
    cl_command_queue_properties qp = 0;
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL);
    if (err != CL_SUCCESS) {
        ctx->cl = NULL;
        return abandon(ctx, clkit_cl_fail(ctx, err, "clGetCommandQueueInfo"));
    }
    if (qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
        ctx->cl = NULL;
        return abandon(ctx, clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE,
                                       "clkit needs an in-order queue; this one is out-of-order"));
    }
    clRetainContext(ctx->cl);
    clRetainCommandQueue(queue);
    ctx->queue = queue;
    ctx->profiling = (qp & CL_QUEUE_PROFILING_ENABLE) != 0;
    finish_setup(ctx, NULL);
    *out = ctx;
    return CLKIT_OK;
}

void clkit_context_release(clkit_context *ctx)
{
    if (!ctx) return;
    clkit_programs_release(ctx);
    clkit_tuned_release(ctx);
    clkit_context_trim(ctx);
    if (ctx->tma_slot) clReleaseMemObject(ctx->tma_slot);
    if (ctx->tickets) clReleaseMemObject(ctx->tickets);
    if (ctx->first_event) clReleaseEvent(ctx->first_event);
    if (ctx->last_event) clReleaseEvent(ctx->last_event);
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->cl) clReleaseContext(ctx->cl);
    free(ctx->cache_dir);
    free(ctx);
}

clkit_status clkit_context_cl(const clkit_context *ctx, cl_context *c, cl_command_queue *q,
                              cl_device_id *d)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    if (c) *c = ctx->cl;
    if (q) *q = ctx->queue;
    if (d) *d = ctx->device;
    return CLKIT_OK;
}

clkit_status clkit_finish(clkit_context *ctx)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    cl_int err = clFinish(ctx->queue);
    return err == CL_SUCCESS ? CLKIT_OK : clkit_cl_fail(ctx, err, "clFinish");
}

/* ---- events in and out ---- */

/* Every op enqueues on the context's one in-order queue, so a barrier there orders all later
   ops after the events, and a marker there completes with everything before it. */

clkit_status clkit_wait_events(clkit_context *ctx, cl_uint n, const cl_event *events)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (n == 0) return CLKIT_OK;
    if (!events) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "events is NULL with n = %u", n);
    /* What OpenCL would refuse only at the enqueue, or report later as a failed command that
       poisons every op queued after it, is refused here by name. A handle that is neither
       NULL nor a live event cannot be told apart without touching it: as in OpenCL, it is
       the caller's error. */
    for (cl_uint i = 0; i < n; i++) {
        if (!events[i]) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "events[%u] is NULL", i);
        cl_context c = NULL;
        cl_int status = CL_COMPLETE;
        cl_int err = clGetEventInfo(events[i], CL_EVENT_CONTEXT, sizeof c, &c, NULL);
        if (err == CL_SUCCESS)
            err = clGetEventInfo(events[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                 &status, NULL);
        if (err != CL_SUCCESS)
            return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "events[%u] is not an event: "
                              "clGetEventInfo failed with %s", i, clkit_cl_error_name(err));
        if (c != ctx->cl)
            return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE,
                              "events[%u] belongs to another cl_context than the queue's", i);
        if (status < 0)
            return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE,
                              "events[%u] has failed (execution status %d)", i, status);
    }
    cl_int err = clEnqueueBarrierWithWaitList(ctx->queue, n, events, NULL);
    return err == CL_SUCCESS ? CLKIT_OK : clkit_cl_fail(ctx, err, "clEnqueueBarrierWithWaitList");
}

clkit_status clkit_enqueue_marker(clkit_context *ctx, cl_event *event)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!event) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "event is NULL");
    *event = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    if (err == CL_SUCCESS) return CLKIT_OK;
    *event = NULL;
    return clkit_cl_fail(ctx, err, "clEnqueueMarkerWithWaitList");
}
