/* Faults in the cache directory: a tuned.json that is damaged, of the wrong shape, huge or
   not a file at all; damaged binary entries; a read-only directory; a cache path that is a
   regular file; tuners racing on one directory or killed in the middle of a store; a tuned set
   of 20,000 entries. Each case ends with op results that match the CPU references and, where
   something was wrong, a warning on stderr: never a crash, a hang or a lost entry. */
#define _GNU_SOURCE
#include "tune.h"
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/capability.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

/* ---- helpers ---- */

static void fresh_dir(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/clkit-faults-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
}

static void path_in(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

static void write_bytes(const char *path, const char *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert(fwrite(bytes, 1, len, f) == len);
    fclose(f);
}

static clkit_context *ctx_in(const char *dir)
{
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.cache_dir = dir;
    clkit_status s = clkit_context_create(&ctx, &opt);
    ck_assert_msg(s == CLKIT_OK, "context with cache %s: %s", dir ? dir : "(env)", clkit_status_string(s));
    return ctx;
}

/* What the library writes to stderr between begin and end: its warnings. */
typedef struct capture {
    int saved;
    char path[64];
} capture;

static void capture_begin(capture *c)
{
    snprintf(c->path, sizeof c->path, "/tmp/clkit-stderr-XXXXXX");
    int fd = mkstemp(c->path);
    ck_assert(fd >= 0);
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    ck_assert(c->saved >= 0 && dup2(fd, STDERR_FILENO) >= 0);
    close(fd);
}

/* The captured text (caller frees); it is echoed to the real stderr for the test's log. */
static char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    FILE *f = fopen(c->path, "rb");
    ck_assert(f != NULL);
    char *text = calloc(1 << 16, 1);
    ck_assert(text != NULL);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(c->path);
    fputs(text, stderr);
    return text;
}

static int warned(const char *text)
{
    return strstr(text, "clkit warn: ") != NULL;
}

/* C = A B through clkit_matmul, which looks up tuned.json; 0 when C matches the reference. */
static int run_matmul(clkit_context *ctx, int64_t m, int64_t n, int64_t k)
{
    size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
    double *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b), *got = malloc(nc * sizeof *got),
           *want = calloc(nc, sizeof *want), *mag = calloc(nc, sizeof *mag);
    ck_assert(a && b && got && want && mag);
    ref_fill_random(a, na, CLKIT_F32, -1, 1, 11);
    ref_fill_random(b, nb, CLKIT_F32, -1, 1, 12);
    cl_mem ab = ref_upload(ctx, CLKIT_F32, na, a), bb = ref_upload(ctx, CLKIT_F32, nb, b),
           cb = ref_upload(ctx, CLKIT_F32, nc, NULL);
    ck_assert(ab && bb && cb);
    int64_t sa[2] = {m, k}, sb[2] = {k, n}, sc[2] = {m, n};
    clkit_tensor ta = clkit_tensor_contiguous(ab, CLKIT_F32, 2, sa),
                 tb = clkit_tensor_contiguous(bb, CLKIT_F32, 2, sb),
                 tc = clkit_tensor_contiguous(cb, CLKIT_F32, 2, sc);
    clkit_matmul_options opt = clkit_matmul_defaults();
    int bad = clkit_matmul(ctx, &ta, &tb, &tc, &opt) != CLKIT_OK || ref_download(ctx, cb, CLKIT_F32, nc, got);
    ref_matrix ra = {a, {0, k, 1}}, rb = {b, {0, n, 1}}, rc = {want, {0, n, 1}};
    ref_matmul(&ra, &rb, &rc, 1, m, n, k, 1.0, 0.0, 0, 0, mag);
    for (size_t i = 0; i < nc && !bad; i++)
        bad = !(fabs(got[i] - want[i]) <= 4.0 * (double)(k + 2) * 0x1p-24 * mag[i] + 1e-30);
    clReleaseMemObject(ab);
    clReleaseMemObject(bb);
    clReleaseMemObject(cb);
    free(a), free(b), free(got), free(want), free(mag);
    return bad;
}

