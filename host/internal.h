/* Internal interfaces shared by the host files; nothing here is public API. */
#ifndef CLKIT_INTERNAL_H
#define CLKIT_INTERNAL_H

#include "clkit.h"
#include "heuristics.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct clkit_program clkit_program;
struct json_object;

#define CLKIT_TUNED_RECENT 16

/* tuned.json as the last lookup parsed it, with the identity of the file it came from, and
   the answers of the most recent lookups into it (tune_cache.c). */
typedef struct clkit_tuned_memo {
    struct json_object *entries; /* NULL: nothing parsed yet */
    long long ino, size, mtime_s, mtime_ns; /* ino -1: the file did not exist */
    struct clkit_tuned_recent {
        char op[32], dtype[32], layout[32];
        int64_t shape[4];
        int nshape, found; /* found: a clkit_lookup */
        char config[512];
    } recent[CLKIT_TUNED_RECENT];
    int n_recent, next_recent;
} clkit_tuned_memo;

#define CLKIT_SCRATCH_POOL 8

/* Vendor fast paths (paths.c), indexed as the bits of clkit_fast_paths, and the op families
   whose failures they keep apart. */
typedef enum clkit_path {
    CLKIT_PATH_NONE = -1, /* the portable kernels */
    CLKIT_PATH_NV_SHUFFLE, CLKIT_PATH_NV_MMA, CLKIT_PATH_NV_WGMMA, CLKIT_PATH_NV_TMA,
    CLKIT_PATH_AMD_MFMA, CLKIT_PATH_AMD_WMMA, CLKIT_PATH_COUNT
} clkit_path;
typedef enum clkit_family {
    CLKIT_FAMILY_MATMUL, CLKIT_FAMILY_ATTENTION, CLKIT_FAMILY_CROSS_ENTROPY, CLKIT_FAMILY_SOFTMAX,
    CLKIT_FAMILY_LAYERNORM, CLKIT_FAMILY_COUNT
} clkit_family;

struct clkit_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl;
    cl_command_queue queue;
    struct clkit_device_props props;
    bool profiling;
    char build_base[256];     /* -cl-std and device macros, appended to every build */
    char *cache_dir;          /* NULL: no on-disk binary cache */
    clkit_program *programs;  /* in-memory program cache, most recent first */
    bool recording;           /* between clkit_profile_begin and _end */
    cl_event first_event, last_event;
    uint64_t scratch_now, scratch_peak;  /* bytes of scratch buffers held by ops */
    struct {
        cl_mem buf;
        size_t bytes;
    } pool[CLKIT_SCRATCH_POOL]; /* scratch released by ops, kept for the next call (tensor.c) */
    bool path_on[CLKIT_PATH_COUNT];  /* the device runs it and no switch turns it off */
    bool path_failed[CLKIT_PATH_COUNT][CLKIT_FAMILY_COUNT]; /* its program failed to build */
    unsigned char path_proof[CLKIT_PATH_COUNT][CLKIT_FAMILY_COUNT]; /* paths.c's proof states */
    bool amd_emulated;        /* CLKIT_AMD_EMULATE: a CPU device runs AMD matrix-core kernels
                                 with software instructions (context.c) */
    uint64_t cache_bytes;     /* the device's last-level cache (CL_DEVICE_GLOBAL_MEM_CACHE_SIZE), 0: unknown */
    cl_mem tma_slot;          /* where TMA kernels publish their tensor maps (clkit_tma_maps) */
    cl_mem tickets;           /* split-K counters, 0 between kernels (clkit_tickets) */
    size_t tickets_n;
    clkit_tuned_memo tuned;   /* tune_cache.c's parsed tuned.json, reused while unchanged */
    char error[8192];
};

/* ---- errors and logging (context.c) ---- */
/* level: a clkit_log_level (clkit.h); to stderr, or to clkit_set_log_callback's function. */
void clkit_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An environment variable holding a whole number in [lo, hi]: 1 with *out set; 0 when it is
   unset or empty, and when it holds anything else, which is ignored with a warning. */
