/* The tuned-config cache: $CLKIT_CACHE_DIR/tuned.json.

   {"format": 1, "entries": [{"device": "...", "op": "matmul", "dtype": "f32.f32.f32",
     "layout": "nn", "shape": [M, N, K, batch], "config": "BLOCK_M=64,...", "ms": 0.5}, ...]}

   Writers take an exclusive lock on tuned.json.lock, re-read the file, merge their entries and
   rename a temporary file into place, so two tuners never lose each other's entries and
   readers (who take no lock) see a whole file. A corrupt or truncated file, or something
   other than a regular file in its place, is set aside as tuned.json.corrupt and started
   afresh; a newer format, or a file that cannot be read or is past the size cap, is left
   untouched and not written. Malformed entries are passed over by lookups and dropped, with a
   warning, by merges; a later entry of the same key replaces the earlier one in place. */
#define _GNU_SOURCE
#include "tune.h"

#include <ctype.h>
#include <dirent.h>
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
#define XXH_INLINE_ALL
#include <xxhash.h>

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

/* A tuned-config file past this size is not read: a real one holds a few hundred entries of
   about 250 bytes, and without a bound a tuned.json linked to /dev/zero grew a process to
   gigabytes. */
#define TUNED_MAX_BYTES ((size_t)64 << 20)

static void cache_path(const clkit_context *ctx, char *buf, size_t n, const char *suffix)
{
    snprintf(buf, n, "%s/tuned.json%s", ctx->cache_dir, suffix);
}

static void device_id(const clkit_context *ctx, char *buf, size_t n)
{
    snprintf(buf, n, "%s | %s | %s", ctx->props.vendor, ctx->props.name, ctx->props.driver);
}

/* CORRUPT files (not JSON, not of our shape, not a regular file) are set aside by writers;
   NEWER and UNREADABLE ones (an error on open or read, past the size cap) are left alone,
   since what they hold may be good. */
typedef enum { FILE_OK, FILE_MISSING, FILE_CORRUPT, FILE_NEWER, FILE_UNREADABLE } file_state;

/* What reading a tuned-config file found. */
typedef struct tuned_file {
    json_object *entries; /* a new reference: the file's entries array, or an empty one */
    file_state state;
    char why[160];        /* what is wrong, when the state is neither OK nor MISSING */
} tuned_file;

static void file_fault(tuned_file *f, file_state st, const char *why)
{
    f->state = st;
    snprintf(f->why, sizeof f->why, "%s", why);
}

/* path's bytes when it is a regular file within the cap, else NULL with f's state set. A file
   that shrank while it was read gives what was there: the parse judges it. */
static char *read_bytes(const char *path, tuned_file *f, size_t *len)
{
    clkit_read_status st;
    const char *why;
    char *text = clkit_read_regular(path, TUNED_MAX_BYTES, len, &st, &why);
    if (st == CLKIT_READ_MISSING) f->state = FILE_MISSING;
    else if (st == CLKIT_READ_UNREADABLE) file_fault(f, FILE_UNREADABLE, why);
    else if (st == CLKIT_READ_NOT_REGULAR) file_fault(f, FILE_CORRUPT, why);
    else if (st == CLKIT_READ_TOO_LARGE) {
        f->state = FILE_UNREADABLE;
        snprintf(f->why, sizeof f->why, "%zu bytes, over the %zu MiB a tuned-config file may have",
                 *len, TUNED_MAX_BYTES >> 20);
    }
    return text;
}

/* text's JSON value; NULL with f's state set when text is not exactly one JSON value. A
   tokener of our own rather than json-c's file reader, which records its errors in a
   process-wide buffer: contexts on different threads would race on it. */
static json_object *parse_json(const char *text, size_t len, tuned_file *f)
{
    json_tokener *tok = json_tokener_new();
    if (!tok) {
        file_fault(f, FILE_UNREADABLE, "out of memory");
        return NULL;
    }
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    while (root && end < len && isspace((unsigned char)text[end])) end++;
    if (root && end == len) return root;
    json_object_put(root);
    file_fault(f, FILE_CORRUPT, root ? "text after the JSON value"
                                : !len ? "empty"
                                : err == json_tokener_continue ? "truncated JSON"
                                                               : json_tokener_error_desc(err));
    return NULL;
}

