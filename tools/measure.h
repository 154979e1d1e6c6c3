/* Timing of one problem the way triton.testing.do_bench times a function, plus the cost of
   a first call with an empty and with a filled binary cache. */
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

/* With first calls: cold and warm first calls, each in a new context on `device` over one
   new temporary cache directory, then the timed repeats in the warm context. Without: the
   repeats in a context over the default binary cache, first-call times NaN. Before each
   repeat, outside the timed span, `flush_bytes` of scratch memory are written to evict the
   caches (0: none). */
clkit_status measure_problem(const char *device, op_problem *p, const measure_budget *b,
                             uint64_t flush_bytes, int with_first_calls, measurement *m);

#endif