/* x + x in place over 301 f32 values (exact); 0 when right. */
static int run_add(clkit_context *ctx, clkit_dtype dt)
{
    double x[301], got[301];
    ref_fill_random(x, 301, dt, -3, 3, 5);
    cl_mem b = ref_upload(ctx, dt, 301, x);
    ck_assert(b != NULL);
    int64_t shape[1] = {301};
    clkit_tensor t = clkit_tensor_contiguous(b, dt, 1, shape);
    int bad = clkit_add(ctx, &t, &t, &t) != CLKIT_OK || ref_download(ctx, b, dt, 301, got);
    for (int i = 0; i < 301 && !bad; i++) bad = got[i] != ref_quantize(dt, 2 * x[i]);
    clReleaseMemObject(b);
    return bad;
}

static int run_ops(clkit_context *ctx)
{
    return run_matmul(ctx, 33, 17, 20) | run_add(ctx, CLKIT_F32);
}

static clkit_config some_config(int block)
{
    clkit_config c = {0};
    clkit_config_set(&c, "BLOCK_M", block);
    return c;
}

/* The entries array of a tuned-config file (a new reference), or NULL when path is not one. */
static json_object *file_entries(const char *path)
{
    json_object *root = json_object_from_file(path), *arr = NULL, *fmt;
    if (root && json_object_object_get_ex(root, "format", &fmt) && json_object_get_int(fmt) == 1 &&
        json_object_object_get_ex(root, "entries", &arr) && json_object_is_type(arr, json_type_array))
        json_object_get(arr);
    else
        arr = NULL;
    json_object_put(root);
    return arr;
}

static int count_file_entries(const char *path)
{
    json_object *arr = file_entries(path);
    int n = arr ? (int)json_object_array_length(arr) : -1;
    json_object_put(arr);
    return n;
}

/* Root ignores permission bits: a test of a read-only directory gives up, for its own process
   and what it runs, the capabilities that let it. 0 when the directory dir is now unwritable. */
static int obey_permissions(const char *dir)
{
    if (geteuid() == 0) {
        static const int caps[] = {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER};
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        for (size_t i = 0; i < 3; i++) prctl(PR_CAPBSET_DROP, caps[i], 0, 0, 0);
        if (syscall(SYS_capget, &h, d) == 0) {
            for (size_t i = 0; i < 3; i++) {
                d[caps[i] / 32].effective &= ~(1u << (caps[i] % 32));
                d[caps[i] / 32].permitted &= ~(1u << (caps[i] % 32));
            }
            syscall(SYS_capset, &h, d);
        }
    }
    char probe[256];
    path_in(probe, sizeof probe, dir, "probe");
    int fd = open(probe, O_WRONLY | O_CREAT, 0644);
    if (fd < 0) return 0;
    close(fd);
    unlink(probe);
    return -1;
}

/* ---- tuned.json ---- */

typedef struct tuned_fault {
    const char *name;
    const char *text;              /* the file's text; NULL: make builds the fault */
    void (*make)(const char *path);
    int refused;                   /* stores leave the file alone and fail */
} tuned_fault;

static void random_bytes(const char *path)
{
    char bytes[4096];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < sizeof bytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        bytes[i] = (char)(x >> 56);
    }
    bytes[0] = '{'; /* past the first byte, json-c's parse */
    write_bytes(path, bytes, sizeof bytes);
}

/* A sparse file just past the 64 MiB that a tuned-config file may have. */
static void huge(const char *path)
{
    write_bytes(path, "{\"format\": 1, \"entries\": []}", 28);
    ck_assert(truncate(path, (64 << 20) + 1) == 0);
}

static void to_dev_zero(const char *path)
{
    ck_assert(symlink("/dev/zero", path) == 0);
}

static void to_dev_full(const char *path)
{
    ck_assert(symlink("/dev/full", path) == 0);
}