/* Parses text into f: a format number we read and an entries array. */
static void parse_entries(const char *text, size_t len, tuned_file *f)
{
    json_object *root = parse_json(text, len, f), *fmt, *arr;
    if (!root) return;
    if (!json_object_object_get_ex(root, "format", &fmt) || !json_object_is_type(fmt, json_type_int)) {
        file_fault(f, FILE_CORRUPT, "no format number");
    } else if (json_object_get_int(fmt) > FORMAT_VERSION) {
        file_fault(f, FILE_NEWER, "written by a newer clkit");
    } else if (json_object_get_int(fmt) < 1) {
        file_fault(f, FILE_CORRUPT, "format number below 1, which no clkit writes");
    } else if (!json_object_object_get_ex(root, "entries", &arr) ||
               !json_object_is_type(arr, json_type_array)) {
        file_fault(f, FILE_CORRUPT, "no entries array");
    } else {
        json_object_put(f->entries);
        f->entries = json_object_get(arr);
        f->state = FILE_OK;
    }
    json_object_put(root);
}

/* Reads path into f; f->entries is NULL only when memory ran out. */
static void read_tuned(const char *path, tuned_file *f)
{
    memset(f, 0, sizeof *f);
    f->entries = json_object_new_array();
    size_t len = 0;
    char *text = read_bytes(path, f, &len);
    if (text) parse_entries(text, len, f);
    free(text);
}

static const char *str_field(json_object *e, const char *name)
{
    json_object *v;
    if (!json_object_object_get_ex(e, name, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

/* Shape of an entry: at most 4 integers; -1 when malformed. */
static int entry_shape(json_object *e, int64_t *shape)
{
    json_object *arr;
    if (!json_object_object_get_ex(e, "shape", &arr) || !json_object_is_type(arr, json_type_array))
        return -1;
    size_t n = json_object_array_length(arr);
    if (n > 4) return -1;
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx(arr, i);
        if (!json_object_is_type(v, json_type_int)) return -1;
        shape[i] = json_object_get_int64(v);
    }
    return (int)n;
}

/* What identifies an entry: a later entry of the same key replaces it. */
typedef struct entry_key {
    const char *text[4]; /* device, op, dtype, layout */
    int64_t shape[4];
    int nshape;
} entry_key;

/* e's key; -1 when e is not a well-formed entry (an object with string device, op, dtype,
   layout and config, and a shape of at most 4 integers). */
static int key_of(json_object *e, entry_key *k)
{
    static const char *const fields[4] = {"device", "op", "dtype", "layout"};
    if (!json_object_is_type(e, json_type_object) || !str_field(e, "config")) return -1;
    for (int i = 0; i < 4; i++)
        if (!(k->text[i] = str_field(e, fields[i]))) return -1;
    k->nshape = entry_shape(e, k->shape);
    return k->nshape < 0 ? -1 : 0;
}

static size_t count_malformed(json_object *entries)
{
    size_t n = json_object_array_length(entries), bad = 0;
    for (size_t i = 0; i < n; i++) {
        entry_key k;
        bad += key_of(json_object_array_get_idx(entries, i), &k) != 0;
    }
    return bad;
}

static int same_key(const entry_key *a, const entry_key *b)
{
    if (a->nshape != b->nshape || memcmp(a->shape, b->shape, (size_t)a->nshape * sizeof *a->shape))
        return 0;
    for (int i = 0; i < 4; i++)
        if (strcmp(a->text[i], b->text[i])) return 0;
    return 1;
}

static uint64_t key_hash(const entry_key *k)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < 4; i++) XXH3_64bits_update(&st, k->text[i], strlen(k->text[i]) + 1);
    XXH3_64bits_update(&st, k->shape, (size_t)k->nshape * sizeof *k->shape);
    return XXH3_64bits_digest(&st);
}

/* ---- merging: entries by key, through an open-addressing table (O(1) an entry; a scan
   of the array for each took 74 s for 16,000 entries) ---- */

typedef struct entry_table {
    json_object *entries; /* the merged entries, in the order their keys first came */
    struct slot {
        uint64_t hash;
        size_t at;        /* index in entries + 1; 0: a free slot */
    } *slots;
    size_t cap;           /* slots: a power of two, more than twice the entries */
    size_t skipped;       /* malformed entries left out */
} entry_table;

static int table_init(entry_table *t)
{
    memset(t, 0, sizeof *t);
    t->entries = json_object_new_array();
    return t->entries ? 0 : -1;
}

static void table_free(entry_table *t)
{
    json_object_put(t->entries);
    free(t->slots);
}

