/* Faults of the device and its compiler: kernel sources that do not compile (one op family's,
   the header every family includes, the second program of an op that builds two), an
   unknown CLKIT_DEVICE, and scratch memory the device refuses. Each must surface as a
   specific status with a message, write nothing, and leave the context working: the same
   call succeeds once the fault is gone, with the bits the embedded sources give. */
#define _GNU_SOURCE
#include "util.h"

#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The kernel sources compiled into the library (host/program.c): the copy that
   CLKIT_KERNEL_DIR overrides, written out here as that directory's starting point. */
typedef struct clkit_embedded_source {
    const char *name;
    const char *text;
} clkit_embedded_source;
extern const clkit_embedded_source clkit_embedded_sources[];

/* Appended to a source: a compile error in any file it lands in. */
static const char breakage[] = "\n__kernel void clkit_fault(void) { this is not OpenCL C; }\n";

/* ---- files ---- */

static void write_file(const char *dir, const char *name, const char *text, const char *tail)
{
    FILE *f = tu_create_file(dir, name);
    fputs(text, f);
    if (tail) fputs(tail, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Writes every kernel source into dir, `broken` (may be NULL) with a compile error. */
/* Whether source `name` is one that `broken` stands for: that file, and its NVIDIA twin
   (nv/<stem>_mma.cl) where it has one, since a family whose tensor-core program fails to
   build falls back to the portable file and fails only when both are broken. */
static int stands_for(const char *broken, const char *name)
{
    char twin[64];
    snprintf(twin, sizeof twin, "nv/%.*s_mma.cl", (int)strcspn(broken, "."), broken);
    return strcmp(name, broken) == 0 || strcmp(name, twin) == 0;
}

static void write_sources(const char *dir, const char *broken)
{
    for (const clkit_embedded_source *s = clkit_embedded_sources; s->name; s++)
        write_file(dir, s->name, s->text, broken && stands_for(broken, s->name) ? breakage : NULL);
}

/* A context on a fresh kernel directory (CLKIT_KERNEL_DIR) and a fresh binary cache, so that
   neither a cached program nor one left by another case hides the fault. */
typedef struct faulty {
    char kernels[32], cache[32];
    clkit_context *ctx;
} faulty;

static void faulty_begin(faulty *f, const char *broken)
{
    snprintf(f->kernels, sizeof f->kernels, "/tmp/clkit-kdir-XXXXXX");
    snprintf(f->cache, sizeof f->cache, "/tmp/clkit-kcache-XXXXXX");
    ck_assert(mkdtemp(f->kernels) != NULL && mkdtemp(f->cache) != NULL);
    write_sources(f->kernels, broken);
    tu_setenv("CLKIT_KERNEL_DIR", f->kernels);
    tu_setenv("CLKIT_CACHE_DIR", f->cache);
    f->ctx = tu_ctx();
}

static void faulty_end(faulty *f)
{
    clkit_context_release(f->ctx);
    tu_unsetenv("CLKIT_KERNEL_DIR");
    tu_unsetenv("CLKIT_CACHE_DIR");
    tu_remove_tree(f->kernels);
    tu_remove_tree(f->cache);
}

/* ---- one call of each op family ---- */

/* The outputs of one call: their buffers and the bytes they held before it. */
typedef struct outputs {
    int n;
    cl_mem buf[6];
    size_t bytes[6];
    unsigned char *before[6];
} outputs;

static size_t mem_size(cl_mem m)
{
    size_t n = 0;
    ck_assert(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof n, &n, NULL) == CL_SUCCESS);
    return n;
}

static unsigned char *read_bytes(clkit_context *ctx, cl_mem m, size_t n)
{
    cl_command_queue q;
    clkit_context_cl(ctx, NULL, &q, NULL);
    unsigned char *b = malloc(n);
    ck_assert(b != NULL);
    ck_assert(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n, b, 0, NULL, NULL) == CL_SUCCESS);
    return b;
}

