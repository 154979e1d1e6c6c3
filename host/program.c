/* Programs: kernel sources (embedded or $CLKIT_KERNEL_DIR), builds specialised by options,
   an in-memory cache per context and an on-disk binary cache shared by processes.

   Disk entries are named by a hash of everything that can change the binary (clkit version,
   platform, device, driver, source text, options), written to a temporary file and renamed
   into place, so readers see a whole file or none; two writers of one entry write the same
   bytes. Each file carries its payload's length and hash: a truncated or corrupt entry is
   ignored and rebuilt, never loaded. The directory is capped ($CLKIT_CACHE_MAX_MB): past the
   cap, a writer removes the least recently used entries (a load touches its entry). */
#define _GNU_SOURCE
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

typedef struct clkit_embedded_source {
    const char *name;
    const char *text;
} clkit_embedded_source;
extern const clkit_embedded_source clkit_embedded_sources[];

typedef struct kernel_slot {
    char name[64];
    cl_kernel kernel;
} kernel_slot;

struct clkit_program {
    clkit_program *next;
    char *file, *options;
    cl_program program;
    kernel_slot kernels[8];
};

static const char binary_magic[8] = {'C', 'L', 'K', 'I', 'T', 'B', 'N', '1'};

/* ---- sources ---- */

/* Bounds on what is read: a kernel source is a few hundred KiB at most; a cache entry is a
   driver's binary or PTX, tens of MiB for the largest programs. */
#define SOURCE_MAX_BYTES ((size_t)16 << 20)
#define ENTRY_MAX_BYTES ((size_t)1 << 30)

/* Up to `size` bytes of the open file fd, NUL-terminated, their count in *len; NULL when a
   read fails or memory runs out. */
static char *read_up_to(int fd, size_t size, size_t *len)
{
    char *buf = malloc(size + 1);
    size_t n = 0;
    while (buf && n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r > 0) n += (size_t)r;
        else if (r == 0) break;
        else if (errno != EINTR) {
            free(buf);
            return NULL;
        }
    }
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

char *clkit_read_regular(const char *path, size_t max, size_t *len, clkit_read_status *status,
                         const char **why)
{
    *len = 0, *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        *status = errno == ENOENT ? CLKIT_READ_MISSING : CLKIT_READ_UNREADABLE;
        *why = strerror(errno);
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    *status = CLKIT_READ_UNREADABLE;
    if (fstat(fd, &st) != 0) *why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) *status = CLKIT_READ_NOT_REGULAR, *why = "not a regular file";
    else if ((uint64_t)st.st_size > max) *status = CLKIT_READ_TOO_LARGE, *len = (size_t)st.st_size;
    else if (!(buf = read_up_to(fd, (size_t)st.st_size, len))) *why = errno ? strerror(errno) : "out of memory";
    else *status = *len == (size_t)st.st_size ? CLKIT_READ_OK : CLKIT_READ_SHORT;
    close(fd);
    return buf;
}

/* path's whole bytes (clkit_read_regular), or NULL with *why saying why (NULL: the file does
   not exist); a file that shrank while it was read is refused too. */
static char *read_file(const char *path, size_t max, size_t *len, const char **why)
{
    size_t n;
    clkit_read_status st;
    char *buf = clkit_read_regular(path, max, &n, &st, why);
    if (st == CLKIT_READ_OK) {
        if (len) *len = n;
        return buf;
    }
    free(buf);
    *why = st == CLKIT_READ_MISSING ? NULL : st == CLKIT_READ_TOO_LARGE ? "larger than any file of its kind"
           : st == CLKIT_READ_SHORT ? "short read" : *why;
    return NULL;
}

/* Whether file names a source by its path under cl/ ("softmax.cl", "nv/mma.h"): relative,
   no component empty, "." or "..". That is then the file's one spelling, so that the include
   cycle check compares like with like, and a $CLKIT_KERNEL_DIR lookup stays in that tree. */
