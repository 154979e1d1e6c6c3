/* Vendor fast paths: one place decides which a call may take.

   A path is on for a context when the device can run it and no environment switch turns it
   off; paths nest (the TMA loads wgmma's tiles, wgmma is a kind of tensor-core tile), so one
   that is off takes the paths that need it along. A program of a path that fails to build
   (a driver whose compiler refuses some PTX) turns that path off for the op family that
   built it, and for no other: matmul keeps its tensor cores when attention's tensor-core
   program is what the driver refused. The op then plans again, and asking here gives it the
   next path down the chain:

     wgmma -> mma.sync -> portable kernels     TMA loads -> cp.async     PTX shuffles -> portable
     AMD MFMA or WMMA -> portable kernels

   The public clkit_device_props describe the device only; clkit_fast_paths reports what an
   op family may take now. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *fallback, *env; /* env: a switch that turns the path off with "0" */
    int needs;                         /* the path this one nests in; -1: none */
} paths[CLKIT_PATH_COUNT] = {
    [CLKIT_PATH_NV_SHUFFLE] = {"PTX warp shuffles", "the portable reductions", NULL, -1},
    [CLKIT_PATH_NV_MMA] = {"tensor cores (mma.sync)", "the portable kernels", "CLKIT_TENSOR_CORES", -1},
    [CLKIT_PATH_NV_WGMMA] = {"wgmma", "mma.sync", "CLKIT_WGMMA", CLKIT_PATH_NV_MMA},
    [CLKIT_PATH_NV_TMA] = {"TMA loads", "cp.async", "CLKIT_NV_TMA", CLKIT_PATH_NV_WGMMA},
    [CLKIT_PATH_AMD_MFMA] = {"MFMA matrix cores", "the portable kernels", "CLKIT_AMD_MATRIX", -1},
    [CLKIT_PATH_AMD_WMMA] = {"WMMA matrix cores", "the portable kernels", "CLKIT_AMD_MATRIX", -1},
};

#define TENSOR_CORES ((1u << CLKIT_PATH_NV_MMA) | (1u << CLKIT_PATH_NV_WGMMA) | (1u << CLKIT_PATH_NV_TMA))
#define MATRIX_CORES ((1u << CLKIT_PATH_AMD_MFMA) | (1u << CLKIT_PATH_AMD_WMMA))

/* Each family's name and the paths its kernels have (bits of clkit_path). */
static const struct {
    const char *name;
    unsigned uses;
} families[CLKIT_FAMILY_COUNT] = {
    [CLKIT_FAMILY_MATMUL] = {"matmul", TENSOR_CORES | MATRIX_CORES},
    [CLKIT_FAMILY_ATTENTION] = {"attention", TENSOR_CORES | (1u << CLKIT_PATH_AMD_MFMA)},
    [CLKIT_FAMILY_CROSS_ENTROPY] = {"cross_entropy", TENSOR_CORES},
    [CLKIT_FAMILY_SOFTMAX] = {"softmax", 1u << CLKIT_PATH_NV_SHUFFLE},
    [CLKIT_FAMILY_LAYERNORM] = {"layernorm", 1u << CLKIT_PATH_NV_SHUFFLE},
};

static bool switched_off(const char *env)
{
    const char *v = env ? getenv(env) : NULL;
    return v && strcmp(v, "0") == 0;
}

/* AMD targets with the matrix instructions cl/amd/matrix.h uses: CDNA2/3's MFMA (gfx90a,
   gfx94x: v_mfma_f32_32x32x8 for f16 and bf16, 32x32x2 for f32) and RDNA3's WMMA (gfx11).
   gfx908 lacks bf16_1k, gfx10 and gfx12 (another WMMA layout) keep the portable kernels. */
static bool amd_mfma(const char *gfx)
{
    return strcmp(gfx, "gfx90a") == 0 || strncmp(gfx, "gfx94", 5) == 0;
}

static bool amd_wmma(const char *gfx) { return strncmp(gfx, "gfx11", 5) == 0 && strlen(gfx) == 7; }

unsigned clkit_amd_wave(const clkit_context *ctx)
{
    const struct clkit_device_props *p = &ctx->props;
    if (!ctx->amd_emulated) return p->warp;
    return amd_wmma(p->amd_gfx) ? 32 : 64;
}

/* What the device can run: PTX on any NVIDIA device, mma.sync from sm_80, wgmma and the TMA
   on sm_90 exactly (sm_90a PTX runs nowhere else); MFMA at wave64, WMMA at wave32 or 64. */
