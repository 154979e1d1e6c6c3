/* AMD matrix-core instructions for OpenCL C: MFMA on CDNA (gfx90a, gfx94x; wave64) and WMMA on
   RDNA3 (gfx11; wave32, or wave64 where the runtime runs gfx11 in wave64 mode).

   A kernel reaches an instruction through one macro per instruction, MFMA_F32_32X32X8_F16 and
   its siblings below, each C += A x B over one wave (its accumulators c updated in place). On AMD devices they are clang's
   __builtin_amdgcn_* (BuiltinsAMDGPU.def). The host sets AMD_EMULATE for PoCL instead: each
   macro is then a software instruction with the hardware's lane layout, which exchanges the
   wave's operand registers through local memory, so that a kernel written for the hardware runs
   on a CPU, register for register, and its answers can be checked there. A kernel that uses the
   macros declares MATRIX_SCRATCH in its body and calls them in uniform control flow (the
   emulation holds work-group barriers).

   The host picks one instruction family and the wave width:
   -D MATRIX_MFMA32 -D WAVE=64: v_mfma_f32_32x32x8{f16,bf16_1k}, v_mfma_f32_32x32x2f32
   -D MATRIX_WMMA16 -D WAVE=32|64: v_wmma_f32_16x16x16_{f16,bf16}
   and the operand dtype through A_DTYPE (cl/matmul.h's F16, BF16 or F32; f32 only on MFMA).

   Register layouts (AMD's CDNA3 and RDNA3 ISA guides; ROCm's amd_matrix_instruction_calculator
   prints them, and tests/test_amd_matrix.c checks the emulation against its tables). With
   lane = the work-item's index in its wave:
   - MFMA 32x32xK (K = 8 for 16-bit operands, 2 for f32), one block: A[i][k] sits in lane
     i + 32 * (k / FRAG_K), element k % FRAG_K of the lane's FRAG_K-element register; B[k][j]
     likewise with j for i; D[i][j] in lane j + 32 * ((i / 4) % 2), register 4 * (i / 8) + i % 4.
   - WMMA 16x16x16: A[i][k] sits in lane i of every 16-lane quarter (the hardware expects the
     copies equal), element k of the lane's 16; B[k][j] likewise in lane j; D[i][j] in lane
     j + 16 * (i % (WAVE / 16)), register i / (WAVE / 16). */
#ifndef CLKIT_AMD_MATRIX_H
#define CLKIT_AMD_MATRIX_H

/* The operand dtype as a number the preprocessor can compare (A_DTYPE is a token). */
#define MX_DT_F32 1
#define MX_DT_F16 2
#define MX_DT_BF16 3
#define A_DTYPE_IS_F32 (CLKIT_CAT(MX_DT_, A_DTYPE) == MX_DT_F32)
#define A_DTYPE_IS_BF16 (CLKIT_CAT(MX_DT_, A_DTYPE) == MX_DT_BF16)

#if !defined(WAVE)
#error "the host sets WAVE (64 for MFMA; 32 or 64 for WMMA)"
#endif

#if defined(MATRIX_MFMA32)
#define INSN_M 32
#define INSN_N 32
#if WAVE != 64
#error "MFMA runs on wave64"
#endif
/* 16 accumulators a lane: the 32 x 32 tile over 64 lanes. */
#define ACC_N 16
typedef float16 acc_t;
#elif defined(MATRIX_WMMA16)
#define INSN_M 16
#define INSN_N 16
#define ACC_N (256 / WAVE)
#if WAVE == 32
typedef float8 acc_t;
#else
typedef float4 acc_t;
#endif
#else
#error "the host sets MATRIX_MFMA32 or MATRIX_WMMA16"
#endif

/* One lane's share of an A or B operand: FRAG_K consecutive k of one row (A) or column (B),
   kept as the stored bits for 16-bit dtypes and as f32 for f32. */
