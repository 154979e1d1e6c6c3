/* Tensor maps for Hopper's TMA (cl/nv_mma.h: nv_tma_load) from an OpenCL host.

   A tensor map is a 128-byte descriptor of a tensor's dims, strides and box that only the CUDA
   driver encodes (cuTensorMapEncodeTiled). The driver library is loaded at run time, so clkit
   neither links nor needs CUDA; the encoder wants a current CUDA context, for which the
   device's primary context (the one the CUDA runtime and PyTorch share) is retained once and
   made current only around each call, leaving the caller's thread state as it was. The map
   is encoded with a placeholder address: OpenCL does not tell the host where a buffer lives,
   so the kernel writes the operand's address into its copy (nv_tmap_publish). Kernels get
   their maps by value and store them in the context's one slot in global memory: the queue
   is in order, so no call's kernel runs while another rewrites it. Anything missing (no libcuda, an old driver, a device
   the CUDA driver does not list) leaves the TMA off and the kernels on cp.async. */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl_ext.h>

#define TMA_SLOT_BYTES 256 /* two maps: A and B */

/* The few CUDA driver types and values used here (cuda.h). */
enum { CU_OK = 0, CU_TYPE_UINT16 = 1, CU_SWIZZLE_128B = 3, CU_L2_256B = 3 };
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_by_pci_fn)(int *, const char *);
typedef int (*cu_device_count_fn)(int *);
typedef int (*cu_device_get_fn)(int *, int);
typedef int (*cu_ctx_retain_fn)(void **, int);
typedef int (*cu_ctx_release_fn)(int);
typedef int (*cu_ctx_push_fn)(void *);
typedef int (*cu_ctx_pop_fn)(void **);
typedef int (*cu_encode_fn)(void *map, int type, unsigned rank, void *address, const uint64_t *dims,
                            const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                            int interleave, int swizzle, int l2, int oob_fill);

struct clkit_tma {
    void *lib;
    int device;
    void *cu_ctx;
    cu_ctx_release_fn release;
    cu_ctx_push_fn push;
    cu_ctx_pop_fn pop;
    cu_encode_fn encode;
    cl_mem slot;
};

#define CL_PCI_BUS_INFO_KHR 0x410F
typedef struct { cl_uint domain, bus, device, function; } pci_bus_info;

/* The CUDA device that is this OpenCL device: by PCI address where OpenCL reports it, else
   the only CUDA device there is. */
static int cuda_device(void *lib, cl_device_id dev, int *out)
{
    pci_bus_info pci;
    char id[32];
    cu_device_by_pci_fn by_pci = (cu_device_by_pci_fn)dlsym(lib, "cuDeviceGetByPCIBusId");
    if (by_pci && clGetDeviceInfo(dev, CL_PCI_BUS_INFO_KHR, sizeof pci, &pci, NULL) == CL_SUCCESS) {
        snprintf(id, sizeof id, "%04x:%02x:%02x.%x", pci.domain & 0xffff, pci.bus & 0xff,
                 pci.device & 0x1f, pci.function & 0x7);
        if (by_pci(out, id) == CU_OK) return 1;
    }
    cu_device_count_fn count = (cu_device_count_fn)dlsym(lib, "cuDeviceGetCount");
    cu_device_get_fn get = (cu_device_get_fn)dlsym(lib, "cuDeviceGet");
    int n = 0;
    return count && get && count(&n) == CU_OK && n == 1 && get(out, 0) == CU_OK;
}

static int load_driver(clkit_context *ctx, struct clkit_tma *t)
{
    t->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!t->lib) return 0;
    cu_init_fn init = (cu_init_fn)dlsym(t->lib, "cuInit");
    cu_ctx_retain_fn retain = (cu_ctx_retain_fn)dlsym(t->lib, "cuDevicePrimaryCtxRetain");
    t->release = (cu_ctx_release_fn)dlsym(t->lib, "cuDevicePrimaryCtxRelease_v2");
    t->push = (cu_ctx_push_fn)dlsym(t->lib, "cuCtxPushCurrent_v2");
    t->pop = (cu_ctx_pop_fn)dlsym(t->lib, "cuCtxPopCurrent_v2");
    t->encode = (cu_encode_fn)dlsym(t->lib, "cuTensorMapEncodeTiled");
    if (!init || !retain || !t->release || !t->push || !t->pop || !t->encode) return 0;
    if (init(0) != CU_OK || !cuda_device(t->lib, ctx->device, &t->device)) return 0;
    return retain(&t->cu_ctx, t->device) == CU_OK;
}

static void tma_free(struct clkit_tma *t)
{
    if (t->slot) clReleaseMemObject(t->slot);
    if (t->cu_ctx) t->release(t->device);
    if (t->lib) dlclose(t->lib);
    free(t);
}

/* Sets ctx->tma up on first use; false (and the TMA off for good) where anything is missing. */
static bool tma_ready(clkit_context *ctx)
{
    if (ctx->tma) return true;
    if (ctx->tma_off || !ctx->props.wgmma) return false;
    const char *env = getenv("CLKIT_NV_TMA");
    struct clkit_tma *t = (env && strcmp(env, "0") == 0) ? NULL : calloc(1, sizeof *t);
    cl_int err;
    if (t && load_driver(ctx, t))
        t->slot = clCreateBuffer(ctx->cl, CL_MEM_READ_WRITE, TMA_SLOT_BYTES, NULL, &err);
    if (!t || !t->slot) {
        clkit_log(CLKIT_LOG_INFO, "TMA off (%s): matmul copies on cp.async",
                  !t ? "CLKIT_NV_TMA=0 or no memory" : !t->cu_ctx ? "no CUDA context for this device" : "no slot buffer");
        if (t) tma_free(t);
        ctx->tma_off = true;
        return false;
    }
    ctx->tma = t;
    return true;
}

bool clkit_tma_on(clkit_context *ctx) { return tma_ready(ctx); }

void clkit_tma_release(clkit_context *ctx)
{
    if (ctx->tma) tma_free(ctx->tma);
    ctx->tma = NULL;
}

int clkit_tma_map(clkit_context *ctx, const clkit_tma_view *v, void *map)
{
    if (!tma_ready(ctx)) return 0;
    struct clkit_tma *t = ctx->tma;
    uint64_t dims[3] = {v->inner, v->rows, v->batch > 1 ? v->batch : 1};
    uint64_t strides[2] = {v->row_stride * 2, (v->batch > 1 ? v->batch_stride : v->rows * v->row_stride) * 2};
    uint32_t box[3] = {v->box_inner, v->box_rows, 1}, unit[3] = {1, 1, 1};
    void *prev = NULL;
    if (t->push(t->cu_ctx) != CU_OK) return 0;
    int rc = t->encode(map, CU_TYPE_UINT16, 3, (void *)(uintptr_t)256, dims, strides, box, unit, 0,
                       CU_SWIZZLE_128B, CU_L2_256B, 0);
    t->pop(&prev);
    if (rc != CU_OK) clkit_log(CLKIT_LOG_DEBUG, "TMA: no tensor map (CUDA error %d) for this view", rc);
    return rc == CU_OK;
}

clkit_status clkit_tma_set_args(clkit_context *ctx, cl_kernel k, cl_uint first, const void *a_map,
                                const void *b_map)
{
    clkit_status s = clkit_set_arg(ctx, k, first, sizeof(cl_mem), &ctx->tma->slot);
    if (!s) s = clkit_set_arg(ctx, k, first + 1, 128, a_map);
    return s ? s : clkit_set_arg(ctx, k, first + 2, 128, b_map);
}