static void a_directory(const char *path)
{
    char inner[300];
    ck_assert(mkdir(path, 0755) == 0);
    path_in(inner, sizeof inner, path, "tuned.json");
    write_bytes(inner, "{}", 2);
}

static void a_fifo(const char *path)
{
    ck_assert(mkfifo(path, 0644) == 0);
}

#define ENTRY(dev, shape, cfg)                                                                   \
    "{\"device\": " dev ", \"op\": \"matmul\", \"dtype\": \"f32.f32.f32\", \"layout\": \"nn\", " \
    "\"shape\": " shape ", \"config\": " cfg "}"

static const tuned_fault tuned_faults[] = {
    {"truncated", "{\"format\": 1, \"entries\": [" ENTRY("\"d\"", "[8, 8, 8, 1]", "\"BLOCK_M=8\""), NULL, 0},
    {"random bytes", NULL, random_bytes, 0},
    {"not JSON", "\x01\x02\x03 tuned", NULL, 0},
    {"a JSON array", "[1, 2, 3]", NULL, 0},
    {"entries not an array", "{\"format\": 1, \"entries\": {\"shape\": [1, 2]}}", NULL, 0},
    {"format a string", "{\"format\": \"1\", \"entries\": []}", NULL, 0},
    {"fields of the wrong types",
     "{\"format\": 1, \"entries\": [{\"device\": 1, \"op\": [\"matmul\"], \"dtype\": null, "
     "\"layout\": {}, \"shape\": \"33x17x20\", \"config\": 7}, 3, \"x\", null]}", NULL, 0},
    {"a shape of 5 dims",
     "{\"format\": 1, \"entries\": [" ENTRY("\"d\"", "[1, 2, 3, 4, 5]", "\"BLOCK_M=8\"") "]}", NULL, 0},
    {"a shape of strings",
     "{\"format\": 1, \"entries\": [" ENTRY("\"d\"", "[\"33\", \"17\", \"20\", \"1\"]", "\"BLOCK_M=8\"")
     "]}", NULL, 0},
    {"over the size cap", NULL, huge, 1},
    {"a link to /dev/zero", NULL, to_dev_zero, 0},
    {"a link to /dev/full", NULL, to_dev_full, 0},
    {"a directory", NULL, a_directory, 0},
    {"a FIFO", NULL, a_fifo, 0},
};

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) /* clang's way of saying what gcc defines */
#define UNDER_ASAN 1
#endif
#endif

/* Bounds the heap, where the sanitizers leave it alone (ASan reserves terabytes): a reader
   without bounds fails this case instead of taking the machine's memory. */
static void bound_memory(void)
{
#if !defined(UNDER_ASAN)
    struct rlimit r = {(rlim_t)2 << 30, (rlim_t)2 << 30};
    setrlimit(RLIMIT_DATA, &r);
#endif
}

/* What one entry's lookup, store, lookup again and export gave on a faulty cache. */
typedef struct round_result {
    clkit_lookup before, after;
    clkit_status stored, exported;
} round_result;

/* One round on a context over dir (NULL: CLKIT_CACHE_DIR's), the entry's calls between two
   runs of the ops, exporting to out. Whatever the fault, the ops must be right and stderr
   must warn; label names the case in those failures, the caller checks the rest. */
static round_result faulty_round(const char *dir, const char *out, const char *label)
{
    round_result r;
    capture cap;
    capture_begin(&cap);
    clkit_context *ctx = ctx_in(dir);
    int bad_ops = run_ops(ctx);
    clkit_tune_key key = tu_matmul_key("nn", 33, 17, 20);
    clkit_config c = some_config(16), got;
    r.before = clkit_cache_lookup(ctx, &key, &got);
    r.stored = clkit_cache_store(ctx, &key, &c, 1.0);
    r.after = clkit_cache_lookup(ctx, &key, &got);
    r.exported = clkit_tuned_export(ctx, out);
    bad_ops |= run_ops(ctx);
    clkit_context_release(ctx);
    char *text = capture_end(&cap);
    ck_assert_msg(!bad_ops, "%s: wrong op results", label);
    ck_assert_msg(warned(text), "%s: no warning", label);
    free(text);
    return r;
}

