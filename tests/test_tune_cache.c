/* The tuned-config cache: lookup fallbacks (exact, nearest, none), lookups that follow the
   file's changes, corrupt, truncated and newer-format files, files that must not be read,
   malformed entries, concurrent tuners, export and import. */
#define _GNU_SOURCE
#include "tune.h"
#include "util.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

static clkit_context *ctx_in(const char *dir)
{
    clkit_context *ctx = NULL;
    clkit_options opt = {0};
    opt.cache_dir = dir;
    ck_assert_int_eq(clkit_context_create(&ctx, &opt), CLKIT_OK);
    return ctx;
}

static char *fresh_dir(void)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/clkit-tune-XXXXXX");
    ck_assert(mkdtemp(dir) != NULL);
    return dir;
}

/* A fresh directory (returned, as fresh_dir's), with path set to name inside it. */
static char *fresh_path(char *path, size_t n, const char *name)
{
    char *dir = fresh_dir();
    snprintf(path, n, "%s/%s", dir, name);
    return dir;
}

static clkit_config config(int block)
{
    clkit_config c = {0};
    clkit_config_set(&c, "BLOCK_M", block);
    clkit_config_set(&c, "BLOCK_N", block / 2);
    return c;
}

START_TEST(config_strings)
{
    clkit_config c;
    ck_assert_int_eq(clkit_config_parse("BLOCK_M=128,BLOCK_N = 64, provider=1", &c), 0);
    ck_assert_int_eq(clkit_config_get(&c, "BLOCK_M", 0), 128);
    ck_assert_int_eq(clkit_config_get(&c, "BLOCK_N", 0), 64);
    ck_assert_int_eq(clkit_config_get(&c, "GROUP_M", 8), 8);
    char buf[256];
    clkit_config_options(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "-D BLOCK_M=128 -D BLOCK_N=64");
    clkit_config_format(&c, buf, sizeof buf);
    ck_assert_str_eq(buf, "BLOCK_M=128,BLOCK_N=64,provider=1");
    ck_assert_int_eq(clkit_config_parse("BLOCK_M=", &c), -1);
    ck_assert_int_eq(clkit_config_parse("BLOCK_M=1;rm -rf", &c), -1);
    ck_assert_int_eq(clkit_config_parse("", &c), 0);
    ck_assert_int_eq(c.n, 0);
}
END_TEST

START_TEST(lookup_fallbacks)
{
    clkit_context *ctx = ctx_in(fresh_dir());
    clkit_config got;
    clkit_tune_key k1 = tu_matmul_key("nn", 1024, 1024, 1024), k2 = tu_matmul_key("nn", 64, 64, 64);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k1, &got), CLKIT_LOOKUP_NONE);
    clkit_config c1 = config(128), c2 = config(32);
    ck_assert_int_eq(clkit_cache_store(ctx, &k1, &c1, 1.5), CLKIT_OK);
    ck_assert_int_eq(clkit_cache_store(ctx, &k2, &c2, 0.1), CLKIT_OK);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k1, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 128);
    clkit_tune_key near_big = tu_matmul_key("nn", 2048, 1000, 900), near_small = tu_matmul_key("nn", 100, 50, 64);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &near_big, &got), CLKIT_LOOKUP_NEAREST);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 128);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &near_small, &got), CLKIT_LOOKUP_NEAREST);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 32);
    clkit_tune_key other_layout = tu_matmul_key("tn", 1024, 1024, 1024);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &other_layout, &got), CLKIT_LOOKUP_NONE);
    /* replacing an entry keeps one entry per key */
    clkit_config c3 = config(64);
    ck_assert_int_eq(clkit_cache_store(ctx, &k1, &c3, 1.0), CLKIT_OK);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k1, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 64);
    clkit_context_release(ctx);
}
END_TEST

/* A context keeps the parsed file and its recent answers: they must follow every change to
   the file, by another context (another process) as well as its own, and stay right for more
   keys than it remembers. */
