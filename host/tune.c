/* The autotuner: times candidate configurations on the real shape and keeps the fastest.

   Like Triton's do_bench: a warm-up run (which also builds the program), then batches of
   back-to-back runs sized to about 10 ms, timed from enqueue to clFinish, the median of three
   batches per candidate. Wall-clock time treats clkit's kernels and CLBlast (several kernels,
   one event) alike; batching amortises launch latency as a real workload does. */
#define _GNU_SOURCE
#include "tune.h"

#include <math.h>
#include <time.h>

double clkit_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds for `reps` runs, or a negative value when a run fails. */
static double time_batch(clkit_context *ctx, const clkit_config *c, clkit_tune_run run, void *user,
                         int reps)
{
    double t0 = clkit_now_s();
    for (int i = 0; i < reps; i++)
        if (run(ctx, c, user) != CLKIT_OK) return -1;
    if (clFinish(ctx->queue) != CL_SUCCESS) return -1;
    return clkit_now_s() - t0;
}

/* Median milliseconds per run of candidate c, or -1 when it cannot run here. */
static double time_candidate(clkit_context *ctx, const clkit_config *c, clkit_tune_run run, void *user)
{
    double warm = time_batch(ctx, c, run, user, 1);
    if (warm < 0) return -1;
    int reps = 1;
    double t = time_batch(ctx, c, run, user, reps);
    while (t >= 0 && t < 0.01 && reps < 1024) {
        reps *= 2;
        t = time_batch(ctx, c, run, user, reps);
    }
    double s[3] = {t, time_batch(ctx, c, run, user, reps), time_batch(ctx, c, run, user, reps)};
    if (s[0] < 0 || s[1] < 0 || s[2] < 0) return -1;
    double lo = fmin(s[0], fmin(s[1], s[2])), hi = fmax(s[0], fmax(s[1], s[2]));
    return (s[0] + s[1] + s[2] - lo - hi) * 1e3 / reps;
}

clkit_lookup clkit_choose_config(clkit_context *ctx, const clkit_chooser *ch, clkit_config *out)
{
    clkit_config tuned;
    clkit_lookup found = clkit_cache_lookup(ctx, &ch->key, &tuned);
    *out = ch->heuristic;
    if (found == CLKIT_LOOKUP_NONE || !ch->legal(ctx, ch->problem, &tuned)) return found;
    uint64_t groups = ch->groups ? ch->groups(ch->problem, &tuned) : 0;
    if (found == CLKIT_LOOKUP_NEAREST && groups &&
        clkit_grid_starves(&ctx->props, groups, ch->groups(ch->problem, &ch->heuristic)))
        return found;
    *out = tuned;
    return found;
}

clkit_status clkit_autotune(clkit_context *ctx, const clkit_tune_key *key, const clkit_config *cands,
                            int n, clkit_tune_run run, void *user, const clkit_tune_options *topt,
                            clkit_config *best)
{
    double start = clkit_now_s(), best_ms = INFINITY;
    int done = 0;
    if (topt && !(topt->budget_s >= 0))
        return clkit_fail(ctx, CLKIT_ERR_INVALID_VALUE, "budget_s %g: seconds, 0 or more (0: no limit)", topt->budget_s);
    for (int i = 0; i < n; i++) {
        if (topt && topt->budget_s > 0 && clkit_now_s() - start > topt->budget_s && isfinite(best_ms)) break;
        double ms = time_candidate(ctx, &cands[i], run, user);
        char text[512];
        clkit_config_format(&cands[i], text, sizeof text);
        if (ms < 0) clkit_log(CLKIT_LOG_INFO, "tune %s: %s cannot run here: %s", key->op, text, ctx->error);
        if (ms >= 0 && ms < best_ms) {
            best_ms = ms;
            *best = cands[i];
        }
        done++;
        if (topt && topt->progress) topt->progress(topt->user, done, n, text, ms, best_ms);
    }
    clkit_clear_error(ctx);
    if (!isfinite(best_ms))
        return clkit_fail(ctx, CLKIT_ERR_UNSUPPORTED, "no %s candidate runs on this device", key->op);
    return clkit_cache_store(ctx, key, best, best_ms);
}