/* One fault: ops right and a warning; a store either sets the file aside and succeeds, or
   (refused) fails and leaves it; an export fails or writes a good file. */
static void tuned_case(const char *dir, const tuned_fault *f)
{
    char path[256], aside[256], out[256];
    path_in(path, sizeof path, dir, "tuned.json");
    path_in(aside, sizeof aside, dir, "tuned.json.corrupt");
    path_in(out, sizeof out, dir, "export.json");
    tu_remove_tree(path);
    tu_remove_tree(aside);
    if (f->text) write_bytes(path, f->text, strlen(f->text));
    else f->make(path);
    round_result r = faulty_round(dir, out, f->name);
    ck_assert_msg(r.before == CLKIT_LOOKUP_NONE, "%s: a lookup found an entry", f->name);
    ck_assert_msg(r.stored == (f->refused ? CLKIT_ERR_IO : CLKIT_OK), "%s: the store gave %s", f->name,
                  clkit_status_string(r.stored));
    ck_assert_msg(r.after == (f->refused ? CLKIT_LOOKUP_NONE : CLKIT_LOOKUP_EXACT),
                  "%s: a lookup after the store gave %d", f->name, (int)r.after);
    if (r.exported == CLKIT_OK) ck_assert_msg(count_file_entries(out) == 1, "%s: a bad export", f->name);
    ck_assert_msg(f->refused ? r.exported == CLKIT_ERR_IO : r.exported == CLKIT_OK, "%s: export gave %s",
                  f->name, clkit_status_string(r.exported));
}

START_TEST(tuned_json_faults)
{
    char dir[64];
    fresh_dir(dir, sizeof dir);
    bound_memory();
    for (size_t i = 0; i < sizeof tuned_faults / sizeof *tuned_faults; i++) tuned_case(dir, &tuned_faults[i]);
    tu_remove_tree(dir);
}
END_TEST

/* ---- binary entries ---- */

static void for_each_entry(const char *dir, void (*fn)(const char *path))
{
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    for (struct dirent *e; (e = readdir(d));) {
        char path[512];
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 6, ".clbin")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        fn(path);
    }
    closedir(d);
}

static void flip_payload(const char *path)
{
    int fd = open(path, O_RDWR);
    ck_assert(fd >= 0);
    ck_assert(pwrite(fd, "\xff\x00\xff\x00", 4, 100) == 4);
    close(fd);
}

static void flip_length(const char *path)
{
    int fd = open(path, O_RDWR);
    ck_assert(fd >= 0);
    ck_assert(pwrite(fd, "\x7f", 1, 15) == 1); /* the top byte of the length */
    close(fd);
}

static void truncate_entry(const char *path)
{
    struct stat st;
    ck_assert(stat(path, &st) == 0 && truncate(path, st.st_size - 7) == 0);
}

static void empty_entry(const char *path)
{
    ck_assert(truncate(path, 0) == 0);
}

static void dir_entry(const char *path)
{
    ck_assert(unlink(path) == 0 && mkdir(path, 0755) == 0);
}

static void fifo_entry(const char *path)
{
    ck_assert(unlink(path) == 0 && mkfifo(path, 0644) == 0);
}

/* Removes what a fault left in an entry's place, so that the next run writes it again. */
static void unless_regular(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) tu_remove_tree(path);
}

START_TEST(binary_entry_faults)
{
    static const struct {
        const char *name;
        void (*damage)(const char *path);
    } faults[] = {{"flipped bytes", flip_payload}, {"a flipped length", flip_length},
                  {"truncated", truncate_entry},   {"empty", empty_entry},
                  {"a directory", dir_entry},      {"a FIFO", fifo_entry}};
    char dir[64];
    fresh_dir(dir, sizeof dir);
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        for_each_entry(dir, unless_regular);
        clkit_context *ctx = ctx_in(dir);
        ck_assert_int_eq(run_ops(ctx), 0);
        clkit_context_release(ctx);
        for_each_entry(dir, faults[i].damage);
        capture cap;
        capture_begin(&cap);
        ctx = ctx_in(dir);
        int bad = run_ops(ctx);
        clkit_context_release(ctx);
        char *text = capture_end(&cap);
        ck_assert_msg(!bad, "%s entries: wrong op results", faults[i].name);
        ck_assert_msg(warned(text), "%s entries: no warning", faults[i].name);
        free(text);
    }
    tu_remove_tree(dir);
}
END_TEST

