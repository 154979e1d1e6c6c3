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
    int reps;
} measurement;

/* Wall times of p's first call in a new context on `device` over a new empty temporary
   cache directory (cold: builds), then in another over the directory it filled (warm). */
clkit_status measure_first_calls(const char *device, op_problem *p, measurement *m);

/* The scratch buffer written before each timed repeat to evict the caches. */
clkit_status measure_flush_buffer(clkit_context *ctx, uint64_t bytes, cl_mem *out);

/* Times p in ctx (a profiling context) as do_bench: a first call, untimed, builds or loads
   its programs; then warm-up and repeats, each repeat after a write of `flush` (NULL: none)
   outside the timed span. */
clkit_status measure_repeats(clkit_context *ctx, op_problem *p, const measure_budget *b,
                             cl_mem flush, measurement *m);

#endif