START_TEST(lookups_follow_the_file)
{
    char *dir = fresh_dir();
    clkit_context *a = ctx_in(dir), *b = ctx_in(dir);
    clkit_config got, c1 = config(128), c2 = config(64);
    clkit_tune_key k = tu_matmul_key("nn", 512, 512, 512);
    ck_assert_int_eq(clkit_cache_lookup(a, &k, &got), CLKIT_LOOKUP_NONE);
    ck_assert_int_eq(clkit_cache_store(b, &k, &c1, 1.0), CLKIT_OK);
    ck_assert_int_eq(clkit_cache_lookup(a, &k, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 128);
    ck_assert_int_eq(clkit_cache_store(b, &k, &c2, 0.5), CLKIT_OK);
    ck_assert_int_eq(clkit_cache_lookup(a, &k, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 64);
    enum { KEYS = 3 * CLKIT_TUNED_RECENT };
    for (int i = 0; i < KEYS; i++) {
        clkit_tune_key ki = tu_matmul_key("tn", 64 * (i + 1), 64, 64);
        clkit_config ci = config(2 * (i + 1));
        ck_assert_int_eq(clkit_cache_store(b, &ki, &ci, 1.0), CLKIT_OK);
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < KEYS; i++) {
            clkit_tune_key ki = tu_matmul_key("tn", 64 * (i + 1), 64, 64);
            ck_assert_int_eq(clkit_cache_lookup(a, &ki, &got), CLKIT_LOOKUP_EXACT);
            ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 2 * (i + 1));
        }
    tu_write_text(dir, "tuned.json", "{\"format\": 1, \"entries\": [");
    ck_assert_int_eq(clkit_cache_lookup(a, &k, &got), CLKIT_LOOKUP_NONE);
    clkit_context_release(a);
    clkit_context_release(b);
}
END_TEST

START_TEST(bad_files)
{
    static const char *texts[] = {
        "{\"format\": 1, \"entries\": [{\"device\": ", /* truncated */
        "\x01\x02 not json at all",
        "{\"format\": \"one\"}",
        "{\"format\": 1, \"entries\": {\"not\": \"an array\"}}",
        "{\"format\": 1, \"entries\": [1, \"x\", {\"op\": 3}, {\"shape\": [1,2,3,4,5,6]}]}",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char *dir = fresh_dir();
        tu_write_text(dir, "tuned.json", texts[i]);
        clkit_context *ctx = ctx_in(dir);
        clkit_config got;
        clkit_tune_key k = tu_matmul_key("nn", 8, 8, 8);
        ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_NONE);
        clkit_config c = config(16);
        ck_assert_int_eq(clkit_cache_store(ctx, &k, &c, 0.5), CLKIT_OK);
        ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_EXACT);
        clkit_context_release(ctx);
    }
}
END_TEST

START_TEST(newer_format_is_left_alone)
{
    char *dir = fresh_dir();
    const char *text = "{\"format\": 99, \"entries\": []}";
    tu_write_text(dir, "tuned.json", text);
    clkit_context *ctx = ctx_in(dir);
    clkit_tune_key k = tu_matmul_key("nn", 8, 8, 8);
    clkit_config c = config(16), got;
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_NONE);
    TU_EXPECT(CLKIT_ERR_IO, clkit_cache_store(ctx, &k, &c, 0.5));
    clkit_context_release(ctx);
    char path[256], buf[128] = "";
    snprintf(path, sizeof path, "%s/tuned.json", dir);
    FILE *f = fopen(path, "r");
    ck_assert(f && fgets(buf, sizeof buf, f));
    fclose(f);
    ck_assert_str_eq(buf, text);
}
END_TEST

