/* Shared by the subcommands of the `clkit` command line: exit statuses, error reports,
   contexts, the device property table and small helpers. */
#ifndef CLKIT_TOOL_H
#define CLKIT_TOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

#include "clkit.h"

/* Exit statuses of every subcommand. */
enum {
    TOOL_EXIT_OK = 0,
    TOOL_EXIT_FAIL = 1,     /* an op failed, a check did not pass, no device */
    TOOL_EXIT_USAGE = 2,    /* bad command line */
    TOOL_EXIT_NO_PLOT = 3,  /* --plot: gnuplot missing or failed; other output is complete */
};

int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tune(int argc, char **argv);

/* detail (clkit_last_error or op_error) without the status name it starts with. */
const char *tool_detail(clkit_status s, const char *detail);
/* "clkit: <what>: <status>: <detail>" on stderr; detail may be NULL or "". */
void tool_error(const char *what, clkit_status s, const char *detail);
/* A context on `device`; cache_dir and profiling as in clkit_options. A failed creation
   logs its detail to stderr itself: no context is left to carry it. */
clkit_status tool_open(clkit_context **ctx, const char *device, const char *cache_dir,
                       int profiling);
/* Strict numbers of the command line: all of text in base 10 (a real: digits, '.', an
   exponent; no "inf" or "nan"), within [lo, hi]. 0 on success, else -1, *out untouched. */
int tool_parse_int(const char *text, long long lo, long long hi, long long *out);
int tool_parse_real(const char *text, double lo, double hi, double *out);
/* A usage error of `clkit cmd` (cmd NULL: of clkit itself): one line naming the problem and a
   hint to --help, on stderr. Returns TOOL_EXIT_USAGE. */
int tool_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* getopt_long's report of a bad option (c: '?' unknown, ':' missing its value) as a usage
   error. The commands parse with opterr = 0 and an optstring that starts with ':'. */
int tool_option_error(const char *cmd, int c, char *const *argv);
/* Columns of the terminal on stderr, else stdout; else $COLUMNS; else 80. */
int tool_term_width(void);
/* A rate's unit for people: "GB/s" for bytes, and for flops TFLOP/s, or GFLOP/s where
   `largest`, in TFLOP/s, is below 1 (CPUs). *scale turns TFLOP/s (or GB/s) into that unit. */
const char *tool_rate_unit(int flops, double largest, double *scale);
/* Decimals of v in a fixed-point column: 3 below 10, 2 below 100, else 1, so that values from
   1 up show four significant digits. */
int tool_decimals(double v);
/* Milliseconds of a monotonic clock. */
double tool_now_ms(void);
/* "1.5 GiB" style, for people; machine output keeps plain bytes. */
void tool_bytes_text(uint64_t bytes, char *buf, size_t n);
/* The command line's dtype names ("f32", "u8") to clkit_dtype; -1 when unknown. */
int tool_dtype_parse(const char *name);
/* The ops' names (bench_only: those clkit bench runs), each after a space, for a line that
   is at column `indent`; wrapped within 79 columns onto lines indented as much. No newline at
   the end. */
void tool_print_ops(FILE *f, int indent, int bench_only);

/* clkit_device_props field by field, so `clkit info` and the JSON report show the same set. */
typedef enum prop_kind { PROP_TEXT, PROP_INT, PROP_UNSIGNED, PROP_U64, PROP_SIZE } prop_kind;
typedef struct prop_field {
    const char *name;
    prop_kind kind;
    size_t offset;
} prop_field;
extern const prop_field tool_props[];
extern const size_t tool_prop_count;
const char *tool_prop_text(const struct clkit_device_props *p, const prop_field *f);
int64_t tool_prop_int(const struct clkit_device_props *p, const prop_field *f);
/* The properties as a JSON object, field by field (`clkit info --json`, `clkit bench --json`). */
json_object *tool_props_json(const struct clkit_device_props *p);

#endif
