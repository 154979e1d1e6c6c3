/*
 * clkit — portable GPU kernels (the Triton tutorials) for every OpenCL device.
 *
 * One context = one device + one in-order queue. Ops validate their arguments, enqueue
 * and return at once, like launches on a CUDA stream; clkit_finish() waits. Tensors are
 * descriptors over buffers the caller owns. A context is not thread-safe: use one per thread.
 */
#ifndef CLKIT_H
#define CLKIT_H

#include <stddef.h>
#include <stdint.h>

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libclkit is built with hidden visibility: what this header declares is its whole ABI. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define CLKIT_VERSION_MAJOR 0
#define CLKIT_VERSION_MINOR 3
#define CLKIT_VERSION_PATCH 0
#define CLKIT_VERSION_STRING "0.3.0"

/* Every status, its clkit_status_string and its meaning, in one list. */
#define CLKIT_STATUS_LIST(X)                                                                  \
    X(CLKIT_OK, "ok")                                                                         \
    /* a required pointer (context, tensor, buffer) is NULL */                                \
    X(CLKIT_ERR_NULL_ARGUMENT, "null argument")                                               \
    /* a scalar argument out of range (p, eps, group_size, ...) */                            \
    X(CLKIT_ERR_INVALID_VALUE, "invalid value")                                               \
    /* dtype not supported by the op, or mismatched */                                        \
    X(CLKIT_ERR_DTYPE, "unsupported or mismatched dtype")                                     \
    /* ndim outside 1..4 or not what the op takes */                                          \
    X(CLKIT_ERR_NDIM, "wrong number of dimensions")                                           \
    /* negative, or mismatched between tensors */                                             \
    X(CLKIT_ERR_SHAPE, "bad or mismatched shape")                                             \
    /* stride not usable: misaligned offset, output self-overlap */                           \
    X(CLKIT_ERR_STRIDE, "unusable strides or offset")                                         \
    /* the view reaches past the end of its buffer */                                         \
    X(CLKIT_ERR_OUT_OF_BOUNDS, "view past the end of its buffer")                             \
    /* an output overlaps an input where the op forbids it */                                 \
    X(CLKIT_ERR_OVERLAP, "output overlaps an input")                                          \
    /* element or byte count overflows 64-bit arithmetic */                                   \
    X(CLKIT_ERR_OVERFLOW, "size overflows")                                                   \
    /* no OpenCL platform/device matches */                                                   \
    X(CLKIT_ERR_NO_DEVICE, "no OpenCL device")                                                \
    /* a kernel failed to compile: see clkit_last_error */                                    \
    X(CLKIT_ERR_BUILD, "kernel build failed")                                                 \
    /* an OpenCL call failed: the code is in clkit_last_error */                              \
    X(CLKIT_ERR_OPENCL, "OpenCL error")                                                       \
    /* host or device allocation failed */                                                    \
    X(CLKIT_ERR_OUT_OF_MEMORY, "out of memory")                                               \
    /* the device lacks a feature the op needs */                                             \
    X(CLKIT_ERR_UNSUPPORTED, "unsupported by the device")                                     \
    /* a file (cache, export) could not be read or written */                                 \
    X(CLKIT_ERR_IO, "file input/output failed")

typedef enum clkit_status {
#define CLKIT_STATUS_ENUM_(name, text) name,
    CLKIT_STATUS_LIST(CLKIT_STATUS_ENUM_)
#undef CLKIT_STATUS_ENUM_
    CLKIT_STATUS_COUNT
} clkit_status;

typedef enum clkit_dtype {
    CLKIT_F32, CLKIT_F16, CLKIT_BF16, CLKIT_U8, CLKIT_I32, CLKIT_I64
} clkit_dtype;

#define CLKIT_MAX_DIMS 4

typedef struct clkit_tensor {
    cl_mem buffer; size_t offset;          /* offset in bytes */
    clkit_dtype dtype; int ndim;           /* 1..4 */
    int64_t shape[4]; int64_t strides[4];  /* strides in elements */
} clkit_tensor;

#define CLKIT_CACHE_MAX_MB_DEFAULT 512

typedef struct clkit_options {
    const char *device;     /* NULL: $CLKIT_DEVICE, else first GPU, else first device.
                               An index ("1") or a case-insensitive substring of
                               "platform platform-vendor device vendor type" ("nvidia",
                               "amd", "pocl", "cpu", "gpu"): the first GPU that matches,
                               else the first device that does. */
    const char *cache_dir;  /* NULL: $CLKIT_CACHE_DIR, else $XDG_CACHE_HOME/clkit,
                               else ~/.cache/clkit. "" disables the on-disk cache. Its
                               compiled programs are capped at $CLKIT_CACHE_MAX_MB megabytes
                               (default CLKIT_CACHE_MAX_MB_DEFAULT, 0: no cap), the least
                               recently used removed first. */
    int profiling;          /* nonzero: profiling queue, needed for clkit_profile_* */
} clkit_options;