START_TEST(concurrent_tuners_lose_nothing)
{
    char *dir = fresh_dir();
    enum { PROCS = 4, EACH = 15 };
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        ck_assert(pids[p] >= 0);
        if (pids[p] == 0) {
            clkit_context *ctx = ctx_in(dir);
            int bad = 0;
            for (int i = 0; i < EACH; i++) {
                clkit_tune_key k = tu_matmul_key("nn", 100 + p, 200 + i, 300);
                clkit_config c = config(8 * (p + 1));
                bad |= clkit_cache_store(ctx, &k, &c, 1.0) != CLKIT_OK;
            }
            clkit_context_release(ctx);
            _exit(bad);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int st;
        ck_assert(waitpid(pids[p], &st, 0) == pids[p]);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    clkit_context *ctx = ctx_in(dir);
    for (int p = 0; p < PROCS; p++)
        for (int i = 0; i < EACH; i++) {
            clkit_tune_key k = tu_matmul_key("nn", 100 + p, 200 + i, 300);
            clkit_config got;
            ck_assert_msg(clkit_cache_lookup(ctx, &k, &got) == CLKIT_LOOKUP_EXACT, "lost %d/%d", p, i);
            ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 8 * (p + 1));
        }
    clkit_context_release(ctx);
}
END_TEST

static void count_entry(void *user, const char *op, const char *dtype, const char *layout,
                        const char *shape, const char *config, double ms)
{
    (void)op, (void)dtype, (void)layout, (void)shape, (void)config, (void)ms;
    ++*(int *)user;
}

START_TEST(export_import)
{
    char src[64], dst[64], file[128];
    snprintf(src, sizeof src, "%s", fresh_dir());
    snprintf(dst, sizeof dst, "%s", fresh_dir());
    snprintf(file, sizeof file, "%s/export.json", dst);
    clkit_context *ctx = ctx_in(src);
    for (int i = 0; i < 5; i++) {
        clkit_tune_key k = tu_matmul_key("nt", 64 << i, 64, 64);
        clkit_config c = config(16 << (i % 3));
        TU_CHECK(clkit_cache_store(ctx, &k, &c, 0.25));
    }
    TU_CHECK(clkit_tuned_export(ctx, file));
    clkit_context_release(ctx);
    ctx = ctx_in(dst);
    int n = 0;
    TU_CHECK(clkit_tuned_list(ctx, count_entry, &n));
    ck_assert_int_eq(n, 0);
    TU_CHECK(clkit_tuned_import(ctx, file));
    TU_CHECK(clkit_tuned_import(ctx, file)); /* idempotent: same keys replace */
    TU_CHECK(clkit_tuned_list(ctx, count_entry, &n));
    ck_assert_int_eq(n, 5);
    clkit_tune_key k = tu_matmul_key("nt", 64 << 4, 64, 64);
    clkit_config got;
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_EXACT);
    ck_assert_int_eq(clkit_config_get(&got, "BLOCK_M", 0), 32);
    tu_write_text(dst, "junk.json", "[1,2,3]");
    char junk[128];
    snprintf(junk, sizeof junk, "%s/junk.json", dst);
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_import(ctx, junk));
    /* A file with no usable entry is an error, an empty one too, as is a format no clkit writes. */
    tu_write_text(dst, "junk.json", "{\"format\": 1, \"entries\": []}");
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_import(ctx, junk));
    ck_assert_msg(strstr(clkit_last_error(ctx), "no tuned entries"), "%s", clkit_last_error(ctx));
    tu_write_text(dst, "junk.json", "{\"format\": -5, \"entries\": []}");
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_import(ctx, junk));
    ck_assert_msg(strstr(clkit_last_error(ctx), "format"), "%s", clkit_last_error(ctx));
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_import(ctx, "/nonexistent/file.json"));
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_export(ctx, "/nonexistent/dir/file.json"));
    TU_EXPECT(CLKIT_ERR_NULL_ARGUMENT, clkit_tuned_import(ctx, NULL));
    clkit_context_release(ctx);
}
END_TEST