#if defined(MATRIX_MFMA32) && A_DTYPE_IS_F32
#define INSN_K 2
#define FRAG_K 1
typedef float operand_t;
typedef float frag_t;
#define LOAD_FRAG(p) (*(p))
#elif defined(MATRIX_MFMA32)
#define INSN_K 8
#define FRAG_K 4
typedef ushort operand_t;
typedef ushort4 frag_t;
#define LOAD_FRAG(p) vload4(0, p)
#else
#define INSN_K 16
#define FRAG_K 16
typedef ushort operand_t;
typedef ushort16 frag_t;
#define LOAD_FRAG(p) vload16(0, p)
#endif

/* The first k of a lane's fragment, and (row or column, register) of accumulator r. */
#if defined(MATRIX_MFMA32)
#define FRAG_K0(lane) (((lane) / 32) * FRAG_K)
#define FRAG_ROW(lane) ((lane) % 32)
#define ACC_ROW(lane, r) (8 * ((r) / 4) + 4 * ((lane) / 32) + (r) % 4)
#define ACC_COL(lane) ((lane) % 32)
#else
#define FRAG_K0(lane) 0
#define FRAG_ROW(lane) ((lane) % 16)
#define ACC_ROW(lane, r) ((WAVE / 16) * (r) + (lane) / 16)
#define ACC_COL(lane) ((lane) % 16)
#endif

#if !defined(AMD_EMULATE)

#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#define MATRIX_SCRATCH
#define MFMA_F32_32X32X8_F16(a, b, c) ((c) = __builtin_amdgcn_mfma_f32_32x32x8f16(as_half4(a), as_half4(b), c, 0, 0, 0))
#define MFMA_F32_32X32X8_BF16(a, b, c) \
    ((c) = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(as_short4(a), as_short4(b), c, 0, 0, 0))
#define MFMA_F32_32X32X2_F32(a, b, c) ((c) = __builtin_amdgcn_mfma_f32_32x32x2f32(a, b, c, 0, 0, 0))
#if WAVE == 32
#define WMMA_F32_16X16X16_F16(a, b, c) ((c) = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(as_half16(a), as_half16(b), c))
#define WMMA_F32_16X16X16_BF16(a, b, c) \
    ((c) = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(as_short16(a), as_short16(b), c))
#else
#define WMMA_F32_16X16X16_F16(a, b, c) ((c) = __builtin_amdgcn_wmma_f32_16x16x16_f16_w64(as_half16(a), as_half16(b), c))
#define WMMA_F32_16X16X16_BF16(a, b, c) \
    ((c) = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w64(as_short16(a), as_short16(b), c))
#endif

#else /* AMD_EMULATE */

/* Each wave's operand registers, as f32, in the work-group's local memory. */
#define MATRIX_SCRATCH __local float matrix_scratch[WG / WAVE][2 * WAVE * FRAG_K]
#define EMU_ARGS matrix_scratch[get_local_id(0) / WAVE], get_local_id(0) % WAVE

/* The lane that holds A[i][k] / B[k][j] for the lane computing an accumulator: MFMA keeps
   each in one lane; WMMA copies them into every 16-lane quarter and each quarter reads its own
   copy, so a kernel that leaves a copy unset gets a wrong answer here, as on the hardware. */
#if defined(MATRIX_MFMA32)
#define A_LANE(i, k, lane) ((i) + 32 * ((k) / FRAG_K))
#define B_LANE(j, k, lane) ((j) + 32 * ((k) / FRAG_K))
#else
#define A_LANE(i, k, lane) ((i) + 16 * ((lane) / 16))
#define B_LANE(j, k, lane) ((j) + 16 * ((lane) / 16))
#endif

inline float emu_f16(ushort bits) { return vload_half(0, (const half *)&bits); }
inline float emu_bf16(ushort bits) { return as_float((uint)bits << 16); }
inline float emu_f32(float v) { return v; }

/* C += A x B for the wave, one lane's part: its operand registers go to the wave's scratch,
   then it sums its accumulators' dot products (in k order, f32) from there. The accumulators
   and operands pass by pointer: a wide vector passed by value would change the CPU's calling
   convention. */