static int source_name_ok(const char *file)
{
    for (const char *p = file;; p++) {
        size_t n = strcspn(p, "/");
        if (n == 0 || (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.')))) return 0;
        p += n;
        if (!*p) return 1;
    }
}

static char *raw_source(const char *file)
{
    const char *dir = getenv("CLKIT_KERNEL_DIR");
    if (dir && *dir) {
        char path[4096];
        const char *why;
        snprintf(path, sizeof path, "%s/%s", dir, file);
        char *text = read_file(path, SOURCE_MAX_BYTES, NULL, &why);
        if (text) return text;
        clkit_log(CLKIT_LOG_WARN, "CLKIT_KERNEL_DIR: cannot read %s (%s), using the embedded copy",
                  path, why ? why : "no such file");
    }
    for (const clkit_embedded_source *s = clkit_embedded_sources; s->name; s++)
        if (strcmp(s->name, file) == 0) return strdup(s->text);
    return NULL;
}

/* Appends src to *buf, growing it. */
static int append(char **buf, size_t *len, size_t *cap, const char *src, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*cap + n + 1) * 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

#define INCLUDE_DEPTH 16

/* The files being expanded, outermost first, and what went wrong. */
typedef struct include_chain {
    const char *file[INCLUDE_DEPTH];
    int depth;
    char why[1024];
} include_chain;

/* Whether file is being expanded already; if so, why names the cycle ("kernel source add.cl:
   include cycle a.h -> b.h -> a.h"): expanding it again would never end. */
static int in_cycle(include_chain *c, const char *file)
{
    int from = 0;
    while (from < c->depth && strcmp(c->file[from], file) != 0) from++;
    if (from == c->depth) return 0;
    size_t used = (size_t)snprintf(c->why, sizeof c->why, "kernel source %s: include cycle ", c->file[0]);
    for (int i = from; i < c->depth && used < sizeof c->why; i++)
        used += (size_t)snprintf(c->why + used, sizeof c->why - used, "%s -> ", c->file[i]);
    if (used < sizeof c->why) snprintf(c->why + used, sizeof c->why - used, "%s", file);
    return 1;
}

static char *expand(const char *file, include_chain *c);

/* raw with its #include "x.h" lines replaced by their expansions; NULL on failure (c->why). */
static char *expand_text(const char *raw, include_chain *c)
{
    char *out = NULL;
    size_t len = 0, cap = 0;
    int bad = append(&out, &len, &cap, "", 0);
    for (const char *line = raw; *line && !bad;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) + 1 : strlen(line);
        char inc[128];
        if (sscanf(line, "#include \"%127[^\"]\"", inc) == 1) {
            char *sub = expand(inc, c);
            bad = !sub || append(&out, &len, &cap, sub, strlen(sub)) ||
                  append(&out, &len, &cap, "\n", 1);
            free(sub);
        } else {
            bad = append(&out, &len, &cap, line, n);
        }
        line += n;
    }
    if (bad && !c->why[0]) snprintf(c->why, sizeof c->why, "out of memory expanding the kernel sources");
    if (bad) {
        free(out);
        return NULL;
    }
    return out;
}

/* Expands #include "x.h" from the same source set, every name a path under cl/ whichever
   file includes it ("common.h" and "nv/mma.h" from cl/nv/matmul_mma.cl too): embedded sources
   have no directory that the OpenCL compiler could search. NULL on failure, with c->why: a
   name that is not such a path, a missing file, an include cycle, nesting deeper than
   INCLUDE_DEPTH. */
static char *expand(const char *file, include_chain *c)
{
    if (!source_name_ok(file)) {
        snprintf(c->why, sizeof c->why, "kernel source name %s is not a path under cl/%s%s", file,
                 c->depth ? ", included from " : "", c->depth ? c->file[c->depth - 1] : "");
        return NULL;
    }
    if (in_cycle(c, file)) return NULL;
    if (c->depth == INCLUDE_DEPTH) {
        snprintf(c->why, sizeof c->why, "kernel sources nest includes deeper than %d at %s",
                 INCLUDE_DEPTH, file);
        return NULL;
    }
    char *raw = raw_source(file);
    if (!raw) {
        snprintf(c->why, sizeof c->why, "kernel source %s not found%s%s", file,
                 c->depth ? ", included from " : "", c->depth ? c->file[c->depth - 1] : "");
        return NULL;
    }
    c->file[c->depth++] = file;
    char *out = expand_text(raw, c);
    c->depth--;
    free(raw);
    return out;
}

/* The expanded text of file, or NULL with why (of n bytes) saying what went wrong. */
static char *kernel_source(const char *file, char *why, size_t n)
{
    include_chain c = {.depth = 0};
    char *text = expand(file, &c);
    if (!text) snprintf(why, n, "%s", c.why);
    return text;
}

/* ---- disk cache ---- */

char *clkit_default_cache_dir(void)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char path[4096];
    if (xdg && *xdg)
        snprintf(path, sizeof path, "%s/clkit", xdg);
    else if (home && *home)
        snprintf(path, sizeof path, "%s/.cache/clkit", home);
    else
        return NULL;
    return strdup(path);
}