static cl_mem inputs[12];
static int ninputs;
static double values[8192];

/* An input of shape (ndim, shape) filled from the shared values, or an output (out nonzero)
   filled with the sentinel pattern, whose bytes are kept to compare. */
static clkit_tensor tensor(clkit_context *ctx, outputs *o, clkit_dtype dt, int ndim,
                           const int64_t *shape, int out)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    cl_mem m = tu_buffer(ctx, dt, (size_t)n, out ? NULL : values);
    if (out) {
        o->buf[o->n] = m;
        o->bytes[o->n] = mem_size(m);
        o->before[o->n] = read_bytes(ctx, m, o->bytes[o->n]);
        o->n++;
    } else {
        inputs[ninputs++] = m;
    }
    return clkit_tensor_contiguous(m, dt, ndim, shape);
}

/* Class indices in range for a vocabulary of v. */
static clkit_tensor targets(clkit_context *ctx, int64_t t, int64_t v)
{
    double idx[16];
    for (int64_t i = 0; i < t; i++) idx[i] = (double)((i * 37 + 5) % v);
    cl_mem m = tu_buffer(ctx, CLKIT_I64, (size_t)t, idx);
    inputs[ninputs++] = m;
    return clkit_tensor_contiguous(m, CLKIT_I64, 1, &t);
}

#define IN(dt, nd, shape) tensor(ctx, o, dt, nd, shape, 0)
#define OUT(dt, nd, shape) tensor(ctx, o, dt, nd, shape, 1)

/* Each family's call on small ragged shapes, f32 (u8 for grayscale); the kernels named are
   the ones the call must build from CLKIT_KERNEL_DIR. */
static clkit_status call_add(clkit_context *ctx, outputs *o)
{
    int64_t s[1] = {1001};
    clkit_tensor x = IN(CLKIT_F32, 1, s), out = OUT(CLKIT_F32, 1, s);
    return clkit_add(ctx, &x, &x, &out);
}

static clkit_status call_copy(clkit_context *ctx, outputs *o)
{
    int64_t s[2] = {37, 53};
    clkit_tensor x = IN(CLKIT_F32, 2, s), out = OUT(CLKIT_F32, 2, s);
    out.strides[0] = 1, out.strides[1] = 37; /* a transpose: a kernel, not a buffer copy */
    return clkit_copy(ctx, &x, &out);
}

static clkit_status call_grayscale(clkit_context *ctx, outputs *o)
{
    int64_t rgb[3] = {3, 17, 23}, gray[2] = {17, 23};
    clkit_tensor x = IN(CLKIT_U8, 3, rgb), out = OUT(CLKIT_U8, 2, gray);
    return clkit_rgb_to_gray(ctx, &x, &out);
}

static clkit_status call_swizzle(clkit_context *ctx, outputs *o)
{
    int64_t s[2] = {33, 45};
    clkit_tensor x = IN(CLKIT_F32, 2, s), out = OUT(CLKIT_F32, 2, s);
    return clkit_swizzle2d(ctx, &x, &out, 4);
}

static clkit_status call_softmax(clkit_context *ctx, outputs *o)
{
    int64_t s[2] = {7, 301};
    clkit_tensor x = IN(CLKIT_F32, 2, s), out = OUT(CLKIT_F32, 2, s);
    return clkit_softmax(ctx, &x, &out);
}

static clkit_status call_dropout(clkit_context *ctx, outputs *o)
{
    int64_t s[1] = {1001};
    clkit_tensor x = IN(CLKIT_F32, 1, s), out = OUT(CLKIT_F32, 1, s);
    return clkit_dropout(ctx, &x, &out, 0.3f, 7);
}

static clkit_status call_matmul(clkit_context *ctx, outputs *o)
{
    int64_t sa[2] = {37, 29}, sb[2] = {29, 41}, sc[2] = {37, 41};
    clkit_tensor a = IN(CLKIT_F32, 2, sa), b = IN(CLKIT_F32, 2, sb), c = OUT(CLKIT_F32, 2, sc);
    clkit_matmul_options opt = clkit_matmul_defaults();
    opt.provider = CLKIT_PROVIDER_CLKIT; /* CLBlast builds its own kernels */
    return clkit_matmul(ctx, &a, &b, &c, &opt);
}

