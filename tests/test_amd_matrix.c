/* AMD matrix cores (cl/amd/matrix.h, cl/amd/matmul_matrix.cl) on PoCL, through the software
   instructions that -D AMD_EMULATE builds and that CLKIT_AMD_EMULATE=gfxNNN plans:
   - each instruction's lane layout against AMD's own tables (ROCm's
     amd_matrix_instruction_calculator): one instruction on one wave of a probe kernel, its
     operand registers filled and its accumulators read back where the tables say;
   - matmul on each emulated target: the fast-path bits; every row of host/ops/matmul.c's MFMA
     and WMMA tile tables by config override, each in another dtype pair and layout (and every
     MFMA row in f32 too); edges, transposes, padded, negative and broadcast strides, offsets,
     batches, alpha, beta and the activations on the known-answer test's tile, with 16-byte
     vector loads and element-wise; refused overrides; the heuristic's own plans; the operands
     kept off the matrix cores. Each call is compared with a double-precision reference (every
     element of C's buffer; NaN everywhere a kernel must not read), and the program it ran is
     read from the builds the context records (CLKIT_BUILD_LOG), so that a call that quietly
     took the portable kernels fails;
   - the known-answer test: an emulated instruction made wrong (CLKIT_KERNEL_DIR) fails it, the
     path goes off for matmul and the op is still right on the portable kernels; a kept failing
     verdict turns the path off without a retest.
   Cold kernel builds dominate the time on PoCL (seconds each, more for the emulated matrix
   kernels, whose every instruction holds two work-group barriers): the cases share programs
   wherever their build options agree (tile, dtypes, operand majorness, vector widths), and
   main asks PoCL for unoptimised builds. */
#define _GNU_SOURCE
#include "internal.h" /* verdicts, embedded sources: this suite links the library's objects */
#include "util.h"

#include <CL/cl_half.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* main asks PoCL for unoptimised builds (POCL_EXTRA_BUILD_FLAGS): the calls that build run
   between tu_leaks_off and tu_leaks_on (util.h says why). */
#define BUILDS_BEGIN() tu_leaks_off()
#define BUILDS_END() tu_leaks_on()

typedef struct clkit_embedded_source {
    const char *name;
    const char *text;
} clkit_embedded_source;
extern const clkit_embedded_source clkit_embedded_sources[];

/* ---- environment, directories, the build log ---- */

/* Sets (value non-NULL) or unsets name; returns its old value for env_restore. */
static char *env_swap(const char *name, const char *value)
{
    const char *was = getenv(name);
    char *saved = was ? strdup(was) : NULL;
    if (value) tu_setenv(name, value);
    else tu_unsetenv(name);
    return saved;
}

static void env_restore(const char *name, char *saved)
{
    if (saved) tu_setenv(name, saved);
    else tu_unsetenv(name);
    free(saved);
}

static char *temp_dir(void)
{
    char tmpl[] = "/tmp/clkit-amd-XXXXXX";
    ck_assert(mkdtemp(tmpl) != NULL);
    return strdup(tmpl);
}

/* Every embedded kernel source under dir, as CLKIT_KERNEL_DIR would hold them, with the text
   edits[2 i] (which must be there) of amd/matrix.h made edits[2 i + 1]; edits NULL-terminated. */
static void write_sources(const char *dir, const char *const *edits)
{
    for (const clkit_embedded_source *s = clkit_embedded_sources; s->name; s++) {
        char *text = strdup(s->text);
        for (const char *const *e = edits; e && *e && !strcmp(s->name, "amd/matrix.h"); e += 2) {
            char *at = strstr(text, e[0]);
            ck_assert_msg(at != NULL, "amd/matrix.h no longer has '%s' to break", e[0]);
            size_t head = (size_t)(at - text), n = strlen(text) - strlen(e[0]) + strlen(e[1]) + 1;
            char *next = malloc(n);
            snprintf(next, n, "%.*s%s%s", (int)head, text, e[1], at + strlen(e[0]));
            free(text);
            text = next;
        }
        FILE *f = tu_create_file(dir, s->name);
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
        free(text);
    }
}

/* A context planning as AMD target gfx (NULL: as the device it is), its binary cache in
   cache_dir. CLKIT_AMD_EMULATE and the CLKIT_AMD_MATRIX switch count at creation only; the
   caller's own stay as they were. */
static clkit_context *emu_ctx(const char *gfx, const char *cache_dir)
{
    char *was_gfx = env_swap("CLKIT_AMD_EMULATE", gfx), *was_switch = env_swap("CLKIT_AMD_MATRIX", NULL);
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.cache_dir = cache_dir;
    clkit_status s = clkit_context_create(&ctx, &opt);
    env_restore("CLKIT_AMD_EMULATE", was_gfx);
    env_restore("CLKIT_AMD_MATRIX", was_switch);
    ck_assert_msg(s == CLKIT_OK, "no context: %s", clkit_status_string(s));
    return ctx;
}

/* CLKIT_AMD_EMULATE takes a CPU device (PoCL) only: on another device (CLKIT_DEVICE) the
   emulated targets' tests have nothing to run and say so. */
static int cpu_device(void)
{
    clkit_context *ctx = tu_ctx();
    struct clkit_device_props p;
    TU_CHECK(clkit_device_props(ctx, &p));
    clkit_context_release(ctx);
    if (!p.is_cpu) fprintf(stderr, "test_amd_matrix: %s is no CPU device, where CLKIT_AMD_EMULATE applies: skipped\n", p.name);
    return p.is_cpu;
}

static unsigned paths_of(clkit_context *ctx, const char *family)
{
    unsigned p = 0;
    TU_CHECK(clkit_fast_paths(ctx, family, &p));
    return p;
}

#define AMD_BITS (CLKIT_FAST_PATH_AMD_MFMA | CLKIT_FAST_PATH_AMD_WMMA)

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (cap - n - 1 == 0) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    ck_assert(buf != NULL);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

/* The kernel builds of the test, as CLKIT_BUILD_LOG records them ("file<TAB>options" a line,
   each time a context builds or loads a program it does not hold yet), in a private log that
   is passed on to the caller's (CI replays the recorded builds) at the end. */
typedef struct build_log {
    char path[64];
    char *caller;
    size_t seen; /* bytes already returned by log_new */
} build_log;

static void log_begin(build_log *l)
{
    snprintf(l->path, sizeof l->path, "/tmp/clkit-amd-builds-%d.txt", (int)getpid());
    FILE *f = fopen(l->path, "w");
    ck_assert(f != NULL);
    fclose(f);
    l->caller = env_swap("CLKIT_BUILD_LOG", l->path);
    l->seen = 0;
}

/* The lines recorded since the last call (caller frees). */
static char *log_new(build_log *l)
{
    size_t n;
    char *all = read_text(l->path, &n);
    char *fresh = strdup(all + (l->seen < n ? l->seen : n));
    l->seen = n;
    free(all);
    return fresh;
}