static void entry_path(const clkit_context *ctx, const char *source, const char *options,
                       char *path, size_t n)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    const struct clkit_device_props *p = &ctx->props;
    const char *parts[] = {CLKIT_VERSION_STRING, p->platform, p->name, p->driver,
                           p->device_version, ctx->build_base, options, source};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        XXH3_128bits_update(&st, parts[i], strlen(parts[i]) + 1);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    snprintf(path, n, "%s/%016llx%016llx.clbin", ctx->cache_dir, (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

int clkit_mkdir_p(const char *dir)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(tmp, 0755) && errno != EEXIST) ? -1 : 0;
}

/* The payload of a valid entry, or NULL (missing, short, corrupt: all the same to callers). */
static unsigned char *load_entry(const char *path, size_t *size)
{
    size_t len = 0;
    const char *why;
    unsigned char *buf = (unsigned char *)read_file(path, ENTRY_MAX_BYTES, &len, &why);
    if (!buf) {
        if (why) clkit_log(CLKIT_LOG_WARN, "ignoring cache entry %s: %s", path, why);
        return NULL;
    }
    uint64_t n = 0, hash = 0;
    if (len >= 24 && memcmp(buf, binary_magic, 8) == 0) {
        memcpy(&n, buf + 8, 8);
        memcpy(&hash, buf + 16, 8);
    }
    if (len < 24 || n != len - 24 || XXH3_64bits(buf + 24, n) != hash) {
        clkit_log(CLKIT_LOG_WARN, "ignoring corrupt cache entry %s", path);
        free(buf);
        return NULL;
    }
    memmove(buf, buf + 24, n);
    *size = n;
    return buf;
}

uint64_t clkit_cache_cap(void)
{
    const char *s = getenv("CLKIT_CACHE_MAX_MB");
    if (!s || !*s) return (uint64_t)CLKIT_CACHE_MAX_MB_DEFAULT << 20;
    char *end;
    double mb = strtod(s, &end);
    if (*end || !(mb >= 0) || mb > 1e9) {
        clkit_log(CLKIT_LOG_WARN, "CLKIT_CACHE_MAX_MB='%s' is not a size in megabytes; using %d", s,
                  CLKIT_CACHE_MAX_MB_DEFAULT);
        return (uint64_t)CLKIT_CACHE_MAX_MB_DEFAULT << 20;
    }
    return (uint64_t)(mb * 1048576.0);
}

typedef struct cache_file {
    struct timespec used;
    uint64_t size;
    char name[64];
} cache_file;