static int table_grow(entry_table *t)
{
    size_t cap = t->cap ? 2 * t->cap : 64;
    struct slot *s = calloc(cap, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].at) continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (s[j].at) j = (j + 1) & (cap - 1);
        s[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
    return 0;
}

/* The slot of key k (hash h): the one holding the entry of that key, else the free one
   where it goes. */
static size_t find_slot(const entry_table *t, const entry_key *k, uint64_t h)
{
    size_t i = h & (t->cap - 1);
    for (entry_key old; t->slots[i].at; i = (i + 1) & (t->cap - 1))
        if (t->slots[i].hash == h &&
            key_of(json_object_array_get_idx(t->entries, t->slots[i].at - 1), &old) == 0 &&
            same_key(k, &old))
            break;
    return i;
}

/* Adds e (taking a reference), or puts it in the place of the entry of the same key; counts
   a malformed e as skipped. -1 when memory runs out. */
static int table_add(entry_table *t, json_object *e)
{
    entry_key k;
    if (key_of(e, &k) != 0) {
        t->skipped++;
        return 0;
    }
    size_t n = json_object_array_length(t->entries);
    if (2 * (n + 1) > t->cap && table_grow(t) != 0) return -1;
    uint64_t h = key_hash(&k);
    size_t i = find_slot(t, &k, h);
    int fresh = !t->slots[i].at;
    json_object_get(e);
    if (fresh ? json_object_array_add(t->entries, e)
              : json_object_array_put_idx(t->entries, t->slots[i].at - 1, e)) {
        json_object_put(e);
        return -1;
    }
    if (fresh) t->slots[i] = (struct slot){h, n + 1};
    return 0;
}

static int table_add_all(entry_table *t, json_object *arr)
{
    size_t n = json_object_array_length(arr);
    for (size_t i = 0; i < n; i++)
        if (table_add(t, json_object_array_get_idx(arr, i)) != 0) return -1;
    return 0;
}

/* ---- lookups ---- */

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

/* The entries of tuned.json for a lookup (NULL only when memory ran out). Every matmul and
   attention call looks up its shape, and parsing the file costs about 2 us an entry, so the
   context keeps the parse while the file's inode, size and modification time stay the same
   (writers rename a new file into place: a new inode), and with it the answers of its recent
   lookups. A file that cannot be used, or has malformed entries, warns once per version
   seen. */
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
    tuned_file f;
    read_tuned(path, &f);
    size_t bad = f.state == FILE_OK ? count_malformed(f.entries) : 0;
    if (f.state != FILE_OK && f.state != FILE_MISSING)
        clkit_log(CLKIT_LOG_WARN, "ignoring the tuned-config cache %s: %s", path, f.why);
    else if (bad)
        clkit_log(CLKIT_LOG_WARN, "%s: passing over %zu malformed entries", path, bad);
    m->entries = f.entries;
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

/* The config string of the entry nearest to key's shape (NULL: none) and whether it is exact;
   malformed entries are passed over. */
static const char *nearest_entry(json_object *entries, const char *dev, const clkit_tune_key *key,
                                 int *exact)
{
    double best = INFINITY;
    const char *best_cfg = NULL;
    size_t n = json_object_array_length(entries);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(entries, i);
        entry_key k;
        if (key_of(e, &k) != 0 || k.nshape != key->nshape || strcmp(k.text[0], dev) ||
            strcmp(k.text[1], key->op) || strcmp(k.text[2], key->dtype) || strcmp(k.text[3], key->layout))
            continue;
        double d = shape_distance(k.shape, key->shape, key->nshape);
        if (d < best) {
            best = d;
            best_cfg = str_field(e, "config");
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
    if (!entries) return CLKIT_LOOKUP_NONE;
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

/* ---- writing ---- */

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

/* What a temporary file's name adds to the file's, before mkstemp's six characters: a name no
   one else would give a file, since stale ones are removed (remove_stale_temps). */
#define TEMP_SUFFIX ".tmp-"

/* Writes {"format", "entries"} to a temporary file beside path and renames it into place, so
   that readers (and a writer killed midway) never leave or see part of a file. */
static int write_atomically(const char *path, json_object *entries)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "format", json_object_new_int(FORMAT_VERSION));
    json_object_object_add(root, "entries", json_object_get(entries));
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s" TEMP_SUFFIX "XXXXXX", path);
    int fd = mkstemp(tmp), ok = 0;
    if (fd >= 0) {
        const char *text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY);
        size_t len = strlen(text);
        ok = write(fd, text, len) == (ssize_t)len && write(fd, "\n", 1) == 1;
        ok = (close(fd) == 0) && ok && rename(tmp, path) == 0;
        if (!ok) {
            int err = errno;
            unlink(tmp);
            errno = err;
        }
    }
    json_object_put(root);
    return ok ? 0 : -1;
}