/* Whether one of lines (log_new's) holds every fragment of frags. */
static int lines_have(const char *lines, const char *const *frags)
{
    char *all = strdup(lines), *save = NULL;
    int found = 0;
    for (char *line = strtok_r(all, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
        found = 1;
        for (const char *const *f = frags; *f && found; f++) found = strstr(line, *f) != NULL;
    }
    free(all);
    return found;
}

/* Whether a line of the whole log holds every fragment of frags. */
static int log_has(const build_log *l, const char *const *frags)
{
    char *all = read_text(l->path, NULL);
    int found = lines_have(all, frags);
    free(all);
    return found;
}

static void log_end(build_log *l)
{
    if (l->caller && *l->caller) {
        char *all = read_text(l->path, NULL);
        FILE *f = fopen(l->caller, "a");
        if (f) fputs(all, f), fclose(f);
        free(all);
    }
    env_restore("CLKIT_BUILD_LOG", l->caller);
    l->caller = NULL;
    remove(l->path);
}

/* ==== 1. the instructions' layouts against AMD's tables ==== */

/* Cells of ROCm's amd_matrix_instruction_calculator (version 1.3.2,
   github.com/ROCm/amd_matrix_instruction_calculator, matrix_calculator.py), verbatim from the
   commands quoted with each array. "vG{L}.[hi:lo]" is bits hi:lo of VGPR G in lane L; a cell
   lists every lane that holds the element. The tables are regular, which was checked for every
   cell when these were cut out: A[i][k] is A's cell (0, k) with every lane + i; B[k][j] and
   D[i][j] are B's cell (k, 0) and D's cell (i, 0) with every lane + j. Kept here: A's row 0
   and B's and D's column 0. Where one array serves several commands, they print the same
   cells (and -C prints -D's). */

/* A[0][k] and B[k][0], k = 0..7, of
     matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_32x32x8_f16 --register-layout -A --csv
     matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_32x32x8_f16 --register-layout -B --csv
   and the same two with --instruction v_mfma_f32_32x32x8_bf16. */
static const char *const mfma16_ab[8] = {
    "v0{0}.[15:0]",  "v0{0}.[31:16]",  "v1{0}.[15:0]",  "v1{0}.[31:16]",
    "v0{32}.[15:0]", "v0{32}.[31:16]", "v1{32}.[15:0]", "v1{32}.[31:16]",
};
/* A[0][k] and B[k][0], k = 0..1, of
     matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_32x32x2_f32 --register-layout -A --csv
     matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_32x32x2_f32 --register-layout -B --csv */
static const char *const mfma32_ab[2] = {"v0{0}", "v0{32}"};
/* D[i][0], i = 0..31, of
     matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_32x32x8_f16 --register-layout -D --csv
   and the same with v_mfma_f32_32x32x8_bf16 and v_mfma_f32_32x32x2_f32. */
static const char *const mfma_d[32] = {
    "v0{0}",  "v1{0}",  "v2{0}",  "v3{0}",  "v0{32}",  "v1{32}",  "v2{32}",  "v3{32}",
    "v4{0}",  "v5{0}",  "v6{0}",  "v7{0}",  "v4{32}",  "v5{32}",  "v6{32}",  "v7{32}",
    "v8{0}",  "v9{0}",  "v10{0}", "v11{0}", "v8{32}",  "v9{32}",  "v10{32}", "v11{32}",
    "v12{0}", "v13{0}", "v14{0}", "v15{0}", "v12{32}", "v13{32}", "v14{32}", "v15{32}",
};
/* A[0][k] and B[k][0], k = 0..15, of
     matrix_calculator.py --architecture rdna3 --instruction v_wmma_f32_16x16x16_f16 --wavefront 32 --register-layout -A --csv
     matrix_calculator.py --architecture rdna3 --instruction v_wmma_f32_16x16x16_f16 --wavefront 32 --register-layout -B --csv
   and the same two with v_wmma_f32_16x16x16_bf16: both 16-lane halves hold each element. */
static const char *const wmma32_ab[16] = {
    "v0{0}.[15:0] v0{16}.[15:0]", "v0{0}.[31:16] v0{16}.[31:16]",
    "v1{0}.[15:0] v1{16}.[15:0]", "v1{0}.[31:16] v1{16}.[31:16]",
    "v2{0}.[15:0] v2{16}.[15:0]", "v2{0}.[31:16] v2{16}.[31:16]",
    "v3{0}.[15:0] v3{16}.[15:0]", "v3{0}.[31:16] v3{16}.[31:16]",
    "v4{0}.[15:0] v4{16}.[15:0]", "v4{0}.[31:16] v4{16}.[31:16]",
    "v5{0}.[15:0] v5{16}.[15:0]", "v5{0}.[31:16] v5{16}.[31:16]",
    "v6{0}.[15:0] v6{16}.[15:0]", "v6{0}.[31:16] v6{16}.[31:16]",
    "v7{0}.[15:0] v7{16}.[15:0]", "v7{0}.[31:16] v7{16}.[31:16]",
};
/* D[i][0], i = 0..15, of
     matrix_calculator.py --architecture rdna3 --instruction v_wmma_f32_16x16x16_f16 --wavefront 32 --register-layout -D --csv
   and the same with v_wmma_f32_16x16x16_bf16. */
static const char *const wmma32_d[16] = {
    "v0{0}", "v0{16}", "v1{0}", "v1{16}", "v2{0}", "v2{16}", "v3{0}", "v3{16}",
    "v4{0}", "v4{16}", "v5{0}", "v5{16}", "v6{0}", "v6{16}", "v7{0}", "v7{16}",
};
/* The same commands with --wavefront 64 (gfx11 in wave64 mode): A[0][k] and B[k][0], each
   element in all four 16-lane quarters, */
static const char *const wmma64_ab[16] = {
    "v0{0}.[15:0] v0{16}.[15:0] v0{32}.[15:0] v0{48}.[15:0]",
    "v0{0}.[31:16] v0{16}.[31:16] v0{32}.[31:16] v0{48}.[31:16]",
    "v1{0}.[15:0] v1{16}.[15:0] v1{32}.[15:0] v1{48}.[15:0]",
    "v1{0}.[31:16] v1{16}.[31:16] v1{32}.[31:16] v1{48}.[31:16]",
    "v2{0}.[15:0] v2{16}.[15:0] v2{32}.[15:0] v2{48}.[15:0]",
    "v2{0}.[31:16] v2{16}.[31:16] v2{32}.[31:16] v2{48}.[31:16]",
    "v3{0}.[15:0] v3{16}.[15:0] v3{32}.[15:0] v3{48}.[15:0]",
    "v3{0}.[31:16] v3{16}.[31:16] v3{32}.[31:16] v3{48}.[31:16]",
    "v4{0}.[15:0] v4{16}.[15:0] v4{32}.[15:0] v4{48}.[15:0]",
    "v4{0}.[31:16] v4{16}.[31:16] v4{32}.[31:16] v4{48}.[31:16]",
    "v5{0}.[15:0] v5{16}.[15:0] v5{32}.[15:0] v5{48}.[15:0]",
    "v5{0}.[31:16] v5{16}.[31:16] v5{32}.[31:16] v5{48}.[31:16]",
    "v6{0}.[15:0] v6{16}.[15:0] v6{32}.[15:0] v6{48}.[15:0]",
    "v6{0}.[31:16] v6{16}.[31:16] v6{32}.[31:16] v6{48}.[31:16]",
    "v7{0}.[15:0] v7{16}.[15:0] v7{32}.[15:0] v7{48}.[15:0]",
    "v7{0}.[31:16] v7{16}.[31:16] v7{32}.[31:16] v7{48}.[31:16]",
};
/* and D[i][0]. */
static const char *const wmma64_d[16] = {
    "v0{0}", "v0{16}", "v0{32}", "v0{48}", "v1{0}", "v1{16}", "v1{32}", "v1{48}",
    "v2{0}", "v2{16}", "v2{32}", "v2{48}", "v3{0}", "v3{16}", "v3{32}", "v3{48}",
};

typedef struct insn {
    const char *name;   /* AMD's, with the calculator's --architecture and --wavefront */
    const char *macro;  /* cl/amd/matrix.h's */
    const char *family; /* the host macro that picks it */
    clkit_dtype dtype;  /* of A and B (A_DTYPE) */
    int wave, m, n, k;
    int frag;           /* operand elements a lane holds: 4 f16 in 2 VGPRs, ... */
    const char *const *ab, *const *d;
} insn;

static const insn insns[] = {
    {"cdna3 v_mfma_f32_32x32x8_f16", "MFMA_F32_32X32X8_F16", "MATRIX_MFMA32", CLKIT_F16, 64, 32, 32, 8, 4, mfma16_ab, mfma_d},
    {"cdna3 v_mfma_f32_32x32x8_bf16", "MFMA_F32_32X32X8_BF16", "MATRIX_MFMA32", CLKIT_BF16, 64, 32, 32, 8, 4, mfma16_ab, mfma_d},
    {"cdna3 v_mfma_f32_32x32x2_f32", "MFMA_F32_32X32X2_F32", "MATRIX_MFMA32", CLKIT_F32, 64, 32, 32, 2, 1, mfma32_ab, mfma_d},
    {"rdna3 v_wmma_f32_16x16x16_f16 wave32", "WMMA_F32_16X16X16_F16", "MATRIX_WMMA16", CLKIT_F16, 32, 16, 16, 16, 16, wmma32_ab, wmma32_d},
    {"rdna3 v_wmma_f32_16x16x16_bf16 wave32", "WMMA_F32_16X16X16_BF16", "MATRIX_WMMA16", CLKIT_BF16, 32, 16, 16, 16, 16, wmma32_ab, wmma32_d},
    {"rdna3 v_wmma_f32_16x16x16_f16 wave64", "WMMA_F32_16X16X16_F16", "MATRIX_WMMA16", CLKIT_F16, 64, 16, 16, 16, 16, wmma64_ab, wmma64_d},
    {"rdna3 v_wmma_f32_16x16x16_bf16 wave64", "WMMA_F32_16X16X16_BF16", "MATRIX_WMMA16", CLKIT_BF16, 64, 16, 16, 16, 16, wmma64_ab, wmma64_d},
};

/* One wave runs one instruction: lane l's operand registers are a[l * FRAG_K ...] and
   b[l * FRAG_K ...] (their elements in register order), its accumulators c[l * ACC_N ...]
   before and d[l * ACC_N ...] after. */
static const char probe_source[] =
    "#include \"common.h\"\n"
    "#include \"amd/matrix.h\"\n"
    "__kernel __attribute__((reqd_work_group_size(WAVE, 1, 1)))\n"
    "void probe(__global const operand_t *a, __global const operand_t *b, __global const float *c,\n"
    "           __global float *d)\n"
    "{\n"
    "    MATRIX_SCRATCH;\n"
    "    int lane = get_local_id(0);\n"
    "    frag_t af, bf;\n"
    "    acc_t acc;\n"
    "    for (int e = 0; e < FRAG_K; e++) {\n"
    "        ((operand_t *)&af)[e] = a[lane * FRAG_K + e];\n"
    "        ((operand_t *)&bf)[e] = b[lane * FRAG_K + e];\n"
    "    }\n"
    "    for (int r = 0; r < ACC_N; r++) ((float *)&acc)[r] = c[lane * ACC_N + r];\n"
    "    INSN(af, bf, acc);\n"
    "    for (int r = 0; r < ACC_N; r++) d[lane * ACC_N + r] = ((float *)&acc)[r];\n"
    "}\n";

/* The places of a cell's element, `shift` lanes on: slot lane * per_lane + element, where a
   32-bit VGPR holds 32 / bits elements, the low bits first. Returns how many (at most 4). */
static int cell_slots(const char *cell, int bits, int shift, int per_lane, int slots[4])
{
    int n = 0;
    for (const char *p = cell; *p;) {
        unsigned g, lane, hi = 31, lo = 0;
        int used = 0;
        while (*p == ' ') p++;
        ck_assert_msg(sscanf(p, "v%u{%u}%n", &g, &lane, &used) == 2 && used > 0, "bad cell '%s'", cell);
        p += used;
        if (*p == '.') {
            used = 0;
            ck_assert_msg(sscanf(p, ".[%u:%u]%n", &hi, &lo, &used) == 2 && used > 0, "bad cell '%s'", cell);
            p += used;
        }
        ck_assert_msg(hi - lo + 1 == (unsigned)bits && lo % (unsigned)bits == 0, "cell '%s': not %d-bit", cell, bits);
        ck_assert(n < 4);
        int elem = (int)(g * (32u / (unsigned)bits) + lo / (unsigned)bits);
        ck_assert_msg(elem < per_lane, "cell '%s': beyond the lane's %d elements", cell, per_lane);
        slots[n++] = ((int)lane + shift) * per_lane + elem;
    }
    return n;
}

/* Where each element of A, B and D lives, from the cells: a_at[(i * k + kk) * 4 + c] is the
   slot of copy c of A[i][kk] (-1 past the last copy), b_at likewise for B[kk][j], d_at[i * n +
   j] the slot of D[i][j]. Every register slot of the wave holds exactly one element. */
typedef struct layout {
    int *a_at, *b_at, *d_at;
} layout;

static layout layout_of(const insn *p)
{
    int m = p->m, n = p->n, k = p->k, bits = p->dtype == CLKIT_F32 ? 32 : 16, acc = m * n / p->wave;
    layout l = {malloc((size_t)(m * k * 4) * sizeof(int)), malloc((size_t)(k * n * 4) * sizeof(int)),
                malloc((size_t)(m * n) * sizeof(int))};
    int *a_seen = calloc((size_t)(p->wave * p->frag), sizeof(int)), *b_seen = calloc((size_t)(p->wave * p->frag), sizeof(int));
    int *d_seen = calloc((size_t)(p->wave * acc), sizeof(int));
    for (int i = 0; i < m; i++)
        for (int kk = 0; kk < k; kk++) {
            int *s = l.a_at + (i * k + kk) * 4, c = cell_slots(p->ab[kk], bits, i, p->frag, s);
            for (int x = 0; x < c; x++) a_seen[s[x]]++;
            for (int x = c; x < 4; x++) s[x] = -1;
        }
    for (int kk = 0; kk < k; kk++)
        for (int j = 0; j < n; j++) {
            int *s = l.b_at + (kk * n + j) * 4, c = cell_slots(p->ab[kk], bits, j, p->frag, s);
            for (int x = 0; x < c; x++) b_seen[s[x]]++;
            for (int x = c; x < 4; x++) s[x] = -1;
        }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            int s[4];
            ck_assert_int_eq(cell_slots(p->d[i], 32, j, acc, s), 1);
            l.d_at[i * n + j] = s[0];
            d_seen[s[0]]++;
        }
    for (int s = 0; s < p->wave * p->frag; s++)
        ck_assert_msg(a_seen[s] == 1 && b_seen[s] == 1, "%s: operand slot %d taken %d / %d times", p->name, s,
                      a_seen[s], b_seen[s]);
    for (int s = 0; s < p->wave * acc; s++)
        ck_assert_msg(d_seen[s] == 1, "%s: accumulator slot %d taken %d times", p->name, s, d_seen[s]);
    free(a_seen), free(b_seen), free(d_seen);
    return l;
}