static int least_recent_first(const void *a, const void *b)
{
    const struct timespec *x = &((const cache_file *)a)->used, *y = &((const cache_file *)b)->used;
    return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                  : (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

/* The entries of the cache directory (files named *.clbin; a writer's temporary files and
   the tuned-config file are not entries), with their total size. NULL when there are none. */
static cache_file *list_entries(const char *dir, size_t *count, uint64_t *total)
{
    DIR *d = opendir(dir);
    cache_file *files = NULL;
    size_t n = 0, cap = 0;
    *total = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        struct stat st;
        char path[4200];
        if (len < 7 || len >= sizeof files->name || strcmp(e->d_name + len - 6, ".clbin")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            cache_file *grown = realloc(files, (cap = cap ? 2 * cap : 64) * sizeof *files);
            if (!grown) break;
            files = grown;
        }
        files[n].used = st.st_mtim;
        files[n].size = (uint64_t)st.st_size;
        memcpy(files[n].name, e->d_name, len + 1);
        *total += files[n++].size;
    }
    if (d) closedir(d);
    *count = n;
    return files;
}

/* Past the cap, removes the least recently used entries (never `keep`, the one just written)
   until the cache is under three quarters of it, so that a cache at its cap does not lose an
   entry on every build (the scan itself, a stat per entry, is small beside a build). Two
   processes pruning at once, or a reader losing an entry it was about to load, cost a
   rebuild at most: loads check every entry and writers rename whole files. */
static void prune(const char *dir, const char *keep)
{
    uint64_t cap = clkit_cache_cap(), total;
    size_t n;
    if (!cap) return;
    cache_file *files = list_entries(dir, &n, &total);
    if (total > cap) {
        qsort(files, n, sizeof *files, least_recent_first);
        const char *keep_name = strrchr(keep, '/') ? strrchr(keep, '/') + 1 : keep;
        for (size_t i = 0; i < n && total > cap / 4 * 3; i++) {
            char path[4200];
            if (strcmp(files[i].name, keep_name) == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, files[i].name);
            if (unlink(path) == 0 || errno == ENOENT) total -= files[i].size;
        }
        clkit_log(CLKIT_LOG_INFO, "binary cache %s pruned to %llu bytes (cap %llu)", dir,
                  (unsigned long long)total, (unsigned long long)cap);
    }
    free(files);
}

static void store_entry(const clkit_context *ctx, const char *path, const unsigned char *bin,
                        size_t n)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = -1;
    if (clkit_mkdir_p(ctx->cache_dir) == 0) fd = mkstemp(tmp);
    if (fd < 0) {
        clkit_log(CLKIT_LOG_WARN, "cannot write the binary cache in %s: %s", ctx->cache_dir,
                  strerror(errno));
        return;
    }
    uint64_t len = n, hash = XXH3_64bits(bin, n);
    FILE *f = fdopen(fd, "wb");
    int ok = f && fwrite(binary_magic, 1, 8, f) == 8 && fwrite(&len, 8, 1, f) == 1 &&
             fwrite(&hash, 8, 1, f) == 1 && fwrite(bin, 1, n, f) == n;
    if (f) ok = (fclose(f) == 0) && ok;
    else close(fd);
    if (!ok || rename(tmp, path) != 0) {
        clkit_log(CLKIT_LOG_WARN, "cannot write cache entry %s", path);
        unlink(tmp);
        return;
    }
    prune(ctx->cache_dir, path);
}

/* ---- building ---- */

static clkit_status build_log_fail(clkit_context *ctx, cl_program prog, const char *file,
                                   const char *options)
{
    size_t n = 0;
    clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = calloc(n + 1, 1);
    if (log) clGetProgramBuildInfo(prog, ctx->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    clkit_status s = clkit_fail(ctx, CLKIT_ERR_BUILD, "%s with '%s':\n%s", file, options,
                                log ? log : "(no build log)");
    free(log);
    return s;
}

static cl_program from_binary(clkit_context *ctx, const char *path, const char *opts)
{
    size_t n = 0;
    unsigned char *bin = load_entry(path, &n);
    if (!bin) return NULL;
    cl_int st, err;
    const unsigned char *b = bin;
    cl_program prog = clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, &n, &b, &st, &err);
    free(bin);
    if (prog && clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL) == CL_SUCCESS) {
        utimensat(AT_FDCWD, path, NULL, 0); /* recently used: the last to be pruned */
        return prog;
    }
    clkit_log(CLKIT_LOG_WARN, "cache entry %s does not load on this driver; rebuilding", path);
    if (prog) clReleaseProgram(prog);
    return NULL;
}

