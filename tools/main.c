/* clkit: the command line of the library. One subcommand per job; each takes --help. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "tool.h"

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"info", cmd_info, "devices, properties, launch heuristics, binary cache, set-up diagnosis"},
    {"check", cmd_check, "every op against the CPU reference on the device; pass/fail table"},
    {"bench", cmd_bench, "GB/s and TFLOP/s tables over the tutorials' sizes; CSV, JSON, plot"},
    {"tune", cmd_tune, "fill the tuned-config cache for a set of shapes; export, import it"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: clkit COMMAND [OPTIONS]   (clkit COMMAND --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(f, "  %-6s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nOps for --op of check and bench (bench --help gives their sizes; layernorm\n"
               "also selects layernorm_backward):\n ");
    tool_print_ops(f, 1, 0);
    fprintf(f, "\n");
    fprintf(f, "\nThe device is the first GPU, else the first device; --device or $CLKIT_DEVICE\n"
               "picks another by index or name substring (nvidia, amd, pocl, cpu). Results go to\n"
               "stdout, diagnostics to stderr. CLKIT_LOG=none|error|warn|info|debug sets the library's\n"
               "logging; CLKIT_CACHE_DIR its cache directory of binaries and tuned configs\n"
               "(empty: none).\n");
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : NULL;
    /* The commands report bad options themselves, as one line and a hint. */
    opterr = 0;
    if (name && (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)) {
        usage(stdout);
        return TOOL_EXIT_OK;
    }
    if (name && strcmp(name, "--version") == 0) {
        printf("clkit %s\n", CLKIT_VERSION_STRING);
        return TOOL_EXIT_OK;
    }
    for (size_t i = 0; name && i < sizeof commands / sizeof *commands; i++)
        if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    if (!name) return tool_usage_error(NULL, "no command given: info, check, bench or tune");
    return tool_usage_error(NULL, "unknown command '%s': info, check, bench or tune", name);
}
