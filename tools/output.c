/* Bench output: human tables, CSV, JSON (json-c) and plots (gnuplot). */
#include "output.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "tool.h"

/* The measured values of one provider of a row, in CSV column order. Throughput quantiles
   are named for throughput: gbps_p20 is the 20 % quantile of GB/s, so it comes from the 80 %
   one of time. GB/s rate the bandwidth ops, TFLOP/s the ops that count flops (matmul,
   linear_cross_entropy, attention); the other of the two stays empty. The scratch peak is
   clkit's device memory for intermediates during a call, in MiB. Newer columns come after the
   older ones, so that CSV readers by position keep working. */
enum {
    V_MS, V_MS_P20, V_MS_P80, V_GBPS, V_GBPS_P20, V_GBPS_P80, V_COLD, V_WARM,
    V_TFLOPS, V_TFLOPS_P20, V_TFLOPS_P80, V_SCRATCH, V_COUNT,
    V_FIRST_NEW = V_TFLOPS
};
static const char *const value_names[V_COUNT] = {
    "ms_median", "ms_p20", "ms_p80", "gbps_median", "gbps_p20", "gbps_p80", "cold_ms", "warm_ms",
    "tflops_median", "tflops_p20", "tflops_p80", "scratch_mib",
};

/* Work per millisecond: bytes as GB/s, flops as TFLOP/s. */
static double rate(double work, double ms, double scale)
{
    return ms > 0 && work > 0 ? work / ms * scale : NAN;
}

static void row_values(const out_row *row, int j, double v[V_COUNT])
{
    const measurement *m = &row->m[j];
    double bytes = row->flops > 0 ? 0 : (double)row->bytes;
    v[V_MS] = m->ms_median;
    v[V_MS_P20] = m->ms_p20;
    v[V_MS_P80] = m->ms_p80;
    v[V_GBPS] = rate(bytes, m->ms_median, 1e-6);
    v[V_GBPS_P20] = rate(bytes, m->ms_p80, 1e-6);
    v[V_GBPS_P80] = rate(bytes, m->ms_p20, 1e-6);
    v[V_COLD] = m->cold_ms;
    v[V_WARM] = m->warm_ms;
    v[V_TFLOPS] = rate(row->flops, m->ms_median, 1e-9);
    v[V_TFLOPS_P20] = rate(row->flops, m->ms_p80, 1e-9);
    v[V_TFLOPS_P80] = rate(row->flops, m->ms_p20, 1e-9);
    v[V_SCRATCH] = m->scratch_bytes / (1 << 20);
}

/* The rate the row is judged by: median, p20 and p80 of GB/s or TFLOP/s. */
static void row_rate(const out_row *row, int j, double r[3])
{
    double v[V_COUNT];
    row_values(row, j, v);
    int at = row->flops > 0 ? V_TFLOPS : V_GBPS;
    for (int i = 0; i < 3; i++) r[i] = v[at + i];
}

static int providers_of(const out_row *row)
{
    int n;
    op_providers(row->op, &n);
    return n;
}

out_row out_row_make(const op_problem *p)
{
    out_row row;
    memset(&row, 0, sizeof row);
    row.op = p->op;
    row.dtype = p->dtype;
    row.out_dtype = p->out_dtype;
    row.transposed = p->shape.transposed;
    op_shape_text(p, row.shape, sizeof row.shape);
    row.bytes = op_bytes(p);
    row.flops = p->op->flops ? p->op->flops(p) : 0;
    row.x = op_plot_x(p);
    for (int j = 0; j < OP_MAX_PROVIDERS; j++)
        row.m[j].cold_ms = row.m[j].warm_ms = row.m[j].scratch_bytes = NAN;
    return row;
}

/* ---- table ---- */

/* Wide enough for "512x512x512x16.bshared" and "32x4x8192x128.causal". */
static int shape_width(const out_row *row)
{
    return row->op->ndim >= 3 ? 24 : 14;
}

/* The unit of the table that row starts: by the best median of its providers, so that a CPU's
   rates show as GFLOP/s with digits to read. */