/* The program's binary (on NVIDIA, its PTX text), NUL-terminated; NULL if the driver gives none. */
static char *program_binary(cl_program prog, size_t *len)
{
    size_t n = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
        return NULL;
    char *bin = malloc(n + 1);
    if (bin && clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) {
        free(bin);
        return NULL;
    }
    if (bin) bin[n] = 0;
    *len = n;
    return bin;
}

static void save_binary(clkit_context *ctx, cl_program prog, const char *path)
{
    size_t n = 0;
    char *bin = program_binary(prog, &n);
    if (bin) store_entry(ctx, path, (const unsigned char *)bin, n);
    free(bin);
}

/* ---- Hopper's arch-specific instructions (cl/nv/mma.h: NV_90A) ---- */

static const char mark_90a[] = "//@90a ";

int clkit_ptx_retarget_90a(char *ptx, size_t *len, size_t cap)
{
    size_t m = sizeof mark_90a - 1, out = 0;
    for (size_t i = 0; ptx[i];) {
        if (strncmp(ptx + i, mark_90a, m) == 0) {
            i += m;
            continue;
        }
        ptx[out++] = ptx[i++];
    }
    ptx[out] = 0;
    static const char target[] = "\n.target sm_90";
    size_t t = sizeof target - 1;
    char *at = strstr(ptx, target);
    if (!at || out + 2 > cap || isalnum((unsigned char)at[t])) return 0;
    memmove(at + t + 1, at + t, out - (size_t)(at + t - ptx) + 1);
    at[t] = 'a';
    *len = out + 2;
    return 1;
}

static const char mark_maxnreg[] = "//@maxnreg ";

char *clkit_ptx_register_caps(const char *ptx, size_t *len)
{
    size_t marks = 0;
    for (const char *m = ptx; (m = strstr(m, mark_maxnreg)); m++) marks++;
    char *out = malloc(strlen(ptx) + marks * 24 + 1), *o = out;
    if (!out) return NULL;
    const char *at = ptx, *entry;
    while ((entry = strstr(at, ".entry"))) {
        const char *body = strstr(entry, "\n{"), *next = body ? strstr(body, ".entry") : NULL;
        if (!body) break;
        const char *mark = strstr(body, mark_maxnreg);
        memcpy(o, at, (size_t)(body - at));
        o += body - at;
        if (mark && (!next || mark < next))
            o += sprintf(o, "\n.maxnreg %d", atoi(mark + sizeof mark_maxnreg - 1));
        at = body;
    }
    strcpy(o, at);
    *len = (size_t)(o - out) + strlen(at) + 1;
    return out;
}

/* NVIDIA's OpenCL compiles for .target sm_90, which refuses wgmma; a program whose PTX holds
   such instructions as marked comments is rebuilt from that PTX, unmarked and retargeted to
   sm_90a, which the driver's JIT takes as a program binary. *prog is replaced on success;
   a program without marks is left as it is. */