static clkit_status call_layernorm_forward(clkit_context *ctx, outputs *o)
{
    int64_t s[2] = {7, 301}, m[1] = {7}, n[1] = {301};
    clkit_tensor x = IN(CLKIT_F32, 2, s), w = IN(CLKIT_F32, 1, n), b = IN(CLKIT_F32, 1, n);
    clkit_tensor y = OUT(CLKIT_F32, 2, s), mean = OUT(CLKIT_F32, 1, m), rstd = OUT(CLKIT_F32, 1, m);
    return clkit_layernorm_forward(ctx, &x, &w, &b, 1e-5f, &y, &mean, &rstd);
}

/* Statistics as inputs: any positive rstd will do for a call that has to fail or match. */
static clkit_status call_layernorm_backward(clkit_context *ctx, outputs *o)
{
    int64_t s[2] = {7, 301}, m[1] = {7}, n[1] = {301};
    clkit_tensor dy = IN(CLKIT_F32, 2, s), x = IN(CLKIT_F32, 2, s), w = IN(CLKIT_F32, 1, n);
    clkit_tensor mean = IN(CLKIT_F32, 1, m), rstd = IN(CLKIT_F32, 1, m);
    clkit_tensor dx = OUT(CLKIT_F32, 2, s), dw = OUT(CLKIT_F32, 1, n), db = OUT(CLKIT_F32, 1, n);
    return clkit_layernorm_backward(ctx, &dy, &x, &w, &mean, &rstd, &dx, &dw, &db);
}

static clkit_status call_cross_entropy(clkit_context *ctx, outputs *o)
{
    int64_t ls[2] = {5, 1000}, one[1] = {1};
    clkit_tensor logits = IN(CLKIT_F32, 2, ls), tg = targets(ctx, 5, 1000);
    clkit_tensor loss = OUT(CLKIT_F32, 1, one), dlogits = OUT(CLKIT_F32, 2, ls);
    return clkit_cross_entropy(ctx, &logits, &tg, NULL, &loss, &dlogits);
}

static clkit_status call_linear_cross_entropy(clkit_context *ctx, outputs *o)
{
    int64_t xs[2] = {6, 40}, ws[2] = {150, 40}, bs[1] = {150}, one[1] = {1};
    clkit_tensor x = IN(CLKIT_F32, 2, xs), w = IN(CLKIT_F32, 2, ws), b = IN(CLKIT_F32, 1, bs);
    clkit_tensor tg = targets(ctx, 6, 150), loss = OUT(CLKIT_F32, 1, one);
    clkit_tensor dx = OUT(CLKIT_F32, 2, xs), dw = OUT(CLKIT_F32, 2, ws), db = OUT(CLKIT_F32, 1, bs);
    return clkit_linear_cross_entropy(ctx, &x, &w, &b, &tg, NULL, &loss, &dx, &dw, &db);
}

static clkit_status call_attention_forward(clkit_context *ctx, outputs *o)
{
    int64_t qs[4] = {1, 2, 37, 32}, ks[4] = {1, 1, 45, 32}, ls[3] = {1, 2, 37};
    clkit_tensor q = IN(CLKIT_F32, 4, qs), k = IN(CLKIT_F32, 4, ks), v = IN(CLKIT_F32, 4, ks);
    clkit_tensor out = OUT(CLKIT_F32, 4, qs), lse = OUT(CLKIT_F32, 3, ls);
    return clkit_attention_forward(ctx, &q, &k, &v, NULL, &out, &lse);
}