/* value as the operand dtype's bits (the integers used, |value| <= 256, are exact in all three). */
static void put(clkit_dtype dt, void *regs, int slot, double value)
{
    if (dt == CLKIT_F32) {
        ((float *)regs)[slot] = (float)value;
    } else if (dt == CLKIT_F16) {
        ((cl_half *)regs)[slot] = cl_half_from_float((float)value, CL_HALF_RTE);
    } else {
        float f = (float)value;
        uint32_t u;
        memcpy(&u, &f, 4);
        ck_assert_msg((u & 0xffff) == 0, "%g is not exact in bf16", value);
        ((uint16_t *)regs)[slot] = (uint16_t)(u >> 16);
    }
}

typedef struct probe {
    cl_context cl;
    cl_command_queue q;
    cl_program prog;
    cl_kernel kernel;
} probe;

static probe probe_build(clkit_context *ctx, const char *dir, const insn *p)
{
    probe pr;
    cl_device_id dev;
    ck_assert_int_eq(clkit_context_cl(ctx, &pr.cl, &pr.q, &dev), CLKIT_OK);
    const char *dt = p->dtype == CLKIT_F32 ? "F32" : p->dtype == CLKIT_F16 ? "F16" : "BF16";
    char opts[512];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -I %s -D AMD_EMULATE -D %s -D WAVE=%d -D WG=%d -D A_DTYPE=%s -D INSN=%s",
             dir, p->family, p->wave, p->wave, dt, p->macro);
    const char *src = probe_source;
    cl_int err;
    pr.prog = clCreateProgramWithSource(pr.cl, 1, &src, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    BUILDS_BEGIN();
    cl_int built = clBuildProgram(pr.prog, 1, &dev, opts, NULL, NULL);
    BUILDS_END();
    if (built != CL_SUCCESS) {
        char log[8192] = "";
        clGetProgramBuildInfo(pr.prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        ck_abort_msg("%s: the probe does not build with '%s':\n%s", p->name, opts, log);
    }
    pr.kernel = clCreateKernel(pr.prog, "probe", &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return pr;
}

static void probe_release(probe *pr)
{
    clReleaseKernel(pr->kernel);
    clReleaseProgram(pr->prog);
}

/* Runs the instruction once on operand and accumulator registers as the host laid them out. */
static void probe_run(probe *pr, const insn *p, const void *a, const void *b, const float *c, float *d)
{
    size_t es = clkit_dtype_size(p->dtype), ops = (size_t)(p->wave * p->frag) * es;
    size_t accs = (size_t)(p->m * p->n) * sizeof(float);
    cl_int err;
    cl_mem ba = clCreateBuffer(pr->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, ops, (void *)a, &err);
    cl_mem bb = clCreateBuffer(pr->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, ops, (void *)b, &err);
    cl_mem bc = clCreateBuffer(pr->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, accs, (void *)c, &err);
    cl_mem bd = clCreateBuffer(pr->cl, CL_MEM_WRITE_ONLY, accs, NULL, &err);
    ck_assert(ba && bb && bc && bd);
    cl_mem args[4] = {ba, bb, bc, bd};
    for (cl_uint i = 0; i < 4; i++) ck_assert_int_eq(clSetKernelArg(pr->kernel, i, sizeof(cl_mem), &args[i]), CL_SUCCESS);
    size_t wave = (size_t)p->wave;
    ck_assert_int_eq(clEnqueueNDRangeKernel(pr->q, pr->kernel, 1, NULL, &wave, &wave, 0, NULL, NULL), CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(pr->q, bd, CL_TRUE, 0, accs, d, 0, NULL, NULL), CL_SUCCESS);
    clReleaseMemObject(ba), clReleaseMemObject(bb), clReleaseMemObject(bc), clReleaseMemObject(bd);
}

/* How A reaches the registers: as the table says; with each row's k reversed (the layout of
   another instruction); or only into each element's first listed lane (WMMA's other copies
   left 0, which the hardware forbids). */
enum { PLACE_TABLE, PLACE_K_REVERSED, PLACE_FIRST_COPY };

/* Runs the instruction with A placed as `place` says, B as the table says and the accumulators
   holding C, and reads D through the table (transposed: D[j][i] taken for D[i][j]). Returns
   how many elements differ from want; the first is described in why. */
static int probe_mismatches(probe *pr, const insn *p, const layout *l, int place, int transposed,
                            const double *A, const double *B, const double *C, const double *want,
                            char *why, size_t why_n)
{
    int m = p->m, n = p->n, k = p->k, acc = m * n / p->wave, bad = 0;
    size_t es = clkit_dtype_size(p->dtype), slots = (size_t)(p->wave * p->frag);
    unsigned char *a = calloc(slots, es), *b = calloc(slots, es);
    float *c = calloc((size_t)(p->wave * acc), sizeof *c), *d = calloc((size_t)(p->wave * acc), sizeof *d);
    ck_assert(a && b && c && d);
    for (int i = 0; i < m; i++)
        for (int kk = 0; kk < k; kk++) {
            const int *s = l->a_at + (i * k + (place == PLACE_K_REVERSED ? k - 1 - kk : kk)) * 4;
            for (int x = 0; x < (place == PLACE_FIRST_COPY ? 1 : 4) && s[x] >= 0; x++) put(p->dtype, a, s[x], A[i * k + kk]);
        }
    for (int kk = 0; kk < k; kk++)
        for (int x = 0; x < 4; x++)
            for (int j = 0; j < n; j++)
                if (l->b_at[(kk * n + j) * 4 + x] >= 0) put(p->dtype, b, l->b_at[(kk * n + j) * 4 + x], B[kk * n + j]);
    for (int e = 0; e < m * n; e++) c[l->d_at[e]] = (float)C[e];
    probe_run(pr, p, a, b, c, d);
    why[0] = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double got = d[l->d_at[transposed ? j * n + i : i * n + j]];
            if (got == want[i * n + j]) continue;
            if (!bad++)
                snprintf(why, why_n, "D[%d][%d] is %.9g, expected %.9g", i, j, got, want[i * n + j]);
        }
    free(a), free(b), free(c), free(d);
    return bad;
}

/* Each instruction on one wave: A holds 1, 2, 3, ... and B +-1, +-2, ... (exact in every
   operand dtype, every sum of products exact in f32), so that any element in the wrong lane
   or register changes D. Placed by AMD's tables, D = A B exactly, and D = A B + C from
   accumulators C placed the same way; the check fails for a layout that is not the table's
   (A's k reversed, D read transposed, WMMA's copies left unset). */
START_TEST(layouts)
{
    clkit_context *ctx = tu_ctx();
    char *dir = temp_dir();
    write_sources(dir, NULL);
    for (size_t t = 0; t < sizeof insns / sizeof *insns; t++) {
        const insn *p = &insns[t];
        int m = p->m, n = p->n, k = p->k;
        layout l = layout_of(p);
        double *A = malloc((size_t)(m * k) * sizeof *A), *B = malloc((size_t)(k * n) * sizeof *B);
        double *zero = calloc((size_t)(m * n), sizeof *zero), *C = malloc((size_t)(m * n) * sizeof *C);
        double *ab = calloc((size_t)(m * n), sizeof *ab), *abc = malloc((size_t)(m * n) * sizeof *abc);
        for (int e = 0; e < m * k; e++) A[e] = 1 + e;
        for (int e = 0; e < k * n; e++) B[e] = (e % 3 ? 1 : -1) * (1 + e);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                for (int kk = 0; kk < k; kk++) ab[i * n + j] += A[i * k + kk] * B[kk * n + j];
                C[i * n + j] = (i * n + j) % 17 - 8;
                abc[i * n + j] = ab[i * n + j] + C[i * n + j];
            }
        probe pr = probe_build(ctx, dir, p);
        char why[160];
        int bad = probe_mismatches(&pr, p, &l, PLACE_TABLE, 0, A, B, zero, ab, why, sizeof why);
        ck_assert_msg(bad == 0, "%s (%s): %d elements of D = A B differ from the table's; %s", p->name, p->macro, bad, why);
        bad = probe_mismatches(&pr, p, &l, PLACE_TABLE, 0, A, B, C, abc, why, sizeof why);
        ck_assert_msg(bad == 0, "%s (%s): %d elements of D = A B + C differ from the table's; %s", p->name, p->macro, bad, why);
        ck_assert_msg(probe_mismatches(&pr, p, &l, PLACE_K_REVERSED, 0, A, B, zero, ab, why, sizeof why) > 0,
                      "%s: A placed with k reversed gave A B", p->name);
        ck_assert_msg(probe_mismatches(&pr, p, &l, PLACE_TABLE, 1, A, B, zero, ab, why, sizeof why) > 0,
                      "%s: D read transposed gave A B", p->name);
        if (l.a_at[1] >= 0) /* A[0][0] in several lanes: the hardware reads each copy */
            ck_assert_msg(probe_mismatches(&pr, p, &l, PLACE_FIRST_COPY, 0, A, B, zero, ab, why, sizeof why) > 0,
                          "%s: A's second copy left 0 gave A B", p->name);
        probe_release(&pr);
        free(A), free(B), free(zero), free(C), free(ab), free(abc);
        free(l.a_at), free(l.b_at), free(l.d_at);
    }
    tu_remove_tree(dir);
    free(dir);
    clkit_context_release(ctx);
}
END_TEST