static void table_unit(out_report *r, const out_row *row)
{
    double best = 0;
    for (int j = 0; j < providers_of(row); j++) {
        double v[3];
        row_rate(row, j, v);
        if (row->m[j].reps && v[0] > best) best = v[0];
    }
    r->unit = tool_rate_unit(row->flops > 0, best, &r->scale);
}

static void table_header(const out_report *r, const out_row *row)
{
    int n;
    const op_provider *prov = op_providers(row->op, &n);
    printf("\n%s %s", row->op->name, clkit_dtype_name(row->dtype));
    if (row->out_dtype != row->dtype) printf(" (output %s)", clkit_dtype_name(row->out_dtype));
    printf(" on %s: %s median, 20 %% and 80 %% quantiles", r->dev.name, r->unit);
    if (n > 1) printf(" per provider; median ms and reps of %s", prov[0].name);
    printf("; first call (ms): cold = compile, warm = binary cache hit");
    if (row->op->show_scratch)
        printf("; scratch: the most device memory clkit held for intermediates in a call");
    putchar('\n');
    printf("%*s", shape_width(row), "shape");
    for (int j = 0; j < n; j++)
        printf(" %10s %8s %8s", n > 1 ? prov[j].name : r->unit, "p20", "p80");
    printf(" %11s %10s %10s %5s", "median ms", "cold ms", "warm ms", "reps");
    if (row->op->show_scratch) printf(" %11s", "scratch MiB");
    putchar('\n');
}

/* A value with `digits` decimals, or "-" where it was not measured. */
static void table_value(int width, int digits, double v)
{
    if (isnan(v))
        printf(" %*s", width, "-");
    else
        printf(" %*.*f", width, digits, v);
}

/* A rate in the table's unit, with about four significant digits. */
static void table_rate(int width, double v)
{
    table_value(width, tool_decimals(v), v);
}

static void table_row(const out_report *r, const out_row *row)
{
    int n = providers_of(row);
    printf("%*s", shape_width(row), row->shape);
    for (int j = 0; j < n; j++) {
        double rate[3];
        row_rate(row, j, rate);
        table_rate(10, rate[0] * r->scale);
        table_rate(8, rate[1] * r->scale);
        table_rate(8, rate[2] * r->scale);
    }
    double v[V_COUNT];
    row_values(row, 0, v);
    table_value(11, 4, v[V_MS]);
    table_value(10, 1, v[V_COLD]);
    table_value(10, 1, v[V_WARM]);
    printf(" %5d", row->m[0].reps);
    if (row->op->show_scratch) table_value(11, 1, v[V_SCRATCH]);
    putchar('\n');
}

/* ---- CSV ---- */