/* A struct tag, not a typedef: clkit_device_props() is the function that fills it. */
struct clkit_device_props {
    char platform[128], vendor[128], name[128], driver[64];
    char device_version[64], c_version[64];   /* "OpenCL 3.0 ...", "OpenCL C 1.2 ..." */
    int is_gpu, is_cpu;
    unsigned compute_units;
    uint64_t global_mem, max_alloc;
    uint64_t local_mem;          /* bytes per work-group */
    uint64_t local_mem_static;   /* bytes of __local a kernel may declare in its source: local_mem,
                                    or more where the driver allows it (NVIDIA sm_90: 226 KiB) */
    size_t max_work_group;       /* the hardware limit (AMD's 0x4031 where reported) */
    unsigned warp;               /* warp / wavefront width; 1 when unknown (CPU) */
    unsigned registers;          /* 32-bit registers per block, 0 when unknown */
    int nv_cc_major, nv_cc_minor;  /* 0 when not NVIDIA */
    char amd_gfx[32];            /* "gfx90a", "" when not AMD */
    unsigned simd_per_cu;        /* AMD; 0 when unknown */
    int fp16, fp64, subgroups;
    int opencl_c_major, opencl_c_minor;
};

/* ---- f16 and bf16 on the host (host/half.c) ---- */
/* For filling and reading CLKIT_F16 (IEEE binary16) and CLKIT_BF16 (the top half of an f32)
   buffers, whose elements are these uint16_t. To 16 bits rounds to nearest, ties to even,
   keeps subnormals, overflows to infinity and keeps a NaN a NaN of its sign (made quiet);
   back to f32 is exact (an f16 NaN comes back quiet). Plain functions of their argument: no
   context, any thread. */
uint16_t     clkit_f32_to_f16(float x);
float        clkit_f16_to_f32(uint16_t h);
uint16_t     clkit_f32_to_bf16(float x);
float        clkit_bf16_to_f32(uint16_t b);

/* ---- context ---- */
typedef struct clkit_context clkit_context;

clkit_status clkit_context_create(clkit_context **ctx, const clkit_options *opt);
/* Adopts a queue the host program made (retained; released with the context). */
clkit_status clkit_context_from_queue(clkit_context **ctx, cl_command_queue queue);
void         clkit_context_release(clkit_context *ctx);
clkit_status clkit_context_cl(const clkit_context *ctx, cl_context *c, cl_command_queue *q,
                              cl_device_id *d);
clkit_status clkit_finish(clkit_context *ctx);
const char  *clkit_status_string(clkit_status s);
/* The version of the library loaded at run time ("0.3.0"); CLKIT_VERSION_STRING is the
   version of the header a program was compiled with. */
const char  *clkit_version(void);
/* Detail of the last failure on this context (shape, build log, OpenCL code); "" if none. */
const char  *clkit_last_error(const clkit_context *ctx);
clkit_status clkit_device_props(const clkit_context *ctx, struct clkit_device_props *out);
const char  *clkit_dtype_name(clkit_dtype t);
size_t       clkit_dtype_size(clkit_dtype t);

/* Vendor fast paths, as bits of clkit_fast_paths. */
typedef enum clkit_fast_path {
    CLKIT_FAST_PATH_NV_SHUFFLE = 1 << 0, /* PTX warp shuffles in softmax and layer norm */
    CLKIT_FAST_PATH_NV_MMA = 1 << 1,     /* tensor cores through mma.sync (sm_80+) */
    CLKIT_FAST_PATH_NV_WGMMA = 1 << 2,   /* Hopper's wgmma (sm_90) */
    CLKIT_FAST_PATH_NV_TMA = 1 << 3,     /* wgmma tiles loaded by Hopper's TMA */
    CLKIT_FAST_PATH_AMD_MFMA = 1 << 4,   /* AMD CDNA matrix cores (gfx90a, gfx94x) */
    CLKIT_FAST_PATH_AMD_WMMA = 1 << 5    /* AMD RDNA3 matrix cores (gfx11) */
} clkit_fast_path;

/* The fast paths the op family `op` ("matmul", "attention", "cross_entropy", "softmax",
   "layernorm") may take on this context now, as clkit_fast_path bits, of those its kernels
   have: matmul NV_MMA, NV_WGMMA, NV_TMA, AMD_MFMA and AMD_WMMA; cross_entropy the NV ones;
   attention the NV ones and AMD_MFMA; softmax and layernorm NV_SHUFFLE. The device and the switches
   (CLKIT_TENSOR_CORES, CLKIT_WGMMA, CLKIT_NV_TMA, CLKIT_AMD_MATRIX = 0) set them; a path whose program fails to build, or whose known-answer test
   fails on this device, is off from then on for the family that found it, and only that one
   (the call that found it runs on the next path down). Whether a call takes a path also
   depends on its operands (dtypes, strides, alignment). An unknown family:
   CLKIT_ERR_INVALID_VALUE. */