/* ==== 2. matmul on the emulated targets ==== */

/* The fast paths each emulated target gives matmul; no family takes the other kind of matrix
   core; none at all where the target lacks these instructions (gfx1030, gfx908: no bf16_1k;
   gfx12: another WMMA layout), for a target that is no AMD one, without CLKIT_AMD_EMULATE,
   or with the CLKIT_AMD_MATRIX=0 switch. */
START_TEST(targets)
{
    if (!cpu_device()) return;
    static const struct {
        const char *gfx;
        unsigned matmul;
    } cases[] = {
        {"gfx942", CLKIT_FAST_PATH_AMD_MFMA}, {"gfx940", CLKIT_FAST_PATH_AMD_MFMA},
        {"gfx90a", CLKIT_FAST_PATH_AMD_MFMA}, {"gfx1100", CLKIT_FAST_PATH_AMD_WMMA},
        {"gfx1101", CLKIT_FAST_PATH_AMD_WMMA}, {"gfx1030", 0}, {"gfx908", 0}, {"gfx1200", 0},
        {"gfx", 0}, {"sm_90", 0}, {"gfx94x", 0}, {"", 0}, {NULL, 0},
    };
    static const char *families[] = {"matmul", "attention", "cross_entropy", "softmax", "layernorm"};
    char *cache = temp_dir();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        clkit_context *ctx = emu_ctx(cases[i].gfx, cache);
        const char *gfx = cases[i].gfx ? cases[i].gfx : "(unset)";
        ck_assert_msg((paths_of(ctx, "matmul") & AMD_BITS) == cases[i].matmul, "CLKIT_AMD_EMULATE=%s: matmul paths %#x", gfx,
                      paths_of(ctx, "matmul"));
        for (size_t f = 0; f < sizeof families / sizeof *families; f++)
            ck_assert_msg((paths_of(ctx, families[f]) & AMD_BITS & ~cases[i].matmul) == 0, "CLKIT_AMD_EMULATE=%s: %s has paths %#x",
                          gfx, families[f], paths_of(ctx, families[f]));
        clkit_context_release(ctx);
    }
    char *was = env_swap("CLKIT_AMD_EMULATE", "gfx942");
    char *was_switch = env_swap("CLKIT_AMD_MATRIX", "0");
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.cache_dir = cache;
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_OK);
    env_restore("CLKIT_AMD_MATRIX", was_switch);
    env_restore("CLKIT_AMD_EMULATE", was);
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        ck_assert_msg((paths_of(ctx, families[f]) & AMD_BITS) == 0, "CLKIT_AMD_MATRIX=0 left %s its AMD paths", families[f]);
    clkit_context_release(ctx);
    tu_remove_tree(cache);
    free(cache);
}
END_TEST

typedef struct operand {
    cl_mem buf;
    double *host; /* the whole buffer's values */
    size_t len;
    clkit_tensor t;
    ref_matrix r;
} operand;

/* A (batch x) rows x cols view in a buffer of its own: layout 'n' row-major, 't' column-major;
   batch 0 makes a 2-D tensor. aligned: the leading dimension and the `lead` unused elements
   before the view multiples of 8 (16 bytes of 16-bit elements), the rows padded; else
   padded by pad. flip: rows in reverse order (a negative row stride; 'n' only). The view holds
   random values (NaN with nan_view); every other element of the buffer is NaN, so that a
   kernel that loads one, even to multiply it by a masked zero, gives NaN. */
