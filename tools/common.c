/* Helpers shared by the subcommands. */
#include "tool.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ops.h"

const char *tool_detail(clkit_status s, const char *detail)
{
    const char *name = clkit_status_string(s);
    size_t n = strlen(name);
    if (!detail) return "";
    if (strncmp(detail, name, n) == 0 && detail[n] == ':') detail += n + 1;
    while (*detail == ' ') detail++;
    return detail;
}

void tool_error(const char *what, clkit_status s, const char *detail)
{
    detail = tool_detail(s, detail);
    fprintf(stderr, "clkit: %s: %s%s%s\n", what, clkit_status_string(s), *detail ? ": " : "",
            detail);
}

clkit_status tool_open(clkit_context **ctx, const char *device, const char *cache_dir,
                       int profiling)
{
    clkit_options opt = {.device = device, .cache_dir = cache_dir, .profiling = profiling};
    return clkit_context_create(ctx, &opt);
}

/* strtoll and strtod skip leading spaces and take a sign; a number of the command line is
   digits first (a sign allowed), and all of it. */
static int number_start(const char *text)
{
    const char *at = text + (*text == '-' || *text == '+');
    return isdigit((unsigned char)*at) || (*at == '.' && isdigit((unsigned char)at[1]));
}

int tool_parse_int(const char *text, long long lo, long long hi, long long *out)
{
    char *end;
    if (!number_start(text)) return -1;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int tool_parse_real(const char *text, double lo, double hi, double *out)
{
    char *end;
    if (!number_start(text) || strspn(text, "0123456789.eE+-") != strlen(text)) return -1;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int tool_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "clkit%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'clkit%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
    return TOOL_EXIT_USAGE;
}

int tool_option_error(const char *cmd, int c, char *const *argv)
{
    /* getopt_long has stepped past the bad word, unless it stopped inside a cluster of short
       options ("-hx"), where optopt names the letter. */
    const char *word = argv[optind - 1];
    if (c == ':') return tool_usage_error(cmd, "option '%s' needs a value", word);
    if (strncmp(word, "--", 2) != 0 && optopt)
        return tool_usage_error(cmd, "unknown option '-%c'", optopt);
    if (strchr(word, '='))
        return tool_usage_error(cmd, "unknown option, or one that takes no value: '%s'", word);
    return tool_usage_error(cmd, "unknown option '%s'", word);
}

int tool_term_width(void)
{
    static const int fds[] = {STDERR_FILENO, STDOUT_FILENO};
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++) {
        struct winsize ws;
        if (isatty(fds[i]) && ioctl(fds[i], TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
            return ws.ws_col;
    }
    const char *env = getenv("COLUMNS");
    long long columns;
    return env && tool_parse_int(env, 1, 100000, &columns) == 0 ? (int)columns : 80;
}

const char *tool_rate_unit(int flops, double largest, double *scale)
{
    *scale = flops && largest < 1 ? 1e3 : 1;
    return !flops ? "GB/s" : largest < 1 ? "GFLOP/s" : "TFLOP/s";
}

int tool_decimals(double v)
{
    double a = fabs(v);
    return a >= 100 ? 1 : a >= 10 ? 2 : 3;
}

double tool_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

void tool_bytes_text(uint64_t bytes, char *buf, size_t n)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024 && u + 1 < sizeof units / sizeof *units) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

int tool_dtype_parse(const char *name)
{
    static const clkit_dtype all[] = {CLKIT_F32, CLKIT_F16, CLKIT_BF16,
                                      CLKIT_U8,  CLKIT_I32, CLKIT_I64};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (strcmp(name, clkit_dtype_name(all[i])) == 0) return (int)all[i];
    return -1;
}

void tool_print_ops(FILE *f, int indent, int bench_only)
{
    int column = indent;
    for (int i = 0; i < op_count; i++) {
        const char *name = op_table[i].name;
        if (bench_only && !op_table[i].bench_shapes) continue;
        int width = 1 + (int)strlen(name);
        if (column + width > 79 && column > indent) {
            fprintf(f, "\n%*s", indent, "");
            column = indent;
        }
        fprintf(f, " %s", name);
        column += width;
    }
}

#define FIELD(name, kind) {#name, kind, offsetof(struct clkit_device_props, name)}
const prop_field tool_props[] = {
    FIELD(platform, PROP_TEXT),       FIELD(vendor, PROP_TEXT),
    FIELD(name, PROP_TEXT),           FIELD(driver, PROP_TEXT),
    FIELD(device_version, PROP_TEXT), FIELD(c_version, PROP_TEXT),
    FIELD(is_gpu, PROP_INT),          FIELD(is_cpu, PROP_INT),
    FIELD(compute_units, PROP_UNSIGNED), FIELD(global_mem, PROP_U64),
    FIELD(max_alloc, PROP_U64),       FIELD(local_mem, PROP_U64),
    FIELD(local_mem_static, PROP_U64),
    FIELD(max_work_group, PROP_SIZE), FIELD(warp, PROP_UNSIGNED),
    FIELD(registers, PROP_UNSIGNED),  FIELD(nv_cc_major, PROP_INT),
    FIELD(nv_cc_minor, PROP_INT),     FIELD(amd_gfx, PROP_TEXT),
    FIELD(simd_per_cu, PROP_UNSIGNED), FIELD(fp16, PROP_INT),
    FIELD(fp64, PROP_INT),            FIELD(subgroups, PROP_INT),
    FIELD(opencl_c_major, PROP_INT),  FIELD(opencl_c_minor, PROP_INT),
};
#undef FIELD
const size_t tool_prop_count = sizeof tool_props / sizeof *tool_props;

const char *tool_prop_text(const struct clkit_device_props *p, const prop_field *f)
{
    return f->kind == PROP_TEXT ? (const char *)p + f->offset : NULL;
}

json_object *tool_props_json(const struct clkit_device_props *p)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < tool_prop_count; i++) {
        const prop_field *f = &tool_props[i];
        const char *text = tool_prop_text(p, f);
        json_object_object_add(o, f->name, text ? json_object_new_string(text)
                                                : json_object_new_int64(tool_prop_int(p, f)));
    }
    return o;
}

int64_t tool_prop_int(const struct clkit_device_props *p, const prop_field *f)
{
    const char *at = (const char *)p + f->offset;
    int i;
    unsigned u;
    uint64_t q;
    size_t z;
    switch (f->kind) {
    case PROP_INT: memcpy(&i, at, sizeof i); return i;
    case PROP_UNSIGNED: memcpy(&u, at, sizeof u); return u;
    case PROP_U64: memcpy(&q, at, sizeof q); return (int64_t)q;
    case PROP_SIZE: memcpy(&z, at, sizeof z); return (int64_t)z;
    case PROP_TEXT: break;
    }
    return 0;
}