clkit_status clkit_fast_paths(clkit_context *ctx, const char *op, unsigned *paths);

/* Kernel time of everything enqueued between begin and end, from the first kernel's start
   to the last one's end (profiling events). Needs a profiling queue. end waits. */
clkit_status clkit_profile_begin(clkit_context *ctx);
clkit_status clkit_profile_end(clkit_context *ctx, double *ms);

/* Most device memory (bytes) the ops of this context held at once for intermediate results
   since the context was made or the last reset (reset nonzero). */
uint64_t     clkit_scratch_peak(clkit_context *ctx, int reset);
/* Frees the scratch buffers that the context keeps after ops release them (up to 8, reused
   by later calls of similar size; clkit_context_release frees them too). */
void         clkit_context_trim(clkit_context *ctx);

/* ---- tensors ---- */
clkit_tensor clkit_tensor_contiguous(cl_mem buffer, clkit_dtype dtype, int ndim,
                                     const int64_t *shape);

/* ---- ops ---- */
/* out = x + y, elementwise over same-shaped views (1..4-D, any strides: x and y may broadcast
   a dim by a zero stride, and may be one view); f32/f16/bf16. out may be exactly x or y (the
   same buffer, offset, dtype and strides: in place); any other overlap of out with x or y
   fails with CLKIT_ERR_OVERLAP. A dim of 0: nothing to do, CLKIT_OK. */
clkit_status clkit_add(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *y,
                       const clkit_tensor *out);
/* out = x for views of one shape in any layouts; float dtypes may convert into each other.
   out may be exactly x (nothing to do); any other overlap fails with CLKIT_ERR_OVERLAP. A dim
   of 0: nothing to do. */
clkit_status clkit_copy(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out);
/* (3, H, W) -> (H, W), u8 or f32: 0.2989 R + 0.5870 G + 0.1140 B (u8 rounds to nearest).
   gray may not overlap rgb (CLKIT_ERR_OVERLAP). H or W 0: nothing to do. */
clkit_status clkit_rgb_to_gray(clkit_context *ctx, const clkit_tensor *rgb,
                               const clkit_tensor *gray);
/* out[swizzle2d(i, j)] = x[i, j] with Triton's tl.swizzle2d grouping of group_size rows (at
   least 1, else CLKIT_ERR_INVALID_VALUE; more than M acts as M). A permutation: out may not
   overlap x at all, in place neither (CLKIT_ERR_OVERLAP). M or N 0: nothing to do. */
clkit_status clkit_swizzle2d(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out,
                             int group_size);
/* out = keep ? x / (1 - p) : 0, keep drawn from Philox4x32-10(seed, element index): the
   row-major index in the view, whatever its strides. p in [0, 1], 1 dropping everything
   (zeros, inf and NaN inputs too, as PyTorch's p = 1); NaN or outside: CLKIT_ERR_INVALID_VALUE.
   out may be exactly x (in place), no other overlap (CLKIT_ERR_OVERLAP). A dim of 0: nothing
   to do. */
clkit_status clkit_dropout(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out,
                           float p, uint64_t seed);
/* Row-wise softmax over the last dimension of (M, N), any strides. out may be exactly x (in
   place), no other overlap (CLKIT_ERR_OVERLAP). M = 0: nothing to do; rows of nothing (N = 0,
   M > 0) have no softmax: CLKIT_ERR_SHAPE. */
clkit_status clkit_softmax(clkit_context *ctx, const clkit_tensor *x, const clkit_tensor *out);

/* ---- matmul ---- */
typedef enum clkit_activation {
    CLKIT_ACT_NONE, CLKIT_ACT_RELU, CLKIT_ACT_LEAKY_RELU
} clkit_activation;

typedef enum clkit_provider {
    CLKIT_PROVIDER_AUTO,    /* tuned choice from the cache, else clkit's heuristic default */
    CLKIT_PROVIDER_CLKIT,   /* clkit's own kernels */
    CLKIT_PROVIDER_CLBLAST  /* CLBlast's GEMM (f32, no activation; else UNSUPPORTED, as is
                               every call to a libclkit built without CLBlast). Calls
                               whose strides BLAS cannot express (zero, negative or
                               overlapping; neither dimension of unit stride) or with K = 0
                               run on clkit's kernels instead. */
} clkit_provider;

