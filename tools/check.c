/* clkit check: every op, dtype and check shape against the CPU references of tests/ref. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"
#include "tool.h"

typedef struct check_run {
    int passed, failed;
    int op_width;  /* of the op column: the longest name checked */
} check_run;

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
               "its tolerance follows the f32 accumulation error over K terms. layernorm\n"
               "checks y and layernorm_backward dx (given mean and rstd from a forward on the\n"
               "device), both M x N with weight and bias; linear_cross_entropy shapes are\n"
               "T x D x V and it checks the mean loss. attention shapes are B x H x L x D,\n"
               "causal where marked; attention checks o and attention_backward dq, given q,\n"
               "k, v, o and dout (o random like the others, as the reference reads the o it\n"
               "is given) and the lse of a forward on the device. Their other outputs (mean,\n"
               "rstd, dweight, dbias; dx, dweight; lse, dk, dv) are checked by\n"
               "tests/test_layernorm.c, tests/test_cross_entropy.c and\n"
               "tests/test_attention.c.\n"
               "\n"
               "  --op NAME    only this op, or layernorm or attention for both of its ops:\n"
               "              ");
    tool_print_ops(f, 14, 0);
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
    while ((c = getopt_long(argc, argv, ":hd:", longs, NULL)) != -1) {
        switch (c) {
        case 'o': *op = optarg; break;
        case 'd': *device = optarg; break;
        case 'h': usage(stdout); return TOOL_EXIT_OK;
        default: return tool_option_error("check", c, argv);
        }
    }
    if (optind < argc) return tool_usage_error("check", "unexpected argument '%s'", argv[optind]);
    int known = 0;
    for (int i = 0; *op && i < op_count; i++) known |= op_selected(&op_table[i], *op);
    if (*op && !known) return tool_usage_error("check", "no op '%s' to check", *op);
    return -1;
}

/* The first columns of a row: op, dtype ("f16>f32" where the output's differs), shape. */
static void print_problem(const check_run *n, const op_problem *p, const char *shape)
{
    char dtype[24];
    op_dtype_text(p, dtype, sizeof dtype);
    printf("%-*s %-9s %-18s", n->op_width, p->op->name, dtype, shape);
}

/* The reason of a failed run on its first line; a build log's other lines go to stderr. */
static void print_failure(const check_run *n, const op_problem *p, const char *shape,
                          clkit_status s)
{
    const char *detail = tool_detail(s, op_error());
    int line = (int)strcspn(detail, "\n");
    const char *verdict = s == CLKIT_ERR_UNSUPPORTED ? "UNSUPPORTED" : "ERROR";
    print_problem(n, p, shape);
    printf(" %10s  %s: %.*s\n", "-", verdict, line, detail);
    if (detail[line])
        fprintf(stderr, "clkit check: %s %s %s: %s\n", p->op->name, clkit_dtype_name(p->dtype),
                shape, detail);
}

static void check_one(clkit_context *ctx, op_problem *p, check_run *n)
{
    char shape[48];
    op_shape_text(p, shape, sizeof shape);
    double err = 0;
    int pass = 0;
    clkit_status s = op_verify(ctx, p, &err, &pass);
    if (s) {
        print_failure(n, p, shape, s);
    } else {
        print_problem(n, p, shape);
        printf(" %10.3g  %s\n", err, pass ? "PASS" : "FAIL");
    }
    fflush(stdout);
    if (!s && pass)
        n->passed++;
    else
        n->failed++;
}

static void check_op(clkit_context *ctx, const op_def *op, check_run *n)
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
    /* 10 columns, as for the short names alone, or as wide as a longer name checked. */
    check_run n = {0, 0, 10};
    for (int i = 0; i < op_count; i++) {
        int width = (int)strlen(op_table[i].name);
        if ((!only || op_selected(&op_table[i], only)) && width > n.op_width) n.op_width = width;
    }
    printf("%-*s %-9s %-18s %10s  %s\n", n.op_width, "op", "dtype", "shape", "max error",
           "result");
    for (int i = 0; i < op_count; i++)
        if (!only || op_selected(&op_table[i], only)) check_op(ctx, &op_table[i], &n);
    clkit_context_release(ctx);
    printf("%d passed, %d did not\n", n.passed, n.failed);
    return n.failed ? TOOL_EXIT_FAIL : TOOL_EXIT_OK;
}
