/* The on-disk binary cache: entries are reused, corrupt or truncated entries and unwritable
   directories never crash or change results, processes filling one cache at once all
   succeed, and a cache over its size cap sheds its least recently used entries. Kernel
   sources from CLKIT_KERNEL_DIR: only regular files are read, and include cycles are named. */
#define _GNU_SOURCE
#include "internal.h"
#include "util.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const clkit_dtype dtypes[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16};

static clkit_context *ctx_in(const char *dir)
{
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.cache_dir = dir;
    clkit_status s = clkit_context_create(&ctx, &opt);
    ck_assert_msg(s == CLKIT_OK, "context with cache %s: %s", dir, clkit_status_string(s));
    return ctx;
}

/* Runs add for each dtype on dense and strided views; returns 0 when every result is right. */
static int run_adds(clkit_context *ctx)
{
    int bad = 0;
    for (size_t d = 0; d < 3; d++) {
        double x[301], got[301];
        ref_fill_random(x, 301, dtypes[d], -3, 3, 9 + d);
        cl_mem b = ref_upload(ctx, dtypes[d], 301, x);
        if (!b) return 1;
        int64_t shape[1] = {150};
        clkit_tensor dense = clkit_tensor_contiguous(b, dtypes[d], 1, shape), strided = dense;
        strided.strides[0] = 2;
        bad |= clkit_add(ctx, &dense, &dense, &dense) != CLKIT_OK;
        bad |= clkit_add(ctx, &strided, &strided, &strided) != CLKIT_OK;
        bad |= ref_download(ctx, b, dtypes[d], 301, got) != 0;
        for (int i = 0; i < 301 && !bad; i++) {
            double want = i < 150 ? 2 * x[i] : x[i];
            if (i % 2 == 0 && i < 300) want *= 2;
            bad |= !ref_close(got[i], ref_quantize(dtypes[d], want), 0, 0);
        }
        clReleaseMemObject(b);
    }
    return bad;
}

static int count_entries(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        n += len > sl && strcmp(e->d_name + len - sl, suffix) == 0;
    }
    closedir(d);
    return n;
}

/* Applies `damage` to every entry in dir. */
static void damage_entries(const char *dir, void (*damage)(const char *path))
{
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".clbin")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        damage(path);
    }
    closedir(d);
}

static void truncate_half(const char *path)
{
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    ck_assert(truncate(path, st.st_size / 2) == 0);
}

static void flip_bytes(const char *path)
{
    FILE *f = fopen(path, "r+b");
    ck_assert(f != NULL);
    fseek(f, 40, SEEK_SET);
    fputs("garbage!", f);
    fclose(f);
}

static void replace_with_junk(const char *path)
{
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    fputs("CLKITBN1 not really", f);
    fclose(f);
}

static void empty_file(const char *path)
{
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    fclose(f);
}

static char *fresh_dir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/clkit-cache-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
    return dir;
}

START_TEST(entries_written_and_reused)
{
    char *dir = fresh_dir();
    clkit_context *ctx = ctx_in(dir);
    ck_assert_int_eq(run_adds(ctx), 0);
    clkit_context_release(ctx);
    int n = count_entries(dir, ".clbin");
    ck_assert_msg(n == 3, "%d cache entries, expected one per dtype", n);
    ctx = ctx_in(dir);
    ck_assert_int_eq(run_adds(ctx), 0);
    clkit_context_release(ctx);
    ck_assert_int_eq(count_entries(dir, ".clbin"), n);
}
END_TEST

START_TEST(damaged_entries)
{
    void (*damages[])(const char *) = {truncate_half, flip_bytes, replace_with_junk, empty_file};
    for (size_t i = 0; i < sizeof damages / sizeof *damages; i++) {
        char *dir = fresh_dir();
        clkit_context *ctx = ctx_in(dir);
        ck_assert_int_eq(run_adds(ctx), 0);
        clkit_context_release(ctx);
        damage_entries(dir, damages[i]);
        ctx = ctx_in(dir);
        ck_assert_msg(run_adds(ctx) == 0, "wrong results after damage %zu", i);
        clkit_context_release(ctx);
        /* the rebuilt entries replace the damaged ones */
        ctx = ctx_in(dir);
        ck_assert_int_eq(run_adds(ctx), 0);
        clkit_context_release(ctx);
    }
}
END_TEST