typedef struct clkit_matmul_options {
    float alpha, beta;            /* C = act(alpha * A @ B + beta * C) */
    clkit_activation activation;
    float leaky_slope;            /* negative slope of leaky_relu */
    clkit_provider provider;
    /* Overrides the cache and the heuristic, e.g. "KERNEL=2,BLOCK_M=64,BLOCK_N=64,BLOCK_K=8,
       THREAD_M=4,THREAD_N=4,GROUP_M=8" (KERNEL 0 naive, 1 tiled, 2 register-blocked,
       3 skinny (a few rows, B streamed once): SK_COLS, SK_K, SK_M, SK_LOADS and splits, the
       work-groups K is split over (0 or absent: automatic; results are the same every run),
       4 NVIDIA tensor cores: BLOCK_M, BLOCK_N, BLOCK_K, WARPS_M, WARPS_N, STAGES, GROUP_M,
       WGMMA (1: Hopper's wgmma) and splits, as for 3 (automatic: grids short of the
       device's compute units split);
       5 AMD matrix cores: BLOCK_M, BLOCK_N, BLOCK_K, WAVES_M, WAVES_N, GROUP_M); "provider=1"
       alone names CLBlast's GEMM, as `clkit tune` records a win of CLBlast's (1 here is not
       CLKIT_PROVIDER_CLKIT). */
    const char *config;
    /* f32 operands on NVIDIA tensor cores. By default they run there as 3xTF32 (each operand
       split into its TF32 part and the remainder, three TF32 products a step, each step's sum
       added to the accumulator by an f32 add): at most 2^-19 of a product is lost, and the
       result is as accurate as an f32 FMA loop's (measurements:
       docs/nvidia-tensor-cores.md#numbers-f32-matmul-on-an-h100).
       Nonzero allow_tf32 rounds each input to TF32 instead (10 mantissa bits, f32 range, f32
       accumulation), as PyTorch's allow_tf32: about 2^-11 relative error per input, faster.
       Nonzero exact_f32 keeps f32 off the tensor cores: every product an f32 FMA (the portable
       kernels or CLBlast). Setting both is an error. */
    int allow_tf32;
    int exact_f32;
} clkit_matmul_options;

/* alpha 1, beta 0, no activation, leaky slope 0.01, provider AUTO, no config. */
clkit_matmul_options clkit_matmul_defaults(void);

/* C = act(alpha * A @ B + beta * C): A (M, K), B (K, N), C (M, N), any strides (transposed
   views need no copy); 3-D tensors add a leading batch dimension, a batch stride of 0 (or a
   2-D operand) broadcasting. Inputs f32, f16 or bf16 (A and B alike), f32 accumulation; C is
   f32, or for f16/bf16 inputs any of f32, f16, bf16. opt NULL: the defaults.
   beta = 0 never reads C (as BLAS: NaN or garbage in C does not reach the result). M, N or
   batch 0: nothing to do, OK. K = 0: C = act(beta * C). C may not overlap A or B.
   On NVIDIA GPUs of compute capability 8.0 and later, f16/bf16 operands go through the tensor
   cores (mma.sync) when each has a unit-stride dimension and its other strides and offset are
   multiples of 8 elements (f32 operands: multiples of 4, unless exact_f32). 16-bit operands
   that miss that alignment are copied into scratch with padded rows and multiplied there
   where the product does at least 32 flops a byte copied (clkit_scratch_peak counts the
   copies); other operands, and every other device, take the portable kernels. */
clkit_status clkit_matmul(clkit_context *ctx, const clkit_tensor *a, const clkit_tensor *b,
                          const clkit_tensor *c, const clkit_matmul_options *opt);

/* ---- layer norm ---- */
/* y = (x - mean) * rstd * weight + bias over the last dimension of (M, N), any row strides.
   x and y f32, f16 or bf16 (alike); weight and bias (N) in x's dtype, each may be NULL (no
   affine part). mean and rstd (M, f32) receive the row statistics for the backward; either
   may be NULL. eps guards the variance (rstd = 1 / sqrt(var + eps)): finite and > 0, else
   CLKIT_ERR_INVALID_VALUE. y may be exactly x (in place: the same buffer, offset, dtype and
   strides); no other output may overlap an input or another output (CLKIT_ERR_OVERLAP). M = 0:
   nothing to do; rows of nothing (N = 0, M > 0) have no mean: CLKIT_ERR_SHAPE. */
clkit_status clkit_layernorm_forward(clkit_context *ctx, const clkit_tensor *x,
                                     const clkit_tensor *weight, const clkit_tensor *bias,
                                     float eps, const clkit_tensor *y, const clkit_tensor *mean,
                                     const clkit_tensor *rstd);