static operand make(clkit_context *ctx, clkit_dtype dt, int64_t batch, int64_t rows, int64_t cols, char layout,
                    int aligned, int64_t pad, size_t lead, int flip, uint64_t seed, int nan_view)
{
    operand o;
    int64_t inner = layout == 'n' ? cols : rows;
    int64_t ld = aligned ? (inner + 7) / 8 * 8 + 8 : inner + pad, mat = ld * (layout == 'n' ? rows : cols);
    int64_t nb = batch ? batch : 1;
    o.len = lead + (size_t)(mat * nb) + 1;
    o.host = malloc(o.len * sizeof *o.host);
    int64_t shape[3] = {nb, rows, cols}, strides[3] = {mat, layout == 'n' ? ld : 1, layout == 'n' ? 1 : ld};
    size_t first = lead;
    if (flip) {
        ck_assert(layout == 'n');
        strides[1] = -ld;
        first += (size_t)((rows > 0 ? rows - 1 : 0) * ld);
    }
    size_t count = (size_t)(nb * rows * cols);
    double *vals = malloc((count ? count : 1) * sizeof *vals);
    ref_fill_random(vals, count, dt, -1, 1, seed);
    for (size_t i = 0; i < o.len; i++) o.host[i] = NAN;
    for (int64_t z = 0, e = 0; z < nb; z++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++, e++)
                o.host[(int64_t)first + z * strides[0] + r * strides[1] + c * strides[2]] = nan_view ? NAN : vals[e];
    free(vals);
    o.buf = tu_buffer(ctx, dt, o.len, o.host);
    int d = batch ? 0 : 1;
    o.t = tu_view(o.buf, dt, 3 - d, shape + d, strides + d, first);
    o.r.v = o.host + first;
    o.r.s[0] = batch ? mat : 0;
    o.r.s[1] = strides[1];
    o.r.s[2] = strides[2];
    return o;
}

/* After a refused call: buf's n elements as they were (NaN where NaN was). */
static void assert_unchanged(clkit_context *ctx, cl_mem buf, clkit_dtype dt, size_t n, const double *before, const char *what)
{
    ck_assert_int_eq(clkit_finish(ctx), CLKIT_OK);
    double *after = malloc(n * sizeof *after);
    tu_read(ctx, buf, dt, n, after);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(tu_close(after[i], before[i], 0, 0), "%s: a refused call wrote element %zu", what, i);
    free(after);
}

static void drop(operand *o)
{
    clReleaseMemObject(o->buf);
    free(o->host);
}

/* Which programs a call may build: the emulated MFMA or WMMA kernel, the portable ones, or
   any (the caller reads the log itself). */
typedef enum { ON_MFMA, ON_WMMA, ON_PORTABLE, ON_ANY } kernel_kind;

typedef struct mm {
    clkit_dtype in, out;
    int64_t batch, m, n, k; /* batch 0: 2-D operands */
    char la, lb, lc;        /* 'n' row-major, 't' column-major */
    int a_bcast, b_bcast;   /* one matrix for the whole batch */
    int aligned;            /* A's and B's strides and offsets whole 16 bytes: vector loads */
    int flip;               /* A's rows reversed */
    float alpha, beta;
    clkit_activation act;
    int exact;              /* exact_f32 */
    const char *config;
} mm;

static mm mm_of(clkit_dtype in, clkit_dtype out, int64_t m, int64_t n, int64_t k, const char *layouts, int aligned)
{
    mm r;
    memset(&r, 0, sizeof r);
    r.in = in, r.out = out, r.m = m, r.n = n, r.k = k;
    r.la = layouts[0], r.lb = layouts[1], r.lc = layouts[2];
    r.aligned = aligned;
    r.alpha = 1.0f;
    return r;
}

static const char *kind_name(kernel_kind k) { return k == ON_MFMA ? "MFMA" : k == ON_WMMA ? "WMMA" : "portable"; }

/* Every build in lines (log_new's) is of the kernels `want` names. */
static void assert_builds(const char *lines, kernel_kind want, const char *what)
{
    for (const char *p = lines; *p;) {
        size_t n = strcspn(p, "\n");
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)n, p);
        int ok = want == ON_PORTABLE ? strncmp(line, "matmul.cl\t", 10) == 0
                                     : strncmp(line, "amd/matmul_matrix.cl\t", 21) == 0 && strstr(line, " -D AMD_EMULATE") &&
                                           strstr(line, want == ON_MFMA ? " -D WAVE=64 -D MATRIX_MFMA32" : " -D WAVE=32 -D MATRIX_WMMA16");
        ck_assert_msg(ok, "%s: built '%s' where the %s kernels should run", what, line, kind_name(want));
        p += n + (p[n] == '\n');
    }
}

static const char *dt_token(clkit_dtype t) { return t == CLKIT_F32 ? "F32" : t == CLKIT_F16 ? "F16" : "BF16"; }

/* Runs r on ctx and compares every element of C's buffer: inside the view with the reference
   (f32 accumulation of the operands as stored, then one rounding to C's dtype), outside it
   unchanged. Then: the call built only `want`'s programs, and a config's program is in the
   log with the vector widths the operands allow (16 bytes aligned, else element-wise).
   may_refuse: r's config may be refused (CLKIT_ERR_INVALID_VALUE with a message, C as it
   was), and then 0 is returned. */
static int run_mm(clkit_context *ctx, build_log *log, kernel_kind want, const mm *r, const char *what, int may_refuse)
{
    int64_t bt = r->batch;
    operand a = make(ctx, r->in, r->a_bcast ? 0 : bt, r->m, r->k, r->la, r->aligned, 3, r->aligned ? 8 : 5, r->flip,
                     11 + (uint64_t)(r->m * 7 + r->k), 0);
    operand b = make(ctx, r->in, r->b_bcast ? 0 : bt, r->k, r->n, r->lb, r->aligned, 1, r->aligned ? 16 : 3, 0,
                     23 + (uint64_t)(r->n * 5 + r->k), 0);
    /* beta 0 never reads C: its view holds NaN then */
    operand c = make(ctx, r->out, bt, r->m, r->n, r->lc, 0, 2, 7, 0, 37 + (uint64_t)r->k, r->beta == 0);
    if (bt == 0) bt = 1;
    double *want_c = malloc(c.len * sizeof *want_c), *got = malloc(c.len * sizeof *got);
    double *mag = malloc((size_t)(bt * r->m * r->n + 1) * sizeof *mag);
    memcpy(want_c, c.host, c.len * sizeof *want_c);
    ref_matrix wc = c.r;
    wc.v = want_c + (c.r.v - c.host);
    ref_matmul(&a.r, &b.r, &wc, bt, r->m, r->n, r->k, r->alpha, r->beta, (int)r->act, 0.1, mag);
    clkit_matmul_options o = clkit_matmul_defaults();
    o.alpha = r->alpha, o.beta = r->beta, o.activation = r->act, o.leaky_slope = 0.1f;
    o.exact_f32 = r->exact, o.config = r->config;
    BUILDS_BEGIN();
    clkit_status s = clkit_matmul(ctx, &a.t, &b.t, &c.t, &o);
    BUILDS_END();
    if (s == CLKIT_ERR_INVALID_VALUE && may_refuse) {
        ck_assert_msg(clkit_last_error(ctx)[0] != 0, "%s: refused without a message", what);
        assert_unchanged(ctx, c.buf, r->out, c.len, c.host, what);
        free(want_c), free(got), free(mag);
        drop(&a), drop(&b), drop(&c);
        return 0;
    }
    ck_assert_msg(s == CLKIT_OK, "%s: clkit_matmul -> %s: %s", what, clkit_status_string(s), clkit_last_error(ctx));
    tu_read(ctx, c.buf, r->out, c.len, got);
    double eps = 0x1p-23; /* f32 accumulation whatever the operand dtype */
    double out_rtol = r->out == CLKIT_F32 ? 0 : r->out == CLKIT_F16 ? 0x1p-10 : 0x1p-7;
    for (size_t i = 0; i < c.len; i++) {
        ptrdiff_t e = (double *)&want_c[i] - wc.v;
        int64_t z = c.r.s[0] ? e / c.r.s[0] : 0, rem = e - z * c.r.s[0];
        int64_t row = r->lc == 'n' ? rem / c.r.s[1] : rem % c.r.s[2];
        int64_t col = r->lc == 'n' ? rem % c.r.s[1] : rem / c.r.s[2];
        int inside = e >= 0 && z < bt && row < r->m && col < r->n;
        double abs_sum = inside ? mag[(z * r->m + row) * r->n + col] : 0;
        double tol = inside ? 4.0 * (double)(r->k + 2) * eps * abs_sum + out_rtol * fabs(want_c[i]) + 1e-30 : 0;
        if (!tu_close(got[i], want_c[i], tol, 0))
            ck_abort_msg("%s: %s element %zu (batch %lld, %lld, %lld) is %.9g, expected %.9g", what, inside ? "C" : "outside C",
                         i, (long long)z, (long long)row, (long long)col, got[i], want_c[i]);
    }
    free(want_c), free(got), free(mag);
    drop(&a), drop(&b), drop(&c);
    if (want == ON_ANY) return 1;
    char *fresh = log_new(log);
    assert_builds(fresh, want, what);
    free(fresh);
    if (r->config && want != ON_PORTABLE) {
        /* "KERNEL=5,BLOCK_M=..." -> its -D's, which the program's options hold in this order */
        char defs[256], vec[64], dts[96];
        size_t n = 0;
        for (const char *p = r->config; *p && n + 8 < sizeof defs; p++) {
            if (p == r->config || p[-1] == ',') n += (size_t)snprintf(defs + n, sizeof defs - n, "-D ");
            defs[n++] = *p == ',' ? ' ' : *p;
            defs[n] = 0;
        }
        int v = r->aligned ? 16 / (int)clkit_dtype_size(r->in) : 1;
        snprintf(vec, sizeof vec, " -D VEC_A=%d -D VEC_B=%d ", v, v);
        snprintf(dts, sizeof dts, " -D A_DTYPE=%s -D B_DTYPE=%s -D C_DTYPE=%s ", dt_token(r->in), dt_token(r->in), dt_token(r->out));
        const char *frags[] = {defs, vec, dts, NULL};
        ck_assert_msg(log_has(log, frags), "%s: no build of '%s' with '%s' and '%s'", what, defs, vec, dts);
    }
    return 1;
}

