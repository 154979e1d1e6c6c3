/* Check glue for the suites: a context on the chosen device, buffers that must exist, and
   assertions over the shared references of ref/ref.h. */
#ifndef CLKIT_TEST_UTIL_H
#define CLKIT_TEST_UTIL_H

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "clkit.h"
#include "ref/ref.h"

clkit_context *tu_ctx(void);
/* Whether op family `family` may take fast path `path` (a clkit_fast_path bit) on ctx now. */
int tu_fast_path(clkit_context *ctx, const char *family, unsigned path);
/* A buffer of n elements; vals (may be NULL: a fixed sentinel pattern) converted to dtype. */
cl_mem tu_buffer(clkit_context *ctx, clkit_dtype dtype, size_t n, const double *vals);
void tu_read(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n, double *out);
#define tu_quantize ref_quantize
#define tu_fill_random ref_fill_random
#define tu_rtol ref_rtol
#define tu_close ref_close
/* Asserts every element is close; the message names the first bad index. */
void tu_assert_close(const double *got, const double *want, size_t n, double atol, double rtol,
                     const char *what);
/* After a rejected call: clkit_finish, then buf's first n elements must equal `before`. */
void tu_assert_unchanged(clkit_context *ctx, cl_mem buf, clkit_dtype dtype, size_t n,
                         const double *before);
/* Bad-input fixture: a context and two 64-element f32 buffers; end asserts that `out` is
   unchanged (no rejected call wrote it) and releases everything. */
typedef struct tu_guard {
    clkit_context *ctx;
    cl_mem in, out;
    double before[64];
} tu_guard;
tu_guard tu_guard_begin(void);
void tu_guard_end(tu_guard *g);

/* setenv(name, value, 1) and unsetenv(name) that are safe while PoCL runs kernels. */
int tu_setenv(const char *name, const char *value);
int tu_unsetenv(const char *name);

/* Suites that ask PoCL for unoptimised builds (POCL_EXTRA_BUILD_FLAGS=-cl-opt-disable: the
   emulated AMD matrix kernels build in seconds instead of a minute) meet a PoCL 3.1 leak: the
   options string it joins the flags to, once a build. Under LeakSanitizer (CI's ASan run) their
   calls that build run between these two, with leak detection off on this thread for their
   own allocations only; clkit's host code in them is checked for leaks by the suites that run
   it without the flags. No-ops in other builds. */
void tu_leaks_off(void);
void tu_leaks_on(void);
/* A strided tensor over buf: strides in elements, offset in elements. */
clkit_tensor tu_view(cl_mem buf, clkit_dtype dtype, int ndim, const int64_t *shape,
                     const int64_t *strides, size_t offset_elems);
/* A strided (m, n) layout, or a length-n one (rs unused), inside a buffer of `total`
   elements: element (r, c) lies at offset + r rs + c cs. */
typedef struct tu_layout {
    int64_t rs, cs;
    size_t offset, total;
} tu_layout;

static inline tu_layout tu_dense(int64_t m, int64_t n)
{
    tu_layout l = {n, 1, 0, (size_t)(m * n)};
    return l;
}

static inline size_t tu_at(const tu_layout *l, int64_t r, int64_t c)
{
    return l->offset + (size_t)(r * l->rs + c * l->cs);
}

/* dir/name opened for writing, replacing what was there; the directories of a name with
   slashes ("nv/mma.h") are created as needed. */
FILE *tu_create_file(const char *dir, const char *name);
/* Writes text to dir/name, as tu_create_file opens it. */
void tu_write_text(const char *dir, const char *name, const char *text);
/* rm -rf path: whatever a case left there; a path that is not there is no error. */
void tu_remove_tree(const char *path);
/* The key type is internal (host/tune.h): only the suites that include that header first
   test the tuned-config cache, and the rest stay on the public API. */
#ifdef CLKIT_TUNE_H
/* The key of an f32 matmul of (m, n, k) in layout ("nn", "nt", ...), batch 1. */
clkit_tune_key tu_matmul_key(const char *layout, int64_t m, int64_t n, int64_t k);
#endif

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