#define EMU_MMA(name, convert)                                                                   \
    inline void name(const frag_t *a, const frag_t *b, acc_t *c, __local float *x, int lane)               \
    {                                                                                            \
        __local float *xa = x, *xb = x + WAVE * FRAG_K;                                          \
        const operand_t *ap = (const operand_t *)a, *bp = (const operand_t *)b;                  \
        for (int e = 0; e < FRAG_K; e++) {                                                       \
            xa[lane * FRAG_K + e] = convert(ap[e]);                                              \
            xb[lane * FRAG_K + e] = convert(bp[e]);                                              \
        }                                                                                        \
        barrier(CLK_LOCAL_MEM_FENCE);                                                            \
        float *cp = (float *)c;                                                                  \
        int j = ACC_COL(lane);                                                                   \
        for (int r = 0; r < ACC_N; r++) {                                                        \
            int i = ACC_ROW(lane, r);                                                            \
            float s = 0.0f;                                                                      \
            for (int k = 0; k < INSN_K; k++)                                                     \
                s = fma(xa[A_LANE(i, k, lane) * FRAG_K + k % FRAG_K],                            \
                        xb[B_LANE(j, k, lane) * FRAG_K + k % FRAG_K], s);                        \
            cp[r] += s;                                                                          \
        }                                                                                        \
        barrier(CLK_LOCAL_MEM_FENCE);                                                            \
    }

#if A_DTYPE_IS_F32
EMU_MMA(emu_mma_f32, emu_f32)
#define MFMA_F32_32X32X2_F32(a, b, c) emu_mma_f32(&(a), &(b), &(c), EMU_ARGS)
#else
EMU_MMA(emu_mma_f16, emu_f16)
EMU_MMA(emu_mma_bf16, emu_bf16)
#define MFMA_F32_32X32X8_F16(a, b, c) emu_mma_f16(&(a), &(b), &(c), EMU_ARGS)
#define MFMA_F32_32X32X8_BF16(a, b, c) emu_mma_bf16(&(a), &(b), &(c), EMU_ARGS)
#define WMMA_F32_16X16X16_F16(a, b, c) emu_mma_f16(&(a), &(b), &(c), EMU_ARGS)
#define WMMA_F32_16X16X16_BF16(a, b, c) emu_mma_bf16(&(a), &(b), &(c), EMU_ARGS)
#endif

#endif /* AMD_EMULATE */

/* The lanes that share an accumulator's column: D[i][j] sits in lane j + PAIR * h for each h,
   so a column's sum or maximum gathers over them. MATRIX_PAIR(x) is x from lane ^ PAIR (one
   ds_bpermute; in emulation, through the wave's scratch). WMMA at wave64 has four such lanes:
   the kernels that use it run MFMA and WMMA at wave32. */
#if defined(MATRIX_MFMA32)
#define PAIR 32
#else
#define PAIR 16
#endif
#if !defined(AMD_EMULATE)
#define MATRIX_PAIR(x) as_float(__builtin_amdgcn_ds_bpermute(((int)(get_local_id(0) % WAVE) ^ PAIR) << 2, as_int(x)))
#else
inline float emu_pair(float x, __local float *s, int lane)
{
    s[lane] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float y = s[lane ^ PAIR];
    barrier(CLK_LOCAL_MEM_FENCE);
    return y;
}
#define MATRIX_PAIR(x) emu_pair(x, EMU_ARGS)
#endif

/* The instruction for the operand dtype. */
#if defined(MATRIX_MFMA32) && A_DTYPE_IS_F32
#define MATRIX_MMA(a, b, c) MFMA_F32_32X32X2_F32(a, b, c)
#elif defined(MATRIX_MFMA32) && A_DTYPE_IS_BF16
#define MATRIX_MMA(a, b, c) MFMA_F32_32X32X8_BF16(a, b, c)
#elif defined(MATRIX_MFMA32)
#define MATRIX_MMA(a, b, c) MFMA_F32_32X32X8_F16(a, b, c)
#elif A_DTYPE_IS_BF16
#define MATRIX_MMA(a, b, c) WMMA_F32_16X16X16_BF16(a, b, c)
#else
#define MATRIX_MMA(a, b, c) WMMA_F32_16X16X16_F16(a, b, c)
#endif

#endif
