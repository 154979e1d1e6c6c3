/* The tuned-config cache: $CLKIT_CACHE_DIR/tuned.json.

   {"format": 1, "entries": [{"device": "...", "op": "matmul", "dtype": "f32.f32.f32",
     "layout": "nn", "shape": [M, N, K, batch], "config": "BLOCK_M=64,...", "ms": 0.5}, ...]}

   Writers take an exclusive lock on tuned.json.lock, re-read the file, merge their entry and
   rename a temporary file into place, so two tuners never lose each other's entries and
   readers (who take no lock) see a whole file. A corrupt or truncated file is set aside as
   tuned.json.corrupt and started afresh; a newer format is left untouched and not written. */
#define _GNU_SOURCE
#include "tune.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#define FORMAT_VERSION 1

/* ---- configs ---- */

int clkit_config_get(const clkit_config *c, const char *name, int fallback)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->p[i].name, name) == 0) return c->p[i].value;
    return fallback;
}

void clkit_config_set(clkit_config *c, const char *name, int value)
{
    int i = 0;
    while (i < c->n && strcmp(c->p[i].name, name) != 0) i++;
    if (i == CLKIT_CONFIG_MAX) return;
    if (i == c->n) {
        snprintf(c->p[i].name, sizeof c->p[i].name, "%s", name);
        c->n++;
    }
    c->p[i].value = value;
}

static void join(const clkit_config *c, char *buf, size_t n, const char *prefix, const char *sep,
                 int with_host)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < c->n && used < n; i++) {
        if (!with_host && islower((unsigned char)c->p[i].name[0])) continue;
        int w = snprintf(buf + used, n - used, "%s%s%s=%d", used ? sep : "", prefix, c->p[i].name,
                         c->p[i].value);
        if (w < 0) break;
        used += (size_t)w;
    }
}

void clkit_config_options(const clkit_config *c, char *buf, size_t n)
{
    join(c, buf, n, "-D ", " ", 0);
}

void clkit_config_format(const clkit_config *c, char *buf, size_t n)
{
    join(c, buf, n, "", ",", 1);
}