static void csv_quoted(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void csv_header(void)
{
    printf("op,dtype,shape,n_bytes");
    for (int i = 0; i < V_FIRST_NEW; i++) printf(",%s", value_names[i]);
    printf(",device,provider,n_flops");
    for (int i = V_FIRST_NEW; i < V_COUNT; i++) printf(",%s", value_names[i]);
    putchar('\n');
}

/* Values not measured or not meaningful stay empty. */
static void csv_values(const double *v, int from, int to)
{
    for (int i = from; i < to; i++) {
        if (isnan(v[i]))
            putchar(',');
        else
            printf(",%.6g", v[i]);
    }
}

/* One line per measured provider of the row. */
static void csv_row(const out_row *row, const struct clkit_device_props *dev)
{
    int n;
    const op_provider *prov = op_providers(row->op, &n);
    for (int j = 0; j < n; j++) {
        if (!row->m[j].reps) continue;
        double v[V_COUNT];
        row_values(row, j, v);
        printf("%s,%s,%s,%llu", row->op->name, clkit_dtype_name(row->dtype), row->shape,
               (unsigned long long)row->bytes);
        csv_values(v, 0, V_FIRST_NEW);
        putchar(',');
        csv_quoted(dev->name);
        printf(",%s,", prov[j].name);
        if (row->flops > 0) printf("%.17g", row->flops);
        csv_values(v, V_FIRST_NEW, V_COUNT);
        putchar('\n');
    }
}

/* ---- JSON ---- */

/* Six digits, as in the CSV; null where not measured. */
static json_object *json_number(double v)
{
    char text[32];
    if (isnan(v)) return NULL;
    snprintf(text, sizeof text, "%.6g", v);
    return json_object_new_double_s(v, text);
}

static json_object *json_row(const out_row *row, int j)
{
    int n;
    const op_provider *prov = op_providers(row->op, &n);
    double v[V_COUNT];
    row_values(row, j, v);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(row->op->name));
    json_object_object_add(o, "dtype", json_object_new_string(clkit_dtype_name(row->dtype)));
    json_object_object_add(o, "out_dtype",
                           json_object_new_string(clkit_dtype_name(row->out_dtype)));
    json_object_object_add(o, "shape", json_object_new_string(row->shape));
    json_object_object_add(o, "provider", json_object_new_string(prov[j].name));
    json_object_object_add(o, "n_bytes", json_object_new_int64((int64_t)row->bytes));
    json_object_object_add(o, "n_flops",
                           row->flops > 0 ? json_object_new_int64((int64_t)row->flops) : NULL);
    for (int i = 0; i < V_COUNT; i++) json_object_object_add(o, value_names[i], json_number(v[i]));
    json_object_object_add(o, "reps", json_object_new_int(row->m[j].reps));
    return o;
}

static clkit_status json_print(const out_report *r)
{
    json_object *doc = json_object_new_object(), *rows = json_object_new_array();
    if (!doc || !rows) {
        json_object_put(doc);
        json_object_put(rows);
        return CLKIT_ERR_OUT_OF_MEMORY;
    }
    json_object_object_add(doc, "clkit_version", json_object_new_string(CLKIT_VERSION_STRING));
    json_object_object_add(doc, "device", tool_props_json(&r->dev));
    for (size_t i = 0; i < r->count; i++)
        for (int j = 0; j < providers_of(&r->rows[i]); j++)
            if (r->rows[i].m[j].reps) json_object_array_add(rows, json_row(&r->rows[i], j));
    json_object_object_add(doc, "rows", rows);
    const char *text = json_object_to_json_string_ext(
        doc, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    clkit_status s = text ? CLKIT_OK : CLKIT_ERR_OUT_OF_MEMORY;
    if (text) printf("%s\n", text);
    json_object_put(doc);
    return s;
}

/* ---- the report ---- */

void out_begin(out_report *r, out_format format, const struct clkit_device_props *dev)
{
    memset(r, 0, sizeof *r);
    r->format = format;
    r->dev = *dev;
    if (format == OUT_CSV) csv_header();
}

clkit_status out_add(out_report *r, const out_row *row)
{
    if (r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        out_row *rows = realloc(r->rows, cap * sizeof *rows);
        if (!rows) return CLKIT_ERR_OUT_OF_MEMORY;
        r->rows = rows;
        r->cap = cap;
    }
    const out_row *prev = r->count ? &r->rows[r->count - 1] : NULL;
    r->rows[r->count++] = *row;
    if (r->format == OUT_TABLE) {
        if (!prev || prev->op != row->op || prev->dtype != row->dtype) {
            table_unit(r, row);
            table_header(r, row);
        }
        table_row(r, row);
    } else if (r->format == OUT_CSV) {
        csv_row(row, &r->dev);
    }
    fflush(stdout);
    return CLKIT_OK;
}

clkit_status out_end(const out_report *r)
{
    return r->format == OUT_JSON ? json_print(r) : CLKIT_OK;
}

void out_free(out_report *r)
{
    free(r->rows);
    r->rows = NULL;
    r->count = r->cap = 0;
}

/* ---- plot ---- */

/* A point of the plot: a provider's rate (median, p20, p80 of GB/s or TFLOP/s) on one op, dtype
   and layout at x. */
typedef struct plot_point {
    const op_def *op;
    clkit_dtype dtype;
    int transposed;
    char provider[32];
    double x, rate[3];
} plot_point;

/* The points of one plot, and what its title names. */
typedef struct plot_data {
    plot_point *p;
    size_t count, cap;
    char title[300];
} plot_data;

static int plot_add(plot_data *d, const plot_point *pt)
{
    if (d->count == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 256;
        plot_point *p = realloc(d->p, cap * sizeof *p);
        if (!p) return -1;
        d->p = p;
        d->cap = cap;
    }
    d->p[d->count++] = *pt;
    return 0;
}

/* One line of a panel: the points of one op, dtype, layout and provider. */
typedef struct series {
    const plot_point *key;  /* its first point */
} series;

static int same_series(const plot_point *a, const plot_point *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->transposed == b->transposed &&
           strcmp(a->provider, b->provider) == 0;
}

#define MAX_SERIES 64

/* The distinct series in order of first appearance; returns their number. */
static int find_series(const plot_data *d, series *out)
{
    int n = 0, dropped = 0;
    for (size_t i = 0; i < d->count; i++) {
        int k = 0;
        while (k < n && !same_series(out[k].key, &d->p[i])) k++;
        if (k < n) continue;
        if (n < MAX_SERIES)
            out[n++].key = &d->p[i];
        else
            dropped = 1;
    }
    if (dropped)
        fprintf(stderr, "clkit bench: more than %d lines to plot; the later ones are left out\n",
                MAX_SERIES);
    return n;
}

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        char full[4096];
        snprintf(full, sizeof full, "%.*s/%s", n ? (int)n : 1, n ? p : ".", prog);
        if (access(full, X_OK) == 0) return 1;
        p += p[n] ? n + 1 : n;
    }
    return 0;
}