/* ---- unusable directories ---- */

/* The `clkit` tool beside this suite's executable in the build tree. */
static void tool_path(char *buf, size_t n)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert(len > 0);
    self[len] = 0;
    snprintf(buf, n, "%s/../tools/clkit", dirname(self));
    ck_assert_msg(access(buf, X_OK) == 0, "no clkit tool at %s", buf);
}

/* Runs `clkit tune` on one matmul shape with CLKIT_CACHE_DIR=dir; its exit status, with its
   stdout and stderr in the files given. */
static int run_tune(const char *dir, const char *shape, const char *out, const char *err)
{
    char tool[4200];
    tool_path(tool, sizeof tool);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, STDOUT_FILENO) < 0 || dup2(e, STDERR_FILENO) < 0) _exit(126);
        tu_setenv("CLKIT_CACHE_DIR", dir);
        alarm(300);
        /* A budget that lets the first candidates run: the budget is a hard limit on the
           whole call, and one too short to measure any leaves no winner to (fail to) save.
           5 s was too short on a 2-core machine with PoCL's kernel cache cold (its third
           candidate's build alone took longer), and so was 30 s where the first candidates'
           builds were cached and the next ones were not (5 and 11 s each: the pass, steered
           by its longest candidate so far, met the deadline inside the next). A warm
           machine finishes in seconds. */
        execl(tool, tool, "tune", "--op", "matmul", "--shapes", shape, "--budget", "120", (char *)NULL);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    ck_assert_msg(WIFEXITED(st), "clkit tune died of signal %d", WTERMSIG(st));
    return WEXITSTATUS(st);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert(f != NULL);
    char *text = calloc(1 << 20, 1);
    ck_assert(text != NULL);
    text[fread(text, 1, (1 << 20) - 1, f)] = 0;
    fclose(f);
    return text;
}

/* The tool's stdout: the table, then (from the first line that starts with '{') the
   tuned-config file of what it could not save. Writes that file to saved. */
static void split_saved(const char *out, const char *saved)
{
    char *text = slurp(out);
    ck_assert_msg(strstr(text, "(not saved)"), "the table does not mark the winner: %s", text);
    char *json = strstr(text, "\n{");
    ck_assert_msg(json != NULL, "no tuned-config file on stdout: %s", text);
    write_bytes(saved, json + 1, strlen(json + 1));
    free(text);
}

/* A read-only cache: lookups still find the tuned entries and loads the binaries; builds
   and stores fail with warnings; `clkit tune` still shows its winner and prints the entry on
   stdout, which --import takes elsewhere. */
