/* Bench output: human tables, CSV, JSON (json-c) and plots (gnuplot). */
#include "output.h"

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

static const char *rate_unit(const out_row *row)
{
    return row->flops > 0 ? "TFLOP/s" : "GB/s";
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

static void table_header(const out_row *row, const struct clkit_device_props *dev)
{
    int n;
    const op_provider *prov = op_providers(row->op, &n);
    printf("\n%s %s", row->op->name, clkit_dtype_name(row->dtype));
    if (row->out_dtype != row->dtype) printf(" (output %s)", clkit_dtype_name(row->out_dtype));
    printf(" on %s: %s median, 20 %% and 80 %% quantiles", dev->name, rate_unit(row));
    if (n > 1) printf(" per provider; median ms and reps of %s", prov[0].name);
    printf("; first call (ms): cold = compile, warm = binary cache hit");
    if (row->op->show_scratch)
        printf("; scratch: the most device memory clkit held for intermediates in a call");
    putchar('\n');
    printf("%*s", shape_width(row), "shape");
    for (int j = 0; j < n; j++)
        printf(" %10s %8s %8s", n > 1 ? prov[j].name : rate_unit(row), "p20", "p80");
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

static void table_row(const out_row *row)
{
    int n = providers_of(row), digits = row->flops > 0 ? 3 : 1;
    printf("%*s", shape_width(row), row->shape);
    for (int j = 0; j < n; j++) {
        double r[3];
        row_rate(row, j, r);
        table_value(10, digits, r[0]);
        table_value(8, digits, r[1]);
        table_value(8, digits, r[2]);
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

static json_object *json_device(const struct clkit_device_props *dev)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < tool_prop_count; i++) {
        const prop_field *f = &tool_props[i];
        const char *text = tool_prop_text(dev, f);
        json_object_object_add(o, f->name, text ? json_object_new_string(text)
                                                : json_object_new_int64(tool_prop_int(dev, f)));
    }
    return o;
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
    json_object_object_add(doc, "device", json_device(&r->dev));
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
        if (!prev || prev->op != row->op || prev->dtype != row->dtype) table_header(row, &r->dev);
        table_row(row);
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

/* One line of a panel: the rows of one op with one dtype and layout, by one provider. */
typedef struct series {
    const op_def *op;
    clkit_dtype dtype;
    int transposed;
    int provider;
} series;

static int same_series(const series *s, const out_row *row)
{
    return s->op == row->op && s->dtype == row->dtype && s->transposed == row->transposed;
}

/* The distinct series in row order; returns their number. */
static int find_series(const out_report *r, series *out, int max)
{
    int n = 0;
    for (size_t i = 0; i < r->count; i++) {
        const out_row *row = &r->rows[i];
        for (int j = 0; j < providers_of(row); j++) {
            int k = 0;
            while (k < n && !(same_series(&out[k], row) && out[k].provider == j)) k++;
            if (k == n && n < max && row->m[j].reps && !isnan(row->x))
                out[n++] = (series){row->op, row->dtype, row->transposed, j};
        }
    }
    return n;
}

/* Datablock $s<k>: x, rate median, p20, p80 of series k. */
static void plot_data(FILE *g, const out_report *r, const series *s, int k)
{
    fprintf(g, "$s%d << EOD\n", k);
    for (size_t i = 0; i < r->count; i++) {
        const out_row *row = &r->rows[i];
        if (!same_series(s, row) || !row->m[s->provider].reps || isnan(row->x)) continue;
        double v[3];
        row_rate(row, s->provider, v);
        fprintf(g, "%.17g %g %g %g\n", row->x, v[0], v[1], v[2]);
    }
    fprintf(g, "EOD\n");
}

/* The x range of op's panel: automatic, but around a lone size when there is only one. */
static void plot_xrange(FILE *g, const out_report *r, const op_def *op)
{
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < r->count; i++) {
        if (r->rows[i].op != op || isnan(r->rows[i].x)) continue;
        lo = fmin(lo, r->rows[i].x);
        hi = fmax(hi, r->rows[i].x);
    }
    if (lo < hi || !isfinite(lo))
        fprintf(g, "set autoscale x\n");
    else
        fprintf(g, "set xrange [%.17g:%.17g]\n", lo / 2, hi * 2);
}

/* The panel of op: every series of it, error bars from the quantiles. */
static void plot_panel(FILE *g, const out_report *r, const series *s, int n, const op_def *op)
{
    const out_row *first = NULL;
    for (size_t i = 0; i < r->count && !first; i++)
        if (r->rows[i].op == op) first = &r->rows[i];
    int nprov;
    const op_provider *prov = op_providers(op, &nprov);
    fprintf(g, "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n", op->name, op->x_label,
            rate_unit(first));
    /* Sizes in powers of two span five decades; softmax's N sweep is linear. */
    fprintf(g, op->x_is_cols ? "unset logscale x\nset format x '%%g'\n"
                             : "set logscale x 2\nset format x '2^%%L'\n");
    plot_xrange(g, r, op);
    const char *sep = "plot ";
    for (int k = 0; k < n; k++) {
        if (s[k].op != op) continue;
        fprintf(g, "%s$s%d using 1:2:3:4 with yerrorlines title '%s%s%s%s'", sep, k,
                clkit_dtype_name(s[k].dtype), s[k].transposed ? " transposed" : "",
                nprov > 1 ? " " : "", nprov > 1 ? prov[s[k].provider].name : "");
        sep = ", ";
    }
    fprintf(g, "\n");
}

static void plot_script(FILE *g, const out_report *r, const char *png)
{
    series s[64];
    int n = find_series(r, s, 64), panels = 0;
    for (int k = 0; k < n; k++) panels += k == 0 || s[k].op != s[k - 1].op;
    int cols = panels < 3 ? panels : 3, rows = (panels + cols - 1) / cols;
    /* Wide enough for the title above a single panel. */
    int width = cols > 1 ? 560 * cols : 800, height = 440 * rows;
    for (int k = 0; k < n; k++) plot_data(g, r, &s[k], k);
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
    char title[300];
    snprintf(title, sizeof title, "clkit bench on %s (%s)", r->dev.name, r->dev.platform);
    gp_string(g, title);
    fprintf(g, "\n");
    for (int k = 0; k < n; k++)
        if (k == 0 || s[k].op != s[k - 1].op) plot_panel(g, r, s, n, s[k].op);
    fprintf(g, "unset multiplot\nset output\n");
}

int out_plot(const out_report *r, const char *png)
{
    if (!on_path("gnuplot")) {
        fprintf(stderr, "clkit bench: --plot needs gnuplot, which is not on PATH "
                        "(Debian/Ubuntu: apt-get install gnuplot-nox); no plot written\n");
        return TOOL_EXIT_NO_PLOT;
    }
    if (r->count == 0) {
        fprintf(stderr, "clkit bench: no rows were measured; no plot written\n");
        return TOOL_EXIT_NO_PLOT;
    }
    series s[1];
    if (find_series(r, s, 1) == 0) {
        fprintf(stderr, "clkit bench: no row measured has a place on the plot; no plot "
                        "written\n");
        return TOOL_EXIT_NO_PLOT;
    }
    FILE *g = popen("gnuplot", "w");
    if (!g) {
        perror("clkit bench: starting gnuplot");
        return TOOL_EXIT_NO_PLOT;
    }
    plot_script(g, r, png);
    int status = pclose(g);
    if (status != 0) {
        fprintf(stderr, "clkit bench: gnuplot failed (exit status %d); %s may be missing or "
                        "incomplete\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1, png);
        return TOOL_EXIT_NO_PLOT;
    }
    return TOOL_EXIT_OK;
}