/* A gnuplot single-quoted string: nothing is special in it but the quote, written twice. */
static void gp_string(FILE *g, const char *s)
{
    fputc('\'', g);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', g);
        fputc(*s, g);
    }
    fputc('\'', g);
}

/* Datablock $s<k>: x, rate median, p20, p80 of series k, in the panel's unit. */
static void plot_block(FILE *g, const plot_data *d, const series *s, int k, double scale)
{
    fprintf(g, "$s%d << EOD\n", k);
    for (size_t i = 0; i < d->count; i++) {
        const plot_point *pt = &d->p[i];
        if (!same_series(s->key, pt)) continue;
        fprintf(g, "%.17g %g %g %g\n", pt->x, pt->rate[0] * scale, pt->rate[1] * scale,
                pt->rate[2] * scale);
    }
    fprintf(g, "EOD\n");
}

/* The x range of op's panel: automatic, but around a lone size when there is only one. */
static void plot_xrange(FILE *g, const plot_data *d, const op_def *op)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < d->count; i++) {
        if (d->p[i].op != op) continue;
        lo = fmin(lo, d->p[i].x);
        hi = fmax(hi, d->p[i].x);
    }
    if (lo < hi || !isfinite(lo))
        fprintf(g, "set autoscale x\n");
    else
        fprintf(g, "set xrange [%.17g:%.17g]\n", lo / 2, hi * 2);
}

/* The panel of op: a line per series of it, error bars from the quantiles, the provider named
   where the panel has more than one; its unit by its best median. */