int clkit_config_parse(const char *s, clkit_config *out)
{
    memset(out, 0, sizeof *out);
    while (s && *s) {
        char name[24];
        int value, used = 0;
        if (sscanf(s, " %23[A-Za-z0-9_] = %d%n", name, &value, &used) != 2 || out->n == CLKIT_CONFIG_MAX)
            return -1;
        clkit_config_set(out, name, value);
        s += used;
        while (*s == ' ') s++;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return 0;
}

/* ---- the file ---- */

static void cache_path(const clkit_context *ctx, char *buf, size_t n, const char *suffix)
{
    snprintf(buf, n, "%s/tuned.json%s", ctx->cache_dir, suffix);
}

static void device_id(const clkit_context *ctx, char *buf, size_t n)
{
    snprintf(buf, n, "%s | %s | %s", ctx->props.vendor, ctx->props.name, ctx->props.driver);
}

typedef enum { FILE_OK, FILE_MISSING, FILE_CORRUPT, FILE_NEWER } file_state;

/* Parses path into its entries array (a new reference, or an empty array). */
static file_state read_entries(const char *path, json_object **entries)
{
    *entries = json_object_new_array();
    json_object *root = json_object_from_file(path);
    if (!root) return access(path, F_OK) == 0 ? FILE_CORRUPT : FILE_MISSING;
    json_object *fmt, *arr;
    file_state st = FILE_CORRUPT;
    if (json_object_object_get_ex(root, "format", &fmt) && json_object_is_type(fmt, json_type_int)) {
        if (json_object_get_int(fmt) > FORMAT_VERSION) {
            st = FILE_NEWER;
        } else if (json_object_object_get_ex(root, "entries", &arr) &&
                   json_object_is_type(arr, json_type_array)) {
            json_object_put(*entries);
            *entries = json_object_get(arr);
            st = FILE_OK;
        }
    }
    json_object_put(root);
    return st;
}

static const char *str_field(json_object *e, const char *name)
{
    json_object *v;
    if (!json_object_object_get_ex(e, name, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* Shape of an entry; -1 when malformed. */
static int entry_shape(json_object *e, int64_t *shape)
{
    json_object *arr;
    if (!json_object_object_get_ex(e, "shape", &arr) || !json_object_is_type(arr, json_type_array))
        return -1;
    size_t n = json_object_array_length(arr);
    if (n > 4) return -1;
    for (size_t i = 0; i < n; i++) shape[i] = json_object_get_int64(json_object_array_get_idx(arr, i));
    return (int)n;
}

/* 1 when e is for this device and key's op, dtype and layout. */
static int entry_matches(json_object *e, const char *dev, const clkit_tune_key *key)
{
    const char *d = str_field(e, "device"), *op = str_field(e, "op"), *dt = str_field(e, "dtype"),
               *ly = str_field(e, "layout");
    return d && op && dt && ly && !strcmp(d, dev) && !strcmp(op, key->op) &&
           !strcmp(dt, key->dtype) && !strcmp(ly, key->layout);
}

/* Distance between shapes: sum of squared log-ratios; exact match is 0. */
static double shape_distance(const int64_t *a, const int64_t *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++) {
        double r = log((double)(a[i] > 0 ? a[i] : 1) / (double)(b[i] > 0 ? b[i] : 1));
        d += r * r;
    }
    return d;
}

/* The entries of tuned.json for a lookup. Every matmul and attention call looks up its
   shape, and parsing the file costs about 2 us an entry, so the context keeps the parse while
   the file's inode, size and modification time stay the same (writers rename a new file into
   place: a new inode), and with it the answers of its recent lookups. A corrupt or
   newer-format file warns once per version seen. */
static json_object *memo_entries(clkit_context *ctx, const char *path)
{
    clkit_tuned_memo *m = &ctx->tuned;
    long long id[4] = {-1, 0, 0, 0};
    struct stat sb;
    if (stat(path, &sb) == 0) {
        id[0] = (long long)sb.st_ino, id[1] = (long long)sb.st_size;
        id[2] = (long long)sb.st_mtim.tv_sec, id[3] = (long long)sb.st_mtim.tv_nsec;
    }
    if (m->entries && m->ino == id[0] && m->size == id[1] && m->mtime_s == id[2] && m->mtime_ns == id[3])
        return m->entries;
    clkit_tuned_release(ctx);
    file_state st = read_entries(path, &m->entries);
    if (st == FILE_CORRUPT || st == FILE_NEWER)
        clkit_log(CLKIT_LOG_WARN, "ignoring %s tuned-config cache %s",
                  st == FILE_CORRUPT ? "corrupt" : "newer-format", path);
    m->ino = id[0], m->size = id[1], m->mtime_s = id[2], m->mtime_ns = id[3];
    return m->entries;
}

void clkit_tuned_release(clkit_context *ctx)
{
    json_object_put(ctx->tuned.entries);
    memset(&ctx->tuned, 0, sizeof ctx->tuned);
}

static struct clkit_tuned_recent *recent_of(clkit_tuned_memo *m, const clkit_tune_key *key)
{
    for (int i = 0; i < m->n_recent; i++) {
        struct clkit_tuned_recent *r = &m->recent[i];
        if (r->nshape == key->nshape && !strcmp(r->op, key->op) && !strcmp(r->dtype, key->dtype) &&
            !strcmp(r->layout, key->layout) &&
            !memcmp(r->shape, key->shape, (size_t)key->nshape * sizeof *key->shape))
            return r;
    }
    return NULL;
}

/* The config string of the entry nearest to key's shape (NULL: none) and whether it is exact. */
static const char *nearest_entry(json_object *entries, const char *dev, const clkit_tune_key *key,
                                 int *exact)
{
    double best = INFINITY;
    const char *best_cfg = NULL;
    size_t n = json_object_array_length(entries);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(entries, i);
        int64_t shape[4];
        if (!entry_matches(e, dev, key) || entry_shape(e, shape) != key->nshape) continue;
        double d = shape_distance(shape, key->shape, key->nshape);
        const char *cfg = str_field(e, "config");
        if (cfg && d < best) {
            best = d;
            best_cfg = cfg;
        }
    }
    *exact = best == 0;
    return best_cfg;
}

clkit_lookup clkit_cache_lookup(clkit_context *ctx, const clkit_tune_key *key, clkit_config *out)
{
    if (!ctx->cache_dir || key->nshape < 0 || key->nshape > 4) return CLKIT_LOOKUP_NONE;
    char path[4200], dev[400];
    cache_path(ctx, path, sizeof path, "");
    json_object *entries = memo_entries(ctx, path);
    clkit_tuned_memo *m = &ctx->tuned;
    struct clkit_tuned_recent *r = recent_of(m, key);
    if (!r) {
        int exact;
        device_id(ctx, dev, sizeof dev);
        const char *cfg = nearest_entry(entries, dev, key, &exact);
        r = &m->recent[m->next_recent];
        m->next_recent = (m->next_recent + 1) % CLKIT_TUNED_RECENT;
        if (m->n_recent < CLKIT_TUNED_RECENT) m->n_recent++;
        memset(r, 0, sizeof *r);
        snprintf(r->op, sizeof r->op, "%s", key->op);
        snprintf(r->dtype, sizeof r->dtype, "%s", key->dtype);
        snprintf(r->layout, sizeof r->layout, "%s", key->layout);
        memcpy(r->shape, key->shape, (size_t)key->nshape * sizeof *key->shape);
        r->nshape = key->nshape;
        r->found = cfg && snprintf(r->config, sizeof r->config, "%s", cfg) < (int)sizeof r->config
                       ? (exact ? CLKIT_LOOKUP_EXACT : CLKIT_LOOKUP_NEAREST)
                       : CLKIT_LOOKUP_NONE;
    }
    if (r->found == CLKIT_LOOKUP_NONE || clkit_config_parse(r->config, out) != 0) return CLKIT_LOOKUP_NONE;
    return (clkit_lookup)r->found;
}

static json_object *new_entry(const char *dev, const clkit_tune_key *key, const clkit_config *cfg,
                              double ms)
{
    char text[512];
    clkit_config_format(cfg, text, sizeof text);
    json_object *e = json_object_new_object(), *shape = json_object_new_array();
    for (int i = 0; i < key->nshape; i++)
        json_object_array_add(shape, json_object_new_int64(key->shape[i]));
    json_object_object_add(e, "device", json_object_new_string(dev));
    json_object_object_add(e, "op", json_object_new_string(key->op));
    json_object_object_add(e, "dtype", json_object_new_string(key->dtype));
    json_object_object_add(e, "layout", json_object_new_string(key->layout));
    json_object_object_add(e, "shape", shape);
    json_object_object_add(e, "config", json_object_new_string(text));
    json_object_object_add(e, "ms", json_object_new_double(ms));
    return e;
}

/* Replaces the entry with e's key (device, op, dtype, layout, shape) or appends e. */
static void merge_entry(json_object *entries, json_object *e)
{
    int64_t shape[4], other[4];
    int n = entry_shape(e, shape);
    size_t len = json_object_array_length(entries);
    for (size_t i = 0; i < len; i++) {
        json_object *old = json_object_array_get_idx(entries, i);
        int same = entry_shape(old, other) == n && memcmp(shape, other, sizeof(int64_t) * (size_t)n) == 0;
        static const char *fields[] = {"device", "op", "dtype", "layout"};
        for (int f = 0; same && f < 4; f++) {
            const char *a = str_field(old, fields[f]), *b = str_field(e, fields[f]);
            same = a && b && !strcmp(a, b);
        }
        if (same) {
            json_object_array_put_idx(entries, i, e);
            return;
        }
    }
    json_object_array_add(entries, e);
}

static int write_atomically(const char *path, json_object *entries)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "format", json_object_new_int(FORMAT_VERSION));
    json_object_object_add(root, "entries", json_object_get(entries));
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp), ok = 0;
    if (fd >= 0) {
        const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY);
        size_t len = strlen(text);
        ok = write(fd, text, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
        ok = (close(fd) == 0) && ok && rename(tmp, path) == 0;
        if (!ok) unlink(tmp);
    }
    json_object_put(root);
    return ok ? 0 : -1;
}