static void check_mm(clkit_context *ctx, build_log *log, kernel_kind want, const mm *r, const char *what)
{
    run_mm(ctx, log, want, r, what, 0);
}

/* ---- every row of the tile tables ---- */

/* The problem every row runs: no tile divides it. */
enum { SWEEP_M = 100, SWEEP_N = 65, SWEEP_K = 97 };

typedef struct row {
    int shape[5]; /* BLOCK_M, BLOCK_N, BLOCK_K (of 16-bit operands; f32 take half), WAVES_M, WAVES_N */
    int group;    /* GROUP_M: 8 as the heuristic sets it; 2 on the known-answer test's tile */
    mm run;       /* what runs on it (alpha 0: 1), each row another dtype pair and layout */
} row;

#define RUN(in_, out_, layouts, aligned_, ...)                                                   \
    {.in = CLKIT_##in_, .out = CLKIT_##out_, .la = layouts[0], .lb = layouts[1], .lc = layouts[2], \
     .aligned = aligned_, __VA_ARGS__}

/* host/ops/matmul.c's mfma_shapes, in order, as of this suite's writing (the tables may change
   under it: a row that is no longer there is just one more override; a row its own rules
   refuse is reported and skipped, see check_rows). As written, under emulation the two 8-wave
   tiles take f32 only (for 16-bit operands their two stages and the emulation's operand
   exchange, 2 KiB a wave, exceed 64 KiB of local memory). */
static const row mfma_rows[] = {
    {{128, 128, 32, 2, 2}, 8, RUN(F16, F32, "nnn", 1)},
    {{256, 128, 32, 4, 2}, 8, RUN(F32, F32, "nnn", 1, .batch = 2, .b_bcast = 1, .beta = 0.5f, .act = CLKIT_ACT_RELU)},
    {{128, 256, 32, 2, 4}, 8, RUN(F32, F32, "ttt", 0)},
    {{128, 64, 32, 2, 2}, 8, RUN(BF16, BF16, "tnn", 1, .beta = -0.5f, .act = CLKIT_ACT_LEAKY_RELU)},
    {{64, 128, 32, 2, 2}, 8, RUN(F16, F16, "ntn", 0, .beta = 2.0f, .act = CLKIT_ACT_RELU)},
    {{64, 64, 64, 2, 2}, 8, RUN(BF16, F32, "ttn", 1, .batch = 3, .a_bcast = 1)},
    {{64, 64, 32, 2, 2}, 2, RUN(F16, F32, "nnn", 1)},
    {{32, 64, 32, 1, 2}, 8, RUN(F16, BF16, "nnt", 0, .batch = 2, .alpha = -1.5f)},
    {{32, 32, 32, 1, 1}, 8, RUN(BF16, F32, "ntn", 0)},
};
/* ... and wmma_shapes (f16 and bf16 only: WMMA takes no f32). The 128 x 128 tiles hold more
   registers a lane at wave32, the emulation's width, than the rules allow (legal at wave64). */
static const row wmma_rows[] = {
    {{128, 128, 32, 4, 2}, 8, RUN(F16, F32, "nnn", 1)},
    {{128, 128, 32, 2, 4}, 8, RUN(BF16, F32, "ttn", 1)},
    {{128, 64, 32, 4, 2}, 8, RUN(BF16, BF16, "tnn", 1, .beta = -0.5f, .act = CLKIT_ACT_LEAKY_RELU)},
    {{64, 128, 32, 2, 4}, 8, RUN(F16, F16, "ntt", 0, .batch = 3, .b_bcast = 1, .beta = 2.0f, .act = CLKIT_ACT_RELU)},
    {{64, 64, 32, 2, 2}, 2, RUN(F16, F32, "nnn", 1)},
};

/* The known-answer test's tile (selftest.c), which must stay legal on every target: the
   variants below run on it. */
static const row known_answer_row = {{64, 64, 32, 2, 2}, 2, RUN(F16, F32, "nnn", 1)};
static const row odd_row = {{64, 64, 32, 2, 2}, 2, RUN(F16, BF16, "ntn", 0)};

/* The override of a row for operands of dtype dt. */
static void row_config(const row *w, clkit_dtype dt, char *buf, size_t n)
{
    snprintf(buf, n, "KERNEL=5,BLOCK_M=%d,BLOCK_N=%d,BLOCK_K=%d,WAVES_M=%d,WAVES_N=%d,GROUP_M=%d", w->shape[0],
             w->shape[1], dt == CLKIT_F32 ? w->shape[2] / 2 : w->shape[2], w->shape[3], w->shape[4], w->group);
}

/* The row's run, on the sweep's problem. */
static mm row_run(const row *w, char *config, size_t n)
{
    mm r = w->run;
    if (r.alpha == 0) r.alpha = 1.0f;
    r.m = SWEEP_M, r.n = SWEEP_N, r.k = SWEEP_K;
    row_config(w, r.in, config, n);
    r.config = config;
    return r;
}

/* An override refused on a small problem: CLKIT_ERR_INVALID_VALUE with a message, C as it was. */
static void expect_refused(clkit_context *ctx, clkit_dtype dt, const char *config)
{
    clkit_matmul_options o = clkit_matmul_defaults();
    o.config = config;
    operand a = make(ctx, dt, 0, 64, 64, 'n', 1, 0, 0, 0, 1, 0), c = make(ctx, dt, 0, 64, 64, 'n', 1, 0, 0, 0, 2, 0);
    TU_EXPECT(CLKIT_ERR_INVALID_VALUE, clkit_matmul(ctx, &a.t, &a.t, &c.t, &o)); /* refused: builds nothing */
    assert_unchanged(ctx, c.buf, dt, c.len, c.host, config);
    drop(&a), drop(&c);
}

/* Every row by override on the sweep's problem; returns how many ran. A row its own legality
   rules refuse for the row's operands must be refused cleanly and is reported; the others must
   be right, on a program of their tile. */
static int check_rows(clkit_context *ctx, build_log *log, kernel_kind kind, const row *rows, size_t n)
{
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        char config[160], what[256];
        mm r = row_run(&rows[i], config, sizeof config);
        snprintf(what, sizeof what, "%s %s->%s %c%c->%c %s", config, clkit_dtype_name(r.in), clkit_dtype_name(r.out), r.la,
                 r.lb, r.lc, r.aligned ? "aligned" : "odd strides");
        if (run_mm(ctx, log, kind, &r, what, 1)) ran++;
        else fprintf(stderr, "test_amd_matrix: note: %s: refused on %s\n", what, kind_name(kind));
        if (kind != ON_MFMA || r.in == CLKIT_F32) continue;
        /* MFMA's f32 instruction (k 2, BLOCK_K halved) on the same tile and layouts */
        r.in = r.out = CLKIT_F32;
        row_config(&rows[i], r.in, config, sizeof config);
        snprintf(what, sizeof what, "%s f32 %c%c->%c %s", config, r.la, r.lb, r.lc, r.aligned ? "aligned" : "odd strides");
        if (!run_mm(ctx, log, kind, &r, what, 1)) fprintf(stderr, "test_amd_matrix: note: %s: refused on MFMA\n", what);
    }
    return ran;
}