static clkit_status arch_specific(clkit_context *ctx, cl_program *prog, const char *file,
                                  const char *opts)
{
    if (ctx->props.nv_cc_major < 9) return CLKIT_OK;
    size_t n = 0;
    char *ptx = program_binary(*prog, &n);
    if (!ptx || !strstr(ptx, mark_90a)) {
        free(ptx);
        return CLKIT_OK;
    }
    char *text = realloc(ptx, n + 2);
    if (!text) {
        free(ptx);
        return CLKIT_ERR_OUT_OF_MEMORY;
    }
    if (!clkit_ptx_retarget_90a(text, &n, n + 2)) {
        free(text);
        return clkit_fail(ctx, CLKIT_ERR_BUILD, "%s: no .target sm_90 line in the PTX to retarget", file);
    }
    if (strstr(text, mark_maxnreg)) {
        char *capped = clkit_ptx_register_caps(text, &n);
        free(text);
        if (!capped) return CLKIT_ERR_OUT_OF_MEMORY;
        text = capped;
    }
    cl_int st, err;
    const unsigned char *b = (const unsigned char *)text;
    cl_program p = clCreateProgramWithBinary(ctx->cl, 1, &ctx->device, &n, &b, &st, &err);
    free(text);
    if (!p) /* a build failure, so that the op falls back to what builds */
        return clkit_fail(ctx, CLKIT_ERR_BUILD, "%s: the driver refuses the sm_90a PTX (%s)", file,
                          clkit_cl_error_name(err));
    if (clBuildProgram(p, 1, &ctx->device, opts, NULL, NULL) != CL_SUCCESS) {
        clkit_status s = build_log_fail(ctx, p, file, "sm_90a PTX");
        clReleaseProgram(p);
        return s;
    }
    clReleaseProgram(*prog);
    *prog = p;
    return CLKIT_OK;
}

/* Appends "file<TAB>options" to $CLKIT_BUILD_LOG: CI replays every recorded build through the
   offline AMD compiler. */
static void record_build(const char *file, const char *options)
{
    const char *log = getenv("CLKIT_BUILD_LOG");
    FILE *f = log && *log ? fopen(log, "a") : NULL;
    if (!f) return;
    fprintf(f, "%s\t%s\n", file, options);
    fclose(f);
}

static clkit_status build(clkit_context *ctx, const char *file, const char *options,
                          cl_program *out)
{
    char why[1024];
    char *src = kernel_source(file, why, sizeof why);
    if (!src) return clkit_fail(ctx, CLKIT_ERR_BUILD, "%s", why);
    size_t olen = strlen(ctx->build_base) + strlen(options) + 2;
    char *opts = malloc(olen);
    if (!opts) {
        free(src);
        return CLKIT_ERR_OUT_OF_MEMORY;
    }
    snprintf(opts, olen, "%s %s", ctx->build_base, options);
    record_build(file, options);

    char path[4400] = "";
    if (ctx->cache_dir) entry_path(ctx, src, options, path, sizeof path);
    clkit_status s = CLKIT_OK;
    cl_program prog = path[0] ? from_binary(ctx, path, opts) : NULL;
    if (!prog) {
        cl_int err;
        const char *text = src;
        prog = clCreateProgramWithSource(ctx->cl, 1, &text, NULL, &err);
        if (!prog) {
            s = clkit_cl_fail(ctx, err, "clCreateProgramWithSource");
        } else if (clBuildProgram(prog, 1, &ctx->device, opts, NULL, NULL) != CL_SUCCESS) {
            s = build_log_fail(ctx, prog, file, opts);
            clReleaseProgram(prog);
            prog = NULL;
        } else if ((s = arch_specific(ctx, &prog, file, opts)) != CLKIT_OK) {
            clReleaseProgram(prog);
            prog = NULL;
        } else {
            clkit_log(CLKIT_LOG_DEBUG, "built %s with '%s'", file, opts);
            if (path[0]) save_binary(ctx, prog, path);
        }
    }
    free(src);
    free(opts);
    *out = prog;
    return s;
}

static clkit_program *find_program(clkit_context *ctx, const char *file, const char *options)
{
    for (clkit_program **pp = &ctx->programs; *pp; pp = &(*pp)->next) {
        clkit_program *p = *pp;
        if (strcmp(p->file, file) || strcmp(p->options, options)) continue;
        *pp = p->next; /* move to front: ops call the same few programs repeatedly */
        p->next = ctx->programs;
        ctx->programs = p;
        return p;
    }
    return NULL;
}