static clkit_status call_attention_backward(clkit_context *ctx, outputs *o)
{
    int64_t qs[4] = {1, 2, 37, 32}, ks[4] = {1, 1, 45, 32}, ls[3] = {1, 2, 37};
    clkit_tensor q = IN(CLKIT_F32, 4, qs), k = IN(CLKIT_F32, 4, ks), v = IN(CLKIT_F32, 4, ks);
    clkit_tensor out = IN(CLKIT_F32, 4, qs), dout = IN(CLKIT_F32, 4, qs), lse = IN(CLKIT_F32, 3, ls);
    clkit_tensor dq = OUT(CLKIT_F32, 4, qs), dk = OUT(CLKIT_F32, 4, ks), dv = OUT(CLKIT_F32, 4, ks);
    return clkit_attention_backward(ctx, &q, &k, &v, &out, &dout, &lse, NULL, &dq, &dk, &dv);
}

typedef struct family {
    const char *name, *source;
    clkit_status (*call)(clkit_context *ctx, outputs *o);
} family;

static const family families[] = {
    {"add", "add.cl", call_add},
    {"copy", "copy.cl", call_copy},
    {"grayscale", "grayscale.cl", call_grayscale},
    {"swizzle", "swizzle.cl", call_swizzle},
    {"softmax", "softmax.cl", call_softmax},
    {"dropout", "dropout.cl", call_dropout},
    {"matmul", "matmul.cl", call_matmul},
    {"layernorm forward", "layernorm.cl", call_layernorm_forward},
    {"layernorm backward", "layernorm.cl", call_layernorm_backward},
    {"cross-entropy", "cross_entropy.cl", call_cross_entropy},
    {"linear cross-entropy", "cross_entropy.cl", call_linear_cross_entropy},
    {"attention forward", "attention.cl", call_attention_forward},
    {"attention backward", "attention.cl", call_attention_backward},
};
#define FAMILIES (sizeof families / sizeof *families)

/* The bytes a family's call leaves in its outputs, or NULL where it fails: then its
   status and message are checked (a build failure naming `file`, or with file NULL, none
   at all) and its outputs must be untouched. *n receives the total size. */
static unsigned char *run_family(clkit_context *ctx, const family *f, const char *file, size_t *n)
{
    outputs o = {0};
    ninputs = 0;
    clkit_status s = f->call(ctx, &o);
    const char *msg = clkit_last_error(ctx);
    if (file) {
        ck_assert_msg(s == CLKIT_ERR_BUILD, "%s with a broken %s -> %s: %s", f->name, file,
                      clkit_status_string(s), msg);
        /* The compiler's log: the file, and the diagnostic of the broken line, which quotes
           its undeclared identifier `this`. */
        ck_assert_msg(strstr(msg, file) && strstr(msg, "error") && strstr(msg, "this"),
                      "%s: the message does not carry the build log of %s: %s", f->name, file, msg);
    } else {
        ck_assert_msg(s == CLKIT_OK, "%s -> %s: %s", f->name, clkit_status_string(s), msg);
    }
    ck_assert_int_eq(clkit_finish(ctx), CLKIT_OK);
    size_t total = 0;
    for (int i = 0; i < o.n; i++) total += o.bytes[i];
    unsigned char *all = malloc(total), *at = all;
    ck_assert(all != NULL);
    for (int i = 0; i < o.n; i++) {
        unsigned char *now = read_bytes(ctx, o.buf[i], o.bytes[i]);
        if (file)
            ck_assert_msg(memcmp(now, o.before[i], o.bytes[i]) == 0,
                          "%s: a call that failed to build wrote output %d", f->name, i);
        memcpy(at, now, o.bytes[i]);
        at += o.bytes[i];
        free(now);
        free(o.before[i]);
        clReleaseMemObject(o.buf[i]);
    }
    for (int i = 0; i < ninputs; i++) clReleaseMemObject(inputs[i]);
    *n = total;
    if (!file) return all;
    free(all);
    return NULL;
}

/* Every family's outputs from the embedded sources, to compare the recovered calls with. */
static unsigned char *expected[FAMILIES];
static size_t expected_n[FAMILIES];