/* The locked descriptor of tuned.json.lock, or -1 with why filled in. */
static int lock_cache(const clkit_context *ctx, char *why, size_t n)
{
    char lock[4200];
    cache_path(ctx, lock, sizeof lock, ".lock");
    int fd = -1;
    if (clkit_mkdir_p(ctx->cache_dir) == 0) fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0 && flock(fd, LOCK_EX) == 0) return fd;
    snprintf(why, n, "cannot lock %s: %s", lock, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
}

/* Removes the temporary files (tuned.json.tmp-XXXXXX) of writers killed before their rename.
   Writers make them only while they hold the lock, which the caller now holds: any there is
   stale. */
static void remove_stale_temps(const clkit_context *ctx)
{
    DIR *d = opendir(ctx->cache_dir);
    static const char prefix[] = "tuned.json" TEMP_SUFFIX;
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[4300];
        if (strncmp(e->d_name, prefix, sizeof prefix - 1) || strlen(e->d_name) != sizeof prefix - 1 + 6)
            continue;
        snprintf(path, sizeof path, "%s/%s", ctx->cache_dir, e->d_name);
        clkit_log(CLKIT_LOG_INFO, "removing %s, left by a writer that did not finish", path);
        unlink(path);
    }
    if (d) closedir(d);
}

/* Merges the entries of `add` (well-formed ones: the callers check) into tuned.json under
   the lock and writes the result back; why says what failed. */
static clkit_status locked_update(clkit_context *ctx, json_object *add, char *why, size_t n)
{
    char path[4200];
    cache_path(ctx, path, sizeof path, "");
    int lock = lock_cache(ctx, why, n);
    if (lock < 0) return CLKIT_ERR_IO;
    remove_stale_temps(ctx);
    tuned_file f;
    read_tuned(path, &f);
    entry_table t;
    clkit_status s = CLKIT_OK;
    if (f.state == FILE_NEWER || f.state == FILE_UNREADABLE) {
        snprintf(why, n, "%s: %s; not overwriting it", path, f.why);
        s = CLKIT_ERR_IO;
    } else if (!f.entries || table_init(&t) != 0) {
        snprintf(why, n, "out of memory merging %s", path);
        s = CLKIT_ERR_OUT_OF_MEMORY;
    } else {
        if (f.state == FILE_CORRUPT) {
            char aside[4300];
            cache_path(ctx, aside, sizeof aside, ".corrupt");
            clkit_log(CLKIT_LOG_WARN, "%s: %s; moved to %s and started afresh", path, f.why, aside);
            rename(path, aside);
        }
        if (table_add_all(&t, f.entries) != 0 || table_add_all(&t, add) != 0) {
            snprintf(why, n, "out of memory merging %s", path);
            s = CLKIT_ERR_OUT_OF_MEMORY;
        } else if (write_atomically(path, t.entries) != 0) {
            snprintf(why, n, "cannot write %s: %s", path, strerror(errno));
            s = CLKIT_ERR_IO;
        } else if (t.skipped) {
            clkit_log(CLKIT_LOG_WARN, "%s: dropped %zu malformed entries", path, t.skipped);
        }
        table_free(&t);
    }
    json_object_put(f.entries);
    flock(lock, LOCK_UN);
    close(lock);
    return s;
}

/* The unsaved entry follows this mark in the failure's message, in the form --import reads,
   so that no caller (`clkit tune` prints it) loses a tuning that could not be kept. */
#define UNSAVED_MARK "; unsaved entry: "

clkit_status clkit_cache_store(clkit_context *ctx, const clkit_tune_key *key,
                               const clkit_config *cfg, double ms)
{
    if (!ctx->cache_dir) return CLKIT_OK;
    char dev[400], why[4400];
    device_id(ctx, dev, sizeof dev);
    json_object *e = new_entry(dev, key, cfg, ms), *add = json_object_new_array();
    clkit_status s = CLKIT_ERR_OUT_OF_MEMORY;
    if (e && add && json_object_array_add(add, json_object_get(e)) == 0) s = locked_update(ctx, add, why, sizeof why);
    else snprintf(why, sizeof why, "out of memory for a tuned entry");
    if (s)
        clkit_fail(ctx, s, "%s" UNSAVED_MARK "%s", why,
                   e ? json_object_to_json_string_ext(e, JSON_C_TO_STRING_PLAIN) : "{}");
    json_object_put(e);
    json_object_put(add);
    return s;
}