/* Gradients of clkit_layernorm_forward given dy, the same x and weight (NULL when the forward
   had none) and the saved mean and rstd. dx (M, N) in x's dtype; dweight and dbias (N) in
   x's dtype, accumulated in f32, each may be NULL. Deterministic: partial sums over a fixed
   partition of the rows, reduced in a fixed order, so reruns are bitwise equal. weight NULL
   is a weight of ones: dweight may still be asked for, the gradient at that unit weight. dx
   may be exactly dy (in place), no other overlap (CLKIT_ERR_OVERLAP). M = 0: dx is empty and
   dweight and dbias, sums over no rows, are zeros; N = 0 with M > 0: CLKIT_ERR_SHAPE. */
clkit_status clkit_layernorm_backward(clkit_context *ctx, const clkit_tensor *dy,
                                      const clkit_tensor *x, const clkit_tensor *weight,
                                      const clkit_tensor *mean, const clkit_tensor *rstd,
                                      const clkit_tensor *dx, const clkit_tensor *dweight,
                                      const clkit_tensor *dbias);

/* ---- cross-entropy ---- */
typedef enum clkit_reduction {
    CLKIT_REDUCTION_MEAN,  /* over the tokens whose target is not ignore_index (0 if none) */
    CLKIT_REDUCTION_SUM,
    CLKIT_REDUCTION_NONE   /* one loss per token; gradients of their sum */
} clkit_reduction;
typedef struct clkit_cross_entropy_options {
    int64_t ignore_index;      /* tokens with this target add no loss and no gradient */
    clkit_reduction reduction;
    float label_smoothing;     /* in [0, 1]: targets (1 - e) one-hot + e / V, as PyTorch */
    float softcap;             /* > 0: logits become softcap * tanh(z / softcap) first */
    float z_loss_scale;        /* > 0: adds z_loss_scale * lse^2 per token to the loss */
    /* Receives the z-loss part alone (reduced like the loss), f32, shaped like loss; NULL:
       not wanted. */
    const clkit_tensor *z_loss;
} clkit_cross_entropy_options;
/* ignore_index -100, mean, no smoothing, no soft-cap, no z-loss. */
clkit_cross_entropy_options clkit_cross_entropy_defaults(void);
/* Fused log-softmax + negative log-likelihood over the rows of logits (T, V), any strides.
   logits f32, f16 or bf16; targets (T) i32 or i64; loss f32, shape (1) for mean and sum, (T)
   for none. dlogits (T, V, logits' dtype) receives the gradient of the loss and may be
   exactly logits (an in-place gradient); NULL: forward only. A target outside [0, V) other
   than ignore_index fails with CLKIT_ERR_INVALID_VALUE, found without reading outside
   logits (the check waits for the device). V from 1 and T from 0 to 2^31 - 1: no tokens is
   an empty batch, which writes no per-token loss and no dlogits, and whose mean and sum
   (and z-losses) are 0, the mean as when every token is ignored. For the mean, dlogits
   holds p / count in the logits' dtype, so f16 values sink below its normal range (6.1e-5)
   as the count grows. A row of all -inf logits gives a NaN loss and gradient, as in
   PyTorch. opt NULL: the defaults. */
clkit_status clkit_cross_entropy(clkit_context *ctx, const clkit_tensor *logits,
                                 const clkit_tensor *targets,
                                 const clkit_cross_entropy_options *opt, const clkit_tensor *loss,
                                 const clkit_tensor *dlogits);
/* clkit_cross_entropy of the logits x (T, D) @ weight (V, D)^T + bias (V, may be NULL), which
   are never stored whole: V is walked in chunks whose logits live in a bounded scratch
   buffer, with an online log-sum-exp across chunks; the backward recomputes each chunk.
   x, weight, bias and the gradients dx (T, D), dweight (V, D), dbias (V) share one dtype (f32,
   f16, bf16); the weight gradients accumulate in f32. Any gradient may be NULL; dbias may be
   asked for without a bias (the gradient at a zero bias). A chunk is the most multiple of 128
   columns whose f32 logits (and 16-bit gradient, for f16/bf16) fit min(64 MiB, max_alloc / 2);
   where the GEMMs run fused on NVIDIA tensor cores, the chunk scratch may take T x V / 2
   bytes, between 224 MiB and 1 GiB ($CLKIT_LCE_CHUNK overrides both); extra memory is that
   chunk plus O(T + V), plus an f32 (T, D) accumulator when dx is f16/bf16
   (clkit_scratch_peak reports it). The logits' gradient is
   kept as that of the summed loss and the mean's 1 / count is applied in f32, so f16
   gradients of the mean are as accurate as the sum's at any T. T = 0 is valid: dx is
   empty, dweight and dbias (sums over no tokens) are zeros, the losses as
   clkit_cross_entropy's. */
clkit_status clkit_linear_cross_entropy(clkit_context *ctx, const clkit_tensor *x,
                                        const clkit_tensor *weight, const clkit_tensor *bias,
                                        const clkit_tensor *targets,
                                        const clkit_cross_entropy_options *opt,
                                        const clkit_tensor *loss, const clkit_tensor *dx,
                                        const clkit_tensor *dweight, const clkit_tensor *dbias);