static void setup(void)
{
    ref_fill_random(values, sizeof values / sizeof *values, CLKIT_F32, 0, 2, 1);
    clkit_context *ctx = tu_ctx();
    for (size_t i = 0; i < FAMILIES; i++)
        expected[i] = run_family(ctx, &families[i], NULL, &expected_n[i]);
    clkit_context_release(ctx);
}

static void teardown(void)
{
    for (size_t i = 0; i < FAMILIES; i++) free(expected[i]);
}

/* Runs family i in ctx; it must succeed with the embedded sources' bits. */
static void assert_recovered(clkit_context *ctx, size_t i)
{
    size_t n;
    unsigned char *got = run_family(ctx, &families[i], NULL, &n);
    ck_assert_msg(n == expected_n[i] && memcmp(got, expected[i], n) == 0,
                  "%s after the fault: not the bits of the embedded sources", families[i].name);
    free(got);
}

/* ---- build failures ---- */

/* One family's source broken: its calls fail with the build log, the others still run on
   the same context, and once the file is good again (the same context, the same directory)
   the failed calls succeed with the embedded sources' bits: a failed build is not cached. */
START_TEST(broken_family_source)
{
    static const char *broken[] = {"softmax.cl", "attention.cl", "layernorm.cl"};
    for (size_t b = 0; b < sizeof broken / sizeof *broken; b++) {
        faulty f;
        faulty_begin(&f, broken[b]);
        for (size_t i = 0; i < FAMILIES; i++) {
            size_t n;
            int hit = strcmp(families[i].source, broken[b]) == 0;
            if (hit) run_family(f.ctx, &families[i], broken[b], &n);
            else assert_recovered(f.ctx, i);
        }
        write_sources(f.kernels, NULL);
        for (size_t i = 0; i < FAMILIES; i++)
            if (strcmp(families[i].source, broken[b]) == 0) assert_recovered(f.ctx, i);
        faulty_end(&f);
    }
}
END_TEST

/* The header every kernel includes, broken: every family fails with its build log and writes
   nothing; pointing CLKIT_KERNEL_DIR at a good copy brings every one back. */
START_TEST(broken_common_header)
{
    faulty f;
    faulty_begin(&f, "common.h");
    for (size_t i = 0; i < FAMILIES; i++) {
        size_t n;
        run_family(f.ctx, &families[i], families[i].source, &n);
    }
    char good[] = "/tmp/clkit-kgood-XXXXXX";
    ck_assert(mkdtemp(good) != NULL);
    write_sources(good, NULL);
    tu_setenv("CLKIT_KERNEL_DIR", good);
    for (size_t i = 0; i < FAMILIES; i++) assert_recovered(f.ctx, i);
    faulty_end(&f);
    tu_remove_tree(good);
}
END_TEST

/* Linear cross-entropy builds the matmul GEMMs and then its cross-entropy kernels: with only
   cross_entropy.cl broken it fails part way, after programs that did build. */
START_TEST(broken_second_program)
{
    faulty f;
    faulty_begin(&f, "cross_entropy.cl");
    size_t lce = 0, mm = 0;
    while (strcmp(families[lce].name, "linear cross-entropy")) lce++;
    while (strcmp(families[mm].name, "matmul")) mm++;
    assert_recovered(f.ctx, mm);
    size_t n;
    run_family(f.ctx, &families[lce], "cross_entropy.cl", &n);
    tu_unsetenv("CLKIT_KERNEL_DIR"); /* back to the embedded sources */
    assert_recovered(f.ctx, lce);
    faulty_end(&f);
}
END_TEST

/* ---- device choice ---- */

/* Creates a context with CLKIT_DEVICE=want and no options; returns its status, with what
   the library printed on stderr in err. */