/* The number of entries of the tuned-config file at path; -1 when it is not one. */
static int file_entries(const char *path)
{
    json_object *root = json_object_from_file(path), *arr;
    int n = root && json_object_object_get_ex(root, "entries", &arr) &&
                    json_object_is_type(arr, json_type_array)
                ? (int)json_object_array_length(arr)
                : -1;
    json_object_put(root);
    return n;
}

/* Entries without a shape, or with a shape of strings, once crashed export (a negative
   length to memcmp) and were copied into exports; they are skipped, a later entry of a key
   still replaces an earlier one in place, and a file of nothing but such entries is refused. */
START_TEST(malformed_entries_skipped)
{
    char src[64], dst[64], file[128];
    snprintf(src, sizeof src, "%s", fresh_dir());
    snprintf(dst, sizeof dst, "%s", fresh_dir());
    snprintf(file, sizeof file, "%s/export.json", dst);
#define GOOD(shape, cfg)                                                                         \
    "{\"device\": \"d\", \"op\": \"matmul\", \"dtype\": \"f32.f32.f32\", \"layout\": \"nn\", "          \
    "\"shape\": " shape ", \"config\": \"" cfg "\"}"
    tu_write_text(src, "tuned.json",
               "{\"format\": 1, \"entries\": [{\"op\": \"matmul\"}, {\"op\": \"matmul\"}, " GOOD("[1, 2, 3, 1]", "A=1")
               ", " GOOD("[1, \"2\", 3, 1]", "B=1") ", " GOOD("[4, 5, 6, 1]", "C=1") ", "
               GOOD("[1, 2, 3, 1]", "D=1") ", " GOOD("[1, 2, 3, 4, 5]", "E=1") "]}");
    clkit_context *ctx = ctx_in(src);
    TU_CHECK(clkit_tuned_export(ctx, file));
    clkit_context_release(ctx);
    ck_assert_int_eq(file_entries(file), 2);
    json_object *root = json_object_from_file(file), *arr, *cfg;
    ck_assert(json_object_object_get_ex(root, "entries", &arr));
    ck_assert(json_object_object_get_ex(json_object_array_get_idx(arr, 0), "config", &cfg));
    ck_assert_str_eq(json_object_get_string(cfg), "D=1");
    json_object_put(root);

    char src_file[128];
    snprintf(src_file, sizeof src_file, "%s/tuned.json", src);
    ctx = ctx_in(dst);
    TU_CHECK(clkit_tuned_import(ctx, src_file));
    char imported[128];
    snprintf(imported, sizeof imported, "%s/tuned.json", dst);
    ck_assert_int_eq(file_entries(imported), 2);
    tu_write_text(dst, "bad.json", "{\"format\": 1, \"entries\": [{\"op\": \"matmul\"}, 3]}");
    snprintf(file, sizeof file, "%s/bad.json", dst);
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_import(ctx, file));
    clkit_context_release(ctx);
#undef GOOD
}
END_TEST

/* Runs fn(dir) in a child that an alarm ends after `seconds`; its exit status, or -1 when it
   was killed (a hang). */
static int in_child(void (*fn)(const char *dir), const char *dir, unsigned seconds)
{
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL); /* Check's handler would kill the whole process group */
        alarm(seconds);
        fn(dir);
        _exit(0);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void lookup_export_store(const char *dir)
{
    clkit_context *ctx = ctx_in(dir);
    clkit_config got, c = config(16);
    clkit_tune_key k = tu_matmul_key("nn", 8, 8, 8);
    char out[128];
    snprintf(out, sizeof out, "%s.export", dir);
    int bad = clkit_cache_lookup(ctx, &k, &got) != CLKIT_LOOKUP_NONE;
    bad |= clkit_tuned_export(ctx, out) != CLKIT_ERR_IO;
    bad |= clkit_cache_store(ctx, &k, &c, 0.5) != CLKIT_OK;
    bad |= clkit_cache_lookup(ctx, &k, &got) != CLKIT_LOOKUP_EXACT;
    clkit_context_release(ctx);
    unlink(out);
    _exit(bad);
}