/* ---- attention ---- */
/* Where the causal mask's diagonal sits when Lq != Lk. */
enum {
    CLKIT_CAUSAL_NONE = 0,
    CLKIT_CAUSAL_TOP_LEFT = 1,     /* query i sees keys j <= i (PyTorch's is_causal) */
    CLKIT_CAUSAL_BOTTOM_RIGHT = 2, /* query i sees keys j <= i + Lk - Lq: the last query sees
                                      every key, as FlashAttention's causal (decoding against
                                      a KV cache); a query that sees no key gets o = 0 and
                                      lse = -inf */
};
typedef struct clkit_attention_options {
    int causal;   /* CLKIT_CAUSAL_*: 0 none, 1 top-left, 2 bottom-right */
    float scale;  /* applied to q k^T; 0: 1 / sqrt(D) */
} clkit_attention_options;
/* Not causal, scale 1 / sqrt(D). */
clkit_attention_options clkit_attention_defaults(void);
/* o = softmax(scale q k^T [+ causal mask]) v, fused (flash attention: the Lq x Lk scores are
   never stored). q (B, Hq, Lq, D); k and v (B, Hkv, Lk, D) with Hq a multiple of Hkv (grouped-
   query attention: query head h reads kv head h / (Hq / Hkv)); any strides. o (B, Hq, Lq, D)
   in q's dtype; lse (B, Hq, Lq) f32 receives the natural-log log-sum-exp of each score row for
   the backward, may be NULL. f32, f16 or bf16 (q, k, v, o alike), f32 accumulation; D of 16,
   32, 64, 128 or 256 (other D fail with CLKIT_ERR_UNSUPPORTED). opt NULL: the defaults; a
   scale that is NaN, infinite or negative fails with CLKIT_ERR_INVALID_VALUE. No output may
   overlap an input or the other output, in place neither (CLKIT_ERR_OVERLAP). B, Hq or Lq 0:
   nothing to do; Lk = 0 (no keys): o = 0 and lse = -inf. */
clkit_status clkit_attention_forward(clkit_context *ctx, const clkit_tensor *q,
                                     const clkit_tensor *k, const clkit_tensor *v,
                                     const clkit_attention_options *opt, const clkit_tensor *o,
                                     const clkit_tensor *lse);
/* Gradients of clkit_attention_forward given its o and lse and the gradient dout of o. dq, dk
   and dv are shaped and typed like q, k and v; with grouped-query attention dk and dv sum
   over the query heads sharing a kv head, in a fixed order (deterministic). Checks as the
   forward's. Sums over nothing are zeros: Lk = 0 gives dq = 0; Lq = 0, or Hq = 0 (kv heads
   that serve no query head), gives dk = dv = 0. B = 0: nothing to do. Device memory beside
   the tensors: Lq f32 a query head; on Hopper at D 128 also dS, Lq x Lk x 2 bytes a query
   head, a chunk of kv heads at a time within CLKIT_ATTN_DS_MB (README). */
clkit_status clkit_attention_backward(clkit_context *ctx, const clkit_tensor *q,
                                      const clkit_tensor *k, const clkit_tensor *v,
                                      const clkit_tensor *o, const clkit_tensor *dout,
                                      const clkit_tensor *lse, const clkit_attention_options *opt,
                                      const clkit_tensor *dq, const clkit_tensor *dk,
                                      const clkit_tensor *dv);

/* ---- autotuning ---- */
typedef struct clkit_tune_options {
    double budget_s;   /* the whole call's: no candidate starts after this many seconds once
                          one has run (checked between candidates; until one runs, they go
                          on); 0: no limit; negative or NaN: CLKIT_ERR_INVALID_VALUE */
    /* Called after each candidate: done of total, its config, its time (ms; < 0 if it failed
       to build or run) and the best time so far. */
    void (*progress)(void *user, int done, int total, const char *config, double ms,
                     double best_ms);
    void *user;
} clkit_tune_options;

/* Times every candidate configuration of clkit_matmul on these tensors' shapes, layouts and
   dtypes (C is not modified: candidates write a scratch copy) and stores the fastest in the
   tuned-config cache. With CLKIT_AUTOTUNE=1, clkit_matmul does this itself on a cache miss. */
clkit_status clkit_tune_matmul(clkit_context *ctx, const clkit_tensor *a, const clkit_tensor *b,
                               const clkit_tensor *c, const clkit_matmul_options *opt,
                               const clkit_tune_options *topt);