/* Runs fn(entries, arg) on the file's entries under the lock and writes the result back. */
static clkit_status locked_update(clkit_context *ctx, void (*fn)(json_object *, void *), void *arg)
{
    if (!ctx->cache_dir) return CLKIT_OK;
    char path[4200], lock[4200];
    cache_path(ctx, path, sizeof path, "");
    cache_path(ctx, lock, sizeof lock, ".lock");
    char mk[4300];
    snprintf(mk, sizeof mk, "%s", ctx->cache_dir);
    int fd = -1;
    if (clkit_mkdir_p(mk) == 0) fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        if (fd >= 0) close(fd);
        return clkit_fail(ctx, CLKIT_ERR_IO, "cannot lock %s: %s", lock, strerror(errno));
    }
    json_object *entries;
    file_state st = read_entries(path, &entries);
    clkit_status s = CLKIT_OK;
    if (st == FILE_NEWER) {
        s = clkit_fail(ctx, CLKIT_ERR_IO, "%s was written by a newer clkit; not overwriting it", path);
    } else {
        if (st == FILE_CORRUPT) {
            char aside[4300];
            cache_path(ctx, aside, sizeof aside, ".corrupt");
            clkit_log(CLKIT_LOG_WARN, "%s is corrupt; moved to %s and started afresh", path, aside);
            rename(path, aside);
        }
        fn(entries, arg);
        if (write_atomically(path, entries) != 0)
            s = clkit_fail(ctx, CLKIT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    json_object_put(entries);
    flock(fd, LOCK_UN);
    close(fd);
    return s;
}

static void add_one(json_object *entries, void *e)
{
    merge_entry(entries, json_object_get((json_object *)e));
}

clkit_status clkit_cache_store(clkit_context *ctx, const clkit_tune_key *key,
                               const clkit_config *cfg, double ms)
{
    char dev[400];
    device_id(ctx, dev, sizeof dev);
    json_object *e = new_entry(dev, key, cfg, ms);
    clkit_status s = locked_update(ctx, add_one, e);
    json_object_put(e);
    return s;
}

/* ---- public: export, import, listing ---- */

static void add_all(json_object *entries, void *src)
{
    json_object *from = src;
    size_t n = json_object_array_length(from);
    for (size_t i = 0; i < n; i++)
        merge_entry(entries, json_object_get(json_object_array_get_idx(from, i)));
}

static int valid_entry(json_object *e)
{
    int64_t shape[4];
    return json_object_is_type(e, json_type_object) && str_field(e, "device") && str_field(e, "op") &&
           str_field(e, "dtype") && str_field(e, "layout") && str_field(e, "config") &&
           entry_shape(e, shape) >= 0;
}

clkit_status clkit_tuned_import(clkit_context *ctx, const char *path)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!path) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "path is NULL");
    if (!ctx->cache_dir) return clkit_fail(ctx, CLKIT_ERR_IO, "the cache is disabled");
    json_object *entries;
    file_state st = read_entries(path, &entries);
    clkit_status s = CLKIT_OK;
    size_t n = json_object_array_length(entries);
    for (size_t i = 0; i < n && st == FILE_OK; i++)
        if (!valid_entry(json_object_array_get_idx(entries, i))) st = FILE_CORRUPT;
    if (st != FILE_OK)
        s = clkit_fail(ctx, CLKIT_ERR_IO, "%s: %s", path,
                       st == FILE_MISSING ? "cannot read it"
                       : st == FILE_NEWER ? "written by a newer clkit"
                                          : "not a clkit tuned-config file");
    else
        s = locked_update(ctx, add_all, entries);
    json_object_put(entries);
    return s;
}