static bool capable(const clkit_context *ctx, clkit_path path)
{
    const struct clkit_device_props *p = &ctx->props;
    unsigned wave = clkit_amd_wave(ctx);
    switch (path) {
    case CLKIT_PATH_NV_SHUFFLE: return p->nv_cc_major > 0;
    case CLKIT_PATH_NV_MMA: return p->nv_cc_major >= 8;
    case CLKIT_PATH_NV_WGMMA:
    case CLKIT_PATH_NV_TMA: return p->nv_cc_major == 9 && p->nv_cc_minor == 0;
    case CLKIT_PATH_AMD_MFMA: return amd_mfma(p->amd_gfx) && wave == 64;
    case CLKIT_PATH_AMD_WMMA: return amd_wmma(p->amd_gfx) && (wave == 32 || wave == 64);
    default: return false;
    }
}

void clkit_paths_init(clkit_context *ctx)
{
    for (int i = 0; i < CLKIT_PATH_COUNT; i++) {
        int up = paths[i].needs; /* each path is listed after the one it needs */
        ctx->path_on[i] = capable(ctx, (clkit_path)i) && !switched_off(paths[i].env) && (up < 0 || ctx->path_on[up]);
    }
    memset(ctx->path_failed, 0, sizeof ctx->path_failed);
    memset(ctx->path_proof, 0, sizeof ctx->path_proof);
}

bool clkit_path_allowed(const clkit_context *ctx, clkit_path path, clkit_family family)
{
    for (int i = (int)path; i >= 0; i = paths[i].needs)
        if (!ctx->path_on[i] || ctx->path_failed[i][family]) return false;
    return true;
}

enum { PROOF_NONE, PROOF_RUNNING, PROOF_DONE };

void clkit_path_test_name(clkit_path path, clkit_family family, char *buf, size_t n)
{
    snprintf(buf, n, "known-answer test: %s on %s", families[family].name, paths[path].name);
}

bool clkit_path_proven(clkit_context *ctx, clkit_path path, clkit_family family)
{
    unsigned char *proof = &ctx->path_proof[path][family];
    if (*proof != PROOF_NONE) return *proof == PROOF_RUNNING || !ctx->path_failed[path][family];
    *proof = PROOF_RUNNING;
    char what[96];
    clkit_path_test_name(path, family, what, sizeof what);
    int kept = clkit_cache_verdict(ctx, what);
    bool pass = kept >= 0 ? kept == 1 : clkit_selftest_run(ctx, path, family);
    if (kept < 0) clkit_cache_set_verdict(ctx, what, pass);
    *proof = PROOF_DONE;
    if (pass) {
        clkit_log(CLKIT_LOG_INFO, "%s: %s passed%s", families[family].name, what, kept >= 0 ? " (kept verdict)" : "");
        return true;
    }
    clkit_log(CLKIT_LOG_WARN, "%s: the %s gave a wrong answer on this device and driver; %s from now "
              "on (the verdict is kept in the binary cache; clear it after a driver fix)",
              families[family].name, paths[path].name, paths[path].fallback);
    ctx->path_failed[path][family] = true;
    return false;
}

void clkit_path_failed(clkit_context *ctx, clkit_path path, clkit_family family)
{
    clkit_log(CLKIT_LOG_WARN, "%s: the %s program failed to build; %s from now on: %s",
              families[family].name, paths[path].name, paths[path].fallback, clkit_last_error(ctx));
    ctx->path_failed[path][family] = true;
    clkit_clear_error(ctx);
}

clkit_status clkit_fast_paths(clkit_context *ctx, const char *op, unsigned *out)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!op || !out) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "clkit_fast_paths: %s is NULL", op ? "paths" : "op");
    for (int f = 0; f < CLKIT_FAMILY_COUNT; f++) {
        if (strcmp(op, families[f].name) != 0) continue;
        *out = 0;
        for (int i = 0; i < CLKIT_PATH_COUNT; i++)
            if ((families[f].uses >> i & 1) && clkit_path_allowed(ctx, (clkit_path)i, (clkit_family)f))
                *out |= 1u << i;
        clkit_clear_error(ctx); /* a path's known-answer test may have failed on the way */
        return CLKIT_OK;
    }
    return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE,
                      "unknown op family '%s' (matmul, attention, cross_entropy, softmax, layernorm)", op);
}

void clkit_path_acquit(clkit_context *ctx, clkit_path path, clkit_family family)
{
    clkit_log(CLKIT_LOG_INFO, "%s: %s does not build either: the source is broken, not the %s "
              "path, which stays on", families[family].name, paths[path].fallback, paths[path].name);
    ctx->path_failed[path][family] = false;
}