static void plot_panel(FILE *g, const plot_data *d, const series *s, int n, const op_def *op)
{
    double best = 0, scale;
    int providers = 0, first = -1;
    for (size_t i = 0; i < d->count; i++)
        if (d->p[i].op == op) best = fmax(best, d->p[i].rate[0]);
    for (int k = 0; k < n; k++) {
        if (s[k].key->op != op) continue;
        if (first < 0) first = k;
        providers += strcmp(s[k].key->provider, s[first].key->provider) != 0;
    }
    const char *unit = tool_rate_unit(op->flops != NULL, best, &scale);
    for (int k = 0; k < n; k++)
        if (s[k].key->op == op) plot_block(g, d, &s[k], k, scale);
    fprintf(g, "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n", op->name, op->x_label, unit);
    /* Sizes in powers of two span five decades; softmax's N sweep is linear. */
    fprintf(g, op->x_is_cols ? "unset logscale x\nset format x '%%g'\n"
                             : "set logscale x 2\nset format x '2^%%L'\n");
    plot_xrange(g, d, op);
    const char *sep = "plot ";
    for (int k = 0; k < n; k++) {
        const plot_point *key = s[k].key;
        if (key->op != op) continue;
        char title[96];
        snprintf(title, sizeof title, "%s%s%s%s", clkit_dtype_name(key->dtype),
                 key->transposed ? " transposed" : "", providers ? " " : "",
                 providers ? key->provider : "");
        fprintf(g, "%s$s%d using 1:2:3:4 with yerrorlines title ", sep, k);
        gp_string(g, title);
        sep = ", ";
    }
    fprintf(g, "\n");
}

static void plot_script(FILE *g, const plot_data *d, const series *s, int n, const char *png)
{
    int panels = 0;
    for (int k = 0; k < n; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= s[j].key->op == s[k].key->op;
        panels += !seen;
    }
    int cols = panels < 3 ? panels : 3, rows = (panels + cols - 1) / cols;
    /* Wide enough for the title above a single panel. */
    int width = cols > 1 ? 560 * cols : 800, height = 440 * rows;
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "  set terminal pngcairo size %d,%d noenhanced\n"
               "} else {\n"
               "  set terminal png size %d,%d noenhanced\n"
               "}\nset output ",
            width, height, width, height);
    gp_string(g, png);
    /* Offsets keep the end points and their error bars off the frame. */
    fprintf(g, "\nset grid\nset key below\nset yrange [0:*]\n"
               "set offsets graph 0.05, graph 0.05, graph 0.05, 0\n"
               "set multiplot layout %d,%d title ",
            rows, cols);
    gp_string(g, d->title);
    fprintf(g, "\n");
    /* A panel per op, in the order the ops first appear. */
    for (int k = 0; k < n; k++) {
        int seen = 0;
        for (int j = 0; j < k; j++) seen |= s[j].key->op == s[k].key->op;
        if (!seen) plot_panel(g, d, s, n, s[k].key->op);
    }
    fprintf(g, "unset multiplot\nset output\n");
}

static int plot_points(const plot_data *d, const char *png)
{
    if (!on_path("gnuplot")) {
        fprintf(stderr, "clkit bench: --plot needs gnuplot, which is not on PATH "
                        "(Debian/Ubuntu: apt-get install gnuplot-nox); no plot written\n");
        return TOOL_EXIT_NO_PLOT;
    }
    if (d->count == 0) {
        fprintf(stderr, "clkit bench: no row measured has a place on the plot; no plot "
                        "written\n");
        return TOOL_EXIT_NO_PLOT;
    }
    series s[MAX_SERIES];
    int n = find_series(d, s);
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        perror("clkit bench: starting gnuplot");
        return TOOL_EXIT_NO_PLOT;
    }
    plot_script(g, d, s, n, png);
    int status = pclose(g);
    if (status != 0) {
        fprintf(stderr, "clkit bench: gnuplot failed (exit status %d); %s may be missing or "
                        "incomplete\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1, png);
        return TOOL_EXIT_NO_PLOT;
    }
    return TOOL_EXIT_OK;
}

int out_plot(const out_report *r, const char *png)
{
    if (r->count == 0) {
        fprintf(stderr, "clkit bench: no rows were measured; no plot written\n");
        return TOOL_EXIT_NO_PLOT;
    }
    plot_data d = {0};
    snprintf(d.title, sizeof d.title, "clkit bench on %s (%s)", r->dev.name, r->dev.platform);
    for (size_t i = 0; i < r->count; i++) {
        const out_row *row = &r->rows[i];
        int n;
        const op_provider *prov = op_providers(row->op, &n);
        for (int j = 0; j < n; j++) {
            plot_point pt = {row->op, row->dtype, row->transposed, "", row->x, {0}};
            if (!row->m[j].reps || isnan(row->x)) continue;
            snprintf(pt.provider, sizeof pt.provider, "%s", prov[j].name);
            row_rate(row, j, pt.rate);
            if (plot_add(&d, &pt)) {
                free(d.p);
                fprintf(stderr, "clkit bench: out of memory for the plot; no plot written\n");
                return TOOL_EXIT_NO_PLOT;
            }
        }
    }
    int rc = plot_points(&d, png);
    free(d.p);
    return rc;
}

