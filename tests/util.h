/* Test helpers: a context on the chosen device, buffers filled from doubles in any dtype,
   read-back into doubles, and tolerances per dtype. References are computed in double. */
#ifndef CLKIT_TEST_UTIL_H
#define CLKIT_TEST_UTIL_H

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "clkit.h"

clkit_context *tu_ctx(void);
/* A buffer of n elements; vals (may be NULL: a fixed sentinel pattern) converted to dtype. */
cl_mem tu_buffer(clkit_context *ctx, clkit_dtype dtype, size_t n, const double *vals);
/* A buffer of `bytes` bytes, for bad-input tests. */
cl_mem tu_raw_buffer(clkit_context *ctx, size_t bytes);
void tu_read(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n, double *out);
/* The value a double becomes once stored as dtype (what the device sees as input). */
double tu_quantize(clkit_dtype dtype, double v);
/* Uniform values in [lo, hi), already quantized to dtype; deterministic per seed. */
void tu_fill_random(double *v, size_t n, clkit_dtype dtype, double lo, double hi, uint64_t seed);
/* Relative tolerance that suits the dtype's rounding of one result. */
double tu_rtol(clkit_dtype dtype);
/* |got - want| <= atol + rtol * |want|; NaN matches NaN, inf matches the same inf. */
int tu_close(double got, double want, double atol, double rtol);
/* Asserts every element is close; the message names the first bad index. */
void tu_assert_close(const double *got, const double *want, size_t n, double atol, double rtol,
                     const char *what);
/* A strided tensor over buf, for views: strides in elements, offset in elements. */
clkit_tensor tu_view(cl_mem buf, clkit_dtype dtype, int ndim, const int64_t *shape,
                     const int64_t *strides, size_t offset_elems);
/* A test case with a timeout that suits first-time kernel builds on PoCL. */
TCase *tu_tcase(const char *name);
/* Runs the suite and returns the process exit status. */
int tu_run(Suite *s);

#define TU_CHECK(call)                                                                           \
    do {                                                                                         \
        clkit_status s_ = (call);                                                                \
        ck_assert_msg(s_ == CLKIT_OK, "%s -> %s: %s", #call, clkit_status_string(s_),           \
                      clkit_last_error(ctx));                                                    \
    } while (0)

/* Expects a specific failure status and a message. */
#define TU_EXPECT(status, call)                                                                  \
    do {                                                                                         \
        clkit_status s_ = (call);                                                                \
        ck_assert_msg(s_ == (status), "%s -> %s, expected %s", #call, clkit_status_string(s_),  \
                      clkit_status_string(status));                                              \
        ck_assert_msg(clkit_last_error(ctx)[0] != 0, "%s left no message", #call);              \
    } while (0)

#endif