clkit_status clkit_tuned_export(clkit_context *ctx, const char *path)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!path) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "path is NULL");
    json_object *entries = json_object_new_array(), *all = NULL;
    if (ctx->cache_dir) {
        char src[4200];
        cache_path(ctx, src, sizeof src, "");
        read_entries(src, &all);
        add_all(entries, all);
        json_object_put(all);
    }
    clkit_status s = write_atomically(path, entries) == 0
                         ? CLKIT_OK
                         : clkit_fail(ctx, CLKIT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    json_object_put(entries);
    return s;
}

clkit_status clkit_tuned_list(clkit_context *ctx, clkit_tuned_entry_fn fn, void *user)
{
    if (!ctx || !fn) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!ctx->cache_dir) return CLKIT_OK;
    char path[4200], dev[400];
    cache_path(ctx, path, sizeof path, "");
    device_id(ctx, dev, sizeof dev);
    json_object *entries;
    read_entries(path, &entries);
    size_t n = json_object_array_length(entries);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(entries, i);
        const char *d = str_field(e, "device");
        if (!valid_entry(e) || strcmp(d, dev) != 0) continue;
        json_object *ms;
        double t = json_object_object_get_ex(e, "ms", &ms) ? json_object_get_double(ms) : 0;
        fn(user, str_field(e, "op"), str_field(e, "dtype"), str_field(e, "layout"),
           json_object_get_string(json_object_object_get(e, "shape")), str_field(e, "config"), t);
    }
    json_object_put(entries);
    return CLKIT_OK;
}

const char *clkit_cache_dir(const clkit_context *ctx)
{
    return ctx && ctx->cache_dir ? ctx->cache_dir : "";
}