/* ---- plot of a CSV file ---- */

#define CSV_MAX_FIELDS 96

/* Splits line (RFC 4180: quoted fields, "" for a quote; no line breaks inside a field) into
   at most CSV_MAX_FIELDS fields, in place; returns their number. */
static int csv_split(char *line, char **field)
{
    int n = 0;
    char *at = line;
    line[strcspn(line, "\r\n")] = 0;
    for (;;) {
        char *out = at;
        if (n == CSV_MAX_FIELDS) return n;
        field[n++] = out;
        if (*at == '"') {
            for (at++; *at && !(at[0] == '"' && at[1] != '"');) {
                if (*at == '"') at++;
                *out++ = *at++;
            }
            if (*at == '"') at++;
            at += strcspn(at, ",");
        } else {
            size_t len = strcspn(at, ",");
            memmove(out, at, len);
            out += len;
            at += len;
        }
        int more = *at == ',';
        *out = 0;
        if (!more) return n;
        at++;
    }
}

static int csv_column(char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

/* The rate columns of a CSV: one provider's median, p20 and p80 columns of GB/s or TFLOP/s. */
typedef struct csv_rate {
    char provider[32];
    int flops;
    int col[3];
} csv_rate;

/* Where a CSV keeps its rates: by a provider column (clkit bench --csv: gbps_median ... and
   tflops_median ... on a line per provider), or by columns per provider (torch_peer.py:
   clkit_gbps, torch_gbps_p20, ...). */
typedef struct csv_layout {
    int op, dtype, shape, device, provider;  /* column numbers; -1: none */
    csv_rate gbps, tflops;                   /* the provider column's */
    csv_rate rates[CSV_MAX_FIELDS];          /* per provider */
    int nrates;
} csv_layout;

static void csv_rate_of(char *const *names, int n, const char *prefix, const char *provider,
                        int flops, csv_rate *r)
{
    static const char *const quantiles[] = {"", "_p20", "_p80"};
    snprintf(r->provider, sizeof r->provider, "%s", provider);
    r->flops = flops;
    for (int q = 0; q < 3; q++) {
        char name[96];
        snprintf(name, sizeof name, "%s%s", prefix, quantiles[q]);
        r->col[q] = csv_column(names, n, name);
    }
}

static void csv_layout_of(char *const *names, int n, csv_layout *l)
{
    memset(l, 0, sizeof *l);
    l->op = csv_column(names, n, "op");
    l->dtype = csv_column(names, n, "dtype");
    l->shape = csv_column(names, n, "shape");
    l->device = csv_column(names, n, "device");
    l->provider = csv_column(names, n, "provider");
    csv_rate_of(names, n, "gbps_median", "", 0, &l->gbps);
    csv_rate_of(names, n, "tflops_median", "", 1, &l->tflops);
    for (int i = 0; i < n && l->provider < 0; i++) {
        static const char *const units[] = {"_gbps", "_tflops"};
        for (int u = 0; u < 2; u++) {
            size_t len = strlen(names[i]), ulen = strlen(units[u]);
            if (len <= ulen || len - ulen >= sizeof l->rates[0].provider ||
                strcmp(names[i] + len - ulen, units[u]) != 0)
                continue;
            char provider[32];
            snprintf(provider, sizeof provider, "%.*s", (int)(len - ulen), names[i]);
            csv_rate_of(names, n, names[i], provider, u, &l->rates[l->nrates++]);
        }
    }
}

/* The rate of r in the record, into pt; 0 when its median is there. */
static int csv_rate_value(char *const *f, int n, const csv_rate *r, plot_point *pt)
{
    for (int q = 0; q < 3; q++) {
        const char *text = r->col[q] >= 0 && r->col[q] < n ? f[r->col[q]] : "";
        if (tool_parse_real(text, 0, INFINITY, &pt->rate[q])) pt->rate[q] = NAN;
    }
    return isnan(pt->rate[0]) ? -1 : 0;
}

/* The plot's points of one record: a point per provider with a rate. *skipped counts records
   of ops this clkit does not know or shapes it cannot read. */
static int csv_record(char *const *f, int n, const csv_layout *l, const char *only,
                      plot_data *d, int *skipped)
{
    if (l->op >= n || l->dtype >= n || l->shape >= n) return 0;
    const op_def *op = op_find(f[l->op]);
    int dtype = tool_dtype_parse(f[l->dtype]);
    op_shape shape;
    if (!op || dtype < 0 || op_shape_parse(op, f[l->shape], &shape)) {
        ++*skipped;
        return 0;
    }
    if (only && !op_selected(op, only)) return 0;
    op_problem p = op_problem_make(op, (clkit_dtype)dtype, shape);
    plot_point pt = {op, p.dtype, shape.transposed, "", op_plot_x(&p), {0}};
    if (isnan(pt.x)) return 0;
    if (l->device >= 0 && l->device < n && !d->title[0])
        snprintf(d->title, sizeof d->title, "clkit bench on %s", f[l->device]);
    if (l->provider >= 0) {
        if (l->provider >= n ||
            csv_rate_value(f, n, op->flops ? &l->tflops : &l->gbps, &pt))
            return 0;
        snprintf(pt.provider, sizeof pt.provider, "%s", f[l->provider]);
        return plot_add(d, &pt);
    }
    for (int i = 0; i < l->nrates; i++) {
        if (l->rates[i].flops != (op->flops != NULL) || csv_rate_value(f, n, &l->rates[i], &pt))
            continue;
        snprintf(pt.provider, sizeof pt.provider, "%s", l->rates[i].provider);
        if (plot_add(d, &pt)) return -1;
    }
    return 0;
}

int out_plot_csv(const char *csv, const char *op, const char *png)
{
    FILE *f = fopen(csv, "r");
    if (!f) {
        fprintf(stderr, "clkit bench: cannot read %s: %s\n", csv, strerror(errno));
        return TOOL_EXIT_FAIL;
    }
    char *line = NULL, *names[CSV_MAX_FIELDS], *fields[CSV_MAX_FIELDS], *header = NULL;
    size_t cap = 0;
    int skipped = 0, rc = 0;
    csv_layout *l = malloc(sizeof *l);
    plot_data d = {0};
    if (l && getline(&line, &cap, f) > 0 && (header = strdup(line))) {
        csv_layout_of(names, csv_split(header, names), l);
        if (l->op < 0 || l->dtype < 0 || l->shape < 0) {
            fprintf(stderr, "clkit bench: %s is not a CSV of clkit bench or torch_peer.py: no "
                            "op, dtype and shape columns\n", csv);
            rc = TOOL_EXIT_FAIL;
        }
        while (!rc && getline(&line, &cap, f) > 0)
            rc = csv_record(fields, csv_split(line, fields), l, op, &d, &skipped);
    }
    if (!l || rc < 0) fprintf(stderr, "clkit bench: out of memory reading %s\n", csv);
    if (skipped)
        fprintf(stderr, "clkit bench: %d row%s of %s left out: an op, dtype or shape this clkit "
                        "does not know\n", skipped, skipped == 1 ? "" : "s", csv);
    if (!d.title[0]) snprintf(d.title, sizeof d.title, "clkit bench: %s", csv);
    if (l && !rc) rc = plot_points(&d, png);
    fclose(f);
    free(line);
    free(header);
    free(l);
    free(d.p);
    return rc < 0 || !l ? TOOL_EXIT_FAIL : rc;
}
