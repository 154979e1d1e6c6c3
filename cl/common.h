/* Shared by every kernel: storage dtypes and strided 4-D indexing.

   f16 and bf16 are storage formats: values are loaded into f32, computed in f32 and
   rounded once on store (NVIDIA's OpenCL has no cl_khr_fp16; vload_half/vstore_half are core).
   The host picks the dtype with -D DTYPE_F32 / DTYPE_F16 / DTYPE_BF16 / DTYPE_U8. */
#ifndef CLKIT_COMMON_H
#define CLKIT_COMMON_H

inline float bf16_to_f32(ushort b) { return as_float((uint)b << 16); }

inline float4 bf16x4_to_f32(ushort4 b) { return as_float4(convert_uint4(b) << 16); }

inline float8 bf16x8_to_f32(ushort8 b) { return as_float8(convert_uint8(b) << 16); }

/* Round to nearest even; NaN stays NaN (quieted) instead of rounding into infinity. */
inline ushort f32_to_bf16(float f)
{
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

inline ushort4 f32x4_to_bf16(float4 f)
{
    return (ushort4)(f32_to_bf16(f.x), f32_to_bf16(f.y), f32_to_bf16(f.z), f32_to_bf16(f.w));
}

#if defined(DTYPE_F32)
typedef float elem_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#define LOAD4(p, i) vload4(0, (p) + (i))
#define STORE4(p, i, v) vstore4((v), 0, (p) + (i))
#elif defined(DTYPE_F16)
typedef half elem_t;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#define LOAD4(p, i) vload_half4(0, (p) + (i))
#define STORE4(p, i, v) vstore_half4_rte((v), 0, (p) + (i))
#elif defined(DTYPE_BF16)
typedef ushort elem_t;
#define LOAD(p, i) bf16_to_f32((p)[i])
#define STORE(p, i, v) ((p)[i] = f32_to_bf16(v))
#define LOAD4(p, i) bf16x4_to_f32(vload4(0, (p) + (i)))
#define STORE4(p, i, v) vstore4(f32x4_to_bf16(v), 0, (p) + (i))
#elif defined(DTYPE_U8)
typedef uchar elem_t;
#define LOAD(p, i) ((float)(p)[i])
#define STORE(p, i, v) ((p)[i] = convert_uchar_sat_rte(v))
#define LOAD4(p, i) convert_float4(vload4(0, (p) + (i)))
#define STORE4(p, i, v) vstore4(convert_uchar4_sat_rte(v), 0, (p) + (i))
#endif

/* Ops that move elements without arithmetic (copy, swizzle) work on raw bits: the host passes
   -D ELEM_BYTES=1|2|4|8, so every dtype of one size shares a program and NaN payloads,
   signed zeros and integers pass through untouched. */
#if !defined(ELEM_BYTES)
#elif ELEM_BYTES == 1
typedef uchar bits_t;
#elif ELEM_BYTES == 2
typedef ushort bits_t;
#elif ELEM_BYTES == 4
typedef uint bits_t;
#elif ELEM_BYTES == 8
typedef ulong bits_t;
#endif

/* Per-dtype families for kernels with operands of several dtypes (matmul): pick one with
   CLKIT_CAT(LD_, A_DTYPE) where the host passes -D A_DTYPE=F16. */
#define CLKIT_CAT_(a, b) a##b
#define CLKIT_CAT(a, b) CLKIT_CAT_(a, b)
typedef float ty_F32;
typedef half ty_F16;
typedef ushort ty_BF16;
#define LD_F32(p, i) ((p)[i])
#define LD_F16(p, i) vload_half((i), (p))
#define LD_BF16(p, i) bf16_to_f32((p)[i])
/* Aligned 4-element loads: only where the host proved p + i is 4-element aligned. */
#define LDA4_F32(p, i) (*(const __global float4 *)((p) + (i)))
#define LDA4_F16(p, i) vloada_half4(0, (p) + (i))
#define LDA4_BF16(p, i) bf16x4_to_f32(*(const __global ushort4 *)((p) + (i)))
#define ST_F32(p, i, v) ((p)[i] = (v))
#define ST_F16(p, i, v) vstore_half_rte((v), (i), (p))
#define ST_BF16(p, i, v) ((p)[i] = f32_to_bf16(v))
#define ST4_F32(p, i, v) vstore4((v), 0, (p) + (i))
#define ST4_F16(p, i, v) vstore_half4_rte((v), 0, (p) + (i))
#define ST4_BF16(p, i, v) vstore4(f32x4_to_bf16(v), 0, (p) + (i))

/* Element offset of the i-th element (row-major order) of a 4-D view. */
inline long strided_offset(long i, long4 shape, long4 strides)
{
    long c3 = i % shape.s3;
    i /= shape.s3;
    long c2 = i % shape.s2;
    i /= shape.s2;
    long c1 = i % shape.s1;
    i /= shape.s1;
    return i * strides.s0 + c1 * strides.s1 + c2 * strides.s2 + c3 * strides.s3;
}

/* Orders a work-item's global accesses for the whole device: NVIDIA's and AMD's device-scope
   fences. OpenCL 1.2 itself orders memory only within a work-group (ROCm compiles mem_fence
   to a work-group fence), so elsewhere this is mem_fence and the hardware's own ordering: a
   CPU's (PoCL: x86 stores are seen in order, and the atomic is a full barrier). oclgrind, which
   models OpenCL 1.2, reports the last split's reads of the partials as races. */
#if defined(CLKIT_NV_SM) && CLKIT_NV_SM >= 70
#define DEVICE_FENCE() __asm__ volatile("fence.acq_rel.gpu;" ::: "memory")
#elif defined(CLKIT_NV_SM)
#define DEVICE_FENCE() __asm__ volatile("membar.gl;" ::: "memory")
#elif defined(__AMDGCN__)
#define DEVICE_FENCE() __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "agent")
#else
#define DEVICE_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif

/* Whether this work-group is the last of `splits` to hand in its part of a result (split-K's
   partial sums, flash-decoding's partial softmaxes): called by every work-item once its
   partials are stored; the last one also puts the counter back to 0 for the next call. The
   partials of every split must be visible to the one that draws the last ticket. On NVIDIA
   one work-item fences, on both sides of the ticket: PTX's fences are cumulative, so a
   fence after the barrier releases every store the barrier ordered before it, and one after
   the ticket acquires for the loads the second barrier orders after it (CUTLASS's semaphore;
   a fence in every work-item waited on each one's stores, about a microsecond a split-K GEMV
   on an H200). Elsewhere each work-item fences its own stores and loads. */
#if defined(CLKIT_NV_SM)
#define SPLIT_FENCE_ALL()
#define SPLIT_FENCE_ONE() DEVICE_FENCE()
#else
#define SPLIT_FENCE_ALL() DEVICE_FENCE()
#define SPLIT_FENCE_ONE()
#endif
inline bool split_last(volatile __global uint *ticket, uint splits, __local uint *flag)
{
    SPLIT_FENCE_ALL();
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        SPLIT_FENCE_ONE();
        uint last = atomic_inc(ticket) == splits - 1;
        if (last) atomic_xchg(ticket, 0u);
        SPLIT_FENCE_ONE();
        *flag = last;
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    SPLIT_FENCE_ALL();
    return *flag != 0;
}

#endif