/* tuned.json is read only when it is a regular file: a FIFO in its place once blocked every
   lookup and store in json-c's open, as /dev/zero fed json-c's reader without end. Such a
   file is set aside by the next store. */
START_TEST(only_regular_files_read)
{
    char path[128], *dir = fresh_path(path, sizeof path, "tuned.json");
    ck_assert(mkfifo(path, 0644) == 0);
    ck_assert_msg(in_child(lookup_export_store, dir, 60) == 0, "a FIFO as tuned.json: hung or failed");
    dir = fresh_path(path, sizeof path, "tuned.json");
    ck_assert(mkdir(path, 0755) == 0);
    ck_assert_msg(in_child(lookup_export_store, dir, 60) == 0, "a directory as tuned.json");
}
END_TEST

/* A file past the 64 MiB cap is not read, even when it is good JSON (whitespace pads it),
   nor is it overwritten. */
START_TEST(size_cap)
{
    char path[128], *dir = fresh_path(path, sizeof path, "tuned.json");
    clkit_context *ctx = ctx_in(dir);
    clkit_tune_key k = tu_matmul_key("nn", 8, 8, 8);
    clkit_config c = config(16), got;
    TU_CHECK(clkit_cache_store(ctx, &k, &c, 0.5));
    clkit_context_release(ctx);
    FILE *f = fopen(path, "a");
    ck_assert(f != NULL);
    static char spaces[1 << 16];
    memset(spaces, ' ', sizeof spaces);
    for (int i = 0; i < (64 << 4) + 1; i++) ck_assert(fwrite(spaces, 1, sizeof spaces, f) == sizeof spaces);
    fclose(f);
    ctx = ctx_in(dir);
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_NONE);
    TU_EXPECT(CLKIT_ERR_IO, clkit_cache_store(ctx, &k, &c, 0.5));
    clkit_context_release(ctx);
    struct stat st;
    ck_assert(stat(path, &st) == 0 && st.st_size > (64 << 20));
    unlink(path);
}
END_TEST

/* json-c's file reader records a missing or corrupt file in a process-wide buffer, which
   contexts on two threads wrote at once (a data race); lookups, stores, exports and imports
   leave it alone. */
START_TEST(no_global_json_state)
{
    char out[128], *dir = fresh_path(out, sizeof out, "out.json");
    clkit_context *ctx = ctx_in(dir);
    clkit_tune_key k = tu_matmul_key("nn", 8, 8, 8);
    clkit_config c = config(16), got;
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_NONE);
    TU_EXPECT(CLKIT_ERR_IO, clkit_tuned_import(ctx, "/nonexistent/tuned.json"));
    tu_write_text(dir, "tuned.json", "{\"format\": 1, \"entries\": [");
    ck_assert_int_eq(clkit_cache_lookup(ctx, &k, &got), CLKIT_LOOKUP_NONE);
    TU_CHECK(clkit_cache_store(ctx, &k, &c, 0.5));
    TU_CHECK(clkit_tuned_export(ctx, out));
    clkit_context_release(ctx);
    ck_assert_msg(json_util_get_last_err() == NULL, "json-c's global error was written: %s",
                  json_util_get_last_err());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tune_cache");
    TCase *tc = tu_tcase("tune_cache");
    tcase_add_test(tc, config_strings);
    tcase_add_test(tc, lookup_fallbacks);
    tcase_add_test(tc, lookups_follow_the_file);
    tcase_add_test(tc, bad_files);
    tcase_add_test(tc, newer_format_is_left_alone);
    tcase_add_test(tc, concurrent_tuners_lose_nothing);
    tcase_add_test(tc, export_import);
    tcase_add_test(tc, malformed_entries_skipped);
    tcase_add_test(tc, only_regular_files_read);
    tcase_add_test(tc, size_cap);
    tcase_add_test(tc, no_global_json_state);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