/* ---- public: export, import, listing ---- */

static const char *state_text(const tuned_file *f)
{
    return f->state == FILE_MISSING ? "no such file" : f->why;
}

clkit_status clkit_tuned_import(clkit_context *ctx, const char *path)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!path) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "path is NULL");
    if (!ctx->cache_dir) return clkit_fail(ctx, CLKIT_ERR_IO, "the cache is disabled");
    tuned_file f;
    read_tuned(path, &f);
    if (!f.entries) return clkit_fail(ctx, CLKIT_ERR_OUT_OF_MEMORY, "reading %s", path);
    size_t n = json_object_array_length(f.entries), bad = count_malformed(f.entries);
    clkit_status s = CLKIT_OK;
    char why[4400];
    if (f.state != FILE_OK)
        s = clkit_fail(ctx, CLKIT_ERR_IO, "%s: %s", path, state_text(&f));
    else if (n == 0)
        s = clkit_fail(ctx, CLKIT_ERR_IO, "%s: no tuned entries in it", path);
    else if (bad == n)
        s = clkit_fail(ctx, CLKIT_ERR_IO, "%s: none of its %zu entries is a well-formed tuned entry", path, n);
    else if ((s = locked_update(ctx, f.entries, why, sizeof why)) != CLKIT_OK)
        clkit_fail(ctx, s, "%s", why);
    else if (bad)
        clkit_log(CLKIT_LOG_WARN, "%s: skipped %zu malformed entries of %zu", path, bad, n);
    json_object_put(f.entries);
    return s;
}

/* The cache's entries merged by key into t, malformed ones skipped with a warning. */
static clkit_status cache_entries(clkit_context *ctx, entry_table *t)
{
    if (table_init(t) != 0) return clkit_fail(ctx, CLKIT_ERR_OUT_OF_MEMORY, "tuned entries");
    if (!ctx->cache_dir) return CLKIT_OK;
    char path[4200];
    cache_path(ctx, path, sizeof path, "");
    tuned_file f;
    read_tuned(path, &f);
    clkit_status s = CLKIT_OK;
    if (f.state != FILE_OK && f.state != FILE_MISSING)
        s = clkit_fail(ctx, CLKIT_ERR_IO, "%s: %s", path, f.why);
    else if (!f.entries || table_add_all(t, f.entries) != 0)
        s = clkit_fail(ctx, CLKIT_ERR_OUT_OF_MEMORY, "reading %s", path);
    else if (t->skipped)
        clkit_log(CLKIT_LOG_WARN, "%s: skipped %zu malformed entries", path, t->skipped);
    json_object_put(f.entries);
    return s;
}

clkit_status clkit_tuned_export(clkit_context *ctx, const char *path)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!path) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "path is NULL");
    entry_table t;
    clkit_status s = cache_entries(ctx, &t);
    if (!s && write_atomically(path, t.entries) != 0)
        s = clkit_fail(ctx, CLKIT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    table_free(&t);
    return s;
}

clkit_status clkit_tuned_list(clkit_context *ctx, clkit_tuned_entry_fn fn, void *user)
{
    if (!ctx) return CLKIT_ERR_NULL_ARGUMENT;
    clkit_clear_error(ctx);
    if (!fn) return clkit_fail(ctx, CLKIT_ERR_NULL_ARGUMENT, "fn is NULL");
    char dev[400];
    device_id(ctx, dev, sizeof dev);
    entry_table t;
    clkit_status s = cache_entries(ctx, &t);
    size_t n = s ? 0 : json_object_array_length(t.entries);
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(t.entries, i), *ms;
        if (strcmp(str_field(e, "device"), dev) != 0) continue;
        double v = json_object_object_get_ex(e, "ms", &ms) ? json_object_get_double(ms) : 0;
        fn(user, str_field(e, "op"), str_field(e, "dtype"), str_field(e, "layout"),
           json_object_get_string(json_object_object_get(e, "shape")), str_field(e, "config"), v);
    }
    table_free(&t);
    return s;
}

const char *clkit_cache_dir(const clkit_context *ctx)
{
    return ctx && ctx->cache_dir ? ctx->cache_dir : "";
}