int clkit_env_int(const char *name, int64_t lo, int64_t hi, int64_t *out);
/* Records a message on ctx (if any) and returns status, so callers can `return clkit_fail(...)`. */
clkit_status clkit_fail(clkit_context *ctx, clkit_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
clkit_status clkit_cl_fail(clkit_context *ctx, cl_int err, const char *what);
const char *clkit_cl_error_name(cl_int err);
/* Clears the last error; every public entry point calls it first. */
void clkit_clear_error(clkit_context *ctx);

/* ---- vendor fast paths (paths.c) ---- */
/* From the device's properties and the environment switches, at context creation. */
void clkit_paths_init(clkit_context *ctx);
/* Whether an op of `family` may build programs of `path` (and so of the paths it nests in). */
bool clkit_path_allowed(const clkit_context *ctx, clkit_path path, clkit_family family);
/* A program of `path` failed to build for `family` (its log in clkit_last_error): the path is
   off for that family from now on, with a warning naming what runs instead; the error is
   cleared, so the op can plan again. */
void clkit_path_failed(clkit_context *ctx, clkit_path path, clkit_family family);
/* Whether `path` has proven itself for `family` on this context: the first time, its known-
   answer test runs (or its cached verdict is read); a failure turns the path off for the
   family with a warning, as a failed build does, and is never acquitted. True while the test
   runs, so that its own calls take the path. */
bool clkit_path_proven(clkit_context *ctx, clkit_path path, clkit_family family);
/* The wave width AMD matrix-core kernels run at: the device's, or the emulated target's. */
unsigned clkit_amd_wave(const clkit_context *ctx);
/* The name under which the verdict of path's known-answer test for family is kept. */
void clkit_path_test_name(clkit_path path, clkit_family family, char *buf, size_t n);
/* Runs family's known-answer problem on the paths it may take now (a matmul on a tile of
   path's kind; CLKIT_PATH_NONE: the heuristic's) and checks the answer (selftest.c). */
bool clkit_selftest_run(clkit_context *ctx, clkit_path path, clkit_family family);
/* The fallback that a failure sent the call to failed to build as well: the source is what is
   broken, so the path is on again for the family (the next call with a good source takes it). */
void clkit_path_acquit(clkit_context *ctx, clkit_path path, clkit_family family);

/* ---- programs (program.c) ---- */
/* Kernel `name` from cl/`file` built with `options` (plus the device's base options):
   from the in-memory cache, the on-disk binary cache, or compiled now. The kernel object
   belongs to the cache; do not release it. */
clkit_status clkit_get_kernel(clkit_context *ctx, const char *file, const char *name,
                              const char *options, cl_kernel *kernel);
void clkit_programs_release(clkit_context *ctx);
/* ptx (NUL-terminated, in a buffer of cap bytes) with the "//@90a " marks of cl/nv/mma.h removed
   and ".target sm_90" made ".target sm_90a", in place; *len becomes its size with the NUL, as
   the driver's binaries count it. Returns 0 when the text has no such target line or the
   buffer no room for the one byte it adds. */
int clkit_ptx_retarget_90a(char *ptx, size_t *len, size_t cap);
/* ptx with the directive ".maxnreg N" on each entry whose body holds a "//@maxnreg N" mark
   (cl/nv/mma.h's NV_MAXNREG): a new NUL-terminated text (malloc), *len its size with the NUL;
   NULL when out of memory. */
char *clkit_ptx_register_caps(const char *ptx, size_t *len);
/* The binary cache's cap in bytes, 0 for none: $CLKIT_CACHE_MAX_MB (megabytes, fractions
   allowed), else CLKIT_CACHE_MAX_MB_DEFAULT; a value that is no size warns and takes the
   default. */
uint64_t clkit_cache_cap(void);
/* A verdict kept in the binary cache (a known-answer test's, named by `what`): 1 passed, 0
   failed, -1 none kept. */
int clkit_cache_verdict(clkit_context *ctx, const char *what);
void clkit_cache_set_verdict(clkit_context *ctx, const char *what, bool pass);
/* What clkit_read_regular found. */
typedef enum {
    CLKIT_READ_OK, CLKIT_READ_SHORT, CLKIT_READ_MISSING, CLKIT_READ_UNREADABLE,
    CLKIT_READ_NOT_REGULAR, CLKIT_READ_TOO_LARGE
} clkit_read_status;
/* The bytes of path, NUL-terminated, their count in *len, when it is a regular file of at
   most max bytes: OK, or SHORT with what was there when it shrank while read. Otherwise NULL
   with *status (TOO_LARGE: *len is its size) and *why. The size comes from fstat of the open
   file, not from seeking (a directory reports LLONG_MAX on ext4, a FIFO none), and the open
   does not block, as it would on a FIFO without a writer. */
char *clkit_read_regular(const char *path, size_t max, size_t *len, clkit_read_status *status,
                         const char **why);
/* mkdir -p; 0 on success. */
int clkit_mkdir_p(const char *dir);
/* Default cache dir from the environment; caller frees; NULL when none can be derived. */
char *clkit_default_cache_dir(void);

/* ---- tuned configs (tune_cache.c) ---- */
void clkit_tuned_release(clkit_context *ctx);

/* ---- launching (launch.c) ---- */
/* A kernel's arguments, set in order through the clkit_arg_* calls: the builder keeps the
   index and the first failure, and clkit_run refuses to enqueue unless exactly the arguments
   the kernel declares were set (a miscount is caught by the first test that runs it). */
typedef struct clkit_args {
    cl_kernel k;
    cl_uint n;      /* arguments set so far */
    cl_int err;     /* the first clSetKernelArg failure */
    cl_uint err_at;
} clkit_args;
clkit_args clkit_args_of(cl_kernel k);
void clkit_arg(clkit_args *a, size_t size, const void *value);
void clkit_arg_mem(clkit_args *a, cl_mem m);
void clkit_arg_int(clkit_args *a, cl_int v);
void clkit_arg_uint(clkit_args *a, cl_uint v);
void clkit_arg_long(clkit_args *a, cl_long v);
void clkit_arg_long4(clkit_args *a, cl_long4 v);
void clkit_arg_float(clkit_args *a, float v);
/* The run step every op ends with: the arguments checked (every one set, none failed), the
   work-group checked against the built kernel's limit, then the enqueue. local NULL: the
   driver picks the work-group. */
clkit_status clkit_run(clkit_context *ctx, const clkit_args *a, cl_uint dims, const size_t *global,
                       const size_t *local);
/* ---- the plan -> run pipeline (launch.c) ----
   Every op runs its kernels in two steps. Plan: from the problem, the device and the fast
   paths its family may take (clkit_path_allowed), choose a configuration (tune.c's
   clkit_choose_config: a tuned entry, exact or nearest, where legal, else the heuristic) and
   turn it into a clkit_plan. Run: clkit_plan_kernel builds it, clkit_args sets the arguments
   and clkit_run checks and enqueues. The fallbacks live in clkit_plan_kernel alone. */
typedef struct clkit_plan {
    const char *file;      /* source under cl/ */
    char name[48];         /* kernel */
    char options[1024];    /* build options, beside the device's */
    clkit_path path;       /* the fast path the program takes; CLKIT_PATH_NONE: portable */
    clkit_family family;   /* whose fast paths */
    cl_uint dims;
    size_t global[3], local[3]; /* local[0] 0: the driver picks the work-group */
} clkit_plan;
/* An op's plan step: fills plan (zeroed, path NONE) for problem, with a work-group of at most
   wg_limit work-items (0: the device's limit) and only on paths the family may take now. A
   plan whose geometry depends on the built kernel (a persistent grid) may leave global for
   the op to fill once clkit_plan_kernel returns. */
typedef clkit_status (*clkit_plan_fn)(clkit_context *ctx, void *problem, size_t wg_limit,
                                      clkit_plan *plan);
/* Plans and builds. A program of a fast path that does not build turns that path off for the
   plan's family (clkit_path_failed) and plans again, so the op gets the next path down; if
   that fails to build too, the source is at fault and the paths stay on (clkit_path_acquit).
   A built kernel that cannot run the planned work-group is planned again within its limit. */
clkit_status clkit_plan_kernel(clkit_context *ctx, clkit_plan_fn plan_fn, void *problem,
                               clkit_plan *plan, cl_kernel *k);
/* For a source that takes `path` unless `portable` (" -D NAME") is defined: sets the plan's
   path (NONE where the family may not take it) and family, and returns the define to add to
   its options ("" where the device lacks the path: its source then stays portable anyway). */
const char *clkit_plan_path(const clkit_context *ctx, clkit_plan *plan, clkit_path path,
                            clkit_family family, const char *portable);
/* clkit_run with the plan's geometry. */
clkit_status clkit_plan_run(clkit_context *ctx, const clkit_plan *plan, const clkit_args *a);
/* Elementwise launch over n same-shaped tensors: "<base>_dense" when every view is dense,
   with (buffer, element offset) per tensor then the element count; else "<base>_strided" with
   (buffer, offset, long4 strides) per tensor then long4 shape and the count. extra (may be
   NULL) appends the op's own arguments. A grid-stride launch sized by the streaming
   heuristics. */
typedef void (*clkit_extra_args)(clkit_args *a, const void *user);
clkit_status clkit_launch_pointwise(clkit_context *ctx, const char *file, const char *base,
                                    const char *options, int n, const clkit_tensor *const *ts,
                                    clkit_extra_args extra, const void *user);
/* Takes ownership of ev: kept as the first/last event of a profiling span, else released. */
void clkit_record_event(clkit_context *ctx, cl_event ev);
/* Work-group size limit of a built kernel on this device. */
size_t clkit_kernel_wg_limit(clkit_context *ctx, cl_kernel k);
/* Local and private memory of a built kernel, bytes. */
void clkit_kernel_mem(clkit_context *ctx, cl_kernel k, uint64_t *local, uint64_t *priv);

/* ---- matmul epilogues for other ops (ops/matmul.c) ---- */
/* One of matmul_mma's epilogues that replace the store of C (cl/nv/matmul_ce_epilogue.h:
   EPI_CE_STATS, EPI_CE_GRAD): the build option naming it and what sets the kernel arguments
   it adds after the operands. */
typedef struct clkit_matmul_epilogue {
    const char *define;
    clkit_extra_args args;
    const void *user;
} clkit_matmul_epilogue;

/* C = A B on the tensor cores, C's elements handed to epilogue e, in the tile opt->config
   names. Before enqueuing anything it fails with CLKIT_ERR_UNSUPPORTED where the tensor cores
   cannot take these operands on this device or the program does not build (the fast path is
   then off for the context), with CLKIT_ERR_INVALID_VALUE where the tile is not legal. */
clkit_status clkit_matmul_epilogue_run(clkit_context *ctx, const clkit_tensor *a,
                                       const clkit_tensor *b, const clkit_tensor *c,
                                       const clkit_matmul_options *opt,
                                       const clkit_matmul_epilogue *e);

/* Whether `config` names a tensor-core tile that 16-bit operands of dtype dt can take on
   this device for the fused epilogues (operand alignment aside, which
   clkit_matmul_epilogue_run checks). The epilogues' fast paths are cross-entropy's. */
bool clkit_matmul_tile_legal(const clkit_context *ctx, clkit_dtype dt, const char *config);

/* Work-groups of the tensor-core tile `config` (dtype dt operands) that the device runs at
   once: a wave, which the TMA's persistent kernel launches and others' grids fill in turn. */
uint64_t clkit_matmul_resident(const clkit_context *ctx, clkit_dtype dt, const char *config);

/* Whether wgmma tiles of op family fam load their operands by the TMA on this context. */
bool clkit_matmul_tma(const clkit_context *ctx, clkit_family fam);

/* ---- tensor checks (tensor.c) ---- */
/* Dtype sets for clkit_check_tensor. */
#define CLKIT_DT(t) (1u << (t))
#define CLKIT_DT_FLOAT (CLKIT_DT(CLKIT_F32) | CLKIT_DT(CLKIT_F16) | CLKIT_DT(CLKIT_BF16))
#define CLKIT_DT_ANY 0x3fu

/* NULL, buffer, ndim in [min_ndim, max_ndim], dtype in `dtypes`, shape >= 0, offset aligned,
   byte range inside the buffer, no 64-bit overflow. */
clkit_status clkit_check_tensor(clkit_context *ctx, const clkit_tensor *t, const char *name,
                                int min_ndim, int max_ndim, unsigned dtypes);
clkit_status clkit_check_same_shape(clkit_context *ctx, const clkit_tensor *a, const char *an,
                                    const clkit_tensor *b, const char *bn);
/* An output must not write one element twice (a zero or interleaving stride). */
clkit_status clkit_check_output(clkit_context *ctx, const clkit_tensor *out, const char *name);
/* out may not overlap in. With allow_alias, out may be exactly in (same buffer, offset,
   strides and dtype): the in-place case of elementwise ops. */
clkit_status clkit_check_disjoint(clkit_context *ctx, const clkit_tensor *out, const char *on,
                                  const clkit_tensor *in, const char *in_name, bool allow_alias);
int64_t clkit_numel(const clkit_tensor *t);
/* Monotonic seconds (host/tune.c): the tuners' budgets, clkit_benchmark's timing. */
double clkit_now_s(void);

/* A device scratch buffer of `bytes` for an op's intermediate results, counted toward
   clkit_scratch_peak until clkit_scratch_release. Releasing right after enqueueing the last
   kernel that uses it is safe: OpenCL keeps the memory until those commands finish. */
clkit_status clkit_scratch_alloc(clkit_context *ctx, size_t bytes, cl_mem *buffer);
void clkit_scratch_release(clkit_context *ctx, cl_mem buffer, size_t bytes);
/* At least n split-K counters (cl/common.h's split_last), each 0: zeroed once when made, and
   every kernel that counts on one puts it back to 0. */
clkit_status clkit_tickets(clkit_context *ctx, size_t n, cl_mem *out);
/* The context's global memory where a TMA kernel finds its tensor maps, 128 bytes each
   (CLKIT_TMA_MAPS of them): the queue is in order, so no other call's kernel rewrites them
   while a call's kernels read them. */
#define CLKIT_TMA_MAPS 4
clkit_status clkit_tma_maps(clkit_context *ctx, cl_mem *out);
/* Whether the TMA can take n strides of 16-bit elements (below 2^40 bytes, as the kernels'
   tensor maps hold them). */
bool clkit_tma_strides(const int64_t *strides, int n);
/* A new buffer covering exactly the bytes t's view reaches, and t re-based onto it: where a
   tuner writes candidates' results without touching the caller's output. */
clkit_status clkit_scratch_like(clkit_context *ctx, const clkit_tensor *t, clkit_tensor *out,
                                cl_mem *buffer, size_t *bytes);
const char *clkit_dtype_macro(clkit_dtype t);

/* A view normalised for kernels: 4 dims, leading ones padded, offset in elements. */
typedef struct clkit_view {
    cl_long4 shape, strides;
    cl_long offset;
} clkit_view;

/* Views of n same-shaped tensors with dims merged where every tensor is contiguous across
   them and size-1 dims dropped, so a contiguous tensor becomes 1-D with stride 1. */
void clkit_views(int n, const clkit_tensor *const *ts, clkit_view *views, int *ndim);
bool clkit_view_is_dense(const clkit_view *v, int ndim);

#endif