START_TEST(unusable_directories)
{
    char *dir = fresh_dir(), file[128];
    snprintf(file, sizeof file, "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    ck_assert(f != NULL);
    fclose(f);
    const char *dirs[] = {file, "/proc/clkit-cannot-be-here", ""};
    for (size_t i = 0; i < 3; i++) {
        clkit_context *ctx = ctx_in(dirs[i]);
        ck_assert_msg(run_adds(ctx) == 0, "cache dir '%s'", dirs[i]);
        clkit_context_release(ctx);
    }
}
END_TEST

START_TEST(concurrent_processes)
{
    char *dir = fresh_dir();
    enum { PROCS = 3 };
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        ck_assert(pids[i] >= 0);
        if (pids[i] == 0) {
            clkit_context *ctx = ctx_in(dir);
            int bad = run_adds(ctx);
            clkit_context_release(ctx);
            _exit(bad);
        }
    }
    for (int i = 0; i < PROCS; i++) {
        int st;
        ck_assert(waitpid(pids[i], &st, 0) == pids[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d failed", i);
    }
    ck_assert_int_eq(count_entries(dir, ".clbin") > 0, 1);
    /* no temporary files left behind: every write was renamed into place */
    DIR *d = opendir(dir);
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(e->d_name[0] == '.' || strlen(e->d_name) == 38, "stray file %s", e->d_name);
    closedir(d);
    clkit_context *ctx = ctx_in(dir);
    ck_assert_int_eq(run_adds(ctx), 0);
    clkit_context_release(ctx);
}
END_TEST

/* A file of `size` bytes at dir/name, last modified `age` seconds ago. */
static void aged_file(const char *dir, const char *name, long size, time_t age)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    ck_assert(fseek(f, size - 1, SEEK_SET) == 0 && fputc(0, f) == 0);
    fclose(f);
    struct timespec t[2] = {{time(NULL) - age, 0}, {time(NULL) - age, 0}};
    ck_assert(utimensat(AT_FDCWD, path, t, 0) == 0);
}

static void make_old(const char *path)
{
    struct timespec t[2] = {{time(NULL) - 86400, 0}, {time(NULL) - 86400, 0}};
    ck_assert(utimensat(AT_FDCWD, path, t, 0) == 0);
}

static void unlink_in(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static int exists(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* Total bytes of the entries in dir, and the oldest modification time among them. */
static long entry_bytes(const char *dir, time_t *oldest)
{
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    long total = 0;
    *oldest = time(NULL) + 1;
    for (struct dirent *e; (e = readdir(d));) {
        char path[512];
        struct stat st;
        if (!strstr(e->d_name, ".clbin")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ck_assert(stat(path, &st) == 0);
        total += st.st_size;
        if (st.st_mtime < *oldest) *oldest = st.st_mtime;
    }
    closedir(d);
    return total;
}

START_TEST(size_cap)
{
    char *dir = fresh_dir();
    static const char *stale[] = {"00000000000000000000000000000001.clbin",
                                  "00000000000000000000000000000002.clbin",
                                  "00000000000000000000000000000003.clbin"};
    for (int i = 0; i < 3; i++) aged_file(dir, stale[i], 400000, (time_t)(30 - i) * 86400);
    aged_file(dir, "tuned.json", 2000000, 40 * 86400);
    ck_assert(tu_setenv("CLKIT_CACHE_MAX_MB", "1") == 0);
    clkit_context *ctx = ctx_in(dir);
    ck_assert_int_eq(run_adds(ctx), 0);
    clkit_context_release(ctx);
    time_t oldest;
    long total = entry_bytes(dir, &oldest);
    ck_assert_msg(total <= 1 << 20, "%ld bytes of entries over a 1 MiB cap", total);
    ck_assert_msg(!exists(dir, stale[0]), "the least recently used entry survived");
    ck_assert_msg(count_entries(dir, ".clbin") >= 1, "the new entries were pruned too");
    ck_assert_msg(exists(dir, "tuned.json"), "pruning removed a file that is no entry");
    /* Loads mark their entries as used: with every entry made old, a second run (all hits)
       leaves them recent. */
    for (int i = 1; i < 3; i++) unlink_in(dir, stale[i]);
    damage_entries(dir, make_old);
    const time_t start = time(NULL);
    ctx = ctx_in(dir);
    ck_assert_int_eq(run_adds(ctx), 0);
    clkit_context_release(ctx);
    entry_bytes(dir, &oldest);
    ck_assert_msg(oldest >= start, "an entry that was loaded is still marked old");
}
END_TEST

/* The sm_90a rebuild's PTX rewrite (host/program.c; NVIDIA only, so tested on text here): every
   "//@90a " mark goes, the target line gains its "a" whatever follows it, the length counts the
   NUL; text without an sm_90 target line, or a buffer without room for the byte, is refused. */
static int retarget(const char *in, char *out, size_t cap, size_t *len)
{
    memset(out, 'x', cap);
    memcpy(out, in, strlen(in) + 1);
    *len = strlen(in);
    return clkit_ptx_retarget_90a(out, len, cap);
}

START_TEST(ptx_retarget)
{
    char buf[512];
    size_t len;
    const char *ptx = "//\n.version 9.0\n.target sm_90, texmode_independent\n.address_size 64\n"
                      "\t// begin inline asm\n\t//@90a wgmma.fence.sync.aligned;\n"
                      "//@90a wgmma.commit_group.sync.aligned;\n\tbar.sync 0; // @90a stays\n";
    ck_assert_int_eq(retarget(ptx, buf, sizeof buf, &len), 1);
    ck_assert_str_eq(buf, "//\n.version 9.0\n.target sm_90a, texmode_independent\n.address_size 64\n"
                          "\t// begin inline asm\n\twgmma.fence.sync.aligned;\n"
                          "wgmma.commit_group.sync.aligned;\n\tbar.sync 0; // @90a stays\n");
    ck_assert_uint_eq(len, strlen(buf) + 1);
    ck_assert_int_eq(retarget(".version 8.0\n.target sm_90\n", buf, sizeof buf, &len), 1);
    ck_assert_str_eq(buf, ".version 8.0\n.target sm_90a\n");
    ck_assert_int_eq(retarget(".version 8.0\n.target sm_90", buf, sizeof buf, &len), 1);
    ck_assert_str_eq(buf, ".version 8.0\n.target sm_90a");
    ck_assert_int_eq(retarget(".version 8.0\n.target sm_80\n", buf, sizeof buf, &len), 0);
    ck_assert_int_eq(retarget(".version 8.0\n.target sm_90a\n", buf, sizeof buf, &len), 0);
    ck_assert_int_eq(retarget("//@90a wgmma.fence.sync.aligned;\n", buf, sizeof buf, &len), 0);
    const char *tight = "x\n.target sm_90\n";
    ck_assert_int_eq(retarget(tight, buf, strlen(tight) + 1, &len), 0);
    ck_assert_int_eq(retarget(tight, buf, strlen(tight) + 2, &len), 1);
    ck_assert_str_eq(buf, "x\n.target sm_90a\n");
}
END_TEST

/* The register caps of the same rebuild: ".maxnreg N" goes between the parameters and the body
   of each entry whose body holds the mark, never on an entry without one (the second here,
   whose mark-free body precedes a later entry's mark), and the length counts the NUL. */
START_TEST(ptx_register_caps)
{
    const char *ptx = ".target sm_90a\n.entry a(\n.param .u32 x\n)\n{\n\t//@maxnreg 128\n\tret;\n}\n"
                      ".entry b()\n{\n\tret;\n}\n.entry c()\n{\n//@maxnreg 96\n}\n";
    size_t len = 0;
    char *out = clkit_ptx_register_caps(ptx, &len);
    ck_assert_ptr_nonnull(out);
    ck_assert_str_eq(out, ".target sm_90a\n.entry a(\n.param .u32 x\n)\n.maxnreg 128\n{\n\t//@maxnreg 128\n"
                          "\tret;\n}\n.entry b()\n{\n\tret;\n}\n.entry c()\n.maxnreg 96\n{\n//@maxnreg 96\n}\n");
    ck_assert_uint_eq(len, strlen(out) + 1);
    free(out);
    out = clkit_ptx_register_caps(".target sm_90a\n.entry b()\n{\n}\n", &len);
    ck_assert_str_eq(out, ".target sm_90a\n.entry b()\n{\n}\n");
    free(out);
}
END_TEST

/* add fails to build, naming what is wrong in its sources. */
static void expect_source_error(const char *dir, const char *message)
{
    ck_assert(tu_setenv("CLKIT_KERNEL_DIR", dir) == 0);
    clkit_context *ctx = ctx_in("");
    cl_mem b = ref_upload(ctx, CLKIT_F32, 64, NULL);
    ck_assert(b != NULL);
    int64_t shape[1] = {64};
    clkit_tensor t = clkit_tensor_contiguous(b, CLKIT_F32, 1, shape);
    TU_EXPECT(CLKIT_ERR_BUILD, clkit_add(ctx, &t, &t, &t));
    ck_assert_msg(strstr(clkit_last_error(ctx), message), "'%s' does not say '%s'",
                  clkit_last_error(ctx), message);
    clReleaseMemObject(b);
    clkit_context_release(ctx);
    ck_assert(tu_unsetenv("CLKIT_KERNEL_DIR") == 0);
}

/* An include cycle under CLKIT_KERNEL_DIR was reported as "kernel source add.cl not found". */
START_TEST(include_cycles_named)
{
    char *dir = fresh_dir();
    tu_write_text(dir, "add.cl", "#include \"a.h\"\n");
    tu_write_text(dir, "a.h", "#include \"b.h\"\n");
    tu_write_text(dir, "b.h", "#include \"a.h\"\n");
    expect_source_error(dir, "kernel source add.cl: include cycle a.h -> b.h -> a.h");
    tu_write_text(dir, "add.cl", "// itself\n#include \"add.cl\"\n");
    expect_source_error(dir, "kernel source add.cl: include cycle add.cl -> add.cl");
    tu_write_text(dir, "add.cl", "#include \"missing.h\"\n");
    expect_source_error(dir, "kernel source missing.h not found, included from add.cl");
}
END_TEST

/* Names are paths under cl/ ("nv/mma.h"), from whichever file includes them, and only such
   paths: one that leaves the tree or spells a file twice is refused. */
START_TEST(include_paths_under_cl)
{
    static const struct {
        const char *b_h, *message;
    } cases[] = {
        {"#include \"sub/a.h\"\n", "kernel source add.cl: include cycle sub/a.h -> sub/b.h -> sub/a.h"},
        {"#include \"../add.cl\"\n", "kernel source name ../add.cl is not a path under cl/, included from sub/b.h"},
        {"#include \"sub/./a.h\"\n", "kernel source name sub/./a.h is not a path under cl/, included from sub/b.h"},
        {"#include \"/etc/hostname\"\n", "kernel source name /etc/hostname is not a path under cl/, included from sub/b.h"},
    };
    char *dir = fresh_dir();
    tu_write_text(dir, "add.cl", "#include \"sub/a.h\"\n");
    tu_write_text(dir, "sub/a.h", "#include \"sub/b.h\"\n");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tu_write_text(dir, "sub/b.h", cases[i].b_h);
        expect_source_error(dir, cases[i].message);
    }
}
END_TEST

/* In a child ended by an alarm after a minute: whether add runs right with a FIFO for add.cl
   and a directory for common.h under CLKIT_KERNEL_DIR (the embedded copies serve), and with
   every binary entry in `cache` replaced by a FIFO. */
static int adds_beside_special_files(const char *kernels, const char *cache)
{
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* Check's handler would kill the whole process group */
        alarm(60);
        tu_setenv("CLKIT_KERNEL_DIR", kernels);
        clkit_context *ctx = ctx_in(cache);
        int bad = run_adds(ctx);
        clkit_context_release(ctx);
        _exit(bad);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void make_fifo(const char *path)
{
    ck_assert(unlink(path) == 0 && mkfifo(path, 0644) == 0);
}

/* Sources and binary entries are read only from regular files: reading took a directory's
   size from ftell (LLONG_MAX on ext4) and malloc'd it, and a FIFO blocked the open forever. */
START_TEST(only_regular_files_read)
{
    char kernels[64], cache[64], path[128];
    snprintf(kernels, sizeof kernels, "%s", fresh_dir());
    snprintf(cache, sizeof cache, "%s", fresh_dir());
    snprintf(path, sizeof path, "%s/add.cl", kernels);
    ck_assert(mkfifo(path, 0644) == 0);
    snprintf(path, sizeof path, "%s/common.h", kernels);
    ck_assert(mkdir(path, 0755) == 0);
    ck_assert_msg(adds_beside_special_files(kernels, cache) == 0, "special source files");
    ck_assert_int_eq(count_entries(cache, ".clbin"), 3);
    damage_entries(cache, make_fifo);
    ck_assert_msg(adds_beside_special_files(kernels, cache) == 0, "FIFOs as binary entries");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tu_tcase("cache");
    tcase_add_test(tc, entries_written_and_reused);
    tcase_add_test(tc, damaged_entries);
    tcase_add_test(tc, unusable_directories);
    tcase_add_test(tc, concurrent_processes);
    tcase_add_test(tc, size_cap);
    tcase_add_test(tc, ptx_retarget);
    tcase_add_test(tc, ptx_register_caps);
    tcase_add_test(tc, include_cycles_named);
    tcase_add_test(tc, include_paths_under_cl);
    tcase_add_test(tc, only_regular_files_read);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
