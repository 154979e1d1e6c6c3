/* clkit check: every op, dtype and check shape against the CPU references of tests/ref. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "tool.h"

typedef struct check_counts {
    int passed, failed;
} check_counts;

static void usage(FILE *f)
{
    fprintf(f, "usage: clkit check [--op NAME] [--device D]\n"
               "\n"
               "Runs every op on the chosen device for each dtype it takes, on a few shapes,\n"
               "and compares with a double-precision CPU reference. Prints one row per run:\n"
               "op, dtype (\"f16>f32\": inputs, then output), shape, largest absolute error\n"
               "and PASS, FAIL, UNSUPPORTED or ERROR with the reason. matmul shapes are\n"
               "M x N x K [x batch], then the layout where not nn (tn: A stored transposed),\n"
               "bshared where B is broadcast over the batch, acc.relu for alpha, beta and relu;\n"
               "its tolerance follows the f32 accumulation error over K terms.\n"
               "\n"
               "  --op NAME    only this op:");
    for (int i = 0; i < op_count; i++) fprintf(f, " %s", op_table[i].name);
    fprintf(f, "\n"
               "  --device D   an index or a name substring, as $CLKIT_DEVICE\n"
               "\n"
               "Exit status: 0 all passed, 1 a run did not pass (unsupported counts),\n"
               "2 bad usage.\n");
}

/* -1 when the options are good, else the exit status. */
static int parse(int argc, char **argv, const char **device, const char **op)
{
    static const struct option longs[] = {
        {"op", required_argument, NULL, 'o'},
        {"device", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'o': *op = optarg; break;
        case 'd': *device = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: usage(stderr); return TOOL_EXIT_USAGE;
        }
    }
    if (optind < argc || (*op && !op_find(*op))) {
        if (*op && !op_find(*op)) fprintf(stderr, "clkit check: no op '%s'\n", *op);
        usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    return -1;
}

/* The first columns of a row: op, dtype ("f16>f32" where the output's differs), shape. */
static void print_problem(const op_problem *p, const char *shape)
{
    char dtype[24];
    op_dtype_text(p, dtype, sizeof dtype);
    printf("%-10s %-9s %-18s", p->op->name, dtype, shape);
}

/* The reason of a failed run on its first line; a build log's other lines go to stderr. */
static void print_failure(const op_problem *p, const char *shape, clkit_status s)
{
    const char *detail = tool_detail(s, op_error());
    int line = (int)strcspn(detail, "\n");
    const char *verdict = s == CLKIT_ERR_UNSUPPORTED ? "UNSUPPORTED" : "ERROR";
    print_problem(p, shape);
    printf(" %10s  %s: %.*s\n", "-", verdict, line, detail);
    if (detail[line])
        fprintf(stderr, "clkit check: %s %s %s: %s\n", p->op->name, clkit_dtype_name(p->dtype),
                shape, detail);
}

static void check_one(clkit_context *ctx, op_problem *p, check_counts *n)
{
    char shape[48];
    op_shape_text(p, shape, sizeof shape);
    double err = 0;
    int pass = 0;
    clkit_status s = op_verify(ctx, p, &err, &pass);
    if (s) {
        print_failure(p, shape, s);
    } else {
        print_problem(p, shape);
        printf(" %10.3g  %s\n", err, pass ? "PASS" : "FAIL");
    }
    fflush(stdout);
    if (!s && pass)
        n->passed++;
    else
        n->failed++;
}

static void check_op(clkit_context *ctx, const op_def *op, check_counts *n)
{
    for (int t = CLKIT_F32; t <= CLKIT_I64; t++) {
        if (!(op->dtypes & OP_DT(t))) continue;
        for (const op_shape *s = op->checks; s->cols; s++) {
            if (s->dtypes && !(s->dtypes & OP_DT(t))) continue;
            op_problem p = op_problem_make(op, (clkit_dtype)t, *s);
            check_one(ctx, &p, n);
        }
    }
}

int cmd_check(int argc, char **argv)
{
    const char *device = NULL, *only = NULL;
    int rc = parse(argc, argv, &device, &only);
    if (rc >= 0) return rc;
    clkit_context *ctx;
    clkit_status s = tool_open(&ctx, device, NULL, 0);
    if (s) {
        tool_error("cannot open the device", s, "`clkit info` diagnoses");
        return TOOL_EXIT_FAIL;
    }
    struct clkit_device_props dev;
    clkit_device_props(ctx, &dev);
    printf("checking on %s (%s, driver %s)\n", dev.name, dev.platform, dev.driver);
    printf("%-10s %-9s %-18s %10s  %s\n", "op", "dtype", "shape", "max error", "result");
    check_counts n = {0, 0};
    for (int i = 0; i < op_count; i++)
        if (!only || strcmp(only, op_table[i].name) == 0) check_op(ctx, &op_table[i], &n);
    clkit_context_release(ctx);
    printf("%d passed, %d did not\n", n.passed, n.failed);
    return n.failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