static clkit_status add_program(clkit_context *ctx, const char *file, const char *options,
                                clkit_program **out)
{
    clkit_program *p = calloc(1, sizeof *p);
    if (!p) return clkit_fail(ctx, CLKIT_ERR_OUT_OF_MEMORY, "program cache entry");
    p->file = strdup(file);
    p->options = strdup(options);
    clkit_status s = (p->file && p->options) ? build(ctx, file, options, &p->program)
                                             : CLKIT_ERR_OUT_OF_MEMORY;
    if (s) {
        free(p->file);
        free(p->options);
        free(p);
        return s;
    }
    p->next = ctx->programs;
    ctx->programs = p;
    *out = p;
    return CLKIT_OK;
}

clkit_status clkit_get_kernel(clkit_context *ctx, const char *file, const char *name,
                              const char *options, cl_kernel *kernel)
{
    clkit_program *p = find_program(ctx, file, options);
    clkit_status s = p ? CLKIT_OK : add_program(ctx, file, options, &p);
    if (s) return s;
    size_t i = 0, n = sizeof p->kernels / sizeof *p->kernels;
    for (; i < n && p->kernels[i].kernel; i++)
        if (strcmp(p->kernels[i].name, name) == 0) {
            *kernel = p->kernels[i].kernel;
            return CLKIT_OK;
        }
    if (i == n || strlen(name) >= sizeof p->kernels[i].name)
        return clkit_fail(ctx, CLKIT_ERR_BUILD, "too many kernels in %s", file);
    cl_int err;
    cl_kernel k = clCreateKernel(p->program, name, &err);
    if (!k) return clkit_cl_fail(ctx, err, "clCreateKernel");
    snprintf(p->kernels[i].name, sizeof p->kernels[i].name, "%s", name);
    p->kernels[i].kernel = k;
    *kernel = k;
    return CLKIT_OK;
}

void clkit_programs_release(clkit_context *ctx)
{
    while (ctx->programs) {
        clkit_program *p = ctx->programs;
        ctx->programs = p->next;
        for (size_t i = 0; i < sizeof p->kernels / sizeof *p->kernels; i++)
            if (p->kernels[i].kernel) clReleaseKernel(p->kernels[i].kernel);
        clReleaseProgram(p->program);
        free(p->file);
        free(p->options);
        free(p);
    }
}

/* ---- verdicts ---- */

/* Where the verdict `what` is kept: an entry of the binary cache keyed, beside the device and
   the driver, by every embedded kernel source. NULL where there is no cache, or where the
   sources come from $CLKIT_KERNEL_DIR (a developer's, which may change under the same name). */
static bool verdict_path(const clkit_context *ctx, const char *what, char *path, size_t n)
{
    const char *dir = getenv("CLKIT_KERNEL_DIR");
    if (!ctx->cache_dir || (dir && *dir)) return false;
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    for (const clkit_embedded_source *s = clkit_embedded_sources; s->name; s++)
        XXH64_update(&st, s->text, strlen(s->text) + 1);
    char sources[32];
    snprintf(sources, sizeof sources, "%016llx", (unsigned long long)XXH64_digest(&st));
    entry_path(ctx, sources, what, path, n);
    return true;
}

int clkit_cache_verdict(clkit_context *ctx, const char *what)
{
    char path[4200];
    if (!verdict_path(ctx, what, path, sizeof path)) return -1;
    size_t n = 0;
    unsigned char *v = load_entry(path, &n);
    int verdict = v && n == 1 && (v[0] == '0' || v[0] == '1') ? v[0] - '0' : -1;
    free(v);
    return verdict;
}

void clkit_cache_set_verdict(clkit_context *ctx, const char *what, bool pass)
{
    char path[4200];
    if (verdict_path(ctx, what, path, sizeof path)) store_entry(ctx, path, (const unsigned char *)(pass ? "1" : "0"), 1);
}