/* Times every portable tile configuration of the attention pass on this call (its outputs are
   written, as by the call) and stores the fastest in the tuned-config cache, keyed by Lq, Lk,
   D, B x Hq, dtype and causal. CLKIT_ERR_UNSUPPORTED where the call runs on the tensor-core
   kernels, whose tiles are fixed. With CLKIT_AUTOTUNE=1 the attention ops do this themselves
   on a cache miss. */
clkit_status clkit_tune_attention_forward(clkit_context *ctx, const clkit_tensor *q,
                                          const clkit_tensor *k, const clkit_tensor *v,
                                          const clkit_attention_options *opt,
                                          const clkit_tensor *o, const clkit_tensor *lse,
                                          const clkit_tune_options *topt);
clkit_status clkit_tune_attention_backward(clkit_context *ctx, const clkit_tensor *q,
                                           const clkit_tensor *k, const clkit_tensor *v,
                                           const clkit_tensor *o, const clkit_tensor *dout,
                                           const clkit_tensor *lse,
                                           const clkit_attention_options *opt,
                                           const clkit_tensor *dq, const clkit_tensor *dk,
                                           const clkit_tensor *dv, const clkit_tune_options *topt);

/* ---- tuned configurations ($CLKIT_CACHE_DIR/tuned.json) ---- */
/* The cache directory in use ("" when disabled). */
const char  *clkit_cache_dir(const clkit_context *ctx);
typedef void (*clkit_tuned_entry_fn)(void *user, const char *op, const char *dtype,
                                     const char *layout, const char *shape, const char *config,
                                     double ms);
/* Calls fn for each tuned entry of this context's device. shape is the entry's key as JSON
   array text, e.g. "[ 4096, 4096, 4096, 1 ]": matmul M, N, K and batch; attention Lq, Lk, the
   head dim and batch x query heads. config is a config string as clkit_matmul_options.config
   takes it; ms the time it was tuned at. */
clkit_status clkit_tuned_list(clkit_context *ctx, clkit_tuned_entry_fn fn, void *user);
/* Writes every tuned entry (all devices) to path, to ship with a deployment. Malformed entries
   are skipped with a warning; an unreadable or corrupt tuned.json is CLKIT_ERR_IO. */
clkit_status clkit_tuned_export(clkit_context *ctx, const char *path);
/* Merges the entries of an exported file into the cache; entries of the same key are replaced,
   malformed ones skipped with a warning (a file with none usable is CLKIT_ERR_IO). Files are
   read only when regular and at most 64 MiB. */
clkit_status clkit_tuned_import(clkit_context *ctx, const char *path);

/* ---- hooks: log callback, events, benchmarking (host/context.c, host/benchmark.c) ---- */

/* The levels of the library's diagnostics, as CLKIT_LOG names them. */
typedef enum clkit_log_level {
    CLKIT_LOG_ERROR = 1, CLKIT_LOG_WARN, CLKIT_LOG_INFO, CLKIT_LOG_DEBUG
} clkit_log_level;
/* One diagnostic: its level and its text, without the "clkit warn: " prefix and newline that
   stderr gets. message lives until fn returns. */
typedef void (*clkit_log_fn)(void *user, clkit_log_level level, const char *message);
/* Sends the diagnostics to fn instead of stderr; fn NULL: to stderr again. Process-wide, as
   CLKIT_LOG is, for every context and thread: many messages come from where no context is
   (a failed creation, the cache files). Only levels CLKIT_LOG lets through (default warn)
   reach fn. Deliveries are serialised: fn runs on the thread that logs, one call at a time,
   and may call clkit (a message that causes comes to fn nested); it must not wait for another
   thread that uses clkit. Once this returns, no other thread is inside the previous fn or
   calls it again, so its user may be freed. */
void         clkit_set_log_callback(clkit_log_fn fn, void *user);

/* Events in and out of ops. Every op enqueues on the context's one in-order queue, so they are
   per context rather than per op: between a host program's own OpenCL work (or another
   context's) and clkit's, in either direction. */
/* Every op enqueued on ctx after this call waits until the n events have completed (a barrier
   on the queue); events of any queue of the queue's cl_context, user events included. Ops
   that wait for the device (clkit_finish, a cross-entropy target check) wait for them too.
   n = 0: nothing to do. events NULL with n > 0, or a NULL entry: CLKIT_ERR_NULL_ARGUMENT; an
   event of another cl_context or one that has failed: CLKIT_ERR_INVALID_VALUE. A handle that
   is not a live event is undefined behaviour, as in OpenCL. */
clkit_status clkit_wait_events(clkit_context *ctx, cl_uint n, const cl_event *events);
/* *event: a new event (the caller releases it) that completes once every op enqueued on ctx
   so far has completed: a marker on the queue, for clWaitForEvents or another queue's wait
   list. NULL on failure. */
clkit_status clkit_enqueue_marker(clkit_context *ctx, cl_event *event);