/* Overrides no target takes: BLOCK_K not a whole number of the instruction's k steps (8 for
   16-bit MFMA, 2 for f32, 16 for WMMA), f32 on WMMA, a tile no whole number of instruction
   tiles a wave, or more waves than its rows hold. */
static void check_refusals(clkit_context *ctx, kernel_kind kind)
{
    if (kind == ON_MFMA) {
        expect_refused(ctx, CLKIT_F16, "KERNEL=5,BLOCK_M=64,BLOCK_N=64,BLOCK_K=4,WAVES_M=2,WAVES_N=2,GROUP_M=8");
        expect_refused(ctx, CLKIT_F32, "KERNEL=5,BLOCK_M=32,BLOCK_N=32,BLOCK_K=1,WAVES_M=1,WAVES_N=1,GROUP_M=8");
        expect_refused(ctx, CLKIT_F16, "KERNEL=5,BLOCK_M=16,BLOCK_N=64,BLOCK_K=32,WAVES_M=1,WAVES_N=2,GROUP_M=8");
    } else {
        expect_refused(ctx, CLKIT_F16, "KERNEL=5,BLOCK_M=64,BLOCK_N=64,BLOCK_K=8,WAVES_M=2,WAVES_N=2,GROUP_M=8");
        expect_refused(ctx, CLKIT_F32, "KERNEL=5,BLOCK_M=64,BLOCK_N=64,BLOCK_K=16,WAVES_M=2,WAVES_N=2,GROUP_M=2");
        expect_refused(ctx, CLKIT_F16, "KERNEL=5,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WAVES_M=8,WAVES_N=1,GROUP_M=8");
    }
    expect_refused(ctx, CLKIT_BF16, "KERNEL=5,BLOCK_M=64,BLOCK_N=64,BLOCK_K=32,WAVES_M=2,WAVES_N=2,GROUP_M=0");
}

/* Edges (no tile divides M, N or K; K = 1 and K = 0), transposed C, A's rows reversed (a
   negative stride), batches with a broadcast operand, alpha, beta and the activations, on two
   programs of the known-answer test's tile: f16 -> f32 with 16-byte vector loads (the known-
   answer test's own program), f16 -> bf16 with B transposed, element-wise. None of these
   changes a build option (dtypes, operand majorness, vector widths), so each runs on one of
   the two programs. */
static void check_variants(clkit_context *ctx, build_log *log, kernel_kind kind)
{
    static const int64_t edges[][3] = {{1, 1, 1}, {1, 33, 65}, {31, 1, 100}, {33, 65, 31}, {65, 100, 1}, {100, 31, 33}, {64, 64, 64}};
    for (int v = 0; v < 2; v++) {
        const row *w = v ? &odd_row : &known_answer_row;
        char config[160], what[320];
        for (size_t e = 0; e < sizeof edges / sizeof *edges; e++) {
            mm r = row_run(w, config, sizeof config);
            r.m = edges[e][0], r.n = edges[e][1], r.k = edges[e][2];
            r.beta = e % 3 == 1 ? 1.5f : 0.0f;
            r.act = (clkit_activation)(e % 3);
            snprintf(what, sizeof what, "%s %s %lldx%lldx%lld beta %g act %d", config, clkit_dtype_name(r.in), (long long)r.m,
                     (long long)r.n, (long long)r.k, r.beta, (int)r.act);
            check_mm(ctx, log, kind, &r, what);
        }
        mm r = row_run(w, config, sizeof config);
        r.flip = 1, r.m = 70, r.n = 40, r.k = 45, r.lc = r.lc == 'n' ? 't' : 'n';
        snprintf(what, sizeof what, "%s: A's rows reversed, C transposed", config);
        check_mm(ctx, log, kind, &r, what);
        r = row_run(w, config, sizeof config);
        r.batch = 3, r.a_bcast = 1, r.m = 33, r.n = 47, r.k = 70, r.beta = 0.75f, r.act = CLKIT_ACT_LEAKY_RELU;
        snprintf(what, sizeof what, "%s: batch 3, A broadcast, beta 0.75, leaky relu", config);
        check_mm(ctx, log, kind, &r, what);
        r.a_bcast = 0, r.b_bcast = 1, r.flip = 1, r.alpha = 0.5f, r.beta = -1.0f, r.act = CLKIT_ACT_RELU;
        snprintf(what, sizeof what, "%s: batch 3, B broadcast, A's rows reversed, alpha 0.5, beta -1, relu", config);
        check_mm(ctx, log, kind, &r, what);
        for (int beta = 0; beta <= 1; beta++) {
            r = row_run(w, config, sizeof config);
            r.m = 40, r.n = 33, r.k = 0, r.beta = (float)beta, r.act = beta ? CLKIT_ACT_NONE : CLKIT_ACT_RELU;
            snprintf(what, sizeof what, "%s: K = 0, beta %d", config, beta);
            check_mm(ctx, log, kind, &r, what);
        }
    }
}

/* The heuristic's plans on an emulated target (no override): the matrix kernel for f16 and
   bf16 (and f32 on MFMA), on tiles of its choosing. */
static void check_heuristic(clkit_context *ctx, build_log *log, kernel_kind kind)
{
    mm cases[] = {mm_of(CLKIT_F16, CLKIT_F32, 31, 33, 65, "nnn", 1), mm_of(CLKIT_BF16, CLKIT_BF16, 45, 20, 50, "tnt", 0),
                  mm_of(CLKIT_F32, CLKIT_F32, 17, 19, 23, "nnn", 1), mm_of(CLKIT_F16, CLKIT_F16, 200, 150, 120, "ntn", 0)};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (kind == ON_WMMA && cases[i].in == CLKIT_F32) continue;
        char what[96];
        snprintf(what, sizeof what, "heuristic %s %lldx%lldx%lld", clkit_dtype_name(cases[i].in), (long long)cases[i].m,
                 (long long)cases[i].n, (long long)cases[i].k);
        check_mm(ctx, log, kind, &cases[i], what);
    }
}

/* f32 operands the matrix cores do not take: exact_f32 (one FMA a product, which MFMA's
   summing inside the instruction does not promise), and any f32 on WMMA. */
static void check_kept_off(clkit_context *ctx, build_log *log, kernel_kind kind)
{
    mm r = mm_of(CLKIT_F32, CLKIT_F32, 33, 40, 37, "nnn", 1);
    r.exact = kind == ON_MFMA;
    check_mm(ctx, log, ON_PORTABLE, &r, kind == ON_MFMA ? "exact f32 on MFMA" : "f32 on WMMA");
}

static void check_target(const char *gfx, kernel_kind kind, const row *rows, size_t nrows)
{
    if (!cpu_device()) return;
    unsigned bit = kind == ON_MFMA ? CLKIT_FAST_PATH_AMD_MFMA : CLKIT_FAST_PATH_AMD_WMMA;
    char *cache = temp_dir();
    build_log log;
    log_begin(&log);
    clkit_context *ctx = emu_ctx(gfx, cache);
    ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, bit);
    check_variants(ctx, &log, kind);
    ck_assert_msg(check_rows(ctx, &log, kind, rows, nrows) > 0, "%s: no row of the tile table ran", gfx);
    check_refusals(ctx, kind);
    check_heuristic(ctx, &log, kind);
    ck_assert_msg((paths_of(ctx, "matmul") & AMD_BITS) == bit, "%s: the path went off", gfx);
    check_kept_off(ctx, &log, kind);
    clkit_context_release(ctx);
    log_end(&log);
    tu_remove_tree(cache);
    free(cache);
}

START_TEST(mfma_gfx942) { check_target("gfx942", ON_MFMA, mfma_rows, sizeof mfma_rows / sizeof *mfma_rows); }
END_TEST

START_TEST(wmma_gfx1100) { check_target("gfx1100", ON_WMMA, wmma_rows, sizeof wmma_rows / sizeof *wmma_rows); }
END_TEST

/* gfx90a plans as gfx942 (the same MFMA instructions and wave), and gfx1030 (RDNA2, no
   matrix instructions) on the portable kernels. */