static clkit_status create_with_device(const char *want, clkit_context **ctx, char *err, size_t n)
{
    char path[] = "/tmp/clkit-stderr-XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert(saved >= 0 && dup2(fd, 2) == 2);
    tu_setenv("CLKIT_DEVICE", want);
    clkit_status s = clkit_context_create(ctx, NULL);
    tu_unsetenv("CLKIT_DEVICE");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t len = pread(fd, err, n - 1, 0);
    err[len > 0 ? len : 0] = 0;
    close(fd);
    unlink(path);
    return s;
}

/* A CLKIT_DEVICE that names no device fails creation with CLKIT_ERR_NO_DEVICE, no context
   and a message on stderr that names the value; options still win over the variable. */
START_TEST(unknown_device)
{
    static const char *bad[] = {"no-such-device-anywhere", "99", "-1", "99999999999999999999",
                                "pocl-but-not-quite-this"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        clkit_context *ctx = (clkit_context *)1;
        char err[4096];
        clkit_status s = create_with_device(bad[i], &ctx, err, sizeof err);
        ck_assert_msg(s == CLKIT_ERR_NO_DEVICE, "CLKIT_DEVICE=%s -> %s", bad[i], clkit_status_string(s));
        ck_assert_ptr_null(ctx);
        ck_assert_msg(strstr(err, bad[i]) != NULL, "CLKIT_DEVICE=%s: stderr does not name it: '%s'",
                      bad[i], err);
    }
    tu_setenv("CLKIT_DEVICE", "no-such-device-anywhere");
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.device = "0";
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_OK);
    clkit_context_release(ctx);
    tu_unsetenv("CLKIT_DEVICE");
    /* Empty: the default device. */
    char err[4096];
    ck_assert_int_eq(create_with_device("", &ctx, err, sizeof err), CLKIT_OK);
    clkit_context_release(ctx);
}
END_TEST

/* `clkit check` on an unknown device exits with a failure and says why: no crash. */
START_TEST(tool_on_unknown_device)
{
    char self[4096], tool[4200];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert(len > 0);
    self[len] = 0;
    snprintf(tool, sizeof tool, "%s/../tools/clkit", dirname(self));
    ck_assert_msg(access(tool, X_OK) == 0, "no clkit tool at %s", tool);
    char out[] = "/tmp/clkit-tool-XXXXXX";
    int fd = mkstemp(out);
    ck_assert(fd >= 0);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        tu_setenv("CLKIT_DEVICE", "no-such-device-anywhere");
        execl(tool, "clkit", "check", (char *)NULL);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    char text[8192];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(out);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 127,
                  "clkit check on an unknown device: status %d: %s", st, text);
    ck_assert_msg(strstr(text, "no-such-device-anywhere") != NULL,
                  "clkit check does not name the unknown device: %s", text);
}
END_TEST

/* ---- memory the device refuses ---- */

/* Linear cross-entropy keeps a chunk of logits in scratch, T x chunk f32. With the chunk
   forced to the whole vocabulary ($CLKIT_LCE_CHUNK) and x and the weight broadcast (zero row
   strides: a few bytes stand for T x D and V x D), that is 4 GiB for T 65536 and V 16384 (V
   doubled until it is past the device's allocation limit): the call fails with CLKIT_ERR_OUT_OF_MEMORY, names the
   allocation and writes nothing, and the context then runs the call on fewer tokens. */