/* How clkit_benchmark times a repeat. */
typedef enum clkit_timing {
    CLKIT_TIMING_AUTO,        /* EVENTS on a profiling context, else WALL */
    /* Kernel time from profiling events (needs clkit_options.profiling): from the start of
       the first kernel of the clkit ops fn enqueues on ctx to the end of the last, as
       clkit_profile_begin/_end. OpenCL work that fn enqueues itself is not seen: use WALL. */
    CLKIT_TIMING_EVENTS,
    CLKIT_TIMING_WALL,        /* host wall clock from the call of fn until clFinish returns */
    /* Host wall clock over batches of back-to-back calls and one clFinish, per call, without
       flushes: launches overlap as in a real workload. A batch is as many calls as let
       min_reps batches fill rep_ms (1 to 1000). For work whose events do not cover it all. */
    CLKIT_TIMING_WALL_BATCHED
} clkit_timing;

#define CLKIT_BENCHMARK_MAX_QUANTILES 8

/* ABI: the benchmark structs grow only into their reserved fields, with zero meaning what
   today's library does (clkit_benchmark refuses options whose reserved fields it does not
   know as set); any other change to a public struct bumps the soname. */
typedef struct clkit_benchmark_options {
    clkit_timing timing;     /* AUTO */
    double warmup_ms;        /* 25: warm-up calls fill this much time (1 to max_reps calls) */
    double rep_ms;           /* 100: timed repeats fill this much (min_reps to max_reps) */
    double wall_limit_ms;    /* 1000: stop the repeats after this much wall time, flushes
                                included, once min_reps ran; 0: no limit */
    int min_reps, max_reps;  /* 10, 200 */
    int reps;                /* 0; > 0: exactly this many timed repeats, no limits */
    int flush;               /* 1: write a buffer before each timed repeat (not timed), to
                                start from cold caches, as do_bench's L2 flush; 0: none */
    uint64_t flush_bytes;    /* 0: 256 MiB on a GPU; on a CPU twice its last-level cache, 64
                                to 256 MiB; at most the device's largest allocation */
    cl_mem flush_buffer;     /* NULL: one of flush_bytes is made for the call; else this
                                buffer of ctx's cl_context is written whole (reused across
                                calls; flush_bytes unused) */
    int nquantiles;          /* 0; quantiles in [0, 1] to report besides p20, median, p80 */
    double quantiles[CLKIT_BENCHMARK_MAX_QUANTILES];
    uint64_t reserved[8];    /* zero */
} clkit_benchmark_options;

/* Times per call, in milliseconds, over the timed repeats. */
typedef struct clkit_benchmark_result {
    double median_ms, p20_ms, p80_ms, min_ms, max_ms, mean_ms;
    double quantile_ms[CLKIT_BENCHMARK_MAX_QUANTILES];  /* of options.quantiles, in order */
    clkit_timing timing;     /* what timed them: EVENTS, WALL or WALL_BATCHED */
    int reps;                /* timed repeats */
    int warmup;              /* untimed warm-up calls */
    int batch;               /* calls per timed repeat: 1 unless WALL_BATCHED */
    int calls;               /* calls of fn in all: 3 to plan, warm-up, batch x reps (on
                                failure, those made) */
    uint64_t flush_bytes;    /* written before each timed repeat; 0: none */
    uint64_t reserved[8];    /* zero */
} clkit_benchmark_result;

/* What clkit_benchmark times: one call of the caller's work on ctx, CLKIT_OK or a failure
   that ends the benchmark and is returned (its clkit_last_error kept). */
typedef clkit_status (*clkit_benchmark_fn)(clkit_context *ctx, void *user);

/* The defaults noted in clkit_benchmark_options. */
clkit_benchmark_options clkit_benchmark_defaults(void);
/* The bytes clkit_benchmark writes before each timed repeat on ctx's device when flush_bytes
   is 0 (0 for a NULL ctx): to size a flush_buffer reused across calls. */
uint64_t clkit_benchmark_flush_bytes(const clkit_context *ctx);
/* Times fn(ctx, user) as triton.testing.do_bench and `clkit bench` do: 3 calls estimate its
   time (the first may build programs: their median counts), from which come the warm-up and
   repeat counts; then the warm-up, a clFinish, and the timed repeats, each after a flush.
   fn must enqueue on ctx and may wait (clkit_finish) or not. opt NULL: the defaults.
   Bad options: CLKIT_ERR_INVALID_VALUE; EVENTS on a context without profiling:
   CLKIT_ERR_UNSUPPORTED; called inside a clkit_profile_begin span: CLKIT_ERR_INVALID_VALUE. */
clkit_status clkit_benchmark(clkit_context *ctx, clkit_benchmark_fn fn, void *user,
                             const clkit_benchmark_options *opt, clkit_benchmark_result *res);
/* ---- end of hooks ---- */

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