START_TEST(other_targets)
{
    if (!cpu_device()) return;
    char *cache = temp_dir();
    build_log log;
    log_begin(&log);
    clkit_context *ctx = emu_ctx("gfx90a", cache);
    mm r = mm_of(CLKIT_F16, CLKIT_F32, 31, 33, 65, "nnn", 1);
    check_mm(ctx, &log, ON_MFMA, &r, "gfx90a heuristic f16");
    r = mm_of(CLKIT_F32, CLKIT_F32, 17, 19, 23, "nnn", 1);
    check_mm(ctx, &log, ON_MFMA, &r, "gfx90a heuristic f32");
    ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, CLKIT_FAST_PATH_AMD_MFMA);
    clkit_context_release(ctx);
    ctx = emu_ctx("gfx1030", cache);
    r = mm_of(CLKIT_F16, CLKIT_F32, 31, 33, 65, "nnn", 1);
    check_mm(ctx, &log, ON_PORTABLE, &r, "gfx1030 f16");
    ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, 0);
    clkit_context_release(ctx);
    log_end(&log);
    tu_remove_tree(cache);
    free(cache);
}
END_TEST

/* ==== 3. the known-answer test ==== */

/* Whether lines (log_new's) hold a build of file. */
static int built(const char *lines, const char *file)
{
    char tag[64];
    snprintf(tag, sizeof tag, "%s\t", file);
    for (const char *p = lines; *p; p += strcspn(p, "\n"), p += *p == '\n')
        if (!strncmp(p, tag, strlen(tag))) return 1;
    return 0;
}

/* The known-answer test's own program (selftest.c's matrix-core tile), in the options of a
   recorded build: none of the calls below plans it. */
static const char *const known_answer_tile[] = {" -D BLOCK_M=64 -D BLOCK_N=64 -D BLOCK_K=32 -D WAVES_M=2 -D WAVES_N=2 -D GROUP_M=2 ", NULL};

/* Emulated instructions that read A from the wrong lanes (MFMA: each k half from the other
   half-wave; WMMA: each 16-lane quarter the next quarter's row), from a CLKIT_KERNEL_DIR copy of
   the sources: the path's first use runs the known-answer test, which fails; the path goes off
   for matmul, and the call (and the next) run right on the portable kernels. Verdicts on
   sources from CLKIT_KERNEL_DIR are not kept (they may change under the same name): another
   context retests, and once the embedded sources are back, the same cache holds no failure
   and the path serves. */
START_TEST(selftest_fallback)
{
    if (!cpu_device()) return;
    static const char *const breaks[] = {
        "#define A_LANE(i, k, lane) ((i) + 32 * ((k) / FRAG_K))", "#define A_LANE(i, k, lane) ((i) + 32 * (1 - (k) / FRAG_K))",
        "#define A_LANE(i, k, lane) ((i) + 16 * ((lane) / 16))", "#define A_LANE(i, k, lane) (((i) + 1) % 16 + 16 * ((lane) / 16))",
        NULL};
    static const struct {
        const char *gfx;
        kernel_kind kind;
        unsigned bit;
    } cases[] = {{"gfx942", ON_MFMA, CLKIT_FAST_PATH_AMD_MFMA}, {"gfx1100", ON_WMMA, CLKIT_FAST_PATH_AMD_WMMA}};
    char *kdir = temp_dir();
    write_sources(kdir, breaks);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *gfx = cases[i].gfx;
        char *cache = temp_dir(), *was_kdir = env_swap("CLKIT_KERNEL_DIR", kdir), what[160];
        build_log log;
        log_begin(&log);
        clkit_context *ctx = emu_ctx(gfx, cache);
        ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, cases[i].bit);
        mm r = mm_of(CLKIT_F16, CLKIT_F32, 31, 33, 65, "nnn", 1);
        snprintf(what, sizeof what, "%s: f16 matmul whose %s fails its known-answer test", gfx, kind_name(cases[i].kind));
        check_mm(ctx, &log, ON_ANY, &r, what);
        char *fresh = log_new(&log);
        ck_assert_msg(lines_have(fresh, known_answer_tile) && built(fresh, "matmul.cl"),
                      "%s: expected the known-answer test's build, then the portable kernels; built:\n%s", gfx, fresh);
        free(fresh);
        ck_assert_msg((paths_of(ctx, "matmul") & AMD_BITS) == 0, "%s: the failed known-answer test left the path on", gfx);
        r.m = 64, r.n = 20, r.beta = 1.0f;
        snprintf(what, sizeof what, "%s: the next f16 matmul", gfx);
        check_mm(ctx, &log, ON_PORTABLE, &r, what);
        clkit_context_release(ctx);

        ctx = emu_ctx(gfx, cache);
        ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, cases[i].bit);
        snprintf(what, sizeof what, "%s: f16 matmul in a second context, CLKIT_KERNEL_DIR still set", gfx);
        check_mm(ctx, &log, ON_ANY, &r, what);
        fresh = log_new(&log);
        ck_assert_msg(lines_have(fresh, known_answer_tile), "%s: the second context did not retest; built:\n%s", gfx, fresh);
        free(fresh);
        ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, 0);
        clkit_context_release(ctx);

        env_restore("CLKIT_KERNEL_DIR", was_kdir);
        was_kdir = env_swap("CLKIT_KERNEL_DIR", NULL);
        ctx = emu_ctx(gfx, cache);
        snprintf(what, sizeof what, "%s: f16 matmul on the embedded sources, same cache", gfx);
        check_mm(ctx, &log, cases[i].kind, &r, what);
        ck_assert_msg((paths_of(ctx, "matmul") & AMD_BITS) == cases[i].bit,
                      "%s: a verdict on CLKIT_KERNEL_DIR's sources was kept for the embedded ones", gfx);
        clkit_context_release(ctx);
        env_restore("CLKIT_KERNEL_DIR", was_kdir);
        log_end(&log);
        tu_remove_tree(cache);
        free(cache);
    }
    tu_remove_tree(kdir);
    free(kdir);
}
END_TEST

/* A failing verdict kept in the binary cache: the path is on until it would first serve, then
   off without a retest (the known-answer test's program is not built; the call's own plan is,
   as every plan is built before its path is proven) and the call runs right on the portable
   kernels; for MFMA and for WMMA. */
START_TEST(kept_verdict)
{
    if (!cpu_device()) return;
    static const struct {
        const char *gfx;
        clkit_path path;
        unsigned bit;
    } cases[] = {{"gfx942", CLKIT_PATH_AMD_MFMA, CLKIT_FAST_PATH_AMD_MFMA}, {"gfx1100", CLKIT_PATH_AMD_WMMA, CLKIT_FAST_PATH_AMD_WMMA}};
    char *was_kdir = env_swap("CLKIT_KERNEL_DIR", NULL); /* verdicts are kept for the embedded sources only */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *cache = temp_dir(), name[96];
        clkit_context *ctx = emu_ctx(cases[i].gfx, cache);
        clkit_path_test_name(cases[i].path, CLKIT_FAMILY_MATMUL, name, sizeof name);
        ck_assert_int_eq(clkit_cache_verdict(ctx, name), -1);
        clkit_cache_set_verdict(ctx, name, false);
        clkit_context_release(ctx);
        build_log log;
        log_begin(&log);
        ctx = emu_ctx(cases[i].gfx, cache);
        ck_assert_uint_eq(paths_of(ctx, "matmul") & AMD_BITS, cases[i].bit);
        mm r = mm_of(CLKIT_F16, CLKIT_F32, 31, 33, 65, "nnn", 1);
        check_mm(ctx, &log, ON_ANY, &r, "f16 matmul under a kept failing verdict");
        char *fresh = log_new(&log);
        ck_assert_msg(!lines_have(fresh, known_answer_tile) && built(fresh, "matmul.cl"),
                      "%s: expected no known-answer test and the portable kernels; built:\n%s", cases[i].gfx, fresh);
        free(fresh);
        ck_assert_msg((paths_of(ctx, "matmul") & AMD_BITS) == 0, "%s: the kept failure left the path on", cases[i].gfx);
        clkit_context_release(ctx);
        log_end(&log);
        tu_remove_tree(cache);
        free(cache);
    }
    env_restore("CLKIT_KERNEL_DIR", was_kdir);
}
END_TEST

int main(void)
{
    /* Cold PoCL builds of the emulated matrix kernels took 15 to 60 s each at PoCL's default
       optimisation (their unrolled instructions hold two barriers each), several times the
       whole suite's budget; unoptimised they take a few seconds, and the emulation's answers
       do not depend on it. A caller's own flags stay. */
    if (!getenv("POCL_EXTRA_BUILD_FLAGS")) tu_setenv("POCL_EXTRA_BUILD_FLAGS", "-cl-opt-disable");
    Suite *s = suite_create("amd_matrix");
    TCase *tc = tu_tcase("amd_matrix");
    tcase_add_test(tc, layouts);
    tcase_add_test(tc, targets);
    tcase_add_test(tc, mfma_gfx942);
    tcase_add_test(tc, wmma_gfx1100);
    tcase_add_test(tc, other_targets);
    tcase_add_test(tc, selftest_fallback);
    tcase_add_test(tc, kept_verdict);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
