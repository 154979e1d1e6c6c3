/* Tuned configurations: compile-time parameters of one kernel choice, and the JSON cache that
   keeps the fastest one per device, op, dtypes, layout and shape. */
#ifndef CLKIT_TUNE_H
#define CLKIT_TUNE_H

#include "internal.h"

#define CLKIT_CONFIG_MAX 16

/* Named integer parameters. Upper-case names are kernel macros, passed as -D NAME=value;
   lower-case names are for the host alone: "provider" (0: clkit's kernels, 1: CLBlast). */
typedef struct clkit_config {
    int n;
    struct {
        char name[24];
        int value;
    } p[CLKIT_CONFIG_MAX];
} clkit_config;

int clkit_config_get(const clkit_config *c, const char *name, int fallback);
void clkit_config_set(clkit_config *c, const char *name, int value);
/* "-D BLOCK_M=128 -D BLOCK_N=64 ..." for the upper-case (kernel) parameters. */
void clkit_config_options(const clkit_config *c, char *buf, size_t n);
/* "BLOCK_M=128,BLOCK_N=64" -> config; 0 on success, -1 on a malformed string. */
int clkit_config_parse(const char *s, clkit_config *out);
/* "BLOCK_M=128,BLOCK_N=64": the form clkit_config_parse reads. */
void clkit_config_format(const clkit_config *c, char *buf, size_t n);

typedef struct clkit_tune_key {
    char op[32];      /* "matmul" */
    char dtype[32];   /* "f16.f16.f32": inputs then output */
    char layout[32];  /* "nt", "batched.nn", ... */
    int64_t shape[4]; /* op-defined, e.g. M, N, K, batch */
    int nshape;
} clkit_tune_key;

typedef enum { CLKIT_LOOKUP_NONE, CLKIT_LOOKUP_NEAREST, CLKIT_LOOKUP_EXACT } clkit_lookup;

/* The cached config for key on this device: the exact shape, else the nearest tuned shape of
   the same op, dtypes and layout (log-distance over the shape), else NONE. */
clkit_lookup clkit_cache_lookup(clkit_context *ctx, const clkit_tune_key *key, clkit_config *out);
/* How a tuned op judges configurations in the plan's first step. */
typedef struct clkit_chooser {
    clkit_tune_key key;
    const void *problem;
    /* Whether c runs this problem on this device (and the fast paths it may take now). */
    bool (*legal)(const clkit_context *ctx, const void *problem, const clkit_config *c);
    /* Work-groups c launches over the problem, 0 when it does not say; NULL: never asked. */
    uint64_t (*groups)(const void *problem, const clkit_config *c);
    clkit_config heuristic;
} clkit_chooser;

/* The rule every tuned op plans by: the tuned entry for the exact shape, else the nearest
   tuned shape's, where legal here; a nearest entry whose grid leaves compute units idle that
   the heuristic's would fill (a tile measured on a larger shape) gives way to the heuristic,
   as does no entry. Returns what the lookup found, legal or not. */
clkit_lookup clkit_choose_config(clkit_context *ctx, const clkit_chooser *ch, clkit_config *out);
/* Adds or replaces key's entry: read-merge-write under a lock, temp file + rename. */
clkit_status clkit_cache_store(clkit_context *ctx, const clkit_tune_key *key,
                               const clkit_config *cfg, double ms);

/* Runs one candidate: enqueues the op with config c (the caller's closure in user). */
typedef clkit_status (*clkit_tune_run)(clkit_context *ctx, const clkit_config *c, void *user);

/* Times each of n candidates (build and one warm-up run first; a candidate that fails to build
   or launch is skipped), stores the fastest under key and returns it in best. Stops early
   when topt->budget_s runs out, keeping the best so far. */
clkit_status clkit_autotune(clkit_context *ctx, const clkit_tune_key *key, const clkit_config *cands,
                            int n, clkit_tune_run run, void *user, const clkit_tune_options *topt,
                            clkit_config *best);

#endif
