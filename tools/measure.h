/* Timing of one problem the way triton.testing.do_bench times a function, and the cost of a
   first call with an empty and with a filled binary cache. */
#ifndef CLKIT_TOOL_MEASURE_H
#define CLKIT_TOOL_MEASURE_H

#include "ops.h"

typedef struct measure_budget {
    double warmup_ms;   /* kernel time to spend warming up */
    double rep_ms;      /* kernel time to spend on timed repeats */
    double wall_ms;     /* wall-clock cap on the timed repeats (cache flushes included) */
    int min_reps, max_reps;
    int fixed_reps;     /* nonzero: exactly this many repeats, no caps */
} measure_budget;

typedef struct measurement {
    double ms_median, ms_p20, ms_p80;  /* kernel time from profiling events */
    double cold_ms;   /* wall time of the first call in a new context, empty cache: compile */
    double warm_ms;   /* the same in a second new context on the filled cache: binary hit;
                         both NaN when not measured */
    double scratch_bytes;  /* the most device memory clkit held for intermediates during a
                              call (clkit_scratch_peak); NaN when not measured */
    int reps;         /* timed repeats; 0: not measured */
} measurement;

/* How the repeats of a row are timed. */
typedef enum measure_method {
    MEASURE_EVENTS,  /* one call per repeat, its kernels' profiling events, after a flush */
    MEASURE_WALL,    /* batches of back-to-back calls by wall clock, no flush: for calls whose
                        events do not cover all their work (CLBlast returns its last one) */
} measure_method;

/* A new empty directory under $TMPDIR (else /tmp) into dir, for a cache of its own. */
clkit_status measure_temp_dir(char *dir, size_t n);
/* Removes a directory measure_temp_dir made, with the cache files in it. */
void measure_remove_dir(const char *dir);

/* Wall times of p's first call in a new context on `device` over a new empty temporary
   cache directory (cold: builds), then in another over the directory it filled (warm). */
clkit_status measure_first_calls(const char *device, op_problem *p, measurement *m);

/* The scratch buffer written before each timed repeat to evict the caches. */
clkit_status measure_flush_buffer(clkit_context *ctx, uint64_t bytes, cl_mem *out);

/* Times p in ctx (a profiling context) as do_bench: a first call, untimed, builds or loads
   its programs and gives the scratch peak; then clkit_benchmark's warm-up and repeats, by
   events each after a write of `flush` (NULL: none) outside the timed span, or by wall clock. */
clkit_status measure_repeats(clkit_context *ctx, op_problem *p, const measure_budget *b,
                             measure_method how, cl_mem flush, measurement *m);

#endif