START_TEST(scratch_refused)
{
    clkit_context *ctx = tu_ctx();
    struct clkit_device_props p;
    TU_CHECK(clkit_device_props(ctx, &p));
    const int64_t t = 65536, d = 16;
    int64_t v = 16384; /* doubled until the chunk is past this device's limit */
    while ((uint64_t)t * (uint64_t)v * 4 <= p.max_alloc && v < (INT64_C(1) << 24)) v *= 2;
    ck_assert_msg((uint64_t)t * (uint64_t)v * 4 > p.max_alloc, "max_alloc %llu: no vocabulary below "
                  "2^24 needs more", (unsigned long long)p.max_alloc);
    double row[16], *tg = malloc((size_t)t * sizeof *tg);
    ck_assert(tg != NULL);
    tu_fill_random(row, 16, CLKIT_F32, -1, 1, 5);
    for (int64_t i = 0; i < t; i++) tg[i] = (double)((i * 7919) % v);
    cl_mem bx = tu_buffer(ctx, CLKIT_F32, 16, row), bw = tu_buffer(ctx, CLKIT_F32, 16, row);
    cl_mem bt = tu_buffer(ctx, CLKIT_I64, (size_t)t, tg), bl = tu_buffer(ctx, CLKIT_F32, 1, NULL);
    int64_t xs[2] = {t, d}, ws[2] = {v, d}, one[1] = {1};
    clkit_tensor x = clkit_tensor_contiguous(bx, CLKIT_F32, 2, xs);
    clkit_tensor w = clkit_tensor_contiguous(bw, CLKIT_F32, 2, ws);
    x.strides[0] = 0, w.strides[0] = 0;
    clkit_tensor targets = clkit_tensor_contiguous(bt, CLKIT_I64, 1, &t);
    clkit_tensor loss = clkit_tensor_contiguous(bl, CLKIT_F32, 1, one);
    double before[1], got[1];
    tu_read(ctx, bl, CLKIT_F32, 1, before);

    char chunk[32];
    snprintf(chunk, sizeof chunk, "%lld", (long long)v);
    tu_setenv("CLKIT_LCE_CHUNK", chunk);
    TU_EXPECT(CLKIT_ERR_OUT_OF_MEMORY,
              clkit_linear_cross_entropy(ctx, &x, &w, NULL, &targets, NULL, &loss, NULL, NULL, NULL));
    ck_assert_msg(strstr(clkit_last_error(ctx), "scratch") != NULL, "%s", clkit_last_error(ctx));
    tu_assert_unchanged(ctx, bl, CLKIT_F32, 1, before);
    tu_unsetenv("CLKIT_LCE_CHUNK");

    /* The same call on 64 tokens, in the default chunks, against the reference. */
    const int64_t few = 64;
    x.shape[0] = targets.shape[0] = few;
    TU_CHECK(clkit_linear_cross_entropy(ctx, &x, &w, NULL, &targets, NULL, &loss, NULL, NULL, NULL));
    tu_read(ctx, bl, CLKIT_F32, 1, got);
    double *xd = malloc((size_t)(few * d) * sizeof *xd), *wd = malloc((size_t)(v * d) * sizeof *wd);
    int64_t *ti = malloc((size_t)few * sizeof *ti);
    ck_assert(xd && wd && ti);
    for (int64_t i = 0; i < few * d; i++) xd[i] = row[i % d];
    for (int64_t i = 0; i < v * d; i++) wd[i] = row[i % d];
    for (int64_t i = 0; i < few; i++) ti[i] = (int64_t)tg[i];
    clkit_cross_entropy_options o = clkit_cross_entropy_defaults();
    double want;
    ref_linear_cross_entropy(xd, wd, NULL, ti, few, v, d, &o, &want, NULL, NULL);
    tu_assert_close(got, &want, 1, 0, 1e-5, "linear cross-entropy after the refused scratch");
    free(xd), free(wd), free(ti);
    clReleaseMemObject(bx);
    clReleaseMemObject(bw);
    clReleaseMemObject(bt);
    clReleaseMemObject(bl);
    free(tg);
    clkit_context_release(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device_faults");
    TCase *build = tu_tcase("build failures");
    tcase_add_checked_fixture(build, setup, teardown);
    tcase_add_test(build, broken_family_source);
    tcase_add_test(build, broken_common_header);
    tcase_add_test(build, broken_second_program);
    suite_add_tcase(s, build);
    TCase *device = tu_tcase("device choice and memory");
    tcase_add_test(device, unknown_device);
    tcase_add_test(device, tool_on_unknown_device);
    tcase_add_test(device, scratch_refused);
    suite_add_tcase(s, device);
    return tu_run(s);
}