START_TEST(read_only_cache_dir)
{
    char dir[64], other[64], out[128], err[128], saved[128];
    fresh_dir(dir, sizeof dir);
    fresh_dir(other, sizeof other);
    path_in(out, sizeof out, other, "stdout");
    path_in(err, sizeof err, other, "stderr");
    path_in(saved, sizeof saved, other, "saved.json");
    clkit_tune_key key = tu_matmul_key("nn", 33, 17, 20), fresh = tu_matmul_key("nn", 40, 40, 40);
    clkit_config c = some_config(16), got;
    clkit_context *ctx = ctx_in(dir);
    ck_assert_int_eq(run_ops(ctx), 0);
    TU_CHECK(clkit_cache_store(ctx, &key, &c, 1.0));
    clkit_context_release(ctx);
    ck_assert(chmod(dir, 0555) == 0);
    if (obey_permissions(dir) != 0) {
        fprintf(stderr, "read_only_cache_dir: skipped, %s stays writable for this user\n", dir);
        chmod(dir, 0755);
        return;
    }
    capture cap;
    capture_begin(&cap);
    ctx = ctx_in(dir);
    int bad = run_ops(ctx) | run_add(ctx, CLKIT_BF16); /* a new program: its entry fails */
    clkit_lookup found = clkit_cache_lookup(ctx, &key, &got);
    clkit_status stored = clkit_cache_store(ctx, &fresh, &c, 1.0);
    char message[8192];
    snprintf(message, sizeof message, "%s", clkit_last_error(ctx));
    clkit_context_release(ctx);
    char *text = capture_end(&cap);
    ck_assert_msg(!bad, "wrong op results");
    ck_assert_msg(warned(text), "no warning");
    free(text);
    ck_assert_int_eq(found, CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(stored, CLKIT_ERR_IO);
    ck_assert_msg(strstr(message, "unsaved entry: {"), "the failure does not carry the entry: %s", message);

    ck_assert_int_eq(run_tune(dir, "24x24x24", out, err), 1);
    char *errors = slurp(err);
    ck_assert_msg(strstr(errors, "not saved"), "no warning that the winner was not saved: %s", errors);
    free(errors);
    split_saved(out, saved);
    ck_assert(chmod(dir, 0755) == 0);

    ctx = ctx_in(other);
    TU_CHECK(clkit_tuned_import(ctx, saved));
    clkit_tune_key tuned = tu_matmul_key("nn", 24, 24, 24);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &tuned, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(run_matmul(ctx, 24, 24, 24), 0);
    clkit_context_release(ctx);
    tu_remove_tree(dir);
    tu_remove_tree(other);
}
END_TEST

/* CLKIT_CACHE_DIR names a regular file: nothing can be kept, everything still runs. */
START_TEST(cache_path_is_a_file)
{
    char dir[64], file[128], out[128];
    fresh_dir(dir, sizeof dir);
    path_in(file, sizeof file, dir, "not-a-dir");
    path_in(out, sizeof out, dir, "export.json");
    write_bytes(file, "x", 1);
    ck_assert(tu_setenv("CLKIT_CACHE_DIR", file) == 0);
    round_result r = faulty_round(NULL, out, "a cache path that is a file");
    ck_assert(tu_unsetenv("CLKIT_CACHE_DIR") == 0);
    ck_assert_int_eq(r.before, CLKIT_LOOKUP_NONE);
    ck_assert_int_eq(r.stored, CLKIT_ERR_IO);
    ck_assert_int_eq(r.exported, CLKIT_ERR_IO);
    tu_remove_tree(dir);
}
END_TEST

/* ---- processes ---- */

enum { TUNERS = 4, SHAPES_EACH = 2 };

static int64_t tuner_m(int p, int i)
{
    return 16 + 8 * p + 40 * i;
}

/* One tuner process: tunes its shapes and checks matmuls with what it tuned. */
static int tuner(const char *dir, int p)
{
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.cache_dir = dir;
    if (clkit_context_create(&ctx, &opt) != CLKIT_OK) return 1;
    int bad = 0;
    for (int i = 0; i < SHAPES_EACH && !bad; i++) {
        int64_t m = tuner_m(p, i), sa[2] = {m, 24}, sb[2] = {24, 20}, sc[2] = {m, 20};
        cl_mem ab = ref_upload(ctx, CLKIT_F32, (size_t)(m * 24), NULL),
               bb = ref_upload(ctx, CLKIT_F32, 24 * 20, NULL), cb = ref_upload(ctx, CLKIT_F32, (size_t)(m * 20), NULL);
        clkit_tensor a = clkit_tensor_contiguous(ab, CLKIT_F32, 2, sa),
                     b = clkit_tensor_contiguous(bb, CLKIT_F32, 2, sb),
                     c = clkit_tensor_contiguous(cb, CLKIT_F32, 2, sc);
        clkit_matmul_options mo = clkit_matmul_defaults();
        clkit_tune_options to = {.budget_s = 0.001};
        bad = !ab || !bb || !cb || clkit_tune_matmul(ctx, &a, &b, &c, &mo, &to) != CLKIT_OK ||
              run_matmul(ctx, m, 20, 24);
        clReleaseMemObject(ab);
        clReleaseMemObject(bb);
        clReleaseMemObject(cb);
    }
    clkit_context_release(ctx);
    return bad;
}

/* Four processes tune on one cache at once: every winner is kept. */
START_TEST(concurrent_tuners)
{
    char dir[64], path[128];
    fresh_dir(dir, sizeof dir);
    path_in(path, sizeof path, dir, "tuned.json");
    pid_t pids[TUNERS];
    for (int p = 0; p < TUNERS; p++) {
        pids[p] = fork();
        ck_assert(pids[p] >= 0);
        if (pids[p] == 0) _exit(tuner(dir, p));
    }
    for (int p = 0; p < TUNERS; p++) {
        int st;
        ck_assert(waitpid(pids[p], &st, 0) == pids[p]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "tuner %d failed", p);
    }
    ck_assert_int_eq(count_file_entries(path), TUNERS * SHAPES_EACH);
    clkit_context *ctx = ctx_in(dir);
    for (int p = 0; p < TUNERS; p++)
        for (int i = 0; i < SHAPES_EACH; i++) {
            clkit_tune_key key = tu_matmul_key("nn", tuner_m(p, i), 20, 24);
            clkit_config got;
            ck_assert_msg(clkit_cache_lookup(ctx, &key, &got) == CLKIT_LOOKUP_EXACT, "lost tuner %d's shape %d", p, i);
        }
    ck_assert_int_eq(run_ops(ctx), 0);
    clkit_context_release(ctx);
    tu_remove_tree(dir);
}
END_TEST

/* The text of a tuned-config file of n entries for another device, with distinct shapes. */
static char *many_entries(int n, const char *device)
{
    size_t cap = (size_t)n * 200 + 64, used = 0;
    char *text = malloc(cap);
    ck_assert(text != NULL);
    used += (size_t)snprintf(text, cap, "{\"format\": 1, \"entries\": [");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(text + used, cap - used,
                                 "%s{\"device\": \"%s\", \"op\": \"matmul\", \"dtype\": \"f32.f32.f32\", "
                                 "\"layout\": \"nn\", \"shape\": [%d, %d, 64, 1], \"config\": "
                                 "\"BLOCK_M=%d\", \"ms\": 1.5}",
                                 i ? ", " : "", device, 1 + i / 128, 1 + i % 128, 8 << (i % 4));
    snprintf(text + used, cap - used, "]}");
    return text;
}

static int count_named(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* A process storing entry after entry into a cache of `preload` entries, each store a
   rewrite of the whole file, is killed at random points: tuned.json stays a whole file, and
   the next store removes the temporary files that the killed ones left. */
START_TEST(killed_during_store)
{
    enum { PRELOAD = 4000, ROUNDS = 8 };
    char dir[64], path[128];
    fresh_dir(dir, sizeof dir);
    path_in(path, sizeof path, dir, "tuned.json");
    char *text = many_entries(PRELOAD, "another device");
    write_bytes(path, text, strlen(text));
    free(text);
    srand(7);
    for (int round = 0; round < ROUNDS; round++) {
        int ready[2];
        ck_assert(pipe(ready) == 0);
        pid_t pid = fork();
        ck_assert(pid >= 0);
        if (pid == 0) {
            signal(SIGINT, SIG_DFL); /* Check's handler would kill the whole process group */
            clkit_context *ctx = NULL;
            clkit_options opt = {0};
            opt.cache_dir = dir;
            if (clkit_context_create(&ctx, &opt) != CLKIT_OK) _exit(1);
            if (write(ready[1], "r", 1) != 1) _exit(1);
            for (int i = 0;; i++) {
                clkit_tune_key key = tu_matmul_key("nn", 1000 + round, 1 + i, 64);
                clkit_config c = some_config(8);
                if (clkit_cache_store(ctx, &key, &c, 1.0) != CLKIT_OK) _exit(1);
            }
        }
        close(ready[1]);
        char r;
        ck_assert(read(ready[0], &r, 1) == 1);
        close(ready[0]);
        struct timespec delay = {0, (long)(rand() % 60) * 1000000L};
        nanosleep(&delay, NULL);
        ck_assert(kill(pid, round % 2 ? SIGINT : SIGKILL) == 0);
        int st;
        ck_assert(waitpid(pid, &st, 0) == pid);
        ck_assert_msg(WIFSIGNALED(st), "the storing process ended by itself: %d", st);
        int n = count_file_entries(path);
        ck_assert_msg(n >= PRELOAD, "round %d: tuned.json is not a whole file (%d entries)", round, n);
    }
    capture cap;
    capture_begin(&cap);
    clkit_context *ctx = ctx_in(dir);
    clkit_tune_key key = tu_matmul_key("nn", 33, 17, 20);
    clkit_config c = some_config(16), got;
    TU_CHECK(clkit_cache_store(ctx, &key, &c, 1.0)); /* no lock left held */
    ck_assert_int_eq(count_named(dir, "tuned.json.tmp-"), 0);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &key, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(run_ops(ctx), 0);
    clkit_context_release(ctx);
    char *warnings = capture_end(&cap);
    ck_assert_msg(!warned(warnings), "a whole file warned");
    free(warnings);
    tu_remove_tree(dir);
}
END_TEST

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Export and import of 20,000 entries (and a store into them) in seconds: merging scanned
   every entry for each one added, 74 s for 16,000 and about 115 s for 20,000. The bound leaves
   a slow machine under a sanitizer room. */
START_TEST(twenty_thousand_entries)
{
    enum { N = 20000 };
    char src[64], dst[64], path[128], out[128], imported[128];
    fresh_dir(src, sizeof src);
    fresh_dir(dst, sizeof dst);
    path_in(path, sizeof path, src, "tuned.json");
    path_in(out, sizeof out, src, "export.json");
    path_in(imported, sizeof imported, dst, "tuned.json");
    char *text = many_entries(N, "another device");
    write_bytes(path, text, strlen(text));
    free(text);
    clkit_context *from = ctx_in(src), *ctx = ctx_in(dst);
    double t0 = now_s();
    ck_assert_int_eq(clkit_tuned_export(from, out), CLKIT_OK);
    clkit_context_release(from);
    TU_CHECK(clkit_tuned_import(ctx, out));
    TU_CHECK(clkit_tuned_import(ctx, out)); /* every key again: replaced, not added */
    clkit_tune_key key = tu_matmul_key("nn", 33, 17, 20);
    clkit_config c = some_config(16), got;
    TU_CHECK(clkit_cache_store(ctx, &key, &c, 1.0));
    double took = now_s() - t0;
    fprintf(stderr, "twenty_thousand_entries: export, two imports and a store took %.2f s\n", took);
    ck_assert_msg(took < 20, "%.1f s for %d entries", took, N);
    ck_assert_int_eq(count_file_entries(out), N);
    ck_assert_int_eq(count_file_entries(imported), N + 1);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &key, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(run_ops(ctx), 0);
    clkit_context_release(ctx);
    tu_remove_tree(src);
    tu_remove_tree(dst);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cache_faults");
    TCase *tc = tu_tcase("cache_faults");
    tcase_set_timeout(tc, 180); /* each case takes seconds: a hang should not cost ten minutes */
    tcase_add_test(tc, tuned_json_faults);
    tcase_add_test(tc, binary_entry_faults);
    tcase_add_test(tc, read_only_cache_dir);
    tcase_add_test(tc, cache_path_is_a_file);
    tcase_add_test(tc, concurrent_tuners);
    tcase_add_test(tc, killed_during_store);
    tcase_add_test(tc, twenty_thousand_entries);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
